'use strict'
// Smoke test of an installed liblb, from CommonJS (tests/packages/README.md).
const assert = require('node:assert/strict')
const { Balancer } = require('liblb')

assert.equal(require('liblb/package.json').version, process.env.LIBLB_EXPECT_VERSION)
// The installed package, never the repository's node/ folder (a linked install resolves to the
// fresh clone it links to).
assert.ok(!require.resolve('liblb').startsWith(process.env.LIBLB_REPO + '/'), require.resolve('liblb'))

const ring = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
const got = ['Key1', 'Key2', 'Key3'].map((k) => ring.pick(k))
assert.deepEqual(got, ['NodeB', 'NodeA', 'NodeC'])

const wrr = new Balancer('weighted_round_robin', [{ id: 'a', weight: 5 }, 'b', 'c'])
const seq = Array.from({ length: 7 }, () => wrr.pick()).join('')
assert.equal(seq, 'aabacaa')

assert.throws(() => ring.remove('nope'), { code: 'LB_UNKNOWN_NODE' })
assert.equal(ring.pick('Key1'), 'NodeB')
console.log(`commonjs: ring ${got.join(' ')}, wrr ${seq}`)
