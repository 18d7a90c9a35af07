'use strict'
// The addon in several worker_threads at once: each worker loads it, builds its own balancers and
// picks concurrently with the others (a SharedArrayBuffer barrier releases them together). Every
// worker must give exactly the answers the main thread gives, and tearing a busy worker down must
// not disturb the rest of the process.
const { describe, it } = require('node:test')
const assert = require('node:assert/strict')
const { Worker } = require('node:worker_threads')
const { Balancer, algorithms } = require('..')

const WORKERS = 4
const NODES = ['n0', 'n1', 'n2', 'n3', { id: 'n4', weight: 3 }, { id: 'n5', weight: 0 }]
const KEYS = Array.from({ length: 2000 }, (_, i) => `key-${i}`)

// Body of each worker (run with `eval: true`). It reports every algorithm's answers for KEYS.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const { Balancer, algorithms } = require(workerData.addon)
const barrier = new Int32Array(workerData.barrier)
Atomics.add(barrier, 0, 1)
Atomics.notify(barrier, 0)
while (Atomics.load(barrier, 1) === 0) Atomics.wait(barrier, 1, 0, 1000)
const results = {}
for (let round = 0; round < workerData.rounds; round++) {
  for (const name of algorithms()) {
    const b = new Balancer(name, workerData.nodes, { seed: 1234 })
    const picks = workerData.keys.map((k) => b.pick(k))
    const many = b.pickMany(workerData.keys)
    const tries = b.attempts('retry-key', 3)
    b.add('late', 2)
    b.remove('n0')
    const after = b.pickMany(workerData.keys)
    results[name] = { picks, many, tries, after }
  }
}
parentPort.postMessage(results)
`

/** What the main thread computes for the same work. */
function expected() {
  const results = {}
  for (const name of algorithms()) {
    const b = new Balancer(name, NODES, { seed: 1234 })
    const picks = KEYS.map((k) => b.pick(k))
    const many = b.pickMany(KEYS)
    const tries = b.attempts('retry-key', 3)
    b.add('late', 2)
    b.remove('n0')
    const after = b.pickMany(KEYS)
    results[name] = { picks, many, tries, after }
  }
  return results
}

function startWorkers(count, rounds) {
  const barrier = new SharedArrayBuffer(8)
  const workers = Array.from(
    { length: count },
    () =>
      new Worker(WORKER_SOURCE, {
        eval: true,
        workerData: { addon: require.resolve('..'), barrier, nodes: NODES, keys: KEYS, rounds },
      }),
  )
  const view = new Int32Array(barrier)
  const release = () => {
    Atomics.store(view, 1, 1)
    Atomics.notify(view, 1)
  }
  return { workers, view, release }
}

const settle = (worker) =>
  new Promise((resolve, reject) => {
    let message
    worker.on('message', (m) => (message = m))
    worker.on('error', reject)
    worker.on('exit', (code) => (code === 0 ? resolve(message) : reject(new Error(`worker exited with ${code}`))))
  })

describe('worker_threads', () => {
  it('several workers create and use balancers at the same time, with the same answers', async () => {
    const { workers, view, release } = startWorkers(WORKERS, 3)
    const done = workers.map(settle)
    // Wait until every worker has loaded the addon, then release them together.
    while (Atomics.load(view, 0) < WORKERS) await new Promise((r) => setTimeout(r, 5))
    release()
    const results = await Promise.all(done)
    const want = expected()
    for (const got of results) {
      // Keyed and round robin answers are pure functions of the input; the random ones are
      // seeded, so each worker's single-threaded sequence equals the main thread's too.
      for (const name of algorithms()) assert.deepEqual(got[name], want[name], name)
    }
  })

  it('terminating busy workers leaves the main thread working', async () => {
    const { workers, view, release } = startWorkers(WORKERS, 1000)
    const exits = workers.map((w) => new Promise((resolve) => w.on('exit', resolve)))
    while (Atomics.load(view, 0) < WORKERS) await new Promise((r) => setTimeout(r, 5))
    release()
    await new Promise((r) => setTimeout(r, 50))
    await Promise.all(workers.map((w) => w.terminate()))
    await Promise.all(exits)
    const b = new Balancer('round_robin', ['a', 'b'])
    assert.deepEqual([b.pick(), b.pick(), b.pick()], ['a', 'b', 'a'])
  })
})
