'use strict'
// Hostile arguments to every method (issue 9): lying lengths, arrays whose getters mutate them or
// the balancer, proxies, side-effecting getters, NaN / Infinity / -0, enormous strings and wrong
// types. Each case checks the specific error and that the balancer is unchanged and keeps
// working afterwards (same nodes, picks work, the round robin position where it was).
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const lb = require('..')
const { Balancer } = lb
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const NODES = ['a', 'b', 'c']
const RING = Array.from({ length: 200 }, (_, i) => `node-${i}`)

/** A round robin balancer and what it must look like after any failed call. */
class Probe {
  constructor() {
    this.b = new Balancer('round_robin', NODES)
    this.last = this.b.pick()
  }

  next(id, steps = 1) {
    return NODES[(NODES.indexOf(id) + steps) % NODES.length]
  }

  /** Unchanged: same nodes, and the next picks follow the last one (no hidden picks). */
  check() {
    assert.deepEqual(this.b.nodes(), NODES.map((id) => ({ id, weight: 1 })))
    const following = this.next(this.last)
    assert.equal(this.b.pick(), following)
    assert.deepEqual(this.b.pickMany(['x', 'y']), [this.next(following), this.next(following, 2)])
    this.last = this.next(following, 2)
  }

  /** `fn(b)` throws (as checked by `assertion`), then the balancer is unchanged. */
  fails(fn, assertion) {
    assertion(() => fn(this.b))
    this.check()
  }
}

/** An array of `length` whose every index reads as `value` through its prototype. */
function endless(length, value) {
  const array = []
  Object.setPrototypeOf(array, new Proxy(Array.prototype, {
    get: (target, key, receiver) => (typeof key === 'string' && /^\d+$/.test(key) ? value : Reflect.get(target, key, receiver)),
  }))
  array.length = length
  return array
}

describe('sizes: lying lengths and batches that cannot fit', () => {
  it('exports the limits', () => {
    assert.equal(lb.MAX_BATCH, 2 ** 24)
    assert.equal(lb.MAX_BATCH_KEY_BYTES, 2 ** 28)
  })

  it('refuses more than MAX_BATCH keys before reading one', () => {
    const probe = new Probe()
    let reads = 0
    const counted = endless(lb.MAX_BATCH + 1, 'k')
    Object.defineProperty(counted, 0, { get: () => { reads++; return 'k' } })
    for (const keys of [counted, endless(2 ** 32 - 1, 'k'), endless(lb.MAX_BATCH + 1, Buffer.from('k'))]) {
      probe.fails((b) => b.pickMany(keys), (fn) => throwsRange(fn, 'at most 16777216', 'LB_BATCH_TOO_LARGE'))
    }
    assert.equal(reads, 0)
    const ring = new Balancer('ring', RING)
    throwsRange(() => ring.pickMany(endless(2 ** 32 - 1, 'k')), 'MAX_BATCH', 'LB_BATCH_TOO_LARGE')
  })

  it('refuses more than MAX_BATCH_KEY_BYTES of keys, on both batch paths', () => {
    // 12+ string keys take the joined path (here 96 Mi UTF-16 units, but 288 MiB of UTF-8);
    // buffers always take the per-element path (five 64 MiB buffers: the fifth passes 256 MiB).
    const ring = new Balancer('ring', RING)
    const euros = Array(12).fill('\u20AC'.repeat(2 ** 23))
    throwsRange(() => ring.pickMany(euros), 'MAX_BATCH_KEY_BYTES', 'LB_BATCH_TOO_LARGE')
    const buffers = Array(5).fill(Buffer.alloc(2 ** 26, 'k'))
    const probe = new Probe()
    probe.fails((b) => b.pickMany(buffers), (fn) => throwsRange(fn, 'bytes', 'LB_BATCH_TOO_LARGE'))
    // Below the budget, big keys are fine.
    const big = 'k'.repeat(2 ** 25)
    assert.deepEqual(ring.pickMany([big, big, big]), Array(3).fill(ring.pick(big)))
  })

  it('refuses a node list longer than a balancer holds before reading it', () => {
    const probe = new Probe()
    for (const nodes of [endless(2 ** 32 - 1, 'n'), endless(2 ** 24 + 1, { id: 'n' })]) {
      probe.fails((b) => b.update(nodes), (fn) => throwsCode(fn, 'LB_TOO_MANY_NODES'))
      throwsCode(() => new Balancer('random', nodes), 'LB_TOO_MANY_NODES')
    }
  })

  it('takes an absurd attempts limit as every node', () => {
    const ring = new Balancer('ring', RING)
    assert.deepEqual(ring.attempts('k', Number.MAX_SAFE_INTEGER).sort(), RING.slice().sort())
  })
})

describe('arrays that change or misbehave while they are read', () => {
  it('a getter that grows or shrinks the keys array', () => {
    // Fewer than 12 keys are read one by one with the length read first: a shrink leaves holes
    // (TypeError), a growth is not read. From 12 keys on, a change seen by the bulk read makes
    // the batch be read again one by one, as long as it is now: one answer per key read
    // (soundness.test.js has the details).
    for (const size of [4, 30]) {
      const probe = new Probe()
      const shrinking = Array.from({ length: size }, (_, i) => `k${i}`)
      Object.defineProperty(shrinking, 2, { get: () => { shrinking.length = 3; return 'k2' } })
      if (size < 12) {
        probe.fails((b) => b.pickMany(shrinking), (fn) => throwsType(fn, 'keys[3]'))
      } else {
        const answers = probe.b.pickMany(shrinking)
        assert.equal(answers.length, 3)
        probe.last = answers[2]
        probe.check()
      }
      const growing = Array.from({ length: size }, (_, i) => `k${i}`)
      Object.defineProperty(growing, 1, { get: () => { growing.push('extra'); return 'k1' } })
      const answers = probe.b.pickMany(growing)
      assert.equal(answers.length, size < 12 ? size : size + 1)
      probe.last = answers[answers.length - 1]
      probe.check()
    }
  })

  it('a getter that makes the array endless while it is read in bulk', () => {
    // The length is checked again before the array is read one by one: 2^32 - 1 elements that
    // a prototype answers would otherwise hang the call.
    const probe = new Probe()
    const keys = endless(30, 'k')
    Object.defineProperty(keys, 1, { get: () => { keys.length = 2 ** 32 - 1; return 'k' } })
    probe.fails((b) => b.pickMany(keys), (fn) => throwsRange(fn, '4294967295', 'LB_BATCH_TOO_LARGE'))
  })

  it('a getter that throws midway', () => {
    for (const size of [4, 30]) {
      const probe = new Probe()
      const keys = Array.from({ length: size }, (_, i) => `k${i}`)
      Object.defineProperty(keys, 2, { get: () => { throw new SyntaxError('midway') } })
      probe.fails((b) => b.pickMany(keys), (fn) => assert.throws(fn, { name: 'SyntaxError', message: 'midway' }))
    }
  })

  it('a getter that changes the balancer: every answer comes from one membership', () => {
    for (const size of [4, 30]) {
      const b = new Balancer('ring', RING)
      const keys = Array.from({ length: size }, (_, i) => `k${i}`)
      Object.defineProperty(keys, 1, { get: () => { b.update(['late-1', 'late-2']); return 'k1' } })
      const answers = b.pickMany(keys)
      assert.equal(answers.length, size)
      for (const id of answers) assert.ok(['late-1', 'late-2'].includes(id), id)
    }
  })

  it('node objects whose getters change the balancer or throw', () => {
    const b = new Balancer('round_robin', NODES)
    const sneaky = { get id() { b.add('side-effect'); return 'n1' }, weight: 2 }
    b.update([sneaky, 'n2'])
    assert.deepEqual(b.nodes(), [{ id: 'n1', weight: 2 }, { id: 'n2', weight: 1 }])
    const probe = new Probe()
    const throwing = { id: 'x', get weight() { throw new EvalError('weight getter') } }
    probe.fails((b) => b.update(['y', throwing]), (fn) => assert.throws(fn, { name: 'EvalError' }))
    probe.fails((b) => b.add('d', { valueOf: () => { b.remove('a'); return 1 } }), (fn) => throwsType(fn, 'weight must be a number, got object'))
  })

  it('proxies are not arrays', () => {
    const probe = new Probe()
    const proxy = new Proxy(['k1', 'k2'], {})
    probe.fails((b) => b.pickMany(proxy), (fn) => throwsType(fn, 'keys must be an array'))
    probe.fails((b) => b.update(new Proxy(['x'], {})), (fn) => throwsType(fn, 'nodes must be an array'))
    // A proxy as a node object reads its id and weight through the traps.
    const node = new Proxy({}, { get: (_, key) => (key === 'id' ? 'via-proxy' : undefined) })
    const b = new Balancer('random', [node])
    assert.deepEqual(b.nodes(), [{ id: 'via-proxy', weight: 1 }])
  })
})

describe('numbers: NaN, infinities, -0, fractions', () => {
  const bad = [NaN, Infinity, -Infinity, -1, 1.5, 2 ** 53]

  for (const value of bad) {
    it(`${value} is out of range everywhere a number is taken`, () => {
      const probe = new Probe()
      const range = (fn) => throwsRange(fn, `got ${value}`)
      probe.fails((b) => b.add('d', value), range)
      probe.fails((b) => b.setWeight('a', value), range)
      probe.fails((b) => b.update([{ id: 'a', weight: value }]), range)
      if (value !== 2 ** 53) probe.fails((b) => b.attempts(undefined, value), range)
      throwsRange(() => new Balancer('random', NODES, { seed: value }), `got ${value}`)
      throwsRange(() => new Balancer('ring', NODES, { vnodes: value }), `got ${value}`)
    })
  }

  it('-0 is 0', () => {
    const b = new Balancer('weighted_round_robin', [{ id: 'a', weight: -0 }, 'b'], { seed: -0 })
    assert.deepEqual(b.nodes(), [{ id: 'a', weight: 0 }, { id: 'b', weight: 1 }])
    assert.deepEqual(b.attempts(undefined, -0), [])
    b.setWeight('a', -0)
    assert.equal(b.pick(), 'b')
  })

  it('bigints out of range for seeds', () => {
    throwsRange(() => new Balancer('random', NODES, { seed: -1n }), 'got -1n')
    throwsRange(() => new Balancer('random', NODES, { seed: 2n ** 64n }), '2n ** 64n or more')
  })
})

describe('enormous strings', () => {
  it('a 32 MiB id round-trips and leaves', () => {
    const probe = new Probe()
    const huge = 'i'.repeat(32 << 20)
    probe.b.add(huge)
    assert.equal(probe.b.nodes()[3].id, huge)
    probe.b.remove(huge)
    probe.check()
    probe.fails((b) => b.add(huge + '\0'), (fn) => throwsCode(fn, 'LB_ID_CONTAINS_NUL'))
  })

  it('a 32 MiB key hashes like its bytes', () => {
    const ring = new Balancer('ring', RING)
    const huge = 'k'.repeat(32 << 20)
    assert.equal(ring.pick(huge), ring.pick(Buffer.from(huge)))
    assert.deepEqual(ring.attempts(huge, 1), [ring.pick(huge)])
  })
})

describe('wrong types everywhere', () => {
  const wrong = [Symbol('s'), 1n, true, {}, [], () => 'a', 5, null]

  for (const value of wrong) {
    const name = value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value
    it(name, () => {
      const probe = new Probe()
      const type = (fn) => throwsType(fn)
      const isNumber = typeof value === 'number'
      const absent = value === null // means "not given" where an argument is optional
      probe.fails((b) => b.add(value), type)
      probe.fails((b) => b.remove(value), type)
      probe.fails((b) => b.setWeight(value, 1), type)
      if (!isNumber) probe.fails((b) => b.setWeight('a', value), type)
      if (!isNumber && !absent) probe.fails((b) => b.add('d', value), type)
      probe.fails((b) => b.update([value]), type)
      probe.fails((b) => b.pickMany([value, 'k']), type)
      probe.fails((b) => b.pickMany(Array(20).fill('k').concat([value])), type)
      if (!absent) probe.fails((b) => b.pick(value), type)
      if (!absent) probe.fails((b) => b.attempts(value), type)
      if (!isNumber && !absent) probe.fails((b) => b.attempts('k', value), type)
      probe.fails((b) => b.has(value), type)
      throwsType(() => new Balancer(value, NODES))
      if (!isNumber && !absent && typeof value !== 'bigint') {
        throwsType(() => new Balancer('random', NODES, { seed: value }))
      }
    })
  }
})

describe('lone surrogates: one rule in every language', () => {
  // Keys are encoded as UTF-8 the way TextEncoder does: each lone surrogate code unit becomes
  // U+FFFD (EF BF BD); a high + low pair is one character. Python gives the same answers.
  const cases = {
    '\uD800x': '\uFFFDx',
    'x\uDFFF': 'x\uFFFD',
    '\uDC00\uD800': '\uFFFD\uFFFD',
    'a\uD83D\uDE00b': 'a\u{1F600}b',
    '\uD83D': '\uFFFD',
  }

  it('keys hash as their TextEncoder bytes, on every path', () => {
    const ring = new Balancer('ring', RING)
    const encoder = new TextEncoder()
    for (const [key, same] of Object.entries(cases)) {
      const bytes = Buffer.from(encoder.encode(key))
      assert.deepEqual(bytes, Buffer.from(same, 'utf8'))
      assert.equal(ring.pick(key), ring.pick(bytes), JSON.stringify(key))
      assert.equal(ring.pick(key), ring.pick(same))
      assert.deepEqual(ring.attempts(key, 3), ring.attempts(bytes, 3))
    }
    const keys = Object.keys(cases)
    const expected = keys.map((k) => ring.pick(cases[k]))
    assert.deepEqual(ring.pickMany(keys), expected) // per-element path
    const many = Array(4).fill(keys).flat() // 20 keys: the joined path
    assert.deepEqual(ring.pickMany(many), Array(4).fill(expected).flat())
    assert.ok(new Set(Array.from({ length: 50 }, (_, i) => ring.pick(`\uD800${i}`))).size > 10)
  })

  it('ids are refused', () => {
    const probe = new Probe()
    for (const bad of ['\uD800', 'a\uDFFF', '\uDE00\uD83D']) {
      probe.fails((b) => b.add(bad), (fn) => throwsCode(fn, 'LB_INVALID_UTF8'))
      probe.fails((b) => b.update([bad]), (fn) => throwsCode(fn, 'LB_INVALID_UTF8'))
      probe.fails((b) => b.remove(bad), (fn) => throwsCode(fn, 'LB_INVALID_UTF8'))
      assert.equal(probe.b.has(bad), false)
    }
  })
})
