// The ESM entry: `import { Balancer } from 'liblb'` (resolved through package.json "exports").
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import lb, * as named from 'liblb'

const { Balancer, MAX_BATCH, MAX_BATCH_KEY_BYTES, algorithms, noop } = named

const require = createRequire(import.meta.url)

describe('ESM entry', () => {
  it('exports the same classes as require()', () => {
    const cjs = require('liblb')
    assert.equal(Balancer, cjs.Balancer)
    assert.equal(algorithms, cjs.algorithms)
    assert.equal(noop, cjs.noop)
    assert.equal(MAX_BATCH, cjs.MAX_BATCH)
    assert.equal(MAX_BATCH_KEY_BYTES, cjs.MAX_BATCH_KEY_BYTES)
    assert.equal(lb.Balancer, cjs.Balancer)
  })

  it('exports every name require() gives', () => {
    const cjs = require('liblb')
    const own = Object.keys(cjs).filter((name) => !name.startsWith('__'))
    for (const name of own) assert.equal(named[name], cjs[name], name)
  })

  it('run() and leases work from ESM', async () => {
    const b = new named.Balancer('least_connections', ['a', 'b'])
    assert.equal(await b.run(null, async (node) => node), 'a')
    assert.ok(b.acquire() instanceof named.Lease)
  })

  it('picks', () => {
    const ring = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
    assert.equal(ring.pick('Key1'), 'NodeB')
  })
})
