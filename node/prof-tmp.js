const http = require('node:http')
const { Agent, request } = require('undici')
const { Balancer } = require('.')
const { interceptor } = require('./undici')
const mode = process.argv[2]
const server = http.createServer((req, res) => { res.writeHead(200, { 'content-length': '2' }); res.end('ok') })
server.keepAliveTimeout = 60000
server.listen(0, '127.0.0.1', async () => {
  const node = `127.0.0.1:${server.address().port}`
  const b = new Balancer('round_robin', [node])
  const d = mode === 'lb' ? new Agent().compose(interceptor(b)) : new Agent()
  const url = mode === 'lb' ? 'http://svc.internal/' : `http://${node}/`
  for (let r = 0; r < 5; r++) {
    let t = process.hrtime.bigint()
    for (let i = 0; i < 3000; i++) { const { body } = await request(url, { dispatcher: d }); await body.text() }
    console.log(mode, Number(process.hrtime.bigint() - t) / 3000 / 1e3, 'us', process.cpuUsage())
  }
  process.exit(0)
})
