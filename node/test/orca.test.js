'use strict'
// ORCA load reports from Node (issue 25): parseOrca. The parser is the core's (its Rust tests
// port Envoy's orca_parser_test.cc); these tests check what the binding adds: argument types,
// the report object, the errors.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Balancer, parseOrca } = require('..')

// A double field of an OrcaLoadReport (wire type 1), and a named_metrics entry (field 8).
const double = (field, value) => {
  const b = Buffer.alloc(9)
  b[0] = (field << 3) | 1
  b.writeDoubleLE(value, 1)
  return b
}
const named = (key, value) => {
  const body = Buffer.concat([Buffer.from([(1 << 3) | 2, key.length]), Buffer.from(key), double(2, value)])
  return Buffer.concat([Buffer.from([(8 << 3) | 2, body.length]), body])
}
const PROTO = Buffer.concat([double(1, 0.5), double(6, 200), double(7, 4), named('rif', 7), double(9, 0.75)])

it('proto bytes parse to their fields', () => {
  assert.deepEqual(parseOrca(PROTO), {
    cpuUtilization: 0.5,
    memUtilization: 0,
    applicationUtilization: 0.75,
    rpsFractional: 200,
    eps: 4,
    rps: 0,
    requestCost: {},
    utilization: {},
    namedMetrics: { rif: 7 },
  })
  assert.deepEqual(parseOrca(new Uint8Array(PROTO)), parseOrca(PROTO))
})

it('every header form gives the same report, as a string or its bytes', () => {
  const expected = parseOrca(PROTO)
  const forms = [
    `BIN ${PROTO.toString('base64')}`,
    'JSON {"cpuUtilization": 0.5, "applicationUtilization": 0.75, "rpsFractional": 200, "eps": 4, "namedMetrics": {"rif": 7}}',
    'TEXT cpu_utilization:0.5, application_utilization:0.75, rps_fractional:200, eps:4, named_metrics.rif:7',
  ]
  for (const form of forms) {
    assert.deepEqual(parseOrca(form), expected, form)
    assert.deepEqual(parseOrca(Buffer.from(form)), expected, form)
  }
})

it('maps keep the report order, and a metric named __proto__ is just a metric', () => {
  const r = parseOrca('TEXT named_metrics.z:1, named_metrics.__proto__:2, named_metrics.a:3')
  assert.deepEqual(Object.keys(r.namedMetrics), ['z', '__proto__', 'a'])
  assert.equal(Object.getPrototypeOf(r.namedMetrics), Object.prototype)
  assert.equal(Object.getOwnPropertyDescriptor(r.namedMetrics, '__proto__').value, 2)
})

it('bad reports throw LB_INVALID_LOAD_REPORT saying what is wrong', () => {
  const cases = [
    ['TEXT cpu_utilization:high', 'cpu_utilization'],
    ['TEXT cpu:0.3', 'cpu'],
    ['BIN ***', 'base64'],
    ['JSON {"cpu": 1}', 'cpu'],
    ['YAML cpu: 1', 'unsupported ORCA header format'],
    [Buffer.from([1 << 3, 1]), 'wire type'],
    [PROTO.subarray(0, 5), 'byte'],
  ]
  for (const [data, words] of cases) {
    assert.throws(
      () => parseOrca(data),
      (err) => err.code === 'LB_INVALID_LOAD_REPORT' && err.message.includes(words),
      String(data),
    )
  }
})

it('other types are a TypeError naming the argument', () => {
  for (const data of [undefined, null, 1, {}, ['TEXT eps:1'], new Uint16Array(2)]) {
    assert.throws(
      () => parseOrca(data),
      (err) => err instanceof TypeError && /data must be a string, Buffer or Uint8Array/.test(err.message),
    )
  }
})

describe('reportLoad and leases with a load report (client_side_wrr, gRFC A58)', () => {
  const busy = 'TEXT application_utilization=0.9,rps_fractional=100'
  const idle = 'TEXT application_utilization=0.3,rps_fractional=100'
  const counts = (b, n) => {
    const c = { a: 0, b: 0, c: 0 }
    for (let i = 0; i < n; i++) c[b.pick()]++
    return c
  }

  it("weighs nodes by their reports: gRPC's Basic case (1:3, the silent node the mean)", () => {
    const b = new Balancer('client_side_wrr', ['a', 'b', 'c'], { blackout_period_ms: 0 })
    b.reportLoad('a', busy) // header text
    b.reportLoad('b', parseOrca(idle)) // the parsed object
    assert.deepEqual(counts(b, 600), { a: 100, b: 300, c: 200 })
  })

  it('takes the report a lease finishes with', () => {
    const b = new Balancer('client_side_wrr', ['a', 'b', 'c'], {
      blackout_period_ms: 0,
      weight_update_period_ms: 100,
    })
    const lease = b.acquire()
    assert.equal(lease.id, 'a')
    lease.finish({ load: Buffer.from(busy) })
    assert.equal(lease.done, true)
    b.acquire().finish({ ok: true, latencyMs: 2, load: parseOrca(idle) })
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200)
    assert.deepEqual(counts(b, 600), { a: 100, b: 300, c: 200 })
  })

  it('refuses bad reports and unknown nodes, changing nothing', () => {
    const b = new Balancer('client_side_wrr', ['a', 'b', 'c'], { blackout_period_ms: 0 })
    assert.throws(() => b.reportLoad('zz', busy), { code: 'LB_UNKNOWN_NODE' })
    assert.throws(() => b.reportLoad('a', 'TEXT cpu:1'), { code: 'LB_INVALID_LOAD_REPORT' })
    assert.throws(() => b.reportLoad('a', 0.5), TypeError)
    assert.throws(() => b.reportLoad('a', { cpuUtilization: 'high' }), /report.cpuUtilization must be a number/)
    assert.throws(() => b.reportLoad('a', { namedMetrics: { rif: 'x' } }), /report.namedMetrics\["rif"\] must be a number/)
    assert.throws(() => b.reportLoad('a', { rps: -1 }), /report.rps must be a whole number/)
    const lease = b.acquire()
    assert.throws(() => lease.finish({ load: 'BIN !' }), { code: 'LB_INVALID_LOAD_REPORT' })
    assert.equal(lease.done, false) // still open after the bad report
    lease.finish()
    assert.deepEqual([b.pick(), b.pick(), b.pick()], ['b', 'c', 'a'])
  })

  it('reads a report object field by field, missing fields as 0', () => {
    const b = new Balancer('client_side_wrr', ['a', 'b'], { blackout_period_ms: 0 })
    b.reportLoad('a', { rpsFractional: 100, applicationUtilization: 0.9 })
    b.reportLoad('b', { rpsFractional: 100, cpuUtilization: 0.3, namedMetrics: { rif: 3 } })
    const c = { a: 0, b: 0 }
    for (let i = 0; i < 400; i++) c[b.pick()]++
    assert.deepEqual(c, { a: 100, b: 300 })
  })
})

describe('prequal probes', () => {
  it('hands out probes due and targets, takes answers, refuses bad ones', () => {
    const b = new Balancer('prequal', ['a', 'b', 'c'], { seed: 7 })
    assert.equal(b.probesDue(), 0)
    b.pick() // an empty pool: a random node
    assert.equal(b.probesDue(), 3)
    assert.equal(b.probesDue(), 0)
    assert.deepEqual(b.probeTargets(5).sort(), ['a', 'b', 'c'])
    b.offerProbe('a', 5, 20)
    b.offerProbe('b', 0, 1)
    assert.equal(b.pick(), 'b') // idle and fast
    assert.throws(() => b.offerProbe('zz', 0, 1), { code: 'LB_UNKNOWN_NODE' })
    assert.throws(() => b.offerProbe('a', '5', 1), TypeError)
    assert.throws(() => b.offerProbe('a', -1, 1), RangeError)
    assert.throws(() => b.offerProbe('a', 0, 'x'), TypeError)
    assert.throws(() => b.probeTargets(-1), RangeError)
    b.offerProbe('c', 2 ** 40, 1) // saturates
    b.reportLoad('c', 'TEXT named_metrics.latency_ms:0.5,named_metrics.rif:0')
    assert.throws(() => new Balancer('prequal', ['a'], { q_rif: 101 }), { code: 'LB_INVALID_OPTION_VALUE' })
  })
})
