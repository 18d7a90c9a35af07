/* Replays every case of tests/vectors/vectors.json (the file the Rust core generates and
 * every language checks) through the C API: same answers, same error codes, and after each
 * expected error the node list is unchanged. Usage: test_vectors path/to/vectors.json */
#define _POSIX_C_SOURCE 199309L /* nanosleep */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "json.h"

#define IDS_CAP 65536

static const char *case_name = "";
static size_t step_index = 0;

#define FAIL(...)                                                                  \
    do {                                                                           \
        fprintf(stderr, "case %s, step %zu: ", case_name, step_index);             \
        fprintf(stderr, __VA_ARGS__);                                              \
        fputc('\n', stderr);                                                       \
        check_failures++;                                                          \
    } while (0)

/* Each node's tag is a hash of its id, so every answer's tag can be checked against its id. */
static uint64_t tag_of(const char *id, size_t len) {
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)id[i]) * UINT64_C(0x100000001b3);
    return h;
}

static int same_bytes(const char *a, size_t a_len, const json *b) {
    return b && b->kind == JSON_STRING && a_len == b->len && memcmp(a, b->str, a_len) == 0;
}

/* JSON [[id, weight], ...] or [[id, weight, locality, priority], ...] -> lb_located_node
 * array (strings borrowed from the JSON tree); *located says whether any node had a place, so
 * the plain form still goes through lb_node and the plain calls. */
static lb_located_node *nodes_of(const json *list, size_t *n, bool *located) {
    *n = list ? list->len : 0;
    *located = false;
    lb_located_node *nodes = calloc(*n ? *n : 1, sizeof *nodes);
    for (size_t i = 0; i < *n; i++) {
        const json *node = &list->items[i];
        nodes[i].id = node->items[0].str;
        nodes[i].id_len = node->items[0].len;
        nodes[i].weight = (uint32_t)node->items[1].integer;
        nodes[i].tag = tag_of(node->items[0].str, node->items[0].len);
        if (node->len == 4) {
            nodes[i].locality = node->items[2].str;
            nodes[i].locality_len = node->items[2].len;
            nodes[i].priority = (uint32_t)node->items[3].integer;
            *located = true;
        }
    }
    return nodes;
}

/* The plain lb_node form of located nodes without a place. */
static lb_node *plain_nodes(const lb_located_node *located, size_t n) {
    lb_node *nodes = calloc(n ? n : 1, sizeof *nodes);
    for (size_t i = 0; i < n; i++)
        nodes[i] = (lb_node){located[i].id, located[i].id_len, located[i].weight, located[i].tag};
    return nodes;
}

/* The current node list as text "id:weight@locality#priority,..." (malloc'ed), to prove
 * errors change nothing (places included). */
static char *snapshot(const lb_balancer *b) {
    size_t count = 0, size = 0;
    lb_result r = lb_balancer_located_nodes(b, NULL, 0, NULL, 0, &count, &size);
    if (r != LB_RESULT_OK && r != LB_RESULT_BUFFER_TOO_SMALL) FAIL("nodes: %s", lb_result_name(r));
    lb_located_node *nodes = calloc(count ? count : 1, sizeof *nodes);
    char *strings = malloc(size ? size : 1);
    r = lb_balancer_located_nodes(b, nodes, count, strings, size, &count, &size);
    if (r != LB_RESULT_OK) FAIL("nodes: %s", lb_result_name(r));
    char *text = malloc(size + count * 48 + 1);
    size_t at = 0;
    for (size_t i = 0; r == LB_RESULT_OK && i < count; i++) {
        if (nodes[i].tag != tag_of(nodes[i].id, nodes[i].id_len)) FAIL("listed tag mismatch");
        at += (size_t)sprintf(text + at, "%s:%u@%s#%u,", nodes[i].id, (unsigned)nodes[i].weight,
                              nodes[i].locality, (unsigned)nodes[i].priority);
    }
    text[at] = '\0';
    free(nodes);
    free(strings);
    return text;
}

/* JSON [[locality, number], ...] -> the C arrays of lb_balancer_set_locality_weights and
 * lb_balancer_set_local_localities (strings borrowed from the JSON tree). */
static lb_locality_weight *locality_weights_of(const json *list) {
    lb_locality_weight *w = calloc(list->len ? list->len : 1, sizeof *w);
    for (size_t i = 0; i < list->len; i++)
        w[i] = (lb_locality_weight){list->items[i].items[0].str, list->items[i].items[0].len,
                                    (uint32_t)list->items[i].items[1].integer};
    return w;
}

static lb_locality_count *locality_counts_of(const json *list) {
    lb_locality_count *c = calloc(list->len ? list->len : 1, sizeof *c);
    for (size_t i = 0; i < list->len; i++)
        c[i] = (lb_locality_count){list->items[i].items[0].str, list->items[i].items[0].len,
                                   list->items[i].items[1].integer};
    return c;
}

/* Checks answers (ids and tags) against a JSON array of expected ids. */
static void check_picks(const char *op, const lb_pick *picks, size_t n, const json *expect) {
    if (!expect || expect->kind != JSON_ARRAY || expect->len != n) {
        FAIL("%s: %zu answers, expected %zu", op, n, expect ? expect->len : 0);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!same_bytes(picks[i].id, picks[i].id_len, &expect->items[i]))
            FAIL("%s[%zu]: got %s, expected %s", op, i, picks[i].id, expect->items[i].str);
        if (picks[i].tag != tag_of(picks[i].id, picks[i].id_len)) FAIL("%s[%zu]: tag", op, i);
    }
}

/* The case's leases, numbered in acquire order (NULL once ended). */
#define MAX_LEASES 256
static lb_lease *leases[MAX_LEASES];
static size_t lease_count = 0;

static lb_lease *take_lease(const json *step) {
    const json *n = json_get(step, "lease");
    if (!n || n->integer >= lease_count || !leases[n->integer]) {
        FAIL("no open lease %llu", n ? (unsigned long long)n->integer : 0ULL);
        return NULL;
    }
    lb_lease *lease = leases[n->integer];
    leases[n->integer] = NULL;
    return lease;
}

/* A finish or report step's outcome: ok, or the failure `kind` (error by default; an
 * unknown kind name is an unknown lb_outcome code, which C must refuse), `latency_ms` and
 * `retry_after_ms` when given (else LB_LATENCY_NONE). */
static lb_outcome_info outcome_of(const json *step) {
    const json *ok = json_get(step, "ok");
    const json *kind = json_get(step, "kind");
    const json *latency = json_get(step, "latency_ms");
    const json *retry_after = json_get(step, "retry_after_ms");
    lb_outcome_info info = {LB_OUTCOME_FAILURE, LB_LATENCY_NONE, LB_LATENCY_NONE};
    if (ok && ok->boolean) {
        info.outcome = LB_OUTCOME_SUCCESS;
    } else if (kind) {
        info.outcome = strcmp(kind->str, "error") == 0        ? LB_OUTCOME_ERROR
                       : strcmp(kind->str, "timeout") == 0    ? LB_OUTCOME_TIMEOUT
                       : strcmp(kind->str, "overloaded") == 0 ? LB_OUTCOME_OVERLOADED
                                                              : UINT32_MAX;
    }
    if (latency) info.latency_ns = latency->integer * UINT64_C(1000000);
    if (retry_after) info.retry_after_ns = retry_after->integer * UINT64_C(1000000);
    return info;
}

/* Whether the step can go through the plain calls (lb_lease_finish, lb_balancer_report): no
 * retry-after. Both forms are exercised by the vectors. */
static bool plain(const lb_outcome_info *info) { return info->retry_after_ns == LB_LATENCY_NONE; }

/* The "latency" op: every node's estimate in whole milliseconds (rounded), or null. */
static lb_result check_latency(const lb_balancer *b, const json *expect);

/* Every node's stats (one snapshot): *stats_out and *ids_out to free; the count in *count. */
static lb_result read_stats(const lb_balancer *b, lb_node_stats **stats_out, char **ids_out,
                            size_t *count) {
    size_t size = 0;
    *count = 0;
    *stats_out = NULL;
    *ids_out = NULL;
    lb_result r = lb_balancer_stats(b, NULL, 0, NULL, 0, count, &size);
    if (r != LB_RESULT_OK && r != LB_RESULT_BUFFER_TOO_SMALL) return r;
    *stats_out = calloc(*count ? *count : 1, sizeof **stats_out);
    *ids_out = malloc(size ? size : 1);
    return lb_balancer_stats(b, *stats_out, *count, *ids_out, size, count, &size);
}

/* Checks lb_balancer_stats against [[id, in_flight, requests, failures], ...]. */
static lb_result check_stats(const lb_balancer *b, const json *expect) {
    lb_node_stats *stats;
    char *ids;
    size_t count;
    lb_result r = read_stats(b, &stats, &ids, &count);
    if (r == LB_RESULT_OK) {
        if (!expect || expect->len != count) {
            FAIL("stats: %zu nodes, expected %zu", count, expect ? expect->len : 0);
        } else {
            for (size_t i = 0; i < count; i++) {
                const json *e = &expect->items[i];
                if (!same_bytes(stats[i].id, stats[i].id_len, &e->items[0]) ||
                    stats[i].in_flight != e->items[1].integer ||
                    stats[i].requests != e->items[2].integer ||
                    stats[i].failures != e->items[3].integer)
                    FAIL("stats[%zu]: got [%s, %zu, %llu, %llu], expected [%s, %llu, %llu, %llu]",
                         i, stats[i].id, stats[i].in_flight,
                         (unsigned long long)stats[i].requests,
                         (unsigned long long)stats[i].failures, e->items[0].str,
                         (unsigned long long)e->items[1].integer,
                         (unsigned long long)e->items[2].integer,
                         (unsigned long long)e->items[3].integer);
                if (stats[i].tag != tag_of(stats[i].id, stats[i].id_len)) FAIL("stats tag");
                /* A node without requests has no latency estimate (one with requests may
                 * have none either: failures of unknown latency without a penalty). */
                if (stats[i].requests == 0 && stats[i].latency_ns != LB_LATENCY_NONE)
                    FAIL("stats[%zu]: latency %llu with %llu requests", i,
                         (unsigned long long)stats[i].latency_ns,
                         (unsigned long long)stats[i].requests);
            }
        }
    }
    free(stats);
    free(ids);
    return r;
}

static lb_result check_latency(const lb_balancer *b, const json *expect) {
    lb_node_stats *stats;
    char *ids;
    size_t count;
    lb_result r = read_stats(b, &stats, &ids, &count);
    if (r == LB_RESULT_OK) {
        if (!expect || expect->len != count) {
            FAIL("latency: %zu nodes, expected %zu", count, expect ? expect->len : 0);
        } else {
            for (size_t i = 0; i < count; i++) {
                const json *e = &expect->items[i];
                bool none = stats[i].latency_ns == LB_LATENCY_NONE;
                uint64_t ms = (stats[i].latency_ns + 500000) / 1000000;
                if (!same_bytes(stats[i].id, stats[i].id_len, &e->items[0]) ||
                    none != (e->items[1].kind == JSON_NULL) ||
                    (!none && ms != e->items[1].integer))
                    FAIL("latency[%zu]: got [%s, %llu ns], expected [%s, %llu ms]", i,
                         stats[i].id, (unsigned long long)stats[i].latency_ns, e->items[0].str,
                         (unsigned long long)e->items[1].integer);
            }
        }
    }
    free(stats);
    free(ids);
    return r;
}

/* The "health" op: every node's status name, in order. */
static lb_result check_health(const lb_balancer *b, const json *expect) {
    static const char *const names[] = {"healthy", "warming", "ejected", "down", "overloaded"};
    lb_node_stats *stats;
    char *ids;
    size_t count;
    lb_result r = read_stats(b, &stats, &ids, &count);
    if (r == LB_RESULT_OK) {
        if (!expect || expect->len != count) {
            FAIL("health: %zu nodes, expected %zu", count, expect ? expect->len : 0);
        } else {
            for (size_t i = 0; i < count; i++) {
                const json *e = &expect->items[i];
                const char *name = stats[i].status < 5 ? names[stats[i].status] : "?";
                if (!same_bytes(stats[i].id, stats[i].id_len, &e->items[0]) ||
                    strcmp(name, e->items[1].str) != 0)
                    FAIL("health[%zu]: got [%s, %s], expected [%s, %s]", i, stats[i].id, name,
                         e->items[0].str, e->items[1].str);
                /* Ejected, paused and warming nodes say until when; the others say 0. */
                bool timed = stats[i].status == LB_NODE_EJECTED ||
                             stats[i].status == LB_NODE_OVERLOADED ||
                             stats[i].status == LB_NODE_WARMING;
                if (timed != (stats[i].until_ns != 0)) FAIL("health[%zu]: until_ns", i);
            }
        }
    }
    free(stats);
    free(ids);
    return r;
}

/* Runs one step; returns the result code to compare with expect_error. */
static lb_result run_step(const lb_balancer *b, const json *step, char *ids) {
    const char *op = json_get(step, "op")->str;
    const json *key = json_get(step, "key");
    const json *expect = json_get(step, "expect");
    const json *id = json_get(step, "id");
    const json *weight = json_get(step, "weight");
    size_t size = 0, count = 0;
    lb_result r;
    if (strcmp(op, "pick") == 0) {
        uint64_t tag = 0;
        r = lb_balancer_pick(b, key ? key->str : NULL, key ? key->len : 0, &tag, ids, IDS_CAP,
                             &size);
        if (r == LB_RESULT_OK) {
            if (!same_bytes(ids, size - 1, expect))
                FAIL("pick: got %s, expected %s", ids, expect ? expect->str : "(error)");
            if (tag != tag_of(ids, size - 1)) FAIL("pick: tag of %s", ids);
        }
    } else if (strcmp(op, "pick_many") == 0) {
        const json *keys = json_get(step, "keys");
        lb_key *k = calloc(keys->len ? keys->len : 1, sizeof *k);
        lb_pick *picks = calloc(keys->len ? keys->len : 1, sizeof *picks);
        for (size_t i = 0; i < keys->len; i++) {
            k[i].key = keys->items[i].str;
            k[i].key_len = keys->items[i].len;
        }
        r = lb_balancer_pick_many(b, k, keys->len, picks, ids, IDS_CAP, &size);
        if (r == LB_RESULT_OK) check_picks("pick_many", picks, keys->len, expect);
        free(k);
        free(picks);
    } else if (strcmp(op, "attempts") == 0) {
        size_t limit = (size_t)json_get(step, "limit")->integer;
        lb_pick *picks = calloc(limit ? limit : 1, sizeof *picks);
        r = lb_balancer_attempts(b, key ? key->str : NULL, key ? key->len : 0, picks, limit, ids,
                                 IDS_CAP, &size, &count);
        if (r == LB_RESULT_OK) check_picks("attempts", picks, count, expect);
        free(picks);
    } else if (strcmp(op, "add") == 0) {
        const json *locality = json_get(step, "locality");
        if (locality)
            r = lb_balancer_add_located(b, id->str, id->len, (uint32_t)weight->integer,
                                        tag_of(id->str, id->len), locality->str, locality->len,
                                        (uint32_t)json_get(step, "priority")->integer);
        else
            r = lb_balancer_add(b, id->str, id->len, (uint32_t)weight->integer,
                                tag_of(id->str, id->len));
    } else if (strcmp(op, "set_location") == 0) {
        const json *locality = json_get(step, "locality");
        r = lb_balancer_set_location(b, id->str, id->len, locality->str, locality->len,
                                     (uint32_t)json_get(step, "priority")->integer);
    } else if (strcmp(op, "set_locality_weights") == 0) {
        const json *list = json_get(step, "weights");
        lb_locality_weight *w = locality_weights_of(list);
        r = lb_balancer_set_locality_weights(b, w, list->len);
        free(w);
    } else if (strcmp(op, "set_local_locality") == 0) {
        const json *locality = json_get(step, "locality");
        r = locality && locality->kind == JSON_STRING
                ? lb_balancer_set_local_locality(b, locality->str, locality->len)
                : lb_balancer_clear_local_locality(b);
    } else if (strcmp(op, "set_local_localities") == 0) {
        const json *list = json_get(step, "spread");
        lb_locality_count *c = locality_counts_of(list);
        r = lb_balancer_set_local_localities(b, c, list->len);
        free(c);
    } else if (strcmp(op, "remove") == 0) {
        r = lb_balancer_remove(b, id->str, id->len);
    } else if (strcmp(op, "set_weight") == 0) {
        r = lb_balancer_set_weight(b, id->str, id->len, (uint32_t)weight->integer);
    } else if (strcmp(op, "update") == 0) {
        size_t n;
        bool located;
        lb_located_node *nodes = nodes_of(json_get(step, "nodes"), &n, &located);
        if (located) {
            r = lb_balancer_update_located(b, nodes, n);
        } else {
            lb_node *plain_form = plain_nodes(nodes, n);
            r = lb_balancer_update(b, plain_form, n);
            free(plain_form);
        }
        free(nodes);
    } else if (strcmp(op, "pick_hash") == 0) {
        const char *text = json_get(step, "hash")->str;
        char *end = NULL;
        uint64_t hash = strtoull(text, &end, 10);
        if (!end || *end) FAIL("pick_hash: hash %s is not decimal", text);
        uint64_t tag = 0;
        r = lb_balancer_pick_hash(b, hash, &tag, ids, IDS_CAP, &size);
        if (r == LB_RESULT_OK) {
            if (!same_bytes(ids, size - 1, expect))
                FAIL("pick_hash: got %s, expected %s", ids, expect ? expect->str : "(error)");
            if (tag != tag_of(ids, size - 1)) FAIL("pick_hash: tag of %s", ids);
        }
    } else if (strcmp(op, "acquire") == 0) {
        uint64_t tag = 0;
        lb_lease *lease = NULL;
        r = lb_balancer_acquire(b, key ? key->str : NULL, key ? key->len : 0, &lease, &tag, ids,
                                IDS_CAP, &size);
        if (r == LB_RESULT_OK) {
            if (!same_bytes(ids, size - 1, expect))
                FAIL("acquire: got %s, expected %s", ids, expect ? expect->str : "(error)");
            if (tag != tag_of(ids, size - 1)) FAIL("acquire: tag of %s", ids);
            if (lease_count == MAX_LEASES) {
                FAIL("more than %d leases", MAX_LEASES);
                lb_lease_cancel(lease);
            } else {
                leases[lease_count++] = lease;
            }
        }
    } else if (strcmp(op, "finish") == 0) {
        lb_outcome_info info = outcome_of(step);
        /* A finish with the server's load report parses it first, as a caller would. */
        const json *load = json_get(step, "load");
        lb_load_report *report = NULL;
        r = load ? lb_load_report_parse((const uint8_t *)load->str, load->len, &report)
                 : LB_RESULT_OK;
        lb_lease *lease = r == LB_RESULT_OK ? take_lease(step) : NULL;
        if (lease) {
            r = report         ? lb_lease_finish_load(lease, &info, report)
                : plain(&info) ? lb_lease_finish(lease, info.outcome, info.latency_ns)
                               : lb_lease_finish_info(lease, &info);
            /* A failed finish leaves the lease with the caller: it is open still. */
            if (r != LB_RESULT_OK) leases[json_get(step, "lease")->integer] = lease;
        }
        lb_load_report_free(report);
    } else if (strcmp(op, "offer_probe") == 0) {
        uint64_t latency_ns = (uint64_t)json_get(step, "latency_ms")->integer * 1000000u;
        r = lb_balancer_offer_probe(b, id->str, id->len, (uint32_t)json_get(step, "rif")->integer,
                                    latency_ns);
    } else if (strcmp(op, "probe_targets") == 0) {
        size_t want = (size_t)json_get(step, "count")->integer;
        lb_pick *picks = calloc(want ? want : 1, sizeof *picks);
        r = lb_balancer_probe_targets(b, want, picks, ids, IDS_CAP, &size, &count);
        if (r == LB_RESULT_OK) check_picks("probe_targets", picks, count, expect);
        free(picks);
    } else if (strcmp(op, "subset") == 0) {
        size_t cap = 0;
        r = lb_balancer_subset(b, NULL, 0, NULL, 0, &count, &size);
        lb_pick *picks = NULL;
        while (r == LB_RESULT_BUFFER_TOO_SMALL && size <= IDS_CAP) {
            free(picks);
            cap = count;
            picks = calloc(cap ? cap : 1, sizeof *picks);
            r = lb_balancer_subset(b, picks, cap, ids, IDS_CAP, &count, &size);
        }
        if (r == LB_RESULT_OK) check_picks("subset", picks, count, expect);
        free(picks);
    } else if (strcmp(op, "probes_due") == 0) {
        size_t due = 0;
        r = lb_balancer_probes_due(b, &due);
        if (r == LB_RESULT_OK && (!expect || due != expect->integer))
            FAIL("probes_due: got %zu, expected %llu", due,
                 expect ? (unsigned long long)expect->integer : 0ull);
    } else if (strcmp(op, "report_load") == 0) {
        const json *load = json_get(step, "load");
        lb_load_report *report = NULL;
        r = lb_load_report_parse((const uint8_t *)load->str, load->len, &report);
        if (r == LB_RESULT_OK) r = lb_balancer_report_load(b, id->str, id->len, report);
        lb_load_report_free(report);
    } else if (strcmp(op, "cancel") == 0) {
        lb_lease_cancel(take_lease(step));
        r = LB_RESULT_OK;
    } else if (strcmp(op, "report") == 0) {
        lb_outcome_info info = outcome_of(step);
        r = plain(&info) ? lb_balancer_report(b, id->str, id->len, info.outcome, info.latency_ns)
                         : lb_balancer_report_info(b, id->str, id->len, &info);
    } else if (strcmp(op, "sleep") == 0) {
        uint64_t ms = json_get(step, "ms")->integer;
        struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0) {
        }
        r = LB_RESULT_OK;
    } else if (strcmp(op, "latency") == 0) {
        r = check_latency(b, expect);
    } else if (strcmp(op, "stats") == 0) {
        r = check_stats(b, expect);
    } else if (strcmp(op, "health") == 0) {
        r = check_health(b, expect);
    } else if (strcmp(op, "mark_down") == 0) {
        r = lb_balancer_mark_down(b, id->str, id->len);
    } else if (strcmp(op, "mark_up") == 0) {
        r = lb_balancer_mark_up(b, id->str, id->len);
    } else if (strcmp(op, "panic") == 0) {
        bool panic = false;
        r = lb_balancer_panic(b, &panic);
        if (r == LB_RESULT_OK && (!expect || expect->kind != JSON_BOOL || panic != expect->boolean))
            FAIL("panic: got %d", panic);
    } else {
        FAIL("unknown op %s", op);
        r = LB_RESULT_OK;
    }
    return r;
}

/* Builds a case's balancer into *out; returns the first error (an option refused by name, or
 * the balancer refused by lb_balancer_new), leaving *out NULL then. */
static lb_result try_build(const json *c, lb_balancer **out) {
    *out = NULL;
    lb_options *options = NULL;
    lb_result r = lb_options_new(&options);
    if (r != LB_RESULT_OK) return r;
    const json *opts = json_get(c, "options");
    for (size_t i = 0; opts && i < opts->len; i++) {
        const char *name = opts->keys[i];
        const json *v = &opts->items[i];
        r = v->kind == JSON_STRING
                ? lb_options_set_str(options, name, strlen(name), v->str, v->len)
                : lb_options_set_int(options, name, strlen(name), v->integer);
        if (r != LB_RESULT_OK) {
            lb_options_free(options);
            return r;
        }
    }
    size_t n;
    bool located;
    lb_located_node *nodes = nodes_of(json_get(c, "nodes"), &n, &located);
    const char *algorithm = json_get(c, "algorithm")->str;
    lb_balancer *b = NULL;
    if (located) {
        r = lb_balancer_new_located(algorithm, strlen(algorithm), options, nodes, n, &b);
    } else {
        lb_node *plain_form = plain_nodes(nodes, n);
        r = lb_balancer_new(algorithm, strlen(algorithm), options, plain_form, n, &b);
        free(plain_form);
    }
    if (r != LB_RESULT_OK && b != NULL) FAIL("new: %s, and a balancer written", lb_result_name(r));
    free(nodes);
    lb_options_free(options);
    *out = b;
    return r;
}

static lb_balancer *build(const json *c) {
    lb_balancer *b = NULL;
    lb_result r = try_build(c, &b);
    if (r != LB_RESULT_OK) FAIL("new: %s", lb_result_name(r));
    return b;
}

/* Replays one budget case ("budgets" in the vectors): builds the object, runs every step at
 * its explicit time, compares the answers. Returns the steps run. */
static size_t run_budget(const json *c) {
    const char *object = json_get(c, "object")->str;
    const json *args = json_get(c, "args");
    const json *expect_error = json_get(c, "expect_error");
    const json *steps = json_get(c, "steps");
    lb_retry_budget *budget = NULL;
    lb_retry_throttle *throttle = NULL;
    lb_adaptive_throttle *adaptive = NULL;
    lb_result r;
#define NUM(name) (json_get(args, name)->number)
#define MS_NS(v) ((v)->integer * UINT64_C(1000000))
    if (strcmp(object, "retry_budget") == 0) {
        r = lb_retry_budget_new(json_get(args, "ttl_ms")->integer,
                                (uint32_t)json_get(args, "min_per_sec")->integer,
                                NUM("retry_percent"), MS_NS(json_get(args, "created_ms")), &budget);
    } else if (strcmp(object, "retry_throttle") == 0) {
        r = lb_retry_throttle_new((uint32_t)json_get(args, "max_tokens")->integer,
                                  NUM("token_ratio"), &throttle);
    } else if (strcmp(object, "adaptive_throttle") == 0) {
        r = lb_adaptive_throttle_new(NUM("k"), json_get(args, "window_ms")->integer,
                                     MS_NS(json_get(args, "created_ms")), &adaptive);
    } else {
        FAIL("unknown budget object %s", object);
        return 0;
    }
    if (expect_error) {
        if (strcmp(lb_result_name(r), expect_error->str) != 0)
            FAIL("new: got %s, expected %s", lb_result_name(r), expect_error->str);
        if (budget || throttle || adaptive) FAIL("new wrote its output on error");
        return 0;
    }
    if (r != LB_RESULT_OK) {
        FAIL("new: %s", lb_result_name(r));
        return 0;
    }
    for (step_index = 0; step_index < steps->len; step_index++) {
        const json *step = &steps->items[step_index];
        const char *op = json_get(step, "op")->str;
        const json *expect = json_get(step, "expect");
        const json *at = json_get(step, "now_ms");
        uint64_t now = at ? MS_NS(at) : 0;
        bool flag = false;
        uint64_t count = 0;
        double value = 0;
        int kind = 0; /* 0: no answer, 1: flag, 2: count */
        if (strcmp(op, "deposit") == 0) {
            r = lb_retry_budget_deposit(budget, now);
        } else if (strcmp(op, "withdraw") == 0) {
            r = lb_retry_budget_withdraw(budget, now, &flag), kind = 1;
        } else if (strcmp(op, "can_withdraw") == 0) {
            r = lb_retry_budget_can_withdraw(budget, now, &flag), kind = 1;
        } else if (strcmp(op, "available") == 0) {
            r = lb_retry_budget_available(budget, now, &count), kind = 2;
        } else if (strcmp(op, "failure") == 0) {
            r = lb_retry_throttle_failure(throttle, &flag), kind = 1;
        } else if (strcmp(op, "success") == 0) {
            r = lb_retry_throttle_success(throttle);
        } else if (strcmp(op, "allows") == 0) {
            r = lb_retry_throttle_allows(throttle, &flag), kind = 1;
        } else if (strcmp(op, "tokens_milli") == 0) {
            r = lb_retry_throttle_tokens(throttle, &value), kind = 2;
            count = (uint64_t)(value * 1000.0 + 0.5);
        } else if (strcmp(op, "rejection_ppb") == 0) {
            r = lb_adaptive_throttle_rejection(adaptive, now, &value), kind = 2;
            count = (uint64_t)(value * 1e9 + 0.5);
        } else if (strcmp(op, "admit") == 0) {
            uint64_t random = strtoull(json_get(step, "random")->str, NULL, 10);
            r = lb_adaptive_throttle_admit(adaptive, now, random, &flag), kind = 1;
        } else if (strcmp(op, "accepted") == 0) {
            r = lb_adaptive_throttle_accepted(adaptive, now);
        } else {
            FAIL("unknown budget op %s", op);
            r = LB_RESULT_OK;
        }
        if (r != LB_RESULT_OK) FAIL("%s: %s", op, lb_result_name(r));
        if (kind == 1 && (!expect || expect->kind != JSON_BOOL || flag != (bool)expect->boolean))
            FAIL("%s: got %d", op, flag);
        if (kind == 2 && (!expect || expect->integer != count))
            FAIL("%s: got %llu, expected %llu", op, (unsigned long long)count,
                 expect ? (unsigned long long)expect->integer : 0ULL);
        if (kind == 0 && expect) FAIL("%s: expected an answer", op);
    }
#undef NUM
#undef MS_NS
    lb_retry_budget_free(budget);
    lb_retry_throttle_free(throttle);
    lb_adaptive_throttle_free(adaptive);
    return steps->len;
}

/* Replays one request case ("requests" in the vectors): a request over the case's balancer,
 * each attempt finished with the next outcome; the nodes tried, the decisions (a retry's delay
 * in whole milliseconds, rounded), why it stopped, the attempts and the winner must match. */
static void run_request(const json *c) {
    lb_balancer *b = build(c);
    if (!b) return;
    const json *spec = json_get(c, "request");
    const json *key = json_get(spec, "key");
    const json *retry_on = json_get(spec, "retry_on");
    const json *outcomes = json_get(c, "outcomes");
    const json *expect = json_get(c, "expect");
    lb_request *req = NULL;
    bool keyed = key && key->kind == JSON_STRING;
    lb_result r = lb_request_new(b, keyed ? key->str : NULL, keyed ? key->len : 0, &req);
    if (r != LB_RESULT_OK) FAIL("lb_request_new: %s", lb_result_name(r));
    lb_balancer_free(b); /* the request keeps what it needs */
    if (!req) return;
    r = lb_request_set_max_attempts(req, (uint32_t)json_get(spec, "max_attempts")->integer);
    if (r != LB_RESULT_OK) FAIL("max_attempts: %s", lb_result_name(r));
    if (retry_on && retry_on->kind == JSON_ARRAY) {
        uint32_t bits = 0;
        for (size_t i = 0; i < retry_on->len; i++) {
            const char *kind = retry_on->items[i].str;
            bits |= strcmp(kind, "error") == 0     ? LB_RETRY_ON_ERROR
                    : strcmp(kind, "timeout") == 0 ? LB_RETRY_ON_TIMEOUT
                                                   : LB_RETRY_ON_OVERLOADED;
        }
        r = lb_request_set_retry_on(req, bits);
        if (r != LB_RESULT_OK) FAIL("retry_on: %s", lb_result_name(r));
    }
    const json *tried = json_get(expect, "tried");
    const json *decisions = json_get(expect, "decisions");
    size_t n = 0;
    lb_lease *lease = NULL;
    char id[256];
    size_t size = 0;
    while ((r = lb_request_attempt(req, &lease)) == LB_RESULT_OK && lease) {
        step_index = n;
        if (lb_lease_node(lease, NULL, id, sizeof id, &size) != LB_RESULT_OK)
            FAIL("lb_lease_node failed");
        if (!tried || n >= tried->len || !same_bytes(id, size - 1, &tried->items[n]))
            FAIL("attempt %zu went to %s", n + 1, id);
        if (!outcomes || n >= outcomes->len) {
            FAIL("more attempts than outcomes");
            lb_request_cancel(req, lease);
            break;
        }
        lb_outcome_info info = outcome_of(&outcomes->items[n]);
        lb_decision d = UINT32_MAX;
        uint64_t delay_ns = UINT64_MAX;
        r = lb_request_finish(req, lease, &info, &d, &delay_ns);
        if (r != LB_RESULT_OK) FAIL("lb_request_finish: %s", lb_result_name(r));
        const json *want = decisions && n < decisions->len ? &decisions->items[n] : NULL;
        const char *name = d == LB_DECISION_DONE    ? "done"
                           : d == LB_DECISION_RETRY ? "retry"
                           : d == LB_DECISION_STOP  ? "stop"
                                                    : "wait";
        if (!want || strcmp(want->items[0].str, name) != 0) FAIL("decision %s", name);
        lb_request_info state;
        lb_request_state(req, &state);
        if (want && d == LB_DECISION_RETRY &&
            (delay_ns + 500000) / 1000000 != want->items[1].integer)
            FAIL("retry after %llu ns, expected %llu ms", (unsigned long long)delay_ns,
                 (unsigned long long)want->items[1].integer);
        if (want && d == LB_DECISION_STOP && strcmp(lb_stop_name(state.stopped), want->items[1].str))
            FAIL("stopped: %s", lb_stop_name(state.stopped));
        n++;
        if (d != LB_DECISION_RETRY) break;
    }
    if (r != LB_RESULT_OK) FAIL("lb_request_attempt: %s", lb_result_name(r));
    lb_request_info state;
    lb_request_state(req, &state);
    const json *stopped = json_get(expect, "stopped");
    const json *winner = json_get(expect, "winner");
    const char *want_stop = stopped && stopped->kind == JSON_STRING ? stopped->str : "none";
    if (!decisions || n != decisions->len) FAIL("%zu decisions", n);
    if (strcmp(lb_stop_name(state.stopped), want_stop) != 0)
        FAIL("stopped %s, expected %s", lb_stop_name(state.stopped), want_stop);
    if (state.attempts != json_get(expect, "attempts")->integer) FAIL("%u attempts", state.attempts);
    uint64_t want_winner = winner && winner->kind == JSON_NUMBER ? winner->integer : 0;
    if (state.winner != want_winner || !state.over) FAIL("winner %u, over %d", state.winner, state.over);
    lb_request_free(req);
}

/* Replays one ORCA case ("orca" in the vectors): parses the bytes of `input_hex`, compares
 * the numbers and the named entries (in order), or the error code. */
static void run_orca(const json *c) {
    const char *hex = json_get(c, "input_hex")->str;
    size_t len = strlen(hex) / 2;
    uint8_t *data = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++) {
        unsigned byte;
        sscanf(hex + 2 * i, "%2x", &byte);
        data[i] = (uint8_t)byte;
    }
    lb_load_report *report = NULL;
    lb_result r = lb_load_report_parse(data, len, &report);
    free(data);
    const json *expect_error = json_get(c, "expect_error");
    if (expect_error) {
        if (r == LB_RESULT_OK) {
            FAIL("parsed, expected %s", expect_error->str);
            lb_load_report_free(report);
        } else if (strcmp(lb_result_name(r), expect_error->str) != 0) {
            FAIL("failed with %s, expected %s", lb_result_name(r), expect_error->str);
        }
        return;
    }
    if (r != LB_RESULT_OK) {
        FAIL("parse: %s", lb_result_name(r));
        return;
    }
    const json *expect = json_get(c, "expect");
    lb_load_values v;
    lb_load_report_values(report, &v);
    const struct { const char *name; double got; } numbers[] = {
        {"cpu_utilization", v.cpu_utilization},
        {"mem_utilization", v.mem_utilization},
        {"application_utilization", v.application_utilization},
        {"rps_fractional", v.rps_fractional},
        {"eps", v.eps},
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        if (json_get(expect, numbers[i].name)->number != numbers[i].got)
            FAIL("%s is %.17g, expected %.17g", numbers[i].name, numbers[i].got,
                 json_get(expect, numbers[i].name)->number);
    }
    if (json_get(expect, "rps")->integer != v.rps) FAIL("rps is %llu", (unsigned long long)v.rps);
    size_t count = 0;
    lb_load_report_entries(report, NULL, 0, &count);
    lb_load_entry *entries = malloc((count ? count : 1) * sizeof *entries);
    if (count) lb_load_report_entries(report, entries, count, &count);
    const char *maps[] = {"request_cost", "utilization", "named_metrics"};
    size_t at = 0;
    for (uint32_t map = 0; map < 3; map++) {
        const json *pairs = json_get(expect, maps[map]);
        for (size_t i = 0; i < pairs->len; i++, at++) {
            const json *pair = &pairs->items[i];
            if (at >= count || entries[at].map != map ||
                entries[at].name_len != pair->items[0].len ||
                memcmp(entries[at].name, pair->items[0].str, pair->items[0].len) != 0 ||
                entries[at].value != pair->items[1].number) {
                FAIL("%s entry %zu differs", maps[map], i);
            }
        }
    }
    if (at != count) FAIL("%zu entries, expected %zu", count, at);
    free(entries);
    lb_load_report_free(report);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s tests/vectors/vectors.json\n", argv[0]);
        return 2;
    }
    json root;
    if (!json_read_file(argv[1], &root)) return 2;
    const json *version = json_get(&root, "version");
    const json *cases = json_get(&root, "cases");
    if (!version || version->integer != 1 || !cases || cases->kind != JSON_ARRAY || !cases->len) {
        fprintf(stderr, "%s: not a version 1 vectors file with cases\n", argv[1]);
        json_free(&root);
        return 2;
    }
    char *ids = malloc(IDS_CAP);
    size_t steps_run = 0, errors_checked = 0, cases_refused = 0;
    for (size_t ci = 0; ci < cases->len; ci++) {
        const json *c = &cases->items[ci];
        case_name = json_get(c, "name")->str;
        step_index = 0;
        const json *refused = json_get(c, "expect_error");
        if (refused) { /* the balancer must not build, with this code */
            lb_balancer *b = NULL;
            lb_result r = try_build(c, &b);
            if (strcmp(lb_result_name(r), refused->str) != 0)
                FAIL("new: got %s, expected %s", lb_result_name(r), refused->str);
            lb_balancer_free(b);
            cases_refused++;
            continue;
        }
        lb_balancer *b = build(c);
        if (!b) continue;
        const json *steps = json_get(c, "steps");
        for (step_index = 0; step_index < steps->len; step_index++) {
            const json *step = &steps->items[step_index];
            const json *expect_error = json_get(step, "expect_error");
            char *before = expect_error ? snapshot(b) : NULL;
            lb_result r = run_step(b, step, ids);
            steps_run++;
            if (expect_error) {
                if (strcmp(lb_result_name(r), expect_error->str) != 0)
                    FAIL("got %s, expected %s", lb_result_name(r), expect_error->str);
                char *after = snapshot(b);
                if (strcmp(before, after) != 0) FAIL("a failed step changed the nodes");
                free(after);
                free(before);
                errors_checked++;
            } else if (r != LB_RESULT_OK) {
                FAIL("%s failed: %s", json_get(step, "op")->str, lb_result_name(r));
            }
        }
        lb_balancer_free(b);
        /* Leases left open at the end of a case are cancelled (after their balancer is
         * gone, which is allowed). */
        for (size_t i = 0; i < lease_count; i++) lb_lease_cancel(leases[i]);
        memset(leases, 0, sizeof leases);
        lease_count = 0;
    }
    const json *budgets = json_get(&root, "budgets");
    size_t budget_steps = 0;
    if (!budgets || budgets->kind != JSON_ARRAY || !budgets->len) {
        fprintf(stderr, "%s: no budgets\n", argv[1]);
        check_failures++;
    }
    for (size_t ci = 0; budgets && ci < budgets->len; ci++) {
        case_name = json_get(&budgets->items[ci], "name")->str;
        step_index = 0;
        budget_steps += run_budget(&budgets->items[ci]);
    }
    const json *requests = json_get(&root, "requests");
    if (!requests || requests->kind != JSON_ARRAY || !requests->len) {
        fprintf(stderr, "%s: no requests\n", argv[1]);
        check_failures++;
    }
    for (size_t ci = 0; requests && ci < requests->len; ci++) {
        case_name = json_get(&requests->items[ci], "name")->str;
        run_request(&requests->items[ci]);
    }
    const json *orca = json_get(&root, "orca");
    if (!orca || orca->kind != JSON_ARRAY || orca->len < 15) {
        fprintf(stderr, "%s: no orca cases\n", argv[1]);
        check_failures++;
    }
    for (size_t ci = 0; orca && ci < orca->len; ci++) {
        case_name = json_get(&orca->items[ci], "name")->str;
        step_index = 0;
        run_orca(&orca->items[ci]);
    }
    if (cases_refused < 3) {
        fprintf(stderr, "%s: only %zu cases refused at construction\n", argv[1], cases_refused);
        check_failures++;
    }
    printf("test_vectors: %zu cases (%zu refused), %zu steps (%zu expected errors); %zu budget "
           "cases, %zu steps; %zu request cases; %zu orca cases\n",
           cases->len, cases_refused, steps_run, errors_checked, budgets ? budgets->len : 0,
           budget_steps,
           requests ? requests->len : 0, orca ? orca->len : 0);
    free(ids);
    json_free(&root);
    return check_report("test_vectors");
}
