'use strict'
// Speed of the Node binding: ns per call for one pick of each algorithm, for pickMany and attempts
// per answer, for npm's `hashring` (a pure-JS ketama ring) and for `noop()`, an export of this
// same addon that does nothing: the floor every call pays to cross from JavaScript into Rust and
// back (`noop()` for an unkeyed `pick()`, `noop(key)` for a keyed `pick(key)`). Issue 13's target:
// a pick within 2x its floor. Last, a big ring built synchronously and with Balancer.create /
// updateAsync (libuv pool): time until ready and how the event loop fares meanwhile.
//
//   cd node && npm run build && node bench.js [--quick] [--leases]
//
// `--leases` runs only the floor, `pick() round_robin` and the lease and request cases.
//
// Each figure is the best of several rounds (after a warm-up), timed in process CPU time, so
// it estimates the cost on an idle core even while other processes load the machine. Absolute
// numbers are machine-dependent: compare ratios.
const { Balancer, algorithms, keyedAlgorithms, noop } = require('.')
const HashRing = require('hashring')

const quick = process.argv.includes('--quick')
const leasesOnly = process.argv.includes('--leases')
const CALLS = quick ? 100_000 : 1_000_000
const RUNS = quick ? 3 : 7
const BATCH = 1000
const NODES = Array.from({ length: 10 }, (_, i) => `backend-${i}.example:8080`)
// More distinct keys than hashring's default LRU cache (5000), so its cache mostly misses.
const KEYS = Array.from({ length: 1 << 16 }, (_, i) => `user-${i * 2654435761}`)
const MASK = KEYS.length - 1
const KEYED = new Set(keyedAlgorithms())
// issue 13: a single pick within this many times its floor.
const TARGET = 2

/** CPU time used by this process so far, in ns (not wall time: other processes on a busy
 * machine do not inflate it). */
const cpuNs = () => {
  const { user, system } = process.cpuUsage()
  return (user + system) * 1000
}

// Every case is timed once per round, round after round, and keeps its best round: a burst of
// load from elsewhere then hits one round of every case instead of all rounds of one case.
const cases = []
/** Registers a case: `body(n)` makes `n` calls; the result is reported per call / `per`. */
const bench = (name, note, body, { calls = CALLS, per = 1 } = {}) => {
  const c = { name, note, body, calls, per, ns: Infinity }
  cases.push(c)
  return c
}

const floor = bench('noop() (floor)', 'floor of an unkeyed pick()', (n) => {
  for (let i = 0; i < n; i++) noop()
})
const keyFloor = bench('noop(key) (floor)', 'floor of a keyed pick(key): the same loop over string keys', (n) => {
  for (let i = 0; i < n; i++) noop(KEYS[i & MASK])
})

// What napi-rs 3's generated class members cost, for comparison with the hand-written hot
// methods (see node/src/fast.rs): a getter without arguments, and a method with one.
{
  const b = new Balancer('round_robin', NODES)
  bench('size (generated getter)', 'napi-rs class accessor: one length read', (n) => {
    for (let i = 0; i < n; i++) b.size
  })
  bench('has(id) (generated method)', 'napi-rs class method, one string argument', (n) => {
    for (let i = 0; i < n; i++) b.has('backend-3.example:8080')
  })
}

// One pick per call, every algorithm (keyed ones get a string key).
const single = {}
for (const name of algorithms()) {
  const b = new Balancer(name, NODES, { seed: 1 })
  single[name] = KEYED.has(name)
    ? bench(`pick() ${name}`, 'string key', (n) => {
        for (let i = 0; i < n; i++) b.pick(KEYS[i & MASK])
      })
    : bench(`pick() ${name}`, 'no key', (n) => {
        for (let i = 0; i < n; i++) b.pick()
      })
}

// Keys as bytes instead of strings (borrowed in place, no UTF-8 conversion), and the fast hash.
{
  const b = new Balancer('ring', NODES)
  const bufs = KEYS.slice(0, 4096).map((k) => Buffer.from(k))
  bench('pick(Buffer) ring', 'Buffer key', (n) => {
    for (let i = 0; i < n; i++) b.pick(bufs[i & 4095])
  })
  const x = new Balancer('ring', NODES, { hash: 'xxh3' })
  bench('pick() ring, hash xxh3', 'string key', (n) => {
    for (let i = 0; i < n; i++) x.pick(KEYS[i & MASK])
  })
}

// npm hashring: ketama-style ring in JavaScript (md5, 40 vnodes x 4 replicas, LRU cache of 5000).
const ring = new HashRing(NODES)
const hashringMiss = bench('hashring.get()', '65536 distinct keys: LRU cache mostly misses', (n) => {
  for (let i = 0; i < n; i++) ring.get(KEYS[i & MASK])
})
const hot = KEYS.slice(0, 1024)
const hashringHit = bench('hashring.get() cached', '1024 distinct keys: every lookup hits its LRU cache', (n) => {
  for (let i = 0; i < n; i++) ring.get(hot[i & 1023])
})

// pickMany: one call per batch of BATCH keys; reported per key.
const batch = Array.from({ length: BATCH }, (_, i) => KEYS[(i * 37) & MASK])
const perKey = {}
for (const name of algorithms()) {
  const b = new Balancer(name, NODES, { seed: 1 })
  perKey[name] = bench(`pickMany() ${name}, per key`, `batches of ${BATCH} string keys`, (n) => {
    for (let i = 0; i < n; i++) b.pickMany(batch)
  }, { calls: Math.max(1, Math.floor(CALLS / BATCH)), per: BATCH })
}

// attempts: every node in retry order, reported per answer (10 answers per call).
const perAttempt = {}
for (const name of algorithms()) {
  const b = new Balancer(name, NODES, { seed: 1 })
  const keyed = KEYED.has(name)
  perAttempt[name] = bench(`attempts() ${name}, per answer`, `${NODES.length} answers per call`, (n) => {
    for (let i = 0; i < n; i++) b.attempts(keyed ? KEYS[i & MASK] : undefined)
  }, { calls: Math.max(1, Math.floor(CALLS / 10)), per: NODES.length })
}

// Leases and requests (issue 23 item 5): what one request's bookkeeping costs through the
// binding, on the cheapest algorithm (compare with `pick() round_robin`). Leases dropped without
// finish are released by the garbage collector: these cases include the collector's work, and
// each round also waits two event-loop turns so that deferred finalizers run inside the timing.
const leaseCases = []
const getterCases = []
{
  const b = new Balancer('round_robin', NODES)
  const done = { ok: true }
  const failed = { ok: false }
  const policy = { maxAttempts: 3 }
  leaseCases.push(
    bench('acquire() + finish()', 'round_robin; outcome measured', (n) => {
      for (let i = 0; i < n; i++) b.acquire().finish()
    }),
    bench('acquire() + finish({ ok: true })', 'round_robin', (n) => {
      for (let i = 0; i < n; i++) b.acquire().finish(done)
    }),
    bench('acquire() + cancel()', 'round_robin', (n) => {
      for (let i = 0; i < n; i++) b.acquire().cancel()
    }),
    bench('request() + attempt() + finish()', 'round_robin, { maxAttempts: 3 }, success', (n) => {
      for (let i = 0; i < n; i++) {
        const r = b.request(null, policy)
        r.finish(r.attempt(), done)
      }
    }),
    bench('request(): two attempts', 'round_robin, a failure then a success', (n) => {
      for (let i = 0; i < n; i++) {
        const r = b.request(null, policy)
        r.finish(r.attempt(), failed)
        r.finish(r.attempt(), done)
      }
    }, { calls: CALLS / 2 }),
    bench('acquire() unfinished', 'round_robin; released when collected', (n) => {
      for (let i = 0; i < n; i++) b.acquire()
    }),
  )
  const lease = b.acquire()
  lease.tag // eslint-disable-line no-unused-expressions
  const getters = { id: (l) => l.id, weight: (l) => l.weight, tag: (l) => l.tag, done: (l) => l.done }
  for (const [name, get] of Object.entries(getters)) {
    getterCases.push(bench(`lease.${name}`, 'getter of one open lease', (n) => {
      for (let i = 0; i < n; i++) get(lease)
    }))
  }
}
const turn = () => new Promise((resolve) => setImmediate(resolve))
if (leasesOnly) {
  const keep = new Set([floor, keyFloor, single.round_robin, ...leaseCases, ...getterCases])
  cases.splice(0, cases.length, ...cases.filter((c) => keep.has(c)))
}

;(async () => {
  for (const c of cases) c.body(Math.min(c.calls, 50_000)) // warm-up: JIT, caches
  await turn()
  for (let round = 0; round < RUNS; round++) {
    for (const c of cases) {
      const start = cpuNs()
      c.body(c.calls)
      if (leaseCases.includes(c)) {
        await turn()
        await turn()
      }
      c.ns = Math.min(c.ns, (cpuNs() - start) / c.calls / c.per)
    }
  }

  const fmt = (x) => x.toFixed(1).padStart(8)
  console.log(`liblb Node binding bench: ${process.version}, ${NODES.length} nodes, best of ${RUNS} runs of ${CALLS} calls\n`)
  console.log('| what | ns/call | x noop | note |')
  console.log('|---|---:|---:|---|')
  for (const c of cases) console.log(`| ${c.name} | ${fmt(c.ns)} | ${(c.ns / floor.ns).toFixed(2)} | ${c.note} |`)

  if (!leasesOnly) {
    console.log(`\nRatios (target: pick within ${TARGET}x its floor, noop() unkeyed, noop(key) keyed)`)
    console.log('| algorithm | pick | floor | pick / floor | pickMany per key / pick | attempts per answer / pick |')
    console.log('|---|---:|---:|---:|---:|---:|')
    let within = 0
    for (const name of algorithms()) {
      const pick = single[name].ns
      const f = KEYED.has(name) ? keyFloor.ns : floor.ns
      if (pick / f <= TARGET) within++
      console.log(
        `| ${name} | ${fmt(pick)} | ${fmt(f)} | ${(pick / f).toFixed(2)}x | ${(perKey[name].ns / pick).toFixed(2)}x | ${(perAttempt[name].ns / pick).toFixed(2)}x |`,
      )
  }
  console.log(`\n${within} of ${algorithms().length} algorithms pick within ${TARGET}x their floor`)
  console.log(`  ring pick / hashring.get (cache misses) ${(single.ring.ns / hashringMiss.ns).toFixed(2)}x`)
  console.log(`  ring pick / hashring.get (cache hits)   ${(single.ring.ns / hashringHit.ns).toFixed(2)}x`)
  }
  console.log('\nLeases and requests (round_robin): ns per call, and x noop() / x pick() round_robin')
  for (const c of [...leaseCases, ...getterCases]) {
    console.log(`  ${c.name.padEnd(34)} ${fmt(c.ns)} ns  ${(c.ns / floor.ns).toFixed(1).padStart(6)}x noop  ${(c.ns / single.round_robin.ns).toFixed(1).padStart(6)}x pick`)
  }

  // Big builds off the event loop: a ring of 2000 nodes (weights 1-5, ~960,000 SHA-256 points).
  // For each way of building it: wall time until the balancer is ready, the event loop's turns
  // meanwhile (a setImmediate ticker) and its longest stall between two turns. The synchronous
  // constructor is the floor for the build time; its stall is the whole build. The ticker keeps the
  // JavaScript thread busy, competing with the pool thread for the cores: the "idle loop" row is
  // the same build with no ticker.
  if (leasesOnly) return
  const BIG = Array.from({ length: 2000 }, (_, i) => ({ id: `10.0.${i >> 8}.${i & 255}:80`, weight: 1 + (i % 5) }))
  const { performance } = require('node:perf_hooks')
  async function loopDuring(start, ticking = true) {
    let turns = 0
    let last = performance.now()
    let stall = 0
    let done = false
    const tick = () => {
      const now = performance.now()
      stall = Math.max(stall, now - last)
      last = now
      if (done) return
      turns++
      setImmediate(tick)
    }
    if (ticking) setImmediate(tick)
    const t0 = performance.now()
    await start()
    const ms = performance.now() - t0
    done = true
    stall = Math.max(stall, performance.now() - last)
    return { ms, turns, stall }
  }
  {
    const ring = new Balancer('ring', BIG.slice(0, 10))
    const idle = new Set(['await Balancer.create(ring), idle loop'])
    const builds = {
      'new Balancer(ring) (sync, floor)': async () => new Balancer('ring', BIG),
      'await Balancer.create(ring)': () => Balancer.create('ring', BIG),
      'await Balancer.create(ring), idle loop': () => Balancer.create('ring', BIG),
      'ring.update(nodes) (sync)': async () => ring.update(BIG),
      'await ring.updateAsync(nodes)': () => ring.updateAsync(BIG),
    }
    const best = {}
    for (let round = 0; round < (quick ? 2 : 5); round++) {
      for (const [name, start] of Object.entries(builds)) {
        const r = await loopDuring(start, !idle.has(name))
        const b = best[name]
        if (b === undefined || r.ms < b.ms) best[name] = r
      }
    }
    const floorMs = best['new Balancer(ring) (sync, floor)'].ms
    console.log(`\nBig builds: ring of ${BIG.length} nodes (weights 1-5), best of ${quick ? 2 : 5} (wall time)`)
    console.log('| build | ms until ready | x sync constructor | event-loop turns meanwhile | longest loop stall, ms |')
    console.log('|---|---:|---:|---:|---:|')
    for (const [name, r] of Object.entries(best)) {
      const loop = idle.has(name) ? '| (no ticker) | (no ticker) |' : `| ${r.turns} | ${r.stall.toFixed(1)} |`
      console.log(`| ${name} | ${r.ms.toFixed(1)} | ${(r.ms / floorMs).toFixed(2)}x ${loop}`)
    }
  }
})()
