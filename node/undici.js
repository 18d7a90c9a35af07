'use strict'
// liblb/undici: an undici (7.x) dispatcher interceptor that sends each request to the node a
// liblb Balancer picks, through the balancer's request loop (`Balancer.request`):
//
//   const { Agent, request } = require('undici')
//   const { interceptor } = require('liblb/undici')
//   const agent = new Agent().compose(interceptor(balancer, { maxAttempts: 3 }))
//   await request('http://api.internal/users/42', { dispatcher: agent })
//
// Every choice (which node, whether to retry, which node next, how long to wait, the budget)
// is the core's. This file owns only what undici's handler API needs: rewriting `origin` to the
// node while keeping the logical `Host` (as undici's own dns interceptor does), the table that
// maps an answer to an outcome (`outcome`), finishing each attempt's lease exactly once when
// its body ends, errors or is aborted, and hiding the failed attempts from the caller's handler.
//
// Each attempt's lease also takes the server's ORCA load report (`loadReport`): from the answer's
// headers, else its trailers, on success and failure alike, for client_side_wrr and prequal.
//
// Retries are this interceptor's own, through the request loop, so they reach distinct nodes in
// the key's retry order. A failed answer's body (5xx, 429) is held (up to HOLD_BYTES) until it
// ends, then the lease is finished and the core decides: a retry drops it, a stop hands it to
// the caller as it came. undici's `interceptors.retry` composed outside this one also works:
// each of its retries is a new request here (see docs/node-http.md).

const { isIP, isIPv6 } = require('node:net')

// RFC 9110 §9.2.2: the methods a retry cannot change the meaning of.
const IDEMPOTENT = ['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']
// undici's timeouts: the node did not answer in time.
const TIMEOUTS = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])
// A failed answer's body is held at most this long before the attempt is decided early.
const HOLD_BYTES = 64 * 1024

// ---- The mapping: an answer or an error to an outcome (docs/retries.md, "Say why") ----------

// | answer                          | outcome                                  |
// |---------------------------------|------------------------------------------|
// | 429                             | overloaded, retryAfterMs from Retry-After |
// | 503 with a valid Retry-After    | overloaded, retryAfterMs from Retry-After |
// | other 5xx (503 without one)     | error                                    |
// | anything else (1xx-4xx)         | success: the node answered               |
function outcome(status, headers) {
  if (status === 429 || status === 503) {
    const after = retryAfterMs(headers['retry-after'])
    if (status === 429 || after !== null) return { ok: false, kind: 'overloaded', retryAfterMs: after }
  }
  return status >= 500 ? { ok: false, kind: 'error' } : { ok: true }
}

// | error                                              | outcome |
// |----------------------------------------------------|---------|
// | UND_ERR_CONNECT/HEADERS/BODY_TIMEOUT               | timeout |
// | anything else (ECONNREFUSED, ECONNRESET, UND_ERR_SOCKET, ...) | error |
function failure(error) {
  return { ok: false, kind: TIMEOUTS.has(error?.code) ? 'timeout' : 'error' }
}

// Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, as milliseconds from now; null
// when absent or unreadable.
function retryAfterMs(value) {
  if (Array.isArray(value)) value = value[0]
  if (typeof value !== 'string' || value.trim() === '') return null
  if (/^\s*\d+\s*$/.test(value)) return Number(value) * 1000
  const at = Date.parse(value)
  return Number.isNaN(at) ? null : Math.max(0, at - Date.now())
}

// ---- Server-reported load ------------------------------------------------------------------

// Where an answer carries its server's ORCA load report, as Envoy reads it (envoyproxy/envoy
// source/common/orca/orca_parser.cc, parseOrcaLoadReportHeaders): `endpoint-load-metrics-bin`
// (gRPC's legacy name: the base64 proto alone) wins, else `endpoint-load-metrics` (`BIN `,
// `JSON ` or `TEXT `); a name given twice: the first value. The report, as `parseOrca` takes
// it (unparsed: the lease parses it once), or undefined. Two property reads when there is none.
function loadReport(headers) {
  if (headers == null) return undefined
  const bin = headers['endpoint-load-metrics-bin']
  if (bin !== undefined) return `BIN ${Array.isArray(bin) ? bin[0] : bin}`
  const value = headers['endpoint-load-metrics']
  return Array.isArray(value) ? value[0] : value
}

// Ends `lease` (an attempt of `request`) with `result` and the answer's `load` report: a report
// that does not parse must not fail the caller's request, so the lease (left open by the
// refused finish) ends without it.
function finishLoaded(request, lease, result, load) {
  if (load !== undefined) {
    try {
      return request.finish(lease, { ...result, load })
    } catch (error) {
      if (error?.code !== 'LB_INVALID_LOAD_REPORT') throw error
    }
  }
  return request.finish(lease, result)
}

// ---- Node ids ------------------------------------------------------------------------------

// `host:port`, `[v6]:port`, optionally behind `http://` or `https://`.
const NODE_ID = /^(?:(https?):\/\/)?(\[[^\]]*\]|[^\s/?#@[\]:]+):(\d{1,5})$/i
const origins = new Map() // id -> { scheme, host }: each id is parsed once

function nodeOrigin(id, protocol) {
  let node = origins.get(id)
  if (node === undefined) {
    const m = NODE_ID.exec(id)
    const port = m ? Number(m[3]) : 0
    if (!m || port < 1 || port > 65535 || (m[2][0] === '[' && !isIPv6(m[2].slice(1, -1)))) {
      const error = new TypeError(`node id ${JSON.stringify(id)} is not host:port (IPv6 as [::1]:port, optionally after http:// or https://)`)
      error.code = 'LB_INVALID_NODE_ID'
      error.id = id
      throw error
    }
    node = { scheme: m[1] ? `${m[1].toLowerCase()}:` : null, host: `${m[2]}:${port}` }
    if (origins.size >= 4096) origins.clear() // membership churn must not grow it forever
    origins.set(id, node)
  }
  return `${node.scheme ?? protocol}//${node.host}`
}

// The logical origin's parts each attempt needs, parsed once per origin (a client talks to few):
// its protocol, its `host` (the Host header) and the TLS server name (none for an IP address).
const logicalOrigins = new Map()

function logicalOrigin(value) {
  const text = String(value)
  let logical = logicalOrigins.get(text)
  if (logical === undefined) {
    const origin = new URL(text)
    const hostname = origin.hostname.replace(/^\[(.*)\]$/, '$1')
    logical = { protocol: origin.protocol, host: origin.host, servername: isIP(hostname) ? undefined : hostname }
    if (logicalOrigins.size >= 4096) logicalOrigins.clear()
    logicalOrigins.set(text, logical)
  }
  return logical
}

// The caller's headers with `host` set to the logical host unless they name one (undici takes
// an object, a flat [k, v, ...] array, or an iterable of [k, v] pairs).
function withHost(headers, host) {
  if (headers == null) return { host }
  if (!Array.isArray(headers) && typeof headers[Symbol.iterator] !== 'function') {
    for (const name in headers) if (name.toLowerCase() === 'host') return headers
    return { host, ...headers }
  }
  const flat = []
  for (const item of headers) {
    if (Array.isArray(item)) flat.push(item[0], item[1])
    else flat.push(item)
  }
  for (let i = 0; i < flat.length; i += 2) if (String(flat[i]).toLowerCase() === 'host') return flat
  return ['host', host, ...flat]
}

function replayable(body) {
  return body == null || typeof body === 'string' || ArrayBuffer.isView(body)
}

function invalid(message) {
  const error = new TypeError(message)
  error.code = 'ERR_INVALID_ARG_TYPE'
  return error
}

// ---- The caller's controller: one for the whole request, whichever attempt is out ----------

class Controller {
  #call
  #paused = false
  target = null // the current attempt's undici controller
  aborted = false
  reason = null
  rawHeaders = null
  rawTrailers = null

  constructor(call) {
    this.#call = call
  }

  get paused() {
    return this.#paused
  }

  pause() {
    this.#paused = true
    this.target?.pause()
  }

  resume() {
    this.#paused = false
    this.target?.resume()
  }

  abort(reason) {
    if (this.aborted) return
    this.aborted = true
    this.reason = reason
    this.#call.abort(reason)
  }
}

// ---- One request: its attempts, one lease each -----------------------------------------------

class Call {
  constructor(settings, dispatch, opts, handler) {
    this.dispatch = dispatch
    this.opts = opts
    this.handler = handler
    this.controller = new Controller(this)
    this.started = false // the caller's onRequestStart was called
    this.closed = false // the caller got its last event
    this.live = new Set() // attempts out: more than one only with hedges
    this.winner = null // the attempt whose answer goes to the caller
    this.timer = null // the next retry
    this.hedgeTimer = null
    this.hedging = false
    const logical = logicalOrigin(opts.origin)
    this.protocol = logical.protocol
    this.headers = withHost(opts.headers, logical.host)
    this.servername = opts.servername ?? logical.servername
    const method = String(opts.method).toUpperCase()
    const retries = (opts.idempotent ?? settings.methods.includes(method)) && replayable(opts.body)
    this.maxAttempts = retries ? settings.policy.maxAttempts : 1
    this.hedging = retries && settings.policy.hedge !== undefined
    const key = settings.key ? settings.key(opts) : undefined
    this.request = settings.balancer.request(key, retries ? settings.policy : settings.once)
  }

  // Starts the next attempt, or tells the caller why there is none.
  next() {
    this.timer = null
    if (this.closed) return true
    let lease
    try {
      lease = this.request.attempt()
    } catch (error) {
      return this.fail(error) // LB_NO_NODES, LB_KEY_REQUIRED, ...
    }
    if (lease === null) return this.live.size > 0 || this.fail(stopped(this.request))
    return this.launch(lease)
  }

  // Sends `lease`'s attempt (a first attempt, a retry or a hedge).
  launch(lease) {
    const attempt = new Attempt(this, lease)
    let origin
    try {
      origin = nodeOrigin(lease.id, this.protocol)
    } catch (error) {
      this.request.cancel(lease)
      this.abortOthers(null, error)
      return this.fail(error)
    }
    this.live.add(attempt)
    this.armHedge()
    const opts = { ...this.opts, origin, headers: this.headers }
    if (this.servername !== undefined && origin.startsWith('https:')) opts.servername = this.servername
    try {
      return this.dispatch(opts, attempt)
    } catch (error) {
      attempt.onResponseError(null, error)
      return true
    }
  }

  // With a hedging policy: a hedge when the core's delay passes with no answer (re-armed after
  // each attempt starts; stops once the core refuses one).
  armHedge() {
    if (!this.hedging || this.winner !== null || this.closed) return
    clearTimeout(this.hedgeTimer)
    const ms = this.request.hedgeAfterMs()
    if (ms === null) return
    this.hedgeTimer = setTimeout(() => {
      this.hedgeTimer = null
      if (this.winner !== null || this.closed || this.live.size === 0) return
      let lease
      try {
        lease = this.request.hedge()
      } catch {
        lease = null
      }
      if (lease === null) this.hedging = false
      else this.launch(lease)
    }, ms)
  }

  // `attempt`'s answer goes to the caller: every other attempt is aborted, its lease cancelled.
  win(attempt) {
    this.winner = attempt
    clearTimeout(this.hedgeTimer)
    this.hedgeTimer = null
    this.controller.target = attempt.target
    // The reason is made only when there is another attempt to abort: an Error captures a
    // stack trace, a visible share of a request's cost here.
    if (this.live.size > 1) this.abortOthers(attempt, new Error('liblb: another attempt answered first'))
  }

  // Aborts the attempts out other than `keep`, cancelling their leases (nothing counted).
  abortOthers(keep, reason) {
    for (const other of this.live) {
      if (other === keep) continue
      this.live.delete(other)
      other.drop(reason)
    }
  }

  // Ends `attempt`'s lease with `result` (once) and the answer's load report (its headers',
  // else its `trailers`'), and returns the core's decision.
  settle(attempt, result, trailers) {
    this.live.delete(attempt)
    if (attempt.lease === null) return null
    const lease = attempt.lease
    attempt.lease = null
    return finishLoaded(this.request, lease, result, attempt.load ?? loadReport(trailers))
  }

  // Acts on a failed attempt's decision: true when the request goes on (a retry scheduled, or
  // other attempts still out that the core said to wait for).
  retry(decision) {
    if (this.closed) return false
    if (decision?.decision === 'wait' && this.live.size > 0) return true
    if (decision?.decision !== 'retry') return false
    const delay = this.live.size > 0 ? 0 : decision.delayMs // hedges out: retry at once, as acall
    if (this.live.size === 0) this.controller.target = null
    clearTimeout(this.timer)
    this.timer = setTimeout(() => this.next(), delay)
    return true
  }

  abort(reason) {
    clearTimeout(this.timer)
    clearTimeout(this.hedgeTimer)
    this.timer = this.hedgeTimer = null
    if (this.live.size > 0) {
      // undici answers with onResponseError, where the lease is cancelled; an attempt still
      // queued for a connection is aborted by its onRequestStart.
      for (const attempt of this.live) attempt.target?.abort(reason)
    } else {
      this.fail(reason) // between attempts
    }
  }

  fail(error) {
    clearTimeout(this.hedgeTimer)
    this.hedgeTimer = null
    if (!this.closed) {
      this.closed = true
      this.handler.onResponseError?.(this.controller, error)
    }
    return true
  }

  // The caller's onRequestStart, once, from whichever attempt starts first.
  start(context) {
    if (this.started) return
    this.started = true
    this.handler.onRequestStart?.(this.controller, context)
  }
}

function stopped(request) {
  const error = new Error(`request gave up (${request.stopped}) after ${request.attempts} attempt(s)`)
  error.code = 'LB_REQUEST_FAILED'
  error.stop = request.stopped
  error.attempts = request.attempts
  return error
}

// undici's handler for one attempt on one node.
class Attempt {
  constructor(call, lease) {
    this.call = call
    this.lease = lease // null once finished or cancelled
    this.target = null
    this.result = { ok: true } // the outcome to finish with when the body ends
    this.load = undefined // the load report in the answer's headers
    this.held = null // a failed answer waiting for the core's decision: { status, headers, message, chunks, bytes }
    this.passed = false // this attempt's answer goes to the caller
    this.dropped = false // this attempt was decided and dropped: ignore the rest of it
  }

  onRequestStart(controller, context) {
    const call = this.call
    this.target = controller
    if (this.dropped) return controller.abort(this.reason) // a hedge's loser not yet started
    if (call.winner === null && call.live.size <= 1) call.controller.target = controller
    if (call.controller.paused) controller.pause()
    call.start(context)
    if (call.controller.aborted) controller.abort(call.controller.reason)
  }

  onRequestUpgrade(controller, status, headers, socket) {
    if (this.dropped) return
    this.call.win(this)
    this.call.settle(this, { ok: true })
    this.call.closed = true
    this.call.handler.onRequestUpgrade?.(this.call.controller, status, headers, socket)
  }

  onResponseStart(controller, status, headers, message) {
    if (this.dropped) return
    const call = this.call
    this.result = outcome(status, headers)
    this.load = loadReport(headers)
    // A success, or a failure with no attempt left to try nor another out: the caller's answer.
    if (this.result.ok || (call.request.attempts >= call.maxAttempts && call.live.size === 1)) {
      call.win(this)
      return this.pass(status, headers, message)
    }
    this.held = { status, headers, message, chunks: [], bytes: 0 }
  }

  onResponseData(controller, chunk) {
    if (this.dropped) return
    const held = this.held
    if (held === null) return this.call.handler.onResponseData?.(this.call.controller, chunk)
    held.chunks.push(chunk)
    held.bytes += chunk.length
    // Too big to hold: decide now (the lease ends before the body does).
    if (held.bytes > HOLD_BYTES) this.decide(controller, null)
  }

  onResponseEnd(controller, trailers) {
    if (this.dropped) return
    if (this.held !== null) return this.decide(controller, trailers)
    this.call.settle(this, this.result, trailers)
    this.call.controller.rawTrailers = this.target?.rawTrailers ?? null
    // undici's retry handler throws here to retry (and undici then calls onResponseError):
    // the caller is closed only once its handler took the end.
    this.call.handler.onResponseEnd?.(this.call.controller, trailers)
    this.call.closed = true
  }

  onResponseError(controller, error) {
    const call = this.call
    if (this.dropped) return
    if (call.controller.aborted) {
      call.live.delete(this)
      if (this.lease !== null) call.request.cancel(this.lease) // the caller's abort: nothing counted
      this.lease = null
      return call.fail(error)
    }
    // After onResponseEnd the lease is already finished: settle does nothing. An answer that
    // already went to the caller is never retried, whatever the core decides (a 'retry' then
    // took a retry from a RetryBudget that goes unused: the loop has no "over" of its own).
    const decision = call.settle(this, failure(error))
    if (!this.passed && call.retry(decision)) return
    call.abortOthers(this, error)
    call.fail(error)
  }

  // This attempt lost (another answered, or the request failed): abort it, cancel its lease.
  drop(reason) {
    this.dropped = true
    this.held = null
    this.reason = reason
    if (this.lease !== null) this.call.request.cancel(this.lease)
    this.lease = null
    this.target?.abort(reason) // not started yet: onRequestStart aborts it
  }

  // Hands this attempt's answer (and what was held of it) to the caller.
  pass(status, headers, message) {
    const call = this.call
    this.passed = true
    call.controller.rawHeaders = this.target?.rawHeaders ?? null
    call.handler.onResponseStart?.(call.controller, status, headers, message)
  }

  // A held failed answer: finish the lease, then retry (drop it) or give it to the caller.
  decide(controller, trailers) {
    const call = this.call
    const held = this.held
    this.held = null
    if (call.retry(call.settle(this, this.result, trailers))) {
      this.dropped = true
      if (trailers === null) controller.abort(new Error('liblb: dropped a failed answer to retry'))
      return
    }
    call.win(this)
    this.pass(held.status, held.headers, held.message)
    for (const chunk of held.chunks) call.handler.onResponseData?.(call.controller, chunk)
    if (trailers !== null) this.onResponseEnd(controller, trailers)
  }
}

/**
 * An undici interceptor that balances each request over `balancer`'s nodes. See undici.d.ts.
 */
function interceptor(balancer, options = {}) {
  if (balancer === null || typeof balancer !== 'object' || typeof balancer.request !== 'function') {
    throw invalid('balancer must be a liblb Balancer')
  }
  if (options === null || typeof options !== 'object') throw invalid('options must be an object')
  const { key, methods = IDEMPOTENT, maxAttempts = 3, deadlineMs, retryOn, budget, hedge, ...rest } = options
  const unknown = Object.keys(rest)
  if (unknown.length > 0) {
    const error = new TypeError(`unknown option(s) ${unknown.join(', ')}: the interceptor takes key, methods, maxAttempts, deadlineMs, retryOn, budget, hedge`)
    error.code = 'LB_UNKNOWN_OPTION'
    throw error
  }
  if (key !== undefined && typeof key !== 'function') throw invalid('options.key must be a function (dispatch options => string | Buffer | undefined)')
  if (!Array.isArray(methods)) throw invalid('options.methods must be an array of method names')
  // Only the fields given: each one the binding reads costs a lookup per request.
  const policy = { maxAttempts }
  if (deadlineMs != null) policy.deadlineMs = deadlineMs
  if (retryOn != null) policy.retryOn = retryOn
  if (budget != null) policy.budget = budget
  const once = { ...policy, maxAttempts: 1 } // not retried: not hedged either
  if (hedge != null) policy.hedge = hedge
  balancer.request(null, policy) // checks the policy now (nothing is picked or counted)
  const settings = {
    balancer,
    key,
    methods: methods.map((m) => String(m).toUpperCase()),
    policy,
    once,
  }
  return (dispatch) =>
    function liblbDispatch(opts, handler) {
      let call
      try {
        call = new Call(settings, dispatch, opts, handler)
      } catch (error) {
        handler.onResponseError?.(null, error)
        return true
      }
      return call.next()
    }
}

module.exports = { interceptor, loadReport, outcome, retryAfterMs }
