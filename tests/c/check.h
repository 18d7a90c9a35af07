/* Tiny assertion helpers shared by liblb's C tests. A failed check prints where and why, and
 * the test exits non-zero at the end (so one run reports every failure). */
#ifndef LB_TEST_CHECK_H
#define LB_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

#include "lb.h"

static int check_failures = 0;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);    \
            check_failures++;                                                           \
        }                                                                               \
    } while (0)

/* Checks that an expression returns the expected lb_result, naming both on failure. */
#define CHECK_RESULT(expr, expected)                                                    \
    do {                                                                                \
        lb_result check_got_ = (expr);                                                  \
        lb_result check_want_ = (expected);                                             \
        if (check_got_ != check_want_) {                                                \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s\n", __FILE__, __LINE__, \
                    #expr, lb_result_name(check_got_), lb_result_name(check_want_));    \
            check_failures++;                                                           \
        }                                                                               \
    } while (0)

#define CHECK_OK(expr) CHECK_RESULT(expr, LB_RESULT_OK)

#define CHECK_STR(got, want)                                                            \
    do {                                                                                \
        const char *check_g_ = (got);                                                   \
        const char *check_w_ = (want);                                                  \
        if (check_g_ == NULL || strcmp(check_g_, check_w_) != 0) {                      \
            fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, \
                    #got, check_g_ ? check_g_ : "(null)", check_w_);                    \
            check_failures++;                                                           \
        }                                                                               \
    } while (0)

/* A string literal as the (pointer, length) pair every liblb function takes. */
#define S(lit) (lit), (sizeof(lit) - 1)

static int check_report(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) FAILED\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
