'use strict'
// Outcomes that say why (issue 21): failure kinds, an overloaded node's retry-after, the failure
// penalty in the latency estimate, and the outcomes no call may accept. The policies are tested
// in the core (core/tests/outcomes.rs, on an injected clock); here every argument form reaches
// it, the answers come back in JavaScript form, and every refused call leaves the balancer as it
// was and working.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, failureKinds } = require('..')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const NODES = ['a', 'b', 'c', 'd']
const row = (b, id) => b.stats().find((s) => s.id === id)
const pickN = (b, n) => b.pickMany(Array.from({ length: n }, () => 'x'))
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const snapshot = (b) => b.stats().map((s) => [s.id, s.requests, s.failures, s.latency, s.status])

describe('outcome kinds', () => {
  it('failureKinds() lists the core kinds', () => {
    assert.deepEqual(failureKinds(), ['error', 'timeout', 'overloaded'])
  })

  it('an overloaded report pauses the node until its retry-after, then it is back', async () => {
    const b = new Balancer('round_robin', NODES)
    const before = b.nowMs()
    b.report('a', { ok: false, kind: 'overloaded', retryAfterMs: 400 })
    const a = row(b, 'a')
    assert.equal(a.status, 'overloaded')
    assert.ok(a.untilMs >= before + 400 && a.untilMs <= b.nowMs() + 400, `untilMs ${a.untilMs}`)
    assert.ok(a.remainingMs > 0 && a.remainingMs <= 400)
    assert.deepEqual([a.requests, a.failures], [1, 1])
    // No latency given: the failure penalty (failure_penalty_ms, 5 s by default).
    assert.ok(Math.abs(a.latency - 5000) < 1e-3, `latency ${a.latency}`)
    assert.ok(!pickN(b, 60).includes('a'))
    await sleep(500) // past the pause: back by itself
    const back = row(b, 'a')
    assert.deepEqual([back.status, back.untilMs, back.remainingMs], ['healthy', null, null])
    assert.equal(pickN(b, 8).filter((id) => id === 'a').length, 2)
  })

  it('a lease finishes with a kind and a retry-after', () => {
    const b = new Balancer('round_robin', NODES)
    const lease = b.acquire()
    lease.finish({ ok: false, kind: 'overloaded', retryAfterMs: 5000 })
    assert.ok(lease.done)
    const paused = row(b, lease.id)
    assert.equal(paused.status, 'overloaded')
    assert.equal(paused.inFlight, 0)
    assert.ok(paused.remainingMs > 4000 && paused.remainingMs <= 5000)
    const other = b.acquire()
    other.finish({ ok: false, kind: 'timeout' }) // latency measured since acquire
    assert.equal(row(b, other.id).failures, 1)
    assert.equal(row(b, other.id).status, 'healthy')
  })

  it('errors and timeouts extend the failure streak, overloaded answers do not', () => {
    const b = new Balancer('round_robin', NODES, { max_ejection_percent: 50 })
    for (let i = 0; i < 4; i++) b.report('a', { ok: false, kind: 'error', latencyMs: 1 })
    b.report('a', { ok: false, kind: 'overloaded' })
    b.report('a', { ok: false, kind: 'overloaded', latencyMs: 2 })
    assert.equal(row(b, 'a').status, 'healthy')
    b.report('a', { ok: false, kind: 'timeout' })
    assert.equal(row(b, 'a').status, 'ejected')
    // A success breaks the streak; ok: false without a kind is an error.
    for (let i = 0; i < 4; i++) b.report('b', { ok: false, kind: 'timeout', latencyMs: 1000 })
    b.report('b', { ok: true, latencyMs: 1 })
    b.report('b', { ok: false })
    assert.equal(row(b, 'b').status, 'healthy')
    assert.deepEqual([row(b, 'b').requests, row(b, 'b').failures], [6, 5])
  })

  it('the failure penalty, and how to turn it or the pauses off', () => {
    const b = new Balancer('peak_ewma', ['fast', 'slow'])
    b.report('fast', { ok: true, latencyMs: 100 })
    b.report('fast', { ok: false, latencyMs: 1 })
    b.report('slow', { ok: false, kind: 'timeout', latencyMs: 9000 })
    assert.ok(Math.abs(row(b, 'fast').latency - 5000) < 1e-3)
    assert.ok(Math.abs(row(b, 'slow').latency - 9000) < 1e-2)
    const off = new Balancer('peak_ewma', ['a', 'b'], { failure_penalty_ms: 0 })
    off.report('a', { ok: false, latencyMs: 1 })
    off.report('b', { ok: false, kind: 'timeout' })
    assert.ok(Math.abs(row(off, 'a').latency - 1) < 1e-6)
    assert.equal(row(off, 'b').latency, null)
    const capped = new Balancer('round_robin', NODES, { max_retry_after_ms: 1000 })
    capped.report('a', { ok: false, kind: 'overloaded', retryAfterMs: 3600000 })
    assert.ok(row(capped, 'a').remainingMs > 0 && row(capped, 'a').remainingMs <= 1000)
    const pausesOff = new Balancer('round_robin', NODES, { max_retry_after_ms: 0 })
    pausesOff.report('a', { ok: false, kind: 'overloaded', retryAfterMs: 5000 })
    assert.equal(row(pausesOff, 'a').status, 'healthy')
  })

  /** Each bad outcome, with how it must fail: a liblb code, or a RangeError / TypeError. */
  const BAD = [
    [{ ok: false, kind: 'busy' }, 'code', 'unknown failure kind "busy"; valid kinds: error, timeout, overloaded'],
    [{ ok: true, kind: 'timeout', latencyMs: 1 }, 'code', 'kind "timeout" is a failure kind: pass ok: false'],
    [{ ok: true, latencyMs: 1, retryAfterMs: 1000 }, 'code', 'retryAfterMs is for failures'],
    [{ ok: false, kind: 'overloaded', retryAfterMs: -1 }, 'range', 'outcome.retryAfterMs must be a finite number >= 0, got -1'],
    [{ ok: false, kind: 'overloaded', retryAfterMs: NaN }, 'range', 'got NaN'],
    [{ ok: false, kind: 'overloaded', retryAfterMs: Infinity }, 'range', 'got Infinity'],
    [{ ok: false, latencyMs: -1 }, 'range', 'outcome.latencyMs must be a finite number >= 0, got -1'],
    [{ ok: false, kind: 3 }, 'type', 'outcome.kind must be a string, got number'],
    [{ ok: false, kind: 'overloaded', retryAfterMs: '5' }, 'type', 'outcome.retryAfterMs must be a number, got string'],
  ]

  for (const [outcome, how, mention] of BAD) {
    it(`refuses ${JSON.stringify(outcome, (k, v) => (Number.isNaN(v) ? 'NaN' : v === Infinity ? 'Infinity' : v))} and changes nothing`, () => {
      const b = new Balancer('round_robin', NODES)
      b.report('a', { ok: true, latencyMs: 2 })
      const before = snapshot(b)
      const check = (fn) => {
        if (how === 'code') throwsCode(fn, 'LB_INVALID_OUTCOME', mention)
        else if (how === 'range') throwsRange(fn, mention)
        else throwsType(fn, mention)
      }
      check(() => b.report('a', outcome))
      const lease = b.acquire()
      check(() => lease.finish(outcome))
      assert.equal(lease.done, false, 'a refused finish leaves the lease open')
      assert.deepEqual(b.stats().map((s) => s.inFlight), [1, 0, 0, 0])
      assert.deepEqual(snapshot(b), before)
      lease.finish({ ok: true, latencyMs: 1 })
      assert.deepEqual(pickN(b, 4), ['b', 'c', 'd', 'a'])
    })
  }

  it('a reported success needs its latency; a failure does not', () => {
    const b = new Balancer('round_robin', NODES)
    throwsType(() => b.report('a', { ok: true }), 'outcome.latencyMs must be a number, got undefined')
    throwsCode(() => b.report('zz', { ok: false, kind: 'timeout' }), 'LB_UNKNOWN_NODE', '"zz"')
    assert.ok(b.stats().every((s) => s.requests === 0))
    b.report('a', { ok: false })
    assert.equal(row(b, 'a').failures, 1)
  })
})
