// Smoke test of an installed liblb, from an ES module (tests/packages/README.md).
import assert from 'node:assert/strict'
import liblb, { Balancer, ServerLoad, parseOrca } from 'liblb'

assert.equal(liblb.Balancer, Balancer)
const ring = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
const got = ['Key1', 'Key2', 'Key3'].map((k) => ring.pick(k))
assert.deepEqual(got, ['NodeB', 'NodeA', 'NodeC'])

const wrr = new Balancer('weighted_round_robin', [{ id: 'a', weight: 5 }, 'b', 'c'])
const seq = Array.from({ length: 7 }, () => wrr.pick()).join('')
assert.equal(seq, 'aabacaa')

assert.throws(() => ring.remove('nope'), { code: 'LB_UNKNOWN_NODE' })
assert.equal(parseOrca('TEXT named_metrics.rif:3').namedMetrics.rif, 3)
// Server-reported load: a ServerLoad backend's header, read back; client_side_wrr weighs by
// reports (0.9 and 0.3 utilisation at 100 qps: 1:3).
const server = new ServerLoad()
server.setApplicationUtilization(0.3)
server.finish(server.start())
assert.equal(parseOrca(server.header()).applicationUtilization, 0.3)
const weighed = new Balancer('client_side_wrr', ['a', 'b'], { blackout_period_ms: 0 })
weighed.reportLoad('a', 'TEXT application_utilization=0.9,rps_fractional=100')
weighed.reportLoad('b', 'TEXT application_utilization=0.3,rps_fractional=100')
assert.deepEqual(Array.from({ length: 4 }, () => weighed.pick()).sort(), ['a', 'b', 'b', 'b'])
console.log(`esm: ring ${got.join(' ')}, wrr ${seq}`)
