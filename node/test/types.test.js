'use strict'
// index.d.ts, undici.d.ts and grpc.d.ts type-check TypeScript programs using every method (and reject
// misuses). One tsc run for both: loading the libraries' types is most of its time.
const { it } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const path = require('node:path')

it('index.d.ts, undici.d.ts and grpc.d.ts accept their TypeScript quickstarts under --strict', () => {
  const tsc = require.resolve('typescript/bin/tsc')
  const fixtures = ['quickstart.ts', 'undici.ts', 'grpc.ts'].map((name) => path.join(__dirname, 'fixtures', name))
  const args = [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', ...fixtures]
  try {
    execFileSync(process.execPath, args, { encoding: 'utf8', stdio: 'pipe' })
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`)
  }
})

it("index.d.ts's ErrorCode names every code the core can give", () => {
  const fs = require('node:fs')
  const core = fs.readFileSync(path.join(__dirname, '..', '..', 'core', 'src', 'error.rs'), 'utf8')
  const given = new Set([...core.matchAll(/=> "(LB_[A-Z0-9_]+)"/g)].map((m) => m[1]))
  const types = fs.readFileSync(path.join(__dirname, '..', 'index.d.ts'), 'utf8')
  const union = types.slice(types.indexOf('export type ErrorCode'))
  const body = union.slice(0, union.search(/\n\S/))
  const typed = new Set([...body.matchAll(/'(LB_[A-Z0-9_]+)'/g)].map((m) => m[1]))
  assert.ok(given.size >= 15, `read ${given.size} codes from core/src/error.rs`)
  // The binding's own codes (a lease finished twice, a batch too big) are typed as well.
  const missing = [...given].filter((code) => !typed.has(code))
  assert.deepEqual(missing, [], 'core error codes missing from ErrorCode')
})
