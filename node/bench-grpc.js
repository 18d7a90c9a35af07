'use strict'
// What liblb/grpc adds per call: unary calls from a grpc-js `Client` to one loopback grpc-js
// server (in a child process), with grpc-js's default policy (pick_first) and with the `liblb`
// policy (round_robin over the one endpoint: a pick, a lease and the outcome per call). Rounds
// alternate between the two so drift hits both alike; the report is the median round, in
// wall time and in this process's CPU time. `node bench-grpc.js [calls per round] [rounds]`.

const { fork } = require('node:child_process')
const grpc = require('@grpc/grpc-js')
const liblbGrpc = require('./grpc')

const METHOD = '/bench.Echo/Say'
const identity = (b) => b
const service = {
  Say: { path: METHOD, requestStream: false, responseStream: false, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity },
}

if (process.argv[2] === 'server') {
  const server = new grpc.Server()
  server.addService(service, { Say: (call, callback) => callback(null, Buffer.from('ok')) })
  server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (error, port) => {
    if (error) throw error
    process.send(port)
  })
  process.on('disconnect', () => process.exit(0))
  return
}

const perRound = Number(process.argv[2] ?? 3000)
const rounds = Number(process.argv[3] ?? 7)

function call(client) {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(METHOD, identity, identity, Buffer.from('hi'), (error, reply) => (error ? reject(error) : resolve(reply))),
  )
}

// [wall, cpu] microseconds per call for `n` calls, one at a time.
async function round(client, n) {
  const wall = process.hrtime.bigint()
  const cpu = process.cpuUsage()
  for (let i = 0; i < n; i++) await call(client)
  const used = process.cpuUsage(cpu)
  return [Number(process.hrtime.bigint() - wall) / 1e3 / n, (used.user + used.system) / n]
}

const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1]

async function main() {
  const child = fork(__filename, ['server'], { stdio: 'inherit' })
  const port = await new Promise((resolve) => child.once('message', resolve))
  liblbGrpc.register()
  const target = `ipv4:127.0.0.1:${port}`
  const creds = grpc.credentials.createInsecure()
  const plain = new grpc.Client(target, creds)
  const balanced = new grpc.Client(target, creds, {
    'grpc.service_config': JSON.stringify({ loadBalancingConfig: [{ liblb: { algorithm: 'round_robin' } }] }),
  })
  console.log(`node ${process.version}, @grpc/grpc-js ${require('@grpc/grpc-js/package.json').version}; ${rounds} rounds x ${perRound} unary calls, median round`)
  await round(plain, perRound / 10) // warm up: connections, JIT
  await round(balanced, perRound / 10)
  const a = [[], []]
  const b = [[], []]
  for (let r = 0; r < rounds; r++) {
    const [pw, pc] = await round(plain, perRound)
    const [lw, lc] = await round(balanced, perRound)
    a[0].push(pw), a[1].push(pc), b[0].push(lw), b[1].push(lc)
  }
  for (const [i, what] of [[0, 'wall'], [1, 'cpu']]) {
    const [base, lb] = [median(a[i]), median(b[i])]
    console.log(`${what}: pick_first ${base.toFixed(1)} us/call; liblb ${lb.toFixed(1)} us/call: +${(lb - base).toFixed(1)} us, ratio ${(lb / base).toFixed(3)}`)
  }
  plain.close()
  balanced.close()
  child.kill()
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
