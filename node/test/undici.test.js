'use strict'
// liblb/undici against real HTTP servers on loopback: echo servers that answer their index and
// the Host they saw, one answering 503, one 429 with Retry-After, a slow one, a port that
// refuses connections, one that resets mid-body.

const test = require('node:test')
const assert = require('node:assert/strict')
const http = require('node:http')
const { Agent, request, fetch, interceptors, setGlobalDispatcher, getGlobalDispatcher } = require('undici')
const { Balancer, Hedging, RetryBudget } = require('..')
const { interceptor, outcome, retryAfterMs } = require('../undici')

const ORIGIN = 'http://api.test'

// A server; `answer(req, res, hits)` answers. Each remembers the requests it saw.
function serve(answer, host = '127.0.0.1') {
  return new Promise((resolve) => {
    const seen = []
    const server = http.createServer((req, res) => {
      seen.push({ host: req.headers.host, method: req.method, id: req.headers['x-id'], url: req.url })
      answer(req, res)
    })
    server.listen(0, host, () => {
      const { port } = server.address()
      resolve({ id: host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`, server, seen })
    })
  })
}

const json = (res, status, body, headers = {}) => {
  const text = JSON.stringify(body)
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers })
  res.end(text)
}

let servers
test.before(async () => {
  const s = {}
  s.echo = []
  for (let i = 0; i < 3; i++) s.echo.push(await serve((req, res) => json(res, 200, { index: i, host: req.headers.host })))
  s.s503 = await serve((req, res) => json(res, 503, { index: '503' }))
  s.s429 = await serve((req, res) => json(res, 429, { index: '429' }, { 'retry-after': '2' }))
  s.slow = await serve((req, res) => setTimeout(() => json(res, 200, { index: 'slow', host: req.headers.host }), 60))
  s.reset = await serve((req, res) => {
    res.writeHead(200, { 'content-length': '100' })
    res.write('partial')
    setTimeout(() => req.socket.destroy(), 10)
  })
  // A body that takes a while: 'a' now, the rest after 2 s (for callers that walk away).
  s.stream = await serve((req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.write('a')
    const timer = setTimeout(() => res.end('b'), 2000)
    res.on('close', () => clearTimeout(timer))
  })
  s.refused = await serve(() => {})
  await new Promise((resolve) => s.refused.server.close(resolve))
  servers = s
})
test.after(() => {
  for (const s of [...servers.echo, servers.s503, servers.s429, servers.slow, servers.reset, servers.stream]) {
    s.server.closeAllConnections()
    s.server.close()
  }
})

// An agent balancing over `balancer`; closed by the test's end.
function agentFor(t, balancer, options) {
  const agent = new Agent({ keepAliveTimeout: 1000 }).compose(interceptor(balancer, options))
  t.after(() => agent.close())
  return agent
}

// `balancer` as the interceptor sees it, with every attempt's ending recorded: [node id, outcome]
// pairs, or [node id, 'cancel'].
function spy(balancer) {
  const endings = []
  const request = (key, options) => {
    const inner = balancer.request(key, options)
    return {
      attempt: () => inner.attempt(),
      hedge: () => inner.hedge(),
      hedgeAfterMs: () => inner.hedgeAfterMs(),
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
      cancel(lease) {
        endings.push([lease.id, 'cancel'])
        return inner.cancel(lease)
      },
    }
  }
  return { watched: { request }, endings }
}

// Waits (up to 2 s) for `condition()`; undici ends an aborted request a tick or two later.
async function until(condition) {
  for (let i = 0; i < 200 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 10))
}

const stat = (balancer, id) => balancer.stats().find((s) => s.id === id)
const inFlight = (balancer) => balancer.stats().reduce((sum, s) => sum + s.inFlight, 0)
const clear = () => {
  for (const s of [...servers.echo, servers.s503, servers.s429, servers.slow, servers.reset, servers.stream]) s.seen.length = 0
}

async function get(agent, path = '/', opts = {}) {
  const res = await request(`${ORIGIN}${path}`, { dispatcher: agent, ...opts })
  const text = await res.body.text()
  return { status: res.statusCode, body: text.startsWith('{') ? JSON.parse(text) : text }
}

test('the node sequence is the balancer\'s own pick sequence, Host preserved, each attempt counted once', async (t) => {
  clear()
  const ids = servers.echo.map((s) => s.id)
  const b = new Balancer('random', ids, { seed: 7 })
  const twin = new Balancer('random', ids, { seed: 7 })
  const agent = agentFor(t, b)
  for (let i = 0; i < 30; i++) {
    const { status, body } = await get(agent, `/n/${i}`)
    assert.equal(status, 200)
    assert.equal(ids[body.index], twin.pick(), `request ${i}`)
    assert.equal(body.host, 'api.test')
  }
  for (const [i, id] of ids.entries()) {
    const s = stat(b, id)
    assert.equal(s.requests, servers.echo[i].seen.length)
    assert.equal(s.failures, 0)
    assert.equal(s.inFlight, 0)
  }
})

test('retries reach distinct nodes; refused, 503 and reset count as failures once per attempt', async (t) => {
  clear()
  const { refused, s503, echo } = servers
  const ids = [refused.id, s503.id, echo[0].id]
  // consecutive_failures 0: no ejection, so every request meets both bad nodes in some order.
  const b = new Balancer('random', ids, { seed: 3, consecutive_failures: 0 })
  const { watched, endings } = spy(b)
  const agent = agentFor(t, watched, { maxAttempts: 3 })
  const n = 20
  const error = { ok: false, kind: 'error' }
  for (let i = 0; i < n; i++) {
    const from = endings.length
    const { status, body } = await get(agent, '/', { headers: { 'x-id': String(i) } })
    assert.equal(status, 200)
    assert.equal(body.index, 0)
    // This request's attempts: distinct nodes, failures ending as errors, the echo's success last.
    const mine = endings.slice(from)
    assert.equal(new Set(mine.map(([id]) => id)).size, mine.length)
    assert.deepEqual(mine.at(-1), [echo[0].id, { ok: true }])
    for (const [, outcome] of mine.slice(0, -1)) assert.deepEqual(outcome, error)
  }
  // Each request reached each server at most once (distinct nodes), the echo exactly once.
  for (const s of [s503, echo[0]]) {
    const ids = s.seen.map((r) => r.id)
    assert.equal(new Set(ids).size, ids.length)
    assert.ok(s.seen.every((r) => r.host === 'api.test'))
  }
  assert.equal(echo[0].seen.length, n)
  assert.deepEqual(stat(b, echo[0].id), { ...stat(b, echo[0].id), requests: n, failures: 0, inFlight: 0 })
  const bad503 = stat(b, s503.id)
  assert.equal(bad503.requests, s503.seen.length)
  assert.equal(bad503.failures, s503.seen.length)
  const badRefused = stat(b, refused.id)
  assert.equal(badRefused.failures, badRefused.requests)
  assert.ok(badRefused.requests > 0 && bad503.requests > 0)
  // Random order over 3 nodes: the first attempt is uniform, so the echo was first only sometimes.
  assert.ok(badRefused.requests + bad503.requests >= n / 2)
  assert.equal(inFlight(b), 0)

  // A reset mid-body: the answer was passed on (200), so no retry; the attempt is an error.
  const r = new Balancer('round_robin', [servers.reset.id, echo[1].id])
  const rspy = spy(r)
  const ragent = agentFor(t, rspy.watched, { maxAttempts: 3 })
  const res = await request(`${ORIGIN}/`, { dispatcher: ragent })
  assert.equal(res.statusCode, 200)
  await assert.rejects(res.body.text(), (e) => e.code === 'UND_ERR_SOCKET' || e.code === 'ECONNRESET')
  assert.deepEqual(rspy.endings, [[servers.reset.id, error]])
  assert.deepEqual([stat(r, servers.reset.id).requests, stat(r, servers.reset.id).failures], [1, 1])
  assert.equal(stat(r, echo[1].id).requests, 0)
  assert.equal(inFlight(r), 0)
})

test('a keyed request\'s retries follow the balancer\'s own attempts(key) order', async (t) => {
  clear()
  const { refused, s503, echo } = servers
  const ids = [refused.id, s503.id, echo[0].id, echo[1].id]
  const b = new Balancer('ring_hash', ids, { consecutive_failures: 0 })
  const { watched, endings } = spy(b)
  const agent = agentFor(t, watched, { key: (opts) => opts.path, maxAttempts: 4 })
  let retried = 0
  for (let i = 0; i < 24; i++) {
    const path = `/user/${i}`
    const from = endings.length
    const { status, body } = await get(agent, path)
    assert.equal(status, 200)
    const tried = endings.slice(from).map(([id]) => id)
    // The nodes tried are the key's retry order up to the first good node.
    const order = b.attempts(path)
    assert.deepEqual(tried, order.slice(0, order.findIndex((id) => id === echo[0].id || id === echo[1].id) + 1))
    assert.equal(tried.at(-1), body.index === 0 ? echo[0].id : echo[1].id)
    if (tried.length > 1) retried++
  }
  assert.ok(retried >= 6, `${retried} of 24 keys started on a bad node`)
  assert.equal(inFlight(b), 0)
})

test('the 503 node is ejected; the 429 node is paused for its Retry-After', async (t) => {
  clear()
  const { s503, s429, echo } = servers
  const b = new Balancer('round_robin', [s503.id, echo[0].id, echo[1].id], { consecutive_failures: 2 })
  const agent = agentFor(t, b)
  for (let i = 0; i < 6; i++) assert.equal((await get(agent)).status, 200)
  assert.equal(s503.seen.length, 2)
  assert.equal(stat(b, s503.id).status, 'ejected')
  assert.equal(inFlight(b), 0)

  // One attempt: the caller gets the 429 itself; the node is kept from picks for ~2 s.
  const o = new Balancer('round_robin', [s429.id, echo[0].id])
  const ospy = spy(o)
  const oagent = agentFor(t, ospy.watched, { maxAttempts: 1 })
  assert.equal((await get(oagent)).status, 429)
  assert.deepEqual(ospy.endings, [[s429.id, { ok: false, kind: 'overloaded', retryAfterMs: 2000 }]])
  const paused = stat(o, s429.id)
  assert.equal(paused.status, 'overloaded')
  assert.ok(paused.remainingMs > 1000 && paused.remainingMs <= 2000, `remainingMs ${paused.remainingMs}`)
  assert.equal(paused.failures, 1)
  for (let i = 0; i < 4; i++) assert.equal((await get(oagent)).body.index, 0)
  assert.equal(s429.seen.length, 1)
})

test('a retry after an overloaded answer waits for its Retry-After (the core\'s decision) on another node', async (t) => {
  clear()
  const { s429, echo } = servers
  const b = new Balancer('round_robin', [s429.id, echo[0].id], { max_retry_after_ms: 100 })
  const agent = agentFor(t, b)
  const started = Date.now()
  const { status, body } = await get(agent)
  assert.equal(status, 200)
  assert.equal(body.index, 0)
  assert.ok(Date.now() - started >= 90, 'waited the (capped) retry-after')
  assert.deepEqual([stat(b, s429.id).requests, stat(b, s429.id).failures, s429.seen.length], [1, 1, 1])
})

test('a budget caps retries', async (t) => {
  clear()
  const { s503, refused } = servers
  const ids = [s503.id, refused.id]
  const run = async (budget) => {
    const b = new Balancer('round_robin', ids, { consecutive_failures: 0 })
    const agent = agentFor(t, b, { maxAttempts: 2, budget })
    for (let i = 0; i < 10; i++) await get(agent).catch(() => null)
    return b.stats().reduce((sum, s) => sum + s.requests, 0)
  }
  assert.equal(await run(null), 20) // every request retried once
  assert.equal(await run(new RetryBudget({ minPerSec: 0, retryPercent: 0 })), 10) // none
  assert.equal(await run(new RetryBudget({ minPerSec: 0, retryPercent: 0.5 })), 15) // half
})

test('with least_request the slow server\'s share falls', async (t) => {
  clear()
  const ids = [servers.slow.id, servers.echo[0].id, servers.echo[1].id]
  const share = async (algorithm) => {
    const b = new Balancer(algorithm, ids, { seed: 1 })
    const agent = agentFor(t, b)
    const counts = new Map()
    const worker = async () => {
      for (let i = 0; i < 15; i++) {
        const { body } = await get(agent)
        counts.set(body.index, (counts.get(body.index) ?? 0) + 1)
      }
    }
    await Promise.all(Array.from({ length: 6 }, worker))
    assert.equal(inFlight(b), 0)
    return (counts.get('slow') ?? 0) / 90
  }
  assert.equal(await share('round_robin'), 1 / 3)
  const least = await share('least_request')
  assert.ok(least < 0.2, `slow share ${least}`)
})

test('in-flight returns to 0 when the caller aborts or abandons the body', async (t) => {
  clear()
  const b = new Balancer('round_robin', [servers.stream.id, servers.slow.id])
  const agent = agentFor(t, b)
  // 1. request(): headers arrive, the caller destroys the body unread.
  const res = await request(`${ORIGIN}/`, { dispatcher: agent })
  assert.equal(stat(b, servers.stream.id).inFlight, 1)
  res.body.destroy()
  await until(() => inFlight(b) === 0)
  assert.equal(inFlight(b), 0)
  // 2. An AbortSignal before the headers (the slow server).
  await assert.rejects(request(`${ORIGIN}/`, { dispatcher: agent, signal: AbortSignal.timeout(20) }), { name: 'TimeoutError' })
  assert.equal(inFlight(b), 0)
  // 3. fetch: the response's body left unread, then aborted.
  const controller = new AbortController()
  const response = await fetch(`${ORIGIN}/`, { dispatcher: agent, signal: controller.signal })
  assert.equal(response.status, 200)
  assert.equal(inFlight(b), 1)
  controller.abort()
  await until(() => inFlight(b) === 0)
  assert.equal(inFlight(b), 0)
  // Aborts are the caller's: nothing counted against the nodes.
  for (const s of b.stats()) assert.deepEqual([s.requests, s.failures], [0, 0])
})

test('a fetch Response dropped unread is cancelled when garbage-collected', async (t) => {
  // undici's fetch cancels the body of a collected Response; the lease is then cancelled.
  require('node:v8').setFlagsFromString('--expose-gc')
  const gc = require('node:vm').runInNewContext('gc')
  const b = new Balancer('round_robin', [servers.stream.id])
  const agent = agentFor(t, b)
  await (async () => {
    const response = await fetch(`${ORIGIN}/`, { dispatcher: agent })
    assert.equal(response.status, 200)
  })()
  assert.equal(inFlight(b), 1)
  for (let i = 0; i < 100 && inFlight(b) > 0; i++) {
    gc()
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  assert.equal(inFlight(b), 0)
  assert.deepEqual(b.stats().map((s) => [s.requests, s.failures]), [[0, 0]])
})

test('fetch, request and setGlobalDispatcher', async (t) => {
  clear()
  const ids = servers.echo.map((s) => s.id)
  const b = new Balancer('round_robin', ids)
  const agent = agentFor(t, b)
  const viaFetch = await (await fetch(`${ORIGIN}/f`, { dispatcher: agent })).json()
  assert.deepEqual(viaFetch, { index: 0, host: 'api.test' })
  const viaRequest = await get(agent, '/r')
  assert.deepEqual(viaRequest.body, { index: 1, host: 'api.test' })
  const before = getGlobalDispatcher()
  setGlobalDispatcher(agent)
  t.after(() => setGlobalDispatcher(before))
  assert.deepEqual(await (await fetch(`${ORIGIN}/g`)).json(), { index: 2, host: 'api.test' })
  assert.deepEqual((await request(`${ORIGIN}:8080/g`)).statusCode, 200)
  assert.equal(servers.echo[0].seen.at(-1).host, 'api.test:8080')
  // Node's built-in fetch reads the same global dispatcher.
  assert.deepEqual(await (await globalThis.fetch(`${ORIGIN}/g`)).json(), { index: 1, host: 'api.test' })
  assert.equal(b.stats().reduce((sum, s) => sum + s.requests, 0), 5)
  assert.equal(inFlight(b), 0)
})

test('composed with interceptors.retry: each retry is a new liblb request, nothing counted twice', async (t) => {
  clear()
  const { s503, echo } = servers
  const b = new Balancer('round_robin', [s503.id, echo[0].id], { consecutive_failures: 0 })
  // compose(a, b): b is the outermost layer, so undici's retry wraps liblb.
  const agent = new Agent().compose(
    interceptor(b, { maxAttempts: 1 }),
    interceptors.retry({ maxRetries: 2, minTimeout: 1, timeoutFactor: 1 }),
  )
  t.after(() => agent.close())
  for (let i = 0; i < 4; i++) {
    const { status, body } = await get(agent)
    assert.equal(status, 200)
    assert.equal(body.index, 0)
  }
  // Requests 1 and 3 met the 503 and were retried by undici onto the echo: 2 + 4 attempts.
  assert.deepEqual([stat(b, s503.id).requests, stat(b, s503.id).failures], [s503.seen.length, s503.seen.length])
  assert.equal(stat(b, echo[0].id).requests, echo[0].seen.length)
  assert.equal(s503.seen.length + echo[0].seen.length, b.stats().reduce((sum, s) => sum + s.requests, 0))
  assert.equal(echo[0].seen.length, 4)
  assert.equal(inFlight(b), 0)
})

test('keyed routing: the key function\'s key picks the node, as pick(key)', async (t) => {
  clear()
  const ids = servers.echo.map((s) => s.id)
  const b = new Balancer('ring_hash', ids)
  const agent = agentFor(t, b, { key: (opts) => opts.headers?.['x-user'] })
  for (const user of ['alice', 'bob', 'carol', 'dave', 'erin', 'frank']) {
    for (let i = 0; i < 2; i++) {
      const { body } = await get(agent, '/', { headers: { 'x-user': user } })
      assert.equal(ids[body.index], b.pick(user))
    }
  }
  // No key for a keyed algorithm: the core's error reaches the caller.
  await assert.rejects(get(agent), { code: 'LB_KEY_REQUIRED' })
})

test('hedges: the first answer wins, the slow attempt is aborted and its lease cancelled', async (t) => {
  clear()
  // A server slower than the hedge delay by far (the shared slow one answers in 60 ms).
  const sluggish = await serve((req, res) => {
    const timer = setTimeout(() => json(res, 200, { index: 'sluggish' }), 1500)
    res.on('close', () => clearTimeout(timer))
  })
  t.after(() => {
    sluggish.server.closeAllConnections()
    sluggish.server.close()
  })
  const ids = [sluggish.id, servers.echo[0].id]
  const b = new Balancer('round_robin', ids, { seed: 3 })
  const twin = new Balancer('round_robin', ids, { seed: 3 })
  const { watched, endings } = spy(b)
  watched.stats = () => b.stats()
  // Two attempts at most: a second hedge (a slow answer from the fast server on a busy machine)
  // is then refused without touching the balancer, so the twin below stays in step.
  const agent = agentFor(t, watched, { hedge: Hedging.after(30), maxAttempts: 2 })
  const expected = []
  for (let i = 0; i < 4; i++) {
    const { status, body } = await get(agent, `/h/${i}`)
    assert.equal(status, 200)
    assert.equal(body.index, 0, 'the echo server answered first')
    // The twin's request loop, stepped by hand: where this request's attempts go.
    const mirror = twin.request(null, { maxAttempts: 2, hedge: Hedging.after(30) })
    const first = mirror.attempt()
    if (first.id === sluggish.id) {
      const hedge = mirror.hedge()
      assert.equal(hedge.id, servers.echo[0].id)
      mirror.cancel(first)
      mirror.finish(hedge, { ok: true })
      expected.push([sluggish.id, 'cancel'], [servers.echo[0].id, { ok: true }])
    } else {
      mirror.finish(first, { ok: true })
      expected.push([servers.echo[0].id, { ok: true }])
    }
  }
  // Every request that started on the slow node was hedged to the other one (round robin: the
  // hedge is the next node), and the slow attempt was cancelled: nothing counted for it.
  await until(() => inFlight(b) === 0)
  assert.deepEqual(endings, expected)
  assert.equal(sluggish.seen.length, expected.filter(([id]) => id === sluggish.id).length)
  assert.deepEqual([stat(b, sluggish.id).requests, stat(b, sluggish.id).failures, inFlight(b)], [0, 0, 0])
  // A POST may not be retried, so it is not hedged either: one attempt, wherever it lands.
  endings.length = 0
  const posted = await get(agent, '/post', { method: 'POST', body: 'x' })
  assert.equal(posted.status, 200)
  assert.equal(endings.length, 1)
  assert.equal(endings[0][0], twin.request(null, { maxAttempts: 1 }).attempt().id)
})

test('hedges: one that fails while the first is out makes the request wait for the first', async (t) => {
  clear()
  const ids = [servers.slow.id, servers.s503.id]
  const b = new Balancer('round_robin', ids, { seed: 3, consecutive_failures: 0 })
  const twin = new Balancer('round_robin', ids, { seed: 3 })
  // Make the first attempt go to the slow server (a twin's request tells where it would go).
  if (twin.request(null, { maxAttempts: 1 }).attempt().id !== servers.slow.id) b.request(null, { maxAttempts: 1 }).attempt()
  const { watched, endings } = spy(b)
  const agent = agentFor(t, watched, { hedge: Hedging.after(10) })
  const { status, body } = await get(agent)
  // The 503 hedge answered first and was dropped (the core said wait); the slow one answered.
  assert.equal(status, 200)
  assert.equal(body.index, 'slow')
  assert.deepEqual(endings, [[servers.s503.id, { ok: false, kind: 'error' }], [servers.slow.id, { ok: true }]])
  assert.equal(inFlight(b), 0)
  // The caller's abort with a hedge out: both attempts cancelled, nothing counted.
  endings.length = 0
  await assert.rejects(request(`${ORIGIN}/`, { dispatcher: agent, signal: AbortSignal.timeout(40) }), { name: 'TimeoutError' })
  await until(() => inFlight(b) === 0)
  assert.equal(inFlight(b), 0)
  assert.ok(endings.every(([, how]) => how === 'cancel' || how.ok === false), JSON.stringify(endings))
})

test('only idempotent methods with replayable bodies are retried', async (t) => {
  clear()
  const { s503, echo } = servers
  // Each on a fresh round robin: the first attempt goes to the 503.
  const status = async (opts) => {
    const b = new Balancer('round_robin', [s503.id, echo[0].id])
    const { status } = await get(agentFor(t, b), '/', opts)
    assert.equal(inFlight(b), 0)
    return status
  }
  const { Readable } = require('node:stream')
  assert.equal(await status({ method: 'POST', body: 'x' }), 503) // not idempotent
  assert.equal(await status({ method: 'PUT', body: 'x' }), 200) // retried
  assert.equal(await status({ method: 'DELETE', body: Buffer.from('x') }), 200)
  assert.equal(await status({ method: 'POST', body: 'x', idempotent: true }), 200) // undici's own flag
  assert.equal(await status({ method: 'GET', idempotent: false }), 503)
  assert.equal(await status({ method: 'PUT', body: Readable.from(['x']) }), 503) // a stream
  assert.deepEqual(s503.seen.map((r) => r.method), ['POST', 'PUT', 'DELETE', 'POST', 'GET', 'PUT'])
})

test('node ids: scheme prefix, IPv6, and a specific error for one that is not host:port', async (t) => {
  clear()
  const v6 = await serve((req, res) => json(res, 200, { index: 'v6', host: req.headers.host }), '::1')
  t.after(() => v6.server.close())
  const b = new Balancer('round_robin', [`http://${servers.echo[2].id}`, v6.id])
  const agent = agentFor(t, b)
  // The id's http:// replaces the https origin's scheme; an id without one keeps the origin's.
  const first = await request(`https://api.test/`, { dispatcher: agent })
  assert.deepEqual(await first.body.json(), { index: 2, host: 'api.test' })
  assert.deepEqual((await get(agent)).body, { index: 'v6', host: 'api.test' })

  const bad = new Balancer('round_robin', ['api-1'])
  await assert.rejects(get(agentFor(t, bad)), (e) => e.code === 'LB_INVALID_NODE_ID' && e.message.includes('"api-1"'))
  assert.equal(inFlight(bad), 0)
  for (const id of ['h:0', 'h:70000', '[zz]:80', 'ftp://h:1', 'h:1/path']) {
    const odd = new Balancer('round_robin', [id])
    await assert.rejects(get(agentFor(t, odd)), { code: 'LB_INVALID_NODE_ID' }, id)
  }
})

test('undici\'s timeouts end the attempt as a timeout; a caller\'s abort cancels it', async (t) => {
  clear()
  const { echo, stream } = servers
  const stall = await serve(() => {}) // never answers
  t.after(() => {
    stall.server.closeAllConnections()
    stall.server.close()
  })
  const b = new Balancer('round_robin', [stall.id, echo[0].id])
  const { watched, endings } = spy(b)
  // undici's timers tick about twice a second: these fire within a second.
  const agent = new Agent({ headersTimeout: 50 }).compose(interceptor(watched))
  t.after(() => agent.close())
  assert.equal((await get(agent)).body.index, 0) // the stalled node timed out; retried on the echo
  assert.deepEqual(endings, [[stall.id, { ok: false, kind: 'timeout' }], [echo[0].id, { ok: true }]])
  endings.length = 0
  const once = new Agent({ headersTimeout: 50 }).compose(interceptor(watched, { maxAttempts: 1 }))
  t.after(() => once.close())
  await assert.rejects(get(once), { code: 'UND_ERR_HEADERS_TIMEOUT' })
  await get(once)
  await assert.rejects(get(once, '/', { signal: AbortSignal.timeout(5) }), { name: 'TimeoutError' })
  assert.deepEqual(endings, [
    [stall.id, { ok: false, kind: 'timeout' }],
    [echo[0].id, { ok: true }],
    [stall.id, 'cancel'],
  ])
  assert.equal(inFlight(b), 0)

  // A body timeout, after the answer went to the caller: a timeout, not retried.
  const s = new Balancer('round_robin', [stream.id, echo[0].id])
  const sspy = spy(s)
  const slowBody = new Agent({ bodyTimeout: 50 }).compose(interceptor(sspy.watched))
  t.after(() => slowBody.close())
  await assert.rejects(get(slowBody), { code: 'UND_ERR_BODY_TIMEOUT' })
  assert.deepEqual(sspy.endings, [[stream.id, { ok: false, kind: 'timeout' }]])
  assert.equal(inFlight(s), 0)
})

test('a failed answer is held until the core decides: dropped for a retry, else passed on whole', async (t) => {
  clear()
  const big = 'x'.repeat(200 * 1024)
  const s500 = await serve((req, res) => {
    res.writeHead(500, { 'content-type': 'text/plain' })
    res.end(big)
  })
  t.after(() => s500.server.close())
  const { s503, echo } = servers
  // Retried: the caller sees only the echo (the 503's small body and the 500's big one dropped).
  for (const bad of [s503, s500]) {
    const b = new Balancer('round_robin', [bad.id, echo[0].id])
    const { status, body } = await get(agentFor(t, b))
    assert.deepEqual([status, body.index], [200, 0])
    assert.deepEqual(b.stats().map((s) => [s.requests, s.failures, s.inFlight]), [[1, 1, 0], [1, 0, 0]])
  }
  // Not retried (the budget says no): the failed answer arrives as it was sent.
  const none = new RetryBudget({ minPerSec: 0, retryPercent: 0 })
  for (const [bad, expected] of [[s503, { index: '503' }], [s500, big]]) {
    const b = new Balancer('round_robin', [bad.id, echo[0].id])
    const { status, body } = await get(agentFor(t, b, { budget: none }))
    assert.equal(status, bad === s503 ? 503 : 500)
    assert.deepEqual(body, expected)
    assert.deepEqual(b.stats().map((s) => [s.requests, s.failures, s.inFlight]), [[1, 1, 0], [0, 0, 0]])
  }
})

test('what each attempt dispatches: the node\'s origin, the logical Host in every header form, the TLS server name', () => {
  const sent = []
  // A dispatch that records its options and answers 200 with an empty body.
  const record = (opts, handler) => {
    sent.push(opts)
    const controller = { abort() {}, pause() {}, resume() {}, paused: false, aborted: false }
    handler.onRequestStart(controller, {})
    handler.onResponseStart(controller, 200, {}, 'OK')
    handler.onResponseEnd(controller, {})
    return true
  }
  const b = new Balancer('round_robin', ['10.0.0.1:8443', 'http://10.0.0.2:8080', '[fd00::3]:443'])
  const dispatch = interceptor(b)(record)
  const events = []
  const handler = {
    onRequestStart: () => events.push('start'),
    onResponseStart: (c, status) => events.push(status),
    onResponseData: () => {},
    onResponseEnd: () => events.push('end'),
    onResponseError: (c, e) => events.push(e),
  }
  const headerForms = [
    [{ 'x-a': '1' }, { host: 'api.test', 'x-a': '1' }],
    [['x-a', '1'], ['host', 'api.test', 'x-a', '1']],
    [[['x-a', '1']], ['host', 'api.test', 'x-a', '1']],
    [new Map([['x-a', '1']]), ['host', 'api.test', 'x-a', '1']],
    [{ Host: 'mine.test' }, { Host: 'mine.test' }],
    [['HOST', 'mine.test'], ['HOST', 'mine.test']],
    [null, { host: 'api.test' }],
  ]
  for (const [headers] of headerForms) dispatch({ origin: 'https://api.test', path: '/p?q=1', method: 'GET', headers }, handler)
  assert.deepEqual(sent.map((o) => o.headers), headerForms.map(([, want]) => want))
  assert.deepEqual(sent.slice(0, 3).map((o) => [o.origin, o.path, o.servername]), [
    ['https://10.0.0.1:8443', '/p?q=1', 'api.test'], // https: the TLS name stays the logical host
    ['http://10.0.0.2:8080', '/p?q=1', undefined], // the id's http:// replaces https
    ['https://[fd00::3]:443', '/p?q=1', 'api.test'],
  ])
  assert.deepEqual(events.slice(0, 3), ['start', 200, 'end'])
  // An IP origin has no server name to keep; the caller's own servername is kept.
  sent.length = 0
  dispatch({ origin: 'https://192.0.2.1', path: '/', method: 'GET' }, handler)
  dispatch({ origin: new URL('https://api.test:9443'), path: '/', method: 'GET', servername: 'sni.test' }, handler)
  assert.deepEqual(sent.map((o) => [o.servername, o.headers.host]), [[undefined, '192.0.2.1'], ['sni.test', 'api.test:9443']])
  assert.equal(inFlight(b), 0)
  assert.equal(b.stats().reduce((sum, s) => sum + s.requests, 0), 9)
})

test('an accepted upgrade ends its attempt as a success and reaches the caller', () => {
  const b = new Balancer('round_robin', ['10.0.0.1:80'])
  const controller = { abort() {}, pause() {}, resume() {}, paused: false, aborted: false }
  const dispatch = interceptor(b)((opts, handler) => {
    handler.onRequestStart(controller, {})
    handler.onRequestUpgrade(controller, 101, { upgrade: 'websocket' }, 'the socket')
    return true
  })
  const got = []
  dispatch({ origin: 'http://ws.test', path: '/', method: 'GET', upgrade: 'websocket' }, {
    onRequestStart: () => got.push('start'),
    onRequestUpgrade: (c, status, headers, socket) => got.push(status, socket),
    onResponseError: (c, error) => got.push(error),
  })
  assert.deepEqual(got, ['start', 101, 'the socket'])
  assert.deepEqual(b.stats().map((s) => [s.requests, s.failures, s.inFlight]), [[1, 0, 0]])
})

test('the quickstart of docs/node-http.md runs as printed', () => {
  const fs = require('node:fs')
  const path = require('node:path')
  const { execFileSync } = require('node:child_process')
  const source = fs.readFileSync(path.join(__dirname, '..', '..', 'tests', 'packages', 'undici-quickstart.mjs'), 'utf8')
  const docs = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'node-http.md'), 'utf8')
  assert.ok(docs.includes('```js\n' + source + '```'), 'docs/node-http.md shows tests/packages/undici-quickstart.mjs verbatim')
  // Run from inside the package, where 'liblb' and 'undici' resolve as in a user's project.
  const copy = path.join(__dirname, `.undici-quickstart-${process.pid}.mjs`)
  fs.writeFileSync(copy, source)
  try {
    const out = execFileSync(process.execPath, [copy], { encoding: 'utf8', timeout: 10_000 }).trim().split('\n')
    assert.equal(out.length, 10)
    for (const line of out.slice(0, 6)) assert.match(line, /^200 \{ server: [01], host: 'orders\.internal' \}$/)
    assert.equal(out[6], '200')
    assert.match(out[9], /ejected requests=2 failures=2$/)
  } finally {
    fs.rmSync(copy)
  }
})

test('bad arguments throw specific errors', () => {
  const b = new Balancer('round_robin', ['127.0.0.1:1'])
  assert.throws(() => interceptor({}), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => interceptor(b, { key: 'x-user' }), { code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => interceptor(b, { retries: 3 }), { code: 'LB_UNKNOWN_OPTION', message: /retries/ })
  assert.throws(() => interceptor(b, { maxAttempts: 0 }), { code: 'LB_INVALID_OPTION_VALUE' })
  assert.throws(() => interceptor(b, { retryOn: ['sometimes'] }), { code: 'LB_INVALID_OUTCOME', message: /sometimes/ })
  assert.throws(() => interceptor(b, null), { code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => interceptor(b, { methods: 'GET' }), { code: 'ERR_INVALID_ARG_TYPE' })
})

test('the answer table', () => {
  assert.deepEqual(outcome(200, {}), { ok: true })
  assert.deepEqual(outcome(404, {}), { ok: true })
  assert.deepEqual(outcome(500, {}), { ok: false, kind: 'error' })
  assert.deepEqual(outcome(503, {}), { ok: false, kind: 'error' })
  assert.deepEqual(outcome(503, { 'retry-after': '3' }), { ok: false, kind: 'overloaded', retryAfterMs: 3000 })
  assert.deepEqual(outcome(429, {}), { ok: false, kind: 'overloaded', retryAfterMs: null })
  assert.equal(retryAfterMs('0'), 0)
  assert.equal(retryAfterMs('soon'), null)
  assert.equal(retryAfterMs(undefined), null)
  const date = retryAfterMs(new Date(Date.now() + 5000).toUTCString())
  assert.ok(date > 3000 && date <= 5000, String(date))
  assert.equal(retryAfterMs(new Date(Date.now() - 5000).toUTCString()), 0)
})
