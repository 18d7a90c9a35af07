// Tests lb.hpp, the C++17 RAII wrapper: ownership (move-only, freed once), exceptions with
// the right codes, string_view keys, and the same answers as the C API and the core.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include "lb.hpp"

static std::atomic<int> failures{0};

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                              \
        }                                                                            \
    } while (0)

// Runs `body`, expecting an lb::error with `code`.
template <class F>
static void expect_error(lb_result code, F body, int line) {
    try {
        body();
        std::fprintf(stderr, "line %d: no exception, expected %s\n", line, lb_result_name(code));
        failures++;
    } catch (const lb::error &e) {
        if (e.code() != code) {
            std::fprintf(stderr, "line %d: got %s, expected %s\n", line, e.name(),
                         lb_result_name(code));
            failures++;
        }
        CHECK(std::string(e.what()).rfind(lb_result_name(code), 0) == 0);
    }
}
#define EXPECT_ERROR(code, ...) expect_error(code, [&] { __VA_ARGS__; }, __LINE__)

static_assert(!std::is_copy_constructible_v<lb::balancer>, "unique ownership");
static_assert(std::is_nothrow_move_constructible_v<lb::balancer>, "movable");
static_assert(!std::is_copy_constructible_v<lb::options>, "unique ownership");

// Leases (RAII: explicit success/failure, destructor cancels), report, stats, pick_hash.
static void test_feedback() {
    using std::chrono::milliseconds;
    lb::balancer rr("round_robin", {{"a", 1, 10}, {"b", 2, 11}, {"c", 1, 12}});
    static_assert(!std::is_copy_constructible_v<lb::lease>);
    static_assert(std::is_nothrow_move_constructible_v<lb::lease>);
    {
        lb::lease l0 = rr.acquire();
        lb::lease l1 = rr.acquire();
        CHECK(l0.id() == "a" && l0.tag() == 10 && l1.id() == "b" && l0);
        lb::lease l2 = rr.acquire();  // c: never ended explicitly
        CHECK(l0.elapsed().count() >= 0);
        auto st = rr.stats();
        CHECK(st.size() == 3 && st[0].in_flight == 1 && st[1].in_flight == 1 && st[2].in_flight == 1);
        l0.success(milliseconds(4));
        CHECK(!l0);
        EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, l0.failure());  // already ended, as Python/Node
        l1.failure(milliseconds(8));
        lb::lease moved = std::move(l2);
        CHECK(!l2 && moved && moved.id() == "c");
    }  // `moved` cancelled here
    auto st = rr.stats();
    CHECK(st.size() == 3);
    CHECK(st[0].id == "a" && st[0].tag == 10 && st[0].requests == 1 && st[0].failures == 0);
    CHECK(st[0].latency == std::chrono::nanoseconds(4000000));
    CHECK(st[1].weight == 2 && st[1].requests == 1 && st[1].failures == 1);
    CHECK(st[2].in_flight == 0 && st[2].requests == 0 && !st[2].latency);
    rr.report("c", false, milliseconds(2));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, rr.report("x", true, milliseconds(1)));
    st = rr.stats();
    CHECK(st[2].in_flight == 0 && st[2].requests == 1 && st[2].failures == 1 && st[2].latency);
    {
        lb::lease measured = rr.acquire();
        measured.success();  // latency measured since acquire
    }
    lb::lease empty;
    CHECK(!empty);
    empty.cancel();
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, empty.success(milliseconds(1)));

    // Negative latencies are refused, not clamped to 0: nothing is recorded, the lease stays
    // open and still ends normally.
    {
        auto before = rr.stats();
        lb::lease open = rr.acquire();
        bool threw = false;
        try {
            open.failure(milliseconds(-1));
        } catch (const std::out_of_range &e) {
            threw = std::string(e.what()).find("latency must be >= 0") != std::string::npos;
        }
        CHECK(threw && open);
        threw = false;
        try {
            rr.report("a", true, milliseconds(-5));
        } catch (const std::out_of_range &) {
            threw = true;
        }
        CHECK(threw);
        open.success(milliseconds(1));
        CHECK(!open);
        auto after = rr.stats();
        uint64_t sum_before = 0, sum_after = 0;
        for (auto &n : before) sum_before += n.requests;
        for (auto &n : after) sum_after += n.requests;
        CHECK(sum_after == sum_before + 1);
    }

    // until is on the balancer's clock, which now() reads: an ejection ends within
    // base_ejection_time_ms of now.
    {
        lb::options o;
        o.set("consecutive_failures", 2).set("base_ejection_time_ms", 60000);
        lb::balancer eb("round_robin", {{"a", 1, 1}, {"b", 1, 2}}, o);
        auto t0 = eb.now();
        eb.report("a", false, milliseconds(1));
        eb.report("a", false, milliseconds(1));
        auto es = eb.stats();
        auto left = *es[0].until - eb.now();
        CHECK(es[0].status == LB_NODE_EJECTED && es[0].until);
        CHECK(left > std::chrono::nanoseconds(0) && left <= milliseconds(60000));
        CHECK(eb.now() >= t0);
    }

    // Health: mark_down/mark_up, status and until in stats, panic.
    CHECK(!rr.panic());
    rr.mark_down("b");
    st = rr.stats();
    CHECK(st[1].status == LB_NODE_DOWN && !st[1].until && st[0].status == LB_NODE_HEALTHY);
    for (int i = 0; i < 10; i++) CHECK(rr.pick().id != "b");
    rr.mark_up("b");
    CHECK(rr.stats()[1].status == LB_NODE_HEALTHY);
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, rr.mark_down("x"));

    lb::balancer ring("ring", {{"a", 1, 1}});
    EXPECT_ERROR(LB_RESULT_KEY_REQUIRED, ring.acquire());
    CHECK(ring.acquire(std::string_view("k")).id() == "a");
    EXPECT_ERROR(LB_RESULT_NO_NODES, lb::balancer("random").acquire());

    // pick_hash agrees with attempts_hash; unhashed algorithms refuse.
    lb::balancer maglev("maglev", {{"a", 1, 1}, {"b", 1, 2}, {"c", 1, 3}});
    for (uint64_t h = 1; h < 30; h++) {
        uint64_t hash = h * UINT64_C(0x9E3779B97F4A7C15);
        auto tries = maglev.attempts_hash(hash, 10);
        CHECK(tries.size() == 3 && tries[0] == maglev.pick_hash(hash));
    }
    EXPECT_ERROR(LB_RESULT_HASH_UNSUPPORTED, rr.pick_hash(1));
    EXPECT_ERROR(LB_RESULT_HASH_UNSUPPORTED, rr.attempts_hash(1, 2));
    // A lease outlives its balancer.
    lb::lease kept;
    {
        lb::balancer temp("round_robin", {{"t", 1, 7}});
        kept = temp.acquire();
    }
    CHECK(kept.id() == "t" && kept.tag() == 7);
    kept.failure(milliseconds(1));
}

// Failure kinds: an overloaded node's retry-after pauses it (and the pause ends by itself),
// timeouts count towards ejection, overloaded answers do not, negative times are refused.
static void test_outcome_kinds() {
    using std::chrono::milliseconds;
    lb::balancer b("round_robin", {{"a", 1, 1}, {"b", 1, 2}, {"c", 1, 3}, {"d", 1, 4}});
    auto t0 = b.now();
    b.report("a", lb::failure_kind::overloaded, std::nullopt, milliseconds(1000));
    auto st = b.stats();
    CHECK(st[0].status == LB_NODE_OVERLOADED && st[0].until);
    CHECK(*st[0].until >= t0 + milliseconds(1000) && *st[0].until <= b.now() + milliseconds(1000));
    CHECK(st[0].requests == 1 && st[0].failures == 1);
    // No latency given: the failure penalty (5 s by default) is the sample.
    CHECK(st[0].latency == std::chrono::nanoseconds(5000000000));
    for (int i = 0; i < 12; i++) CHECK(b.pick().id != "a");
    // Negative times are refused before anything is recorded.
    bool threw = false;
    try {
        b.report("b", lb::failure_kind::overloaded, std::nullopt, milliseconds(-1));
    } catch (const std::out_of_range &e) {
        threw = std::string(e.what()).find("retry_after must be >= 0") != std::string::npos;
    }
    CHECK(threw && b.stats()[1].requests == 0 && b.stats()[1].status == LB_NODE_HEALTHY);
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, b.report("x", lb::failure_kind::timeout));
    std::this_thread::sleep_for(milliseconds(1100));
    CHECK(b.stats()[0].status == LB_NODE_HEALTHY && !b.stats()[0].until);
    int back = 0;
    for (int i = 0; i < 8; i++) back += b.pick().id == "a";
    CHECK(back == 2);

    // A lease ends with a kind: measured latency when none is given.
    uint64_t failed = 0;
    for (auto &n : b.stats()) failed += n.failures;
    lb::lease l = b.acquire();
    l.failure(lb::failure_kind::timeout);
    CHECK(!l);
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, l.failure(lb::failure_kind::error));
    for (auto &n : b.stats()) {
        CHECK(n.in_flight == 0 && n.status == LB_NODE_HEALTHY);
        failed -= n.failures;
    }
    CHECK(failed == uint64_t(0) - 1);  // one more failure

    // 4 errors, overloaded answers (streak untouched), then a timeout: ejected.
    lb::balancer e("round_robin", {{"a", 1, 1}, {"b", 1, 2}});
    for (int i = 0; i < 4; i++) e.report("a", lb::failure_kind::error, milliseconds(1));
    e.report("a", lb::failure_kind::overloaded);
    e.report("a", lb::failure_kind::overloaded, milliseconds(1));
    CHECK(e.stats()[0].status == LB_NODE_HEALTHY);
    e.report("a", lb::failure_kind::timeout);
    CHECK(e.stats()[0].status == LB_NODE_EJECTED && e.stats()[0].failures == 7);
}

// Budgets and throttles: RAII handles over the C API, errors as lb::error.
static void test_budgets() {
    using std::chrono::seconds;
    static_assert(!std::is_copy_constructible_v<lb::retry_budget>);
    static_assert(std::is_nothrow_move_constructible_v<lb::retry_budget>);
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::retry_budget(std::chrono::milliseconds(10)));
    lb::retry_budget budget(seconds(1), 1, 1.0, seconds(0));  // explicit times from 0 on
    CHECK(budget.available(seconds(0)) == 1 && budget.can_withdraw(seconds(0)));
    CHECK(budget.withdraw(seconds(0)) && !budget.withdraw(seconds(0)));
    budget.deposit(seconds(0));
    CHECK(budget.withdraw(std::chrono::milliseconds(500)));
    CHECK(budget.available(seconds(2)) == 1);
    bool threw = false;
    try {
        budget.deposit(std::chrono::nanoseconds(-1));
    } catch (const std::out_of_range &) {
        threw = true;
    }
    CHECK(threw);
    lb::retry_budget moved = std::move(budget);
    CHECK(moved.get() && !budget.get());

    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::retry_throttle(0, 0.5));
    lb::retry_throttle throttle(10, 0.5);
    for (int i = 0; i < 4; i++) CHECK(throttle.failure());
    CHECK(!throttle.failure() && !throttle.allows());
    throttle.success();
    CHECK(throttle.tokens() == 5.5 && throttle.allows());

    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::adaptive_throttle(200.0));
    lb::adaptive_throttle adaptive(2.0, seconds(120), seconds(0));
    // Nothing is rejected until the window holds 100 requests (the core's minimum).
    for (int i = 0; i < 100; i++) CHECK(adaptive.admit(seconds(1), UINT64_MAX));
    double p = adaptive.rejection(seconds(1));
    CHECK(p > 0.9900 && p < 0.9901);
    CHECK(!adaptive.admit(seconds(1), 0));
    for (int i = 0; i < 51; i++) adaptive.accepted(seconds(1));
    CHECK(adaptive.rejection(seconds(1)) == 0);
}

// The request loop through lb::request: retries on distinct nodes, a budget shared with the
// balancer (it outlives the caller's object), hedges whose loser is cancelled uncounted.
static void test_requests() {
    using std::chrono::milliseconds;
    using std::chrono::seconds;
    static_assert(!std::is_copy_constructible_v<lb::request>);
    static_assert(std::is_nothrow_move_constructible_v<lb::request>);
    lb::balancer b("ring", {{"a"}, {"b"}, {"c"}});
    EXPECT_ERROR(LB_RESULT_KEY_REQUIRED, b.request().attempt());
    lb::request r = b.request("user-42");
    std::vector<std::string> tried;
    lb::decision d = lb::decision::stop;
    while (lb::lease l = r.attempt()) {
        tried.push_back(l.id());
        d = tried.size() < 3 ? r.failure(l, lb::failure_kind::timeout, milliseconds(2))
                             : r.success(l);
        if (d != lb::decision::retry) break;
        CHECK(r.backoff() < milliseconds(250));
    }
    CHECK(d == lb::decision::done && r.winner() == 3 && r.over() && r.stopped().empty());
    CHECK(tried.size() == 3 && tried[0] != tried[1] && tried[1] != tried[2] && tried[0] != tried[2]);
    std::vector<lb::picked> order = b.attempts("user-42", 3);
    CHECK(order.size() == 3 && order[0].id == tried[0] && order[1].id == tried[1]);

    {
        lb::retry_budget none(seconds(1), 0, 0.0);  // no retries at all
        b.set_budget(none);
    }
    lb::request limited = b.request("user-42");
    lb::lease l = limited.attempt();
    CHECK(limited.failure(l) == lb::decision::stop && limited.stopped() == "budget");
    CHECK(!l);
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, limited.success(l));
    b.clear_budget();

    lb::request options = b.request("user-42", {1, LB_RETRY_ON_TIMEOUT, milliseconds(100), nullptr});
    l = options.attempt();
    CHECK(options.failure(l) == lb::decision::stop && options.stopped() == "not_retryable");
    CHECK(options.remaining() && *options.remaining() <= milliseconds(100));
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, b.request("k", {0, 0, std::nullopt, nullptr}));

    lb::hedging now = lb::hedging::after(milliseconds(0));
    lb::request hedged = b.request("user-42", {3, LB_RETRY_ON_ERROR, std::nullopt, &now});
    lb::lease first = hedged.attempt();
    CHECK(hedged.hedge_after() == milliseconds(0));
    lb::lease second = hedged.hedge();
    CHECK(second && second.id() != first.id());
    CHECK(hedged.success(second, milliseconds(1)) == lb::decision::done);
    hedged.cancel(first);
    CHECK(hedged.winner() == 2 && !first);
    size_t in_flight = 0;
    for (const lb::node_stats &s : b.stats()) in_flight += s.in_flight;
    CHECK(in_flight == 0);
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::hedging::percentile(0.0));
}

// Localities and priority levels (issue 24): the located node form, routing setters, errors.
static void test_localities() {
    using located = std::vector<lb::located_node>;
    // The plain constructor and update keep taking brace lists of plain nodes.
    lb::balancer plain("round_robin", {{"a", 1}});
    plain.update({{"a", 1, 1}, {"b", 2, 2}});
    CHECK(plain.located_nodes() ==
          (located{{"a", 1, 1, "", 0}, {"b", 2, 2, "", 0}}));

    lb::balancer b = lb::balancer::located(
        "round_robin", {{"a0", 1, 0, "r/a", 0}, {"b0", 1, 1, "r/b", 0}, {"s", 1, 2, "", 1}});
    auto tags = [&](int n) {
        uint64_t seen = 0;
        for (int i = 0; i < n; i++) seen |= uint64_t(1) << b.pick_tag();
        return seen;
    };
    CHECK(tags(8) == 0b011);  // the standby at priority 1 takes nothing while level 0 is up
    b.set_locality_weights({{"r/b", 1}});
    CHECK(tags(8) == 0b010);
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY, b.set_locality_weights({{"a/b/c/d", 1}}));
    EXPECT_ERROR(LB_RESULT_INVALID_UTF8, b.set_locality_weights({{"\xff", 1}}));
    CHECK(tags(8) == 0b010);  // unchanged by the failures
    b.set_locality_weights({});
    CHECK(tags(8) == 0b011);

    b.add_located({"c0", 2, 3, "r/c", 2});
    b.set_location("a0", "r/z", 1);
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY, b.add_located({"x", 1, 9, "1/2/3/4", 0}));
    EXPECT_ERROR(LB_RESULT_DUPLICATE_NODE, b.add_located({"c0", 1, 9, "r", 0}));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, b.set_location("nope", "r", 0));
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY, b.set_location("a0", std::string_view("r\0z", 3), 0));
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY,
                 b.update_located({{"p", 1, 0, "r", 0}, {"q", 1, 0, "a/b/c/d", 0}}));
    CHECK(b.located_nodes() == (located{{"a0", 1, 0, "r/z", 1},
                                        {"b0", 1, 1, "r/b", 0},
                                        {"s", 1, 2, "", 1},
                                        {"c0", 2, 3, "r/c", 2}}));
    b.update_located({{"p", 1, 7, "r/p", 3}});
    CHECK(b.located_nodes() == (located{{"p", 1, 7, "r/p", 3}}));
    CHECK(b.nodes() == (std::vector<lb::node>{{"p", 1, 7}}));

    // Zone-aware routing: "" is the unnamed locality, std::nullopt none.
    lb::options opts;
    opts.set("zone_aware_min_cluster_size", 1);
    lb::balancer z = lb::balancer::located(
        "random",
        {{"u0", 1, 0, "", 0}, {"u1", 1, 1, "", 0}, {"b0", 1, 2, "r/b", 0}, {"b1", 1, 3, "r/b", 0}},
        opts);
    auto ztags = [&](int n) {
        uint64_t seen = 0;
        for (int i = 0; i < n; i++) seen |= uint64_t(1) << z.pick_tag();
        return seen;
    };
    z.set_local_localities({{"", 2}, {"r/b", 2}});
    z.set_local_locality("");
    CHECK(ztags(64) == 0b0011);
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY, z.set_local_locality("a/b/c/d"));
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY, z.set_local_localities({{"a/b/c/d", 1}}));
    CHECK(ztags(64) == 0b0011);
    z.set_local_locality(std::nullopt);
    CHECK(ztags(64) == 0b1111);
    z.set_local_locality("r/b");
    CHECK(ztags(64) == 0b1100);
    z.clear_local_locality();
    CHECK(ztags(64) == 0b1111);
    EXPECT_ERROR(LB_RESULT_INVALID_LOCALITY,
                 lb::balancer::located("random", {{"x", 1, 0, "a/b/c/d", 0}}));
}

// ORCA load reports: parse (header values and serialized bytes), the six numbers, the named
// entries with their map; bad bytes throw LB_RESULT_INVALID_LOAD_REPORT.
static void test_load_reports() {
    static_assert(!std::is_copy_constructible_v<lb::load_report>);
    static_assert(std::is_nothrow_move_constructible_v<lb::load_report>);
    lb::load_report text = lb::load_report::parse(
        "TEXT cpu_utilization:0.5, rps_fractional:200, eps:4, named_metrics.rif:7, "
        "named_metrics.kv:0.25");
    lb::load_values v = text.values();
    CHECK(v.cpu_utilization == 0.5 && v.rps_fractional == 200.0 && v.eps == 4.0);
    CHECK(v.mem_utilization == 0.0 && v.application_utilization == 0.0 && v.rps == 0);
    CHECK(text.entries() == (std::vector<lb::load_entry>{{lb::load_map::named_metrics, "rif", 7.0},
                                                         {lb::load_map::named_metrics, "kv", 0.25}}));

    // A serialized OrcaLoadReport: cpu_utilization 0.75, request_cost {"db": 2}.
    const unsigned char proto[] = {0x09, 0, 0, 0, 0, 0, 0, 0xe8, 0x3f, 0x22, 0x0d, 0x0a,
                                   0x02, 'd', 'b', 0x11, 0, 0, 0, 0, 0, 0, 0, 0x40};
    std::string_view bytes(reinterpret_cast<const char *>(proto), sizeof proto);
    lb::load_report binary = lb::load_report::parse(bytes);
    CHECK(binary.values().cpu_utilization == 0.75);
    CHECK(binary.entries() == (std::vector<lb::load_entry>{{lb::load_map::request_cost, "db", 2.0}}));

    // Empty input is the empty report.
    for (std::string_view empty : {std::string_view(), std::string_view("")}) {
        lb::load_report none = lb::load_report::parse(empty);
        CHECK(none.entries().empty() && none.values().cpu_utilization == 0.0);
    }
    EXPECT_ERROR(LB_RESULT_INVALID_LOAD_REPORT, lb::load_report::parse("TEXT cpu:1"));
    EXPECT_ERROR(LB_RESULT_INVALID_LOAD_REPORT, lb::load_report::parse(bytes.substr(0, 5)));

    lb::load_report moved = std::move(text);
    CHECK(moved.get() && !text.get() && moved.entries().size() == 2);
}

// Reports steer client_side_wrr (gRFC A58): given directly (report_load) or with a lease's
// outcome; unknown ids and ended leases throw, changing nothing.
static void test_report_load() {
    using std::chrono::milliseconds;
    lb::load_report busy =
        lb::load_report::parse("TEXT application_utilization=0.9,rps_fractional=100");
    lb::load_report idle =
        lb::load_report::parse("TEXT application_utilization=0.3,rps_fractional=100");
    {
        lb::options o;
        o.set("blackout_period_ms", 0);
        lb::balancer b("client_side_wrr", {{"a", 1, 0}, {"b", 1, 1}}, o);
        b.report_load("a", busy);
        b.report_load("b", idle);
        EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, b.report_load("zz", idle));
        int seen[2] = {0, 0};
        for (int i = 0; i < 4; i++) seen[b.pick_tag()]++;
        CHECK(seen[0] == 1 && seen[1] == 3);  // 100/0.9 : 100/0.3 = 1:3
    }

    // Through leases: a reports busy on success, b idle on an overloaded failure; c, silent,
    // weighs the mean. The first acquire built the scheduler, the next build is 100 ms on.
    lb::options o;
    o.set("blackout_period_ms", 0).set("weight_update_period_ms", 100);
    lb::balancer b("client_side_wrr", {{"a", 1, 0}, {"b", 1, 1}, {"c", 1, 2}}, o);
    lb::lease la = b.acquire();
    CHECK(la.id() == "a");
    la.success(busy, milliseconds(1));
    CHECK(!la);
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, la.success(busy));
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, la.failure(busy, lb::failure_kind::timeout));
    lb::lease lb_ = b.acquire();
    CHECK(lb_.id() == "b");
    bool threw = false;
    try {
        lb_.success(idle, milliseconds(-1));
    } catch (const std::out_of_range &) {
        threw = true;
    }
    CHECK(threw && lb_);  // still open
    lb_.failure(idle, lb::failure_kind::overloaded);  // measured latency, no retry-after
    CHECK(!lb_);
    auto st = b.stats();
    CHECK(st[0].requests == 1 && st[0].failures == 0 && st[1].requests == 1 &&
          st[1].failures == 1 && st[0].in_flight == 0 && st[1].in_flight == 0);
    std::this_thread::sleep_for(milliseconds(200));
    int seen[3] = {0, 0, 0};
    for (int i = 0; i < 600; i++) seen[b.pick_tag()]++;
    CHECK(seen[0] == 100 && seen[1] == 300 && seen[2] == 200);
}

// prequal: probes due per pick, targets to probe, answers offered; the idle fast node wins.
static void test_probes() {
    using std::chrono::milliseconds;
    lb::options o;
    o.set("seed", 7).set("q_rif", "0.84");
    lb::balancer b("prequal", {{"a", 1, 0}, {"b", 1, 1}, {"c", 1, 2}}, o);
    CHECK(b.probes_due() == 0);
    b.pick();  // an empty pool: a random node
    CHECK(b.probes_due() == 3);  // probe_rate 3 per pick
    CHECK(b.probes_due() == 0);  // the call took them
    std::vector<std::string> targets = b.probe_targets(4);
    CHECK(targets.size() == 3);  // every node once, in a random order
    std::vector<std::string> sorted = targets;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == (std::vector<std::string>{"a", "b", "c"}));
    CHECK(b.probe_targets(1).size() == 1 && b.probe_targets(0).empty());
    EXPECT_ERROR(LB_RESULT_BATCH_TOO_LARGE, b.probe_targets(LB_MAX_BATCH + 1));
    EXPECT_ERROR(LB_RESULT_BATCH_TOO_LARGE, b.probe_targets(SIZE_MAX));
    EXPECT_ERROR(LB_RESULT_NO_NODES, lb::balancer("prequal").probe_targets(2));
    b.offer_probe("a", 5, milliseconds(20));
    b.offer_probe("b", 0, milliseconds(1));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, b.offer_probe("zz", 0, milliseconds(1)));
    bool threw = false;
    try {
        b.offer_probe("c", 0, milliseconds(-1));
    } catch (const std::out_of_range &) {
        threw = true;
    }
    CHECK(threw);
    CHECK(b.pick().id == "b");
    CHECK(lb::balancer("round_robin", {{"a"}}).probes_due() == 0);
}

// Subsetting (issue 26): options by name, subset() in node order, picks inside it, the
// rules between options checked when the balancer is built.
static void test_subset() {
    std::vector<lb::node> fleet;
    for (int i = 0; i < 20; i++) fleet.push_back({"n" + std::to_string(100 + i), 1, uint64_t(i)});
    lb::options o;
    o.set("subset", "aperture").set("subset_size", 4).set("client_index", 1).set("client_count", 5);
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, o.set("subset", 1));
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, o.set("subset", "apertures"));
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, o.set("subset_size", 0));
    lb::balancer b("round_robin", fleet, o);
    std::vector<std::string> subset = b.subset();
    CHECK(subset.size() >= 4 && subset.size() < 20);
    CHECK(std::is_sorted(subset.begin(), subset.end()));  // node order: n100, n101, ...
    for (int i = 0; i < 40; i++)
        CHECK(std::find(subset.begin(), subset.end(), b.pick().id) != subset.end());
    CHECK(b.subset() == subset);
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::balancer("maglev", fleet, o));
    o.set("client_index", 5);  // == client_count
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::balancer("round_robin", fleet, o));
    CHECK(b.subset() == subset);
    b.set_weight(subset[0], 0);
    std::vector<std::string> after = b.subset();
    CHECK(std::find(after.begin(), after.end(), subset[0]) == after.end());
    // Without subsetting: every node of weight > 0.
    lb::balancer plain("random", {{"a", 1, 0}, {"b", 0, 1}, {"c", 3, 2}});
    CHECK(plain.subset() == (std::vector<std::string>{"a", "c"}));
    CHECK(lb::balancer("random").subset().empty());
}

// The server side: requests start and end once (the type sees to it), probes and reports
// follow them, and the header parses back to the same numbers.
static void test_server_load() {
    using std::chrono::milliseconds;
    static_assert(!std::is_copy_constructible_v<lb::server_load>);
    static_assert(std::is_nothrow_move_constructible_v<lb::server_load>);
    static_assert(!std::is_copy_constructible_v<lb::server_request>);
    static_assert(!std::is_copy_assignable_v<lb::server_request>);
    static_assert(std::is_nothrow_move_constructible_v<lb::server_request>);
    lb::server_load load;
    auto before = lb::now();
    lb::server_request a = load.start();
    lb::server_request b = load.start();
    lb::server_request c = load.start();
    CHECK(a && c && a.rif() == 0 && b.rif() == 1 && c.rif() == 2);
    CHECK(a.started() >= before && a.started() <= lb::now());
    CHECK(load.in_flight() == 3);
    lb::probe_answer p = load.probe();
    CHECK(p.rif == 3 && p.latency.count() == 0);  // no success yet: no estimate

    std::this_thread::sleep_for(milliseconds(2));
    std::chrono::nanoseconds took = load.finish(a);
    CHECK(took >= milliseconds(2) && !a);
    load.finish(b, false);
    load.cancel(c);
    CHECK(load.in_flight() == 0 && !b && !c);
    p = load.probe();  // a was alone when it started: the estimate at rif 0 is its latency
    CHECK(p.rif == 0 && p.latency.count() / 1000 == took.count() / 1000);

    // Ending again, or ending a moved-from request, throws and counts nothing.
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, load.finish(a));
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, load.cancel(c));
    lb::server_request d = load.start();
    lb::server_request e = std::move(d);
    CHECK(!d && e && load.in_flight() == 1);
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, load.finish(d));
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, lb::server_load().finish(d));
    lb::server_request none;
    EXPECT_ERROR(LB_RESULT_LEASE_FINISHED, load.cancel(none));
    {
        lb::server_load other;
        bool threw = false;
        try {
            other.finish(e);
        } catch (const std::invalid_argument &) {
            threw = true;
        }
        CHECK(threw && e && other.in_flight() == 0 && load.in_flight() == 1);
    }
    load.cancel(e);
    // Dropped (or assigned over) while open: cancelled.
    {
        lb::server_request dropped = load.start();
        lb::server_request over = load.start();
        CHECK(load.in_flight() == 2);
        over = load.start();
        CHECK(load.in_flight() == 2);
    }
    CHECK(load.in_flight() == 0);
    // A request outlives its server_load (the handle stays alive until it ends).
    lb::server_request kept;
    {
        lb::server_load temp;
        kept = temp.start();
    }
    CHECK(kept && kept.rif() == 0);

    // Utilisations: bad values throw and the old one stays.
    load.set_cpu_utilization(0.5);
    load.set_mem_utilization(0.25);
    load.set_application_utilization(1.5);  // may exceed 1
    EXPECT_ERROR(LB_RESULT_INVALID_LOAD_REPORT, load.set_cpu_utilization(-1.0));
    EXPECT_ERROR(LB_RESULT_INVALID_LOAD_REPORT, load.set_mem_utilization(1.5));
    EXPECT_ERROR(LB_RESULT_INVALID_LOAD_REPORT,
                 load.set_application_utilization(std::numeric_limits<double>::quiet_NaN()));
    lb::load_values v = load.report().values();
    CHECK(v.cpu_utilization == 0.5 && v.mem_utilization == 0.25 && v.application_utilization == 1.5);
    CHECK(v.rps_fractional > 0.0 && v.rps_fractional == 2 * v.eps);  // 2 done, 1 failed
    std::vector<lb::load_entry> named = load.report().entries();
    CHECK(named.size() == 2 && named[0].name == "latency_ms" && named[1].name == "rif" &&
          named[1].value == 0.0 && named[1].map == lb::load_map::named_metrics);

    // Headers round-trip through load_report::parse.
    for (lb::header_form form : {lb::header_form::text, lb::header_form::bin}) {
        std::string h = load.header(form);
        CHECK(h.rfind(form == lb::header_form::text ? "TEXT " : "BIN ", 0) == 0);
        CHECK(h.find('\0') == std::string::npos && h.size() < 300);
        lb::load_report parsed = lb::load_report::parse(h);
        lb::load_values got = parsed.values();
        CHECK(got.cpu_utilization == 0.5 && got.mem_utilization == 0.25);
        CHECK(got.application_utilization == 1.5 && got.eps > 0.0);
        auto entries = parsed.entries();
        CHECK(entries.size() == 2 && entries[1].name == "rif" && entries[1].value == 0.0);
    }
    CHECK(load.header().rfind("TEXT ", 0) == 0);
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, load.header(static_cast<lb::header_form>(2)));

    // A backend's report read by a client's prequal balancer as a probe answer.
    lb::balancer client("prequal", {{"x", 1, 0}});
    client.report_load("x", load.report());
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, client.report_load("y", load.report()));

    // Another window and latency max age; out of range throws.
    {
        lb::server_load brief(milliseconds(60000), milliseconds(1));
        lb::server_request d = brief.start();
        brief.finish(d);
        std::this_thread::sleep_for(milliseconds(5));
        CHECK(brief.probe().latency.count() == 0);  // a 1 ms max age forgot it
        EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::server_load(milliseconds(999), milliseconds(1000)));
        EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::server_load(milliseconds(10000), milliseconds(0)));
        EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::server_load(milliseconds(-1), milliseconds(1)));
    }

    lb::server_load moved = std::move(load);
    CHECK(moved.get() && !load.get() && moved.in_flight() == 0);
    EXPECT_ERROR(LB_RESULT_NULL_PARAMETER, load.start());
    bool threw = false;
    try {
        moved.finish(kept);  // a request ends on the load that started it only
    } catch (const std::invalid_argument &) {
        threw = true;
    }
    CHECK(threw && kept);
}  // kept is cancelled on its own load's handle, which it kept alive

int main() {
    CHECK(lb::version() == std::to_string(LB_VERSION_MAJOR) + "." +
                               std::to_string(LB_VERSION_MINOR) + "." +
                               std::to_string(LB_VERSION_PATCH));
    test_outcome_kinds();
    test_budgets();
    test_requests();
    test_localities();
    test_load_reports();
    test_report_load();
    test_probes();
    test_subset();
    test_server_load();
    auto names = lb::algorithms();
    CHECK(names.size() == 17 && names.front() == "random" && names.back() == "prequal");

    // Seed 001's example through options and string_view keys.
    lb::options opts;
    opts.set("vnodes", 3).set("hash", "sha256");
    EXPECT_ERROR(LB_RESULT_UNKNOWN_OPTION, opts.set("vnode", 3));
    EXPECT_ERROR(LB_RESULT_INVALID_VNODES, opts.set("vnodes", 0));
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, opts.set("vnodes", -1));
    EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, opts.set("seed", "x"));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_HASH, opts.set("hash", "md5"));
    {
        // Options are checked as a whole by the balancer: any order works (issue 19).
        lb::options a, b, bad;
        a.set("max_ejection_time_ms", 1000).set("base_ejection_time_ms", 500);
        b.set("max_ring_size", 512).set("min_ring_size", 256);
        lb::balancer ba("round_robin", {{"a", 1, 1}}, a);
        lb::balancer bb("ring_hash", {{"a", 1, 1}}, b);
        bad.set("base_ejection_time_ms", 2000).set("max_ejection_time_ms", 1000);
        EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, lb::balancer("round_robin", {{"a", 1, 1}}, bad));
        EXPECT_ERROR(LB_RESULT_INVALID_OPTION_VALUE, bad.set("base_ejection_time_ms", 0));
    }
    lb::balancer ring("ring", {{"NodeA", 1, 1}, {"NodeB", 1, 2}, {"NodeC", 1, 3}}, opts);
    std::string key = "Key1";
    CHECK(ring.pick(std::string_view(key)) == (lb::picked{"NodeB", 2}));
    CHECK(ring.pick_tag(std::string_view("Key1")) == 2);
    CHECK(ring.algorithm() == "ring");
    EXPECT_ERROR(LB_RESULT_KEY_REQUIRED, ring.pick());
    EXPECT_ERROR(LB_RESULT_KEY_REQUIRED, ring.pick_n(2));

    // Batches agree with single picks; attempts are distinct and start with the pick.
    std::vector<std::string_view> keys = {"Key1", "user:42", "", "今天天气不错啊"};
    auto many = ring.pick_many(keys);
    CHECK(many.size() == keys.size());
    for (size_t i = 0; i < keys.size() && i < many.size(); i++) CHECK(many[i] == ring.pick(keys[i]));
    auto tries = ring.attempts(std::string_view("Key1"), 5);
    CHECK(tries.size() == 3 && tries[0].id == "NodeB");
    CHECK(tries.size() == 3 && tries[1].id != tries[0].id && tries[2].id != tries[1].id &&
          tries[2].id != tries[0].id);
    CHECK(ring.attempts(std::string_view("Key1"), 1).size() == 1);

    // Membership and its errors (the balancer is unchanged after each).
    lb::balancer rr("round_robin");
    EXPECT_ERROR(LB_RESULT_NO_NODES, rr.pick());
    // Empty batches fail like a single pick would.
    EXPECT_ERROR(LB_RESULT_NO_NODES, rr.pick_n(0));
    EXPECT_ERROR(LB_RESULT_NO_NODES, rr.pick_many({}));
    EXPECT_ERROR(LB_RESULT_KEY_REQUIRED, ring.pick_n(0));
    CHECK(ring.pick_many({}).empty());
    rr.add("a", 1, 10);
    rr.add("b", 1, 11);
    rr.add("c", 2, 12);
    auto before = rr.nodes();
    EXPECT_ERROR(LB_RESULT_DUPLICATE_NODE, rr.add("a"));
    EXPECT_ERROR(LB_RESULT_EMPTY_ID, rr.add(""));
    EXPECT_ERROR(LB_RESULT_ID_CONTAINS_NUL, rr.add(std::string_view("x\0y", 3)));
    EXPECT_ERROR(LB_RESULT_INVALID_UTF8, rr.add("\xff"));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, rr.remove("zz"));
    EXPECT_ERROR(LB_RESULT_UNKNOWN_NODE, rr.set_weight("zz", 1));
    EXPECT_ERROR(LB_RESULT_DUPLICATE_NODE, rr.update({{"x"}, {"x"}}));
    CHECK(rr.nodes() == before);
    CHECK(before == (std::vector<lb::node>{{"a", 1, 10}, {"b", 1, 11}, {"c", 2, 12}}));
    auto five = rr.pick_n(5);
    CHECK(five.size() == 5 && five[0].id == "a" && five[1].id == "b" && five[2].id == "c" &&
          five[3].id == "a" && five[3].tag == 10);
    rr.set_weight("a", 0);
    rr.remove("b");
    CHECK(rr.size() == 2 && !rr.contains("b") && rr.contains("c"));
    for (int i = 0; i < 5; i++) CHECK(rr.pick().id == "c");  // a is drained
    rr.update({{"long-node-name-" + std::string(300, 'x'), 1, 99}});
    CHECK(rr.pick().id.size() == 315);  // longer than any earlier id: buffers follow the bound
    CHECK(rr.pick_many({"k"})[0].tag == 99);
    EXPECT_ERROR(LB_RESULT_UNKNOWN_ALGORITHM, lb::balancer("nope"));
    EXPECT_ERROR(LB_RESULT_DUPLICATE_NODE, lb::balancer("random", {{"a"}, {"a"}}));

    // Id buffer sizes (bound x answers) never wrap round to a small buffer: on 32-bit targets
    // a long id times a big batch can overflow size_t, which throws std::length_error.
    CHECK(lb::detail::id_capacity(6, 3) == 18);
    CHECK(lb::detail::id_capacity(0, 0) == 1);
    CHECK(lb::detail::id_capacity(SIZE_MAX, 1) == SIZE_MAX);
    bool overflowed = false;
    try {
        lb::detail::id_capacity(SIZE_MAX / 2 + 1, 2);
    } catch (const std::length_error &) {
        overflowed = true;
    }
    CHECK(overflowed);

    // Issue 9, finding 5: a rejected 64 MiB id used to raise lb_balancer_id_size_bound for
    // good, so every later pick allocated 64 MiB (and kept it as the answer's capacity) and a
    // 100000-key pick_many asked for 6.4 TB and threw bad_alloc.
    {
        lb::balancer victim("round_robin", {{"a", 1, 1}, {"b", 1, 2}});
        std::string huge(64u << 20, 'h');
        huge.back() = '\0';
        EXPECT_ERROR(LB_RESULT_ID_CONTAINS_NUL, victim.add(huge));
        size_t bound = 0;
        CHECK(lb_balancer_id_size_bound(victim.get(), &bound) == LB_RESULT_OK && bound == 2);
        auto p = victim.pick();
        CHECK(p.id == "a" && p.id.capacity() < 4096);
        std::vector<std::string_view> many_keys(100000, "k");
        try {
            auto answers = victim.pick_many(many_keys);
            CHECK(answers.size() == many_keys.size() && answers[0].id == "b");
        } catch (const std::exception &e) {
            std::fprintf(stderr, "pick_many after a rejected id threw: %s\n", e.what());
            failures++;
        }
        // An accepted long id raises the bound; once it leaves, the bound is small again.
        huge.back() = 'h';
        victim.add(huge, 1, 3);
        CHECK(lb_balancer_id_size_bound(victim.get(), &bound) == LB_RESULT_OK &&
              bound == huge.size() + 1);
        victim.remove(huge);
        CHECK(lb_balancer_id_size_bound(victim.get(), &bound) == LB_RESULT_OK && bound == 2);
        CHECK(victim.pick().id.capacity() < 4096);
    }

    // Counts that cannot be answered fail with a code before anything is allocated; an absurd
    // attempts limit means "every node".
    {
        lb::balancer counts("round_robin", {{"a", 1, 1}, {"b", 1, 2}});
        EXPECT_ERROR(LB_RESULT_BATCH_TOO_LARGE, counts.pick_n(SIZE_MAX));
        EXPECT_ERROR(LB_RESULT_BATCH_TOO_LARGE, counts.pick_n(LB_MAX_BATCH + 1));
        CHECK(counts.pick().id == "a");  // nothing was picked by the refused batches
        auto all = counts.attempts(std::nullopt, SIZE_MAX);
        CHECK(all.size() == 2 && all[0].id == "b" && all[1].id == "a");
    }

    // Moves transfer ownership (the moved-from object frees nothing).
    lb::balancer moved = std::move(rr);
    CHECK(moved.size() == 1);
    lb::balancer assigned("random", {{"z"}});
    assigned = std::move(moved);
    CHECK(assigned.pick().tag == 99);

    // Concurrent use of one balancer from several threads.
    lb::balancer shared("weighted_round_robin", {{"a", 1, 1}, {"b", 2, 2}});
    std::thread updater([&] {
        for (int i = 0; i < 500; i++) shared.update({{"a", 1, 1}, {i % 2 ? "b" : "c", 2, 2}});
    });
    std::thread picker([&] {
        for (int i = 0; i < 5000; i++) {
            auto p = shared.pick();
            CHECK((p.id == "a" && p.tag == 1) || ((p.id == "b" || p.id == "c") && p.tag == 2));
        }
    });
    updater.join();
    picker.join();

    test_feedback();

    if (failures) {
        std::fprintf(stderr, "test_cpp: %d check(s) FAILED\n", failures.load());
        return 1;
    }
    std::printf("test_cpp: all checks passed\n");
    return 0;
}
