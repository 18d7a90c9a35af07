'use strict'
// liblb/grpc (issue 22): the `liblb` grpc-js load-balancing policy against real grpc-js servers
// on 127.0.0.1 (OS-picked ports). The calls follow the policy's own balancer, every call's
// status reaches it (failures by kind, pushback pauses a node, in-flight back to 0), keys come
// from metadata, and a server that goes away stops getting calls.
const { describe, it, after } = require('node:test')
const assert = require('node:assert/strict')
const grpc = require('@grpc/grpc-js')
const liblbGrpc = require('../grpc')
const { Balancer, ServerLoad, parseOrca } = require('..')

liblbGrpc.register()

const identity = (b) => b
const SERVICE = {
  say: {
    path: '/test.Echo/Say',
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
}
const Client = grpc.makeGenericClientConstructor(SERVICE, 'Echo')

const servers = []
after(() => Promise.all(servers.map((s) => new Promise((resolve) => s.tryShutdown(resolve)))))

/** A server answering "<index> <x-user>" as `behaviour` says: 'ok', 'unavailable',
 * 'exhausted' (RESOURCE_EXHAUSTED with a 30 s pushback) or 'invalid' (INVALID_ARGUMENT). */
async function serve(index, behaviour = 'ok') {
  const server = new grpc.Server()
  const stats = { calls: 0 }
  server.addService(SERVICE, {
    say(call, callback) {
      stats.calls++
      if (behaviour === 'unavailable') return callback({ code: grpc.status.UNAVAILABLE, details: 'down' })
      if (behaviour === 'invalid') return callback({ code: grpc.status.INVALID_ARGUMENT, details: 'bad' })
      if (behaviour === 'exhausted') {
        const metadata = new grpc.Metadata()
        metadata.set('grpc-retry-pushback-ms', '30000')
        return callback({ code: grpc.status.RESOURCE_EXHAUSTED, details: 'busy', metadata })
      }
      const user = call.metadata.get('x-user')[0] ?? '-'
      callback(null, Buffer.from(`${index} ${user}`))
    },
  })
  const port = await new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  )
  servers.push(server)
  return { id: `127.0.0.1:${port}`, server, stats }
}

let names = 0
/** A client over `ids` through the liblb policy; its balancer. */
function client(ids, config = {}) {
  const name = `test-${++names}`
  const serviceConfig = { loadBalancingConfig: [{ liblb: { ...config, name } }] }
  const c = new Client(`ipv4:${ids.join(',')}`, grpc.credentials.createInsecure(), {
    'grpc.service_config': JSON.stringify(serviceConfig),
  })
  return { c, name }
}

function say(c, metadata = new grpc.Metadata()) {
  return new Promise((resolve) =>
    c.say(Buffer.from('hi'), metadata, { deadline: Date.now() + 5000 }, (err, reply) =>
      resolve(err ? { code: err.code } : { reply: reply.toString() }),
    ),
  )
}

/** Resolves once `condition()` holds (checked every 5 ms, for at most 5 s). */
async function until(condition) {
  for (let i = 0; i < 1000 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 5))
  assert.ok(condition(), 'condition not reached in 5 s')
}

/** Resolves once the channel is ready and every node of its balancer is connected. */
async function connected(c, name) {
  await new Promise((resolve, reject) => c.waitForReady(Date.now() + 5000, (err) => (err ? reject(err) : resolve())))
  await until(() => liblbGrpc.balancer(name).stats().every((s) => s.status === 'healthy'))
}

const counted = (b) => Object.fromEntries(b.stats().map((s) => [s.id, [s.requests, s.failures, s.inFlight]]))

describe('liblb grpc-js policy', () => {
  it('routes calls by its balancer and counts every call', async () => {
    const nodes = await Promise.all([0, 1, 2].map((i) => serve(i)))
    const ids = nodes.map((n) => n.id)
    const { c, name } = client(ids, { algorithm: 'round_robin' })
    await connected(c, name)
    const replies = []
    for (let i = 0; i < 9; i++) replies.push((await say(c)).reply)
    const b = liblbGrpc.balancer(name)
    assert.ok(b instanceof Balancer)
    // Every node answered three times (round robin over ready nodes), each counted once.
    for (const i of [0, 1, 2]) assert.equal(replies.filter((r) => r === `${i} -`).length, 3, replies.join())
    assert.deepEqual(counted(b), Object.fromEntries(ids.map((id) => [id, [3, 0, 0]])))
    c.close()
  })

  it('counts failures by kind and ejects a failing node', async () => {
    const [down, ok, bad] = [await serve(0, 'unavailable'), await serve(1), await serve(2, 'invalid')]
    const { c, name } = client([down.id, ok.id, bad.id], { algorithm: 'round_robin', options: { consecutive_failures: 2 } })
    const codes = []
    for (let i = 0; i < 12; i++) codes.push((await say(c)).code ?? 0)
    const stats = Object.fromEntries(liblbGrpc.balancer(name).stats().map((s) => [s.id, s]))
    // UNAVAILABLE twice: ejected after its streak, so no more calls reach it.
    assert.equal(down.stats.calls, 2)
    assert.deepEqual([stats[down.id].requests, stats[down.id].failures, stats[down.id].status], [2, 2, 'ejected'])
    // INVALID_ARGUMENT is the node's answer: counted, not a failure.
    assert.equal(stats[bad.id].failures, 0)
    assert.equal(stats[bad.id].requests, bad.stats.calls)
    assert.equal(codes.filter((code) => code === grpc.status.UNAVAILABLE).length, 2)
    assert.ok(Object.values(stats).every((s) => s.inFlight === 0))
    c.close()
  })

  it('pauses a node for its pushback', async () => {
    const [busy, ok] = [await serve(0, 'exhausted'), await serve(1)]
    const { c, name } = client([busy.id, ok.id], { algorithm: 'round_robin' })
    const codes = []
    for (let i = 0; i < 8; i++) codes.push((await say(c)).code ?? 0)
    assert.equal(busy.stats.calls, 1)
    assert.equal(codes.filter((code) => code === grpc.status.RESOURCE_EXHAUSTED).length, 1)
    const b = liblbGrpc.balancer(name)
    const stat = b.stats().find((s) => s.id === busy.id)
    assert.equal(stat.status, 'overloaded')
    assert.ok(stat.remainingMs > 29000 && stat.remainingMs <= 30000, `${stat.remainingMs}`)
    c.close()
  })

  it('keys calls by a metadata entry', async () => {
    const nodes = await Promise.all([0, 1, 2, 3].map((i) => serve(i)))
    const ids = nodes.map((n) => n.id)
    const { c, name } = client(ids, { algorithm: 'maglev', keyMetadata: 'x-user' })
    const twin = new Balancer('maglev', ids)
    // Until every subchannel is connected, keys of unconnected nodes go to the next in the
    // table (they are marked down): wait for all of them.
    await connected(c, name)
    for (const user of ['alice', 'bob', 'carol', 'dave', 'erin']) {
      const metadata = new grpc.Metadata()
      metadata.set('x-user', user)
      const index = ids.indexOf(twin.pick(user))
      for (let i = 0; i < 2; i++) assert.equal((await say(c, metadata)).reply, `${index} ${user}`)
    }
    // A keyed algorithm without its key: the call fails with the balancer's reason.
    assert.equal((await say(c)).code, grpc.status.UNAVAILABLE)
    c.close()
  })

  it('stops sending to a server that went away', async () => {
    const [gone, stays] = [await serve(0), await serve(1)]
    const { c, name } = client([gone.id, stays.id], { algorithm: 'round_robin' })
    for (let i = 0; i < 4; i++) assert.ok((await say(c)).reply)
    await new Promise((resolve) => gone.server.tryShutdown(resolve))
    gone.server.forceShutdown()
    const replies = []
    for (let i = 0; i < 6; i++) replies.push(await say(c))
    // At most the calls in flight when it closed fail; then every call reaches the other.
    assert.ok(replies.slice(-4).every((r) => r.reply === '1 -'), JSON.stringify(replies))
    const stat = liblbGrpc.balancer(name).stats().find((s) => s.id === gone.id)
    assert.equal(stat.status, 'down')
    c.close()
  })

  it('maps statuses like the Python module and checks its config', () => {
    const { status: S, Metadata } = grpc
    const pushback = new Metadata()
    pushback.set('grpc-retry-pushback-ms', '250')
    assert.deepEqual(liblbGrpc.outcomeOf(S.OK), { ok: true })
    assert.deepEqual(liblbGrpc.outcomeOf(S.RESOURCE_EXHAUSTED, new Metadata()), { ok: false, kind: 'overloaded' })
    assert.deepEqual(liblbGrpc.outcomeOf(S.UNAVAILABLE, pushback), { ok: false, kind: 'overloaded', retryAfterMs: 250 })
    assert.deepEqual(liblbGrpc.outcomeOf(S.UNAVAILABLE, new Metadata()), { ok: false, kind: 'error' })
    assert.deepEqual(liblbGrpc.outcomeOf(S.DEADLINE_EXCEEDED, new Metadata()), { ok: false, kind: 'timeout' })
    assert.deepEqual(liblbGrpc.outcomeOf(S.NOT_FOUND, new Metadata()), { ok: true })
    assert.equal(liblbGrpc.outcomeOf(S.CANCELLED, new Metadata()), null)
    // grpc-js parses the config when the resolver answers (and falls back to pick_first if it
    // is refused); parseLoadBalancingConfig is that parse.
    const parse = (config) => grpc.experimental.parseLoadBalancingConfig({ liblb: config })
    assert.deepEqual(parse({ algorithm: 'ring', keyMetadata: 'x-user' }).toJsonObject(), {
      liblb: { algorithm: 'ring', options: {}, keyMetadata: 'x-user' },
    })
    // (grpc-js rethrows with the policy's name and the message, dropping the code.)
    assert.throws(() => parse({ algorithm: 'nope' }), /^Error: liblb: unknown algorithm "nope"/)
    assert.throws(() => parse({ options: { vnodes: 0 } }), /^Error: liblb: .*vnodes/)
    for (const config of [[], { algorithm: 3 }, { options: [] }, { keyMetadata: 1 }, { name: {} }]) {
      assert.throws(() => parse(config), /liblb load-balancing config: /, JSON.stringify(config))
    }
  })
})

// Server-reported load: each call's trailing metadata carries a ServerLoad's report
// (`endpoint-load-metrics-bin`, gRFC A51, or Envoy's `endpoint-load-metrics`), and a
// client_side_wrr policy must send most calls to the node reporting the lower utilisation,
// whether the call succeeds or fails. A report that does not parse changes nothing.
describe('liblb grpc-js policy and load reports', () => {
  /** A server answering `behaviour` ('ok', 'unavailable', 'invalid') whose trailers carry
   * `trailer()`'s entries: by default its ServerLoad's report at `utilization`, in `form`. */
  async function serveLoaded({ behaviour = 'ok', utilization = 0.5, form = 'bin', trailer } = {}) {
    const load = new ServerLoad()
    load.setApplicationUtilization(utilization)
    const report = () => {
      load.finish(load.start()) // this call, counted before it is reported
      if (form === 'bin') return [['endpoint-load-metrics-bin', Buffer.from(load.header('bin').slice(4), 'base64')]]
      return [['endpoint-load-metrics', load.header()]]
    }
    const server = new grpc.Server()
    const stats = { calls: 0 }
    server.addService(SERVICE, {
      say(call, callback) {
        stats.calls++
        const metadata = new grpc.Metadata()
        for (const [key, value] of trailer ? trailer() : report()) metadata.set(key, value)
        if (behaviour === 'unavailable') return callback({ code: grpc.status.UNAVAILABLE, details: 'down', metadata })
        if (behaviour === 'invalid') return callback({ code: grpc.status.INVALID_ARGUMENT, details: 'bad', metadata })
        callback(null, Buffer.from('ok'), metadata)
      },
    })
    const port = await new Promise((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    )
    servers.push(server)
    return { id: `127.0.0.1:${port}`, server, stats }
  }

  const wrrConfig = { algorithm: 'client_side_wrr', options: { blackout_period_ms: 0, weight_update_period_ms: 100, consecutive_failures: 0 } }

  /** 20 calls to let the nodes report, a pause past the weight update, 40 more: how many of
   * those each node served. */
  async function weighed(nodes) {
    const { c, name } = client(nodes.map((n) => n.id), wrrConfig)
    await connected(c, name)
    for (let i = 0; i < 20; i++) await say(c)
    await new Promise((resolve) => setTimeout(resolve, 250))
    const before = nodes.map((n) => n.stats.calls)
    for (let i = 0; i < 40; i++) await say(c)
    c.close()
    return nodes.map((n, i) => n.stats.calls - before[i])
  }

  it('weighs client_side_wrr by the reports in trailing metadata (both keys)', async () => {
    const hot = await serveLoaded({ utilization: 0.9, form: 'text' })
    const cool = await serveLoaded({ utilization: 0.1, form: 'bin' })
    const served = await weighed([hot, cool])
    // Equal rates, utilisations 0.9 and 0.1: weights 1 to 9 (gRFC A58); unweighed: alternate.
    assert.ok(served[1] >= 3 * served[0], `served ${served}`)
  })

  for (const behaviour of ['unavailable', 'invalid']) {
    it(`takes the report of a failed call too (${behaviour})`, async () => {
      const answering = await serveLoaded({ utilization: 0.9 })
      const failing = await serveLoaded({ behaviour, utilization: 0.1 })
      const served = await weighed([answering, failing])
      assert.ok(served[1] >= 3 * served[0], `served ${served}`)
    })
  }

  it('ignores a report that does not parse', async () => {
    const hostile = [
      () => [['endpoint-load-metrics-bin', Buffer.from([0xff, 0xff])]],
      () => [['endpoint-load-metrics', 'TEXT cpu_utilization:nope']],
      () => [['endpoint-load-metrics', 'BIN !!!!']],
    ]
    const nodes = []
    for (const trailer of hostile) nodes.push(await serveLoaded({ trailer }), await serveLoaded({ behaviour: 'unavailable', trailer }))
    const ids = nodes.map((n) => n.id)
    const { c, name } = client(ids, { algorithm: 'round_robin', options: { consecutive_failures: 0 } })
    await connected(c, name)
    const answers = []
    for (let i = 0; i < ids.length; i++) answers.push(await say(c))
    c.close()
    assert.equal(answers.filter((a) => a.reply === 'ok').length, 3)
    assert.equal(answers.filter((a) => a.code === grpc.status.UNAVAILABLE).length, 3)
    const b = liblbGrpc.balancer(name)
    assert.deepEqual(counted(b), Object.fromEntries(ids.map((id, i) => [id, [1, i % 2, 0]])))
  })

  it('reads the gRFC A51 key first, then Envoy\'s', () => {
    const md = new grpc.Metadata()
    assert.equal(liblbGrpc.loadOf(md), undefined)
    assert.equal(liblbGrpc.loadOf(undefined), undefined)
    md.set('endpoint-load-metrics', 'TEXT eps:1')
    assert.equal(liblbGrpc.loadOf(md), 'TEXT eps:1')
    md.set('endpoint-load-metrics-bin', Buffer.from('39000000000000f03f', 'hex')) // eps (field 7): 1.0
    assert.equal(parseOrca(liblbGrpc.loadOf(md)).eps, 1)
  })
})
