'use strict'
// Issue 19 from Node: options in any key order (the core checks the rules between options once),
// the balancer's clock (nowMs, untilMs, remainingMs), errors that say what is wrong (report
// without ok, re-entered leases, huge numbers), and arrays without holes when JavaScript put
// setters on Array.prototype indices.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const path = require('node:path')
const { spawnSync } = require('node:child_process')
const { Balancer } = require('..')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

describe('options as a whole', () => {
  it('any key order works', () => {
    for (const options of [
      { max_ejection_time_ms: 1000, base_ejection_time_ms: 500 },
      { max_ring_size: 512, min_ring_size: 256 },
    ]) {
      const reversed = Object.fromEntries(Object.entries(options).reverse())
      for (const o of [options, reversed]) {
        const b = new Balancer('ring_hash', ['a', 'b'], o)
        assert.ok(['a', 'b'].includes(b.pick('k')))
      }
    }
  })

  it('options that disagree fail in any order, naming the option', () => {
    for (const [options, named] of [
      [{ max_ejection_time_ms: 500, base_ejection_time_ms: 1000 }, 'max_ejection_time_ms'],
      [{ max_ring_size: 256, min_ring_size: 512 }, 'max_ring_size'],
    ]) {
      const reversed = Object.fromEntries(Object.entries(options).reverse())
      for (const o of [options, reversed]) {
        throwsCode(() => new Balancer('ring_hash', ['a'], o), 'LB_INVALID_OPTION_VALUE', named)
      }
    }
    throwsCode(() => new Balancer('round_robin', ['a'], { base_ejection_time_ms: 0 }), 'LB_INVALID_OPTION_VALUE', 'at least 1')
  })

  it('an unset max_ejection_time_ms follows a longer base (Envoy)', () => {
    const b = new Balancer('round_robin', ['a', 'b'], { base_ejection_time_ms: 400000, consecutive_failures: 1 })
    b.report('a', { ok: false, latencyMs: 1 })
    const row = b.stats()[0]
    assert.equal(row.status, 'ejected')
    assert.ok(row.remainingMs > 399000 && row.remainingMs <= 400000, String(row.remainingMs))
  })
})

describe('the balancer clock', () => {
  it('untilMs - nowMs() is the time left of an ejection', () => {
    const b = new Balancer('round_robin', ['a', 'b'], { consecutive_failures: 2, base_ejection_time_ms: 60000 })
    const start = b.nowMs()
    assert.equal(typeof start, 'number')
    assert.ok(start >= 0)
    b.report('a', { ok: false, latencyMs: 1 })
    b.report('a', { ok: false, latencyMs: 1 })
    const [a, other] = b.stats()
    const now = b.nowMs()
    assert.equal(a.status, 'ejected')
    assert.ok(a.untilMs - now > 0 && a.untilMs - now <= 60000, `${a.untilMs} - ${now}`)
    assert.ok(a.remainingMs > 0 && a.remainingMs <= 60000)
    assert.ok(a.untilMs - now <= a.remainingMs)
    assert.ok(now >= start)
    assert.equal(other.untilMs, null)
    assert.equal(other.remainingMs, null)
  })
})

describe('errors that say what is wrong', () => {
  it('report() requires ok', () => {
    const b = new Balancer('round_robin', ['a'])
    throwsType(() => b.report('a', { latencyMs: 1 }), 'outcome.ok must be a boolean, got undefined')
    throwsType(() => b.report('a', { ok: null, latencyMs: 1 }), 'outcome.ok')
    assert.equal(b.stats()[0].requests, 0)
    b.report('a', { ok: true, latencyMs: 1 })
    assert.equal(b.stats()[0].requests, 1)
  })

  it('huge latencies are written in exponent form', () => {
    const b = new Balancer('round_robin', ['a'])
    throwsRange(() => b.report('a', { ok: true, latencyMs: 1e300 }), 'got 1e+300')
    throwsRange(() => b.report('a', { ok: true, latencyMs: -1.5e-300 }), 'got -1.5e-300')
    const lease = b.acquire()
    assert.throws(() => lease.finish({ latencyMs: 1e300 }), (err) => err.message.length < 120 && err.message.endsWith('got 1e+300'))
    assert.equal(lease.done, false)
    lease.finish({ latencyMs: 1 })
    assert.equal(b.stats()[0].requests, 1)
  })

  it('a getter that finishes the same lease: LB_LEASE_FINISHED, counted once', () => {
    const b = new Balancer('round_robin', ['a'])
    const lease = b.acquire()
    const outcome = {
      get ok() {
        lease.finish({ ok: true, latencyMs: 2 })
        return false
      },
      latencyMs: 1,
    }
    throwsCode(() => lease.finish(outcome), 'LB_LEASE_FINISHED', 'already ended')
    assert.equal(lease.done, true)
    const [a] = b.stats()
    assert.equal(a.requests, 1)
    assert.equal(a.failures, 0)
    assert.equal(a.inFlight, 0)
    // A getter that cancels the lease while finish reads it, and one that reads done.
    const second = b.acquire()
    throwsCode(() => second.finish({ get ok() { second.cancel(); return true } }), 'LB_LEASE_FINISHED')
    const third = b.acquire()
    third.finish({ get ok() { return !third.done } })
    assert.equal(b.stats()[0].requests, 2)
  })
})

describe('arrays are made of own elements', () => {
  it('a setter on Array.prototype[i] leaves no hole in attempts, pickMany, nodes or stats', () => {
    // In a child process: the setters would disturb this process's own arrays.
    const source = `
      const { Balancer } = require(${JSON.stringify(path.join(__dirname, '..'))})
      let ran = 0
      for (let i = 0; i < 4; i++) {
        Object.defineProperty(Array.prototype, i, { set() { ran++ }, get() { return 'proto' }, configurable: true })
      }
      const b = new Balancer('round_robin', ['a', 'b', 'c'])
      const own = (array) => Object.keys(array).length === array.length && array.every((_, i) => Object.prototype.hasOwnProperty.call(array, i))
      const keys = Array.from({ length: 600 }, () => 'k')
      // Arrays made here would call the setters themselves: build the keys before counting.
      ran = 0
      const results = {
        attempts: b.attempts(null, 3),
        pickManySmall: b.pickMany(['k', 'k', 'k']),
        pickManyLarge: b.pickMany(keys),
        nodes: b.nodes(),
        stats: b.stats(),
      }
      const out = {}
      for (const [name, array] of Object.entries(results)) {
        out[name] = { own: own(array), length: array.length, first: typeof array[0] === 'string' ? array[0] : array[0].id }
      }
      out.ran = ran
      process.stdout.write(JSON.stringify(out))`
    const run = spawnSync(process.execPath, ['-e', source], { encoding: 'utf8', timeout: 60_000 })
    assert.equal(run.status, 0, run.stderr)
    const out = JSON.parse(run.stdout)
    for (const name of ['attempts', 'pickManySmall', 'pickManyLarge', 'nodes', 'stats']) {
      assert.equal(out[name].own, true, `${name} has holes: ${run.stdout}`)
      assert.notEqual(out[name].first, 'proto', name)
    }
    assert.equal(out.attempts.length, 3)
    assert.equal(out.pickManyLarge.length, 600)
    assert.equal(out.nodes.length, 3)
  })
})
