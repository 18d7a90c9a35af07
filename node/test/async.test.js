'use strict'
// Table builds off the event loop: Balancer.create, updateAsync, addAsync, removeAsync,
// setWeightAsync. They must give what the synchronous calls give (same tables, same errors,
// nothing changed on failure) and leave the event loop running while a big table is built.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, algorithms, keyedAlgorithms } = require('..')

const KEYED = new Set(keyedAlgorithms())
// A ring this big takes a good fraction of a second to build here: 2000 nodes of weights 1-5
// are about 960,000 points, each a SHA-256 hash, then sorted.
const BIG = Array.from({ length: 2000 }, (_, i) => ({ id: `10.0.${i >> 8}.${i & 255}:80`, weight: 1 + (i % 5) }))
const KEYS = Array.from({ length: 500 }, (_, i) => `user-${i}`)
const answers = (b) => (KEYED.has(b.algorithm) ? b.pickMany(KEYS) : b.attempts())

/**
 * How many event-loop turns (setImmediate callbacks) ran between starting `start()` and its
 * promise settling. A build that ran on the JavaScript thread would block the loop for its whole
 * length: the count would be 0, since no turn can run before the promise settles. Counted turns
 * are ones the loop ran while the build was known to be in progress (after it started, before
 * its promise settled), so this is no timing bound. The only way a pool build gives 0 is the
 * loop's thread not getting the CPU before the whole build finished, possible only on a very
 * loaded machine: `turnsDuring` retries a few times for that.
 */
async function turnsOnce(start) {
  let turns = 0
  let settled = false
  const tick = () => {
    if (settled) return
    turns++
    setImmediate(tick)
  }
  setImmediate(tick)
  const promise = start()
  try {
    await promise
  } finally {
    settled = true
  }
  return turns
}

async function turnsDuring(start, tries = 3) {
  for (let i = 0; i < tries; i++) {
    const turns = await turnsOnce(start)
    if (turns > 0) return turns
  }
  return 0
}

describe('async builds', () => {
  it('keep the event loop running while a big table is built', async () => {
    let b
    assert.ok((await turnsDuring(async () => (b = await Balancer.create('ring', BIG)))) > 0)
    assert.ok(b instanceof Balancer)
    assert.ok((await turnsDuring(() => b.updateAsync(BIG.slice(1)))) > 0)
    assert.ok((await turnsDuring(() => b.addAsync(BIG[0].id, 5))) > 0)
    assert.ok((await turnsDuring(() => b.setWeightAsync(BIG[0].id, 1))) > 0)
    assert.ok((await turnsDuring(() => b.removeAsync(BIG[0].id))) > 0)
    assert.deepEqual(b.nodes(), BIG.slice(1))
  })

  it('the same count for the synchronous build is 0: the check can fail', async () => {
    const turns = await turnsOnce(async () => new Balancer('ring', BIG))
    assert.equal(turns, 0)
  })

  it('Balancer.create gives the balancer the constructor gives, for every algorithm', async () => {
    const nodes = [{ id: 'a', weight: 1 }, { id: 'b', weight: 3 }, 'c', { id: 'd', weight: 2 }]
    for (const name of algorithms()) {
      const options = { seed: 7, vnodes: 40 }
      const sync = new Balancer(name, nodes, options)
      const made = await Balancer.create(name, nodes, options)
      assert.ok(made instanceof Balancer, name)
      assert.equal(made.algorithm, name)
      assert.deepEqual(made.nodes(), sync.nodes(), name)
      assert.deepEqual(answers(made), answers(sync), name)
      // A balancer made by create is a full balancer: picks (fast path included), changes.
      for (let i = 0; i < 3; i++) assert.ok(['a', 'b', 'c', 'd'].includes(made.pick('k')), name)
      made.add('e')
      assert.equal(made.size, 5)
    }
    const empty = await Balancer.create('round_robin')
    assert.equal(empty.size, 0)
  })

  it('updateAsync and the other changes equal their synchronous versions', async () => {
    for (const name of algorithms()) {
      const sync = new Balancer(name, ['a', 'b'], { seed: 3 })
      const async_ = new Balancer(name, ['a', 'b'], { seed: 3 })
      const next = ['b', { id: 'c', weight: 2 }, { id: 'd', weight: 4 }]
      sync.update(next)
      assert.equal(await async_.updateAsync(next), undefined)
      sync.add('e', 3)
      await async_.addAsync('e', 3)
      sync.setWeight('c', 5)
      await async_.setWeightAsync('c', 5)
      sync.remove('b')
      await async_.removeAsync('b')
      assert.deepEqual(async_.nodes(), sync.nodes(), name)
      assert.deepEqual(answers(async_), answers(sync), name)
    }
  })

  it('reject with the errors the synchronous calls throw, and change nothing', async () => {
    const b = new Balancer('ring', ['a', 'b', 'c'], { vnodes: 20 })
    const before = { nodes: b.nodes(), picks: b.pickMany(KEYS) }
    const same = async (run, sync) => {
      let thrown
      try {
        sync()
      } catch (error) {
        thrown = error
      }
      assert.ok(thrown, 'the synchronous call throws')
      const promise = run()
      assert.ok(promise instanceof Promise, 'errors are rejections, never synchronous throws')
      await assert.rejects(promise, (error) => {
        assert.equal(error.constructor, thrown.constructor)
        assert.equal(error.code, thrown.code)
        assert.equal(error.message, thrown.message)
        return true
      })
      assert.deepEqual(b.nodes(), before.nodes)
      assert.deepEqual(b.pickMany(KEYS), before.picks)
    }
    await same(() => b.updateAsync(['x', 'x']), () => b.update(['x', 'x']))
    await same(() => b.updateAsync(['x', '']), () => b.update(['x', '']))
    await same(() => b.addAsync('a'), () => b.add('a'))
    await same(() => b.removeAsync('nope'), () => b.remove('nope'))
    await same(() => b.setWeightAsync('nope', 2), () => b.setWeight('nope', 2))
    // Argument errors (TypeError / RangeError) reject too.
    await same(() => b.updateAsync(5), () => b.update(5))
    await same(() => b.addAsync(7), () => b.add(7))
    await same(() => b.setWeightAsync('a', -1), () => b.setWeight('a', -1))
    await same(() => b.setWeightAsync('a'), () => b.setWeight('a'))
    const create = (...args) => () => Balancer.create(...args)
    const construct = (...args) => () => new Balancer(...args)
    for (const args of [
      ['nope', ['a']],
      ['ring', ['a', 'a']],
      ['ring', ['a'], { vnodes: 0 }],
      ['ring', ['a'], { colour: 1 }],
      [42, ['a']],
      ['ring', 'a'],
    ]) {
      await same(create(...args), construct(...args))
    }
    // A receiver that is not a Balancer rejects as well.
    await assert.rejects(Balancer.prototype.updateAsync.call({}, ['a']), TypeError)
  })

  it('the codes of core errors are the stable ones', async () => {
    const b = new Balancer('round_robin', ['a'])
    await assert.rejects(b.updateAsync(['a', 'a']), { code: 'LB_DUPLICATE_NODE' })
    await assert.rejects(b.removeAsync('z'), { code: 'LB_UNKNOWN_NODE' })
    await assert.rejects(Balancer.create('nope'), { code: 'LB_UNKNOWN_ALGORITHM' })
    assert.deepEqual(b.nodes(), [{ id: 'a', weight: 1 }])
  })
})
