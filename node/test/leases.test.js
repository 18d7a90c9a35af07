'use strict'
// Leases and requests as the binding makes them (node/src/leases.rs): JavaScript objects over
// native handles. What must hold whatever the implementation: they are instances of the exported
// classes, finish exactly once, refuse forged and foreign objects with a TypeError, release
// in-flight when garbage-collected unfinished (also in bulk and through their request), and
// hand back ids and tags equal to what the balancer knows.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const v8 = require('node:v8')
const vm = require('node:vm')
const path = require('node:path')
const { Worker } = require('node:worker_threads')
const { Balancer, Lease, Request, Hedging } = require('..')
const { throwsCode, throwsType } = require('./helpers')

const ABC = ['a', 'b', 'c']
const inFlight = (b) => b.stats().reduce((sum, s) => sum + s.inFlight, 0)
const counted = (b) => Object.fromEntries(b.stats().map((s) => [s.id, [s.requests, s.failures, s.inFlight]]))
const illegal = { name: 'TypeError', message: 'Illegal invocation' }

// The test runner has no --expose-gc: turn it on and fetch `gc` from a fresh context.
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc')
/** Collects garbage until `done()` or 20 rounds, letting finalizers run in between. */
async function collectUntil(done) {
  for (let i = 0; i < 20 && !done(); i++) {
    gc()
    await new Promise((resolve) => setImmediate(resolve))
  }
}

describe('lease and request objects', () => {
  it('are instances of the exported classes, with no own properties', () => {
    const b = new Balancer('round_robin', ABC)
    const lease = b.acquire()
    const req = b.request(null)
    const attempt = req.attempt()
    for (const l of [lease, attempt]) {
      assert.ok(l instanceof Lease)
      assert.equal(l.constructor, Lease)
      assert.deepEqual(Reflect.ownKeys(l), [])
    }
    assert.ok(req instanceof Request)
    assert.equal(req.constructor, Request)
    assert.deepEqual(Reflect.ownKeys(req), [])
    assert.throws(() => new Lease(), /constructor/)
    assert.throws(() => new Request(), /constructor/)
    lease.finish()
    req.finish(attempt)
  })

  it('members used on anything else throw Illegal invocation', () => {
    const b = new Balancer('round_robin', ABC)
    const lease = b.acquire()
    const req = b.request(null)
    const fakes = [{}, null, undefined, 5, Object.create(Lease.prototype), Object.create(lease), new Proxy(lease, {}), req]
    for (const fake of fakes) {
      for (const name of ['finish', 'cancel']) assert.throws(() => Lease.prototype[name].call(fake), illegal)
      for (const name of ['id', 'weight', 'tag', 'done']) {
        const { get } = Object.getOwnPropertyDescriptor(Lease.prototype, name)
        assert.throws(() => get.call(fake), illegal)
      }
    }
    for (const fake of [{}, 5, Object.create(Request.prototype), Object.create(req), lease]) {
      assert.throws(() => Request.prototype.attempt.call(fake), illegal)
      assert.throws(() => Request.prototype.finish.call(fake, lease), illegal)
      assert.throws(() => Object.getOwnPropertyDescriptor(Request.prototype, 'over').get.call(fake), illegal)
    }
    for (const fake of [{}, Object.create(Balancer.prototype), lease]) {
      assert.throws(() => Balancer.prototype.acquire.call(fake), illegal)
      assert.throws(() => Balancer.prototype.request.call(fake), illegal)
    }
    assert.equal(lease.done, false, 'nothing above touched the real lease')
    lease.finish()
    assert.equal(inFlight(b), 0)
  })

  it('request.finish and cancel refuse anything but a lease with a TypeError', () => {
    const b = new Balancer('round_robin', ABC)
    const req = b.request(null)
    const lease = req.attempt()
    const forged = [{}, null, undefined, 'a', 5, Object.create(Lease.prototype), Object.create(lease), new Proxy(lease, {}), req, Hedging.after(1)]
    for (const fake of forged) {
      throwsType(() => req.finish(fake, { ok: true }), 'lease must be a Lease')
      throwsType(() => req.cancel(fake), 'lease must be a Lease')
    }
    assert.deepEqual([lease.done, req.attempts, req.over], [false, 1, false])
    assert.equal(req.finish(lease, { ok: true }).decision, 'done')
  })

  it('a lease finishes once, however it is ended', () => {
    const b = new Balancer('round_robin', ABC)
    const req = b.request(null)
    const lease = req.attempt()
    req.finish(lease, { ok: true })
    const again = [
      () => req.finish(lease, { ok: true }),
      () => req.finish(lease),
      () => req.cancel(lease),
      () => lease.finish({ ok: false }),
      () => lease.cancel(),
    ]
    for (const end of again) throwsCode(end, 'LB_LEASE_FINISHED', `"${lease.id}"`)
    const plain = b.acquire()
    plain.cancel()
    throwsCode(() => plain.finish(), 'LB_LEASE_FINISHED', `"${plain.id}"`)
    assert.deepEqual([lease.done, plain.done], [true, true])
    assert.equal(counted(b)[lease.id][0], 1)
    assert.equal(inFlight(b), 0)
  })

  it('leases of other requests and balancers are refused, open or not', () => {
    const one = new Balancer('ring', ABC)
    const two = new Balancer('ring', ABC)
    const r1 = one.request('k')
    const r2 = two.request('k')
    const a1 = r1.attempt()
    const a2 = r2.attempt()
    throwsType(() => r2.finish(a1), 'attempt of this request')
    throwsType(() => r1.finish(a2), 'attempt of this request')
    throwsType(() => r1.finish(one.acquire('k')), 'attempt of this request')
    r1.finish(a1)
    throwsType(() => r2.finish(a1), 'attempt of this request') // ended: still the identity error first
    // cancel goes through the lease's own request, as before.
    r1.cancel(a2)
    assert.equal(a2.done, true)
    assert.deepEqual([r2.attempts, r2.over], [1, false])
    assert.equal(inFlight(two), 0)
  })

  it('an outcome getter that ends the lease and acquires another leaves the new lease alone', () => {
    const b = new Balancer('round_robin', ['a'])
    const lease = b.acquire()
    let fresh
    const outcome = {
      get ok() {
        lease.cancel()
        fresh = b.acquire() // may reuse the ended lease's native slot
        return true
      },
    }
    throwsCode(() => lease.finish(outcome), 'LB_LEASE_FINISHED')
    assert.equal(fresh.done, false)
    assert.equal(inFlight(b), 1)
    fresh.finish({ ok: true, latencyMs: 1 })
    assert.deepEqual(counted(b).a, [1, 0, 0])
  })

  it('ids and tags match the balancer across membership changes', () => {
    const big = 2n ** 64n - 1n
    const b = new Balancer('round_robin', [{ id: 'x', tag: big }, { id: 'y', tag: 2n ** 32n }, { id: 'z', tag: 7 }])
    const tags = { x: big, y: 2n ** 32n, z: 7n }
    for (let i = 0; i < 6; i++) {
      const lease = b.acquire()
      assert.equal(lease.tag, tags[lease.id])
      assert.equal(typeof lease.weight, 'number')
      lease.finish()
      if (i === 2) {
        b.update([{ id: 'x', tag: big }, { id: 'w', weight: 2 }])
        tags.w = 0n
      }
    }
    const r = new Balancer('ring', ['a', 'b', 'c', 'd'])
    r.pick('k')
    const req = r.request('k', { maxAttempts: 4 })
    const seen = []
    for (let l = req.attempt(); l !== null; l = req.attempt()) {
      seen.push(l.id)
      if (seen.length === 2) r.add('e')
      req.finish(l, { ok: false })
    }
    assert.equal(seen.length, 4)
    assert.equal(new Set(seen).size, 4)
    assert.deepEqual(seen.slice(0, 2), r.attempts('k', 5).filter((id) => id !== 'e').slice(0, 2))
  })

  it('getters and decisions keep their shapes', () => {
    const b = new Balancer('ring', ABC)
    const req = b.request('k', { deadlineMs: 60000, hedge: Hedging.after(5) })
    assert.deepEqual([req.attempts, req.over, req.stopped, req.winner, req.backoffMs()], [0, false, null, null, 0])
    assert.ok(req.remainingMs > 59000 && req.remainingMs <= 60000)
    const first = req.attempt()
    assert.equal(req.hedgeAfterMs(), 5)
    const d = req.finish(first, { ok: false, kind: 'overloaded', retryAfterMs: 7 })
    assert.deepEqual(Object.keys(d), ['decision', 'delayMs', 'stop'])
    assert.deepEqual(d, { decision: 'retry', delayMs: 7, stop: null })
    const stop = b.request('k', { maxAttempts: 1 })
    assert.deepEqual(stop.finish(stop.attempt(), { ok: false }), { decision: 'stop', delayMs: 0, stop: 'max_attempts' })
    assert.equal(stop.stopped, 'max_attempts')
  })
})

describe('garbage collection', () => {
  it('releases many leases dropped unfinished in one run, and none that ended', async () => {
    const b = new Balancer('least_request', ABC, { seed: 1 })
    const kept = []
    ;(() => {
      for (let i = 0; i < 3000; i++) {
        const lease = b.acquire()
        if (i % 3 === 0) lease.finish({ ok: true, latencyMs: 1 })
        else if (i % 3 === 1) kept.push(lease)
      }
    })()
    assert.equal(inFlight(b), 2000)
    await collectUntil(() => inFlight(b) === 1000)
    assert.equal(inFlight(b), 1000, 'the 1000 dropped leases are released, the 1000 kept are not')
    // The kept ones still end normally, and the finished ones that were collected released
    // nothing else.
    for (const lease of kept) lease.finish({ ok: true, latencyMs: 1 })
    assert.equal(inFlight(b), 0)
    assert.equal(b.stats().reduce((sum, s) => sum + s.requests, 0), 2000)
  })

  it('a finished lease collected after its slot was reused leaves the new lease open', async () => {
    const b = new Balancer('round_robin', ['a'])
    let old = b.acquire()
    await null // the end of the run that made it: registered for collection
    old.finish()
    const open = b.acquire() // the native slot the old lease had
    old = null
    await collectUntil(() => false)
    assert.equal(open.done, false)
    assert.equal(inFlight(b), 1)
    open.finish()
    assert.equal(inFlight(b), 0)
  })

  it('a request attempt dropped unfinished is cancelled through its request', async () => {
    const b = new Balancer('ring', ABC)
    const req = b.request('k', { hedge: Hedging.after(0) })
    ;(() => req.attempt())()
    assert.equal(inFlight(b), 1)
    await collectUntil(() => inFlight(b) === 0)
    assert.equal(inFlight(b), 0)
    assert.deepEqual(counted(b)[b.pick('k')], [0, 0, 0], 'cancelled: nothing counted')
  })

  it('a lease outlives its dropped request and balancer, and still ends through them', async () => {
    let lease
    let stats
    ;(() => {
      const b = new Balancer('ring', ABC)
      stats = () => counted(b)
      lease = b.request('k').attempt()
    })()
    await collectUntil(() => false)
    assert.equal(lease.done, false)
    lease.finish({ ok: true, latencyMs: 2 })
    assert.deepEqual(stats()[lease.id], [1, 0, 0])
  })

  it('a request keeps answering ids after its balancer object is dropped', async () => {
    let req
    ;(() => {
      const b = new Balancer('round_robin', ['p', 'q'])
      b.pick()
      req = b.request(null, { maxAttempts: 2 })
    })()
    // Balancers made meanwhile may take freed handles; the request's must stay its own.
    const others = Array.from({ length: 20 }, (_, i) => new Balancer('round_robin', [`o${i}`]))
    others.forEach((o) => o.pick())
    await collectUntil(() => false)
    const ids = []
    for (let l = req.attempt(); l !== null; l = req.attempt()) {
      ids.push(l.id)
      req.finish(l, { ok: false })
    }
    assert.deepEqual(ids.sort(), ['p', 'q'])
  })

  it('works in a worker, which may exit with leases open', async () => {
    const source = `
      const { parentPort, workerData } = require('node:worker_threads')
      const { Balancer } = require(workerData)
      const b = new Balancer('least_request', ['a', 'b'], { seed: 1 })
      const req = b.request(null, { maxAttempts: 2 })
      const first = req.attempt()
      const decision = req.finish(first, { ok: false })
      const second = req.attempt()
      const open = [b.acquire(), b.acquire()]
      open[0].finish()
      parentPort.postMessage({ decision: decision.decision, ids: [first.id, second.id].sort(), inFlight: b.stats().reduce((s, n) => s + n.inFlight, 0) })`
    const worker = new Worker(source, { eval: true, workerData: path.join(__dirname, '..') })
    const [message] = await Promise.all([
      new Promise((resolve, reject) => worker.once('message', resolve).once('error', reject)),
      new Promise((resolve) => worker.once('exit', resolve)),
    ])
    assert.deepEqual(message, { decision: 'retry', ids: ['a', 'b'], inFlight: 2 })
  })
})
