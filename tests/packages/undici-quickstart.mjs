// liblb/undici quickstart (docs/node-http.md): three local servers, one failing with 503.
import http from 'node:http'
import { Agent, fetch, request, setGlobalDispatcher } from 'undici'
import { Balancer, RetryBudget } from 'liblb'
import { interceptor } from 'liblb/undici'

// Stand-ins for three instances of your service; the third answers 503.
const servers = await Promise.all([0, 1, 2].map((i) => new Promise((resolve) => {
  const server = http.createServer((req, res) => {
    res.writeHead(i === 2 ? 503 : 200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ server: i, host: req.headers.host }))
  })
  server.listen(0, '127.0.0.1', () => resolve(server))
})))
const nodes = servers.map((s) => `127.0.0.1:${s.address().port}`) // node ids are host:port

const balancer = new Balancer('round_robin', nodes, { consecutive_failures: 2, budget: new RetryBudget() })
const agent = new Agent().compose(interceptor(balancer, { maxAttempts: 3 }))
setGlobalDispatcher(agent) // or pass { dispatcher: agent } to each call

for (let i = 0; i < 6; i++) {
  // The 503 is retried on another node; the caller only sees the answer that worked.
  const { statusCode, body } = await request('http://orders.internal/health')
  console.log(statusCode, await body.json()) // 200 { server: 0 or 1, host: 'orders.internal' }
}
console.log((await fetch('http://orders.internal/health')).status) // 200
for (const s of balancer.stats()) console.log(s.id, s.status, `requests=${s.requests} failures=${s.failures}`)
// ... the third node is 'ejected' after 2 failures; its keys and traffic go elsewhere.

await agent.close()
for (const server of servers) server.close()
