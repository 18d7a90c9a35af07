/* lb_balancer_pick as a C program sees it: through liblb.so's PLT, with the same balancers
 * as ffi/benches/pick.rs (16 nodes, weights 1 + i % 3, seed 1, 1024 keys for the keyed
 * algorithms). Best of 21 samples of 2^20 picks (the machine is shared: the fastest sample is
 * the least disturbed one), ns per pick. Not part of the test command:
 *   cargo build -p liblb-ffi --release
 *   cc -std=c11 -O2 -Iinclude tests/c/bench_pick.c -Ltarget/release -llb \
 *      -Wl,-rpath,$PWD/target/release -o /tmp/bench_pick && /tmp/bench_pick
 * (liblb.so has the soname liblb.so.0: symlink it next to liblb.so first, see
 * docs/benchmarks-c.md). */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lb.h"

#define SAMPLES 21
#define ITERS (1u << 20)

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static char ids[16][32];
static char keys[1024][16];
static size_t key_lens[1024];
static volatile uint64_t sink;

static double run(const lb_balancer *b, int keyed, int copy_id) {
    double samples[SAMPLES];
    for (int s = 0; s < SAMPLES; s++) {
        uint64_t acc = 0;
        char buf[32];
        size_t size = 0;
        double start = now_ns();
        for (unsigned i = 0; i < ITERS; i++) {
            uint64_t tag = 0;
            const char *key = keyed ? keys[i & 1023] : NULL;
            size_t len = keyed ? key_lens[i & 1023] : 0;
            lb_result r = copy_id ? lb_balancer_pick(b, key, len, &tag, buf, sizeof buf, &size)
                                  : lb_balancer_pick(b, key, len, &tag, NULL, 0, NULL);
            if (r != LB_RESULT_OK) abort();
            acc += tag + (uint64_t)(copy_id ? buf[0] : 0);
        }
        samples[s] = (now_ns() - start) / ITERS;
        sink = acc;
    }
    qsort(samples, SAMPLES, sizeof samples[0], cmp);
    return samples[0];
}

int main(void) {
    lb_node nodes[16];
    for (int i = 0; i < 16; i++) {
        snprintf(ids[i], sizeof ids[i], "10.0.0.%d:8080", i);
        nodes[i] = (lb_node){ids[i], strlen(ids[i]), 1 + (uint32_t)(i % 3), (uint64_t)i};
    }
    for (int i = 0; i < 1024; i++)
        key_lens[i] = (size_t)snprintf(keys[i], sizeof keys[i], "user-%d", i);
    printf("| algorithm | C via liblb.so, tag (ns) | C via liblb.so, tag + id copy (ns) |\n|---|---|---|\n");
    for (size_t a = 0; lb_algorithm_name(a); a++) {
        const char *name = lb_algorithm_name(a);
        lb_options *o = NULL;
        lb_balancer *b = NULL;
        if (lb_options_new(&o) || lb_options_set_int(o, "seed", 4, 1) ||
            lb_balancer_new(name, strlen(name), o, nodes, 16, &b))
            return 1;
        lb_options_free(o);
        int keyed = strcmp(name, "source_hash") == 0 || strcmp(name, "ring") == 0;
        double tag_ns = run(b, keyed, 0);
        double id_ns = run(b, keyed, 1);
        printf("| %s | %.2f | %.2f |\n", name, tag_ns, id_ns);
        lb_balancer_free(b);
    }
    return 0;
}
