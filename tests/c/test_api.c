/* Every function of lb.h, every documented error path, and the "outputs written only on
 * success" rule, checked from C. Run plain, under ASan+UBSan, under valgrind, and linked
 * statically against liblb.a (scripts/test-c.sh). */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS and MAP_NORESERVE */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "check.h"

/* A sentinel that no output of liblb can legitimately produce in these tests. */
#define SENTINEL_TAG UINT64_C(0xDEADBEEFDEADBEEF)
#define SENTINEL_SIZE ((size_t)0xABCD)

static lb_node node(const char *id, uint32_t weight, uint64_t tag) {
    lb_node n;
    n.id = id;
    n.id_len = id ? strlen(id) : 0;
    n.weight = weight;
    n.tag = tag;
    return n;
}

static lb_balancer *make(const char *algorithm, const lb_options *options, const lb_node *nodes,
                         size_t n) {
    lb_balancer *b = NULL;
    lb_result r = lb_balancer_new(algorithm, strlen(algorithm), options, nodes, n, &b);
    if (r != LB_RESULT_OK) {
        fprintf(stderr, "lb_balancer_new(%s) failed: %s\n", algorithm, lb_result_str(r));
        exit(2);
    }
    return b;
}

/* Picks with an id buffer and checks the id/tag/size contract; returns the result. */
static lb_result pick(const lb_balancer *b, const char *key, char *id, size_t id_cap,
                      uint64_t *tag) {
    size_t size = SENTINEL_SIZE;
    lb_result r = lb_balancer_pick(b, key, key ? strlen(key) : 0, tag, id, id_cap, &size);
    if (r == LB_RESULT_OK) {
        CHECK(size == strlen(id) + 1);
    }
    return r;
}

static void test_version_and_names(void) {
    char expected[64];
    snprintf(expected, sizeof expected, "%d.%d.%d", LB_VERSION_MAJOR, LB_VERSION_MINOR,
             LB_VERSION_PATCH);
    CHECK_STR(lb_version(), expected);

    const char *names[] = {"random",         "weighted_random",   "round_robin",
                           "weighted_round_robin", "source_hash", "ring",
                           "least_request",  "least_connections", "peak_ewma",
                           "ketama",         "nginx_chash",       "ring_hash",
                           "maglev",         "rendezvous",        "jump",
                           "client_side_wrr", "prequal"};
    size_t i = 0;
    for (; lb_algorithm_name(i) != NULL; i++) {
        CHECK(i < sizeof names / sizeof names[0]);
        if (i < sizeof names / sizeof names[0]) CHECK_STR(lb_algorithm_name(i), names[i]);
        /* Every listed name builds a balancer that reports it back. */
        lb_balancer *b = make(lb_algorithm_name(i), NULL, NULL, 0);
        const char *name = NULL;
        CHECK_OK(lb_balancer_algorithm(b, &name));
        CHECK_STR(name, lb_algorithm_name(i));
        lb_balancer_free(b);
    }
    CHECK(i == sizeof names / sizeof names[0]);
    CHECK_RESULT(lb_balancer_algorithm(NULL, &names[0]), LB_RESULT_NULL_PARAMETER);

    /* Every code has a name and a description; unknown numbers too. */
    CHECK_STR(lb_result_name(LB_RESULT_OK), "LB_OK");
    CHECK_STR(lb_result_str(LB_RESULT_OK), "success");
    CHECK_STR(lb_result_name(LB_RESULT_KEY_REQUIRED), "LB_KEY_REQUIRED");
    CHECK_STR(lb_result_name(LB_RESULT_BUFFER_TOO_SMALL), "LB_BUFFER_TOO_SMALL");
    CHECK_STR(lb_result_name(LB_RESULT_PANIC), "LB_PANIC");
    CHECK(LB_RESULT_HASH_UNSUPPORTED == 106 && LB_RESULT_INVALID_OUTCOME == 107);
    CHECK_STR(lb_result_name(LB_RESULT_HASH_UNSUPPORTED), "LB_HASH_UNSUPPORTED");
    CHECK_STR(lb_result_name(LB_RESULT_INVALID_OUTCOME), "LB_INVALID_OUTCOME");
    CHECK(LB_RESULT_INVALID_LOAD_REPORT == 111);
    CHECK_STR(lb_result_name(LB_RESULT_INVALID_LOAD_REPORT), "LB_INVALID_LOAD_REPORT");
    CHECK(strstr(lb_result_str(LB_RESULT_HASH_UNSUPPORTED), "hash") != NULL);
    for (uint32_t code = 0; code <= 200; code++) {
        CHECK(lb_result_str(code) != NULL && strlen(lb_result_str(code)) > 0);
        CHECK(strncmp(lb_result_name(code), "LB_", 3) == 0);
    }
    CHECK_STR(lb_result_str(12345), "unknown lb_result code");
    CHECK_STR(lb_result_name(12345), "LB_UNKNOWN_RESULT");
}

static void test_options(void) {
    lb_options *o = NULL;
    CHECK_RESULT(lb_options_new(NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_options_new(&o));
    CHECK(o != NULL);
    CHECK_OK(lb_options_set_int(o, S("seed"), 42));
    CHECK_OK(lb_options_set_int(o, S("vnodes"), 3));
    CHECK_OK(lb_options_set_str(o, S("hash"), S("sha256")));
    CHECK_OK(lb_options_set_str(o, S("vnodes"), S("3")));
    CHECK_RESULT(lb_options_set_int(o, S("vnodes"), 0), LB_RESULT_INVALID_VNODES);
    CHECK_RESULT(lb_options_set_int(o, S("vnodes"), 65537), LB_RESULT_INVALID_VNODES);
    CHECK_RESULT(lb_options_set_str(o, S("vnodes"), S("three")), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("seed"), S("-1")), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("hash"), 1), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("hash"), S("md5")), LB_RESULT_UNKNOWN_HASH);
    CHECK_RESULT(lb_options_set_int(o, S("vnode"), 3), LB_RESULT_UNKNOWN_OPTION);
    CHECK_RESULT(lb_options_set_int(o, S("\xff\xfe"), 3), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_options_set_str(o, S("hash"), S("\xc3")), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_options_set_int(o, NULL, 4, 3), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_options_set_str(o, S("hash"), NULL, 6), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_options_set_int(NULL, S("seed"), 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_options_set_str(NULL, S("hash"), S("xxh3")), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_options_set_int(o, "seed", SIZE_MAX, 1), LB_RESULT_INVALID_LENGTH);

    /* The failed sets left vnodes at 3 and the seed at 42: seed 001's ring answer, and two
     * balancers from the same options give the same random sequence. */
    lb_node abc[] = {node("NodeA", 1, 1), node("NodeB", 1, 2), node("NodeC", 1, 3)};
    lb_balancer *ring = make("ring", o, abc, 3);
    char id[16];
    uint64_t tag = 0;
    CHECK_OK(pick(ring, "Key1", id, sizeof id, &tag));
    CHECK_STR(id, "NodeB");
    CHECK(tag == 2);
    lb_balancer *r1 = make("random", o, abc, 3);
    lb_balancer *r2 = make("random", o, abc, 3);
    lb_options_free(o); /* balancers copied the options */
    lb_options_free(NULL);
    for (int i = 0; i < 20; i++) {
        uint64_t t1 = 0, t2 = 1;
        CHECK_OK(lb_balancer_pick(r1, NULL, 0, &t1, NULL, 0, NULL));
        CHECK_OK(lb_balancer_pick(r2, NULL, 0, &t2, NULL, 0, NULL));
        CHECK(t1 == t2);
    }
    lb_balancer_free(ring);
    lb_balancer_free(r1);
    lb_balancer_free(r2);
}

/* Options are checked one by one when set and as a whole by lb_balancer_new, so the order they
 * are set in never matters (issue 19). */
static void test_options_in_any_order(void) {
    lb_node ab[] = {node("a", 1, 1), node("b", 1, 2)};
    lb_balancer *b = NULL;
    for (int reversed = 0; reversed < 2; reversed++) {
        lb_options *o = NULL;
        CHECK_OK(lb_options_new(&o));
        if (reversed) {
            CHECK_OK(lb_options_set_int(o, S("base_ejection_time_ms"), 500));
            CHECK_OK(lb_options_set_int(o, S("max_ejection_time_ms"), 1000));
            CHECK_OK(lb_options_set_int(o, S("min_ring_size"), 256));
            CHECK_OK(lb_options_set_int(o, S("max_ring_size"), 512));
        } else {
            CHECK_OK(lb_options_set_int(o, S("max_ejection_time_ms"), 1000));
            CHECK_OK(lb_options_set_int(o, S("base_ejection_time_ms"), 500));
            CHECK_OK(lb_options_set_int(o, S("max_ring_size"), 512));
            CHECK_OK(lb_options_set_int(o, S("min_ring_size"), 256));
        }
        lb_balancer_free(make("ring_hash", o, ab, 2));
        lb_options_free(o);
    }
    /* A base longer than the default max alone: the unset max follows it (Envoy). */
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("base_ejection_time_ms"), 400000));
    lb_balancer_free(make("round_robin", o, ab, 2));
    /* A zero base is refused when set; options that disagree are refused by lb_balancer_new. */
    CHECK_RESULT(lb_options_set_int(o, S("base_ejection_time_ms"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("max_ejection_time_ms"), 300000));
    CHECK_RESULT(lb_balancer_new(S("round_robin"), o, ab, 2, &b), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK(b == NULL);
    lb_options_free(o);
}

static void test_new_errors(void) {
    lb_balancer *b = (lb_balancer *)&b; /* any non-NULL value: must stay untouched */
    lb_balancer *const before = b;
    lb_node dup[] = {node("a", 1, 0), node("a", 1, 0)};
    lb_node empty[] = {node("", 1, 0)};
    lb_node nul[] = {{"a\0b", 3, 1, 0}};
    lb_node utf8[] = {{"\xc3\x28", 2, 1, 0}};
    lb_node null_id[] = {{NULL, 5, 1, 0}};
    CHECK_RESULT(lb_balancer_new(S("rings"), NULL, NULL, 0, &b), LB_RESULT_UNKNOWN_ALGORITHM);
    CHECK_RESULT(lb_balancer_new(S("\xff"), NULL, NULL, 0, &b), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_new(NULL, 4, NULL, NULL, 0, &b), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, NULL, 2, &b), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, dup, 2, &b), LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, empty, 1, &b), LB_RESULT_EMPTY_ID);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, nul, 1, &b), LB_RESULT_ID_CONTAINS_NUL);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, utf8, 1, &b), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, null_id, 1, &b), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, dup, SIZE_MAX / 2, &b), LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_new(S("ring"), NULL, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(b == before);
    lb_balancer_free(NULL);
}

/* Lists the nodes into caller buffers; returns the count (checks the two-call protocol). */
static size_t list(const lb_balancer *b, lb_node *nodes, size_t cap, char *ids, size_t ids_cap) {
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    lb_result r = lb_balancer_nodes(b, NULL, 0, NULL, 0, &count, &size);
    CHECK(r == (count == 0 ? LB_RESULT_OK : LB_RESULT_BUFFER_TOO_SMALL));
    CHECK(count <= cap && size <= ids_cap);
    size_t count2 = 0, size2 = 0;
    CHECK_OK(lb_balancer_nodes(b, nodes, cap, ids, ids_cap, &count2, &size2));
    CHECK(count2 == count && size2 == size);
    return count2;
}

static void test_membership(void) {
    lb_node init[] = {node("a", 1, 10), node("b", 1, 11), node("c", 1, 12)};
    lb_balancer *b = make("round_robin", NULL, init, 3);
    lb_node nodes[8];
    char ids[64];

    CHECK_OK(lb_balancer_add(b, S("d"), 2, 13));
    CHECK(list(b, nodes, 8, ids, sizeof ids) == 4);
    CHECK_STR(nodes[3].id, "d");
    CHECK(nodes[3].id_len == 1 && nodes[3].weight == 2 && nodes[3].tag == 13);
    CHECK(nodes[3].id >= ids && nodes[3].id < ids + sizeof ids); /* caller memory */

    /* Every failing change leaves the listing as it was. */
    CHECK_RESULT(lb_balancer_add(b, S("d"), 1, 0), LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_add(b, NULL, 0, 1, 0), LB_RESULT_EMPTY_ID);
    CHECK_RESULT(lb_balancer_add(b, NULL, 3, 1, 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_add(b, S("x\0y"), 1, 0), LB_RESULT_ID_CONTAINS_NUL);
    CHECK_RESULT(lb_balancer_add(b, S("\xed\xa0\x80"), 1, 0), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_add(NULL, S("e"), 1, 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_add(b, "e", SIZE_MAX, 1, 0), LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_remove(b, S("zz")), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_remove(b, S("\x80")), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_remove(b, NULL, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_remove(NULL, S("a")), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_weight(b, S("zz"), 3), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_set_weight(b, S("\xff"), 3), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_weight(b, NULL, 1, 3), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_weight(NULL, S("a"), 3), LB_RESULT_NULL_PARAMETER);
    lb_node bad_last[] = {node("x", 1, 0), node("y", 1, 0), node("x", 1, 0)};
    lb_node bad_utf8[] = {node("x", 1, 0), {"\xff", 1, 1, 0}};
    CHECK_RESULT(lb_balancer_update(b, bad_last, 3), LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_update(b, bad_utf8, 2), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_update(b, NULL, 2), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_update(NULL, bad_last, 1), LB_RESULT_NULL_PARAMETER);
    size_t n = list(b, nodes, 8, ids, sizeof ids);
    CHECK(n == 4);
    const char *want[] = {"a", "b", "c", "d"};
    for (size_t i = 0; i < n && i < 4; i++) {
        CHECK_STR(nodes[i].id, want[i]);
        CHECK(nodes[i].tag == 10 + i);
    }

    /* Successful changes. */
    CHECK_OK(lb_balancer_set_weight(b, S("a"), 0));
    CHECK_OK(lb_balancer_remove(b, S("b")));
    bool has = true;
    CHECK_OK(lb_balancer_contains(b, S("b"), &has));
    CHECK(!has);
    CHECK_OK(lb_balancer_contains(b, S("c"), &has));
    CHECK(has);
    CHECK_RESULT(lb_balancer_contains(b, S("c"), NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_contains(NULL, S("c"), &has), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_contains(b, S("\xff"), &has), LB_RESULT_INVALID_UTF8);
    size_t len = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_len(b, &len));
    CHECK(len == 3);
    CHECK_RESULT(lb_balancer_len(b, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_len(NULL, &len), LB_RESULT_NULL_PARAMETER);
    n = list(b, nodes, 8, ids, sizeof ids);
    CHECK(n == 3 && nodes[0].weight == 0 && strcmp(nodes[1].id, "c") == 0);

    /* Drained node a is never picked while others have weight. */
    for (int i = 0; i < 10; i++) {
        char id[8];
        uint64_t tag = 0;
        CHECK_OK(pick(b, NULL, id, sizeof id, &tag));
        CHECK(strcmp(id, "a") != 0);
    }

    /* The listing feeds update directly (ids point into our buffer; liblb copies them). */
    CHECK_OK(lb_balancer_update(b, nodes + 1, 2));
    n = list(b, nodes, 8, ids, sizeof ids);
    CHECK(n == 2 && strcmp(nodes[0].id, "c") == 0 && strcmp(nodes[1].id, "d") == 0);

    /* Short listing buffers report both sizes and write nothing else. */
    size_t count = 0, size = 0;
    lb_node one[1] = {node("keep", 9, 9)};
    CHECK_RESULT(lb_balancer_nodes(b, one, 1, ids, sizeof ids, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(count == 2 && size == 4 && strcmp(one[0].id, "keep") == 0);
    CHECK_RESULT(lb_balancer_nodes(b, nodes, 8, ids, 3, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK_RESULT(lb_balancer_nodes(b, nodes, 8, ids, sizeof ids, NULL, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_nodes(b, nodes, 8, ids, sizeof ids, &count, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_nodes(b, NULL, 8, ids, sizeof ids, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_nodes(NULL, nodes, 8, ids, sizeof ids, &count, &size),
                 LB_RESULT_NULL_PARAMETER);

    /* Emptying: picks fail with NO_NODES, outputs untouched. */
    CHECK_OK(lb_balancer_update(b, NULL, 0));
    CHECK(list(b, nodes, 8, ids, sizeof ids) == 0);
    uint64_t tag = SENTINEL_TAG;
    CHECK_RESULT(lb_balancer_pick(b, NULL, 0, &tag, NULL, 0, NULL), LB_RESULT_NO_NODES);
    CHECK(tag == SENTINEL_TAG);
    lb_balancer_free(b);
}

static void test_picks(void) {
    lb_node init[] = {node("alpha", 1, 10), node("beta", 1, 11), node("gamma", 1, 12)};
    lb_balancer *rr = make("round_robin", NULL, init, 3);
    char id[16];
    uint64_t tag = 0;
    const char *order[] = {"alpha", "beta", "gamma", "alpha"};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(pick(rr, NULL, id, sizeof id, &tag));
        CHECK_STR(id, order[i]);
        CHECK(tag == 10 + (uint64_t)(i % 3));
    }
    /* Tag only, and no output at all. */
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
    CHECK(tag == 11);
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, NULL, NULL, 0, NULL));
    /* Short buffer: the size needed (id + NUL), tag and buffer untouched. */
    char small[3] = {'x', 'x', 'x'};
    size_t size = 0;
    tag = SENTINEL_TAG;
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, small, sizeof small, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(tag == SENTINEL_TAG && small[0] == 'x');
    CHECK(size == 6); /* "alpha": the pick still counted, so the next one is "beta" */
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 5);
    /* Exactly big enough. */
    char exact[6];
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, exact, sizeof exact, &size));
    CHECK_STR(exact, "gamma");
    CHECK(size == 6 && tag == 12);
    /* NULL pointers with lengths, NULL handle, absurd lengths. */
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 16, &size), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 4, &tag, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick(NULL, NULL, 0, &tag, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick(rr, "k", SIZE_MAX, &tag, NULL, 0, NULL),
                 LB_RESULT_INVALID_LENGTH);
    CHECK(tag == 12);

    /* Keyed: a key is required; NULL/0 is "no key", a non-NULL empty key is a key. */
    lb_node abc[] = {node("NodeA", 1, 1), node("NodeB", 1, 2), node("NodeC", 1, 3)};
    lb_balancer *sh = make("source_hash", NULL, abc, 3);
    tag = SENTINEL_TAG;
    CHECK_RESULT(lb_balancer_pick(sh, NULL, 0, &tag, id, sizeof id, &size), LB_RESULT_KEY_REQUIRED);
    CHECK(tag == SENTINEL_TAG);
    CHECK_OK(lb_balancer_pick(sh, "", 0, &tag, id, sizeof id, &size));
    CHECK(tag >= 1 && tag <= 3);
    /* The same key always gives the same node; binary keys are fine. */
    const unsigned char bin[] = {0, 1, 2, 0xff, 0};
    uint64_t t1 = 0, t2 = 0;
    CHECK_OK(lb_balancer_pick(sh, bin, sizeof bin, &t1, NULL, 0, NULL));
    CHECK_OK(lb_balancer_pick(sh, bin, sizeof bin, &t2, NULL, 0, NULL));
    CHECK(t1 == t2);

    /* pick_many: one answer per key, the same as single picks, ids packed in our buffer. */
    lb_key keys[3] = {{"Key1", 4}, {"user:42", 7}, {NULL, 0}};
    lb_pick picks[3];
    char buf[64];
    size = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_pick_many(sh, keys, 3, picks, buf, sizeof buf, &size));
    size_t total = 0;
    for (int i = 0; i < 3; i++) {
        CHECK_OK(lb_balancer_pick(sh, keys[i].key ? keys[i].key : "", keys[i].key_len, &tag, NULL,
                                  0, NULL));
        CHECK(picks[i].tag == tag);
        CHECK(picks[i].id >= buf && picks[i].id < buf + sizeof buf);
        CHECK(strlen(picks[i].id) == picks[i].id_len);
        total += picks[i].id_len + 1;
    }
    CHECK(size == total);
    lb_pick tags_only[3];
    CHECK_OK(lb_balancer_pick_many(sh, keys, 3, tags_only, NULL, 0, NULL));
    for (int i = 0; i < 3; i++) CHECK(tags_only[i].tag == picks[i].tag && !tags_only[i].id);
    lb_pick untouched[3] = {{SENTINEL_TAG, NULL, 0}, {SENTINEL_TAG, NULL, 0}, {SENTINEL_TAG, NULL, 0}};
    CHECK_RESULT(lb_balancer_pick_many(sh, keys, 3, untouched, buf, 4, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == total && untouched[0].tag == SENTINEL_TAG);
    lb_key null_key[1] = {{NULL, 3}};
    CHECK_RESULT(lb_balancer_pick_many(sh, null_key, 1, untouched, NULL, 0, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_many(sh, keys, 3, NULL, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_many(sh, NULL, 3, picks, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_many(NULL, keys, 3, picks, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_balancer_pick_many(sh, NULL, 0, NULL, NULL, 0, NULL));

    /* pick_n: unkeyed batches; keyed algorithms refuse. */
    lb_pick five[5];
    CHECK_OK(lb_balancer_pick_n(rr, 5, five, buf, sizeof buf, &size));
    for (int i = 1; i < 5; i++) CHECK(five[i].tag != five[i - 1].tag); /* round robin moves on */
    CHECK_RESULT(lb_balancer_pick_n(sh, 2, five, NULL, 0, NULL), LB_RESULT_KEY_REQUIRED);
    CHECK_RESULT(lb_balancer_pick_n(rr, 2, NULL, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_n(rr, 2, five, buf, 2, &size), LB_RESULT_BUFFER_TOO_SMALL);
    /* More than LB_MAX_BATCH answers: refused first, nothing picked or written. */
    CHECK_RESULT(lb_balancer_pick_n(rr, SIZE_MAX, five, NULL, 0, NULL), LB_RESULT_BATCH_TOO_LARGE);
    CHECK_RESULT(lb_balancer_pick_n(rr, (size_t)LB_MAX_BATCH + 1, five, NULL, 0, NULL),
                 LB_RESULT_BATCH_TOO_LARGE);
    CHECK_RESULT(lb_balancer_pick_many(rr, NULL, (size_t)LB_MAX_BATCH + 1, NULL, NULL, 0, NULL),
                 LB_RESULT_BATCH_TOO_LARGE);

    /* attempts: distinct nodes, the first one is the pick, fewer than limit when few nodes. */
    lb_pick tries[5];
    size_t count = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_attempts(sh, S("Key1"), tries, 5, buf, sizeof buf, &size, &count));
    CHECK(count == 3);
    CHECK_OK(lb_balancer_pick(sh, S("Key1"), &tag, NULL, 0, NULL));
    CHECK(tries[0].tag == tag);
    CHECK(tries[0].tag != tries[1].tag && tries[1].tag != tries[2].tag &&
          tries[0].tag != tries[2].tag);
    CHECK_OK(lb_balancer_attempts(sh, S("Key1"), tries, 2, NULL, 0, NULL, &count));
    CHECK(count == 2);
    CHECK_RESULT(lb_balancer_attempts(sh, NULL, 0, tries, 2, NULL, 0, NULL, &count),
                 LB_RESULT_KEY_REQUIRED);
    CHECK_RESULT(lb_balancer_attempts(sh, S("Key1"), tries, 2, NULL, 0, NULL, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_attempts(sh, S("Key1"), NULL, 2, NULL, 0, NULL, &count),
                 LB_RESULT_NULL_PARAMETER);
    count = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_attempts(sh, S("Key1"), tries, 3, buf, 5, &size, &count),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 18 && count == SENTINEL_SIZE);
    CHECK_OK(lb_balancer_attempts(rr, NULL, 0, tries, 0, NULL, 0, NULL, &count));
    CHECK(count == 0);

    lb_balancer *empty = make("random", NULL, NULL, 0);
    CHECK_RESULT(lb_balancer_pick(empty, NULL, 0, &tag, NULL, 0, NULL), LB_RESULT_NO_NODES);
    CHECK_RESULT(lb_balancer_pick_n(empty, 1, five, NULL, 0, NULL), LB_RESULT_NO_NODES);
    CHECK_RESULT(lb_balancer_attempts(empty, NULL, 0, tries, 2, NULL, 0, NULL, &count),
                 LB_RESULT_NO_NODES);
    lb_balancer_free(empty);
    lb_balancer_free(sh);
    lb_balancer_free(rr);
}

/* The id size bound is the longest current id + 1: it follows ids in and out, and a rejected
 * id leaves it alone. */
static void test_id_size_bound(void) {
    lb_node init[] = {node("short", 1, 0)};
    lb_balancer *b = make("round_robin", NULL, init, 1);
    size_t bound = 0;
    CHECK_OK(lb_balancer_id_size_bound(b, &bound));
    CHECK(bound == 6);
    CHECK_OK(lb_balancer_add(b, S("a-much-longer-id"), 1, 0));
    CHECK_OK(lb_balancer_id_size_bound(b, &bound));
    CHECK(bound == 17);
    CHECK_OK(lb_balancer_remove(b, S("a-much-longer-id")));
    CHECK_OK(lb_balancer_id_size_bound(b, &bound));
    CHECK(bound == 6);
    CHECK_RESULT(lb_balancer_add(b, "an-even-longer-id\0", 18, 1, 0), LB_RESULT_ID_CONTAINS_NUL);
    CHECK_OK(lb_balancer_id_size_bound(b, &bound));
    CHECK(bound == 6);
    CHECK_RESULT(lb_balancer_add(b, S("short"), 1, 0), LB_RESULT_DUPLICATE_NODE);
    CHECK_OK(lb_balancer_id_size_bound(b, &bound));
    CHECK(bound == 6);
    CHECK_RESULT(lb_balancer_id_size_bound(NULL, &bound), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_id_size_bound(b, NULL), LB_RESULT_NULL_PARAMETER);
    lb_balancer_free(b);
}

/* An id copied out stays valid after the node is removed: it lives in our buffer. */
static void test_no_dangling(void) {
    lb_node one[] = {node("only", 1, 7)};
    lb_balancer *b = make("random", NULL, one, 1);
    char id[8];
    uint64_t tag = 0;
    CHECK_OK(pick(b, NULL, id, sizeof id, &tag));
    CHECK_OK(lb_balancer_remove(b, S("only")));
    lb_balancer_free(b);
    CHECK_STR(id, "only");
    CHECK(tag == 7);
}

/* Batches fail exactly like a single pick would, whatever their size: a count of 0 included,
 * and a huge count fails before anything is reserved (it used to abort the process trying). */
static void test_batches_fail_like_a_pick(void) {
    lb_balancer *empty = make("random", NULL, NULL, 0);
    lb_node abc[] = {node("NodeA", 1, 1), node("NodeB", 1, 2), node("NodeC", 1, 3)};
    lb_balancer *ring = make("ring", NULL, abc, 3);
    size_t size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_pick_n(empty, 0, NULL, NULL, 0, NULL), LB_RESULT_NO_NODES);
    CHECK_RESULT(lb_balancer_pick_many(empty, NULL, 0, NULL, NULL, 0, NULL), LB_RESULT_NO_NODES);
    CHECK_RESULT(lb_balancer_pick_n(ring, 0, NULL, NULL, 0, NULL), LB_RESULT_KEY_REQUIRED);
    CHECK_RESULT(lb_balancer_pick_n(ring, 0, NULL, NULL, 0, &size), LB_RESULT_KEY_REQUIRED);
    CHECK(size == SENTINEL_SIZE);
    /* A keyed batch of no keys lacks no key: it succeeds and writes nothing. */
    CHECK_OK(lb_balancer_pick_many(ring, NULL, 0, NULL, NULL, 0, NULL));

    /* The largest count (LB_MAX_BATCH) with a picks_out array that really has room for it:
     * address space reserved with MAP_NORESERVE, never touched (the pick fails first). */
    size_t count = LB_MAX_BATCH;
    lb_pick *picks = mmap(NULL, count * sizeof(lb_pick), PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(picks != MAP_FAILED);
    if (picks != MAP_FAILED) {
        char ids[8];
        CHECK_RESULT(lb_balancer_pick_n(empty, count, picks, NULL, 0, NULL), LB_RESULT_NO_NODES);
        CHECK_RESULT(lb_balancer_pick_n(empty, count, picks, ids, sizeof ids, &size),
                     LB_RESULT_NO_NODES);
        CHECK_RESULT(lb_balancer_pick_n(ring, count, picks, NULL, 0, NULL),
                     LB_RESULT_KEY_REQUIRED);
        CHECK(size == SENTINEL_SIZE);
        munmap(picks, count * sizeof(lb_pick));
    }
    /* Beyond LB_MAX_BATCH, and past PTRDIFF_MAX bytes, the count is refused before anything
     * else (no array can be that big, and no batch is answered that large). */
    lb_pick one[1];
    CHECK_RESULT(lb_balancer_pick_n(empty, SIZE_MAX / sizeof(lb_pick), one, NULL, 0, NULL),
                 LB_RESULT_BATCH_TOO_LARGE);
    CHECK_RESULT(lb_balancer_pick_n(ring, (size_t)LB_MAX_BATCH + 1, one, NULL, 0, NULL),
                 LB_RESULT_BATCH_TOO_LARGE);
    lb_balancer_free(ring);
    lb_balancer_free(empty);
}

/* An id buffer (or a buffer length) without the size output that reports what was written is a
 * NULL parameter, checked before picking: the buffer is untouched and round robin stays put. */
static void test_id_buffer_needs_its_size_output(void) {
    lb_node abc[] = {node("a", 1, 10), node("b", 1, 11), node("c", 1, 12)};
    lb_balancer *rr = make("round_robin", NULL, abc, 3);
    char buf[8] = {'x', 'x', 'x', 'x', 'x', 'x', 'x', 'x'};
    uint64_t tag = SENTINEL_TAG;
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, buf, sizeof buf, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, buf, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 5, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(tag == SENTINEL_TAG && buf[0] == 'x');
    lb_pick picks[3] = {{SENTINEL_TAG, NULL, 0}, {SENTINEL_TAG, NULL, 0}, {SENTINEL_TAG, NULL, 0}};
    lb_key keys[1] = {{"k", 1}};
    size_t count = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_pick_n(rr, 1, picks, NULL, 99, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_n(rr, 1, picks, buf, sizeof buf, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_pick_many(rr, keys, 1, picks, buf, sizeof buf, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_attempts(rr, NULL, 0, picks, 3, buf, sizeof buf, NULL, &count),
                 LB_RESULT_NULL_PARAMETER);
    CHECK(picks[0].tag == SENTINEL_TAG && count == SENTINEL_SIZE && buf[0] == 'x');
    /* Nothing was picked: round robin still starts at "a". */
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
    CHECK(tag == 10);
    lb_balancer_free(rr);
}

/* LB_RESULT_BUFFER_TOO_SMALL from a pick loses the answers, not the picks: round robin has
 * moved on exactly as if the call had succeeded (documented in lb.h). */
static void test_buffer_too_small_still_picks(void) {
    lb_node abc[] = {node("a", 1, 10), node("b", 1, 11), node("c", 1, 12)};
    lb_balancer *rr = make("round_robin", NULL, abc, 3);
    lb_pick picks[2] = {{SENTINEL_TAG, NULL, 0}, {SENTINEL_TAG, NULL, 0}};
    char small[1];
    size_t size = 0, count = SENTINEL_SIZE;
    uint64_t tag = 0;
    CHECK_RESULT(lb_balancer_attempts(rr, NULL, 0, picks, 2, small, 1, &size, &count),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 4 && count == SENTINEL_SIZE && picks[0].tag == SENTINEL_TAG);
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
    CHECK(tag == 11); /* the attempts' first pick ("a") counted */
    CHECK_RESULT(lb_balancer_pick_n(rr, 2, picks, small, 1, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 4 && picks[0].tag == SENTINEL_TAG);
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
    CHECK(tag == 11); /* "c" and "a" were picked */
    lb_key keys[2] = {{"x", 1}, {"y", 1}};
    CHECK_RESULT(lb_balancer_pick_many(rr, keys, 2, picks, small, 1, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
    CHECK(tag == 11); /* "c" and "a" again */
    lb_balancer_free(rr);
}

/* The options added with the feedback algorithms, set by name like the others. */
static void test_new_options(void) {
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("choice_count"), 3));
    CHECK_OK(lb_options_set_str(o, S("choice_count"), S("16")));
    CHECK_RESULT(lb_options_set_int(o, S("choice_count"), 1), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("choice_count"), 17), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("decay_ms"), 500));
    CHECK_RESULT(lb_options_set_int(o, S("decay_ms"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("initial_latency_ms"), 0));
    CHECK_RESULT(lb_options_set_str(o, S("initial_latency_ms"), S("x")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("table_size"), 7));
    CHECK_RESULT(lb_options_set_int(o, S("table_size"), 8), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("min_ring_size"), 64));
    CHECK_OK(lb_options_set_int(o, S("max_ring_size"), 128));
    CHECK_RESULT(lb_options_set_int(o, S("min_ring_size"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("max_ring_points"), 65536));
    CHECK_RESULT(lb_options_set_int(o, S("max_ring_points"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    /* min above max is a rule between options: lb_balancer_new refuses it, whatever the order. */
    CHECK_OK(lb_options_set_int(o, S("min_ring_size"), 256));
    lb_balancer *none = NULL;
    CHECK_RESULT(lb_balancer_new(S("maglev"), o, NULL, 0, &none), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK(none == NULL);
    CHECK_OK(lb_options_set_int(o, S("min_ring_size"), 64));
    /* The failed sets changed nothing: maglev uses the 7-entry table, so every hash lands on
     * one of the 3 nodes and attempts list all 3. */
    lb_node abc[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3)};
    lb_balancer *m = make("maglev", o, abc, 3);
    lb_balancer *rh = make("ring_hash", o, abc, 3);
    lb_balancer *lr = make("least_request", o, abc, 3);
    lb_options_free(o);
    for (uint64_t h = 0; h < 50; h++) {
        uint64_t tag = 0;
        CHECK_OK(lb_balancer_pick_hash(m, h * UINT64_C(0x9E3779B97F4A7C15), &tag, NULL, 0, NULL));
        CHECK(tag >= 1 && tag <= 3);
        CHECK_OK(lb_balancer_pick_hash(rh, h, &tag, NULL, 0, NULL));
        CHECK(tag >= 1 && tag <= 3);
        CHECK_OK(lb_balancer_pick(lr, NULL, 0, &tag, NULL, 0, NULL));
        CHECK(tag >= 1 && tag <= 3);
    }
    lb_balancer_free(m);
    lb_balancer_free(rh);
    lb_balancer_free(lr);
}

/* Reads all stats into a caller array of 8 (test balancers are small). */
static size_t get_stats(const lb_balancer *b, lb_node_stats *out, char *ids, size_t ids_cap) {
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_stats(b, out, 8, ids, ids_cap, &count, &size));
    return count;
}

static void test_leases_report_stats(void) {
    lb_node abc[] = {node("a", 1, 10), node("b", 2, 11), node("c", 1, 12)};
    lb_balancer *b = make("round_robin", NULL, abc, 3);
    lb_node_stats st[8];
    char ids[64];
    CHECK(get_stats(b, st, ids, sizeof ids) == 3);
    CHECK_STR(st[1].id, "b");
    CHECK(st[1].id_len == 1 && st[1].weight == 2 && st[1].tag == 11);
    CHECK(st[1].in_flight == 0 && st[1].requests == 0 && st[1].failures == 0);
    CHECK(st[1].latency_ns == LB_LATENCY_NONE);

    /* acquire: a lease per request, id and tag as from a pick. */
    lb_lease *l[3] = {NULL, NULL, NULL};
    char id[8];
    size_t size = 0;
    uint64_t tag = 0;
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &l[0], &tag, id, sizeof id, &size));
    CHECK_STR(id, "a");
    CHECK(tag == 10 && size == 2 && l[0] != NULL);
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &l[1], NULL, NULL, 0, NULL));
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &l[2], &tag, NULL, 0, NULL));
    CHECK(tag == 12);
    CHECK(get_stats(b, st, ids, sizeof ids) == 3);
    CHECK(st[0].in_flight == 1 && st[1].in_flight == 1 && st[2].in_flight == 1);

    /* The lease names its node. */
    tag = 0;
    CHECK_OK(lb_lease_node(l[1], &tag, id, sizeof id, &size));
    CHECK_STR(id, "b");
    CHECK(tag == 11 && size == 2);
    size = SENTINEL_SIZE;
    tag = SENTINEL_TAG;
    CHECK_RESULT(lb_lease_node(l[1], &tag, id, 1, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 2 && tag == SENTINEL_TAG);
    CHECK_RESULT(lb_lease_node(l[1], &tag, id, sizeof id, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_lease_node(NULL, &tag, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    uint64_t elapsed = SENTINEL_TAG;
    CHECK_OK(lb_lease_elapsed(l[0], &elapsed));
    CHECK(elapsed != SENTINEL_TAG);
    CHECK_RESULT(lb_lease_elapsed(l[0], NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_lease_elapsed(NULL, &elapsed), LB_RESULT_NULL_PARAMETER);

    /* finish: success, failure; a bad outcome leaves the lease with the caller. */
    CHECK_RESULT(lb_lease_finish(l[0], 4, 1000), LB_RESULT_INVALID_OUTCOME);
    CHECK_RESULT(lb_lease_finish(NULL, LB_OUTCOME_SUCCESS, 1000), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_lease_finish(l[0], LB_OUTCOME_SUCCESS, 4000000));
    CHECK_OK(lb_lease_finish(l[1], LB_OUTCOME_FAILURE, 8000000));
    lb_lease_cancel(l[2]); /* cancelled: in-flight released, nothing counted */
    lb_lease_cancel(NULL);
    CHECK(get_stats(b, st, ids, sizeof ids) == 3);
    CHECK(st[0].in_flight == 0 && st[0].requests == 1 && st[0].failures == 0);
    CHECK(st[0].latency_ns == 4000000);
    CHECK(st[1].in_flight == 0 && st[1].requests == 1 && st[1].failures == 1);
    /* A failure counts at least the failure penalty (failure_penalty_ms, 5 s by default). */
    CHECK(st[1].latency_ns == UINT64_C(5000000000));
    CHECK(st[2].in_flight == 0 && st[2].requests == 0 && st[2].latency_ns == LB_LATENCY_NONE);

    /* report: counts without in-flight; errors record nothing. */
    CHECK_OK(lb_balancer_report(b, S("c"), LB_OUTCOME_SUCCESS, 2000000));
    CHECK_RESULT(lb_balancer_report(b, S("x"), LB_OUTCOME_SUCCESS, 1), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_report(b, S("c"), 9, 1), LB_RESULT_INVALID_OUTCOME);
    CHECK_RESULT(lb_balancer_report(b, "\xff", 1, LB_OUTCOME_SUCCESS, 1),
                 LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_report(b, NULL, 1, LB_OUTCOME_SUCCESS, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_report(NULL, S("c"), LB_OUTCOME_SUCCESS, 1),
                 LB_RESULT_NULL_PARAMETER);
    CHECK(get_stats(b, st, ids, sizeof ids) == 3);
    CHECK(st[2].requests == 1 && st[2].failures == 0 && st[2].in_flight == 0);

    /* stats buffer protocol, as lb_balancer_nodes. */
    size_t count = SENTINEL_SIZE;
    size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_stats(b, NULL, 0, NULL, 0, &count, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(count == 3 && size == 6);
    st[0].tag = SENTINEL_TAG;
    CHECK_RESULT(lb_balancer_stats(b, st, 3, ids, 5, &count, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(st[0].tag == SENTINEL_TAG);
    CHECK_RESULT(lb_balancer_stats(b, st, 2, ids, 6, &count, &size), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK_RESULT(lb_balancer_stats(b, st, 3, ids, 6, NULL, &size), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_stats(b, st, 3, ids, 6, &count, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_stats(b, NULL, 3, ids, 6, &count, &size), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_stats(NULL, st, 3, ids, 6, &count, &size), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_stats(b, st, SIZE_MAX, ids, 6, &count, &size),
                 LB_RESULT_INVALID_LENGTH);
    CHECK_OK(lb_balancer_stats(b, st, 3, ids, 6, &count, &size));
    CHECK(count == 3 && size == 6);

    /* acquire errors: nothing written, nothing counted. */
    lb_lease *lease = (lb_lease *)&lease;
    lb_lease *const untouched = lease;
    CHECK_RESULT(lb_balancer_acquire(b, NULL, 0, NULL, NULL, NULL, 0, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_acquire(NULL, NULL, 0, &lease, NULL, NULL, 0, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_acquire(b, NULL, 0, &lease, NULL, id, sizeof id, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_acquire(b, "k", SIZE_MAX, &lease, NULL, NULL, 0, NULL),
                 LB_RESULT_INVALID_LENGTH);
    size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_acquire(b, NULL, 0, &lease, NULL, id, 1, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(size == 2 && lease == untouched);
    CHECK(get_stats(b, st, ids, sizeof ids) == 3);
    CHECK(st[0].in_flight == 0 && st[1].in_flight == 0 && st[2].in_flight == 0);
    lb_balancer *ring = make("ring", NULL, abc, 3);
    CHECK_RESULT(lb_balancer_acquire(ring, NULL, 0, &lease, NULL, NULL, 0, NULL),
                 LB_RESULT_KEY_REQUIRED);
    CHECK_OK(lb_balancer_acquire(ring, "user", 4, &lease, &tag, NULL, 0, NULL));
    uint64_t picked = 0;
    CHECK_OK(lb_balancer_pick(ring, "user", 4, &picked, NULL, 0, NULL));
    CHECK(tag == picked);
    lb_balancer *empty = make("round_robin", NULL, NULL, 0);
    lb_lease *none = NULL;
    CHECK_RESULT(lb_balancer_acquire(empty, NULL, 0, &none, NULL, NULL, 0, NULL),
                 LB_RESULT_NO_NODES);
    CHECK(none == NULL);
    CHECK(get_stats(empty, st, ids, sizeof ids) == 0);

    /* A lease outlives its node and its balancer. */
    lb_lease *kept = NULL;
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &kept, NULL, id, sizeof id, &size));
    CHECK_OK(lb_balancer_remove(b, id, size - 1));
    lb_balancer_free(b);
    lb_balancer_free(ring);
    lb_balancer_free(empty);
    char kept_id[8];
    CHECK_OK(lb_lease_node(kept, NULL, kept_id, sizeof kept_id, &size));
    CHECK_STR(kept_id, id);
    CHECK_OK(lb_lease_finish(kept, LB_OUTCOME_SUCCESS, 1));
    lb_lease_cancel(lease);
}

/* The load-aware algorithms read the leases: least_connections avoids busy nodes. */
static void test_least_connections_reads_leases(void) {
    lb_node abc[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3)};
    lb_balancer *b = make("least_connections", NULL, abc, 3);
    lb_lease *held[2] = {NULL, NULL};
    uint64_t t0 = 0, t1 = 0, t2 = 0;
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &held[0], &t0, NULL, 0, NULL));
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &held[1], &t1, NULL, 0, NULL));
    CHECK(t0 != t1);
    /* Two nodes have a request in flight: every pick goes to the idle third one. */
    for (int i = 0; i < 10; i++) {
        CHECK_OK(lb_balancer_pick(b, NULL, 0, &t2, NULL, 0, NULL));
        CHECK(t2 != t0 && t2 != t1);
    }
    lb_lease_cancel(held[0]);
    lb_lease_cancel(held[1]);
    lb_balancer_free(b);
}

/* Health: failures reported eject a node (stats say until when), mark_down/mark_up for a
 * keyed algorithm move only that node's keys and bring them back, panic, bad input. */
/* Failure kinds (LB_OUTCOME_TIMEOUT, LB_OUTCOME_OVERLOADED) through the plain and the _info
 * calls: an overloaded node's retry-after pauses it until then, and the pause ends by itself;
 * timeouts extend the failure streak, overloaded answers do not; bad outcomes record nothing
 * and leave a lease with the caller. */
static void test_outcome_kinds(void) {
    lb_node abcd[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3), node("d", 1, 4)};
    lb_balancer *b = make("round_robin", NULL, abcd, 4);
    lb_node_stats st[8];
    char ids[64];
    uint64_t t0 = 0, t1 = 0;
    CHECK_OK(lb_balancer_now_ns(b, &t0));
    lb_outcome_info busy = {LB_OUTCOME_OVERLOADED, LB_LATENCY_NONE, UINT64_C(1000000000)};
    CHECK_OK(lb_balancer_report_info(b, S("a"), &busy));
    CHECK_OK(lb_balancer_now_ns(b, &t1));
    CHECK(get_stats(b, st, ids, sizeof ids) == 4);
    CHECK(st[0].status == LB_NODE_OVERLOADED);
    CHECK(st[0].until_ns >= t0 + 1000000000 && st[0].until_ns <= t1 + 1000000000);
    CHECK(st[0].requests == 1 && st[0].failures == 1);
    CHECK(st[0].latency_ns == UINT64_C(5000000000)); /* no latency given: the penalty */
    char id[8];
    size_t size = 0;
    for (int i = 0; i < 12; i++) {
        CHECK_OK(lb_balancer_pick(b, NULL, 0, NULL, id, sizeof id, &size));
        CHECK(strcmp(id, "a") != 0);
    }

    /* Refused, nothing recorded: a success with a retry-after or without a latency, unknown
     * codes, NULL info. */
    lb_outcome_info bad[] = {
        {LB_OUTCOME_SUCCESS, 1000, 0},
        {LB_OUTCOME_SUCCESS, LB_LATENCY_NONE, LB_LATENCY_NONE},
        {4, 1000, LB_LATENCY_NONE},
        {UINT32_MAX, LB_LATENCY_NONE, LB_LATENCY_NONE},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RESULT(lb_balancer_report_info(b, S("b"), &bad[i]), LB_RESULT_INVALID_OUTCOME);
    CHECK_RESULT(lb_balancer_report(b, S("b"), LB_OUTCOME_SUCCESS, LB_LATENCY_NONE),
                 LB_RESULT_INVALID_OUTCOME);
    CHECK_RESULT(lb_balancer_report_info(b, S("b"), NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_report_info(NULL, S("b"), &busy), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_report_info(b, S("x"), &busy), LB_RESULT_UNKNOWN_NODE);
    CHECK(get_stats(b, st, ids, sizeof ids) == 4);
    CHECK(st[1].requests == 0 && st[1].status == LB_NODE_HEALTHY);

    /* The pause ends by itself: a is picked again, once per round. */
    struct timespec nap = {1, 100000000}; /* past the 1 s pause, with a margin */
    nanosleep(&nap, NULL);
    CHECK(get_stats(b, st, ids, sizeof ids) == 4);
    CHECK(st[0].status == LB_NODE_HEALTHY && st[0].until_ns == 0);
    int back = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_OK(lb_balancer_pick(b, NULL, 0, NULL, id, sizeof id, &size));
        back += strcmp(id, "a") == 0;
    }
    CHECK(back == 2);

    /* Leases: a bad outcome leaves the lease open; LB_LATENCY_NONE is measured. */
    lb_lease *lease = NULL;
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &lease, NULL, NULL, 0, NULL));
    CHECK_RESULT(lb_lease_finish_info(lease, &bad[0]), LB_RESULT_INVALID_OUTCOME);
    CHECK_RESULT(lb_lease_finish_info(lease, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_lease_finish_info(NULL, &busy), LB_RESULT_NULL_PARAMETER);
    lb_outcome_info timeout = {LB_OUTCOME_TIMEOUT, LB_LATENCY_NONE, LB_LATENCY_NONE};
    CHECK_OK(lb_lease_finish_info(lease, &timeout));
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &lease, NULL, NULL, 0, NULL));
    CHECK_OK(lb_lease_finish(lease, LB_OUTCOME_SUCCESS, LB_LATENCY_NONE));
    CHECK(get_stats(b, st, ids, sizeof ids) == 4);
    uint64_t in_flight = 0, failures = 0;
    for (int i = 0; i < 4; i++) {
        in_flight += st[i].in_flight;
        failures += st[i].failures;
        /* measured, so far below the 584 years LB_LATENCY_NONE would mean as a latency */
        CHECK(st[i].latency_ns == LB_LATENCY_NONE || st[i].latency_ns <= UINT64_C(5000000000));
    }
    CHECK(in_flight == 0 && failures == 2);
    lb_balancer_free(b);

    /* 4 errors, overloaded answers (streak untouched), then a timeout: ejected. */
    lb_node two[] = {node("a", 1, 1), node("b", 1, 2)};
    b = make("round_robin", NULL, two, 2);
    for (int i = 0; i < 4; i++) CHECK_OK(lb_balancer_report(b, S("a"), LB_OUTCOME_ERROR, 1000));
    CHECK_OK(lb_balancer_report(b, S("a"), LB_OUTCOME_OVERLOADED, LB_LATENCY_NONE));
    CHECK_OK(lb_balancer_report(b, S("a"), LB_OUTCOME_OVERLOADED, 1000));
    CHECK(get_stats(b, st, ids, sizeof ids) == 2);
    CHECK(st[0].status == LB_NODE_HEALTHY);
    CHECK_OK(lb_balancer_report(b, S("a"), LB_OUTCOME_TIMEOUT, LB_LATENCY_NONE));
    CHECK(get_stats(b, st, ids, sizeof ids) == 2);
    CHECK(st[0].status == LB_NODE_EJECTED && st[0].failures == 7);
    CHECK(LB_OUTCOME_FAILURE == LB_OUTCOME_ERROR && LB_OUTCOME_TIMEOUT == 2 &&
          LB_OUTCOME_OVERLOADED == 3 && LB_NODE_OVERLOADED == 4);
    lb_balancer_free(b);
}

/* Budgets and throttles: the core's objects behind handles, clocked by the caller. The
 * numbers are tower's and gRFC A6's (the core's tests port them); here every call, output and
 * error reaches C. */
static void test_budgets(void) {
    const uint64_t S = UINT64_C(1000000000);
    lb_retry_budget *budget = NULL;
    /* Bad arguments: the core's errors, nothing allocated. */
    CHECK_RESULT(lb_retry_budget_new(999, 10, 0.2, 0, &budget), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_retry_budget_new(10000, 10, -0.5, 0, &budget),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_retry_budget_new(10000, 10, 0.0 / 0.0, 0, &budget),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_retry_budget_new(10000, 10, 0.2, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(budget == NULL);
    /* tower's tps_reserve: no deposits, a reserve of min_per_sec x ttl = 1 x 1 retries. */
    CHECK_OK(lb_retry_budget_new(1000, 1, 1.0, 0, &budget));
    bool allowed = false;
    uint64_t available = 99;
    CHECK_OK(lb_retry_budget_available(budget, 0, &available));
    CHECK(available == 1);
    CHECK_OK(lb_retry_budget_can_withdraw(budget, 0, &allowed));
    CHECK(allowed);
    CHECK_OK(lb_retry_budget_withdraw(budget, 0, &allowed));
    CHECK(allowed);
    CHECK_OK(lb_retry_budget_withdraw(budget, 0, &allowed));
    CHECK(!allowed);
    /* A deposit allows one more retry (retry_percent 1.0), for the ttl. */
    CHECK_OK(lb_retry_budget_deposit(budget, 0));
    CHECK_OK(lb_retry_budget_withdraw(budget, S / 2, &allowed));
    CHECK(allowed);
    CHECK_RESULT(lb_retry_budget_deposit(NULL, 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_budget_withdraw(budget, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_budget_withdraw(NULL, 0, &allowed), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_budget_can_withdraw(budget, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_budget_available(budget, 0, NULL), LB_RESULT_NULL_PARAMETER);
    /* Two seconds on, the deposit has expired and the reserve is back. */
    CHECK_OK(lb_retry_budget_available(budget, 2 * S, &available));
    CHECK(available == 1);
    lb_retry_budget_free(budget);
    lb_retry_budget_free(NULL);

    /* gRFC A6: 10 tokens, +0.5 per success; retries stop at 5 or fewer. */
    lb_retry_throttle *throttle = NULL;
    CHECK_RESULT(lb_retry_throttle_new(0, 0.5, &throttle), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_retry_throttle_new(10, 0.0001, &throttle), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_retry_throttle_new(10, 0.5, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(throttle == NULL);
    CHECK_OK(lb_retry_throttle_new(10, 0.5, &throttle));
    double tokens = 0;
    for (int i = 0; i < 4; i++) {
        CHECK_OK(lb_retry_throttle_failure(throttle, &allowed));
        CHECK(allowed);
    }
    CHECK_OK(lb_retry_throttle_failure(throttle, &allowed)); /* 5 left: at half, refused */
    CHECK(!allowed);
    CHECK_OK(lb_retry_throttle_allows(throttle, &allowed));
    CHECK(!allowed);
    CHECK_OK(lb_retry_throttle_success(throttle));
    CHECK_OK(lb_retry_throttle_tokens(throttle, &tokens));
    CHECK(tokens == 5.5);
    CHECK_OK(lb_retry_throttle_allows(throttle, &allowed));
    CHECK(allowed);
    CHECK_OK(lb_retry_throttle_failure(throttle, NULL)); /* the answer is optional */
    CHECK_RESULT(lb_retry_throttle_failure(NULL, &allowed), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_throttle_success(NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_throttle_allows(throttle, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_retry_throttle_tokens(throttle, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_retry_throttle_tokens(throttle, &tokens));
    CHECK(tokens == 4.5);
    lb_retry_throttle_free(throttle);
    lb_retry_throttle_free(NULL);

    /* The SRE book: K = 2 over 120 s. Nothing is rejected until the window holds 100 requests
     * (the core's minimum); then, none accepted: p = 100 / 101. */
    lb_adaptive_throttle *adaptive = NULL;
    CHECK_RESULT(lb_adaptive_throttle_new(0.5, 120000, 0, &adaptive),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_adaptive_throttle_new(2.0, 999, 0, &adaptive), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_adaptive_throttle_new(2.0, 120000, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(adaptive == NULL);
    CHECK_OK(lb_adaptive_throttle_new(2.0, 120000, 0, &adaptive));
    double p = 1;
    CHECK_OK(lb_adaptive_throttle_rejection(adaptive, 0, &p));
    CHECK(p == 0);
    bool admitted = false;
    for (int i = 0; i < 100; i++) {
        CHECK_OK(lb_adaptive_throttle_admit(adaptive, S, UINT64_MAX, &admitted));
        CHECK(admitted); /* the largest draw is always admitted */
    }
    CHECK_OK(lb_adaptive_throttle_rejection(adaptive, S, &p));
    CHECK(p > 0.9900 && p < 0.9901);
    CHECK_OK(lb_adaptive_throttle_admit(adaptive, S, 0, &admitted));
    CHECK(!admitted); /* the smallest draw is rejected whenever p > 0 */
    for (int i = 0; i < 51; i++) CHECK_OK(lb_adaptive_throttle_accepted(adaptive, S));
    CHECK_OK(lb_adaptive_throttle_rejection(adaptive, S, &p));
    CHECK(p == 0); /* 101 requests < 2 x 51 accepts */
    CHECK_RESULT(lb_adaptive_throttle_admit(adaptive, S, 0, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_adaptive_throttle_admit(NULL, S, 0, &admitted), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_adaptive_throttle_accepted(NULL, S), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_adaptive_throttle_rejection(adaptive, S, NULL), LB_RESULT_NULL_PARAMETER);
    lb_adaptive_throttle_free(adaptive);
    lb_adaptive_throttle_free(NULL);
}

static void test_health(void) {
    static const char *const ids_of[] = {"a", "b", "c", "d"};
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("consecutive_failures"), 2));
    CHECK_OK(lb_options_set_int(o, S("max_ejection_percent"), 100));
    CHECK_OK(lb_options_set_str(o, S("slow_start_aggression"), S("1.5")));
    CHECK_RESULT(lb_options_set_str(o, S("slow_start_aggression"), S("0")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("hash_balance_factor"), 99),
                 LB_RESULT_INVALID_OPTION_VALUE);
    lb_node abcd[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3), node("d", 1, 4)};
    lb_balancer *rr = make("round_robin", o, abcd, 4);
    lb_balancer *ring = make("ring", o, abcd, 4);
    lb_options_free(o);

    lb_node_stats st[8];
    char ids[64];
    bool panic = true;
    CHECK_OK(lb_balancer_panic(rr, &panic));
    CHECK(!panic);
    for (int i = 0; i < 2; i++)
        CHECK_OK(lb_balancer_report(rr, S("a"), LB_OUTCOME_FAILURE, 1000));
    CHECK(get_stats(rr, st, ids, sizeof ids) == 4);
    CHECK(st[0].status == LB_NODE_EJECTED && st[0].until_ns > 0);
    CHECK(st[1].status == LB_NODE_HEALTHY && st[1].until_ns == 0);
    /* until_ns is on the balancer's clock, which lb_balancer_now_ns reads: the ejection ends
     * within base_ejection_time_ms (the default 30 s) of now. */
    uint64_t now = UINT64_MAX;
    CHECK_OK(lb_balancer_now_ns(rr, &now));
    CHECK(now < st[0].until_ns && st[0].until_ns - now <= UINT64_C(30000000000));
    uint64_t later = 0;
    CHECK_OK(lb_balancer_now_ns(rr, &later));
    CHECK(later >= now);
    CHECK_RESULT(lb_balancer_now_ns(NULL, &now), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_now_ns(rr, NULL), LB_RESULT_NULL_PARAMETER);
    for (int i = 0; i < 40; i++) {
        uint64_t tag = 0;
        CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
        CHECK(tag != 1);
    }
    /* Three of four ejected: panic, every node in rotation again. */
    for (int i = 0; i < 2; i++) {
        CHECK_OK(lb_balancer_report(rr, S("b"), LB_OUTCOME_FAILURE, 0));
        CHECK_OK(lb_balancer_report(rr, S("c"), LB_OUTCOME_FAILURE, 0));
    }
    bool seen[5] = {false, false, false, false, false};
    for (int i = 0; i < 8; i++) {
        uint64_t tag = 0;
        CHECK_OK(lb_balancer_pick(rr, NULL, 0, &tag, NULL, 0, NULL));
        CHECK(tag >= 1 && tag <= 4);
        seen[tag] = true;
    }
    CHECK(seen[1] && seen[2] && seen[3] && seen[4]);
    CHECK_OK(lb_balancer_panic(rr, &panic));
    CHECK(panic);

    /* Keyed: only the down node's keys move, and they come back. */
    uint64_t before[200], during[200], after[200];
    char key[16];
    for (int k = 0; k < 200; k++) {
        int n = snprintf(key, sizeof key, "key-%d", k);
        CHECK_OK(lb_balancer_pick(ring, key, (size_t)n, &before[k], NULL, 0, NULL));
    }
    CHECK_OK(lb_balancer_mark_down(ring, S("c")));
    CHECK(get_stats(ring, st, ids, sizeof ids) == 4);
    CHECK(st[2].status == LB_NODE_DOWN);
    for (int k = 0; k < 200; k++) {
        int n = snprintf(key, sizeof key, "key-%d", k);
        CHECK_OK(lb_balancer_pick(ring, key, (size_t)n, &during[k], NULL, 0, NULL));
        CHECK(during[k] != 3);
        CHECK(during[k] == before[k] || before[k] == 3);
    }
    CHECK_OK(lb_balancer_mark_up(ring, S("c")));
    for (int k = 0; k < 200; k++) {
        int n = snprintf(key, sizeof key, "key-%d", k);
        CHECK_OK(lb_balancer_pick(ring, key, (size_t)n, &after[k], NULL, 0, NULL));
        CHECK(after[k] == before[k]);
    }

    /* Bad input changes nothing. */
    CHECK_RESULT(lb_balancer_mark_down(ring, S("zz")), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_mark_up(ring, "\xff", 1), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_mark_down(NULL, S("a")), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_mark_down(ring, NULL, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_panic(ring, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_panic(NULL, &panic), LB_RESULT_NULL_PARAMETER);
    CHECK(get_stats(ring, st, ids, sizeof ids) == 4);
    for (int i = 0; i < 4; i++)
        CHECK(st[i].status == LB_NODE_HEALTHY);
    lb_balancer_free(rr);
    lb_balancer_free(ring);

    /* Panic disabled (panic_threshold 0) and every node down: nothing may be chosen. */
    lb_options *strict = NULL;
    CHECK_OK(lb_options_new(&strict));
    CHECK_OK(lb_options_set_int(strict, S("panic_threshold"), 0));
    lb_balancer *none = make("ring", strict, abcd, 4);
    lb_options_free(strict);
    for (int i = 0; i < 4; i++)
        CHECK_OK(lb_balancer_mark_down(none, ids_of[i], 1));
    uint64_t tag = 99;
    CHECK_RESULT(lb_balancer_pick(none, S("k"), &tag, NULL, 0, NULL), LB_RESULT_NO_USABLE_NODES);
    CHECK(tag == 99);
    CHECK(strcmp(lb_result_name(LB_RESULT_NO_USABLE_NODES), "LB_NO_USABLE_NODES") == 0);
    CHECK_OK(lb_balancer_panic(none, &panic));
    CHECK(!panic);
    CHECK_OK(lb_balancer_mark_up(none, S("b")));
    CHECK_OK(lb_balancer_pick(none, S("k"), &tag, NULL, 0, NULL));
    CHECK(tag == 2);
    lb_balancer_free(none);
}

static void test_pick_hash(void) {
    lb_node abc[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3)};
    const char *hashed[] = {"ring_hash", "maglev", "rendezvous", "jump"};
    for (size_t a = 0; a < 4; a++) {
        lb_balancer *b = make(hashed[a], NULL, abc, 3);
        for (uint64_t h = 1; h < 40; h++) {
            uint64_t hash = h * UINT64_C(0x9E3779B97F4A7C15), tag = 0;
            char id[8];
            size_t size = 0, count = SENTINEL_SIZE, ids_size = 0;
            CHECK_OK(lb_balancer_pick_hash(b, hash, &tag, id, sizeof id, &size));
            lb_pick picks[4];
            char ids[16];
            CHECK_OK(lb_balancer_attempts_hash(b, hash, picks, 4, ids, sizeof ids, &ids_size,
                                               &count));
            /* The first attempt is the pick; all three nodes, each once. */
            CHECK(count == 3 && ids_size == 6);
            CHECK(picks[0].tag == tag);
            CHECK_STR(picks[0].id, id);
            CHECK(picks[0].tag + picks[1].tag + picks[2].tag == 6);
            CHECK(picks[0].tag != picks[1].tag && picks[1].tag != picks[2].tag);
        }
        uint64_t tag = SENTINEL_TAG;
        size_t size = SENTINEL_SIZE, count = SENTINEL_SIZE;
        char id[1];
        CHECK_RESULT(lb_balancer_pick_hash(b, 5, &tag, id, 1, &size), LB_RESULT_BUFFER_TOO_SMALL);
        CHECK(size == 2 && tag == SENTINEL_TAG);
        CHECK_RESULT(lb_balancer_pick_hash(b, 5, &tag, id, 1, NULL), LB_RESULT_NULL_PARAMETER);
        CHECK_RESULT(lb_balancer_attempts_hash(b, 5, NULL, 1, NULL, 0, NULL, &count),
                     LB_RESULT_NULL_PARAMETER);
        CHECK_RESULT(lb_balancer_attempts_hash(b, 5, NULL, 0, NULL, 0, NULL, NULL),
                     LB_RESULT_NULL_PARAMETER);
        CHECK(count == SENTINEL_SIZE);
        lb_balancer_free(b);
    }
    /* Algorithms that do not place hashes refuse them, whatever the outputs. */
    lb_balancer *rr = make("round_robin", NULL, abc, 3);
    uint64_t tag = SENTINEL_TAG;
    size_t count = SENTINEL_SIZE;
    lb_pick picks[1];
    CHECK_RESULT(lb_balancer_pick_hash(rr, 1, &tag, NULL, 0, NULL), LB_RESULT_HASH_UNSUPPORTED);
    CHECK_RESULT(lb_balancer_attempts_hash(rr, 1, picks, 1, NULL, 0, NULL, &count),
                 LB_RESULT_HASH_UNSUPPORTED);
    CHECK(tag == SENTINEL_TAG && count == SENTINEL_SIZE);
    CHECK_RESULT(lb_balancer_pick_hash(NULL, 1, &tag, NULL, 0, NULL), LB_RESULT_NULL_PARAMETER);
    lb_balancer_free(rr);
    lb_balancer *empty = make("maglev", NULL, NULL, 0);
    CHECK_RESULT(lb_balancer_pick_hash(empty, 1, &tag, NULL, 0, NULL), LB_RESULT_NO_NODES);
    lb_balancer_free(empty);
}

/* The request loop as lb.h documents it: attempts on distinct nodes until one succeeds; a
 * budget, a hedging policy and the balancer all freed by the caller while requests still use
 * them (valgrind and LeakSanitizer check that nothing leaks or dangles); a hedge's loser
 * cancelled uncounted. */
static void test_requests(void) {
    lb_node abc[] = {node("a", 1, 1), node("b", 1, 2), node("c", 1, 3)};
    lb_balancer *b = make("ring", NULL, abc, 3);
    lb_request *r = NULL;
    CHECK_OK(lb_request_new(b, "user-42", 7, &r));
    lb_lease *lease = NULL;
    uint64_t tags[3] = {0, 0, 0};
    size_t n = 0;
    lb_decision d = LB_DECISION_STOP;
    while (lb_request_attempt(r, &lease) == LB_RESULT_OK && lease != NULL) {
        CHECK_OK(lb_lease_node(lease, &tags[n], NULL, 0, NULL));
        n++;
        lb_outcome_info outcome = {n < 3 ? LB_OUTCOME_ERROR : LB_OUTCOME_SUCCESS, 1000000,
                                   LB_LATENCY_NONE};
        uint64_t delay_ns = UINT64_MAX;
        CHECK_OK(lb_request_finish(r, lease, &outcome, &d, &delay_ns));
        if (d != LB_DECISION_RETRY) break;
        CHECK(delay_ns < UINT64_C(250000000)); /* Envoy's cap, 250 ms */
    }
    CHECK(d == LB_DECISION_DONE && n == 3);
    CHECK(tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2]);
    lb_request_info info;
    CHECK_OK(lb_request_state(r, &info));
    CHECK(info.attempts == 3 && info.winner == 3 && info.over && info.stopped == LB_STOP_NONE);
    CHECK_OK(lb_request_attempt(r, &lease));
    CHECK(lease == NULL);
    lb_request_free(r);

    /* A budget that allows no retry, given to the balancer and freed by the caller at once. */
    lb_retry_budget *budget = NULL;
    CHECK_OK(lb_retry_budget_new(1000, 0, 0.0, lb_now_ns(), &budget));
    CHECK_OK(lb_balancer_set_retry_budget(b, budget));
    lb_retry_budget_free(budget);
    CHECK_OK(lb_request_new(b, "user-42", 7, &r));
    CHECK_OK(lb_request_attempt(r, &lease));
    lb_outcome_info failed = {LB_OUTCOME_TIMEOUT, LB_LATENCY_NONE, LB_LATENCY_NONE};
    CHECK_OK(lb_request_finish(r, lease, &failed, &d, NULL));
    CHECK_OK(lb_request_state(r, &info));
    CHECK(d == LB_DECISION_STOP && info.stopped == LB_STOP_BUDGET);
    CHECK(strcmp(lb_stop_name(info.stopped), "budget") == 0);
    lb_request_free(r);
    CHECK_OK(lb_balancer_clear_budget(b));

    /* A hedge: freed policy, freed balancer, the request keeps both. */
    lb_hedging *hedging = NULL;
    CHECK_RESULT(lb_hedging_new_percentile(1.5, 0, &hedging), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK(hedging == NULL);
    CHECK_OK(lb_hedging_new_after(0, &hedging));
    CHECK_OK(lb_request_new(b, "user-42", 7, &r));
    CHECK_OK(lb_request_set_hedging(r, hedging));
    lb_hedging_free(hedging);
    CHECK_RESULT(lb_request_set_retry_on(r, 8), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_request_set_max_attempts(r, 0), LB_RESULT_INVALID_OPTION_VALUE);
    lb_lease *first = NULL, *second = NULL;
    CHECK_OK(lb_request_attempt(r, &first));
    lb_balancer_free(b);
    uint64_t after = 0;
    CHECK_OK(lb_request_hedge_after(r, &after));
    CHECK(after == 0);
    CHECK_OK(lb_request_hedge(r, &second));
    CHECK(first != NULL && second != NULL);
    lb_outcome_info ok = {LB_OUTCOME_SUCCESS, LB_LATENCY_NONE, LB_LATENCY_NONE};
    CHECK_OK(lb_request_finish(r, second, &ok, &d, NULL));
    CHECK_OK(lb_request_cancel(r, first));
    CHECK_OK(lb_request_state(r, &info));
    CHECK(d == LB_DECISION_DONE && info.winner == 2 && info.attempts == 2);
    lb_request_free(r);
    lb_request_free(NULL);
    CHECK_RESULT(lb_request_new(NULL, NULL, 0, &r), LB_RESULT_NULL_PARAMETER);
}

/* ---- Localities and priority levels (issue 24): the located node form and routing ---- */

static lb_located_node located(const char *id, uint32_t weight, uint64_t tag,
                               const char *locality, uint32_t priority) {
    lb_located_node n;
    n.id = id;
    n.id_len = id ? strlen(id) : 0;
    n.weight = weight;
    n.tag = tag;
    n.locality = locality;
    n.locality_len = locality ? strlen(locality) : 0;
    n.priority = priority;
    return n;
}

/* The nodes with their places as "id:weight:tag@locality#priority,..." in `out`, through
 * lb_balancer_located_nodes (checking its size protocol on the way). */
static void places(const lb_balancer *b, char *out, size_t out_cap) {
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    lb_result r = lb_balancer_located_nodes(b, NULL, 0, NULL, 0, &count, &size);
    CHECK(r == (count == 0 ? LB_RESULT_OK : LB_RESULT_BUFFER_TOO_SMALL));
    lb_located_node nodes[16];
    char strings[512];
    CHECK(count <= 16 && size <= sizeof strings);
    size_t count2 = 0, size2 = 0;
    CHECK_OK(lb_balancer_located_nodes(b, nodes, 16, strings, sizeof strings, &count2, &size2));
    CHECK(count2 == count && size2 == size);
    size_t at = 0;
    out[0] = '\0';
    for (size_t i = 0; i < count2 && i < 16; i++) {
        CHECK(nodes[i].id_len == strlen(nodes[i].id));
        CHECK(nodes[i].locality_len == strlen(nodes[i].locality));
        CHECK(nodes[i].locality >= strings && nodes[i].locality < strings + sizeof strings);
        at += (size_t)snprintf(out + at, out_cap - at, "%s:%u:%llu@%s#%u,", nodes[i].id,
                               (unsigned)nodes[i].weight, (unsigned long long)nodes[i].tag,
                               nodes[i].locality, (unsigned)nodes[i].priority);
    }
}

/* Picks `n` times (tags only) and returns the bit set of tags seen (tags are 0..63). */
static uint64_t tags_seen(const lb_balancer *b, int n) {
    uint64_t seen = 0;
    for (int i = 0; i < n; i++) {
        uint64_t tag = SENTINEL_TAG;
        CHECK_OK(lb_balancer_pick(b, NULL, 0, &tag, NULL, 0, NULL));
        if (tag < 64) seen |= UINT64_C(1) << tag;
    }
    return seen;
}
#define BIT(t) (UINT64_C(1) << (t))

static void test_located_nodes(void) {
    char before[1024], after[1024];
    /* new_located: two nodes at priority 0, one standby at priority 1. */
    lb_located_node init[] = {located("a", 1, 0, "r/za", 0), located("b", 2, 1, "r/zb/s", 0),
                              located("s", 1, 2, NULL, 1)};
    lb_balancer *b = NULL;
    CHECK_OK(lb_balancer_new_located(S("round_robin"), NULL, init, 3, &b));
    places(b, before, sizeof before);
    CHECK_STR(before, "a:1:0@r/za#0,b:2:1@r/zb/s#0,s:1:2@#1,");
    /* The standby takes nothing while level 0 is healthy, everything once it is down. */
    CHECK(tags_seen(b, 12) == (BIT(0) | BIT(1)));
    CHECK_OK(lb_balancer_mark_down(b, S("a")));
    CHECK_OK(lb_balancer_mark_down(b, S("b")));
    CHECK(tags_seen(b, 4) == BIT(2));
    CHECK_OK(lb_balancer_mark_up(b, S("a")));
    CHECK_OK(lb_balancer_mark_up(b, S("b")));

    /* new_located's errors write nothing. */
    lb_balancer *untouched = (lb_balancer *)&untouched;
    lb_balancer *const sentinel = untouched;
    lb_located_node four[] = {located("x", 1, 0, "a/b/c/d", 0)};
    lb_located_node nul[] = {{"x", 1, 1, 0, "r\0z", 3, 0}};
    lb_located_node utf8[] = {{"x", 1, 1, 0, "\xc3\x28", 2, 0}};
    lb_located_node null_locality[] = {{"x", 1, 1, 0, NULL, 2, 0}};
    lb_located_node dup[] = {located("x", 1, 0, "r", 0), located("x", 1, 0, "q", 1)};
    lb_located_node bad_id[] = {{"\xff", 1, 1, 0, "r", 1, 0}};
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, four, 1, &untouched),
                 LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, nul, 1, &untouched),
                 LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, utf8, 1, &untouched),
                 LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, null_locality, 1, &untouched),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, dup, 2, &untouched),
                 LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, bad_id, 1, &untouched),
                 LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, NULL, 1, &untouched),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_new_located(S("roundrobin"), NULL, init, 3, &untouched),
                 LB_RESULT_UNKNOWN_ALGORITHM);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, init, SIZE_MAX, &untouched),
                 LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_new_located(S("round_robin"), NULL, init, 3, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK(untouched == sentinel);
    /* NULL with 0 nodes starts empty. */
    lb_balancer *empty = NULL;
    CHECK_OK(lb_balancer_new_located(S("random"), NULL, NULL, 0, &empty));
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_located_nodes(empty, NULL, 0, NULL, 0, &count, &size));
    CHECK(count == 0 && size == 0);
    lb_balancer_free(empty);

    /* add_located, update_located and set_location: every failure changes nothing. */
    CHECK_RESULT(lb_balancer_add_located(b, S("c"), 1, 3, S("1/2/3/4"), 0),
                 LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_add_located(b, S("c"), 1, 3, S("r\0z"), 0),
                 LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_add_located(b, S("c"), 1, 3, S("\xed\xa0\x80"), 0),
                 LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_add_located(b, S("c"), 1, 3, NULL, 1, 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_add_located(b, S("a"), 1, 3, S("r"), 0), LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_add_located(b, S("\xff"), 1, 3, S("r"), 0), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_add_located(b, NULL, 0, 1, 3, S("r"), 0), LB_RESULT_EMPTY_ID);
    CHECK_RESULT(lb_balancer_add_located(NULL, S("c"), 1, 3, S("r"), 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_add_located(b, S("c"), 1, 3, "r", SIZE_MAX, 0),
                 LB_RESULT_INVALID_LENGTH);
    lb_located_node bad_last[] = {located("x", 1, 0, "r", 0), located("y", 1, 0, "a/b/c/d", 0)};
    CHECK_RESULT(lb_balancer_update_located(b, bad_last, 2), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_update_located(b, utf8, 1), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_update_located(b, dup, 2), LB_RESULT_DUPLICATE_NODE);
    CHECK_RESULT(lb_balancer_update_located(b, NULL, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_update_located(NULL, init, 3), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_location(b, S("a"), S("a/b/c/d"), 0), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_location(b, S("zz"), S("r"), 0), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_set_location(b, S("\x80"), S("r"), 0), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_location(b, S("a"), S("\x80"), 0), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_location(b, S("a"), NULL, 1, 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_location(b, NULL, 1, S("r"), 0), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_location(NULL, S("a"), S("r"), 0), LB_RESULT_NULL_PARAMETER);
    places(b, after, sizeof after);
    CHECK_STR(after, before);
    CHECK(tags_seen(b, 12) == (BIT(0) | BIT(1))); /* and it still routes as before */

    /* Successes: a located add, a plain add (unnamed locality, priority 0), a move. */
    CHECK_OK(lb_balancer_add_located(b, S("c"), 3, 3, S("r/zc"), 2));
    CHECK_OK(lb_balancer_add(b, S("d"), 1, 4));
    CHECK_OK(lb_balancer_set_location(b, S("a"), S("r/zz"), 1));
    places(b, after, sizeof after);
    CHECK_STR(after, "a:1:0@r/zz#1,b:2:1@r/zb/s#0,s:1:2@#1,c:3:3@r/zc#2,d:1:4@#0,");
    /* set_location keeps the counters: the node is the same node. */
    CHECK_OK(lb_balancer_report(b, S("b"), LB_OUTCOME_SUCCESS, 1000));
    CHECK_OK(lb_balancer_set_location(b, S("b"), NULL, 0, 3));
    lb_node_stats stats[8];
    char ids[64];
    CHECK(get_stats(b, stats, ids, sizeof ids) == 5);
    CHECK(stats[1].requests == 1);
    /* update_located replaces everything; lb_balancer_nodes still lists the plain form. */
    lb_located_node next[] = {located("p", 1, 7, "r/z", 0), located("q", 1, 8, "", 5)};
    CHECK_OK(lb_balancer_update_located(b, next, 2));
    places(b, after, sizeof after);
    CHECK_STR(after, "p:1:7@r/z#0,q:1:8@#5,");
    lb_node plain[4];
    CHECK(list(b, plain, 4, ids, sizeof ids) == 2);
    CHECK_STR(plain[1].id, "q");
    /* The listing goes straight back into update_located. */
    lb_located_node listed[4];
    char strings[128];
    CHECK_OK(lb_balancer_located_nodes(b, listed, 4, strings, sizeof strings, &count, &size));
    CHECK(count == 2 && size == strlen("p") + 1 + strlen("r/z") + 1 + strlen("q") + 1 + 1);
    CHECK_OK(lb_balancer_update_located(b, listed, count));
    places(b, after, sizeof after);
    CHECK_STR(after, "p:1:7@r/z#0,q:1:8@#5,");
    /* An update through the plain form puts every node back in "" at priority 0. */
    lb_node flat[] = {node("p", 1, 7)};
    CHECK_OK(lb_balancer_update(b, flat, 1));
    places(b, after, sizeof after);
    CHECK_STR(after, "p:1:7@#0,");

    /* The listing's own errors, outputs untouched. */
    count = SENTINEL_SIZE;
    size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, 4, strings, 2, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(count == 1 && size == 3); /* "p\0" + "\0" */
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, 0, strings, sizeof strings, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    count = SENTINEL_SIZE;
    size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_located_nodes(NULL, listed, 4, strings, sizeof strings, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, 4, strings, sizeof strings, NULL, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, 4, strings, sizeof strings, &count, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_located_nodes(b, NULL, 4, strings, sizeof strings, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, 4, NULL, 8, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_located_nodes(b, listed, SIZE_MAX, strings, 8, &count, &size),
                 LB_RESULT_INVALID_LENGTH);
    CHECK(count == SENTINEL_SIZE && size == SENTINEL_SIZE);
    lb_balancer_free(b);
}

static void test_locality_routing(void) {
    /* Two localities of two nodes each at priority 0 (tags 0-3), round robin. */
    lb_located_node nodes[] = {located("a0", 1, 0, "r/a", 0), located("a1", 1, 1, "r/a", 0),
                               located("b0", 1, 2, "r/b", 0), located("b1", 1, 3, "r/b", 0)};
    const uint64_t all = BIT(0) | BIT(1) | BIT(2) | BIT(3), in_a = BIT(0) | BIT(1);
    lb_balancer *b = NULL;
    CHECK_OK(lb_balancer_new_located(S("round_robin"), NULL, nodes, 4, &b));
    CHECK(tags_seen(b, 8) == all);

    /* Locality weights: r/b left out has weight 0, so r/a takes everything. */
    lb_locality_weight only_a[] = {{S("r/a"), 1}};
    CHECK_OK(lb_balancer_set_locality_weights(b, only_a, 1));
    CHECK(tags_seen(b, 8) == in_a);
    /* Failures keep the weights in force. */
    lb_locality_weight four[] = {{S("r/b"), 1}, {S("a/b/c/d"), 1}};
    lb_locality_weight nul[] = {{S("r\0b"), 1}};
    lb_locality_weight utf8[] = {{S("\xc3\x28"), 1}};
    lb_locality_weight null_locality[] = {{NULL, 3, 1}};
    CHECK_RESULT(lb_balancer_set_locality_weights(b, four, 2), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_locality_weights(b, nul, 1), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_locality_weights(b, utf8, 1), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_locality_weights(b, null_locality, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_locality_weights(b, NULL, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_locality_weights(b, only_a, SIZE_MAX), LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_set_locality_weights(NULL, only_a, 1), LB_RESULT_NULL_PARAMETER);
    CHECK(tags_seen(b, 8) == in_a);
    /* An empty list turns them off. */
    CHECK_OK(lb_balancer_set_locality_weights(b, NULL, 0));
    CHECK(tags_seen(b, 8) == all);
    lb_balancer_free(b);

    /* Zone-aware routing: the caller runs in r/a, its fleet spread evenly like the nodes, so
     * every request can stay local. */
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("zone_aware_min_cluster_size"), 1));
    CHECK_OK(lb_options_set_int(o, S("seed"), 5));
    CHECK_OK(lb_balancer_new_located(S("random"), o, nodes, 4, &b));
    lb_options_free(o);
    lb_locality_count even[] = {{S("r/a"), 3}, {S("r/b"), 3}};
    CHECK_OK(lb_balancer_set_local_localities(b, even, 2));
    CHECK(tags_seen(b, 64) == all); /* no local locality yet: off */
    CHECK_OK(lb_balancer_set_local_locality(b, S("r/a")));
    CHECK(tags_seen(b, 64) == in_a);
    /* Failures keep the routing in force. */
    lb_locality_count bad_spread[] = {{S("r/a"), 1}, {S("a/b/c/d"), 1}};
    lb_locality_count utf8_spread[] = {{S("\xff"), 1}};
    CHECK_RESULT(lb_balancer_set_local_locality(b, S("a/b/c/d")), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_local_locality(b, S("r\0a")), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_local_locality(b, S("\xc3")), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_local_locality(b, NULL, 3), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_local_locality(b, "r/a", SIZE_MAX), LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_set_local_locality(NULL, S("r/a")), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_local_localities(b, bad_spread, 2), LB_RESULT_INVALID_LOCALITY);
    CHECK_RESULT(lb_balancer_set_local_localities(b, utf8_spread, 1), LB_RESULT_INVALID_UTF8);
    CHECK_RESULT(lb_balancer_set_local_localities(b, NULL, 2), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_set_local_localities(b, even, SIZE_MAX), LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_set_local_localities(NULL, even, 2), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_clear_local_locality(NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(tags_seen(b, 64) == in_a);
    /* Clearing the local locality turns it off; so does an empty spread. */
    CHECK_OK(lb_balancer_clear_local_locality(b));
    CHECK(tags_seen(b, 64) == all);
    CHECK_OK(lb_balancer_set_local_locality(b, S("r/b")));
    CHECK(tags_seen(b, 64) == (BIT(2) | BIT(3)));
    CHECK_OK(lb_balancer_set_local_localities(b, NULL, 0));
    CHECK(tags_seen(b, 64) == all);
    lb_balancer_free(b);

    /* The unnamed locality is a locality: NULL with 0 (or "") sets it, it does not clear. */
    lb_located_node unnamed[] = {located("u0", 1, 0, NULL, 0), located("u1", 1, 1, "", 0),
                                 located("b0", 1, 2, "r/b", 0), located("b1", 1, 3, "r/b", 0)};
    o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("zone_aware_min_cluster_size"), 1));
    CHECK_OK(lb_balancer_new_located(S("random"), o, unnamed, 4, &b));
    lb_options_free(o);
    lb_locality_count spread[] = {{NULL, 0, 2}, {S("r/b"), 2}};
    CHECK_OK(lb_balancer_set_local_localities(b, spread, 2));
    CHECK_OK(lb_balancer_set_local_locality(b, NULL, 0));
    CHECK(tags_seen(b, 64) == in_a);
    CHECK_OK(lb_balancer_clear_local_locality(b));
    CHECK(tags_seen(b, 64) == all);
    CHECK_OK(lb_balancer_set_local_locality(b, S("")));
    CHECK(tags_seen(b, 64) == in_a);
    lb_balancer_free(b);
}
#undef BIT

/* ORCA load reports (issue 25): parse, read the numbers and the named entries, free; every
 * form of the header; errors leave the out-pointer alone. */
static void test_load_reports(void) {
    const char text[] = "TEXT cpu_utilization:0.5, rps_fractional:200, eps:4, "
                        "named_metrics.rif:7, named_metrics.kv:0.25";
    lb_load_report *report = NULL;
    CHECK_OK(lb_load_report_parse((const uint8_t *)text, sizeof(text) - 1, &report));
    CHECK(report != NULL);
    lb_load_values values;
    CHECK_OK(lb_load_report_values(report, &values));
    CHECK(values.cpu_utilization == 0.5 && values.rps_fractional == 200.0 && values.eps == 4.0);
    CHECK(values.mem_utilization == 0.0 && values.application_utilization == 0.0 && values.rps == 0);

    /* The count first (cap 0), then the entries, in the report's order. */
    size_t len = 99;
    CHECK_RESULT(lb_load_report_entries(report, NULL, 0, &len), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(len == 2);
    lb_load_entry entries[2];
    CHECK_RESULT(lb_load_report_entries(report, entries, 1, &len), LB_RESULT_BUFFER_TOO_SMALL);
    CHECK_OK(lb_load_report_entries(report, entries, 2, &len));
    CHECK(len == 2);
    CHECK(entries[0].map == LB_LOAD_NAMED_METRICS && entries[0].name_len == 3 && entries[0].value == 7.0);
    CHECK_STR(entries[0].name, "rif"); /* NUL-terminated inside the report */
    CHECK(entries[1].name_len == 2 && memcmp(entries[1].name, "kv", 2) == 0 && entries[1].value == 0.25);
    lb_load_report_free(report);

    /* A serialized OrcaLoadReport: cpu_utilization (field 1, a double) = 0.75, then a
     * request_cost entry {"db": 2} (field 4). */
    const uint8_t proto[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe8, 0x3f,
                             0x22, 0x0d, 0x0a, 0x02, 'd', 'b', 0x11, 0, 0, 0, 0, 0, 0, 0, 0x40};
    CHECK_OK(lb_load_report_parse(proto, sizeof proto, &report));
    CHECK_OK(lb_load_report_values(report, &values));
    CHECK(values.cpu_utilization == 0.75);
    CHECK_OK(lb_load_report_entries(report, entries, 2, &len));
    CHECK(len == 1 && entries[0].map == LB_LOAD_REQUEST_COST && entries[0].value == 2.0);
    CHECK_STR(entries[0].name, "db");
    lb_load_report_free(report);

    /* NULL with length 0 is the empty report. */
    CHECK_OK(lb_load_report_parse(NULL, 0, &report));
    CHECK_OK(lb_load_report_entries(report, NULL, 0, &len));
    CHECK(len == 0);
    lb_load_report_free(report);

    /* Errors: nothing allocated, the out-pointer untouched. */
    lb_load_report *untouched = (lb_load_report *)&values;
    CHECK_RESULT(lb_load_report_parse((const uint8_t *)S("TEXT cpu:1"), &untouched), LB_RESULT_INVALID_LOAD_REPORT);
    CHECK_RESULT(lb_load_report_parse(proto, 5, &untouched), LB_RESULT_INVALID_LOAD_REPORT);
    CHECK(untouched == (lb_load_report *)&values);
    CHECK_RESULT(lb_load_report_parse(NULL, 3, &untouched), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_load_report_parse(proto, sizeof proto, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_load_report_values(NULL, &values), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_load_report_entries(NULL, entries, 2, &len), LB_RESULT_NULL_PARAMETER);
    lb_load_report_free(NULL);
}

/* client_side_wrr weighs nodes by their load reports (gRFC A58): given with
 * lb_balancer_report_load or a lease's lb_lease_finish_load. */
static void test_client_side_wrr(void) {
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("blackout_period_ms"), 0));
    CHECK_OK(lb_options_set_str(o, S("error_utilization_penalty"), S("1.0")));
    CHECK_RESULT(lb_options_set_str(o, S("error_utilization_penalty"), S("-1")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    lb_node abc[] = {node("a", 1, 0), node("b", 1, 1), node("c", 1, 2)};
    lb_balancer *b = make("client_side_wrr", o, abc, 3);
    lb_options_free(o);

    lb_load_report *busy = NULL, *idle = NULL;
    CHECK_OK(lb_load_report_parse((const uint8_t *)S("TEXT application_utilization=0.9,rps_fractional=100"), &busy));
    CHECK_OK(lb_load_report_parse((const uint8_t *)S("TEXT application_utilization=0.3,rps_fractional=100"), &idle));
    /* a reports through a lease, b directly; c, silent, weighs the mean. */
    lb_lease *lease = NULL;
    char id[8];
    size_t size = 0;
    CHECK_OK(lb_balancer_acquire(b, NULL, 0, &lease, NULL, id, sizeof id, &size));
    CHECK_STR(id, "a");
    lb_outcome_info ok = {LB_OUTCOME_SUCCESS, 1000000, LB_LATENCY_NONE};
    CHECK_RESULT(lb_lease_finish_load(lease, NULL, busy), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_lease_finish_load(lease, &ok, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_lease_finish_load(lease, &ok, busy));
    CHECK_OK(lb_balancer_report_load(b, S("b"), idle));
    CHECK_RESULT(lb_balancer_report_load(b, S("zz"), idle), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_report_load(b, S("b"), NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_report_load(NULL, S("b"), idle), LB_RESULT_NULL_PARAMETER);
    lb_load_report_free(busy);
    lb_load_report_free(idle);

    /* The acquire built the scheduler before any report: the next build is a second on. */
    struct timespec t = {1, 100000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    int counts[3] = {0, 0, 0};
    for (int i = 0; i < 600; i++) {
        CHECK_OK(pick(b, NULL, id, sizeof id, NULL));
        counts[id[0] - 'a']++;
    }
    CHECK(counts[0] == 100 && counts[1] == 300 && counts[2] == 200);
    lb_balancer_free(b);
}

/* prequal: probes due per pick, targets to probe, answers offered; errors change nothing. */
static void test_prequal_probes(void) {
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_int(o, S("seed"), 7));
    CHECK_OK(lb_options_set_str(o, S("q_rif"), S("0.84")));
    lb_node abc[] = {node("a", 1, 0), node("b", 1, 1), node("c", 1, 2)};
    lb_balancer *b = make("prequal", o, abc, 3);
    lb_options_free(o);
    char id[8];
    size_t due = 99, size = 0, count = 99;
    CHECK_OK(lb_balancer_probes_due(b, &due));
    CHECK(due == 0);
    CHECK_OK(pick(b, NULL, id, sizeof id, NULL)); /* an empty pool: a random node */
    CHECK_OK(lb_balancer_probes_due(b, &due));
    CHECK(due == 3); /* probe_rate 3 per pick */
    lb_pick targets[4];
    char ids[32];
    CHECK_OK(lb_balancer_probe_targets(b, 4, targets, ids, sizeof ids, &size, &count));
    CHECK(count == 3); /* every node once, in a random order */
    CHECK(targets[0].tag + targets[1].tag + targets[2].tag == 3);
    CHECK_RESULT(lb_balancer_probe_targets(b, 4, targets, NULL, 0, NULL, NULL),
                 LB_RESULT_NULL_PARAMETER);
    /* b answers idle and fast: it is picked. */
    CHECK_OK(lb_balancer_offer_probe(b, S("a"), 5, 20000000));
    CHECK_OK(lb_balancer_offer_probe(b, S("b"), 0, 1000000));
    CHECK_RESULT(lb_balancer_offer_probe(b, S("zz"), 0, 1), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_offer_probe(NULL, S("a"), 0, 1), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_probes_due(b, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(pick(b, NULL, id, sizeof id, NULL));
    CHECK_STR(id, "b");
    lb_balancer_free(b);
}

/* Lists the balancer's subset into caller buffers; returns the count (checks the two-call
 * protocol, as list() does for lb_balancer_nodes). */
static size_t subset_of(const lb_balancer *b, lb_pick *picks, size_t cap, char *ids,
                        size_t ids_cap) {
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    lb_result r = lb_balancer_subset(b, NULL, 0, NULL, 0, &count, &size);
    CHECK(r == (count == 0 ? LB_RESULT_OK : LB_RESULT_BUFFER_TOO_SMALL));
    CHECK(count <= cap && size <= ids_cap);
    size_t count2 = 0, size2 = 0;
    CHECK_OK(lb_balancer_subset(b, picks, cap, ids, ids_cap, &count2, &size2));
    CHECK(count2 == count && size2 == size);
    for (size_t i = 0; i < count2 && i < cap; i++) {
        CHECK(picks[i].id >= ids && picks[i].id < ids + ids_cap); /* caller memory */
        CHECK(picks[i].id_len == strlen(picks[i].id));
    }
    return count2;
}

/* Whether two listings name the same ids in the same order. */
static bool same_subset(const lb_pick *a, size_t na, const lb_pick *b, size_t nb) {
    if (na != nb) return false;
    for (size_t i = 0; i < na; i++)
        if (a[i].tag != b[i].tag || strcmp(a[i].id, b[i].id) != 0) return false;
    return true;
}

/* Subsetting (issue 26): the options by name, lb_balancer_subset's listing and buffer
 * protocol, picks inside the subset, membership changes, and every refusal leaving the options
 * and the balancer as they were. */
static void test_subsetting(void) {
    enum { N = 20 };
    char names[N][4];
    lb_node fleet[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "n%02d", i);
        fleet[i] = node(names[i], 1, (uint64_t)i);
    }
    lb_options *o = NULL;
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_str(o, S("subset"), S("random")));
    CHECK_OK(lb_options_set_int(o, S("subset_size"), 5));
    CHECK_OK(lb_options_set_int(o, S("subset_seed"), UINT64_MAX)); /* any 64-bit value */
    CHECK_OK(lb_options_set_int(o, S("subset_seed"), 42));
    CHECK_OK(lb_options_set_int(o, S("client_count"), 3));
    CHECK_OK(lb_options_set_str(o, S("client_index"), S("2")));
    /* Refused values leave the options as they were (checked by the listing below). */
    CHECK_RESULT(lb_options_set_int(o, S("subset"), 1), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("subset"), S("aperture2")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("subset"), S("")), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("subset_size"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("subset_size"), S("five")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("client_count"), 0), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_str(o, S("subset_seed"), S("-1")),
                 LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_options_set_int(o, S("subset_sizes"), 5), LB_RESULT_UNKNOWN_OPTION);

    lb_balancer *b = make("round_robin", o, fleet, N);
    lb_balancer *twin = make("round_robin", o, fleet, N);
    lb_pick picks[N], again[N];
    char ids[N * 4], ids2[N * 4];
    size_t n = subset_of(b, picks, N, ids, sizeof ids);
    CHECK(n == 5);
    /* Node order: the ids (and tags, equal to the indices) ascend. */
    for (size_t i = 1; i < n; i++) CHECK(picks[i - 1].tag < picks[i].tag);
    for (size_t i = 0; i < n; i++) CHECK_STR(picks[i].id, names[picks[i].tag]);
    /* The same options give the same subset; picks never leave it. */
    CHECK(same_subset(picks, n, again, subset_of(twin, again, N, ids2, sizeof ids2)));
    for (int i = 0; i < 50; i++) {
        uint64_t tag = SENTINEL_TAG;
        CHECK_OK(lb_balancer_pick(b, NULL, 0, &tag, NULL, 0, NULL));
        bool inside = false;
        for (size_t j = 0; j < n; j++) inside |= picks[j].tag == tag;
        CHECK(inside);
    }
    /* Another client's seed: another subset of the same size (A68: seeds are per client). */
    CHECK_OK(lb_options_set_int(o, S("subset_seed"), 43));
    lb_balancer *other = make("round_robin", o, fleet, N);
    size_t m = subset_of(other, again, N, ids2, sizeof ids2);
    CHECK(m == 5 && !same_subset(picks, n, again, m));
    lb_balancer_free(other);

    /* Bad calls: the outputs untouched, then the same listing. */
    size_t count = SENTINEL_SIZE, size = SENTINEL_SIZE;
    lb_pick keep[1] = {{SENTINEL_TAG, NULL, 0}};
    CHECK_RESULT(lb_balancer_subset(NULL, picks, N, ids, sizeof ids, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_subset(b, picks, N, ids, sizeof ids, NULL, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_subset(b, picks, N, ids, sizeof ids, &count, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_subset(b, NULL, N, ids, sizeof ids, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_subset(b, picks, N, NULL, 8, &count, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_balancer_subset(b, picks, N, ids, SIZE_MAX, &count, &size),
                 LB_RESULT_INVALID_LENGTH);
    CHECK_RESULT(lb_balancer_subset(b, picks, SIZE_MAX / 2, ids, sizeof ids, &count, &size),
                 LB_RESULT_INVALID_LENGTH);
    CHECK(count == SENTINEL_SIZE && size == SENTINEL_SIZE);
    /* Short buffers: both sizes needed, the entries untouched. */
    CHECK_RESULT(lb_balancer_subset(b, keep, 1, ids, sizeof ids, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(count == 5 && size == 5 * 4 && keep[0].tag == SENTINEL_TAG && keep[0].id == NULL);
    count = size = SENTINEL_SIZE;
    CHECK_RESULT(lb_balancer_subset(b, keep, 5, ids, 19, &count, &size),
                 LB_RESULT_BUFFER_TOO_SMALL);
    CHECK(count == 5 && size == 20);
    CHECK(same_subset(picks, n, again, subset_of(b, again, N, ids2, sizeof ids2)));

    /* Rules between options, checked when a balancer is made: nothing is written. */
    lb_balancer *none = (lb_balancer *)&none; /* any non-NULL value: must stay untouched */
    lb_balancer *const before = none;
    CHECK_RESULT(lb_balancer_new(S("ring"), o, fleet, N, &none), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_OK(lb_options_set_int(o, S("client_index"), 3)); /* == client_count */
    CHECK_RESULT(lb_balancer_new(S("random"), o, fleet, N, &none),
                 LB_RESULT_INVALID_OPTION_VALUE);
    lb_options_free(o);
    CHECK_OK(lb_options_new(&o));
    CHECK_OK(lb_options_set_str(o, S("subset"), S("aperture")));
    CHECK_RESULT(lb_balancer_new(S("random"), o, fleet, N, &none),
                 LB_RESULT_INVALID_OPTION_VALUE); /* no subset_size */
    CHECK(none == before);
    lb_options_free(o);

    /* Membership changes recompute it: a removed or drained member leaves (A68: one member
     * replaced), and restoring the weight brings the same subset back. Failed changes keep it. */
    const char *gone = picks[0].id;
    char gone_id[4];
    snprintf(gone_id, sizeof gone_id, "%s", gone);
    CHECK_OK(lb_balancer_set_weight(b, gone_id, strlen(gone_id), 0));
    m = subset_of(b, again, N, ids2, sizeof ids2);
    CHECK(m == 5);
    size_t kept = 0;
    for (size_t i = 0; i < m; i++) {
        CHECK(strcmp(again[i].id, gone_id) != 0);
        for (size_t j = 0; j < n; j++) kept += strcmp(again[i].id, picks[j].id) == 0;
    }
    CHECK(kept == 4);
    CHECK_RESULT(lb_balancer_set_weight(b, S("zz"), 1), LB_RESULT_UNKNOWN_NODE);
    CHECK_RESULT(lb_balancer_add(b, S("n01"), 1, 0), LB_RESULT_DUPLICATE_NODE);
    CHECK_OK(lb_balancer_set_weight(b, gone_id, strlen(gone_id), 1));
    CHECK(same_subset(picks, n, again, subset_of(b, again, N, ids2, sizeof ids2)));
    CHECK_OK(lb_balancer_remove(b, gone_id, strlen(gone_id)));
    CHECK(subset_of(b, again, N, ids2, sizeof ids2) == 5);

    /* Without subsetting: every node of weight > 0, in node order. */
    lb_node abc[] = {node("a", 1, 0), node("b", 0, 1), node("c", 2, 2)};
    lb_balancer *plain = make("random", NULL, abc, 3);
    CHECK(subset_of(plain, again, N, ids2, sizeof ids2) == 2);
    CHECK_STR(again[0].id, "a");
    CHECK_STR(again[1].id, "c");
    CHECK_OK(lb_balancer_update(plain, NULL, 0));
    count = size = SENTINEL_SIZE;
    CHECK_OK(lb_balancer_subset(plain, NULL, 0, NULL, 0, &count, &size));
    CHECK(count == 0 && size == 0);
    lb_balancer_free(plain);
    lb_balancer_free(twin);
    lb_balancer_free(b);
}

/* The server side (issue 25): a backend counts its requests on an lb_server_load, answers
 * Prequal probes and writes endpoint-load-metrics headers that lb_load_report_parse reads back
 * to the same numbers; a request ends once; NULLs and bad values change nothing. */
static void test_server_load(void) {
    lb_server_load *load = NULL;
    CHECK_RESULT(lb_server_load_new(NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_OK(lb_server_load_new(&load));
    CHECK(load != NULL);

    /* Start three, finish one, cancel one: in flight and the probe's rif follow. */
    lb_server_request a, b, c;
    uint64_t before = lb_now_ns();
    CHECK_OK(lb_server_load_start(load, &a));
    CHECK_OK(lb_server_load_start(load, &b));
    CHECK_OK(lb_server_load_start(load, &c));
    CHECK(a.rif == 0 && b.rif == 1 && c.rif == 2 && a.open == 1 && c.open == 1);
    CHECK(a.started_ns >= before && a.started_ns <= lb_now_ns());
    uint32_t n = 99;
    CHECK_OK(lb_server_load_in_flight(load, &n));
    CHECK(n == 3);
    uint32_t rif = 99;
    uint64_t latency = SENTINEL_TAG;
    CHECK_OK(lb_server_load_probe(load, &rif, &latency));
    CHECK(rif == 3 && latency == 0); /* no success yet: no estimate */

    struct timespec t = {0, 2000000L}; /* 2 ms */
    while (nanosleep(&t, &t) != 0) {
    }
    uint64_t took = 0;
    CHECK_OK(lb_server_load_finish(load, &a, true, &took));
    CHECK(took >= 2000000 && a.open == 0);
    CHECK_OK(lb_server_load_finish(load, &b, false, NULL));
    CHECK_OK(lb_server_load_cancel(load, &c));
    CHECK_OK(lb_server_load_in_flight(load, &n));
    CHECK(n == 0);
    /* a was alone when it started: the estimate at rif 0 is its latency. */
    CHECK_OK(lb_server_load_probe(load, &rif, &latency));
    CHECK(rif == 0 && latency / 1000 == took / 1000); /* kept in microseconds */

    /* Ending the same request again is refused and counts nothing. */
    took = SENTINEL_TAG;
    CHECK_RESULT(lb_server_load_finish(load, &a, true, &took), LB_RESULT_LEASE_FINISHED);
    CHECK_RESULT(lb_server_load_cancel(load, &c), LB_RESULT_LEASE_FINISHED);
    CHECK(took == SENTINEL_TAG);
    lb_server_request zero = {0, 0, 0};
    CHECK_RESULT(lb_server_load_finish(load, &zero, true, NULL), LB_RESULT_LEASE_FINISHED);
    CHECK_OK(lb_server_load_in_flight(load, &n));
    CHECK(n == 0);
    CHECK_STR(lb_result_name(LB_RESULT_LEASE_FINISHED), "LB_LEASE_FINISHED");

    /* Utilisations: a bad value is refused and the old one stays. */
    CHECK_OK(lb_server_load_set_cpu_utilization(load, 0.5));
    CHECK_OK(lb_server_load_set_mem_utilization(load, 0.25));
    CHECK_OK(lb_server_load_set_application_utilization(load, 1.5)); /* may exceed 1 */
    CHECK_RESULT(lb_server_load_set_cpu_utilization(load, -1.0), LB_RESULT_INVALID_LOAD_REPORT);
    CHECK_RESULT(lb_server_load_set_mem_utilization(load, 1.5), LB_RESULT_INVALID_LOAD_REPORT);
    CHECK_RESULT(lb_server_load_set_application_utilization(load, NAN), LB_RESULT_INVALID_LOAD_REPORT);
    lb_load_report *report = NULL;
    CHECK_OK(lb_server_load_report(load, &report));
    lb_load_values values;
    CHECK_OK(lb_load_report_values(report, &values));
    CHECK(values.cpu_utilization == 0.5 && values.mem_utilization == 0.25);
    CHECK(values.application_utilization == 1.5);
    CHECK(values.rps_fractional > 0.0 && values.rps_fractional == 2 * values.eps); /* 2 done, 1 failed */
    lb_load_entry entries[2];
    size_t len = 0;
    CHECK_OK(lb_load_report_entries(report, entries, 2, &len));
    CHECK(len == 2);
    CHECK_STR(entries[0].name, "latency_ms");
    CHECK_STR(entries[1].name, "rif");
    CHECK(entries[1].value == 0.0);
    lb_load_report_free(report);

    /* Headers: the size first, then the value, which parses to the same numbers. */
    const uint32_t forms[] = {LB_HEADER_TEXT, LB_HEADER_BIN};
    for (size_t i = 0; i < 2; i++) {
        size_t size = SENTINEL_SIZE;
        CHECK_RESULT(lb_server_load_header(load, forms[i], NULL, 0, &size), LB_RESULT_BUFFER_TOO_SMALL);
        CHECK(size > 5 && size < 300);
        char small[4] = {'x', 'x', 'x', 'x'};
        CHECK_RESULT(lb_server_load_header(load, forms[i], small, sizeof small, &size),
                     LB_RESULT_BUFFER_TOO_SMALL);
        CHECK(small[0] == 'x');
        char header[512];
        CHECK_OK(lb_server_load_header(load, forms[i], header, sizeof header, &size));
        CHECK(size == strlen(header) + 1);
        CHECK(strncmp(header, forms[i] == LB_HEADER_TEXT ? "TEXT " : "BIN ", 4) == 0);
        lb_load_report *parsed = NULL;
        CHECK_OK(lb_load_report_parse((const uint8_t *)header, size - 1, &parsed));
        lb_load_values got;
        CHECK_OK(lb_load_report_values(parsed, &got));
        CHECK(got.cpu_utilization == 0.5 && got.mem_utilization == 0.25);
        CHECK(got.application_utilization == 1.5 && got.eps > 0.0);
        lb_load_entry named[2];
        CHECK_OK(lb_load_report_entries(parsed, named, 2, &len));
        CHECK(len == 2 && named[1].value == 0.0);
        lb_load_report_free(parsed);
    }

    /* Bad arguments: NULLs and an unknown form; no output written. */
    size_t size = SENTINEL_SIZE;
    char header[512];
    CHECK_RESULT(lb_server_load_header(load, 2, header, sizeof header, &size), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK(size == SENTINEL_SIZE);
    CHECK_RESULT(lb_server_load_header(load, LB_HEADER_TEXT, header, sizeof header, NULL),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_header(load, LB_HEADER_TEXT, NULL, 8, &size), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_header(NULL, LB_HEADER_TEXT, header, sizeof header, &size),
                 LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_start(NULL, &a), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_start(load, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK(a.open == 0);
    CHECK_RESULT(lb_server_load_finish(NULL, &a, true, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_finish(load, NULL, true, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_cancel(load, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_probe(load, NULL, &latency), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_probe(NULL, &rif, &latency), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_in_flight(NULL, &n), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_in_flight(load, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_set_cpu_utilization(NULL, 0.5), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_report(NULL, &report), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_report(load, NULL), LB_RESULT_NULL_PARAMETER);
    lb_server_load_free(load);
    lb_server_load_free(NULL);

    /* Another window and latency max age: a 1 ms max age forgets a sample 5 ms old; values out
     * of range are refused, nothing allocated. */
    load = NULL;
    CHECK_RESULT(lb_server_load_new_with(10000, 1000, NULL), LB_RESULT_NULL_PARAMETER);
    CHECK_RESULT(lb_server_load_new_with(999, 1000, &load), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_server_load_new_with(10000, 0, &load), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK_RESULT(lb_server_load_new_with(10000, 3600001, &load), LB_RESULT_INVALID_OPTION_VALUE);
    CHECK(load == NULL);
    CHECK_OK(lb_server_load_new_with(60000, 1, &load));
    lb_server_request d;
    CHECK_OK(lb_server_load_start(load, &d));
    CHECK_OK(lb_server_load_finish(load, &d, true, NULL));
    struct timespec five = {0, 5000000L}; /* 5 ms */
    while (nanosleep(&five, &five) != 0) {
    }
    CHECK_OK(lb_server_load_probe(load, &rif, &latency));
    CHECK(rif == 0 && latency == 0);
    lb_server_load_free(load);
}

int main(void) {
    test_version_and_names();
    test_client_side_wrr();
    test_prequal_probes();
    test_subsetting();
    test_options();
    test_new_errors();
    test_membership();
    test_picks();
    test_id_size_bound();
    test_no_dangling();
    test_batches_fail_like_a_pick();
    test_id_buffer_needs_its_size_output();
    test_buffer_too_small_still_picks();
    test_new_options();
    test_options_in_any_order();
    test_leases_report_stats();
    test_least_connections_reads_leases();
    test_pick_hash();
    test_health();
    test_outcome_kinds();
    test_budgets();
    test_requests();
    test_located_nodes();
    test_locality_routing();
    test_load_reports();
    test_server_load();
    return check_report("test_api");
}
