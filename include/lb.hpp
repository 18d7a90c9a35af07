// lb.hpp: a header-only C++17 wrapper over lb.h (liblb's C API).
//
// - lb::balancer, lb::options and lb::lease own their C handles (unique ownership: movable, not
//   copyable); the destructor frees them. So do the server-reported load types: lb::load_report
//   (a parsed ORCA report, lb_load_report), lb::server_load (a backend's own load,
//   lb_server_load) and lb::server_request (a request it started: the lb_server_request struct,
//   owned so it ends once; a moved-from or ended one throws LB_RESULT_LEASE_FINISHED, an open
//   one is cancelled when destroyed, and it keeps its server_load's handle alive).
// - Every failure throws lb::error (derived from std::runtime_error) carrying the lb_result
//   code; after a throw the balancer is unchanged. (LB_RESULT_BUFFER_TOO_SMALL, which lb.h
//   reports after the pick happened, never reaches you: buffers are sized with
//   lb_balancer_id_size_bound and grown and retried in the rare race, so that call counts
//   twice.) An id buffer size that overflows size_t throws std::length_error. Batches above
//   LB_MAX_BATCH throw LB_RESULT_BATCH_TOO_LARGE before anything is allocated.
// - Single picks copy the id through a stack buffer when the bound allows (ids up to 255
//   bytes), so they allocate nothing but the answer's own string, which is sized to the id.
// - Keys and ids are std::string_view (any bytes for keys; UTF-8 for ids); answers are
//   std::string copies, never views into balancer memory, so they stay valid whatever other
//   threads do.
// - Thread safety is the C API's: every const member function and add/remove/set_weight/update
//   (their located forms and the locality setters too), report/report_load/offer_probe may be
//   called concurrently on one balancer; moving or destroying it needs exclusive access. The
//   same holds for a server_load; a load_report is immutable.
//
// Link with -llb (pkg-config: liblb).
#ifndef LB_HPP
#define LB_HPP

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "lb.h"

namespace lb {

/// A liblb failure: `code()` is the lb_result, `name()` its stable name ("LB_UNKNOWN_NODE").
class error : public std::runtime_error {
public:
    explicit error(lb_result code)
        : std::runtime_error(std::string(lb_result_name(code)) + ": " + lb_result_str(code)),
          code_(code) {}

    lb_result code() const noexcept { return code_; }
    const char *name() const noexcept { return lb_result_name(code_); }

private:
    lb_result code_;
};

namespace detail {
inline void check(lb_result result) {
    if (result != LB_RESULT_OK) throw error(result);
}

/// The entries a C listing gives (`lb_balancer_nodes`, `_stats`, `_subset`,
/// `_located_nodes`), its buffers grown until they fit: another thread may add nodes between
/// the sizing call and the filling one. The entries point into `strings`, which the caller
/// keeps while it reads them.
template <typename Entry>
std::vector<Entry> listing(const lb_balancer *b,
                           lb_result (*list)(const lb_balancer *, Entry *, size_t, char *, size_t,
                                             size_t *, size_t *),
                           std::string &strings) {
    size_t count = 0, size = 0;
    std::vector<Entry> out;
    lb_result r = list(b, nullptr, 0, nullptr, 0, &count, &size);
    while (r == LB_RESULT_BUFFER_TOO_SMALL) {
        out.resize(count);
        strings.resize(size);
        r = list(b, out.data(), out.size(), strings.data(), strings.size(), &count, &size);
    }
    check(r);
    out.resize(count);
    return out;
}

struct balancer_deleter {
    void operator()(lb_balancer *b) const noexcept { lb_balancer_free(b); }
};
struct lease_deleter {
    void operator()(lb_lease *l) const noexcept { lb_lease_cancel(l); }
};
struct options_deleter {
    void operator()(lb_options *o) const noexcept { lb_options_free(o); }
};
struct retry_budget_deleter {
    void operator()(lb_retry_budget *b) const noexcept { lb_retry_budget_free(b); }
};
struct retry_throttle_deleter {
    void operator()(lb_retry_throttle *t) const noexcept { lb_retry_throttle_free(t); }
};
struct adaptive_throttle_deleter {
    void operator()(lb_adaptive_throttle *t) const noexcept { lb_adaptive_throttle_free(t); }
};
struct hedging_deleter {
    void operator()(lb_hedging *h) const noexcept { lb_hedging_free(h); }
};
struct request_deleter {
    void operator()(lb_request *r) const noexcept { lb_request_free(r); }
};
struct load_report_deleter {
    void operator()(lb_load_report *r) const noexcept { lb_load_report_free(r); }
};
struct server_load_deleter {
    void operator()(lb_server_load *l) const noexcept { lb_server_load_free(l); }
};

/// The C API's nanoseconds as a duration (saturating at its largest value).
inline std::chrono::nanoseconds from_ns(uint64_t ns) {
    return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(
        std::min<uint64_t>(ns, std::numeric_limits<std::chrono::nanoseconds::rep>::max())));
}

/// A time on the caller's monotonic clock as the C API's nanoseconds (negative throws
/// std::out_of_range: the clock never reads before its start).
inline uint64_t now_ns(std::chrono::nanoseconds now) {
    if (now.count() < 0)
        throw std::out_of_range("lb: now must be >= 0, got " + std::to_string(now.count()) + " ns");
    return static_cast<uint64_t>(now.count());
}

/// The C view of an optional key: no key is NULL/0.
inline const void *key_ptr(const std::optional<std::string_view> &key) {
    return key ? (key->data() ? key->data() : "") : nullptr;
}
inline size_t key_len(const std::optional<std::string_view> &key) { return key ? key->size() : 0; }

/// Id buffer bytes for `n` answers whose ids take at most `bound` bytes each (at least 1 byte):
/// throws std::length_error when that does not fit in a size_t (possible on 32-bit targets)
/// rather than wrapping round to a small buffer.
inline size_t id_capacity(size_t bound, size_t n) {
    if (bound == 0) bound = 1;
    if (n == 0) n = 1;
    if (n > std::numeric_limits<size_t>::max() / bound)
        throw std::length_error("lb: id buffer size overflows size_t");
    return bound * n;
}

/// A latency as the C API's nanoseconds: negative ones are refused (std::out_of_range), not
/// clamped to 0, as Python (ValueError) and Node (RangeError) refuse them.
inline uint64_t latency_ns(std::chrono::nanoseconds latency) {
    if (latency.count() < 0)
        throw std::out_of_range("lb: latency must be >= 0, got " +
                                std::to_string(latency.count()) + " ns");
    return static_cast<uint64_t>(latency.count());
}

/// An optional time as the C API's nanoseconds: empty is LB_LATENCY_NONE; negative ones throw
/// std::out_of_range naming `what`.
inline uint64_t time_ns(const std::optional<std::chrono::nanoseconds> &time, const char *what) {
    if (!time) return LB_LATENCY_NONE;
    if (time->count() < 0)
        throw std::out_of_range(std::string("lb: ") + what + " must be >= 0, got " +
                                std::to_string(time->count()) + " ns");
    return static_cast<uint64_t>(time->count());
}

/// Throws LB_RESULT_BATCH_TOO_LARGE for more than LB_MAX_BATCH answers, before the answer
/// arrays are allocated (the C call would refuse them anyway).
inline void check_batch(size_t n) {
    if (n > static_cast<size_t>(LB_MAX_BATCH)) throw error(LB_RESULT_BATCH_TOO_LARGE);
}
}  // namespace detail

/// liblb's monotonic clock (lb_now_ns): the clock every balancer reads (balancer::now()), from
/// one origin per process; the default `now` of budgets and hedging policies.
inline std::chrono::nanoseconds now() {
    return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(lb_now_ns()));
}

/// liblb's version string, e.g. "0.1.0".
inline std::string_view version() { return lb_version(); }

/// Every algorithm name lb::balancer accepts.
inline std::vector<std::string_view> algorithms() {
    std::vector<std::string_view> names;
    for (size_t i = 0; const char *name = lb_algorithm_name(i); i++) names.emplace_back(name);
    return names;
}

/// Why a request failed (docs/health.md): an error and a timeout extend the node's failure
/// streak; an overloaded node's answer does not, and with a retry-after it pauses the node.
enum class failure_kind : lb_outcome {
    error = LB_OUTCOME_ERROR,
    timeout = LB_OUTCOME_TIMEOUT,
    overloaded = LB_OUTCOME_OVERLOADED,
};

/// A node: id, weight (0 = drained) and a tag of the caller's choosing.
struct node {
    std::string id;
    uint32_t weight = 1;
    uint64_t tag = 0;

    bool operator==(const node &o) const {
        return id == o.id && weight == o.weight && tag == o.tag;
    }
};

/// A node with its place (issue 24): `locality` is "region/zone/sub_zone" (any part may be
/// empty, at most three parts; "" is the unnamed locality) and `priority` its level (0 = most
/// preferred). Taken by balancer::located, add_located and update_located; listed by
/// located_nodes(). A plain lb::node is this with locality "" and priority 0.
struct located_node {
    std::string id;
    uint32_t weight = 1;
    uint64_t tag = 0;
    std::string locality;
    uint32_t priority = 0;

    bool operator==(const located_node &o) const {
        return id == o.id && weight == o.weight && tag == o.tag && locality == o.locality &&
               priority == o.priority;
    }
};

/// One answer: the node's id and tag.
struct picked {
    std::string id;
    uint64_t tag = 0;

    bool operator==(const picked &o) const { return id == o.id && tag == o.tag; }
};

/// One node's load (lb_balancer_stats): counters of requests routed through leases and
/// reports; `latency` is the peak-EWMA estimate, empty before the first sample.
struct node_stats {
    std::string id;
    uint32_t weight = 0;
    uint64_t tag = 0;
    size_t in_flight = 0;
    uint64_t requests = 0;
    uint64_t failures = 0;
    std::optional<std::chrono::nanoseconds> latency;
    /// LB_NODE_HEALTHY, LB_NODE_WARMING, LB_NODE_EJECTED, LB_NODE_DOWN or LB_NODE_OVERLOADED.
    lb_node_status status = LB_NODE_HEALTHY;
    /// When a warm-up, an ejection or an overload pause ends, on liblb's monotonic clock (one per process;
    /// balancer::now() reads it, so `*until - b.now()` is the time left); empty otherwise.
    std::optional<std::chrono::nanoseconds> until;
};

/// Which map of a load report an entry belongs to (lb_load_entry.map).
enum class load_map : uint32_t {
    request_cost = LB_LOAD_REQUEST_COST,
    utilization = LB_LOAD_UTILIZATION,
    named_metrics = LB_LOAD_NAMED_METRICS,
};

/// The numbers of a load report, as `OrcaLoadReport` names them (0 where the report leaves
/// them out): utilisations are fractions (1.0 fully used), `rps_fractional` queries and `eps`
/// errors per second (`rps` is the deprecated integer field).
struct load_values {
    double cpu_utilization = 0;
    double mem_utilization = 0;
    double application_utilization = 0;
    uint64_t rps = 0;
    double rps_fractional = 0;
    double eps = 0;
};

/// One named value of a load report: its map, its name (a copy) and its value.
struct load_entry {
    load_map map = load_map::named_metrics;
    std::string name;
    double value = 0;

    bool operator==(const load_entry &o) const {
        return map == o.map && name == o.name && value == o.value;
    }
};

class server_load;

/// An ORCA load report (lb_load_report): from load_report::parse (what a backend's answer
/// carried) or server_load::report(). Give it to balancer::report_load or end a lease with it
/// (lease::success / lease::failure taking a report); neither takes it over, so one report may
/// serve many calls. Immutable: every member is thread-safe. Move-only; a moved-from report
/// holds no handle (get() is NULL, and using it throws LB_RESULT_NULL_PARAMETER).
class load_report {
public:
    /// Parses a serialized `OrcaLoadReport` (any bytes) or an `endpoint-load-metrics` header
    /// value (`BIN <base64>`, `JSON <json>`, `TEXT name:value,...`); "" is the empty report.
    /// Anything else throws LB_RESULT_INVALID_LOAD_REPORT.
    static load_report parse(std::string_view data) {
        lb_load_report *raw = nullptr;
        detail::check(lb_load_report_parse(reinterpret_cast<const uint8_t *>(data.data()),
                                           data.size(), &raw));
        return load_report(raw);
    }

    /// The six numbers.
    load_values values() const {
        lb_load_values v{};
        detail::check(lb_load_report_values(get(), &v));
        return {v.cpu_utilization, v.mem_utilization, v.application_utilization,
                v.rps,             v.rps_fractional,  v.eps};
    }

    /// The named values: request costs, utilisations, named metrics, in that order, each map
    /// in the report's order.
    std::vector<load_entry> entries() const {
        size_t len = 0;
        std::vector<lb_load_entry> out;
        lb_result r = lb_load_report_entries(get(), nullptr, 0, &len);
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {
            out.resize(len);
            r = lb_load_report_entries(get(), out.data(), out.size(), &len);
        }
        detail::check(r);
        std::vector<load_entry> result;
        result.reserve(len);
        for (size_t i = 0; i < len; i++)
            result.push_back(load_entry{static_cast<load_map>(out[i].map),
                                        std::string(out[i].name, out[i].name_len), out[i].value});
        return result;
    }

    /// The C handle, still owned by this object.
    const lb_load_report *get() const noexcept { return handle_.get(); }

private:
    friend class server_load;
    explicit load_report(lb_load_report *raw) noexcept : handle_(raw) {}
    std::unique_ptr<lb_load_report, detail::load_report_deleter> handle_;
};

class retry_budget;
class retry_throttle;
class adaptive_throttle;
class hedging;
class request;
struct request_options;

/// A request in progress on one node, from balancer::acquire (its in-flight count is one
/// higher until the lease ends). End it explicitly with success() or failure() — with the
/// latency you measured, or without to use the time since acquire — or cancel(); a lease
/// destroyed (or assigned over) while still open is cancelled: in-flight released, nothing
/// counted. Movable, not copyable; a moved-from or ended lease is empty (`!lease`), and ending
/// an empty lease throws lb::error(LB_RESULT_LEASE_FINISHED), as Python and Node do. A negative
/// latency throws std::out_of_range and leaves the lease open. It stays valid after its node
/// is removed or its balancer destroyed. One thread at a time.
class lease {
public:
    lease() noexcept = default;

    /// The node's id and tag (copied at acquire).
    const std::string &id() const noexcept { return id_; }
    uint64_t tag() const noexcept { return tag_; }
    explicit operator bool() const noexcept { return handle_ != nullptr; }

    /// Time since acquire by liblb's monotonic clock.
    std::chrono::nanoseconds elapsed() const {
        if (!handle_) throw error(LB_RESULT_LEASE_FINISHED);
        uint64_t ns = 0;
        detail::check(lb_lease_elapsed(handle_.get(), &ns));
        return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(
            std::min<uint64_t>(ns, std::numeric_limits<std::chrono::nanoseconds::rep>::max())));
    }

    void success(std::chrono::nanoseconds latency) { finish(LB_OUTCOME_SUCCESS, latency); }
    void failure(std::chrono::nanoseconds latency) { finish(LB_OUTCOME_FAILURE, latency); }
    void success() { finish(LB_OUTCOME_SUCCESS, elapsed()); }
    void failure() { finish(LB_OUTCOME_FAILURE, elapsed()); }

    /// Ends the request as a failure of `kind` after `latency` (empty: the time since acquire),
    /// with an overloaded node's `retry_after` (empty: none), which keeps the node from picks
    /// until then (capped by the option max_retry_after_ms):
    /// `lease.failure(lb::failure_kind::overloaded, std::nullopt, std::chrono::seconds(5))`.
    /// A negative time throws std::out_of_range and leaves the lease open.
    void failure(failure_kind kind, std::optional<std::chrono::nanoseconds> latency = std::nullopt,
                 std::optional<std::chrono::nanoseconds> retry_after = std::nullopt) {
        finish_info(static_cast<lb_outcome>(kind), latency, retry_after, nullptr);
    }

    /// Ends the request as a success after `latency` (empty: the time since acquire), with
    /// the ORCA load report its answer carried (lb_lease_finish_load; see
    /// balancer::report_load): `lease.success(lb::load_report::parse(header))`.
    void success(const load_report &load,
                 std::optional<std::chrono::nanoseconds> latency = std::nullopt) {
        finish_info(LB_OUTCOME_SUCCESS, latency, std::nullopt, &load);
    }

    /// Ends the request as a failure of `kind`, as failure(kind, latency, retry_after) does,
    /// with the load report its answer carried. On any throw the lease stays open.
    void failure(const load_report &load, failure_kind kind = failure_kind::error,
                 std::optional<std::chrono::nanoseconds> latency = std::nullopt,
                 std::optional<std::chrono::nanoseconds> retry_after = std::nullopt) {
        finish_info(static_cast<lb_outcome>(kind), latency, retry_after, &load);
    }

    /// Ends the request without an outcome (also what the destructor does). Empty: no-op.
    void cancel() noexcept { handle_.reset(); }

    /// The C handle, still owned by this object.
    lb_lease *get() const noexcept { return handle_.get(); }

private:
    friend class balancer;
    friend class request;
    lease(lb_lease *handle, std::string id, uint64_t tag)
        : handle_(handle), id_(std::move(id)), tag_(tag) {}

    void finish(lb_outcome outcome, std::chrono::nanoseconds latency) {
        if (!handle_) throw error(LB_RESULT_LEASE_FINISHED);
        uint64_t ns = detail::latency_ns(latency);
        detail::check(lb_lease_finish(handle_.get(), outcome, ns));
        (void)handle_.release();  // lb_lease_finish freed it
    }

    /// lb_lease_finish_info, or lb_lease_finish_load with a report.
    void finish_info(lb_outcome outcome, std::optional<std::chrono::nanoseconds> latency,
                     std::optional<std::chrono::nanoseconds> retry_after,
                     const load_report *load) {
        if (!handle_) throw error(LB_RESULT_LEASE_FINISHED);
        lb_outcome_info info{outcome, detail::time_ns(latency, "latency"),
                             detail::time_ns(retry_after, "retry_after")};
        detail::check(load ? lb_lease_finish_load(handle_.get(), &info, load->get())
                           : lb_lease_finish_info(handle_.get(), &info));
        (void)handle_.release();  // lb_lease_finish_info / _load freed it
    }

    std::unique_ptr<lb_lease, detail::lease_deleter> handle_;
    std::string id_;
    uint64_t tag_ = 0;
};

/// Balancer options, set by name (every option lb.h lists at lb_options), in any order: the
/// rules between options are checked when a balancer is built. Unknown names or bad values throw.
class options {
public:
    options() {
        lb_options *raw = nullptr;
        detail::check(lb_options_new(&raw));
        handle_.reset(raw);
    }

    /// Integer options (all but `hash`). Negative values throw LB_INVALID_OPTION_VALUE.
    template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>,
                                          int> = 0>
    options &set(std::string_view name, Int value) {
        if constexpr (std::is_signed_v<Int>) {
            if (value < 0) throw error(LB_RESULT_INVALID_OPTION_VALUE);
        }
        detail::check(lb_options_set_int(handle_.get(), name.data(), name.size(),
                                         static_cast<uint64_t>(value)));
        return *this;
    }

    /// Text options (`hash`; `slow_start_aggression` as `"1.5"`; integers as decimal text).
    options &set(std::string_view name, std::string_view value) {
        detail::check(lb_options_set_str(handle_.get(), name.data(), name.size(), value.data(),
                                         value.size()));
        return *this;
    }

    // String literals are text, not booleans or integers.
    options &set(std::string_view name, const char *value) {
        return set(name, std::string_view(value));
    }

    const lb_options *get() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<lb_options, detail::options_deleter> handle_;
};

/// A load balancer. See lb.h for the algorithms and their behaviour.
class balancer {
public:
    explicit balancer(std::string_view algorithm, const std::vector<node> &nodes = {},
                      const options *opts = nullptr) {
        std::vector<lb_node> c = to_c(nodes);
        lb_balancer *raw = nullptr;
        detail::check(lb_balancer_new(algorithm.data(), algorithm.size(),
                                      opts ? opts->get() : nullptr, c.data(), c.size(), &raw));
        handle_.reset(raw);
    }

    balancer(std::string_view algorithm, const std::vector<node> &nodes, const options &opts)
        : balancer(algorithm, nodes, &opts) {}

    /// A balancer whose nodes carry their locality and priority (lb_balancer_new_located).
    /// A named constructor, so `lb::balancer("random", {{"a", 1}})` stays unambiguous.
    static balancer located(std::string_view algorithm, const std::vector<located_node> &nodes,
                            const options *opts = nullptr) {
        std::vector<lb_located_node> c = to_c(nodes);
        lb_balancer *raw = nullptr;
        detail::check(lb_balancer_new_located(algorithm.data(), algorithm.size(),
                                              opts ? opts->get() : nullptr, c.data(), c.size(),
                                              &raw));
        return balancer(raw);
    }

    static balancer located(std::string_view algorithm, const std::vector<located_node> &nodes,
                            const options &opts) {
        return located(algorithm, nodes, &opts);
    }

    void add(std::string_view id, uint32_t weight = 1, uint64_t tag = 0) {
        detail::check(lb_balancer_add(get(), id.data(), id.size(), weight, tag));
    }

    void remove(std::string_view id) {
        detail::check(lb_balancer_remove(get(), id.data(), id.size()));
    }

    void set_weight(std::string_view id, uint32_t weight) {
        detail::check(lb_balancer_set_weight(get(), id.data(), id.size(), weight));
    }

    /// Replaces the whole membership atomically.
    void update(const std::vector<node> &nodes) {
        std::vector<lb_node> c = to_c(nodes);
        detail::check(lb_balancer_update(get(), c.data(), c.size()));
    }

    /// Adds a node with its place (lb_balancer_add_located); a bad locality throws
    /// LB_INVALID_LOCALITY.
    void add_located(const located_node &n) {
        detail::check(lb_balancer_add_located(get(), n.id.data(), n.id.size(), n.weight, n.tag,
                                              n.locality.data(), n.locality.size(), n.priority));
    }

    /// Replaces the whole membership atomically with located nodes.
    void update_located(const std::vector<located_node> &nodes) {
        std::vector<lb_located_node> c = to_c(nodes);
        detail::check(lb_balancer_update_located(get(), c.data(), c.size()));
    }

    /// Moves a node to `locality` at `priority` (weight, tag, counters and health stay).
    void set_location(std::string_view id, std::string_view locality, uint32_t priority) {
        detail::check(lb_balancer_set_location(get(), id.data(), id.size(), locality.data(),
                                               locality.size(), priority));
    }

    /// Locality-weighted balancing for the unkeyed algorithms: `{{"r/a", 1}, {"r/b", 2}}`; a
    /// locality left out has weight 0; an empty list turns it off.
    void set_locality_weights(const std::vector<std::pair<std::string_view, uint32_t>> &weights) {
        std::vector<lb_locality_weight> c(weights.size());
        for (size_t i = 0; i < weights.size(); i++)
            c[i] = lb_locality_weight{weights[i].first.data(), weights[i].first.size(),
                                      weights[i].second};
        detail::check(lb_balancer_set_locality_weights(get(), c.data(), c.size()));
    }

    /// The caller's own locality, for zone-aware routing: "" is the unnamed locality,
    /// std::nullopt none (lb_balancer_clear_local_locality).
    void set_local_locality(std::optional<std::string_view> locality) {
        if (locality)
            detail::check(
                lb_balancer_set_local_locality(get(), locality->data(), locality->size()));
        else
            clear_local_locality();
    }

    /// No local locality (the default): zone-aware routing off.
    void clear_local_locality() { detail::check(lb_balancer_clear_local_locality(get())); }

    /// The caller's fleet, instances per locality: `{{"r/a", 4}, {"r/b", 2}}`; with
    /// set_local_locality it turns on zone-aware routing; an empty list turns it off.
    void set_local_localities(const std::vector<std::pair<std::string_view, uint64_t>> &spread) {
        std::vector<lb_locality_count> c(spread.size());
        for (size_t i = 0; i < spread.size(); i++)
            c[i] = lb_locality_count{spread[i].first.data(), spread[i].first.size(),
                                     spread[i].second};
        detail::check(lb_balancer_set_local_localities(get(), c.data(), c.size()));
    }

    /// Picks a node (no key for the unkeyed algorithms; keyed ones throw LB_KEY_REQUIRED).
    picked pick(std::optional<std::string_view> key = std::nullopt) const {
        char small[256];
        std::string large;  // only when an id may not fit `small`
        char *buf = small;
        size_t cap = sizeof small;
        size_t bound = id_bound();
        if (bound > cap) {
            large.resize(bound);
            buf = large.data();
            cap = large.size();
        }
        uint64_t tag = 0;
        size_t size = 0;
        lb_result r =
            lb_balancer_pick(get(), detail::key_ptr(key), detail::key_len(key), &tag, buf, cap, &size);
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {  // only if a longer id was added meanwhile
            large.resize(size);
            buf = large.data();
            cap = large.size();
            r = lb_balancer_pick(get(), detail::key_ptr(key), detail::key_len(key), &tag, buf, cap,
                                 &size);
        }
        detail::check(r);
        return {std::string(buf, size - 1), tag};
    }

    /// The chosen node's tag only: the fastest pick (copies nothing).
    uint64_t pick_tag(std::optional<std::string_view> key = std::nullopt) const {
        uint64_t tag = 0;
        detail::check(lb_balancer_pick(get(), detail::key_ptr(key), detail::key_len(key), &tag,
                                       nullptr, 0, nullptr));
        return tag;
    }

    /// One answer per key, all from the same membership snapshot.
    std::vector<picked> pick_many(const std::vector<std::string_view> &keys) const {
        detail::check_batch(keys.size());
        std::vector<lb_key> c(keys.size());
        for (size_t i = 0; i < keys.size(); i++) c[i] = lb_key{keys[i].data(), keys[i].size()};
        std::vector<lb_pick> out(keys.size());
        return collect(out, [&](char *buf, size_t cap, size_t *size) {
            return lb_balancer_pick_many(get(), c.data(), c.size(), out.data(), buf, cap, size);
        });
    }

    /// `count` unkeyed picks from the same membership snapshot.
    std::vector<picked> pick_n(size_t count) const {
        detail::check_batch(count);
        std::vector<lb_pick> out(count);
        return collect(out, [&](char *buf, size_t cap, size_t *size) {
            return lb_balancer_pick_n(get(), count, out.data(), buf, cap, size);
        });
    }

    /// Up to `limit` distinct nodes in retry order; the first is what pick() would answer.
    /// `limit` may be anything (SIZE_MAX: every node): the answer arrays are sized for at most
    /// as many nodes as the balancer had when the call began (a node added by another thread
    /// meanwhile may then be left out).
    std::vector<picked> attempts(std::optional<std::string_view> key, size_t limit) const {
        limit = std::min(limit, size());
        std::vector<lb_pick> out(limit);
        size_t count = 0;
        std::vector<picked> answers = collect(out, [&](char *buf, size_t cap, size_t *size) {
            return lb_balancer_attempts(get(), detail::key_ptr(key), detail::key_len(key),
                                        out.data(), limit, buf, cap, size, &count);
        });
        answers.resize(count);
        return answers;
    }

    /// Picks like pick() and starts a request on the node: end the returned lease with
    /// success()/failure() (or let it cancel). Throws like pick().
    lease acquire(std::optional<std::string_view> key = std::nullopt) const {
        std::string buf(std::max<size_t>(id_bound(), 1), '\0');
        lb_lease *handle = nullptr;
        uint64_t tag = 0;
        size_t size = 0;
        lb_result r = LB_RESULT_BUFFER_TOO_SMALL;
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {  // a longer id added meanwhile: the lease
            buf.resize(std::max(size, buf.size()));  // was cancelled; acquire again
            r = lb_balancer_acquire(get(), detail::key_ptr(key), detail::key_len(key), &handle,
                                    &tag, buf.data(), buf.size(), &size);
        }
        detail::check(r);
        return lease(handle, std::string(buf.data(), size - 1), tag);
    }

    /// A request for `key` (lb_request_new): attempts on distinct nodes in the key's retry
    /// order, retried, backed off and limited as `opts` and the balancer's budget say. See
    /// lb::request.
    lb::request request(std::optional<std::string_view> key = std::nullopt) const;
    lb::request request(std::optional<std::string_view> key, const request_options &opts) const;

    /// Gives every later request this budget (the balancer keeps its own reference, so the
    /// object may be destroyed first); replaces any budget set before.
    void set_budget(const retry_budget &budget) const;
    void set_budget(const retry_throttle &throttle) const;
    void set_budget(const adaptive_throttle &throttle) const;
    /// Later requests have no budget.
    void clear_budget() const { detail::check(lb_balancer_clear_budget(get())); }

    /// Records the outcome of a request routed after pick() (in-flight untouched).
    /// A negative latency throws std::out_of_range (nothing recorded), as Python and Node refuse it.
    void report(std::string_view id, bool ok, std::chrono::nanoseconds latency) {
        uint64_t ns = detail::latency_ns(latency);
        detail::check(lb_balancer_report(get(), id.data(), id.size(),
                                         ok ? LB_OUTCOME_SUCCESS : LB_OUTCOME_FAILURE, ns));
    }

    /// Records a failure of `kind` for a request routed after pick(): `latency` may be unknown
    /// (empty), and an overloaded node's `retry_after` keeps it from picks until then (capped
    /// by the option max_retry_after_ms): `b.report("a", lb::failure_kind::timeout)`. A
    /// negative time throws std::out_of_range (nothing recorded).
    void report(std::string_view id, failure_kind kind,
                std::optional<std::chrono::nanoseconds> latency = std::nullopt,
                std::optional<std::chrono::nanoseconds> retry_after = std::nullopt) {
        lb_outcome_info info{static_cast<lb_outcome>(kind), detail::time_ns(latency, "latency"),
                             detail::time_ns(retry_after, "retry_after")};
        detail::check(lb_balancer_report_info(get(), id.data(), id.size(), &info));
    }

    /// Gives the balancer the ORCA load report of node `id`, as received now (an
    /// `endpoint-load-metrics` header or trailer, an out-of-band stream): `client_side_wrr`
    /// weighs nodes by them, `prequal` reads the named metrics `rif` and `latency_ms` as a
    /// probe answer, the others keep them. The report stays yours.
    void report_load(std::string_view id, const load_report &load) {
        detail::check(lb_balancer_report_load(get(), id.data(), id.size(), load.get()));
    }

    /// Up to `count` distinct nodes to probe now (prequal), chosen at random among those with
    /// a positive weight: fewer when the balancer has fewer. Send each a probe and give the
    /// answer to offer_probe(); probes_due() says how many the picks asked for. `count` above
    /// LB_MAX_BATCH throws LB_RESULT_BATCH_TOO_LARGE before anything is allocated.
    std::vector<std::string> probe_targets(size_t count) const {
        detail::check_batch(count);
        size_t limit = std::min(count, size());  // arrays sized as attempts() sizes them
        std::vector<lb_pick> out(limit);
        size_t written = 0;
        std::vector<picked> answers = collect(out, [&](char *buf, size_t cap, size_t *size) {
            return lb_balancer_probe_targets(get(), limit, out.data(), buf, cap, size, &written);
        });
        answers.resize(std::min(written, answers.size()));
        std::vector<std::string> ids;
        ids.reserve(answers.size());
        for (picked &p : answers) ids.push_back(std::move(p.id));
        return ids;
    }

    /// A probe answer from node `id` (server_load::probe() on a liblb backend): its requests
    /// in flight and its latency estimate, stamped with the balancer's clock. `prequal` adds
    /// it to its pool; other algorithms ignore it. A negative latency throws std::out_of_range
    /// (nothing recorded).
    void offer_probe(std::string_view id, uint32_t rif, std::chrono::nanoseconds latency) {
        uint64_t ns = detail::latency_ns(latency);
        detail::check(lb_balancer_offer_probe(get(), id.data(), id.size(), rif, ns));
    }

    /// How many probes the picks since the last call made due (prequal's `probe_rate` per
    /// pick; always 0 for other algorithms): ask probe_targets() for that many.
    size_t probes_due() const {
        size_t due = 0;
        detail::check(lb_balancer_probes_due(get(), &due));
        return due;
    }

    /// Takes a node out of service until mark_up() (no rebuild, weight kept).
    void mark_down(std::string_view id) {
        detail::check(lb_balancer_mark_down(get(), id.data(), id.size()));
    }

    /// Puts a node marked down back in service (warming up first with slow start).
    void mark_up(std::string_view id) {
        detail::check(lb_balancer_mark_up(get(), id.data(), id.size()));
    }

    /// Whether picks ignore health: fewer than panic_threshold % of the nodes are healthy.
    bool panic() const {
        bool out = false;
        detail::check(lb_balancer_panic(get(), &out));
        return out;
    }

    /// The balancer's clock (lb_balancer_now_ns): liblb's monotonic clock, one per process;
    /// the clock of node_stats::until, so `*s.until - b.now()` is the time left.
    std::chrono::nanoseconds now() const {
        uint64_t ns = 0;
        detail::check(lb_balancer_now_ns(get(), &ns));
        return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(
            std::min<uint64_t>(ns, std::numeric_limits<std::chrono::nanoseconds::rep>::max())));
    }

    /// Each node's load in insertion order (one consistent node set).
    std::vector<node_stats> stats() const {
        std::string ids;
        std::vector<lb_node_stats> out = detail::listing(get(), lb_balancer_stats, ids);
        size_t count = out.size();
        std::vector<node_stats> result;
        result.reserve(count);
        for (size_t i = 0; i < count; i++) {
            const lb_node_stats &s = out[i];
            node_stats n{std::string(s.id, s.id_len), s.weight, s.tag, s.in_flight, s.requests,
                         s.failures, std::nullopt, s.status, std::nullopt};
            if (s.status == LB_NODE_WARMING || s.status == LB_NODE_EJECTED ||
                s.status == LB_NODE_OVERLOADED)
                n.until = std::chrono::nanoseconds(
                    static_cast<std::chrono::nanoseconds::rep>(s.until_ns));
            if (s.latency_ns != LB_LATENCY_NONE)
                n.latency = std::chrono::nanoseconds(
                    static_cast<std::chrono::nanoseconds::rep>(s.latency_ns));
            result.push_back(std::move(n));
        }
        return result;
    }

    /// The node for a 64-bit key hash (ring_hash, maglev, rendezvous, jump; others throw
    /// LB_HASH_UNSUPPORTED).
    picked pick_hash(uint64_t hash) const {
        std::string buf(std::max<size_t>(id_bound(), 1), '\0');
        uint64_t tag = 0;
        size_t size = 0;
        lb_result r = lb_balancer_pick_hash(get(), hash, &tag, buf.data(), buf.size(), &size);
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {
            buf.resize(size);
            r = lb_balancer_pick_hash(get(), hash, &tag, buf.data(), buf.size(), &size);
        }
        detail::check(r);
        return {std::string(buf.data(), size - 1), tag};
    }

    /// attempts() for a 64-bit key hash.
    std::vector<picked> attempts_hash(uint64_t hash, size_t limit) const {
        limit = std::min(limit, size());
        std::vector<lb_pick> out(limit);
        size_t count = 0;
        std::vector<picked> answers = collect(out, [&](char *buf, size_t cap, size_t *size) {
            return lb_balancer_attempts_hash(get(), hash, out.data(), limit, buf, cap, size,
                                             &count);
        });
        answers.resize(count);
        return answers;
    }

    /// The nodes in insertion order (one consistent snapshot).
    std::vector<node> nodes() const {
        std::string ids;
        std::vector<lb_node> out = detail::listing(get(), lb_balancer_nodes, ids);
        size_t count = out.size();
        std::vector<node> result;
        result.reserve(count);
        for (size_t i = 0; i < count; i++)
            result.push_back(
                node{std::string(out[i].id, out[i].id_len), out[i].weight, out[i].tag});
        return result;
    }

    /// The ids picks choose from, in node order (one consistent snapshot): with subsetting
    /// (option "subset", docs/subsetting.md) this client's subset of the nodes with weight > 0,
    /// else every node with weight > 0.
    std::vector<std::string> subset() const {
        std::string ids;
        std::vector<lb_pick> out = detail::listing(get(), lb_balancer_subset, ids);
        size_t count = out.size();
        std::vector<std::string> result;
        result.reserve(count);
        for (size_t i = 0; i < count; i++) result.emplace_back(out[i].id, out[i].id_len);
        return result;
    }

    /// The nodes with their places, in insertion order (one consistent snapshot).
    std::vector<located_node> located_nodes() const {
        std::string strings;
        std::vector<lb_located_node> out =
            detail::listing(get(), lb_balancer_located_nodes, strings);
        size_t count = out.size();
        std::vector<located_node> result;
        result.reserve(count);
        for (size_t i = 0; i < count; i++)
            result.push_back(located_node{std::string(out[i].id, out[i].id_len), out[i].weight,
                                          out[i].tag,
                                          std::string(out[i].locality, out[i].locality_len),
                                          out[i].priority});
        return result;
    }

    size_t size() const {
        size_t len = 0;
        detail::check(lb_balancer_len(get(), &len));
        return len;
    }

    bool contains(std::string_view id) const {
        bool found = false;
        detail::check(lb_balancer_contains(get(), id.data(), id.size(), &found));
        return found;
    }

    std::string_view algorithm() const {
        const char *name = nullptr;
        detail::check(lb_balancer_algorithm(get(), &name));
        return name;
    }

    /// The C handle, for calling lb.h directly (still owned by this object).
    lb_balancer *get() const noexcept { return handle_.get(); }

private:
    /// Adopts a handle lb_balancer_new_located made.
    explicit balancer(lb_balancer *raw) noexcept { handle_.reset(raw); }

    static std::vector<lb_node> to_c(const std::vector<node> &nodes) {
        std::vector<lb_node> c(nodes.size());
        for (size_t i = 0; i < nodes.size(); i++)
            c[i] = lb_node{nodes[i].id.data(), nodes[i].id.size(), nodes[i].weight, nodes[i].tag};
        return c;
    }

    static std::vector<lb_located_node> to_c(const std::vector<located_node> &nodes) {
        std::vector<lb_located_node> c(nodes.size());
        for (size_t i = 0; i < nodes.size(); i++) {
            const located_node &n = nodes[i];
            c[i] = lb_located_node{n.id.data(),       n.id.size(),       n.weight, n.tag,
                                   n.locality.data(), n.locality.size(), n.priority};
        }
        return c;
    }

    /// The longest current id + 1 (lb_balancer_id_size_bound): an id buffer of this size
    /// per answer makes BUFFER_TOO_SMALL, which would cost a pick, happen only when another
    /// thread adds a longer id at the same moment.
    size_t id_bound() const {
        size_t bound = 0;
        detail::check(lb_balancer_id_size_bound(get(), &bound));
        return bound;
    }

    /// Id buffer bytes that fit `n` answers. Throws std::length_error if that size overflows
    /// size_t.
    size_t id_capacity(size_t n) const { return detail::id_capacity(id_bound(), n); }

    /// Runs a batch call with an id buffer sized from the bound (growing it if a longer id
    /// appeared meanwhile) and converts the answers.
    template <class Call>
    std::vector<picked> collect(std::vector<lb_pick> &out, Call call) const {
        std::string ids(id_capacity(out.size()), '\0');
        size_t size = 0;
        lb_result r = call(ids.data(), ids.size(), &size);
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {
            ids.resize(size);
            r = call(ids.data(), ids.size(), &size);
        }
        detail::check(r);
        std::vector<picked> answers;
        answers.reserve(out.size());
        for (const lb_pick &p : out) {
            if (!p.id) break;  // attempts: fewer answers than slots
            answers.push_back(picked{std::string(p.id, p.id_len), p.tag});
        }
        return answers;
    }

    std::unique_ptr<lb_balancer, detail::balancer_deleter> handle_;
};

/// A retry budget (lb_retry_budget: tower's TpsBudget): every request deposit()s, every retry
/// withdraw()s. Times are on liblb's monotonic clock (lb::now(), the same as balancer::now(),
/// the clock requests use), or any clock of yours that never goes back if the budget is not
/// given to balancers or requests.
/// Owns its handle (move-only); every member function is thread-safe.
class retry_budget {
public:
    explicit retry_budget(std::chrono::milliseconds ttl = std::chrono::seconds(10),
                          uint32_t min_per_sec = 10, double retry_percent = 0.2,
                          std::chrono::nanoseconds now = lb::now()) {
        if (ttl.count() < 0) throw error(LB_RESULT_INVALID_OPTION_VALUE);
        lb_retry_budget *raw = nullptr;
        detail::check(lb_retry_budget_new(static_cast<uint64_t>(ttl.count()), min_per_sec,
                                          retry_percent, detail::now_ns(now), &raw));
        handle_.reset(raw);
    }
    void deposit(std::chrono::nanoseconds now) const {
        detail::check(lb_retry_budget_deposit(get(), detail::now_ns(now)));
    }
    bool withdraw(std::chrono::nanoseconds now) const {
        bool out = false;
        detail::check(lb_retry_budget_withdraw(get(), detail::now_ns(now), &out));
        return out;
    }
    bool can_withdraw(std::chrono::nanoseconds now) const {
        bool out = false;
        detail::check(lb_retry_budget_can_withdraw(get(), detail::now_ns(now), &out));
        return out;
    }
    uint64_t available(std::chrono::nanoseconds now) const {
        uint64_t out = 0;
        detail::check(lb_retry_budget_available(get(), detail::now_ns(now), &out));
        return out;
    }
    lb_retry_budget *get() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<lb_retry_budget, detail::retry_budget_deleter> handle_;
};

/// gRPC's retry throttling (lb_retry_throttle, gRFC A6). Move-only; thread-safe.
class retry_throttle {
public:
    retry_throttle(uint32_t max_tokens, double token_ratio) {
        lb_retry_throttle *raw = nullptr;
        detail::check(lb_retry_throttle_new(max_tokens, token_ratio, &raw));
        handle_.reset(raw);
    }
    /// Records a failed attempt; whether retries are still allowed after it.
    bool failure() const {
        bool out = false;
        detail::check(lb_retry_throttle_failure(get(), &out));
        return out;
    }
    void success() const { detail::check(lb_retry_throttle_success(get())); }
    bool allows() const {
        bool out = false;
        detail::check(lb_retry_throttle_allows(get(), &out));
        return out;
    }
    double tokens() const {
        double out = 0;
        detail::check(lb_retry_throttle_tokens(get(), &out));
        return out;
    }
    lb_retry_throttle *get() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<lb_retry_throttle, detail::retry_throttle_deleter> handle_;
};

/// Client-side adaptive throttling (lb_adaptive_throttle, the SRE book's). Times as for
/// retry_budget; `random` is 64 uniformly random bits of yours. Move-only; thread-safe.
class adaptive_throttle {
public:
    explicit adaptive_throttle(double k = 2.0,
                               std::chrono::milliseconds window = std::chrono::seconds(120),
                               std::chrono::nanoseconds now = lb::now()) {
        if (window.count() < 0) throw error(LB_RESULT_INVALID_OPTION_VALUE);
        lb_adaptive_throttle *raw = nullptr;
        detail::check(lb_adaptive_throttle_new(k, static_cast<uint64_t>(window.count()),
                                               detail::now_ns(now), &raw));
        handle_.reset(raw);
    }
    double rejection(std::chrono::nanoseconds now) const {
        double out = 0;
        detail::check(lb_adaptive_throttle_rejection(get(), detail::now_ns(now), &out));
        return out;
    }
    bool admit(std::chrono::nanoseconds now, uint64_t random) const {
        bool out = false;
        detail::check(lb_adaptive_throttle_admit(get(), detail::now_ns(now), random, &out));
        return out;
    }
    void accepted(std::chrono::nanoseconds now) const {
        detail::check(lb_adaptive_throttle_accepted(get(), detail::now_ns(now)));
    }
    lb_adaptive_throttle *get() const noexcept { return handle_.get(); }

private:
    std::unique_ptr<lb_adaptive_throttle, detail::adaptive_throttle_deleter> handle_;
};

/// When a request sends a hedge (lb_hedging): after a fixed delay (gRPC's hedgingDelay) or after
/// a latency percentile its requests keep (Finagle's BackupRequestFilter). One policy may serve
/// many requests. Move-only; thread-safe.
class hedging {
public:
    /// Hedge after `delay` without an answer.
    static hedging after(std::chrono::nanoseconds delay) {
        lb_hedging *raw = nullptr;
        detail::check(lb_hedging_new_after(detail::latency_ns(delay), &raw));
        return hedging(raw);
    }
    /// Hedge after the `1 - max_extra_load` percentile of recent latencies (0 < x < 1).
    static hedging percentile(double max_extra_load, std::chrono::nanoseconds now = lb::now()) {
        lb_hedging *raw = nullptr;
        detail::check(lb_hedging_new_percentile(max_extra_load, detail::now_ns(now), &raw));
        return hedging(raw);
    }
    lb_hedging *get() const noexcept { return handle_.get(); }

private:
    explicit hedging(lb_hedging *raw) : handle_(raw) {}
    std::unique_ptr<lb_hedging, detail::hedging_deleter> handle_;
};

/// What a request does after an attempt ended (lb_decision).
enum class decision : lb_decision {
    done = LB_DECISION_DONE,    ///< it succeeded
    retry = LB_DECISION_RETRY,  ///< wait request::backoff(), then attempt() again
    stop = LB_DECISION_STOP,    ///< give up: request::stopped() says why
    wait = LB_DECISION_WAIT,    ///< a hedge is still out: wait for its answer
};

/// A request's policy (every field has the default of lb_request_new).
struct request_options {
    uint32_t max_attempts = 3;
    /// The failure kinds retried, LB_RETRY_ON_* bits.
    uint32_t retry_on = LB_RETRY_ON_ERROR | LB_RETRY_ON_TIMEOUT | LB_RETRY_ON_OVERLOADED;
    /// The whole request's time limit from its first attempt; empty: none.
    std::optional<std::chrono::nanoseconds> deadline;
    /// Hedges, if any (the request keeps its own reference).
    const hedging *hedge = nullptr;
};

/// One request's attempts (lb_request), from balancer::request:
///
///     auto r = b.request("user-42");
///     while (lb::lease l = r.attempt()) {
///         bool ok = send(l.id());
///         lb::decision d = ok ? r.success(l) : r.failure(l, lb::failure_kind::error);
///         if (d != lb::decision::retry) break;
///         std::this_thread::sleep_for(r.backoff());
///     }
///
/// End each attempt's lease through the request (success(), failure(), cancel()); a lease
/// dropped open is cancelled without the request hearing of it. Move-only; one thread at a
/// time. It keeps the balancer's core alive, so it may outlive the lb::balancer.
class request {
public:
    /// The next attempt (lb_request_attempt), or an empty lease when the request is over.
    lease attempt() { return take(lb_request_attempt); }
    /// A hedge now if the policy, the budget and the attempts allow, else an empty lease.
    lease hedge() { return take(lb_request_hedge); }
    /// How long after the last attempt started to call hedge(); empty: no hedge.
    std::optional<std::chrono::nanoseconds> hedge_after() const {
        uint64_t ns = 0;
        detail::check(lb_request_hedge_after(get(), &ns));
        if (ns == LB_LATENCY_NONE) return std::nullopt;
        return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(ns));
    }

    /// Ends `l` (an attempt of this request) as a success after `latency` (empty: measured).
    decision success(lease &l, std::optional<std::chrono::nanoseconds> latency = std::nullopt) {
        return finish(l, LB_OUTCOME_SUCCESS, latency, std::nullopt);
    }
    /// Ends `l` as a failure of `kind` after `latency` (empty: measured), with an overloaded
    /// node's `retry_after` (empty: none), which becomes the delay before the retry.
    decision failure(lease &l, failure_kind kind = failure_kind::error,
                     std::optional<std::chrono::nanoseconds> latency = std::nullopt,
                     std::optional<std::chrono::nanoseconds> retry_after = std::nullopt) {
        return finish(l, static_cast<lb_outcome>(kind), latency, retry_after);
    }
    /// Cancels `l`, an attempt of this request (a hedge that lost): nothing counted.
    void cancel(lease &l) {
        detail::check(lb_request_cancel(get(), l.handle_.get()));
        (void)l.handle_.release();  // freed by lb_request_cancel
    }

    /// The delay the last decision::retry gave.
    std::chrono::nanoseconds backoff() const { return ns(state().backoff_ns); }
    /// Why it gave up ("max_attempts", "budget", ...); empty while going or after a success.
    std::string_view stopped() const {
        lb_stop stop = state().stopped;
        return stop == LB_STOP_NONE ? std::string_view() : lb_stop_name(stop);
    }
    uint32_t attempts() const { return state().attempts; }
    /// Which attempt succeeded (1-based), 0 before one has.
    uint32_t winner() const { return state().winner; }
    bool over() const { return state().over; }
    /// Time left before the deadline; empty without one.
    std::optional<std::chrono::nanoseconds> remaining() const {
        uint64_t left = state().remaining_ns;
        if (left == LB_LATENCY_NONE) return std::nullopt;
        return ns(left);
    }
    lb_request_info state() const {
        lb_request_info info{};
        detail::check(lb_request_state(get(), &info));
        return info;
    }
    lb_request *get() const noexcept { return handle_.get(); }

private:
    friend class balancer;
    explicit request(lb_request *raw) : handle_(raw) {}

    static std::chrono::nanoseconds ns(uint64_t ns) {
        return std::chrono::nanoseconds(static_cast<std::chrono::nanoseconds::rep>(
            std::min<uint64_t>(ns, std::numeric_limits<std::chrono::nanoseconds::rep>::max())));
    }

    template <class Start>
    lease take(Start start) {
        lb_lease *raw = nullptr;
        detail::check(start(get(), &raw));
        if (!raw) return lease();
        lease l(raw, std::string(), 0);
        try {
            std::string id(64, '\0');
            size_t size = 0;
            uint64_t tag = 0;
            lb_result r = lb_lease_node(raw, &tag, id.data(), id.size(), &size);
            if (r == LB_RESULT_BUFFER_TOO_SMALL) {
                id.resize(size);
                r = lb_lease_node(raw, &tag, id.data(), id.size(), &size);
            }
            detail::check(r);
            id.resize(size - 1);
            l.id_ = std::move(id);
            l.tag_ = tag;
        } catch (...) {  // std::bad_alloc, lb::error: the attempt ends through the request
            cancel(l);
            throw;
        }
        return l;
    }

    decision finish(lease &l, lb_outcome outcome, std::optional<std::chrono::nanoseconds> latency,
                    std::optional<std::chrono::nanoseconds> retry_after) {
        if (!l) throw error(LB_RESULT_LEASE_FINISHED);
        lb_outcome_info info{outcome, detail::time_ns(latency, "latency"),
                             detail::time_ns(retry_after, "retry_after")};
        lb_decision d = LB_DECISION_STOP;
        detail::check(lb_request_finish(get(), l.handle_.get(), &info, &d, nullptr));
        (void)l.handle_.release();  // lb_request_finish freed it
        return static_cast<decision>(d);
    }

    std::unique_ptr<lb_request, detail::request_deleter> handle_;
};

inline lb::request balancer::request(std::optional<std::string_view> key) const {
    return request(key, request_options{});
}

inline lb::request balancer::request(std::optional<std::string_view> key,
                                     const request_options &opts) const {
    lb_request *raw = nullptr;
    detail::check(lb_request_new(get(), detail::key_ptr(key), detail::key_len(key), &raw));
    lb::request r(raw);
    detail::check(lb_request_set_max_attempts(raw, opts.max_attempts));
    detail::check(lb_request_set_retry_on(raw, opts.retry_on));
    detail::check(lb_request_set_deadline(raw, detail::time_ns(opts.deadline, "deadline")));
    if (opts.hedge) detail::check(lb_request_set_hedging(raw, opts.hedge->get()));
    return r;
}

inline void balancer::set_budget(const retry_budget &budget) const {
    detail::check(lb_balancer_set_retry_budget(get(), budget.get()));
}
inline void balancer::set_budget(const retry_throttle &throttle) const {
    detail::check(lb_balancer_set_retry_throttle(get(), throttle.get()));
}
inline void balancer::set_budget(const adaptive_throttle &throttle) const {
    detail::check(lb_balancer_set_adaptive_throttle(get(), throttle.get()));
}

/// A Prequal probe answer (server_load::probe()): the requests in flight and the latency
/// expected for a request arriving at that level (0 when no request has succeeded within the
/// latency max age, 1 s by default).
struct probe_answer {
    uint32_t rif = 0;
    std::chrono::nanoseconds latency{0};
};

/// server_load::header's form: `TEXT name:value,...` (Envoy's native form) or `BIN <base64 of
/// the serialized OrcaLoadReport>`.
enum class header_form : uint32_t {
    text = LB_HEADER_TEXT,
    bin = LB_HEADER_BIN,
};

/// A request a server_load started (server_load::start()): end it once with
/// server_load::finish or server_load::cancel. Wraps the plain lb_server_request, so starting
/// one allocates nothing, but owns it: movable, not copyable, so no copy can be ended twice. A
/// moved-from or ended request is empty (`!request`), and ending it throws
/// lb::error(LB_RESULT_LEASE_FINISHED); one destroyed (or assigned over) while still open is
/// cancelled. It keeps its server_load's handle alive, so it may outlive the lb::server_load.
/// One thread at a time.
class server_request {
public:
    server_request() noexcept = default;
    server_request(server_request &&o) noexcept : raw_(o.raw_), load_(std::move(o.load_)) {
        o.raw_.open = 0;
    }
    server_request &operator=(server_request &&o) noexcept {
        if (this != &o) {
            end();
            raw_ = o.raw_;
            load_ = std::move(o.load_);
            o.raw_.open = 0;
        }
        return *this;
    }
    server_request(const server_request &) = delete;
    server_request &operator=(const server_request &) = delete;
    ~server_request() { end(); }

    /// Whether it is still open (started, neither finished nor cancelled).
    explicit operator bool() const noexcept { return raw_.open == 1; }
    /// The requests already in flight when it started (itself not counted).
    uint32_t rif() const noexcept { return raw_.rif; }
    /// When it started, on liblb's monotonic clock (lb::now()).
    std::chrono::nanoseconds started() const noexcept { return detail::from_ns(raw_.started_ns); }
    /// The C struct, still owned by this object.
    const lb_server_request &get() const noexcept { return raw_; }

private:
    friend class server_load;
    void end() noexcept {
        if (raw_.open == 1 && load_) (void)lb_server_load_cancel(load_.get(), &raw_);
        load_.reset();
    }

    lb_server_request raw_{0, 0, 0};
    std::shared_ptr<lb_server_load> load_;  // the load that started it, while open
};

/// A server's own load (lb_server_load): requests in flight, request and error rates over the
/// last 10 seconds, latency by in-flight level, and the utilisations the application sets.
/// From these it answers Prequal probes (probe()) and writes the `endpoint-load-metrics`
/// header (header()) that clients read with load_report::parse:
///
///     lb::server_load load;                 // one per server, shared by its threads
///     lb::server_request r = load.start();
///     bool ok = handle(req);
///     load.finish(r, ok);                   // or load.cancel(r); a dropped r is cancelled
///     add_header("endpoint-load-metrics", load.header());
///
/// Every member function is thread-safe and lock-free (each reads liblb's clock itself);
/// moving or destroying it needs exclusive access. Move-only; the handle is freed when the
/// object and every request it started are gone.
class server_load {
public:
    server_load() {
        lb_server_load *raw = nullptr;
        detail::check(lb_server_load_new(&raw));
        handle_.reset(raw, detail::server_load_deleter{});
    }
    /// A server load whose rates cover `window` (1 s to 1 h; default 10 s) and whose latency
    /// samples count for `latency_max_age` (1 ms to 1 h; default 1 s). Other values throw
    /// LB_RESULT_INVALID_OPTION_VALUE.
    server_load(std::chrono::milliseconds window, std::chrono::milliseconds latency_max_age) {
        if (window.count() < 0 || latency_max_age.count() < 0)
            throw error(LB_RESULT_INVALID_OPTION_VALUE);
        lb_server_load *raw = nullptr;
        detail::check(lb_server_load_new_with(static_cast<uint64_t>(window.count()),
                                              static_cast<uint64_t>(latency_max_age.count()),
                                              &raw));
        handle_.reset(raw, detail::server_load_deleter{});
    }
    server_load(server_load &&) noexcept = default;
    server_load &operator=(server_load &&) noexcept = default;
    server_load(const server_load &) = delete;
    server_load &operator=(const server_load &) = delete;

    /// A request arrives: in flight + 1; the request remembers when and how many it found.
    server_request start() const {
        server_request r;
        detail::check(lb_server_load_start(get(), &r.raw_));
        r.load_ = handle_;
        return r;
    }

    /// The request ends, successfully or not (`ok`): in flight - 1, counted in the rates, and
    /// a success's latency filed under the in-flight level it found. Returns its latency. An
    /// ended (or moved-from) request throws LB_RESULT_LEASE_FINISHED, a request another
    /// server_load started std::invalid_argument; nothing is counted then.
    std::chrono::nanoseconds finish(server_request &r, bool ok = true) const {
        check_own(r);
        uint64_t ns = 0;
        detail::check(lb_server_load_finish(get(), &r.raw_, ok, &ns));
        r.load_.reset();
        return detail::from_ns(ns);
    }

    /// The request was abandoned (client gone, shutting down): in flight - 1, nothing else
    /// counted. Throws as finish() does.
    void cancel(server_request &r) const {
        check_own(r);
        detail::check(lb_server_load_cancel(get(), &r.raw_));
        r.load_.reset();
    }

    /// The answer to a Prequal probe now.
    probe_answer probe() const {
        uint32_t rif = 0;
        uint64_t ns = 0;
        detail::check(lb_server_load_probe(get(), &rif, &ns));
        return {rif, detail::from_ns(ns)};
    }

    /// The requests in flight now.
    uint32_t in_flight() const {
        uint32_t n = 0;
        detail::check(lb_server_load_in_flight(get(), &n));
        return n;
    }

    /// The CPU utilisation (finite, >= 0, may exceed 1); out of range throws
    /// LB_RESULT_INVALID_LOAD_REPORT and changes nothing.
    void set_cpu_utilization(double value) const {
        detail::check(lb_server_load_set_cpu_utilization(get(), value));
    }
    /// The memory utilisation (0 to 1); out of range throws as set_cpu_utilization.
    void set_mem_utilization(double value) const {
        detail::check(lb_server_load_set_mem_utilization(get(), value));
    }
    /// The application utilisation (finite, >= 0, may exceed 1; gRFC A58 prefers it to CPU).
    void set_application_utilization(double value) const {
        detail::check(lb_server_load_set_application_utilization(get(), value));
    }

    /// The ORCA load report now: the three utilisations, `rps_fractional` and `eps` over the
    /// last 10 seconds, and the named metrics `rif` and (when a request has succeeded in the
    /// last second) `latency_ms`, which a client's prequal balancer reads as a probe answer.
    load_report report() const {
        lb_load_report *raw = nullptr;
        detail::check(lb_server_load_report(get(), &raw));
        return load_report(raw);
    }

    /// report() as an `endpoint-load-metrics` header value (`TEXT ...` or `BIN ...`); another
    /// form throws LB_RESULT_INVALID_OPTION_VALUE.
    std::string header(header_form form = header_form::text) const {
        const uint32_t f = static_cast<uint32_t>(form);
        size_t size = 0;
        std::string value;
        lb_result r = lb_server_load_header(get(), f, nullptr, 0, &size);  // the size
        while (r == LB_RESULT_BUFFER_TOO_SMALL) {  // made anew each call: it may have grown
            value.resize(size + 16);
            r = lb_server_load_header(get(), f, value.data(), value.size(), &size);
        }
        detail::check(r);
        value.resize(size - 1);  // the NUL
        return value;
    }

    /// The C handle, still owned by this object (and its open requests).
    lb_server_load *get() const noexcept { return handle_.get(); }

private:
    void check_own(const server_request &r) const {
        if (!r) throw error(LB_RESULT_LEASE_FINISHED);
        if (r.load_.get() != get())
            throw std::invalid_argument("lb: the request was started by another server_load");
    }

    std::shared_ptr<lb_server_load> handle_;
};

}  // namespace lb

#endif  // LB_HPP
