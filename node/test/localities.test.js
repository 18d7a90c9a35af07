'use strict'
// Nodes with localities and priority levels (issue 24): the object form, setLocation, locality
// weights and zone-aware routing, and their errors. The rules themselves are the core's
// (core/tests/localities.rs checks them against Envoy's); here: that JavaScript reaches them,
// and bad input gets a specific error and changes nothing.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, optionNames } = require('..')

const picks = (b, n) => Array.from({ length: n }, () => b.pick())

const zones = (opts = {}) =>
  new Balancer(
    'random',
    ['a', 'b', 'c'].flatMap((z) => [0, 1].map((i) => ({ id: `${z}${i}`, locality: `r/${z}` }))),
    { seed: 7, ...opts },
  )

const zonesOf = (ids) => new Set(ids.map((id) => id[0]))

describe('localities and priorities', () => {
  it('nodes() and stats() show where each node is', () => {
    const b = new Balancer('round_robin', [
      { id: 'plain', weight: 2 },
      { id: 'placed', locality: 'eu/eu-west-1b', priority: 2 },
    ])
    b.add({ id: 'added', locality: 'us/us-east-1', priority: 1 })
    b.add('bare', 3)
    // A node given no locality or priority lists neither (as before they existed).
    assert.deepEqual(b.nodes(), [
      { id: 'plain', weight: 2 },
      { id: 'placed', weight: 1, locality: 'eu/eu-west-1b', priority: 2 },
      { id: 'added', weight: 1, locality: 'us/us-east-1', priority: 1 },
      { id: 'bare', weight: 3 },
    ])
    assert.deepEqual(
      b.stats().map((s) => [s.id, s.locality, s.priority]),
      [['plain', undefined, undefined], ['placed', 'eu/eu-west-1b', 2], ['added', 'us/us-east-1', 1], ['bare', undefined, undefined]],
    )
    assert.ok(!('locality' in b.nodes()[0]))
    b.setLocation('plain', 'ap/ap-south-1', 3)
    assert.deepEqual(b.nodes()[0], { id: 'plain', weight: 2, locality: 'ap/ap-south-1', priority: 3 })
  })

  it('spills traffic to the next priority as Envoy computes', () => {
    const nodes = [...Array(10).keys()].flatMap((i) => [
      { id: `p${i}` },
      { id: `s${i}`, priority: 1 },
    ])
    const b = new Balancer('random', nodes, { seed: 3 })
    assert.deepEqual(zonesOf(picks(b, 500)), new Set(['p']))
    for (let i = 0; i < 5; i++) b.markDown(`p${i}`)
    // 5 of 10 healthy x 1.4 = 70% stays on priority 0. 99.9% chi-square bound, 1 dof: 10.83.
    const drawn = picks(b, 20000)
    const p = drawn.filter((id) => id[0] === 'p').length
    const chi = (p - 14000) ** 2 / 14000 + (20000 - p - 6000) ** 2 / 6000
    assert.ok(chi < 10.83, `${p} of 20000 on priority 0`)
  })

  it('routes by zone, and by locality weight', () => {
    const b = zones()
    b.setLocalLocality('r/b')
    b.setLocalLocalities({ 'r/a': 1, 'r/b': 1, 'r/c': 1 })
    assert.deepEqual(zonesOf(picks(b, 300)), new Set(['b']))
    b.setLocalLocalities([])
    assert.deepEqual(zonesOf(picks(b, 300)), new Set(['a', 'b', 'c']))
    const rr = new Balancer('round_robin', ['x', 'y', 'z'].map((id) => ({ id, locality: id })))
    rr.setLocalityWeights([['x', 1], ['y', 2], ['z', 3]])
    const counts = {}
    for (const id of picks(rr, 600)) counts[id] = (counts[id] ?? 0) + 1
    assert.deepEqual(counts, { x: 100, y: 200, z: 300 })
  })

  it('knows the zone options', () => {
    for (const name of ['overprovisioning_factor', 'zone_aware_min_cluster_size', 'zone_aware_routing_enabled', 'zone_aware_by_weight']) {
      assert.ok(optionNames().includes(name), name)
    }
    const b = zones({ zone_aware_min_cluster_size: 7 })
    b.setLocalLocality('r/b')
    b.setLocalLocalities({ 'r/a': 1, 'r/b': 1, 'r/c': 1 })
    assert.deepEqual(zonesOf(picks(b, 300)), new Set(['a', 'b', 'c']))
    assert.throws(() => zones({ zone_aware_routing_enabled: 101 }), { code: 'LB_INVALID_OPTION_VALUE' })
  })

  it('rejects bad localities with specific errors and changes nothing', () => {
    const b = zones()
    const before = b.nodes()
    assert.throws(() => b.add({ id: 'x', locality: 'a/b/c/d' }), {
      code: 'LB_INVALID_LOCALITY',
      message: /a\/b\/c\/d/,
    })
    assert.throws(() => b.setLocation('a0', '1/2/3/4'), { code: 'LB_INVALID_LOCALITY' })
    assert.throws(() => b.setLocalityWeights({ 'a/b/c/d': 1 }), { code: 'LB_INVALID_LOCALITY' })
    assert.throws(() => b.setLocalLocality('nul\0'), { code: 'LB_INVALID_LOCALITY' })
    assert.throws(() => new Balancer('random', [{ id: 'x', locality: '1/2/3/4' }]), {
      code: 'LB_INVALID_LOCALITY',
    })
    assert.throws(() => b.setLocation('nope', 'r/a'), { code: 'LB_UNKNOWN_NODE' })
    assert.throws(() => b.add({ id: 'x', locality: 3 }), { name: 'TypeError', message: /^node\.locality must be a string/ })
    assert.throws(() => b.add({ id: 'x', priority: -1 }), { name: 'RangeError', message: /^node\.priority/ })
    assert.throws(() => b.add({ id: 'x' }, 2), { name: 'TypeError', message: /in the object/ })
    assert.throws(() => b.setLocalityWeights('r/a'), { name: 'TypeError', message: /weights/ })
    assert.throws(() => b.setLocalityWeights([['r/a']]), { name: 'TypeError', message: /pair/ })
    assert.throws(() => b.setLocalityWeights({ 'r/a': '1' }), { name: 'TypeError' })
    assert.throws(() => b.setLocalLocalities({ 'r/a': -1 }), { name: 'RangeError' })
    assert.deepEqual(b.nodes(), before)
    b.pick()
  })
})
