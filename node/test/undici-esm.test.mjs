// The ESM entry of liblb/undici (resolved through package.json "exports"): the same functions as
// require('liblb/undici'), and a request through it.
import { it } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import http from 'node:http'
import { Agent, request } from 'undici'
import { Balancer } from 'liblb'
import undici, { interceptor, loadReport, outcome, retryAfterMs } from 'liblb/undici'

const require = createRequire(import.meta.url)

it('exports what require() gives', () => {
  const cjs = require('liblb/undici')
  assert.equal(interceptor, cjs.interceptor)
  assert.equal(outcome, cjs.outcome)
  assert.equal(retryAfterMs, cjs.retryAfterMs)
  assert.equal(loadReport, cjs.loadReport)
  assert.equal(undici, cjs)
})

it('balances a request from ESM', async () => {
  const server = http.createServer((req, res) => res.end(req.headers.host))
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  const b = new Balancer('round_robin', [`127.0.0.1:${server.address().port}`])
  const agent = new Agent().compose(interceptor(b))
  try {
    const res = await request('http://svc.internal/', { dispatcher: agent })
    assert.equal(await res.body.text(), 'svc.internal')
    assert.equal(b.stats()[0].requests, 1)
  } finally {
    await agent.close()
    server.close()
  }
})
