// Smoke test of an installed liblb, from TypeScript: compiled with tsc --strict against the
// package's index.d.ts, then run (tests/packages/README.md).
import { Balancer, LoadReport, ServerLoad, parseOrca } from 'liblb'

function check(what: string, got: string, want: string): void {
  if (got !== want) throw new Error(`${what}: got ${got}, want ${want}`)
}

const ring: Balancer = new Balancer('ring', ['NodeA', 'NodeB', 'NodeC'], { vnodes: 3 })
const got: string[] = ['Key1', 'Key2', 'Key3'].map((k: string): string => ring.pick(k))
check('ring', got.join(' '), 'NodeB NodeA NodeC')

const wrr = new Balancer('weighted_round_robin', [{ id: 'a', weight: 5 }, 'b', 'c'])
const seq: string = Array.from({ length: 7 }, (): string => wrr.pick()).join('')
check('wrr', seq, 'aabacaa')

let code: unknown
try {
  ring.remove('nope')
} catch (err) {
  code = (err as { code?: unknown }).code
}
check('unknown node error', String(code), 'LB_UNKNOWN_NODE')
const report: LoadReport = parseOrca('TEXT cpu_utilization:0.5')
check('orca', String(report.cpuUtilization), '0.5')
const server = new ServerLoad()
server.setApplicationUtilization(0.3)
server.finish(server.start(), true)
check('server load', String(parseOrca(server.header('bin')).applicationUtilization), '0.3')
const weighed = new Balancer('client_side_wrr', ['a', 'b'], { blackout_period_ms: 0 })
weighed.reportLoad('a', parseOrca('TEXT application_utilization=0.9,rps_fractional=100'))
weighed.reportLoad('b', 'TEXT application_utilization=0.3,rps_fractional=100')
const picks: string[] = Array.from({ length: 4 }, () => weighed.pick())
check('client_side_wrr', picks.sort().join(''), 'abbb')
console.log(`typescript: ring ${got.join(' ')}, wrr ${seq}`)
