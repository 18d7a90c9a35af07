'use strict'
// The server side of server-reported load from Node (issue 25): ServerLoad. The numbers are the
// core's (its Rust tests pin the rate window, the latency levels and the report); these tests
// check what the binding adds: the clock, the request objects (ended once), the errors and the
// argument types, and that a header reads back through parseOrca to the same report.
const { it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, ServerLoad, ServerRequest, parseOrca } = require('..')

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

it('start, finish, cancel and probe count requests', async () => {
  const load = new ServerLoad()
  assert.equal(load.inFlight, 0)
  assert.deepEqual(load.probe(), { rif: 0, latencyMs: 0 })
  const before = new Balancer('random', ['a']).nowMs()
  const [a, b, c] = [load.start(), load.start(), load.start()]
  assert.ok(a instanceof ServerRequest)
  assert.deepEqual([a.rif, b.rif, c.rif], [0, 1, 2])
  assert.ok(before <= a.startedMs && a.startedMs <= c.startedMs)
  assert.equal(load.inFlight, 3)
  assert.deepEqual(load.probe(), { rif: 3, latencyMs: 0 })
  await sleep(3)
  const took = load.finish(a)
  assert.ok(took >= 2, `${took}`)
  assert.equal(a.done, true)
  assert.equal(b.done, false)
  assert.ok(load.finish(b, false) > 0)
  load.cancel(c)
  assert.equal(load.inFlight, 0)
  // a found nothing in flight: the estimate at rif 0 is its latency (kept in microseconds).
  const probe = load.probe()
  assert.equal(probe.rif, 0)
  assert.ok(Math.abs(probe.latencyMs - took) < 1e-3, `${probe.latencyMs} vs ${took}`)
  const report = load.report()
  assert.ok(report.rpsFractional > 0)
  assert.equal(report.rpsFractional, 2 * report.eps) // 2 completed, 1 failed
  assert.deepEqual(Object.keys(report.namedMetrics), ['latency_ms', 'rif'])
  assert.equal(report.namedMetrics.rif, 0)
})

it('the window and latency max age are set and checked', async () => {
  const fresh = new ServerLoad()
  assert.deepEqual([fresh.windowMs, fresh.latencyMaxAgeMs], [10000, 1000])
  const load = new ServerLoad({ windowMs: 60000, latencyMaxAgeMs: 1 })
  assert.deepEqual([load.windowMs, load.latencyMaxAgeMs], [60000, 1])
  load.finish(load.start())
  await sleep(5)
  assert.deepEqual(load.probe(), { rif: 0, latencyMs: 0 }, 'a 1 ms max age forgot the sample')
  assert.deepEqual(new ServerLoad(null).windowMs, 10000)
  for (const [options, name] of [
    [{ windowMs: 999 }, 'window_ms'],
    [{ windowMs: 3600001 }, 'window_ms'],
    [{ latencyMaxAgeMs: 0 }, 'latency_max_age_ms'],
    [{ latencyMaxAgeMs: 3600001 }, 'latency_max_age_ms'],
  ]) {
    assert.throws(() => new ServerLoad(options), (e) => e.code === 'LB_INVALID_OPTION_VALUE' && e.message.includes(name), JSON.stringify(options))
  }
  assert.throws(() => new ServerLoad({ latencyMaxAgeMs: 1.5 }), RangeError)
  assert.throws(() => new ServerLoad({ windowMs: '10s' }), TypeError)
  assert.throws(() => new ServerLoad(5), TypeError)
})

it('a request ends once', () => {
  const load = new ServerLoad()
  const r = load.start()
  load.finish(r)
  for (const end of [() => load.finish(r), () => load.cancel(r)]) {
    assert.throws(end, { code: 'LB_LEASE_FINISHED', message: /already ended/ })
  }
  assert.equal(load.inFlight, 0)
  // Another load's request is refused and stays open.
  const other = new ServerLoad().start()
  assert.throws(() => load.finish(other), { name: 'TypeError', message: /another ServerLoad/ })
  assert.equal(other.done, false)
})

it('invalid utilisations throw and change nothing', () => {
  const load = new ServerLoad()
  load.setCpuUtilization(0.5)
  load.setMemUtilization(0.25)
  load.setApplicationUtilization(1.5) // may exceed 1
  const bad = [
    () => load.setCpuUtilization(-1),
    () => load.setCpuUtilization(Infinity),
    () => load.setMemUtilization(1.5),
    () => load.setApplicationUtilization(NaN),
  ]
  for (const set of bad) assert.throws(set, { code: 'LB_INVALID_LOAD_REPORT' })
  assert.deepEqual([load.cpuUtilization, load.memUtilization, load.applicationUtilization], [0.5, 0.25, 1.5])
})

it('headers read back through parseOrca to the same numbers', () => {
  const load = new ServerLoad()
  load.setCpuUtilization(0.731)
  load.setMemUtilization(1)
  for (const ok of [true, true, false]) load.finish(load.start(), ok)
  const held = load.start()
  for (const form of ['text', 'bin']) {
    const header = load.header(form)
    assert.ok(header.startsWith(`${form.toUpperCase()} `), header)
    const parsed = parseOrca(header)
    const report = load.report()
    assert.equal(parsed.cpuUtilization, 0.731)
    assert.equal(parsed.memUtilization, 1)
    assert.equal(parsed.namedMetrics.rif, 1)
    // Rates are read at each call's own time; the rest is the same report.
    assert.ok(Math.abs(parsed.eps / report.eps - 1) < 1e-3)
    assert.ok(Math.abs(parsed.rpsFractional / report.rpsFractional - 1) < 1e-3)
  }
  load.cancel(held)
  assert.equal(new ServerLoad().header(), 'TEXT named_metrics.rif:0')
  assert.equal(new ServerLoad().header(null), 'TEXT named_metrics.rif:0')
})

it('bad arguments throw TypeErrors, and an unknown form the option error', () => {
  const load = new ServerLoad()
  assert.throws(() => load.header('BIN'), { code: 'LB_INVALID_OPTION_VALUE', message: /form/ })
  assert.throws(() => load.header(1), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  const lease = new Balancer('random', ['a']).acquire()
  for (const bad of [undefined, null, 1, 'request', {}, lease]) {
    assert.throws(() => load.finish(bad), { name: 'TypeError' }, String(bad))
    assert.throws(() => load.cancel(bad), { name: 'TypeError' }, String(bad))
  }
  lease.cancel()
  // An object with only the class's prototype wraps no request: an error, not a crash.
  assert.throws(() => load.finish(Object.create(ServerRequest.prototype)))
  const r = load.start()
  assert.throws(() => load.finish(r, 1), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => load.finish(r, 'yes'), { name: 'TypeError' })
  assert.equal(r.done, false)
  assert.throws(() => load.setCpuUtilization('0.5'), { name: 'TypeError', code: 'ERR_INVALID_ARG_TYPE' })
  assert.throws(() => load.setMemUtilization(), { name: 'TypeError' })
  assert.throws(() => new ServerRequest())
  load.cancel(r)
  assert.equal(load.inFlight, 0)
})
