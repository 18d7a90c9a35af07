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
