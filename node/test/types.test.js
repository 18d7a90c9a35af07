'use strict'
// index.d.ts type-checks a TypeScript program using every method (and rejects misuses).
const { it } = require('node:test')
const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const path = require('node:path')

function check(name) {
  const tsc = require.resolve('typescript/bin/tsc')
  const fixture = path.join(__dirname, 'fixtures', name)
  const args = [tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext', fixture]
  try {
    execFileSync(process.execPath, args, { encoding: 'utf8', stdio: 'pipe' })
  } catch (err) {
    assert.fail(`tsc failed:\n${err.stdout}${err.stderr}`)
  }
}

it('index.d.ts accepts the TypeScript quickstart under --strict', () => check('quickstart.ts'))

it('undici.d.ts accepts the undici quickstart under --strict', () => check('undici.ts'))
