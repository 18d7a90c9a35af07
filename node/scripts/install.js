#!/usr/bin/env node
// npm's `install` step for liblb (package.json "scripts.install"). Plain Node, no npm
// dependencies, so it runs wherever the package lands: a linked folder (`npm install
// <clone>/node`), a copied folder (`--install-links`), or the published tarball.
//
//   1. In a packed copy (the tarball, or a folder copied by `--install-links`) whose
//      prebuilt.json names addons that are all present and unchanged (same SHA-256), and one of
//      them loads here (linux x64/arm64, glibc/musl), there is nothing to do: no Rust needed.
//      scripts/package.sh writes prebuilt.json for the addons it builds; nothing else does, so
//      an addon merely left in a checkout is never trusted.
//   2. Otherwise build it from source with cargo and copy it to `liblb.<platform>.node`, the
//      name the generated loader (index.js) looks for. The sources are either the enclosing
//      repository's workspace (this folder is <repo>/node: always built, cargo skips what is
//      fresh) or the self-contained workspace vendored into rust/ by scripts/vendor.js when the
//      package was packed.
//
// Environment: CARGO_TARGET_DIR (where cargo builds; default: the workspace's target/),
// LIBLB_BUILD_FROM_SOURCE=1 (skip step 1 and always build).
'use strict'

const { spawnSync } = require('node:child_process')
const crypto = require('node:crypto')
const fs = require('node:fs')
const path = require('node:path')

const pkgDir = path.resolve(__dirname, '..')
const say = (msg) => console.error(`liblb: ${msg}`)

function fail(msg) {
  say(`error: ${msg}`)
  process.exit(1)
}

// Does the generated loader find a working addon? Asked in a child process, so a half-loaded
// module never lingers here and a second check after the build sees the new file.
function addonLoads() {
  const probe = spawnSync(
    process.execPath,
    ['-e', "const { Balancer } = require(process.argv[1]); new Balancer('round_robin', ['a']).pick()", path.join(pkgDir, 'index.js')],
    { encoding: 'utf8' },
  )
  return { ok: probe.status === 0, why: (probe.stderr || '').trim().split('\n').slice(0, 3).join(' ') }
}

// Are the addons listed in prebuilt.json ({"liblb.<platform>.node": "<sha256>", ...}: one per
// platform the package was built for) all here, unchanged? 'none' without prebuilt.json,
// 'changed' if any listed addon is missing or differs, else 'ok'. Which addon this machine
// needs (arch, glibc or musl) is the generated loader's choice; addonLoads() then asks it.
function prebuiltState() {
  let listed
  try {
    listed = JSON.parse(fs.readFileSync(path.join(pkgDir, 'prebuilt.json'), 'utf8'))
  } catch {
    return 'none'
  }
  const entries = Object.entries(listed)
  const intact = entries.every(([file, sha256]) => {
    const addon = path.join(pkgDir, path.basename(file))
    return fs.existsSync(addon) && crypto.createHash('sha256').update(fs.readFileSync(addon)).digest('hex') === sha256
  })
  return entries.length > 0 && intact ? 'ok' : 'changed'
}

// The workspace to build: the repository around this folder, else the vendored copy.
function findWorkspace() {
  const repoManifest = path.join(pkgDir, '..', 'Cargo.toml')
  if (
    fs.existsSync(path.join(pkgDir, 'Cargo.toml')) &&
    fs.existsSync(repoManifest) &&
    /^\[workspace\]/m.test(fs.readFileSync(repoManifest, 'utf8'))
  ) {
    return { manifest: repoManifest, vendored: false }
  }
  const vendored = path.join(pkgDir, 'rust', 'Cargo.toml')
  if (fs.existsSync(vendored)) return { manifest: vendored, vendored: true }
  return null
}

// napi-rs's platform name for a Rust target triple (the suffix in `liblb.<platform>.node`),
// e.g. x86_64-unknown-linux-gnu -> linux-x64-gnu, aarch64-apple-darwin -> darwin-arm64.
function napiPlatform(triple) {
  const parts = triple.split('-')
  const archs = {
    x86_64: 'x64', aarch64: 'arm64', i686: 'ia32', armv7: 'arm', riscv64gc: 'riscv64',
    powerpc64le: 'ppc64', s390x: 's390x', loongarch64: 'loong64',
  }
  const arch = archs[parts[0]] || parts[0]
  const sys = parts.length === 4 ? parts[2] : parts[1]
  const abi = parts.length === 4 ? parts[3] : parts[2]
  if (sys === 'darwin') return `darwin-${arch}`
  if (sys === 'windows') return `win32-${arch}-${abi}`
  if (sys === 'freebsd') return `freebsd-${arch}`
  if (sys === 'linux' && abi === 'android') return `android-${arch}`
  if (sys === 'linux' && abi === 'androideabi') return `android-arm-eabi`
  return `${sys}-${arch}-${abi}`
}

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024, ...opts })
  if (r.error && r.error.code === 'ENOENT') {
    fail(
      `no prebuilt liblb addon loads on ${process.platform}-${process.arch}, and building it ` +
        `from source needs Rust: \`${cmd}\` is not on PATH (install Rust stable from https://rustup.rs)`,
    )
  }
  if (r.error) fail(`${cmd}: ${r.error.message}`)
  return r
}

function main() {
  const workspace = findWorkspace()
  if ((!workspace || workspace.vendored) && process.env.LIBLB_BUILD_FROM_SOURCE !== '1') {
    const prebuilt = prebuiltState()
    if (prebuilt === 'ok') {
      const probe = addonLoads()
      if (probe.ok) return
      say(`no prebuilt addon loads on ${process.platform}-${process.arch} (${probe.why}); building from source with cargo`)
    } else if (prebuilt === 'changed') {
      say('the prebuilt addons are not the ones prebuilt.json names (missing or changed): not using them; building from source with cargo')
    } else {
      say('no prebuilt addon for this package; building from source with cargo')
    }
  }
  if (!workspace) {
    fail(`no Rust sources to build from: neither ${path.join(pkgDir, '..', 'Cargo.toml')} (a liblb checkout) nor ${path.join(pkgDir, 'rust', 'Cargo.toml')} (a packed liblb)`)
  }
  const { manifest, vendored } = workspace
  const rustc = run(process.env.RUSTC || 'rustc', ['-vV'])
  const host = /^host: (\S+)$/m.exec(rustc.stdout || '')
  if (rustc.status !== 0 || !host) fail(`\`rustc -vV\` failed: ${rustc.stderr}`)
  const triple = host[1]

  // `--target <host>` like `napi build`, so the repo's own build and this one share cargo's
  // output. Diagnostics go to the terminal; the JSON messages on stdout name the artifact.
  const args = ['build', '--release', '--manifest-path', manifest, '-p', 'liblb-node', '--target', triple]
  say(`cargo ${args.join(' ')}`)
  const build = run('cargo', [...args, '--message-format=json-render-diagnostics'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  if (build.status !== 0) fail(`cargo build failed (exit ${build.status})`)
  let artifact = null
  for (const line of build.stdout.split('\n')) {
    if (!line.startsWith('{')) continue
    const msg = JSON.parse(line)
    if (msg.reason === 'compiler-artifact' && msg.target.kind.includes('cdylib') && msg.target.name === 'liblb_node') {
      artifact = msg.filenames.find((f) => /\.(so|dylib|dll)$/.test(f))
    }
  }
  if (!artifact) fail('cargo build succeeded but named no liblb_node library')

  // Copy, then rename: a reader never sees a half-written addon.
  const dest = path.join(pkgDir, `liblb.${napiPlatform(triple)}.node`)
  fs.copyFileSync(artifact, `${dest}.tmp`)
  fs.renameSync(`${dest}.tmp`, dest)
  say(`built ${path.basename(dest)}`)

  // A build inside the vendored copy used rust/target (hundreds of MB): the addon is all we keep.
  const localTarget = path.join(pkgDir, 'rust', 'target')
  if (vendored && path.resolve(artifact).startsWith(localTarget + path.sep)) {
    fs.rmSync(localTarget, { recursive: true, force: true })
  }

  const check = addonLoads()
  if (!check.ok) fail(`built ${dest}, but index.js still cannot load it: ${check.why}`)
}

if (require.main === module) main()
module.exports = { napiPlatform }
