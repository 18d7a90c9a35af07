'use strict'
// Leases, run(), report(), stats(), pickHash()/attemptsHash() and the generic options: the
// binding's conversions. What the counts mean for each algorithm is the core's (its own tests and
// the shared vectors); here every JavaScript form reaches the core, in-flight counts come back to
// zero, and bad input throws the right error.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const v8 = require('node:v8')
const vm = require('node:vm')
const { Worker } = require('node:worker_threads')
const lb = require('..')
const { Balancer, algorithms, hashAlgorithms, keyedAlgorithms, optionNames } = lb
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const ABC = ['a', 'b', 'c']
const inFlight = (b) => Object.fromEntries(b.stats().map((s) => [s.id, s.inFlight]))
const row = (b, id) => b.stats().find((s) => s.id === id)
const idle = { a: 0, b: 0, c: 0 }

describe('leases', () => {
  it('acquire counts in flight until finish', () => {
    const b = new Balancer('least_request', ABC, { seed: 1 })
    const lease = b.acquire()
    assert.ok(ABC.includes(lease.id))
    assert.equal(lease.weight, 1)
    assert.equal(lease.done, false)
    assert.equal(inFlight(b)[lease.id], 1)
    lease.finish({ ok: true, latencyMs: 12 })
    assert.equal(lease.done, true)
    assert.deepEqual(inFlight(b), idle)
    const r = row(b, lease.id)
    assert.equal(r.requests, 1)
    assert.equal(r.failures, 0)
    assert.ok(Math.abs(r.latency - 12) < 0.05, `latency ${r.latency}`)
  })

  it('finish() without latencyMs measures it; ok defaults to true', () => {
    const b = new Balancer('peak_ewma', ABC, { seed: 2 })
    const lease = b.acquire()
    lease.finish()
    const r = row(b, lease.id)
    assert.equal(r.requests, 1)
    assert.equal(r.failures, 0)
    assert.equal(typeof r.latency, 'number')
    const failed = b.acquire()
    failed.finish({ ok: false })
    assert.equal(row(b, failed.id).failures, 1)
  })

  it('finishing twice throws LB_LEASE_FINISHED', () => {
    const b = new Balancer('round_robin', ABC)
    const lease = b.acquire()
    lease.finish({ ok: true, latencyMs: 1 })
    throwsCode(() => lease.finish(), 'LB_LEASE_FINISHED', `"${lease.id}"`)
    throwsCode(() => lease.cancel(), 'LB_LEASE_FINISHED')
    assert.equal(row(b, lease.id).requests, 1)
  })

  it('cancel releases in flight and counts nothing', () => {
    const b = new Balancer('least_connections', ABC)
    const lease = b.acquire()
    lease.cancel()
    assert.deepEqual(inFlight(b), idle)
    assert.ok(b.stats().every((s) => s.requests === 0))
  })

  it('a lease garbage-collected unfinished is cancelled', async () => {
    // The test runner has no --expose-gc: turn it on and fetch `gc` from a fresh context.
    v8.setFlagsFromString('--expose-gc')
    const gc = vm.runInNewContext('gc')
    const b = new Balancer('least_connections', ABC)
    ;(() => b.acquire())()
    assert.equal(Object.values(inFlight(b)).reduce((x, y) => x + y), 1)
    for (let i = 0; i < 10 && Object.values(inFlight(b)).some((n) => n > 0); i++) {
      gc()
      await new Promise((resolve) => setImmediate(resolve))
    }
    assert.deepEqual(inFlight(b), idle)
  })

  it('a node removed mid-lease: finishing is harmless', () => {
    const b = new Balancer('least_request', ABC, { seed: 3 })
    const lease = b.acquire()
    b.remove(lease.id)
    lease.finish({ ok: false, latencyMs: 2 })
    assert.deepEqual(b.stats().map((s) => s.id), ABC.filter((id) => id !== lease.id))
    assert.ok(b.stats().every((s) => s.inFlight === 0 && s.requests === 0))
  })

  it('keyed algorithms acquire the node pick gives', () => {
    const b = new Balancer('ring', ABC)
    for (const key of ['k1', Buffer.from('k2'), new Uint8Array([1, 2, 3])]) {
      const lease = b.acquire(key)
      assert.equal(lease.id, b.pick(key))
      lease.finish()
    }
    throwsCode(() => b.acquire(), 'LB_KEY_REQUIRED')
    throwsType(() => b.acquire(5), 'got number')
    throwsCode(() => new Balancer('least_request', []).acquire(), 'LB_NO_NODES')
  })

  it('bad outcomes throw TypeError / RangeError and leave the lease open', () => {
    const b = new Balancer('round_robin', ABC)
    const lease = b.acquire()
    throwsType(() => lease.finish(true), 'got boolean')
    throwsType(() => lease.finish({ ok: 'yes' }), 'outcome.ok must be a boolean, got string')
    throwsType(() => lease.finish({ latencyMs: '5' }), 'got string')
    throwsRange(() => lease.finish({ latencyMs: -1 }), '-1')
    throwsRange(() => lease.finish({ latencyMs: NaN }), 'NaN')
    throwsRange(() => lease.finish({ latencyMs: Infinity }), 'Infinity')
    assert.equal(lease.done, false)
    lease.finish({ latencyMs: 0.25 })
    assert.deepEqual(inFlight(b), idle)
  })
})

describe('run', () => {
  it('finishes as a success and resolves with the result', async () => {
    const b = new Balancer('least_connections', ABC)
    let seen
    const result = await b.run(null, async (node) => {
      seen = node
      assert.equal(inFlight(b)[node], 1)
      await new Promise((resolve) => setTimeout(resolve, 2))
      return 42
    })
    assert.equal(result, 42)
    assert.deepEqual(inFlight(b), idle)
    assert.equal(row(b, seen).requests, 1)
    assert.equal(row(b, seen).failures, 0)
    assert.equal(await b.run(undefined, (node) => node), 'b') // a plain function works too
  })

  it('a rejection or a throw is a failure and is rethrown', async () => {
    const b = new Balancer('round_robin', ABC)
    const boom = new Error('boom')
    await assert.rejects(b.run(null, async () => { throw boom }), (err) => err === boom)
    await assert.rejects(b.run(null, () => { throw boom }), (err) => err === boom)
    assert.deepEqual(b.stats().map((s) => [s.id, s.inFlight, s.requests, s.failures]), [
      ['a', 0, 1, 1],
      ['b', 0, 1, 1],
      ['c', 0, 0, 0],
    ])
  })

  it('acquire errors and a missing function reject without a lease', async () => {
    const b = new Balancer('ring', ABC)
    await assert.rejects(b.run(null, () => 1), (err) => err.code === 'LB_KEY_REQUIRED')
    await assert.rejects(b.run('k', 'nope'), (err) => err instanceof TypeError && err.code === 'ERR_INVALID_ARG_TYPE')
    assert.ok(b.stats().every((s) => s.inFlight === 0 && s.requests === 0))
  })
})

describe('report and stats', () => {
  it('stats lists every node in insertion order', () => {
    const b = new Balancer('peak_ewma', [{ id: 'a', weight: 2 }, 'b'], { seed: 1 })
    assert.deepEqual(b.stats(), [
      { id: 'a', weight: 2, inFlight: 0, requests: 0, failures: 0, latency: null, status: 'healthy', untilMs: null, remainingMs: null },
      { id: 'b', weight: 1, inFlight: 0, requests: 0, failures: 0, latency: null, status: 'healthy', untilMs: null, remainingMs: null },
    ])
    b.report('a', { ok: true, latencyMs: 20 })
    b.report('a', { ok: false, latencyMs: 20 })
    const a = row(b, 'a')
    assert.equal(a.requests, 2)
    assert.equal(a.failures, 1)
    // A failure counts at least the failure penalty (failure_penalty_ms, 5000 ms by default).
    assert.ok(Math.abs(a.latency - 5000) < 0.05, `latency ${a.latency}`)
    assert.equal(a.inFlight, 0)
  })

  it('report checks its arguments', () => {
    const b = new Balancer('round_robin', ABC)
    throwsCode(() => b.report('zz', { ok: true, latencyMs: 1 }), 'LB_UNKNOWN_NODE', '"zz"')
    throwsType(() => b.report('a'), 'outcome must be an object')
    throwsType(() => b.report('a', { ok: true }), 'latencyMs must be a number, got undefined')
    throwsType(() => b.report(1, { ok: true, latencyMs: 1 }), 'got number')
    assert.ok(b.stats().every((s) => s.requests === 0))
  })
})

describe('pickHash', () => {
  it('works for hashAlgorithms() in every number form, and attemptsHash starts with it', () => {
    assert.ok(hashAlgorithms().length > 0)
    for (const name of hashAlgorithms()) {
      const b = new Balancer(name, ABC)
      for (const h of [0n, 1n, 2n ** 63n, 2n ** 64n - 1n]) {
        const node = b.pickHash(h)
        assert.equal(b.pickHash(h.toString()), node)
        if (h <= BigInt(Number.MAX_SAFE_INTEGER)) assert.equal(b.pickHash(Number(h)), node)
        const order = b.attemptsHash(h)
        assert.equal(order[0], node)
        assert.deepEqual([...order].sort(), ABC)
        assert.deepEqual(b.attemptsHash(h, 2), order.slice(0, 2))
      }
    }
  })

  it('other algorithms throw LB_HASH_UNSUPPORTED', () => {
    for (const name of algorithms().filter((a) => !hashAlgorithms().includes(a))) {
      const b = new Balancer(name, ABC)
      throwsCode(() => b.pickHash(7n), 'LB_HASH_UNSUPPORTED', name)
      throwsCode(() => b.attemptsHash(7n), 'LB_HASH_UNSUPPORTED')
    }
  })

  it('rejects hashes out of range or of the wrong type', () => {
    const b = new Balancer('jump', ABC)
    throwsRange(() => b.pickHash(-1n), '-1n')
    throwsRange(() => b.pickHash(2n ** 64n), '2n ** 64n')
    throwsRange(() => b.pickHash(2 ** 60), 'between 0 and')
    throwsRange(() => b.pickHash(1.5), '1.5')
    throwsRange(() => b.pickHash('18446744073709551616'), '18446744073709551616')
    throwsRange(() => b.pickHash('+1'), '+1')
    throwsRange(() => b.pickHash(''), '""')
    throwsType(() => b.pickHash(null), 'got null')
    throwsType(() => b.pickHash({}), 'got object')
  })
})

describe('options', () => {
  it('every core option is accepted by every algorithm', () => {
    const values = {
      seed: 1, vnodes: 10, hash: 'xxh3', choice_count: 3, decay_ms: 500,
      initial_latency_ms: 5, table_size: 251, min_ring_size: 64, max_ring_size: 128,
      max_ring_points: 65536,
      consecutive_failures: 3, base_ejection_time_ms: 100, max_ejection_time_ms: 1000,
      max_ejection_percent: 50, panic_threshold: 30, slow_start_window_ms: 2000,
      slow_start_aggression: 1.5, min_weight_percent: 20, hash_balance_factor: 150,
      thread_rounds: 2, failure_penalty_ms: 250, max_retry_after_ms: 30000,
      interval_ms: 5000, enforcing_success_rate: 90, success_rate_minimum_hosts: 3,
      success_rate_request_volume: 50, success_rate_stdev_factor: 1500,
      enforcing_failure_percentage: 10, failure_percentage_threshold: 80,
      failure_percentage_minimum_hosts: 4, failure_percentage_request_volume: 40,
      overprovisioning_factor: 120, zone_aware_min_cluster_size: 3,
      zone_aware_routing_enabled: 80, zone_aware_by_weight: 1,
      blackout_period_ms: 5000, weight_expiration_period_ms: 60000, weight_update_period_ms: 500,
      error_utilization_penalty: 0.25, probe_pool_size: 8, q_rif: 0.9, probe_rate: 2,
      probe_reuse: 3, max_probe_age_ms: 2000, probe_remove_rate: 0.5,
      subset: 'aperture', subset_size: 2, client_index: 1, client_count: 4, subset_seed: 5,
    }
    assert.deepEqual(Object.keys(values).sort(), [...optionNames()].sort(), 'a core option this test does not set')
    const { subset, ...unsubset } = values
    for (const name of algorithms()) {
      if (keyedAlgorithms().includes(name)) {
        // Subsetting is for unkeyed algorithms: a keyed one refuses `subset`, nothing else.
        throwsCode(() => new Balancer(name, ABC, values), 'LB_INVALID_OPTION_VALUE', 'subset')
        assert.equal(new Balancer(name, ABC, unsubset).size, 3)
      } else {
        assert.equal(new Balancer(name, ABC, values).size, 3)
        // aperture's fractional edges may take the third node; random takes exactly two.
        assert.ok(new Balancer(name, ABC, { ...unsubset, subset }).subset().length >= 2)
        assert.equal(new Balancer(name, ABC, { ...unsubset, subset: 'random' }).subset().length, 2)
      }
    }
    const text = new Balancer('maglev', ABC, { table_size: '251' })
    const big = new Balancer('maglev', ABC, { table_size: 251n })
    const keys = Array.from({ length: 50 }, (_, i) => `k${i}`)
    assert.deepEqual(text.pickMany(keys), big.pickMany(keys))
  })

  it('option errors are the core\'s', () => {
    throwsCode(() => new Balancer('ring', ABC, { colour: 1 }), 'LB_UNKNOWN_OPTION', 'max_ring_size')
    throwsCode(() => new Balancer('least_request', ABC, { choice_count: 1 }), 'LB_INVALID_OPTION_VALUE', 'choice_count')
    throwsCode(() => new Balancer('maglev', ABC, { table_size: 100 }), 'LB_INVALID_OPTION_VALUE', 'table_size')
    throwsType(() => new Balancer('peak_ewma', ABC, { decay_ms: true }), 'got boolean')
  })
})

describe('leases in worker_threads', () => {
  it('each worker acquires, runs and finishes on its own balancer', async () => {
    const source = `
const { parentPort, workerData } = require('node:worker_threads')
const { Balancer } = require(workerData.addon)
;(async () => {
  const b = new Balancer('least_request', ['a', 'b', 'c', 'd'], { seed: workerData.seed })
  for (let i = 0; i < 300; i++) {
    if (i % 3 === 0) b.acquire().cancel()
    else if (i % 3 === 1) b.acquire().finish({ ok: i % 2 === 0, latencyMs: i % 7 })
    else await b.run(null, async () => i)
  }
  parentPort.postMessage(b.stats())
})()
`
    const addon = path.join(__dirname, '..')
    const results = await Promise.all(
      [1, 2, 3].map(
        (seed) =>
          new Promise((resolve, reject) => {
            const worker = new Worker(source, { eval: true, workerData: { addon, seed } })
            worker.once('message', resolve)
            worker.once('error', reject)
          }),
      ),
    )
    for (const stats of results) {
      assert.ok(stats.every((s) => s.inFlight === 0))
      assert.equal(stats.reduce((n, s) => n + s.requests, 0), 200)
      assert.equal(stats.reduce((n, s) => n + s.failures, 0), 50)
    }
  })
})

describe('lease.tag', () => {
  it('hands back the tag given with the node, as a bigint, through every way of giving it', async () => {
    const MAX = 2n ** 64n - 1n
    const b = new Balancer('ring', [
      { id: 'a', tag: 7 },
      { id: 'b', weight: 2, tag: MAX },
      { id: 'c', tag: '18446744073709551614' },
      'd',
      { id: 'e', tag: null },
    ])
    const tagOf = new Map([['a', 7n], ['b', MAX], ['c', MAX - 1n], ['d', 0n], ['e', 0n]])
    const seen = new Set()
    for (let i = 0; i < 400; i++) {
      const lease = b.acquire(`k${i}`)
      assert.equal(typeof lease.tag, 'bigint')
      assert.equal(lease.tag, tagOf.get(lease.id), lease.id)
      seen.add(lease.id)
      lease.finish()
      assert.equal(lease.tag, tagOf.get(lease.id)) // still readable once ended
    }
    assert.deepEqual([...seen].sort(), ['a', 'b', 'c', 'd', 'e'])
    // add and addAsync take a tag; update keeps each node's own.
    const rr = new Balancer('round_robin', [])
    rr.add('x', 1, 42n)
    assert.equal(rr.acquire().tag, 42n)
    rr.remove('x')
    await rr.addAsync('y', 3, 9)
    assert.equal(rr.acquire().tag, 9n)
    rr.update([{ id: 'z', tag: 5 }])
    assert.equal(rr.acquire().tag, 5n)
    const created = await Balancer.create('round_robin', [{ id: 'w', tag: '11' }])
    assert.equal(created.acquire().tag, 11n)
    // setWeight keeps the tag.
    rr.setWeight('z', 4)
    assert.equal(rr.acquire().tag, 5n)
  })

  it('bad tags are refused like bad hashes, and nothing changes', () => {
    const b = new Balancer('round_robin', ['a'])
    throwsType(() => b.add('x', 1, {}), 'tag must be a bigint, number or decimal string, got object')
    throwsType(() => new Balancer('random', [{ id: 'x', tag: true }]), 'nodes[0].tag must be a bigint, number or decimal string, got boolean')
    throwsRange(() => b.add('x', 1, -1), 'tag')
    throwsRange(() => b.add('x', 1, 2n ** 64n), 'tag')
    throwsRange(() => b.add('x', 1, 1.5), 'tag')
    throwsRange(() => b.update([{ id: 'x', tag: '+1' }]), 'nodes[0].tag')
    assert.deepEqual(b.nodes(), [{ id: 'a', weight: 1 }])
    assert.equal(b.acquire().tag, 0n)
  })
})
