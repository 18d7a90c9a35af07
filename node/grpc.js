'use strict'
/**
 * liblb for grpc-js: a load-balancing policy named `liblb`, registered with grpc-js's
 * `experimental.registerLoadBalancerType` by `register()` and chosen by service config:
 *
 *   require('liblb/grpc').register()
 *   new grpc.Client('ipv4:10.0.0.1:50051,10.0.0.2:50051', creds, {
 *     'grpc.service_config': JSON.stringify({
 *       loadBalancingConfig: [{ liblb: { algorithm: 'peak_ewma', keyMetadata: 'x-user' } }],
 *     }),
 *   })
 *
 * The policy keeps one subchannel per resolved endpoint (grpc-js's own `LeafLoadBalancer`, as
 * its round_robin does) and a liblb `Balancer` over the endpoints' `host:port`s. A pick
 * acquires a lease (keyed by the metadata entry `keyMetadata`, for the keyed algorithms) and
 * sends the call to that node's subchannel; grpc-js's `onCallEnded` finishes the lease with the
 * status, so liblb's health and load-aware algorithms see every call. Endpoints that are not
 * connected are marked down in the balancer (`markDown`), so picks skip them. Status codes map
 * to outcomes as liblb.grpc does in Python (docs/grpc.md). The lease also takes the server's
 * ORCA load report from the call's trailing metadata (`loadOf`), on success and failure alike,
 * so `client_side_wrr` and `prequal` weigh nodes by what they report.
 *
 * grpc-js calls `LoadBalancer` APIs it marks experimental: this module is tested against
 * @grpc/grpc-js 1.14.x (the version pinned in liblb's devDependencies).
 */

const { Balancer } = require('./index.js')

const TYPE_NAME = 'liblb'

let grpc = null
/** @grpc/grpc-js, loaded on first use (a peer dependency: only users of this module need it). */
function grpcJs() {
  if (grpc === null) {
    try {
      grpc = require('@grpc/grpc-js')
    } catch (err) {
      const e = new Error("liblb/grpc needs @grpc/grpc-js: npm install @grpc/grpc-js")
      e.code = 'LB_MISSING_PEER'
      e.cause = err
      throw e
    }
  }
  return grpc
}

/** Balancers of the policies that were given a `name` in their config, by name. */
const named = new Map()

/**
 * The balancer of the channel(s) whose `liblb` config has `name` (the latest one made), or
 * undefined: its `stats()`, `setBudget()`, `markDown()`...
 */
function balancer(name) {
  return named.get(name)
}

let statusOutcomes = null
/** The status codes that are failures of the node, by kind (made once, on first use). */
function STATUS_OUTCOMES() {
  if (statusOutcomes === null) {
    const { status: S } = grpcJs()
    statusOutcomes = {
      overloaded: new Set([S.RESOURCE_EXHAUSTED]),
      errors: new Set([S.UNAVAILABLE, S.INTERNAL, S.UNKNOWN, S.DATA_LOSS]),
    }
  }
  return statusOutcomes
}

/**
 * The outcome a call's status means for its node (a `lease.finish` argument): OK is a success;
 * RESOURCE_EXHAUSTED, and UNAVAILABLE with `grpc-retry-pushback-ms`, overloaded (the pushback is
 * the retry-after); DEADLINE_EXCEEDED a timeout; UNAVAILABLE, INTERNAL, UNKNOWN and DATA_LOSS
 * errors; any other status the node's answer (a success for its health); CANCELLED null (the
 * caller gave up: nothing to count).
 */
function outcomeOf(code, metadata) {
  const { status: S } = grpcJs()
  if (code === S.OK) return { ok: true }
  if (code === S.CANCELLED) return null
  const pushback = metadata ? metadata.get('grpc-retry-pushback-ms')[0] : undefined
  const ms = typeof pushback === 'string' && /^\d+$/.test(pushback) ? Number(pushback) : undefined
  const { overloaded, errors } = STATUS_OUTCOMES()
  if (overloaded.has(code) || (code === S.UNAVAILABLE && ms !== undefined)) {
    return ms === undefined ? { ok: false, kind: 'overloaded' } : { ok: false, kind: 'overloaded', retryAfterMs: ms }
  }
  if (code === S.DEADLINE_EXCEEDED) return { ok: false, kind: 'timeout' }
  if (errors.has(code)) return { ok: false, kind: 'error' }
  return { ok: true }
}

/**
 * The ORCA load report in a call's trailing metadata, as `parseOrca` takes it, or undefined:
 * `endpoint-load-metrics-bin` (gRFC A51's per-call report, the serialized `OrcaLoadReport`, a
 * Buffer once grpc-js decoded it: what grpc-js's own weighted_round_robin reads, orca.ts
 * `createMetricsReader`) if present, else `endpoint-load-metrics` (Envoy's header value,
 * `BIN `/`JSON `/`TEXT `, which Envoy also reads from trailers). The first value of each.
 */
function loadOf(metadata) {
  if (!metadata) return undefined
  const bin = metadata.get('endpoint-load-metrics-bin')
  if (bin.length > 0) return bin[0]
  const text = metadata.get('endpoint-load-metrics')
  return text.length > 0 ? text[0] : undefined
}

/**
 * Ends `lease` with `outcome` and the call's `load` report. A report that does not parse must
 * not disturb the call: the lease, left open by the refused finish, ends without it.
 */
function finishLoaded(lease, outcome, load) {
  if (load !== undefined) {
    try {
      return lease.finish({ ...outcome, load })
    } catch (err) {
      if (err?.code !== 'LB_INVALID_LOAD_REPORT') throw err
    }
  }
  lease.finish(outcome)
}

/** The policy's config: `{ algorithm, options, keyMetadata, name }`. */
class LiblbConfig {
  constructor(algorithm, options, keyMetadata, name) {
    this.algorithm = algorithm
    this.options = options
    this.keyMetadata = keyMetadata
    this.name = name
  }

  getLoadBalancerName() {
    return TYPE_NAME
  }

  toJsonObject() {
    const config = { algorithm: this.algorithm, options: this.options }
    if (this.keyMetadata !== undefined) config.keyMetadata = this.keyMetadata
    if (this.name !== undefined) config.name = this.name
    return { [TYPE_NAME]: config }
  }

  /** Checks a service config's `liblb` object; the balancer checks the algorithm and options. */
  static createFromJson(obj) {
    const bad = (what) => {
      const e = new TypeError(`liblb load-balancing config: ${what}`)
      e.code = 'LB_INVALID_CONFIG'
      return e
    }
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw bad('must be an object')
    const { algorithm = 'round_robin', options = {}, keyMetadata, name } = obj
    if (typeof algorithm !== 'string') throw bad('algorithm must be a string')
    if (options === null || typeof options !== 'object' || Array.isArray(options)) throw bad('options must be an object')
    if (keyMetadata !== undefined && typeof keyMetadata !== 'string') throw bad('keyMetadata must be a string')
    if (name !== undefined && typeof name !== 'string') throw bad('name must be a string')
    // Fail here, where grpc-js reports config errors, rather than at the first resolution.
    new Balancer(algorithm, [], options) // eslint-disable-line no-new
    return new LiblbConfig(algorithm, options, keyMetadata, name)
  }
}

/** Picks through the balancer among the endpoints' own pickers. */
class LiblbPicker {
  constructor(balancer, children, keyMetadata) {
    this.balancer = balancer
    this.children = children
    this.keyMetadata = keyMetadata
  }

  pick(pickArgs) {
    const { experimental, status, Metadata } = grpcJs()
    let key = null
    if (this.keyMetadata !== undefined) {
      const values = pickArgs.metadata.get(this.keyMetadata)
      key = values.length > 0 ? values[0] : null
    }
    let lease
    try {
      lease = this.balancer.acquire(key)
    } catch (err) {
      // No usable node, or a keyed algorithm without its key: the call fails with the reason.
      return {
        pickResultType: experimental.PickResultType.TRANSIENT_FAILURE,
        subchannel: null,
        status: { code: status.UNAVAILABLE, details: `liblb: ${err.message}`, metadata: new Metadata() },
        onCallStarted: null,
        onCallEnded: null,
      }
    }
    const child = this.children.get(lease.id)
    const result = child.getPicker().pick(pickArgs)
    if (result.pickResultType !== experimental.PickResultType.COMPLETE) {
      lease.cancel() // queued or failed: grpc-js picks again later, nothing was sent
      return result
    }
    const ended = result.onCallEnded
    return {
      ...result,
      onCallEnded: (code, details, metadata) => {
        const outcome = outcomeOf(code, metadata)
        if (outcome === null) lease.cancel()
        else finishLoaded(lease, outcome, loadOf(metadata))
        if (ended) ended(code, details, metadata)
      },
    }
  }
}

/** The `liblb` load-balancing policy (see the module docs). */
class LiblbLoadBalancer {
  constructor(channelControlHelper) {
    const { experimental, connectivityState } = grpcJs()
    this.helper = channelControlHelper
    this.children = new Map() // node id -> LeafLoadBalancer
    this.balancer = null
    this.config = null
    this.paused = false
    this.lastError = null
    this.state = connectivityState.IDLE
    this.childHelper = experimental.createChildChannelControlHelper(channelControlHelper, {
      updateState: (state, picker, errorMessage) => {
        if (errorMessage) this.lastError = errorMessage
        this.update()
      },
    })
  }

  updateAddressList(endpoints, lbConfig, options, resolutionNote) {
    const { experimental, connectivityState } = grpcJs()
    if (!(lbConfig instanceof LiblbConfig)) return false
    if (!endpoints.ok) {
      if (this.children.size === 0) {
        this.publish(connectivityState.TRANSIENT_FAILURE, new experimental.UnavailablePicker(endpoints.error), endpoints.error.details)
      }
      return true
    }
    const byId = new Map()
    for (const endpoint of endpoints.value) {
      byId.set(experimental.subchannelAddressToString(endpoint.addresses[0]), endpoint)
    }
    const ids = [...byId.keys()]
    const same = this.config && JSON.stringify(this.config.toJsonObject()) === JSON.stringify(lbConfig.toJsonObject())
    if (this.balancer === null || !same) {
      this.balancer = new Balancer(lbConfig.algorithm, ids, lbConfig.options)
      this.config = lbConfig
      if (lbConfig.name !== undefined) named.set(lbConfig.name, this.balancer)
    } else {
      this.balancer.update(ids)
    }
    this.paused = true
    for (const [id, child] of this.children) {
      if (!byId.has(id)) {
        child.destroy()
        this.children.delete(id)
      }
    }
    for (const [id, endpoint] of byId) {
      const child = this.children.get(id)
      if (child) {
        child.updateEndpoint(endpoint, options)
      } else {
        const leaf = new experimental.LeafLoadBalancer(endpoint, this.childHelper, options, resolutionNote)
        this.children.set(id, leaf)
        leaf.startConnecting()
      }
    }
    this.paused = false
    if (byId.size === 0) {
      const message = `liblb: no addresses resolved. ${resolutionNote}`
      this.publish(connectivityState.TRANSIENT_FAILURE, new experimental.UnavailablePicker({ details: message }), message)
    } else {
      this.update()
    }
    return true
  }

  /** Marks each node up or down by its connection, then publishes the channel's state. */
  update() {
    if (this.paused || this.balancer === null) return
    const { experimental, connectivityState: C } = grpcJs()
    let ready = 0
    let connecting = 0
    for (const [id, child] of this.children) {
      const state = child.getConnectivityState()
      if (state === C.READY) {
        ready++
        this.balancer.markUp(id)
      } else {
        if (state === C.CONNECTING) connecting++
        this.balancer.markDown(id)
      }
      if (state === C.IDLE) child.exitIdle()
    }
    if (ready > 0) {
      this.publish(C.READY, new LiblbPicker(this.balancer, this.children, this.config.keyMetadata), null)
    } else if (connecting > 0) {
      this.publish(C.CONNECTING, new experimental.QueuePicker(this), null)
    } else if (this.children.size > 0) {
      const message = `liblb: no connection established. Last error: ${this.lastError}`
      this.publish(C.TRANSIENT_FAILURE, new experimental.UnavailablePicker({ details: message }), message)
    }
  }

  publish(state, picker, errorMessage) {
    this.state = state
    this.helper.updateState(state, picker, errorMessage)
  }

  exitIdle() {
    for (const child of this.children.values()) child.exitIdle()
  }

  resetBackoff() {}

  destroy() {
    for (const child of this.children.values()) child.destroy()
    this.children.clear()
  }

  getTypeName() {
    return TYPE_NAME
  }
}

/**
 * Registers the `liblb` policy with grpc-js (idempotent). Channels choose it by service config:
 * `loadBalancingConfig: [{ liblb: { algorithm, options, keyMetadata, name } }]`.
 */
function register() {
  const { experimental } = grpcJs()
  if (!experimental.isLoadBalancerNameRegistered(TYPE_NAME)) {
    experimental.registerLoadBalancerType(TYPE_NAME, LiblbLoadBalancer, LiblbConfig)
  }
}

module.exports = { register, balancer, loadOf, outcomeOf, TYPE_NAME }
