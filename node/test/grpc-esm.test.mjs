// The ESM entry of liblb/grpc (resolved through package.json "exports"): the same module as
// require('liblb/grpc').
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import grpc, { register, balancer, loadOf, outcomeOf, TYPE_NAME } from 'liblb/grpc'

const require = createRequire(import.meta.url)

it('exports what require() gives', () => {
  const cjs = require('liblb/grpc')
  assert.equal(grpc, cjs)
  assert.deepEqual([register, balancer, loadOf, outcomeOf, TYPE_NAME], [cjs.register, cjs.balancer, cjs.loadOf, cjs.outcomeOf, 'liblb'])
})
