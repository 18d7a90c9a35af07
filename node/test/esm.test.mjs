// The ESM entry: `import { Balancer } from 'liblb'` (resolved through package.json "exports").
import { describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import lb, { Balancer, MAX_BATCH, MAX_BATCH_KEY_BYTES, algorithms, noop } from 'liblb'

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

  it('picks', () => {
    const ring = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
    assert.equal(ring.pick('Key1'), 'NodeB')
  })
})
