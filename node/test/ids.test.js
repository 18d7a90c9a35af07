'use strict'
// The fast path of pick() (node/src/ids.rs): ids cached as JavaScript strings per membership,
// answered by index. Every answer must be the node the core picked, from the membership current
// when pick was called: never an id that add, remove, setWeight or update replaced once that
// call returned, whatever the cache held before.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const v8 = require('node:v8')
const vm = require('node:vm')
const { Balancer, algorithms, keyedAlgorithms, hashAlgorithms } = require('..')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { throwsCode } = require('./helpers')

const KEYED = new Set(keyedAlgorithms())
const KEYS = Array.from({ length: 64 }, (_, i) => `key-${i}`)

/** `n` single picks, with keys for keyed algorithms. */
const picks = (b, n = 64) =>
  Array.from({ length: n }, (_, i) => (KEYED.has(b.algorithm) ? b.pick(KEYS[i % KEYS.length]) : b.pick()))

/** Every id the balancer's picks, batches and retry orders answer now. */
const everyAnswer = (b) => {
  const keyed = KEYED.has(b.algorithm)
  const out = new Set(picks(b))
  for (const id of b.pickMany(KEYS)) out.add(id)
  for (const id of b.attempts(keyed ? KEYS[0] : undefined)) out.add(id)
  if (hashAlgorithms().includes(b.algorithm)) out.add(b.pickHash(12345))
  return out
}

const subset = (set, allowed) => [...set].every((id) => allowed.includes(id))

describe('pick() id cache', () => {
  it('round robin keeps its order across the first (native) and the cached picks', () => {
    const b = new Balancer('round_robin', ['a', 'b', 'c'])
    assert.deepEqual(picks(b, 9), ['a', 'b', 'c', 'a', 'b', 'c', 'a', 'b', 'c'])
  })

  for (const algorithm of algorithms()) {
    it(`${algorithm}: answers follow every membership change`, () => {
      const b = new Balancer(algorithm, [{ id: 'a' }, { id: 'b', weight: 2 }, 'c'], { seed: 5 })
      assert.ok(subset(everyAnswer(b), ['a', 'b', 'c']))
      b.add('d', 3)
      b.remove('a')
      assert.ok(subset(everyAnswer(b), ['b', 'c', 'd']))
      b.setWeight('b', 0)
      b.setWeight('c', 0)
      assert.ok(subset(everyAnswer(b), ['d']))
      b.setWeight('d', 0)
      b.setWeight('c', 1)
      const answers = everyAnswer(b)
      assert.ok(answers.has('c') && !answers.has('a'))
      b.update(['x', { id: 'y', weight: 2 }, 'z'])
      assert.ok(subset(everyAnswer(b), ['x', 'y', 'z']))
      b.update(['a', 'b'])
      assert.ok(subset(everyAnswer(b), ['a', 'b']))
      // Keyed single picks agree with the batch (the native path) for the same keys.
      if (KEYED.has(algorithm)) assert.deepEqual(picks(b, KEYS.length), b.pickMany(KEYS))
    })
  }

  it('a removed node is never answered once remove returns', () => {
    // Round robin visits every node each lap: a stale cached id would show up at once.
    for (let n = 1; n < 12; n++) {
      const ids = Array.from({ length: n }, (_, i) => `n${i}`)
      const b = new Balancer('round_robin', ids)
      for (const gone of [...ids]) {
        assert.deepEqual(new Set(picks(b, 2 * ids.length)), new Set(ids))
        b.remove(gone)
        ids.splice(ids.indexOf(gone), 1)
        if (ids.length > 0) assert.deepEqual(new Set(picks(b, 2 * ids.length)), new Set(ids))
        else throwsCode(() => b.pick(), 'LB_NO_NODES')
      }
      b.add('back')
      assert.deepEqual(picks(b, 2), ['back', 'back'])
    }
  })

  it('a drained node is never answered once setWeight returns', () => {
    const b = new Balancer('round_robin', ['a', 'b', 'c'])
    assert.deepEqual(new Set(picks(b, 9)), new Set(['a', 'b', 'c']))
    b.setWeight('b', 0)
    assert.deepEqual(new Set(picks(b, 9)), new Set(['a', 'c']))
    b.setWeight('b', 2)
    assert.deepEqual(new Set(picks(b, 9)), new Set(['a', 'b', 'c']))
  })

  it('many balancers, picked in turn, each answer from their own membership', () => {
    const all = Array.from({ length: 8 }, (_, i) => new Balancer('round_robin', [`b${i}-x`, `b${i}-y`]))
    for (let round = 0; round < 3; round++) {
      // The round robin position survives updates: compare each lap as a set.
      for (const [i, b] of all.entries()) assert.deepEqual(new Set(picks(b, 2)), new Set([`b${i}-x`, `b${i}-y`]))
      all[round].update([`b${round}-x`, `b${round}-y`, `b${round}-z`])
      assert.deepEqual(new Set(picks(all[round], 3)), new Set([`b${round}-x`, `b${round}-y`, `b${round}-z`]))
      all[round].update([`b${round}-x`, `b${round}-y`])
    }
  })

  it('unicode ids come back equal', () => {
    const ids = ['ñodo', '节点', '🙂 node', 'plain']
    const b = new Balancer('round_robin', ids)
    assert.deepEqual(picks(b, 8), [...ids, ...ids])
  })

  it('frozen, subclassed and detached-method receivers pick the same way', () => {
    const frozen = Object.freeze(new Balancer('round_robin', ['a', 'b']))
    assert.deepEqual(picks(frozen, 4), ['a', 'b', 'a', 'b'])
    class Sub extends Balancer {}
    assert.deepEqual(picks(new Sub('round_robin', ['a', 'b']), 4), ['a', 'b', 'a', 'b'])
    const b = new Balancer('round_robin', ['a', 'b'])
    const { pick } = Balancer.prototype
    assert.deepEqual([pick.call(b), pick.call(b), b.pick()], ['a', 'b', 'a'])
    // Objects that only inherit from a balancer are still refused, before and after it picked.
    assert.throws(() => Object.create(b).pick(), { name: 'TypeError', message: 'Illegal invocation' })
  })

  it('errors are the same on the cached path', () => {
    const b = new Balancer('ring', ['a'])
    assert.equal(b.pick('k'), 'a')
    throwsCode(() => b.pick(), 'LB_KEY_REQUIRED')
    throwsCode(() => b.pick(null), 'LB_KEY_REQUIRED')
    assert.throws(() => b.pick(5), { name: 'TypeError' })
    b.remove('a')
    throwsCode(() => b.pick('k'), 'LB_NO_NODES')
    b.add('z')
    assert.equal(b.pick('k'), 'z')
  })

  it('records forged through a patched WeakMap throw instead of reading foreign memory', () => {
    const b = new Balancer('round_robin', ['a'])
    assert.equal(b.pick(), 'a')
    const { get } = WeakMap.prototype
    try {
      for (const handle of [123456, -1, 'x', {}, null, undefined, Buffer.from('x')]) {
        WeakMap.prototype.get = () => ({ handle, ids: [] })
        assert.throws(() => b.pick(), Error, String(handle))
        assert.throws(() => b.attempts(), Error, String(handle))
      }
    } finally {
      WeakMap.prototype.get = get
    }
    assert.equal(b.pick(), 'a')
    assert.deepEqual(b.attempts(), ['a'])
  })

  it('setters on Array.prototype indices never run inside a pick', () => {
    // In a child process: the setters would disturb this process's own arrays.
    const source = `
      const { Balancer } = require(${JSON.stringify(path.join(__dirname, '..'))})
      let ran = 0
      for (let i = 0; i < 8; i++) {
        Object.defineProperty(Array.prototype, i, { set() { ran++ }, configurable: true })
      }
      const b = new Balancer('round_robin', ['a', 'b', 'c'])
      // A string, not an array: pushing onto an array would call those setters itself.
      let out = b.pick()
      for (let i = 1; i < 6; i++) out += ',' + b.pick()
      b.update(['x', 'y'])
      for (let i = 0; i < 4; i++) out += ',' + b.pick()
      process.stdout.write(out + ' ' + ran + '\\n')`
    const run = spawnSync(process.execPath, ['-e', source], { encoding: 'utf8', timeout: 60_000 })
    assert.equal(run.status, 0, run.stderr)
    const [answers, ran] = run.stdout.trim().split(' ')
    assert.equal(ran, '0')
    const got = answers.split(',')
    assert.deepEqual(got.slice(0, 6), ['a', 'b', 'c', 'a', 'b', 'c'])
    assert.deepEqual(new Set(got.slice(6)), new Set(['x', 'y']))
  })

  it('attempts() on the cached path: keyed answers equal a fresh balancer\'s (native path)', () => {
    for (const algorithm of keyedAlgorithms()) {
      const b = new Balancer(algorithm, ['a', { id: 'b', weight: 2 }, 'c', 'd'], { vnodes: 40 })
      const fresh = () => new Balancer(algorithm, b.nodes(), { vnodes: 40 })
      const check = () => {
        for (const key of KEYS.slice(0, 8)) {
          for (const limit of [undefined, 1, 2]) {
            assert.deepEqual(b.attempts(key, limit), fresh().attempts(key, limit), `${algorithm} ${key} ${limit}`)
          }
        }
      }
      check()
      b.add('e', 3)
      check()
      b.remove('a')
      b.pick(KEYS[0]) // the cache is shared with pick
      check()
      b.update(['x', { id: 'y', weight: 3 }, 'z'])
      check()
      b.setWeight('y', 0)
      check()
    }
  })

  it('attempts() on the cached path: unkeyed answers are distinct pickable nodes', () => {
    for (const algorithm of algorithms().filter((a) => !KEYED.has(a))) {
      const b = new Balancer(algorithm, ['a', 'b', 'c', { id: 'd', weight: 0 }], { seed: 9 })
      for (const [change, pickable] of [
        [() => {}, ['a', 'b', 'c']],
        [() => b.add('e', 2), ['a', 'b', 'c', 'e']],
        [() => b.pick(), ['a', 'b', 'c', 'e']],
        [() => b.update(['p', 'q']), ['p', 'q']],
        [() => b.setWeight('p', 0), ['q']],
      ]) {
        change()
        for (let i = 0; i < 5; i++) {
          const all = b.attempts()
          assert.deepEqual([...all].sort(), [...pickable].sort(), algorithm)
          const two = b.attempts(undefined, 2)
          assert.equal(two.length, Math.min(2, pickable.length))
          assert.ok(subset(new Set(two), pickable) && new Set(two).size === two.length, algorithm)
        }
      }
    }
  })

  it('attempts() with more answers than its scratch array, before and after smaller ones', () => {
    const ids = Array.from({ length: 1500 }, (_, i) => `n${i}`)
    const b = new Balancer('ring', ids, { vnodes: 4 })
    const small = b.attempts('k', 3)
    const all = b.attempts('k')
    assert.equal(all.length, 1500)
    assert.deepEqual(new Set(all), new Set(ids))
    assert.deepEqual(all.slice(0, 3), small)
    assert.deepEqual(b.attempts('k', 3), small)
    b.update(ids.slice(0, 1200).concat(['extra']))
    const again = b.attempts('k')
    assert.equal(again.length, 1201)
    assert.deepEqual(new Set(again), new Set([...ids.slice(0, 1200), 'extra']))
    assert.deepEqual(b.attempts('k', 5), again.slice(0, 5))
    assert.equal(b.pick('k'), again[0])
  })

  it('attempts() errors are the same on the cached path', () => {
    const b = new Balancer('ring', ['a'])
    assert.deepEqual(b.attempts('k'), ['a'])
    throwsCode(() => b.attempts(), 'LB_KEY_REQUIRED')
    assert.throws(() => b.attempts(5), { name: 'TypeError' })
    assert.throws(() => b.attempts('k', -1), { name: 'RangeError' })
    b.remove('a')
    throwsCode(() => b.attempts('k'), 'LB_NO_NODES')
    b.add('z')
    assert.deepEqual(b.attempts('k', 4), ['z'])
  })

  it('balancers that picked are garbage-collected with their caches', async () => {
    // The test runner has no --expose-gc: turn it on and fetch `gc` from a fresh context.
    v8.setFlagsFromString('--expose-gc')
    const gc = vm.runInNewContext('gc')
    const collected = new Set()
    const registry = new FinalizationRegistry((i) => collected.add(i))
    ;(() => {
      for (let i = 0; i < 20; i++) {
        const b = new Balancer('round_robin', [`id-${i}`])
        assert.equal(b.pick(), `id-${i}`)
        assert.equal(b.pick(), `id-${i}`)
        registry.register(b, i)
      }
    })()
    for (let i = 0; i < 20 && collected.size < 20; i++) {
      gc()
      await new Promise((resolve) => setImmediate(resolve))
    }
    assert.equal(collected.size, 20)
  })
})
