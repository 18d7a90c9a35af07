'use strict'
// Regression tests for the soundness review of the Node binding: receivers that are not a
// Balancer, caller-controlled array lengths, keys arrays whose JavaScript misbehaves, ids that
// are not well-formed UTF-16, polluted prototypes, and SharedArrayBuffer keys. Cases that
// crashed the process before their fix run in a child process, so a regression fails one test
// instead of killing the whole run.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { spawnSync } = require('node:child_process')
const path = require('node:path')
const { Worker } = require('node:worker_threads')
const { Balancer } = require('..')
const { throwsCode, throwsType } = require('./helpers')

const ADDON = path.join(__dirname, '..')
const RING = ['a', 'b', 'c', 'd', 'e']
const KEYS = Array.from({ length: 20 }, (_, i) => `key${i}`)

/** Runs `source` in a fresh Node process (with `ADDON` as a global) and returns its stdout;
 * fails the test if the process crashes or exits non-zero. */
function child(source) {
  const run = spawnSync(process.execPath, ['-e', `const ADDON = ${JSON.stringify(ADDON)};\n${source}`], {
    encoding: 'utf8',
    timeout: 120_000,
  })
  assert.equal(run.signal, null, `child process killed by ${run.signal}; stderr: ${run.stderr}`)
  assert.equal(run.status, 0, `child process exited with ${run.status}; stderr: ${run.stderr}`)
  return run.stdout
}

/** What `pick` answers for each key, one call per key: what `pickMany` must return. */
const perKey = (b, keys) => Array.from(keys, (k) => b.pick(k))

describe('receivers (finding 1)', () => {
  it('an object wrapped by another napi-rs addon is refused before any pointer is read', () => {
    // @napi-rs/tar (a dependency of @napi-rs/cli) is another napi-rs addon: its `Builder` is a
    // `napi_wrap`ped object that napi-rs's own class check cannot tell from a Balancer.
    const tar = require.resolve('@napi-rs/tar', { paths: [ADDON] })
    const out = child(`
      const { Balancer } = require(ADDON)
      const foreign = new (require(${JSON.stringify(tar)}).Builder)()
      for (const [name, args] of [['pick', ['k']], ['pickMany', [['k']]], ['attempts', ['k', 2]]]) {
        try {
          Balancer.prototype[name].call(foreign, ...args)
          console.log(name, 'accepted')
        } catch (err) {
          console.log(name, err.constructor.name, err.message)
        }
      }`)
    assert.equal(
      out,
      ['pick', 'pickMany', 'attempts'].map((m) => `${m} TypeError Illegal invocation\n`).join(''),
    )
  })

  it('subclass instances are Balancers; objects that only inherit from the prototype are not', () => {
    class Sub extends Balancer {}
    const sub = new Sub('ring', RING)
    const plain = new Balancer('ring', RING)
    assert.equal(sub.pick('k'), plain.pick('k'))
    assert.deepEqual(sub.pickMany(KEYS), plain.pickMany(KEYS))
    assert.deepEqual(sub.attempts('k', 3), plain.attempts('k', 3))
    for (const receiver of [Object.create(Balancer.prototype), Object.create(plain)]) {
      assert.throws(() => receiver.pick('k'), { name: 'TypeError', message: 'Illegal invocation' })
    }
  })
})

describe('caller-controlled lengths (finding 2)', () => {
  it('a keys array with length 2 ** 32 - 1 but one element throws instead of aborting', () => {
    const out = child(`
      const { Balancer } = require(ADDON)
      for (const algorithm of ['ring', 'round_robin']) {
        const keys = [Buffer.from('x')]
        keys.length = 2 ** 32 - 1
        try {
          console.log(new Balancer(algorithm, ['a']).pickMany(keys).length)
        } catch (err) {
          console.log(algorithm, err.constructor.name, err.code, err.message)
        }
      }`)
    // Refused by its length alone (issue 9: more than MAX_BATCH keys), before any key is read.
    const message = 'RangeError LB_BATCH_TOO_LARGE keys has 4294967295 elements; one call answers at most 16777216 (MAX_BATCH): split the batch'
    assert.equal(out, `ring ${message}\nround_robin ${message}\n`)
  })
})

describe('pickMany against misbehaving key arrays (finding 3)', () => {
  const ring = new Balancer('ring', RING)
  const expected = perKey(ring, KEYS)

  it('ignores an own or subclass join', () => {
    const own = KEYS.slice()
    own.join = () => Array(20).fill('zzz').join('\0')
    assert.deepEqual(ring.pickMany(own), expected)
    class Joiner extends Array {
      join() {
        return Array(20).fill('zzz').join('\0')
      }
    }
    assert.deepEqual(ring.pickMany(Joiner.from(KEYS)), expected)
  })

  it('ignores a patched Array.prototype.join or push', () => {
    const { join, push } = Array.prototype
    try {
      Array.prototype.join = function () {
        return 'q\0'.repeat(this.length - 1) + 'q'
      }
      Array.prototype.push = function () {
        return 0
      }
      assert.deepEqual(ring.pickMany(KEYS), expected)
      assert.deepEqual(new Balancer('round_robin', RING).pickMany(KEYS), RING.concat(RING, RING, RING))
    } finally {
      Array.prototype.join = join
      Array.prototype.push = push
    }
  })

  it('reads each key once: a getter that turns into a number is not hashed as text', () => {
    const keys = KEYS.slice()
    let reads = 0
    Object.defineProperty(keys, 3, { get: () => (reads++ === 0 ? 'key3' : 12345), enumerable: true })
    const out = ring.pickMany(keys)
    assert.equal(reads, 1)
    assert.deepEqual(out, expected)
  })

  it('a getter that shrinks the array cannot shift answers to other keys', () => {
    const keys = KEYS.slice()
    keys[0] = 'key0\0key1' // one piece too many when joined: matches the stale count of 20
    let shrunk = false
    Object.defineProperty(keys, 1, {
      get() {
        if (!shrunk) {
          shrunk = true
          keys.length = 19
        }
        return 'key1'
      },
      configurable: true,
    })
    const out = ring.pickMany(keys)
    assert.equal(keys.length, 19)
    assert.deepEqual(out, perKey(ring, keys))
  })

  it('a getter that grows the array gives one answer per key read', () => {
    const keys = KEYS.slice()
    let grown = false
    Object.defineProperty(keys, 0, {
      get() {
        if (!grown) {
          grown = true
          keys.push('extra')
        }
        return 'key0'
      },
      configurable: true,
    })
    const out = ring.pickMany(keys)
    assert.deepEqual(out, perKey(ring, keys))
  })

  it('a getter that throws still throws (and the balancer keeps working)', () => {
    const keys = KEYS.slice()
    Object.defineProperty(keys, 5, {
      get() {
        throw new RangeError('boom')
      },
    })
    assert.throws(() => ring.pickMany(keys), { name: 'RangeError', message: 'boom' })
    assert.deepEqual(ring.pickMany(KEYS), expected)
  })

  it('12 keys too long together to join are picked one by one, up to MAX_BATCH_KEY_BYTES', () => {
    // Joined, these 12 keys would pass 2^28 UTF-16 units (the bulk path's cap, below V8's string
    // limit), so the batch is read per element; together they hold exactly MAX_BATCH_KEY_BYTES
    // bytes (issue 9), the most one batch copies. One byte more is refused.
    const source = new Balancer('source_hash', RING)
    const each = 22369620
    const last = 2 ** 28 - 11 * each
    const keys = Array.from({ length: 12 }, (_, i) => String(i).padEnd(i < 11 ? each : last, 'x'))
    assert.deepEqual(source.pickMany(keys), perKey(source, keys))
    keys[11] += 'x'
    assert.throws(() => source.pickMany(keys), { name: 'RangeError', code: 'LB_BATCH_TOO_LARGE' })
  })

  it('still gives the per-element TypeError for a key of the wrong type', () => {
    const keys = KEYS.slice()
    keys[7] = 7
    throwsType(() => ring.pickMany(keys), 'keys[7] must be a string, Buffer or Uint8Array, got number')
    throwsType(() => new Balancer('round_robin', RING).pickMany(keys), 'keys[7]')
  })
})

describe('ids that are not well-formed UTF-16 (finding 4)', () => {
  it('are refused with LB_INVALID_UTF8 instead of becoming U+FFFD', () => {
    for (const bad of ['\uD800', '\uDC00', 'a\uDC00b', 'x\uD83D']) {
      throwsCode(() => new Balancer('round_robin', [bad]), 'LB_INVALID_UTF8')
      throwsCode(() => new Balancer('round_robin', [{ id: bad, weight: 2 }]), 'LB_INVALID_UTF8')
    }
    const b = new Balancer('round_robin', ['a'])
    throwsCode(() => b.add('\uDC00'), 'LB_INVALID_UTF8')
    throwsCode(() => b.update(['a', '\uD800']), 'LB_INVALID_UTF8')
    throwsCode(() => b.remove('\uD800'), 'LB_INVALID_UTF8')
    throwsCode(() => b.setWeight('\uD800', 3), 'LB_INVALID_UTF8')
    assert.equal(b.has('\uD800'), false)
    assert.deepEqual(b.nodes(), [{ id: 'a', weight: 1 }])
  })

  it('two different lone surrogates are two different (refused) ids, not one duplicate', () => {
    const b = new Balancer('round_robin', ['\uFFFD'])
    throwsCode(() => b.add('\uD800'), 'LB_INVALID_UTF8')
    assert.equal(b.has('\uD800'), false)
    assert.equal(b.has('\uFFFD'), true)
  })

  it('well-formed ids outside the BMP round-trip', () => {
    const emoji = 'cache-\uD83D\uDE00'
    const b = new Balancer('round_robin', [emoji, { id: 'é', weight: 2 }])
    assert.deepEqual(b.nodes(), [
      { id: emoji, weight: 1 },
      { id: 'é', weight: 2 },
    ])
    assert.equal(b.has(emoji), true)
    b.setWeight(emoji, 4)
    b.remove(emoji)
    assert.equal(b.size, 1)
  })

  it('keys are hashed like Buffer.from(key): a lone surrogate is U+FFFD', () => {
    const ring = new Balancer('ring', RING)
    for (const key of ['\uD800', 'a\uDC00b', 'x\uD83D']) {
      assert.equal(ring.pick(key), ring.pick(Buffer.from(key)))
    }
    assert.equal(ring.pick('\uD800'), ring.pick('\uFFFD'))
  })
})

describe('options (finding 5)', () => {
  it('ignore inherited enumerable properties (a polluted Object.prototype)', () => {
    Object.prototype.polluted = 1 // eslint-disable-line no-extend-native
    try {
      const seeded = new Balancer('random', RING, { seed: 7 })
      const again = new Balancer('random', RING, { seed: 7 })
      assert.deepEqual(perKey(seeded, KEYS), perKey(again, KEYS))
      new Balancer('ring', RING, {})
      new Balancer('ring', RING, { vnodes: 3, hash: 'xxh3' })
    } finally {
      delete Object.prototype.polluted
    }
    // Own enumerable properties only: inherited and non-enumerable ones are not options.
    new Balancer('ring', RING, Object.create({ bogus: 1 }))
    new Balancer('ring', RING, Object.defineProperty({}, 'bogus', { value: 1, enumerable: false }))
    throwsCode(() => new Balancer('ring', RING, { bogus: 1 }), 'LB_UNKNOWN_OPTION', 'bogus')
  })
})

describe('SharedArrayBuffer keys (finding 6)', () => {
  it('are read as their bytes, also while another worker rewrites them', async () => {
    const ring = new Balancer('ring', RING)
    const shared = new Uint8Array(new SharedArrayBuffer(64))
    shared.set(Buffer.from('user-42'))
    const view = shared.subarray(0, 7)
    assert.equal(ring.pick(view), ring.pick('user-42'))
    assert.deepEqual(ring.attempts(view, 3), ring.attempts('user-42', 3))
    const batch = Array.from({ length: 20 }, (_, i) => (i % 2 ? view : `k${i}`))
    assert.deepEqual(ring.pickMany(batch), perKey(ring, batch))

    // A worker flips the bytes between two keys while this thread picks with them: every answer
    // is a node (the bytes are copied before hashing, so nothing reads memory being written).
    const stop = new Int32Array(new SharedArrayBuffer(4))
    const worker = new Worker(
      `const { workerData: { bytes, stop } } = require('node:worker_threads')
       const a = Buffer.from('AAAAAAAAAAAAAAAA'), b = Buffer.from('BBBBBBBBBBBBBBBB')
       while (Atomics.load(stop, 0) === 0) { bytes.set(a); bytes.set(b) }`,
      { eval: true, workerData: { bytes: shared, stop } },
    )
    try {
      await new Promise((resolve) => setTimeout(resolve, 50))
      const seen = new Set()
      for (let i = 0; i < 20_000; i++) {
        seen.add(ring.pick(shared))
        for (const id of ring.attempts(shared, 2)) seen.add(id)
      }
      for (const id of seen) assert.ok(RING.includes(id), id)
    } finally {
      Atomics.store(stop, 0, 1)
      await worker.terminate()
    }
  })
})
