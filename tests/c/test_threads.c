/* Two threads pick while a third changes membership (update, add, remove, set_weight), for
 * every algorithm. Every pick must succeed and name a node that exists in one of the sets,
 * with that node's own tag (a torn read would pair an id with the wrong tag), and ids copied
 * out must stay readable after the node is gone. Leases are taken and ended meanwhile. Run
 * plain, under ASan+UBSan and valgrind. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* Defaults; `test_threads N` runs N picks per picker and N/10 update rounds (valgrind uses a
 * smaller N: it serialises threads and runs ~50x slower). */
static int picks_per_thread = 20000;
static int updates = 2000;

static uint64_t tag_of(const char *id) {
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
    for (; *id; id++) h = (h ^ (unsigned char)*id) * UINT64_C(0x100000001b3);
    return h;
}

static const char *const known[] = {"a", "b", "c", "d", "e", "extra"};

static int is_known(const char *id) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(id, known[i]) == 0) return 1;
    return 0;
}

/* One thread's view: the shared balancer and its own failure count (read after join). */
typedef struct {
    const lb_balancer *b;
    int keyed;
    int seed;
    int failures;
} worker;

static void *picker(void *arg) {
    worker *s = arg;
    char key[32], id[32], ids[256];
    lb_pick picks[4];
    for (int i = 0; i < picks_per_thread; i++) {
        int n = snprintf(key, sizeof key, "key-%d-%d", s->seed, i);
        uint64_t tag = 0;
        size_t size = 0;
        lb_result r = lb_balancer_pick(s->b, s->keyed ? key : NULL, s->keyed ? (size_t)n : 0, &tag,
                                       id, sizeof id, &size);
        if (r != LB_RESULT_OK || !is_known(id) || tag != tag_of(id) || size != strlen(id) + 1) {
            fprintf(stderr, "pick %d: %s id=%s\n", i, lb_result_name(r), r ? "" : id);
            s->failures++;
        }
        if (i % 8 == 0) { /* leases across membership changes; ended with either outcome */
            lb_lease *lease = NULL;
            r = lb_balancer_acquire(s->b, s->keyed ? key : NULL, s->keyed ? (size_t)n : 0, &lease,
                                    &tag, id, sizeof id, &size);
            if (r != LB_RESULT_OK || !is_known(id) || tag != tag_of(id)) {
                fprintf(stderr, "acquire %d: %s\n", i, lb_result_name(r));
                s->failures++;
            } else if (i % 3 == 0) {
                lb_lease_cancel(lease);
            } else if (lb_lease_finish(lease, (i % 5) ? LB_OUTCOME_SUCCESS : LB_OUTCOME_FAILURE,
                                       (uint64_t)i * 1000) != LB_RESULT_OK) {
                s->failures++;
            }
        }
        if (i % 16 == 0) { /* retry orders are consistent snapshots too */
            size_t count = 0;
            r = lb_balancer_attempts(s->b, s->keyed ? key : NULL, s->keyed ? (size_t)n : 0, picks,
                                     4, ids, sizeof ids, &size, &count);
            for (size_t j = 0; r == LB_RESULT_OK && j < count; j++)
                if (!is_known(picks[j].id) || picks[j].tag != tag_of(picks[j].id)) r = LB_RESULT_PANIC;
            if (r != LB_RESULT_OK || count < 2) {
                fprintf(stderr, "attempts %d: %s, %zu answers\n", i, lb_result_name(r), count);
                s->failures++;
            }
        }
    }
    return NULL;
}

static lb_node node(const char *id, uint32_t weight) {
    lb_node n = {id, strlen(id), weight, tag_of(id)};
    return n;
}

static void *updater(void *arg) {
    worker *s = arg;
    lb_node abc[] = {node("a", 1), node("b", 3), node("c", 1)};
    lb_node de[] = {node("d", 2), node("e", 1)};
    for (int i = 0; i < updates; i++) {
        lb_result r = (i % 2) ? lb_balancer_update(s->b, abc, 3) : lb_balancer_update(s->b, de, 2);
        if (r == LB_RESULT_OK) r = lb_balancer_add(s->b, "extra", 5, 1, tag_of("extra"));
        if (r == LB_RESULT_OK) r = lb_balancer_set_weight(s->b, "extra", 5, (uint32_t)(i % 3));
        if (r == LB_RESULT_OK) r = lb_balancer_remove(s->b, "extra", 5);
        if (r != LB_RESULT_OK) {
            fprintf(stderr, "update %d: %s\n", i, lb_result_name(r));
            s->failures++;
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) {
        picks_per_thread = atoi(argv[1]);
        updates = picks_per_thread / 10;
    }
    for (size_t a = 0; lb_algorithm_name(a) != NULL; a++) {
        const char *name = lb_algorithm_name(a);
        lb_options *options = NULL;
        CHECK_OK(lb_options_new(&options));
        CHECK_OK(lb_options_set_int(options, S("vnodes"), 16)); /* keep ring rebuilds cheap */
        CHECK_OK(lb_options_set_int(options, S("table_size"), 1031)); /* maglev: a prime */
        CHECK_OK(lb_options_set_int(options, S("min_ring_size"), 64));  /* ring_hash */
        CHECK_OK(lb_options_set_int(options, S("max_ring_size"), 1024));
        lb_node start[] = {node("a", 1), node("b", 1)};
        lb_balancer *b = NULL;
        CHECK_OK(lb_balancer_new(name, strlen(name), options, start, 2, &b));
        lb_options_free(options);
        /* Keyed algorithms say so on a pick without a key (the list grows with the core). */
        int keyed = lb_balancer_pick(b, NULL, 0, NULL, NULL, 0, NULL) == LB_RESULT_KEY_REQUIRED;
        worker workers[3] = {{b, keyed, 1, 0}, {b, keyed, 2, 0}, {b, keyed, 3, 0}};
        pthread_t threads[3];
        CHECK(pthread_create(&threads[0], NULL, picker, &workers[0]) == 0);
        CHECK(pthread_create(&threads[1], NULL, picker, &workers[1]) == 0);
        CHECK(pthread_create(&threads[2], NULL, updater, &workers[2]) == 0);
        for (int t = 0; t < 3; t++) CHECK(pthread_join(threads[t], NULL) == 0);
        /* Every lease ended: nothing is left in flight. */
        lb_node_stats stats[8];
        char ids[64];
        size_t count = 0, ids_size = 0;
        CHECK_OK(lb_balancer_stats(b, stats, 8, ids, sizeof ids, &count, &ids_size));
        for (size_t i = 0; i < count; i++) CHECK(stats[i].in_flight == 0);
        int failures = workers[0].failures + workers[1].failures + workers[2].failures;
        if (failures) fprintf(stderr, "%s: %d failures\n", name, failures);
        CHECK(failures == 0);
        lb_balancer_free(b);
    }
    printf("test_threads: %d picks x 2 threads, %d update rounds, per algorithm\n",
           picks_per_thread, updates);
    return check_report("test_threads");
}
