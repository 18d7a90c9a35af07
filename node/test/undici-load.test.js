'use strict'
// liblb/undici hands each answer's ORCA load report to its lease: servers on loopback put a
// ServerLoad's report in every answer (the `endpoint-load-metrics` header in TEXT or BIN form,
// Envoy's legacy `endpoint-load-metrics-bin`, or an HTTP/1.1 trailer), and a client_side_wrr
// balancer (no blackout, weights updated every 100 ms) must then send most requests to the node
// reporting the lower utilisation, whether it answers 200 or 500; a retried attempt's report
// (held with its answer) reaches the core too. A
// report that does not parse must change nothing for the caller.

const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { setTimeout: sleep } = require('node:timers/promises')
const { Agent, request } = require('undici')
const { Balancer, ServerLoad, parseOrca } = require('..')
const { interceptor, loadReport } = require('../undici')

const ORIGIN = 'http://api.test'

// A server answering `status`; with `utilization`, every answer carries its ServerLoad's report
// where `where` says ('text', 'bin': endpoint-load-metrics; 'bin-header':
// endpoint-load-metrics-bin; 'trailer': a TEXT report in the trailers); `extra`: more headers
// (or, with `where` 'trailer', trailers). Counts its requests in `hits`.
function serve({ status = 200, utilization, where = 'text', extra = {} }) {
  const load = new ServerLoad()
  if (utilization !== undefined) load.setApplicationUtilization(utilization)
  const node = { hits: 0 }
  node.server = http.createServer((req, res) => {
    node.hits++
    load.finish(load.start()) // this request, counted before it is reported
    const report = utilization === undefined ? {} : where === 'trailer' ? { 'endpoint-load-metrics': load.header() }
      : where === 'bin-header' ? { 'endpoint-load-metrics-bin': load.header('bin').slice(4) }
      : { 'endpoint-load-metrics': load.header(where) }
    if (where === 'trailer') {
      res.writeHead(status, { 'content-type': 'text/plain', trailer: 'endpoint-load-metrics' })
      res.write('ok')
      res.addTrailers({ ...report, ...extra })
      res.end()
    } else {
      res.writeHead(status, { 'content-type': 'text/plain', 'content-length': 2, ...report, ...extra })
      res.end('ok')
    }
  })
  return new Promise((resolve) => {
    node.server.listen(0, '127.0.0.1', () => {
      node.id = `127.0.0.1:${node.server.address().port}`
      resolve(node)
    })
  })
}

async function fleet(t, ...specs) {
  const nodes = []
  for (const spec of specs) nodes.push(await serve(spec))
  t.after(() => {
    for (const n of nodes) {
      n.server.closeAllConnections()
      n.server.close()
    }
  })
  return nodes
}

const wrr = (nodes, options = {}) =>
  new Balancer('client_side_wrr', nodes.map((n) => n.id), { blackout_period_ms: 0, weight_update_period_ms: 100, ...options })

// `count` GETs through the interceptor, bodies read: their statuses.
async function send(t, balancer, count, options) {
  const agent = new Agent({ keepAliveTimeout: 1000 }).compose(interceptor(balancer, options))
  t.after(() => agent.close())
  const statuses = []
  for (let i = 0; i < count; i++) {
    const res = await request(`${ORIGIN}/`, { dispatcher: agent })
    await res.body.text()
    statuses.push(res.statusCode)
  }
  return statuses
}

// 20 requests to let the nodes report (equal weights: they alternate), a pause past the 100 ms
// weight update, then 40 more: how many of those each node served, and their statuses.
async function weighed(t, balancer, nodes, options) {
  await send(t, balancer, 20, options)
  await sleep(250)
  const before = nodes.map((n) => n.hits)
  const statuses = await send(t, balancer, 40, options)
  return { served: nodes.map((n, i) => n.hits - before[i]), statuses }
}

for (const [hotWhere, coolWhere] of [['text', 'bin-header'], ['bin', 'trailer']]) {
  test(`reports weigh client_side_wrr (${hotWhere} and ${coolWhere})`, async (t) => {
    const [hot, cool] = await fleet(t, { utilization: 0.9, where: hotWhere }, { utilization: 0.1, where: coolWhere })
    const b = wrr([hot, cool])
    const { served, statuses } = await weighed(t, b, [hot, cool])
    assert.deepEqual(statuses, Array(40).fill(200))
    // Equal rates, utilisations 0.9 and 0.1: weights 1 to 9 (gRFC A58, qps / utilisation). A
    // node without reports gets the mean weight: the two would alternate.
    assert.ok(served[1] >= 3 * served[0], `served ${served}`)
    assert.deepEqual(b.stats().map((s) => s.inFlight), [0, 0])
  })
}

test('failure answers carry their report too', async (t) => {
  const [answering, failing] = await fleet(t, { utilization: 0.9 }, { status: 500, utilization: 0.1 })
  // One attempt each (the 500 is the caller's answer), no ejection: only the reports weigh.
  const b = wrr([answering, failing], { consecutive_failures: 0 })
  const { served, statuses } = await weighed(t, b, [answering, failing], { maxAttempts: 1 })
  assert.ok(served[1] >= 3 * served[0], `served ${served}`)
  assert.equal(statuses.filter((s) => s === 500).length, served[1])
})

test('a retried failure (held until its body ends) carries its report', async (t) => {
  // The 503 (no Retry-After: an error) is held until its body and trailers end, its lease
  // finished then, and the answer dropped for a retry on the other node. Every request starts
  // on the failing node whatever the weights (its retry takes the other's turn), so what the
  // interceptor hands the core is watched instead.
  const [failing, answering] = await fleet(t, { status: 503, utilization: 0.1, where: 'trailer' }, { utilization: 0.9 })
  const b = new Balancer('round_robin', [failing.id, answering.id], { consecutive_failures: 0 })
  const endings = []
  const watched = {
    request(key, options) {
      const inner = b.request(key, options)
      return {
        attempt: () => inner.attempt(),
        hedge: () => inner.hedge(),
        hedgeAfterMs: () => inner.hedgeAfterMs(),
        cancel: (lease) => inner.cancel(lease),
        get attempts() {
          return inner.attempts
        },
        get stopped() {
          return inner.stopped
        },
        finish(lease, outcome) {
          endings.push([lease.id, outcome])
          return inner.finish(lease, outcome)
        },
      }
    },
  }
  assert.deepEqual(await send(t, watched, 3, { maxAttempts: 2, budget: null }), [200, 200, 200])
  assert.deepEqual(endings.map(([id, o]) => [id, o.ok, typeof o.load]), Array(3).fill([[failing.id, false, 'string'], [answering.id, true, 'string']]).flat())
  for (const [id, o] of endings) assert.equal(parseOrca(o.load).applicationUtilization, id === failing.id ? 0.1 : 0.9)
})

test('a report that does not parse changes nothing for the caller', async (t) => {
  const hostile = [
    { 'endpoint-load-metrics': 'TEXT cpu_utilization:\xff\xfe' },
    { 'endpoint-load-metrics': 'BIN !!!!' },
    { 'endpoint-load-metrics': 'JSON {"cpu_utilization": [1]' },
    { 'endpoint-load-metrics': "XML <load cpu='1'/>" },
    { 'endpoint-load-metrics-bin': '%%%%' },
  ]
  const specs = []
  for (const extra of hostile) for (const status of [200, 500]) specs.push({ status, extra })
  specs.push({ status: 200, where: 'trailer', extra: { 'endpoint-load-metrics': 'TEXT nope' } })
  const nodes = await fleet(t, ...specs)
  const b = new Balancer('round_robin', nodes.map((n) => n.id), { consecutive_failures: 0 })
  const statuses = await send(t, b, nodes.length, { maxAttempts: 1 })
  assert.deepEqual(statuses, specs.map((s) => s.status))
  assert.deepEqual(
    b.stats().map((s) => [s.requests, s.failures, s.inFlight]),
    specs.map((s) => [1, s.status === 500 ? 1 : 0, 0]),
  )
})

test('loadReport reads Envoy\'s names in Envoy\'s order', () => {
  assert.equal(loadReport({}), undefined)
  assert.equal(loadReport(null), undefined)
  assert.equal(loadReport({ 'endpoint-load-metrics': 'TEXT eps:1' }), 'TEXT eps:1')
  assert.equal(loadReport({ 'endpoint-load-metrics': ['TEXT eps:1', 'TEXT eps:2'] }), 'TEXT eps:1')
  assert.equal(loadReport({ 'endpoint-load-metrics': 'TEXT eps:1', 'endpoint-load-metrics-bin': 'OQ==' }), 'BIN OQ==')
})
