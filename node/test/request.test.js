'use strict'
// Requests (issue 21): Balancer.request's Request object and run(key, fn, options). The
// expectations are the core's answers through other entry points (attempts() for the retry
// order, stats() for what was counted) or what a policy must do with a given sequence of
// outcomes.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const lb = require('..')
const { Balancer, Hedging, RetryBudget, RetryThrottle, AdaptiveThrottle, stopReasons } = lb
const { throwsCode, throwsType } = require('./helpers')

const NODES = ['a', 'b', 'c', 'd', 'e']
const ring = (options = {}) => new Balancer('ring', NODES, { seed: 7, ...options })
const counted = (b) => Object.fromEntries(b.stats().map((s) => [s.id, [s.requests, s.failures, s.inFlight]]))

describe('Request', () => {
  it('a success ends the request after one attempt', () => {
    const b = ring()
    const req = b.request('user-1')
    const lease = req.attempt()
    assert.equal(lease.id, b.pick('user-1'))
    assert.deepEqual(req.finish(lease, { ok: true }), { decision: 'done', delayMs: 0, stop: null })
    assert.equal(req.attempt(), null)
    assert.deepEqual([req.attempts, req.stopped, req.winner, req.over], [1, null, 1, true])
    assert.deepEqual(counted(b)[lease.id], [1, 0, 0])
  })

  it('retries go to distinct nodes in the key retry order, with Envoy backoff', () => {
    const b = ring()
    const req = b.request('user-2', { maxAttempts: 4 })
    const ids = []
    const decisions = []
    for (let lease = req.attempt(); lease !== null; lease = req.attempt()) {
      ids.push(lease.id)
      decisions.push(req.finish(lease, { ok: false }))
    }
    assert.deepEqual(ids, b.attempts('user-2', 4))
    assert.deepEqual(decisions.map((d) => d.decision), ['retry', 'retry', 'retry', 'stop'])
    decisions.slice(0, 3).forEach((d, i) => {
      assert.ok(d.delayMs >= 0 && d.delayMs < Math.min(25 * 2 ** i, 250), `${d.delayMs}`)
    })
    assert.equal(decisions[3].stop, 'max_attempts')
    assert.equal(req.stopped, 'max_attempts')
    assert.equal(req.backoffMs(), decisions[2].delayMs)
    for (const id of ids) assert.deepEqual(counted(b)[id], [1, 1, 0])
  })

  const stops = [
    [{ retryOn: ['timeout'] }, 'error', 'not_retryable', 1],
    [{ retryOn: [] }, 'timeout', 'not_retryable', 1],
    [{ maxAttempts: 1 }, 'error', 'max_attempts', 1],
    [{ maxAttempts: 100 }, 'error', 'no_more_nodes', 5],
    [{ deadlineMs: 0 }, 'error', 'deadline', 1],
    [{ budget: new RetryBudget({ minPerSec: 0, retryPercent: 0 }) }, 'error', 'budget', 1],
    [{ budget: new RetryThrottle(1, 0.1) }, 'timeout', 'budget', 1],
  ]
  for (const [options, kind, stop, attempts] of stops) {
    it(`stops with ${stop} (${JSON.stringify(Object.keys(options))}, ${kind})`, () => {
      const b = ring()
      const req = b.request('k', options)
      let last
      for (let lease = req.attempt(); lease !== null; lease = req.attempt()) {
        last = req.finish(lease, { ok: false, kind })
      }
      assert.ok(stopReasons().includes(stop))
      assert.deepEqual([req.stopped, last.stop, req.attempts], [stop, stop, attempts])
    })
  }

  it('an overloaded answer paces the retry by its retry-after', () => {
    const b = ring()
    const req = b.request('k')
    const first = req.attempt()
    const d = req.finish(first, { ok: false, kind: 'overloaded', retryAfterMs: 500 })
    assert.deepEqual(d, { decision: 'retry', delayMs: 500, stop: null })
    const second = req.attempt()
    assert.notEqual(second.id, first.id)
    second.finish({ ok: true }) // a request's lease reports to its request either way
    assert.equal(req.winner, 2)
  })

  it('a hedge wins and the cancelled loser counts nothing', () => {
    const b = ring()
    const req = b.request('k', { hedge: Hedging.after(0) })
    const first = req.attempt()
    assert.equal(req.hedgeAfterMs(), 0)
    const hedge = req.hedge()
    assert.equal(hedge.id, b.attempts('k', 2)[1])
    assert.equal(req.finish(hedge, { ok: true }).decision, 'done')
    req.cancel(first)
    assert.deepEqual([req.winner, req.stopped, req.over], [2, null, true])
    assert.deepEqual(counted(b)[first.id], [0, 0, 0])
    assert.deepEqual(counted(b)[hedge.id], [1, 0, 0])
  })

  it('bad options throw specific errors and leave the balancer unchanged', () => {
    const b = ring()
    const before = JSON.stringify([b.nodes(), b.stats(), b.attempts('k')])
    for (const n of [0, 101, -1, 1.5, 2 ** 40]) throwsCode(() => b.request('k', { maxAttempts: n }), 'LB_INVALID_OPTION_VALUE', 'max_attempts')
    throwsType(() => b.request('k', { maxAttempts: '3' }), 'maxAttempts')
    throwsCode(() => b.request('k', { retryOn: ['5xx'] }), 'LB_INVALID_OUTCOME', '5xx')
    throwsType(() => b.request('k', { retryOn: 'error' }), 'retryOn')
    throwsType(() => b.request('k', { retryOn: [1] }), 'retryOn')
    throwsType(() => b.request('k', { budget: {} }), 'budget')
    throwsType(() => b.request('k', { hedge: 10 }), 'hedge')
    throwsType(() => b.request('k', { hedge: new RetryBudget() }), 'hedge')
    throwsType(() => b.request('k', 5), 'options')
    assert.throws(() => b.request('k', { deadlineMs: -1 }), RangeError)
    throwsCode(() => Hedging.percentile(1), 'LB_INVALID_OPTION_VALUE', 'max_extra_load')
    throwsType(() => Hedging.after('1'), 'delayMs')
    throwsType(() => b.setBudget(3), 'budget')
    throwsType(() => new Balancer('ring', NODES, { budget: 'x' }), 'budget')
    assert.equal(JSON.stringify([b.nodes(), b.stats(), b.attempts('k')]), before)
    assert.equal(b.pick('k'), b.attempts('k')[0])
  })

  it('a lease of another request is refused', () => {
    const b = ring()
    const one = b.request('k')
    const two = b.request('k')
    const lease = one.attempt()
    throwsType(() => two.finish(lease, { ok: true }), 'attempt of this request')
    throwsType(() => two.finish(b.acquire('k'), { ok: true }), 'attempt of this request')
    assert.equal(one.finish(lease, { ok: true }).decision, 'done')
    throwsCode(() => one.finish(lease, { ok: true }), 'LB_LEASE_FINISHED')
  })

  it('a keyed request without a key throws at its attempt and stays usable', () => {
    const b = ring()
    const req = b.request()
    throwsCode(() => req.attempt(), 'LB_KEY_REQUIRED')
    assert.deepEqual([req.attempts, req.over], [0, false])
  })

  it("the balancer's budget is every request's default", () => {
    const b = ring({ budget: new RetryBudget({ minPerSec: 0, retryPercent: 0 }) })
    const req = b.request('k')
    req.finish(req.attempt(), { ok: false })
    assert.equal(req.stopped, 'budget')
    b.setBudget(null)
    const free = b.request('k')
    assert.equal(free.finish(free.attempt(), { ok: false }).decision, 'retry')
    b.setBudget(new RetryBudget({ minPerSec: 0, retryPercent: 0 }))
    const again = b.request('k')
    assert.equal(again.finish(again.attempt(), { ok: false }).stop, 'budget')
  })

  it('an adaptive throttle rejects before any attempt', () => {
    const throttle = new AdaptiveThrottle()
    for (let i = 0; i < 400; i++) throttle.admit(0, 0n)
    const b = ring({ budget: throttle })
    const stopped = []
    for (let i = 0; i < 20; i++) {
      const req = b.request('k')
      const lease = req.attempt()
      if (lease !== null) req.finish(lease, { ok: true })
      stopped.push(req.stopped)
    }
    assert.ok(stopped.includes('throttled'))
  })
})

describe('run with options', () => {
  it('retries on distinct nodes and resolves with the first success', async () => {
    const b = ring()
    const tried = []
    const result = await b.run('k', async (node) => {
      tried.push(node)
      if (tried.length < 3) throw new Error('refused')
      return `answer from ${node}`
    }, { maxAttempts: 3 })
    assert.deepEqual(tried, b.attempts('k', 3))
    assert.equal(result, `answer from ${tried[2]}`)
  })

  it('maps rejections to kinds and gives up with LB_REQUEST_FAILED', async () => {
    const b = ring()
    const timeout = Object.assign(new Error('slow'), { name: 'TimeoutError' })
    await assert.rejects(b.run('k', () => Promise.reject(timeout), { retryOn: ['error'] }), (err) => {
      assert.deepEqual([err.code, err.stop, err.attempts], ['LB_REQUEST_FAILED', 'not_retryable', 1])
      assert.equal(err.cause, timeout)
      return true
    })
    const first = b.attempts('j', 1)[0]
    const busy = Object.assign(new Error('busy'), { kind: 'overloaded', retryAfterMs: 30000 })
    await assert.rejects(b.run('j', () => { throw busy }, { maxAttempts: 1 }), (err) => err.stop === 'max_attempts' && err.cause === busy)
    assert.equal(b.stats().find((s) => s.id === first).status, 'overloaded')
  })

  it('waits the backoff between attempts', async () => {
    const b = ring()
    const at = []
    await b.run('k', (node) => {
      at.push(b.nowMs())
      if (at.length === 1) throw Object.assign(new Error('busy'), { kind: 'overloaded', retryAfterMs: 40 })
      return node
    }, {})
    assert.ok(at[1] - at[0] >= 39, `${at[1] - at[0]}`)
  })

  it('hedges race: the first success wins and the loser is aborted, counting nothing', async () => {
    const b = ring()
    const order = b.attempts('k', 2)
    const aborted = []
    const result = await b.run('k', (node, signal) => new Promise((resolve, reject) => {
      if (node !== order[0]) return resolve(node)
      const timer = setTimeout(resolve, 10000, node)
      signal.addEventListener('abort', () => {
        aborted.push(node)
        clearTimeout(timer)
        reject(new Error('aborted'))
      })
    }), { hedge: Hedging.after(10) })
    assert.equal(result, order[1])
    assert.deepEqual(aborted, [order[0]])
    const stats = counted(b)
    assert.deepEqual(stats[order[0]], [0, 0, 0])
    assert.deepEqual(stats[order[1]], [1, 0, 0])
  })
})
