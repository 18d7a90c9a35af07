// Smoke test of an installed liblb, from TypeScript: compiled with tsc --strict against the
// package's index.d.ts, then run (tests/packages/README.md).
import { Balancer, LoadReport, parseOrca } from 'liblb'

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
console.log(`typescript: ring ${got.join(' ')}, wrr ${seq}`)
