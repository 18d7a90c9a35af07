// liblb/undici: balance undici (7.x) requests over a liblb Balancer (docs/node-http.md).
import type { Dispatcher } from 'undici'
import type { AdaptiveThrottle, Balancer, FailureKind, Hedging, Key, RetryBudget, RetryThrottle } from './index'

/** Options of `interceptor(balancer, options)`. */
export interface InterceptorOptions {
  /**
   * The request's key for keyed algorithms (a header, a cookie, a path segment...), from
   * undici's dispatch options; undefined: no key. Called once per request, before any attempt.
   */
  key?: (opts: Dispatcher.DispatchOptions) => Key | null | undefined
  /**
   * The methods that may be retried (default the idempotent ones: GET, HEAD, OPTIONS, PUT,
   * DELETE, TRACE). A request's own `idempotent: true | false` overrides this. Requests whose
   * body is a stream or an iterable are never retried (only null, a string or bytes replay).
   */
  methods?: string[]
  /** Attempts per request on distinct nodes, the first included (1 to 100, default 3). */
  maxAttempts?: number
  /** No retry starts later than this many milliseconds after the first attempt. */
  deadlineMs?: number | null
  /** The failure kinds retried (default all: 'error', 'timeout', 'overloaded'). */
  retryOn?: FailureKind[] | null
  /** The budget of these requests' retries (absent or null: the balancer's, see `setBudget`). */
  budget?: RetryBudget | RetryThrottle | AdaptiveThrottle | null
  /**
   * Hedges the requests that may be retried: when `Hedging.after(ms)` (or the percentile's
   * delay) passes with no answer, another attempt goes to another node; the first success wins
   * and the others are aborted, their leases cancelled. Hedges count in `maxAttempts`.
   */
  hedge?: Hedging | null
}

/**
 * An undici interceptor sending each request to the node `balancer` picks:
 * `new Agent().compose(interceptor(balancer, { maxAttempts: 3 }))`. The request's origin is
 * replaced by the node's (a node id is `host:port`, `[v6]:port`, optionally after `http://` or
 * `https://`, which then replaces the origin's scheme) and its `Host` header stays the
 * origin's. Each attempt's lease ends when its response body ends, errors or is aborted:
 * 429, and 503 with a Retry-After, are 'overloaded' (with the Retry-After); other 5xx and
 * connection errors 'error'; undici's connect, headers and body timeouts 'timeout'; anything
 * else a success. A caller's abort cancels the lease (nothing counted). Failed answers are
 * retried on the next node of the key's retry order as the balancer's request loop decides;
 * the caller sees the last attempt's answer. A node id that is not `host:port` fails the
 * request with a TypeError of code `LB_INVALID_NODE_ID`. Each attempt's lease also takes the
 * server's ORCA load report (`loadReport` of the answer's headers, else of its trailers), on
 * success and failure alike, for `client_side_wrr` and `prequal`; a report that does not parse
 * is dropped and the request goes on unchanged.
 */
export declare function interceptor(balancer: Balancer, options?: InterceptorOptions): Dispatcher.DispatcherComposeInterceptor

/** The outcome an answer's status and headers map to (the table in docs/node-http.md). */
export declare function outcome(
  status: number,
  headers: Record<string, string | string[] | undefined>,
): { ok: true } | { ok: false; kind: 'error' } | { ok: false; kind: 'overloaded'; retryAfterMs: number | null }

/** A Retry-After value (seconds or an HTTP date) in milliseconds from now; null if absent or unreadable. */
export declare function retryAfterMs(value: string | string[] | undefined): number | null

/**
 * The ORCA load report in an answer's headers (or trailers), as `parseOrca` takes it, unparsed:
 * `endpoint-load-metrics-bin` (the base64 proto, returned as `BIN <base64>`) if present, else
 * `endpoint-load-metrics` (`BIN `/`JSON `/`TEXT ` form); a name given twice, its first value.
 * Envoy's order (`orca_parser.cc`). undefined when there is none.
 */
export declare function loadReport(
  headers: Record<string, string | string[] | undefined> | null | undefined,
): string | undefined
