/* Smoke test of the extracted C tarball, built with pkg-config (tests/packages/README.md).
 * Usage: smoke EXPECTED_VERSION */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <lb.h>

static int fails = 0;

static void check(const char *what, const char *got, const char *want) {
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "%s: got '%s', want '%s'\n", what, got, want);
        fails++;
    }
}

static lb_balancer *make(const char *algorithm, const lb_node *nodes, size_t n, uint64_t vnodes) {
    lb_options *options = NULL;
    lb_balancer *b = NULL;
    if (lb_options_new(&options) != LB_RESULT_OK) return NULL;
    if (vnodes && lb_options_set_int(options, "vnodes", 6, vnodes) != LB_RESULT_OK) return NULL;
    lb_result r = lb_balancer_new(algorithm, strlen(algorithm), options, nodes, n, &b);
    lb_options_free(options);
    if (r != LB_RESULT_OK) fprintf(stderr, "lb_balancer_new(%s): %s\n", algorithm, lb_result_str(r));
    return b;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    check("lb_version()", lb_version(), argv[1]);

    const lb_node seed[] = {{"NodeA", 5, 1, 0}, {"NodeB", 5, 1, 1}, {"NodeC", 5, 1, 2}};
    lb_balancer *ring = make("ring", seed, 3, 3);
    if (!ring) return 1;
    char got[64] = "", id[16];
    const char *keys[] = {"Key1", "Key2", "Key3"};
    for (int i = 0; i < 3; i++) {
        size_t len = 0;
        if (lb_balancer_pick(ring, keys[i], 4, NULL, id, sizeof id, &len) != LB_RESULT_OK) return 1;
        strncat(got, id, len);
        if (i < 2) strcat(got, " ");
    }
    check("ring (seed 001)", got, "NodeB NodeA NodeC");
    check("unknown node", lb_result_name(lb_balancer_remove(ring, "nope", 4)), "LB_UNKNOWN_NODE");
    lb_balancer_free(ring);

    const lb_node weighted[] = {{"a", 1, 5, 'a'}, {"b", 1, 1, 'b'}, {"c", 1, 1, 'c'}};
    lb_balancer *wrr = make("weighted_round_robin", weighted, 3, 0);
    if (!wrr) return 1;
    char seq[8] = "";
    for (int i = 0; i < 7; i++) {
        uint64_t tag = 0;
        if (lb_balancer_pick(wrr, NULL, 0, &tag, NULL, 0, NULL) != LB_RESULT_OK) return 1;
        seq[i] = (char)tag;
    }
    check("smooth WRR (nginx)", seq, "aabacaa");
    lb_balancer_free(wrr);

    const char orca[] = "TEXT cpu_utilization:0.5";
    lb_load_report *report = NULL;
    lb_load_values values;
    if (lb_load_report_parse((const uint8_t *)orca, sizeof orca - 1, &report) != LB_RESULT_OK) return 1;
    lb_load_report_values(report, &values);
    check("orca", values.cpu_utilization == 0.5 ? "0.5" : "other", "0.5");
    lb_load_report_free(report);

    /* Server-reported load: a backend's header, read back; client_side_wrr weighs by reports
     * (0.9 and 0.3 utilisation at 100 qps: 1:3). */
    lb_server_load *server = NULL;
    if (lb_server_load_new(&server) != LB_RESULT_OK) return 1;
    if (lb_server_load_set_application_utilization(server, 0.3) != LB_RESULT_OK) return 1;
    char header[256];
    size_t header_size = 0;
    if (lb_server_load_header(server, LB_HEADER_TEXT, header, sizeof header, &header_size) !=
        LB_RESULT_OK)
        return 1;
    if (lb_load_report_parse((const uint8_t *)header, header_size - 1, &report) != LB_RESULT_OK)
        return 1;
    lb_load_report_values(report, &values);
    check("server load", values.application_utilization == 0.3 ? "0.3" : "other", "0.3");
    lb_load_report_free(report);
    lb_server_load_free(server);
    lb_options *wrr_options = NULL;
    if (lb_options_new(&wrr_options) != LB_RESULT_OK) return 1;
    lb_options_set_int(wrr_options, "blackout_period_ms", 18, 0);
    lb_node ab[] = {{"a", 1, 1, 'a'}, {"b", 1, 1, 'b'}};
    lb_balancer *weighed = NULL;
    if (lb_balancer_new("client_side_wrr", 15, wrr_options, ab, 2, &weighed) != LB_RESULT_OK)
        return 1;
    lb_options_free(wrr_options);
    const char *loads[] = {"TEXT application_utilization=0.9,rps_fractional=100",
                           "TEXT application_utilization=0.3,rps_fractional=100"};
    for (int i = 0; i < 2; i++) {
        if (lb_load_report_parse((const uint8_t *)loads[i], strlen(loads[i]), &report) != LB_RESULT_OK)
            return 1;
        if (lb_balancer_report_load(weighed, ab[i].id, 1, report) != LB_RESULT_OK) return 1;
        lb_load_report_free(report);
    }
    int b_picks = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t tag = 0;
        if (lb_balancer_pick(weighed, NULL, 0, &tag, NULL, 0, NULL) != LB_RESULT_OK) return 1;
        b_picks += tag == 'b';
    }
    check("client_side_wrr", b_picks == 3 ? "1:3" : "other", "1:3");
    lb_balancer_free(weighed);

    if (fails) return 1;
    printf("c: liblb %s: ring %s, wrr %s\n", lb_version(), got, seq);
    return 0;
}
