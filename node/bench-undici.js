'use strict'
// What liblb/undici adds per request: undici's `request` through
// `new Agent().compose(interceptor(balancer))` against the same `request` through a plain
// `new Agent()`, both to one keep-alive loopback server (in a child process, answering 2 bytes).
// Rounds alternate between the two so drift (CPU frequency, other load) hits both alike; the
// report is the median round. `node bench-undici.js [requests per round] [rounds]`.
// Besides wall time it reports this process's CPU time per request (the server is another
// process): on a loaded machine wall time mostly measures the scheduler, CPU time the client's
// own work, interceptor included.
//
// A third arm composes a pass-through interceptor: what undici's compose costs by itself.
// Two shapes: one request at a time (latency: the overhead in microseconds per request) and 32
// in flight (throughput: the overhead as a share of the client's CPU per request).

const { fork } = require('node:child_process')
const http = require('node:http')
const { Agent, request } = require('undici')
const { Balancer } = require('.')
const { interceptor } = require('./undici')

if (process.argv[2] === 'server') {
  const server = http.createServer((req, res) => {
    res.writeHead(200, { 'content-length': '2' })
    res.end('ok')
  })
  server.keepAliveTimeout = 60_000
  server.listen(0, '127.0.0.1', () => process.send(server.address().port))
  process.on('disconnect', () => process.exit(0))
  return
}

const perRound = Number(process.argv[2] ?? 4000)
const rounds = Number(process.argv[3] ?? 7)

async function one(dispatcher, url) {
  const { body } = await request(url, { dispatcher })
  await body.text()
}

// Microseconds per request for `n` requests, `inFlight` at a time: wall time, and this
// process's CPU time in `cpu` (an array the round's figure is pushed onto).
async function round(dispatcher, url, n, inFlight, cpu = []) {
  const started = process.hrtime.bigint()
  const used = process.cpuUsage()
  let left = n
  const worker = async () => {
    while (left-- > 0) await one(dispatcher, url)
  }
  await Promise.all(Array.from({ length: inFlight }, worker))
  const { user, system } = process.cpuUsage(used)
  cpu.push((user + system) / n)
  return Number(process.hrtime.bigint() - started) / 1e3 / n
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

async function main() {
  const child = fork(__filename, ['server'], { stdio: 'inherit' })
  const port = await new Promise((resolve) => child.once('message', resolve))
  const node = `127.0.0.1:${port}`
  const plain = new Agent({ connections: 32 })
  const balancer = new Balancer('round_robin', [node])
  const balanced = new Agent({ connections: 32 }).compose(interceptor(balancer))
  // undici's own cost of composing an interceptor (a pass-through one), for comparison.
  const composed = new Agent({ connections: 32 }).compose((dispatch) => (opts, handler) => dispatch(opts, handler))
  const direct = `http://${node}/`
  const logical = 'http://svc.internal/'
  console.log(`node ${process.version}, undici ${require('undici/package.json').version}; ${rounds} rounds x ${perRound} requests, median round`)
  for (const inFlight of [1, 32]) {
    // Warm up both (connections, JIT).
    await round(plain, direct, perRound, inFlight)
    await round(balanced, logical, perRound, inFlight)
    await round(composed, direct, perRound, inFlight)
    const a = []
    const b = []
    const c = []
    const [ca, cb, cc] = [[], [], []]
    for (let r = 0; r < rounds; r++) {
      a.push(await round(plain, direct, perRound, inFlight, ca))
      b.push(await round(balanced, logical, perRound, inFlight, cb))
      c.push(await round(composed, direct, perRound, inFlight, cc))
    }
    const [base, lb, pass] = [median(a), median(b), median(c)]
    console.log(
      `${String(inFlight).padStart(2)} in flight: plain Agent ${base.toFixed(1)} us/request; ` +
        `with liblb ${lb.toFixed(1)} us/request: +${(lb - base).toFixed(1)} us, ratio ${(lb / base).toFixed(3)} ` +
        `(a pass-through interceptor: ${pass.toFixed(1)} us, ratio ${(pass / base).toFixed(3)})`,
    )
    const [cpuBase, cpuLb, cpuPass] = [median(ca), median(cb), median(cc)]
    console.log(
      `   client CPU: plain ${cpuBase.toFixed(1)} us/request; with liblb ${cpuLb.toFixed(1)}: ` +
        `+${(cpuLb - cpuBase).toFixed(1)} us, ratio ${(cpuLb / cpuBase).toFixed(3)} ` +
        `(pass-through ${cpuPass.toFixed(1)}, ratio ${(cpuPass / cpuBase).toFixed(3)})`,
    )
  }
  // The binding's share: the request loop alone (Balancer.request, attempt, finish), and a
  // lease alone (acquire, finish), in a tight loop.
  const loop = new Balancer('round_robin', [node])
  const tight = (f) => {
    for (let i = 0; i < 20_000; i++) f()
    const times = []
    for (let r = 0; r < rounds; r++) {
      const started = process.hrtime.bigint()
      for (let i = 0; i < 100_000; i++) f()
      times.push(Number(process.hrtime.bigint() - started) / 1e3 / 100_000)
    }
    return median(times)
  }
  const policy = { maxAttempts: 3 }
  const requestUs = tight(() => {
    const r = loop.request(null, policy)
    r.finish(r.attempt(), { ok: true })
  })
  const leaseUs = tight(() => loop.acquire().finish({ ok: true }))
  console.log(`binding alone: request + attempt + finish ${requestUs.toFixed(2)} us, acquire + finish ${leaseUs.toFixed(2)} us`)
  const [stats] = balancer.stats()
  if (stats.inFlight !== 0 || stats.failures !== 0) throw new Error(`unexpected stats ${JSON.stringify(stats)}`)
  await plain.close()
  await balanced.close()
  await composed.close()
  child.disconnect()
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
