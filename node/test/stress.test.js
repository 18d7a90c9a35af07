'use strict'
// Picks against concurrent membership changes from async code: reader tasks and writer tasks
// interleave at every `await` (macrotasks and microtasks). The membership alternates between two
// disjoint sets, so any answer that mixes them, or names a node of neither, would be a torn read.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { setImmediate: tick } = require('node:timers/promises')
const { Balancer, algorithms } = require('..')

const A = ['a1', 'a2', 'a3', 'a4', 'a5', 'a6']
const B = ['b1', 'b2', 'b3', 'b4', 'b5']
const inA = (id) => A.includes(id)
const inB = (id) => B.includes(id)
const KEYS = Array.from({ length: 64 }, (_, i) => `key-${i}`)
const READERS = 8
const WRITERS = 3
const ROUNDS = 300

/** All ids from one set, never a mix. */
function oneSet(ids, where) {
  assert.ok(ids.length > 0, where)
  assert.ok(ids.every(inA) || ids.every(inB), `${where}: mixed or unknown ids ${ids}`)
}

async function reader(b, r) {
  let picks = 0
  for (let i = 0; i < ROUNDS; i++) {
    const key = KEYS[(i * 7 + r) % KEYS.length]
    const id = b.pick(key)
    assert.ok(inA(id) || inB(id), `pick gave ${id}`)
    oneSet(b.pickMany(KEYS), 'pickMany')
    oneSet(b.attempts(key), 'attempts')
    const listed = b.nodes().map((n) => n.id)
    oneSet(listed, 'nodes()')
    assert.equal(b.size, listed.length)
    picks += 2 + KEYS.length
    // Alternate between yielding to the event loop and to the microtask queue.
    if (i % 2) await tick()
    else await Promise.resolve()
  }
  return picks
}

async function writer(b, w) {
  let changes = 0
  for (let i = 0; i < ROUNDS; i++) {
    const next = (i + w) % 2 ? A : B
    b.update(next.map((id, j) => ({ id, weight: 1 + ((i + j) % 3) })))
    changes++
    // A change aimed at a node of the other set fails with LB_UNKNOWN_NODE and changes nothing.
    const target = i % 2 ? 'a1' : 'b1'
    try {
      b.setWeight(target, 2)
      changes++
    } catch (err) {
      assert.equal(err.code, 'LB_UNKNOWN_NODE')
    }
    await tick()
  }
  return changes
}

describe('stress', () => {
  for (const name of algorithms()) {
    it(`${name}: picks stay consistent while async writers update the membership`, async () => {
      const b = new Balancer(name, A, { seed: 99 })
      const tasks = [
        ...Array.from({ length: READERS }, (_, r) => reader(b, r)),
        ...Array.from({ length: WRITERS }, (_, w) => writer(b, w)),
      ]
      const counts = await Promise.all(tasks)
      assert.ok(counts.every((n) => n > 0))
      // Afterwards the balancer answers exactly like a fresh one with the same membership.
      const fresh = new Balancer(name, b.nodes(), { seed: 99 })
      if (name === 'ring' || name === 'source_hash') {
        assert.deepEqual(b.pickMany(KEYS), fresh.pickMany(KEYS))
      } else {
        oneSet(b.pickMany(KEYS), 'final pickMany')
      }
    })
  }

  it('round robin keeps its position across updates', async () => {
    const b = new Balancer('round_robin', ['x', 'y', 'z'])
    const seen = []
    for (let i = 0; i < 30; i++) {
      seen.push(b.pick())
      if (i % 5 === 4) b.update(['x', 'y', 'z'])
      await tick()
    }
    assert.deepEqual(seen, Array.from({ length: 30 }, (_, i) => ['x', 'y', 'z'][i % 3]))
  })
})
