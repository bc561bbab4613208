// The official E2B JS SDK (npm `e2b`), normal mode, against `e2b serve`.
// Run by test_sdk_js.py with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at it and
// E2B_JS_SDK_DIR naming the directory whose node_modules holds the pinned SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createRequire } from 'node:module'
import { pathToFileURL } from 'node:url'
import path from 'node:path'
import { randomUUID } from 'node:crypto'

const dir = process.env.E2B_JS_SDK_DIR
if (!dir) throw new Error('E2B_JS_SDK_DIR is not set: run scripts/setup (it installs the pinned npm e2b)')
const require = createRequire(path.join(dir, 'package.json'))
const { Sandbox } = await import(pathToFileURL(require.resolve('e2b')).href)

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

test('create, run, files, info, list, timeout, connect, metrics, pause/resume, kill', async () => {
  const tag = randomUUID()
  const sbx = await Sandbox.create({ metadata: { tag }, envs: { GREETING: 'hi' }, timeoutMs: 120_000 })
  try {
    assert.equal(await sbx.isRunning(), true)
    // e2b serve answers `domain: localhost:<edge port>`: host names reach this machine's edge.
    const edgePort = new URL(process.env.E2B_SANDBOX_URL).port
    assert.equal(sbx.getHost(8080), `8080-${sbx.sandboxId}.localhost:${edgePort}`)
    const out = await sbx.commands.run('echo $GREETING')
    assert.equal(out.stdout, 'hi\n')

    await sbx.files.write('/tmp/e2b-serve-js.txt', 'from js')
    assert.equal(await sbx.files.read('/tmp/e2b-serve-js.txt'), 'from js')
    const url = await sbx.downloadUrl('/tmp/e2b-serve-js.txt')
    const res = await fetch(url)
    assert.equal(res.status, 200)
    assert.equal(await res.text(), 'from js')

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.equal(info.metadata.tag, tag)

    const found = await Sandbox.list({ query: { metadata: { tag } } }).nextItems()
    assert.deepEqual(found.map((s) => s.sandboxId), [sbx.sandboxId])

    await sbx.setTimeout(60_000)
    const again = await Sandbox.connect(sbx.sandboxId)
    assert.equal((await again.commands.run('echo again')).stdout, 'again\n')

    let metrics = []
    for (let i = 0; i < 60 && metrics.length === 0; i++) {
      metrics = await sbx.getMetrics()
      if (metrics.length === 0) await sleep(500)
    }
    assert.ok(metrics.length > 0, 'no metrics sample')
    assert.ok(metrics[0].memUsed > 0)
    assert.ok(metrics[0].cpuCount >= 1)

    assert.equal(await sbx.pause(), true)
    assert.equal(await sbx.isRunning(), false)
    assert.equal((await sbx.getInfo()).state, 'paused')
    const resumed = await Sandbox.connect(sbx.sandboxId)
    assert.equal(await resumed.isRunning(), true)
    assert.equal((await resumed.commands.run('echo resumed')).stdout, 'resumed\n')
  } finally {
    assert.equal(await sbx.kill(), true)
  }
  assert.equal(await sbx.isRunning(), false)
  assert.equal(await Sandbox.kill(sbx.sandboxId), false)
})

test('set timeout expires the sandbox', async () => {
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  await sbx.setTimeout(1_000)
  let running = true
  for (let i = 0; i < 75 && running; i++) {
    await sleep(200)
    running = await sbx.isRunning()
  }
  assert.equal(running, false)
})

test('private ports, auto-resume, and options e2b serve cannot hold', async () => {
  const sbx = await Sandbox.create({
    timeoutMs: 60_000,
    network: { allowPublicTraffic: false },
    lifecycle: { onTimeout: 'pause', autoResume: true },
  })
  try {
    assert.equal(sbx.trafficAccessToken?.length, 64)
    const info = await sbx.getInfo()
    assert.equal(info.network?.allowPublicTraffic, false)
    assert.equal(info.lifecycle?.autoResume, true)
    // A user port without the token: 403 from the edge, before anything is connected.
    const res = await fetch(`${process.env.E2B_SANDBOX_URL}/`, {
      headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '8080' },
    })
    assert.equal(res.status, 403)
    assert.equal(await sbx.pause(), true)
    assert.equal((await sbx.commands.run('echo woke')).stdout, 'woke\n')
    assert.equal((await sbx.getInfo()).state, 'running')
  } finally {
    await sbx.kill()
  }
  await assert.rejects(
    Sandbox.create({ network: { allowOut: ['example.com'] } }),
    /network\.allowOut/,
  )
})
