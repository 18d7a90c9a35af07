'use strict'
// Health from JavaScript: ejection by reported failures, panic, markDown/markUp for every
// algorithm, slow start and bounded-load options, stats' status. The policies themselves are
// tested in the core (core/tests/health.rs, on an injected clock); here every call and option
// reaches it and comes back in JavaScript form.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, algorithms, keyedAlgorithms } = require('..')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const NODES = ['a', 'b', 'c', 'd']
const status = (b, id) => b.stats().find((s) => s.id === id).status
// Unkeyed algorithms ignore the keys of a batch: n keys, n picks.
const pickN = (b, n) => b.pickMany(Array.from({ length: n }, () => 'x'))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

describe('health', () => {
  it('consecutive failures eject a node until its ejection time passes', async () => {
    const b = new Balancer('round_robin', NODES, { consecutive_failures: 3, base_ejection_time_ms: 80 })
    for (let i = 0; i < 3; i++) b.report('a', { ok: false, latencyMs: 1 })
    const row = b.stats().find((s) => s.id === 'a')
    assert.equal(row.status, 'ejected')
    assert.equal(typeof row.untilMs, 'number')
    assert.ok(!pickN(b, 100).includes('a'))
    await sleep(100) // past the 80 ms ejection: back by itself, weight kept
    assert.equal(status(b, 'a'), 'healthy')
    assert.ok(pickN(b, 100).includes('a'))
  })

  it('failed leases eject too, and panic spreads traffic over every node', () => {
    const b = new Balancer('round_robin', NODES, { consecutive_failures: 1, max_ejection_percent: 100 })
    assert.equal(b.panic, false)
    for (const id of ['a', 'b']) b.report(id, { ok: false, latencyMs: 0 })
    let lease
    do {
      lease = b.acquire()
      if (lease.id !== 'c') lease.finish({ ok: true, latencyMs: 0 })
    } while (lease.id !== 'c')
    lease.finish({ ok: false, latencyMs: 0 })
    assert.equal(status(b, 'c'), 'ejected')
    const picks = pickN(b, 400)
    assert.equal(b.panic, true)
    assert.deepEqual([...new Set(picks)].sort(), NODES)
  })

  for (const algorithm of algorithms()) {
    it(`${algorithm}: markDown moves only the node's traffic and markUp brings it back`, () => {
      const b = new Balancer(algorithm, NODES, { seed: 3 })
      const keyed = keyedAlgorithms().includes(algorithm)
      const keys = Array.from({ length: 300 }, (_, i) => `k${i}`)
      const before = keyed ? b.pickMany(keys) : null
      b.markDown('c')
      assert.equal(status(b, 'c'), 'down')
      const during = keyed ? b.pickMany(keys) : pickN(b, 300)
      assert.ok(!during.includes('c'))
      if (keyed) keys.forEach((_, i) => assert.ok(during[i] === before[i] || before[i] === 'c'))
      b.markUp('c')
      assert.equal(status(b, 'c'), 'healthy')
      if (keyed) assert.deepEqual(b.pickMany(keys), before)
    })
  }

  it('panic_threshold 0 with every node down picks nothing (LB_NO_USABLE_NODES)', () => {
    const b = new Balancer('ring', NODES, { panic_threshold: 0 })
    for (const node of NODES) b.markDown(node)
    assert.equal(b.panic, false)
    throwsCode(() => b.pick('k'), 'LB_NO_USABLE_NODES', 'no usable nodes')
    throwsCode(() => b.attempts('k', 3), 'LB_NO_USABLE_NODES')
    b.markUp('b')
    assert.equal(b.pick('k'), 'b')
    assert.deepEqual(b.attempts('k', 3), ['b'])
  })

  it('bad ids and options throw the core\'s errors and change nothing', () => {
    const b = new Balancer('random', NODES)
    throwsCode(() => b.markDown('zz'), 'LB_UNKNOWN_NODE')
    throwsCode(() => b.markUp('zz'), 'LB_UNKNOWN_NODE')
    throwsType(() => b.markDown(3), 'got number')
    assert.ok(b.stats().every((s) => s.status === 'healthy' && s.untilMs === null))
    throwsCode(() => new Balancer('random', NODES, { max_ejection_percent: 101 }), 'LB_INVALID_OPTION_VALUE', 'max_ejection_percent')
    throwsCode(() => new Balancer('ring', NODES, { hash_balance_factor: 50 }), 'LB_INVALID_OPTION_VALUE', 'hash_balance_factor')
    throwsCode(() => new Balancer('random', NODES, { slow_start_aggression: 0 }), 'LB_INVALID_OPTION_VALUE', 'slow_start_aggression')
    throwsCode(() => new Balancer('random', NODES, { slow_start_aggression: NaN }), 'LB_INVALID_OPTION_VALUE', 'slow_start_aggression')
    throwsRange(() => new Balancer('random', NODES, { consecutive_failures: 2.5 }), 'integer')
  })

  it('slow start and bounded loads reach the core', () => {
    const b = new Balancer('weighted_random', ['a', 'b'], {
      slow_start_window_ms: 60000, slow_start_aggression: 1.5, min_weight_percent: 20,
    })
    b.add('c')
    const row = b.stats().find((s) => s.id === 'c')
    assert.equal(row.status, 'warming')
    const c = pickN(b, 30000).filter((id) => id === 'c').length
    // c starts at min_weight_percent: 0.2 / 2.2 of picks (~2,727); 99.9% bounds ~ +-160.
    assert.ok(c > 2400 && c < 3100, `${c}`)
    const ring = new Balancer('ring', NODES, { hash_balance_factor: 150 })
    const leases = Array.from({ length: 40 }, () => ring.acquire('hot'))
    assert.ok(Math.max(...ring.stats().map((s) => s.inFlight)) <= 15) // ceil(1.5 * 40 / 4)
    for (const lease of leases) lease.cancel()
  })
})
