// Smoke test of an installed liblb, from an ES module (tests/packages/README.md).
import assert from 'node:assert/strict'
import liblb, { Balancer, parseOrca } from 'liblb'

assert.equal(liblb.Balancer, Balancer)
const ring = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
const got = ['Key1', 'Key2', 'Key3'].map((k) => ring.pick(k))
assert.deepEqual(got, ['NodeB', 'NodeA', 'NodeC'])

const wrr = new Balancer('weighted_round_robin', [{ id: 'a', weight: 5 }, 'b', 'c'])
const seq = Array.from({ length: 7 }, () => wrr.pick()).join('')
assert.equal(seq, 'aabacaa')

assert.throws(() => ring.remove('nope'), { code: 'LB_UNKNOWN_NODE' })
assert.equal(parseOrca('TEXT named_metrics.rif:3').namedMetrics.rif, 3)
console.log(`esm: ring ${got.join(' ')}, wrr ${seq}`)
