'use strict'
// Every method of the Node binding, and every error it can throw.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const lb = require('..')
const { Balancer, algorithms, keyedAlgorithms, noop } = lb
const fs = require('node:fs')
const path = require('node:path')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const ABC = ['a', 'b', 'c']
// From the core's registration list, never retyped here.
const KEYED = keyedAlgorithms()

describe('module', () => {
  it('exports the Balancer class, algorithms() and noop()', () => {
    assert.equal(typeof Balancer, 'function')
    assert.ok(algorithms().includes('round_robin'))
    assert.equal(new Set(algorithms()).size, algorithms().length)
    assert.equal(noop(), undefined)
  })

  it('keyedAlgorithms() are the algorithms that need a key', () => {
    assert.ok(KEYED.length > 0 && KEYED.every((name) => algorithms().includes(name)))
    for (const name of algorithms()) {
      const b = new Balancer(name, ABC)
      if (KEYED.includes(name)) throwsCode(() => b.pick(), 'LB_KEY_REQUIRED')
      else assert.ok(ABC.includes(b.pick()), name)
    }
  })

  it('the Algorithm union of header.d.ts names exactly the core\'s algorithms', () => {
    for (const file of ['header.d.ts', 'index.d.ts']) {
      const text = fs.readFileSync(path.join(__dirname, '..', file), 'utf8')
      const union = text.match(/export type Algorithm =([^]*?)\n\n/)
      assert.ok(union, `${file} declares no Algorithm union`)
      const names = [...union[1].matchAll(/\|\s*'([a-z_0-9]+)'/g)].map((m) => m[1])
      assert.deepEqual(names, algorithms(), `${file}: the Algorithm union is out of date`)
    }
  })

  it('BalancerOptions in header.d.ts lists exactly the core\'s options', () => {
    const text = fs.readFileSync(path.join(__dirname, '..', 'header.d.ts'), 'utf8')
    const body = text.match(/export interface BalancerOptions \{([^]*?)\n\}/)
    assert.ok(body, 'header.d.ts declares no BalancerOptions')
    const names = [...body[1].matchAll(/^\s*([a-z_0-9]+)\?:/gm)].map((m) => m[1])
    // `budget` is the binding's (the balancer's default request budget), not a core option.
    assert.deepEqual(names.filter((n) => n !== 'budget'), lb.optionNames())
  })
})

describe('new Balancer', () => {
  it('accepts ids, { id, weight } objects, or a mix; weight defaults to 1', () => {
    const b = new Balancer('weighted_round_robin', ['a', { id: 'b', weight: 3 }, { id: 'c' }, { id: 'd', weight: null }])
    assert.deepEqual(b.nodes(), [
      { id: 'a', weight: 1 },
      { id: 'b', weight: 3 },
      { id: 'c', weight: 1 },
      { id: 'd', weight: 1 },
    ])
    assert.equal(b.algorithm, 'weighted_round_robin')
    assert.equal(b.size, 4)
  })

  it('works for every algorithm', () => {
    for (const name of algorithms()) {
      const b = new Balancer(name, ABC)
      assert.equal(b.algorithm, name)
      assert.ok(ABC.includes(b.pick('key')))
    }
  })

  it('allows no nodes (picks fail with LB_NO_NODES until one is added)', () => {
    for (const nodes of [undefined, null, []]) {
      const b = new Balancer('round_robin', nodes)
      assert.equal(b.size, 0)
      throwsCode(() => b.pick(), 'LB_NO_NODES', 'no nodes')
      b.add('x')
      assert.equal(b.pick(), 'x')
    }
  })

  it('rejects an unknown algorithm, listing the valid ones', () => {
    throwsCode(() => new Balancer('nope', ABC), 'LB_UNKNOWN_ALGORITHM', '"nope"')
    throwsCode(() => new Balancer('nope', ABC), 'LB_UNKNOWN_ALGORITHM', 'random, weighted_random, round_robin')
  })

  it('rejects bad node ids with specific codes', () => {
    throwsCode(() => new Balancer('random', ['a', 'a']), 'LB_DUPLICATE_NODE', '"a"')
    throwsCode(() => new Balancer('random', ['']), 'LB_EMPTY_ID')
    throwsCode(() => new Balancer('random', ['x\0y']), 'LB_ID_CONTAINS_NUL', 'x\\0y')
  })

  it('throws TypeError for arguments of the wrong type', () => {
    throwsType(() => new Balancer(), 'algorithm must be a string, got undefined')
    throwsType(() => new Balancer(3, ABC), 'algorithm must be a string, got number')
    throwsType(() => new Balancer('random', 'abc'), 'nodes must be an array, got string')
    throwsType(() => new Balancer('random', { id: 'a' }), 'nodes must be an array, got object')
    throwsType(() => new Balancer('random', [1]), 'nodes[0] must be an id string or { id, weight }, got number')
    throwsType(() => new Balancer('random', ['a', ['b', 1]]), 'nodes[1] must be an id string or { id, weight }, got array')
    throwsType(() => new Balancer('random', [{ weight: 1 }]), 'nodes[0] must have an `id` string')
    throwsType(() => new Balancer('random', [{ id: 7 }]), 'nodes[0].id must be a string, got number')
    throwsType(() => new Balancer('random', [{ id: 'a', weight: '2' }]), 'nodes[0].weight must be a number, got string')
    throwsRange(() => new Balancer('random', [{ id: 'a', weight: -1 }]), 'nodes[0].weight must be an integer between 0 and 4294967295, got -1')
    throwsRange(() => new Balancer('random', [{ id: 'a', weight: 1.5 }]), 'got 1.5')
    throwsRange(() => new Balancer('random', [{ id: 'a', weight: 2 ** 32 }]), 'got 4294967296')
    throwsRange(() => new Balancer('random', [{ id: 'a', weight: NaN }]), 'got NaN')
    throwsType(() => new Balancer('random', ABC, 'seed=1'), 'options must be an object, got string')
    throwsType(() => new Balancer('random', ABC, [1]), 'options must be an object, got array')
  })

  it('accepts weights up to 2^32 - 1 and 0', () => {
    const b = new Balancer('weighted_random', [{ id: 'big', weight: 2 ** 32 - 1 }, { id: 'zero', weight: 0 }])
    assert.deepEqual(b.nodes(), [{ id: 'big', weight: 4294967295 }, { id: 'zero', weight: 0 }])
    for (let i = 0; i < 50; i++) assert.equal(b.pick(), 'big')
  })
})

describe('options', () => {
  it('seed as number or bigint gives the same reproducible sequence', () => {
    const seq = (seed) => {
      const b = new Balancer('random', ['a', 'b', 'c', 'd', 'e'], { seed })
      return Array.from({ length: 40 }, () => b.pick())
    }
    assert.deepEqual(seq(42), seq(42n))
    assert.deepEqual(seq(42), seq(42))
    assert.notDeepEqual(seq(42), seq(43))
    // The full unsigned 64-bit range is reachable with a bigint.
    assert.equal(seq(2n ** 64n - 1n).length, 40)
    // Decimal text is accepted by the core's loosely typed options, like in every binding.
    assert.deepEqual(seq('42'), seq(42))
  })

  it('vnodes and hash change the ring; undefined and null mean "not given"', () => {
    const keys = Array.from({ length: 64 }, (_, i) => `key-${i}`)
    const ring = (options) => new Balancer('ring', ABC, options).pickMany(keys)
    assert.deepEqual(ring({ vnodes: 160 }), ring({}))
    assert.deepEqual(ring({ vnodes: undefined, hash: null, seed: undefined }), ring(undefined))
    assert.deepEqual(ring({ hash: 'sha256' }), ring({}))
    assert.notDeepEqual(ring({ hash: 'xxh3' }), ring({}))
    assert.notDeepEqual(ring({ vnodes: 1 }), ring({}))
  })

  it('rejects unknown options and bad values through the core', () => {
    throwsCode(() => new Balancer('ring', ABC, { vnode: 3 }), 'LB_UNKNOWN_OPTION', '"vnode"; valid options: seed, vnodes, hash')
    throwsCode(() => new Balancer('ring', ABC, { vnodes: 0 }), 'LB_INVALID_VNODES', '(got 0)')
    throwsCode(() => new Balancer('ring', ABC, { vnodes: 65537 }), 'LB_INVALID_VNODES', '65537')
    throwsCode(() => new Balancer('ring', ABC, { hash: 'md5' }), 'LB_UNKNOWN_HASH', '"md5"; valid hashes: sha256, xxh3')
    throwsCode(() => new Balancer('ring', ABC, { hash: 5 }), 'LB_INVALID_OPTION_VALUE', '"hash"')
    throwsCode(() => new Balancer('ring', ABC, { vnodes: 'many' }), 'LB_INVALID_OPTION_VALUE', '"many"')
  })

  it('throws TypeError for option values of the wrong JS type, RangeError out of range', () => {
    throwsRange(() => new Balancer('random', ABC, { seed: -1 }), 'options.seed must be an integer between 0 and')
    throwsRange(() => new Balancer('random', ABC, { seed: 1.5 }), 'got 1.5')
    throwsRange(() => new Balancer('random', ABC, { seed: -1n }), 'options.seed must be a bigint between 0n and 2n ** 64n - 1n, got -1n')
    throwsRange(() => new Balancer('random', ABC, { seed: 2n ** 64n }), 'got a bigint of 2n ** 64n or more')
    throwsType(() => new Balancer('random', ABC, { seed: true }), 'options.seed must be a number, bigint or string, got boolean')
    throwsType(() => new Balancer('ring', ABC, { vnodes: {} }), 'options.vnodes must be a number, bigint or string, got object')
  })
})

describe('pick', () => {
  it('round robin walks the nodes in insertion order', () => {
    const b = new Balancer('round_robin', ABC)
    assert.deepEqual(Array.from({ length: 7 }, () => b.pick()), ['a', 'b', 'c', 'a', 'b', 'c', 'a'])
  })

  it("smooth weighted round robin gives nginx's sequence for weights 5, 1, 1", () => {
    const b = new Balancer('weighted_round_robin', [{ id: 'a', weight: 5 }, { id: 'b', weight: 1 }, { id: 'c', weight: 1 }])
    assert.deepEqual(Array.from({ length: 7 }, () => b.pick()).join(' '), 'a a b a c a a')
  })

  it("reproduces seed 001's ring example", () => {
    const b = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
    assert.deepEqual(['Key1', 'Key2', 'Key3'].map((k) => b.pick(k)), ['NodeB', 'NodeA', 'NodeC'])
  })

  it('a string, a Buffer and a Uint8Array with the same bytes pick the same node', () => {
    const long = 'k'.repeat(300) + 'é'.repeat(200) // past the 256-byte stack buffer
    const keys = ['', 'Key1', 'héllo wörld ✓ 🎉', long, 'lone \ud800 surrogate']
    // Around the 256-byte stack buffer, with multi-byte last characters that may not fit.
    for (let n = 246; n <= 260; n++) keys.push('x'.repeat(n), 'x'.repeat(n) + 'é', 'x'.repeat(n) + '€', 'x'.repeat(n) + '🎉')
    for (const name of KEYED) {
      const b = new Balancer(name, ['n1', 'n2', 'n3', 'n4', 'n5', 'n6', 'n7'])
      for (const key of keys) {
        const bytes = Buffer.from(key, 'utf8')
        const expected = b.pick(key)
        assert.equal(b.pick(bytes), expected, `${name} Buffer ${key.length}`)
        assert.equal(b.pick(new Uint8Array(bytes)), expected, `${name} Uint8Array ${key.length}`)
        // A view into the middle of a larger buffer reads only its own bytes.
        const padded = Buffer.concat([Buffer.from('PREFIX'), bytes, Buffer.from('SUFFIX')])
        assert.equal(b.pick(padded.subarray(6, 6 + bytes.length)), expected, `${name} subarray ${key.length}`)
      }
    }
  })

  it('keyed algorithms spread keys; the same key always gives the same node', () => {
    for (const name of KEYED) {
      const b = new Balancer(name, ABC)
      const seen = new Set()
      for (let i = 0; i < 300; i++) {
        const id = b.pick(`user-${i}`)
        assert.equal(b.pick(`user-${i}`), id)
        seen.add(id)
      }
      assert.deepEqual([...seen].sort(), ABC)
    }
  })

  it('keyed algorithms need a key; unkeyed ones ignore it', () => {
    for (const name of KEYED) {
      const b = new Balancer(name, ABC)
      throwsCode(() => b.pick(), 'LB_KEY_REQUIRED', `"${name}"`)
      throwsCode(() => b.pick(null), 'LB_KEY_REQUIRED')
      throwsCode(() => b.pick(undefined), 'LB_KEY_REQUIRED')
    }
    const withKey = new Balancer('round_robin', ABC)
    const without = new Balancer('round_robin', ABC)
    for (let i = 0; i < 5; i++) assert.equal(withKey.pick(`k${i}`), without.pick())
  })

  it('throws TypeError for keys of the wrong type', () => {
    const b = new Balancer('ring', ABC)
    throwsType(() => b.pick(5), 'key must be a string, Buffer or Uint8Array, got number')
    throwsType(() => b.pick({}), 'got object')
    throwsType(() => b.pick(['a']), 'got array')
    throwsType(() => b.pick(true), 'got boolean')
    throwsType(() => b.pick(1n), 'got bigint')
    throwsType(() => b.pick(Symbol('k')), 'got symbol')
    throwsType(() => b.pick(new ArrayBuffer(4)), 'got object')
    throwsType(() => b.pick(new Uint16Array(4)), 'got object')
    // Unkeyed algorithms ignore the key but still check its type.
    throwsType(() => new Balancer('random', ABC).pick(5), 'got number')
  })

  it('never picks a drained node while another has weight > 0', () => {
    for (const name of algorithms()) {
      const b = new Balancer(name, [{ id: 'on', weight: 1 }, { id: 'off', weight: 0 }])
      for (let i = 0; i < 100; i++) assert.equal(b.pick(`k${i}`), 'on', name)
    }
  })
})

describe('pickMany', () => {
  it('equals one pick per key for keyed algorithms', () => {
    const keys = Array.from({ length: 200 }, (_, i) => (i % 3 === 0 ? Buffer.from(`key-${i}`) : `key-${i}`))
    for (const name of KEYED) {
      const b = new Balancer(name, ['n1', 'n2', 'n3', 'n4'])
      assert.deepEqual(b.pickMany(keys), keys.map((k) => b.pick(k)))
    }
  })

  it('continues the round robin sequence, one pick per key', () => {
    const b = new Balancer('round_robin', ABC)
    assert.equal(b.pick(), 'a')
    assert.deepEqual(b.pickMany(['x', 'y', 'z', 'w']), ['b', 'c', 'a', 'b'])
    assert.equal(b.pick(), 'c')
  })

  it('returns [] for no keys and propagates core errors', () => {
    assert.deepEqual(new Balancer('ring', ABC).pickMany([]), [])
    throwsCode(() => new Balancer('ring', []).pickMany(['k']), 'LB_NO_NODES')
  })

  it('returns distinct strings for distinct nodes (the per-call cache keys on the node)', () => {
    const ids = Array.from({ length: 100 }, (_, i) => `node-${i}`)
    const b = new Balancer('round_robin', ids)
    assert.deepEqual(b.pickMany(new Array(250).fill('k')), Array.from({ length: 250 }, (_, i) => ids[i % 100]))
  })

  it('gives the same answers in bulk as key by key, for every batch size and kind of key', () => {
    // Large all-string batches are joined and split in bulk (node/src/batch.rs); others, and
    // batches with a NUL inside a key, go element by element. All must agree with pick().
    const tricky = ['', 'a\0b', '\0', 'lone \ud800', '\udc00 lone', 'pair 🎉', 'é€', '"\\\n', 'x'.repeat(300)]
    const ids = Array.from({ length: 40 }, (_, i) => `node-${i}`)
    for (const name of KEYED) {
      const b = new Balancer(name, ids)
      for (let n = 0; n <= 40; n++) {
        const plain = Array.from({ length: n }, (_, i) => `key-${i * 7919}`)
        assert.deepEqual(b.pickMany(plain), plain.map((k) => b.pick(k)), `${name} n=${n}`)
        const mixed = plain.map((k, i) => tricky[i % tricky.length] + k)
        assert.deepEqual(b.pickMany(mixed), mixed.map((k) => b.pick(k)), `${name} tricky n=${n}`)
      }
      const withNul = Array.from({ length: 100 }, (_, i) => (i === 50 ? 'nul\0inside' : `k${i}`))
      assert.deepEqual(b.pickMany(withNul), withNul.map((k) => b.pick(k)), `${name} NUL`)
      const withBytes = Array.from({ length: 100 }, (_, i) => (i % 10 ? `k${i}` : Buffer.from(`k${i}`)))
      assert.deepEqual(b.pickMany(withBytes), withBytes.map((k) => b.pick(k)), `${name} Buffers`)
    }
  })

  it('unkeyed algorithms: a batch is the same sequence as one pick per key, whatever the keys', () => {
    for (const name of ['random', 'weighted_random', 'round_robin', 'weighted_round_robin']) {
      const nodes = ['a', { id: 'b', weight: 3 }, 'c', { id: 'd', weight: 0 }]
      for (const n of [3, 8, 100]) {
        const keys = Array.from({ length: n }, (_, i) => (i % 4 === 3 ? Buffer.from(`k${i}`) : `k${i}`))
        const strings = keys.map(String)
        const batch = new Balancer(name, nodes, { seed: 5 })
        const single = new Balancer(name, nodes, { seed: 5 })
        assert.deepEqual(batch.pickMany(strings), strings.map(() => single.pick()), `${name} n=${n}`)
        assert.deepEqual(batch.pickMany(keys), keys.map(() => single.pick()), `${name} n=${n} Buffers`)
      }
      const b = new Balancer(name, nodes)
      throwsType(() => b.pickMany([...new Array(50).fill('k'), {}]), 'keys[50] must be a string, Buffer or Uint8Array, got object')
    }
  })

  it('maps many distinct nodes in a large batch correctly', () => {
    const ids = Array.from({ length: 500 }, (_, i) => `node-${i}`)
    const b = new Balancer('round_robin', ids)
    assert.deepEqual(b.pickMany(new Array(2000).fill('k')), Array.from({ length: 2000 }, (_, i) => ids[i % 500]))
    const ring = new Balancer('ring', ids, { hash: 'xxh3' })
    const keys = Array.from({ length: 5000 }, (_, i) => `user-${i}`)
    const answers = ring.pickMany(keys)
    assert.deepEqual(answers, keys.map((k) => ring.pick(k)))
    assert.ok(new Set(answers).size > 400)
  })

  it('throws TypeError for a non-array or a bad key, naming its index', () => {
    const b = new Balancer('ring', ABC)
    throwsType(() => b.pickMany('abc'), 'keys must be an array, got string')
    throwsType(() => b.pickMany(), 'keys must be an array, got undefined')
    throwsType(() => b.pickMany(['a', 'b', 3]), 'keys[2] must be a string, Buffer or Uint8Array, got number')
    throwsType(() => b.pickMany(['a', null]), 'keys[1] must be a string, Buffer or Uint8Array, got null')
    // The same in large batches, which first try the bulk path.
    const big = Array.from({ length: 100 }, (_, i) => `k${i}`)
    throwsType(() => b.pickMany([...big, 7]), 'keys[100] must be a string, Buffer or Uint8Array, got number')
    throwsType(() => b.pickMany(new Array(20)), 'keys[0] must be a string, Buffer or Uint8Array, got undefined')
    throwsCode(() => new Balancer('ring', []).pickMany(big), 'LB_NO_NODES')
  })
})

describe('attempts', () => {
  it('gives distinct ids, the first being what pick gives', () => {
    for (const name of algorithms()) {
      const seeded = () => new Balancer(name, ['a', 'b', 'c', 'd', 'e'], { seed: 7 })
      const b = seeded()
      const all = b.attempts('k')
      assert.equal(new Set(all).size, all.length, name)
      assert.deepEqual([...all].sort(), ['a', 'b', 'c', 'd', 'e'], name)
      assert.equal(seeded().attempts('k', 1)[0], seeded().pick('k'), name)
    }
  })

  it('respects limit; no limit means every node with weight > 0', () => {
    const b = new Balancer('ring', [...ABC, { id: 'drained', weight: 0 }])
    assert.equal(b.attempts('k', 2).length, 2)
    assert.deepEqual(b.attempts('k', 0), [])
    assert.deepEqual(b.attempts('k', 100), b.attempts('k'))
    assert.deepEqual(b.attempts('k', null), b.attempts('k'))
    assert.deepEqual(b.attempts('k').sort(), ABC)
    assert.deepEqual(b.attempts('k', 2), b.attempts('k').slice(0, 2))
    assert.deepEqual(b.attempts(Buffer.from('k')), b.attempts('k'))
  })

  it('works without a key for unkeyed algorithms and needs one for keyed ones', () => {
    assert.equal(new Balancer('random', ABC).attempts().length, 3)
    assert.equal(new Balancer('round_robin', ABC).attempts(null, 2).length, 2)
    throwsCode(() => new Balancer('ring', ABC).attempts(), 'LB_KEY_REQUIRED')
    throwsCode(() => new Balancer('ring', []).attempts('k'), 'LB_NO_NODES')
  })

  it('throws TypeError for a bad key or limit', () => {
    const b = new Balancer('ring', ABC)
    throwsType(() => b.attempts(5), 'key must be a string, Buffer or Uint8Array')
    throwsRange(() => b.attempts('k', -1), 'limit must be an integer between 0 and 9007199254740991, got -1')
    throwsRange(() => b.attempts('k', 1.5), 'got 1.5')
    throwsType(() => b.attempts('k', '2'), 'limit must be a number, got string')
  })
})

describe('membership', () => {
  it('add appends (weight defaults to 1) and rejects duplicates', () => {
    const b = new Balancer('round_robin', ['a'])
    b.add('b')
    b.add('c', 5)
    b.add('d', undefined)
    assert.deepEqual(b.nodes(), [
      { id: 'a', weight: 1 },
      { id: 'b', weight: 1 },
      { id: 'c', weight: 5 },
      { id: 'd', weight: 1 },
    ])
    assert.equal(b.size, 4)
    throwsCode(() => b.add('a'), 'LB_DUPLICATE_NODE', 'duplicate node id "a"')
    throwsCode(() => b.add(''), 'LB_EMPTY_ID')
    throwsCode(() => b.add('n\0ul'), 'LB_ID_CONTAINS_NUL')
    assert.equal(b.size, 4)
  })

  it('remove deletes a node and rejects unknown ids', () => {
    const b = new Balancer('round_robin', ABC)
    b.remove('b')
    assert.deepEqual(b.nodes().map((n) => n.id), ['a', 'c'])
    assert.equal(b.has('b'), false)
    throwsCode(() => b.remove('b'), 'LB_UNKNOWN_NODE', 'unknown node id "b"')
    b.remove('a')
    b.remove('c')
    assert.equal(b.size, 0)
    throwsCode(() => b.pick(), 'LB_NO_NODES')
  })

  it('setWeight changes a weight; 0 drains; all drained means LB_NO_NODES', () => {
    const b = new Balancer('weighted_round_robin', ['a', 'b'])
    b.setWeight('a', 0)
    assert.deepEqual(b.nodes(), [{ id: 'a', weight: 0 }, { id: 'b', weight: 1 }])
    for (let i = 0; i < 10; i++) assert.equal(b.pick(), 'b')
    b.setWeight('b', 0)
    throwsCode(() => b.pick(), 'LB_NO_NODES')
    b.setWeight('a', 2)
    assert.equal(b.pick(), 'a')
    throwsCode(() => b.setWeight('zz', 1), 'LB_UNKNOWN_NODE', '"zz"')
  })

  it('update replaces the membership atomically; a bad list changes nothing', () => {
    const b = new Balancer('round_robin', ABC)
    b.update(['x', { id: 'y', weight: 2 }])
    assert.deepEqual(b.nodes(), [{ id: 'x', weight: 1 }, { id: 'y', weight: 2 }])
    throwsCode(() => b.update(['p', 'q', 'p']), 'LB_DUPLICATE_NODE', '"p"')
    throwsCode(() => b.update(['p', '']), 'LB_EMPTY_ID')
    throwsType(() => b.update(['p', 3]), 'nodes[1]')
    assert.deepEqual(b.nodes(), [{ id: 'x', weight: 1 }, { id: 'y', weight: 2 }])
    b.update([])
    assert.equal(b.size, 0)
  })

  it('has, size and nodes() reflect the membership; nodes() is a fresh copy', () => {
    const b = new Balancer('random', ABC)
    assert.equal(b.has('a'), true)
    assert.equal(b.has('zz'), false)
    assert.equal(b.has(''), false)
    const listed = b.nodes()
    listed[0].id = 'changed'
    listed.push({ id: 'extra', weight: 1 })
    assert.deepEqual(b.nodes().map((n) => n.id), ABC)
    assert.equal(b.size, 3)
  })

  it('size and algorithm are read-only getters', () => {
    const b = new Balancer('random', ABC)
    assert.throws(() => {
      'use strict'
      b.size = 10
    }, TypeError)
    assert.equal(b.size, 3)
    assert.equal(Object.getOwnPropertyDescriptor(Balancer.prototype, 'algorithm').set, undefined)
  })

  it('every failed change leaves the balancer unchanged and working', () => {
    const b = new Balancer('round_robin', ABC)
    const before = b.nodes()
    const failures = [
      () => b.add('a'),
      () => b.add(''),
      () => b.add('x', -1),
      () => b.remove('zz'),
      () => b.remove(1),
      () => b.setWeight('zz', 1),
      () => b.setWeight('a', 'heavy'),
      () => b.update(['a', 'a']),
      () => b.update('a'),
    ]
    for (const fail of failures) {
      assert.throws(fail)
      assert.deepEqual(b.nodes(), before)
    }
    assert.deepEqual([b.pick(), b.pick(), b.pick()], ABC)
  })

  it('throws TypeError for ids and weights of the wrong type', () => {
    const b = new Balancer('random', ABC)
    throwsType(() => b.add(1), 'id must be a string, got number')
    throwsType(() => b.add(), 'id must be a string, got undefined')
    throwsType(() => b.add('x', '2'), 'weight must be a number, got string')
    throwsRange(() => b.add('x', -1), 'weight must be an integer between 0 and 4294967295, got -1')
    throwsType(() => b.remove(null), 'id must be a string, got null')
    throwsType(() => b.setWeight('a'), 'weight must be a number, got undefined')
    throwsRange(() => b.setWeight('a', -3), 'got -3')
    throwsType(() => b.setWeight(Buffer.from('a'), 1), 'id must be a string, got object')
    throwsType(() => b.has(3), 'id must be a string, got number')
    throwsType(() => b.update(), 'nodes must be an array, got undefined')
  })
})

describe('hot methods (direct Node-API callbacks)', () => {
  it('live on the prototype like the other methods, with their names', () => {
    const { value: _, ...generated } = Object.getOwnPropertyDescriptor(Balancer.prototype, 'add')
    for (const name of ['pick', 'pickMany', 'attempts']) {
      const { value, ...attributes } = Object.getOwnPropertyDescriptor(Balancer.prototype, name)
      assert.equal(typeof value, 'function', name)
      assert.equal(value.name, name)
      assert.deepEqual(attributes, generated, name)
    }
  })

  it('throw TypeError for a receiver that is not a Balancer, as the generated methods do', () => {
    const b = new Balancer('round_robin', ABC)
    // V8 checks the receiver before the callback runs (the class's receiver signature).
    const illegal = { name: 'TypeError', message: 'Illegal invocation' }
    for (const receiver of [{}, [], null, undefined, 5, Object.create(Balancer.prototype)]) {
      assert.throws(() => Balancer.prototype.pick.call(receiver), illegal)
      assert.throws(() => Balancer.prototype.pickMany.call(receiver, ['k']), illegal)
      assert.throws(() => Balancer.prototype.attempts.call(receiver, 'k'), illegal)
      assert.throws(() => Balancer.prototype.has.call(receiver, 'a'), illegal)
    }
    // Detached but called on a real instance, they work.
    const { pick } = Balancer.prototype
    assert.equal(pick.call(b), 'a')
  })

  it('ignore extra arguments and read missing ones as undefined', () => {
    const b = new Balancer('ring', ABC)
    assert.equal(b.pick('k', 'extra', 3), b.pick('k'))
    assert.deepEqual(b.attempts('k', 2, 'extra'), b.attempts('k', 2))
    throwsType(() => b.pickMany(), 'keys must be an array, got undefined')
  })
})

describe('errors', () => {
  it('are Error instances with a stable code, a message naming the value and a stack', () => {
    const b = new Balancer('random', ABC)
    let caught
    try {
      b.remove('ghost-node')
    } catch (err) {
      caught = err
    }
    assert.ok(caught instanceof Error)
    assert.equal(caught.code, 'LB_UNKNOWN_NODE')
    assert.match(caught.message, /ghost-node/)
    assert.equal(typeof caught.stack, 'string')
  })
})
