import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { clockInit, encodeEnvelope, encodeEpochChange, epochChainFromJson, epochChainToJson, followEpochs, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import { afterAll, describe, expect, it } from 'vitest'
import { generateIdentity, loadCluster, loadIdentity, relayCommitteeOf, writeIdentity } from '../src/process/config.ts'
import { TestClient } from './helpers/client.ts'
import { TestCluster, freePort, until } from './helpers/cluster.ts'

const BIN = resolve(import.meta.dirname, '../bin/stead-relay.mjs')

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, LOG_LEVEL: '' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => done({ code, stdout, stderr }))
  })
}

const author = { secretKey: new Uint8Array(32).fill(7), publicKey: publicKeyOfSync(new Uint8Array(32).fill(7)) }
const deposit = (seq: number) => sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] }).then(encodeEnvelope)

let cluster: TestCluster | undefined
afterAll(async () => {
  await cluster?.stopAll()
})

/** Real relay processes through a committee change made with the operators' commands. */
describe('a committee change between real relays', () => {
  it('moves a relay to another address, replaces a relay by a new machine, rotates a relay\'s key, as 2f+1 operators back each change: every relay follows, with the state', { timeout: 180_000 }, async () => {
    const c = (cluster = await TestCluster.create(4))
    // r2's operator holds a key for a later rotation.
    const r2Next = generateIdentity()
    const r2NextPath = join(c.dir, 'r2-next.json')
    writeIdentity(r2NextPath, r2Next)
    await c.startAll((i) => (i === 1 ? ['--next-key', r2NextPath] : []))
    const client = await TestClient.connect(c.relays[0]!.api, author)
    for (let seq = 1; seq <= 3; seq++) await client.submit(await deposit(seq))
    const stableAt = async (i: number): Promise<number> => (await c.json<{ index: number }>(i, '/v1/spaces/s/stable')).index
    await until('three deposits stable everywhere', async () => (await Promise.all([0, 1, 2, 3].map(stableAt))).every((n) => n === 3) || undefined)
    client.close()

    // r4 moves: the next committee is the file's with r4's API on another port.
    const file = JSON.parse(readFileSync(c.clusterPath, 'utf8')) as { relays: Array<{ api: string }> }
    const moved = `127.0.0.1:${await freePort()}`
    file.relays[3]!.api = moved
    const nextPath = join(c.dir, 'next.json')
    writeFileSync(nextPath, JSON.stringify(file))
    const operator = (i: number) => ['--config', c.clusterPath, '--id', c.relays[i]!.id, '--data', c.relays[i]!.data]
    const proposed = await run(['committee', 'propose', nextPath, ...operator(0)])
    expect(proposed.stderr).toBe('')
    expect(proposed.code).toBe(0)
    const id = /backed proposal ([0-9a-f]{64})/.exec(proposed.stdout)?.[1] as string
    expect(proposed.stdout).toContain(`proposal ${id}: f = 1, relays r1`)
    expect(proposed.stdout).toContain('backed by r1')
    const status = await run(['committee', 'status', '--url', `http://${c.relays[1]!.api}`, '--json'])
    expect(JSON.parse(status.stdout)).toMatchObject({ epoch: 0, committeeChange: { proposals: [{ id, backers: ['r1'] }], decided: null } })
    for (const i of [1, 2]) {
      const approved = await run(['committee', 'approve', id, ...operator(i)])
      expect(approved.stderr).toBe('')
      expect(approved.code).toBe(0)
    }

    // The same process, at its new address (its log goes on growing in this record).
    Object.assign(c.relays[3]!, { api: moved })
    const epochAt = async (i: number): Promise<number | undefined> => (await c.json<{ epoch: number }>(i, '/v1/status').catch(() => undefined))?.epoch
    await until('every relay in epoch 1', async () => (await Promise.all([0, 1, 2, 3].map(epochAt))).every((e) => e === 1) || undefined, 60_000)
    // Whoever pinned the cluster file follows the certificate any relay serves.
    const served = await c.json(3, '/v1/epochs')
    expect(served['epoch']).toBe(1)
    const certs = epochChainFromJson(served)
    const followed = await followEpochs(nodeCrypto, { epoch: 0, committee: relayCommitteeOf(loadCluster(c.clusterPath)) }, certs)
    expect(followed.epoch).toBe(1)
    expect(followed.committee.members[3]?.api).toBe(moved)

    // The state carried over, and the moved relay takes work at its new address.
    expect(await stableAt(3)).toBe(3)
    const again = await TestClient.connect(moved, author)
    await again.submit(await deposit(4))
    await until('the fourth deposit stable everywhere', async () => (await Promise.all([0, 1, 2, 3].map(stableAt))).every((n) => n === 4) || undefined)
    again.close()

    // Then r4's machine is replaced by a new one, r5, with a key of its own.
    const r5 = { id: 'r5', data: join(c.dir, 'r5'), api: `127.0.0.1:${await freePort()}`, process: null, log: '' }
    mkdirSync(r5.data)
    const r5Key = generateIdentity()
    writeIdentity(join(r5.data, 'key.json'), r5Key)
    const third = { ...file, relays: [...file.relays.slice(0, 3), { id: 'r5', publicKey: toHex(r5Key.publicKey), api: r5.api, mesh: `/ip4/127.0.0.1/tcp/${await freePort()}` }] }
    const thirdPath = join(c.dir, 'third.json')
    writeFileSync(thirdPath, JSON.stringify(third))
    const replaced = await run(['committee', 'propose', thirdPath, ...operator(0)])
    expect(replaced.code).toBe(0)
    const replaceId = /backed proposal ([0-9a-f]{64})/.exec(replaced.stdout)?.[1] as string
    for (const i of [1, 2]) expect((await run(['committee', 'approve', replaceId, ...operator(i)])).code).toBe(0)
    // r4 is no relay of epoch 2: it stops by itself, and says why.
    const r4 = c.relays[3]!.process
    await until('r4 exited', () => r4?.exitCode !== null || undefined, 60_000)
    expect(r4?.exitCode).toBe(0)
    expect(c.relays[3]!.log).toContain('left the committee')
    c.relays[3] = r5
    c.start(3, ['--join', `http://${c.relays[0]!.api}`])
    await c.waitHealthy(3)
    await until('every relay in epoch 2', async () => (await Promise.all([0, 1, 2, 3].map(epochAt))).every((e) => e === 2) || undefined, 60_000)
    await until('r5 holds the state', async () => (await stableAt(3)) === 4 || undefined, 60_000)
    const joined = await TestClient.connect(r5.api, author)
    await joined.submit(await deposit(5))
    await until('the fifth deposit stable everywhere', async () => (await Promise.all([0, 1, 2, 3].map(stableAt))).every((n) => n === 5) || undefined)
    joined.close()

    // Last, r2's key is rotated: it runs on with the key it was given with --next-key.
    const fourth = { ...third, relays: third.relays.map((r, i) => (i === 1 ? { ...r, publicKey: toHex(r2Next.publicKey) } : r)) }
    const fourthPath = join(c.dir, 'fourth.json')
    writeFileSync(fourthPath, JSON.stringify(fourth))
    const rotated = await run(['committee', 'propose', fourthPath, ...operator(0)])
    expect(rotated.code).toBe(0)
    const rotateId = /backed proposal ([0-9a-f]{64})/.exec(rotated.stdout)?.[1] as string
    for (const i of [2, 3]) {
      const args = i === 3 ? ['--url', `http://${r5.api}`, '--key', join(r5.data, 'key.json')] : operator(i)
      expect((await run(['committee', 'approve', rotateId, ...args])).code).toBe(0)
    }
    await until('every relay in epoch 3', async () => (await Promise.all([0, 1, 2, 3].map(epochAt))).every((e) => e === 3) || undefined, 60_000)
    expect((await c.json<{ publicKey: string }>(1, '/v1/status')).publicKey).toBe(toHex(r2Next.publicKey))
    expect(c.relays[1]!.log).toContain('runs with the rotated key')
    const last = await TestClient.connect(c.relays[1]!.api, author)
    await last.submit(await deposit(6))
    await until('the sixth deposit stable everywhere', async () => (await Promise.all([0, 1, 2, 3].map(stableAt))).every((n) => n === 6) || undefined)
    last.close()
    // Whoever pinned the cluster file follows the three changes.
    const all = epochChainFromJson(await c.json(0, '/v1/epochs'))
    expect(await followEpochs(nodeCrypto, { epoch: 0, committee: relayCommitteeOf(loadCluster(c.clusterPath)) }, all)).toMatchObject({ epoch: 3, committee: relayCommitteeOf(loadCluster(fourthPath)) })
  })

  it('refuses to join through a relay that serves a forged epoch certificate (2f signatures), with exit 2 and why', { timeout: 60_000 }, async () => {
    const c = await TestCluster.create(4)
    const file = loadCluster(c.clusterPath)
    const newcomer = generateIdentity()
    const next = { f: 1, members: [...relayCommitteeOf(file).members.slice(0, 3), { id: 'r9', publicKey: newcomer.publicKey, api: '127.0.0.1:1', mesh: '/ip4/127.0.0.1/tcp/1' }] }
    const change = encodeEpochChange({ epoch: 1, startRound: 10, stateDigest: new Uint8Array(32), next })
    // Two of the four (2f) sign it: a certificate needs three.
    const signatures = [0, 1].map((relay) => ({ relay, sig: signSync(loadIdentity(join(c.relays[relay]!.data, 'key.json')).secretKey, change) }))
    const liar = createServer((_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(epochChainToJson([{ change, signatures }]))))
    await new Promise<void>((ok) => liar.listen(0, '127.0.0.1', ok))
    const data = join(c.dir, 'r9')
    mkdirSync(data)
    writeIdentity(join(data, 'key.json'), newcomer)
    try {
      const joined = await run(['start', '--config', c.clusterPath, '--id', 'r9', '--data', data, '--join', `http://127.0.0.1:${(liar.address() as AddressInfo).port}`])
      expect(joined.code).toBe(2)
      expect(joined.stderr).toMatch(/--join http:\/\/127\.0\.0\.1:\d+: no relay there served epoch certificates past the cluster file's epoch that check out/)
    } finally {
      liar.close()
    }
  })
})
