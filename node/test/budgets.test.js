'use strict'
// Retry budgets and throttles from JavaScript (issue 21): RetryBudget, RetryThrottle and
// AdaptiveThrottle over the core's objects. The numbers are tower's, gRFC A6's and the SRE
// book's, which the core's own tests port (core/src/budget.rs); here every argument form, clock
// and error reaches the core.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { AdaptiveThrottle, RetryBudget, RetryThrottle } = require('..')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

describe('RetryBudget', () => {
  it('a reserve, deposits, and their expiry', () => {
    // tower's tps_reserve: no deposits, a reserve of minPerSec x ttl = 1 retry.
    const b = new RetryBudget({ ttlMs: 1000, minPerSec: 1, retryPercent: 1, nowMs: 0 })
    assert.equal(b.available(0), 1)
    assert.equal(b.canWithdraw(0), true)
    assert.equal(b.withdraw(0), true)
    assert.equal(b.withdraw(0), false)
    b.deposit(0)
    assert.equal(b.withdraw(500), true)
    assert.equal(b.available(2000), 1)
    const d = new RetryBudget()
    assert.equal(d.available(), 100) // the defaults: 10 per second x 10 s
    for (let i = 0; i < 10; i++) d.deposit()
    assert.equal(d.available(), 102)
    assert.ok(d.nowMs() >= 0 && d.nowMs() < 60000)
  })

  it('bad arguments are the core\'s errors, wrong types TypeErrors', () => {
    throwsCode(() => new RetryBudget({ ttlMs: 999 }), 'LB_INVALID_OPTION_VALUE', 'ttl_ms')
    throwsCode(() => new RetryBudget({ retryPercent: -0.1 }), 'LB_INVALID_OPTION_VALUE', 'retry_percent')
    throwsCode(() => new RetryBudget({ retryPercent: NaN }), 'LB_INVALID_OPTION_VALUE', 'retry_percent')
    throwsCode(() => new RetryBudget({ minPerSec: 2 ** 31 - 1 }), 'LB_INVALID_OPTION_VALUE', 'min_per_sec')
    throwsRange(() => new RetryBudget({ minPerSec: -1 }), 'minPerSec')
    throwsType(() => new RetryBudget({ retryPercent: '0.2' }), 'retryPercent must be a number, got string')
    throwsType(() => new RetryBudget(5), 'options must be an object, got number')
    const b = new RetryBudget({ nowMs: 0 })
    throwsRange(() => b.deposit(-1), 'nowMs must be a finite number >= 0, got -1')
    throwsRange(() => b.withdraw(NaN), 'got NaN')
    throwsType(() => b.available('1'), 'nowMs must be a number, got string')
    assert.equal(b.available(0), 100, 'refused calls changed nothing')
  })
})

describe('RetryThrottle', () => {
  it('gRFC A6 arithmetic', () => {
    const t = new RetryThrottle(10, 0.5)
    assert.equal(t.tokens, 10)
    assert.deepEqual(Array.from({ length: 5 }, () => t.failure()), [true, true, true, true, false])
    assert.equal(t.allows, false)
    t.success()
    assert.equal(t.allows, true)
    assert.equal(t.tokens, 5.5)
    throwsCode(() => new RetryThrottle(0, 0.5), 'LB_INVALID_OPTION_VALUE', 'max_tokens')
    throwsCode(() => new RetryThrottle(10, 0.0009), 'LB_INVALID_OPTION_VALUE', 'token_ratio')
    throwsRange(() => new RetryThrottle(1.5, 0.5), 'maxTokens')
    throwsType(() => new RetryThrottle(10), 'tokenRatio must be a number, got undefined')
  })
})

describe('AdaptiveThrottle', () => {
  it('the SRE book\'s rejection probability over its window', () => {
    const a = new AdaptiveThrottle({ nowMs: 0 })
    assert.equal(a.rejection(0), 0)
    // Nothing is rejected until the window holds 100 requests (the core's minimum); then,
    // none accepted: p = 100 / 101.
    for (let i = 0; i < 100; i++) assert.equal(a.admit(1000, 2n ** 64n - 1n), true)
    assert.ok(Math.abs(a.rejection(1000) - 100 / 101) < 1e-12)
    assert.equal(a.admit(1000, 0), false)
    assert.equal(a.admit(1000, '0'), false)
    for (let i = 0; i < 52; i++) a.accepted(1000) // 102 requests < 2 x 52 accepts
    assert.equal(a.rejection(1000), 0)
    assert.equal(a.rejection(150000), 0)
    throwsRange(() => a.admit(1000, -1n), 'random')
    throwsCode(() => new AdaptiveThrottle({ k: 0.5 }), 'LB_INVALID_OPTION_VALUE', 'k')
    throwsCode(() => new AdaptiveThrottle({ windowMs: 999 }), 'LB_INVALID_OPTION_VALUE', 'window_ms')
    const fresh = new AdaptiveThrottle({ k: 2, windowMs: 30000 })
    // Every request accepted keeps p at 0: its own draws admit them all.
    for (let i = 0; i < 5; i++) {
      assert.equal(fresh.admit(), true)
      fresh.accepted()
    }
  })
})
