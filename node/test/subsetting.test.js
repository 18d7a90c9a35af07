'use strict'
// Subsetting from Node (issue 26): the options in the options object and `balancer.subset()`.
// The algorithms are the core's (the shared vectors pin their answers in every language);
// these tests check what the binding adds: the options, the array, the errors and their codes,
// each leaving the balancer as it was.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, keyedAlgorithms } = require('..')
const { throwsCode, throwsRange, throwsType } = require('./helpers')

const FLEET = Array.from({ length: 30 }, (_, i) => `10.0.0.${i}:80`)
const SUBSETS = ['deterministic', 'random', 'ringsteady', 'aperture']
const CLIENT = { subset_size: 5, client_index: 2, client_count: 6, subset_seed: 11 }

describe('subset()', () => {
  for (const subset of SUBSETS) {
    it(`${subset}: picks stay in the listed subset, in node order`, () => {
      const b = new Balancer('random', FLEET, { subset, seed: 3, ...CLIENT })
      const members = b.subset()
      assert.ok(Array.isArray(members) && members.every((m) => typeof m === 'string'))
      // Aperture's fractional edges may add a backend or two; the others give exactly 5.
      assert.ok(members.length >= 5 && members.length <= 7, `${members.length} members`)
      assert.deepEqual(members, FLEET.filter((n) => members.includes(n)), 'node order')
      for (let i = 0; i < 200; i++) assert.ok(members.includes(b.pick()))
      for (const id of b.attempts(undefined, 10)) assert.ok(members.includes(id))
      // The same client identity (bigint and text too), the same subset.
      const twin = new Balancer('round_robin', FLEET, { subset, ...CLIENT, subset_seed: 11n, client_index: '2' })
      assert.deepEqual(twin.subset(), members)
    })
  }

  it('without subsetting lists every node of weight > 0', () => {
    const b = new Balancer('round_robin', [{ id: 'a' }, { id: 'b', weight: 0 }, { id: 'c', weight: 2 }])
    assert.deepEqual(b.subset(), ['a', 'c'])
    b.update([])
    assert.deepEqual(b.subset(), [])
  })

  it('membership changes recompute it (A68: one member replaced)', () => {
    const b = new Balancer('round_robin', FLEET, { subset: 'random', subset_size: 5, subset_seed: 7 })
    const before = b.subset()
    const gone = before[0]
    b.remove(gone)
    const after = b.subset()
    assert.equal(after.length, 5)
    assert.ok(!after.includes(gone))
    assert.equal(before.filter((m) => !after.includes(m)).length, 1)
    b.add(gone)
    assert.deepEqual([...b.subset()].sort(), [...before].sort())
    b.setWeight(gone, 0)
    assert.ok(!b.subset().includes(gone))
    b.setWeight(gone, 1)
    assert.deepEqual([...b.subset()].sort(), [...before].sort())
  })

  it('random subsets without a seed differ per client', () => {
    const a = new Balancer('round_robin', FLEET, { subset: 'random', subset_size: 5 })
    const c = new Balancer('round_robin', FLEET, { subset: 'random', subset_size: 5 })
    assert.notDeepEqual(a.subset(), c.subset()) // two random 5-subsets of 30 agree with chance 7e-6
  })

  it('failed changes leave the subset and the picks', () => {
    const b = new Balancer('round_robin', FLEET, { subset: 'deterministic', ...CLIENT })
    const members = b.subset()
    throwsCode(() => b.remove('10.9.9.9:80'), 'LB_UNKNOWN_NODE')
    throwsCode(() => b.add(FLEET[0]), 'LB_DUPLICATE_NODE')
    throwsCode(() => b.update([FLEET[0], FLEET[0]]), 'LB_DUPLICATE_NODE')
    throwsCode(() => b.setWeight('10.9.9.9:80', 0), 'LB_UNKNOWN_NODE')
    assert.deepEqual(b.subset(), members)
    for (let i = 0; i < 50; i++) assert.ok(members.includes(b.pick()))
  })
})

describe('subsetting options', () => {
  it('bad values throw LB_INVALID_OPTION_VALUE naming the option', () => {
    const cases = [
      [{ subset: 'aperture2', subset_size: 3 }, 'subset'],
      [{ subset: 1, subset_size: 3 }, 'subset'],
      [{ subset: 'random', subset_size: 0 }, 'subset_size'],
      [{ subset: 'random', subset_size: '-1' }, 'subset_size'],
      [{ subset: 'random' }, 'subset_size'], // required with subset
      [{ subset: 'aperture', subset_size: 3, client_count: 0 }, 'client_count'],
      [{ subset: 'aperture', subset_size: 3, client_index: 4, client_count: 4 }, 'client_index'],
      [{ client_index: 1 }, 'client_index'], // client_count defaults to 1
      [{ subset: 'random', subset_size: 3, subset_seed: 'x' }, 'subset_seed'],
    ]
    for (const [options, option] of cases) {
      throwsCode(() => new Balancer('round_robin', FLEET, options), 'LB_INVALID_OPTION_VALUE', option)
    }
  })

  it('keyed algorithms refuse subset, but accept the identity alone', () => {
    for (const name of keyedAlgorithms()) {
      throwsCode(() => new Balancer(name, FLEET, { subset: 'random', subset_size: 3, subset_seed: 1 }), 'LB_INVALID_OPTION_VALUE', 'subset')
      const b = new Balancer(name, FLEET, { subset_size: 3, client_index: 1, client_count: 2 })
      assert.deepEqual(b.subset(), FLEET)
    }
  })

  it('wrong types are TypeErrors, negative numbers RangeErrors', () => {
    throwsType(() => new Balancer('round_robin', FLEET, { subset: ['random'], subset_size: 3 }), 'options.subset')
    throwsType(() => new Balancer('round_robin', FLEET, { subset: 'random', subset_size: true }), 'options.subset_size')
    throwsRange(() => new Balancer('round_robin', FLEET, { subset: 'random', subset_size: -1 }), 'options.subset_size')
  })
})
