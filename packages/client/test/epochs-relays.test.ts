import { spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { toHex } from '@stead/core'
import { generateIdentity, writeIdentity } from '@stead/relay'
import { TestCluster, freePort, until } from '@stead/relay/testing'
import { afterAll, describe, expect, it, onTestFailed } from 'vitest'
import { createClient, memoryStorage, type SteadClient } from '../src/index.node.ts'

/**
 * Issue 49's load test: real relay processes, changed one machine at a time
 * by their operators' commands (`stead-relay committee propose/approve`,
 * `start --join`) while two SDK clients keep making safe increments and
 * quorum reads. All four relays are replaced, then the cluster grows from 4
 * to 7 (f from 1 to 2). The clients are never restarted: they follow the
 * epoch certificates. The history of their operations goes to an outside
 * linearizability checker (Porcupine, tools/lincheck).
 */
const BIN = resolve(import.meta.dirname, '../../../relay/bin/stead-relay.mjs')
const LINCHECK = resolve(import.meta.dirname, '../../../tools/lincheck')

function run(cmd: string, args: string[], cwd?: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    const child = spawn(cmd, args, { cwd, env: { ...process.env, LOG_LEVEL: '' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()))
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()))
    child.on('close', (code) => done({ code, stdout, stderr }))
  })
}

type Entry = { id: string; publicKey: string; api: string; mesh: string }
type ClusterFile = { f: number; relays: Entry[] } & Record<string, unknown>
type Operation = { client: number; kind: 'add' | 'read'; value: number; call: number; return: number | null }

/** Microseconds on one clock for every client of this process. */
const now = (): number => Math.round((performance.timeOrigin + performance.now()) * 1000)

let cluster: TestCluster | undefined
const clients: SteadClient[] = []
/** Relays replaced while still serving their grace period: the cluster no longer lists them. */
const leavingRelays: ChildProcess[] = []
afterAll(async () => {
  for (const c of clients) await c.close()
  await cluster?.stopAll()
  for (const p of leavingRelays) if (p.exitCode === null) p.kill('SIGKILL')
})

describe('clients through committee changes of real relays', () => {
  it('replaces all four relays one at a time, then grows to seven, under a steady load: nothing lost, one state, a linearizable history', { timeout: 420_000 }, async () => {
    const c = (cluster = await TestCluster.create(4, { openSpaces: true }))
    // What each relay said last, for a failure in CI (a replaced relay's log goes with its record).
    const records = [...c.relays]
    onTestFailed(() => {
      for (const r of records) console.log(`--- ${r.id} (last lines) ---\n${r.log.slice(-6000)}`)
    })
    // A leaving relay serves its epoch's certificate for 3 s, not 15: the test waits for it to exit before its replacement starts.
    await c.startAll(() => ['--leave-grace-ms', '3000'])
    let file = JSON.parse(readFileSync(c.clusterPath, 'utf8')) as ClusterFile
    for (let i = 0; i < 2; i++) {
      clients.push(await createClient({ relays: c.relays.map((r) => `ws://${r.api}`), cluster: file, storage: memoryStorage(), epochPollMs: 1_000 }))
    }
    const spaces = await Promise.all(clients.map((client) => client.space('lin')))
    await until('clients online', () => (spaces.every((s) => s.status.online) ? true : undefined), 30_000)

    // The load: each client, one after another, a safe increment and a quorum read.
    const history: Operation[] = []
    let acknowledged = 0
    let loading = true
    const load = spaces.map(async (space, client) => {
      const counter = space.counter('n')
      while (loading) {
        const add: Operation = { client, kind: 'add', value: 1, call: now(), return: null }
        history.push(add)
        const r = await counter.increment(1, { safe: true, timeoutMs: Infinity })
        if (r.status !== 'committed') throw new Error(`a safe increment was not committed: ${JSON.stringify(r)}`)
        add.return = now()
        acknowledged++
        const call = now()
        try {
          const value = await space.readStable('n', { quorum: true, timeoutMs: 20_000 })
          history.push({ client, kind: 'read', value: value as number, call, return: now() })
        } catch {
          // A read that timed out while relays changed returned nothing: it says nothing.
        }
      }
    })
    const progress = async (what: string, more: number) => {
      const at = acknowledged
      await until(what, () => (acknowledged >= at + more ? true : undefined), 60_000)
    }
    await progress('safe updates before any change', 4)

    const epochAt = async (i: number): Promise<number | undefined> => (await c.json<{ epoch: number }>(i, '/v1/status').catch(() => undefined))?.epoch
    const allIn = (epoch: number, relays: number[]) => until(`relays ${relays.map((i) => c.relays[i]!.id).join(', ')} in epoch ${epoch}`, async () => ((await Promise.all(relays.map(epochAt))).every((e) => e === epoch) ? true : undefined), 90_000)
    const operator = (i: number) => ['--url', `http://${c.relays[i]!.api}`, '--key', join(c.relays[i]!.data, 'key.json')]
    /** A committee command, again while the relay says it is busy (a relay that just joined takes no work until it holds the state). */
    const committee = (args: string[]) =>
      until(`stead-relay committee ${args[0]}`, async () => {
        const r = await run(process.execPath, [BIN, 'committee', ...args])
        // Busy, or its API between two epochs (it restarts as the next epoch's): the operator tries again.
        if (r.code !== 0 && !r.stderr.includes('rate-limited') && !r.stderr.includes('no relay answered')) throw new Error(`stead-relay committee ${args.join(' ')} exited ${r.code}: ${r.stderr}`)
        return r.code === 0 ? r : undefined
      }, 60_000, 500)
    /** 2f+1 current relays back `next` (the first proposes it, the others approve its id). */
    async function change(next: ClusterFile, backers: number[]): Promise<void> {
      const path = join(c.dir, `committee-${Date.now()}.json`)
      writeFileSync(path, JSON.stringify(next))
      const proposed = await committee(['propose', path, ...operator(backers[0]!)])
      const id = /backed proposal ([0-9a-f]{64})/.exec(proposed.stdout)?.[1] as string
      for (const i of backers.slice(1)) await committee(['approve', id, ...operator(i)])
    }
    /** A new machine: its data dir and key, and its committee entry. */
    async function machine(id: string) {
      const data = join(c.dir, id)
      mkdirSync(data)
      const key = generateIdentity()
      writeIdentity(join(data, 'key.json'), key)
      const entry: Entry = { id, publicKey: toHex(key.publicKey), api: `127.0.0.1:${await freePort()}`, mesh: `/ip4/127.0.0.1/tcp/${await freePort()}` }
      return { relay: { id, data, api: entry.api, process: null, log: '' }, entry }
    }

    // Each relay in turn is replaced by a new machine: r1 by r5, ..., r4 by r8.
    for (let k = 0; k < 4; k++) {
      const epoch = k + 1
      const m = await machine(`r${5 + k}`)
      const next = { ...file, relays: file.relays.map((r, i) => (i === k ? m.entry : r)) }
      const backers = [0, 1, 2, 3].filter((i) => i !== k).slice(0, 3)
      const leaving = c.relays[k]!.process
      if (leaving) leavingRelays.push(leaving)
      await change(next, backers)
      await until(`${c.relays[k]!.id} left`, () => (leaving?.exitCode !== null ? true : undefined), 90_000)
      expect(leaving?.exitCode).toBe(0)
      await allIn(epoch, backers)
      c.relays[k] = m.relay
      records.push(m.relay)
      c.start(k, ['--join', `http://${c.relays[backers[0]!]!.api}`, '--leave-grace-ms', '3000'])
      await c.waitHealthy(k)
      await allIn(epoch, [0, 1, 2, 3])
      file = next
      await until(`clients in epoch ${epoch}`, () => (clients.every((cl) => cl.status.epoch === epoch) ? true : undefined), 60_000)
      await progress(`safe updates in epoch ${epoch}`, 2)
    }

    // Then three more machines join: seven relays, f = 2.
    const added = await Promise.all(['r9', 'r10', 'r11'].map(machine))
    const grown = { ...file, f: 2, relays: [...file.relays, ...added.map((m) => m.entry)] }
    await change(grown, [0, 1, 2])
    await allIn(5, [0, 1, 2, 3])
    for (const m of added) {
      c.relays.push(m.relay)
      records.push(m.relay)
      c.start(c.relays.length - 1, ['--join', `http://${c.relays[0]!.api}`, '--leave-grace-ms', '3000'])
    }
    for (const i of [4, 5, 6]) await c.waitHealthy(i)
    await allIn(5, [0, 1, 2, 3, 4, 5, 6])
    await until('clients in epoch 5', () => (clients.every((cl) => cl.status.epoch === 5) ? true : undefined), 60_000)
    await progress('safe updates with seven relays', 4)
    loading = false
    await Promise.all(load)

    // Every relay ends with the same state, holding every acknowledged update once.
    const stable = (i: number) => c.json<{ index: number; stateHash: string }>(i, '/v1/spaces/lin/stable')
    await until('one state on all seven relays', async () => {
      const heads = await Promise.all([0, 1, 2, 3, 4, 5, 6].map(stable))
      return heads.every((h) => h.index === heads[0]!.index && h.stateHash === heads[0]!.stateHash) ? true : undefined
    }, 60_000)
    expect(await spaces[0]!.readStable('n', { quorum: true, timeoutMs: 20_000 })).toBe(acknowledged)
    await until('clients hold every acknowledged update', () => (spaces.every((s) => s.counter('n').stable === acknowledged) ? true : undefined), 30_000)
    // Their sessions are the new committee's.
    // (A session that dropped while relays joined may still be reconnecting: it names its relay once it proved it.)
    const seven = ['r5', 'r6', 'r7', 'r8', 'r9', 'r10', 'r11'].join()
    await until('sessions with the seven relays', () => (clients.every((cl) => cl.status.relays.map((r) => r.relay).join() === seven) ? true : undefined), 30_000)

    // An outside checker judges the history.
    const path = join(c.dir, 'history.json')
    writeFileSync(path, JSON.stringify({ operations: history }))
    const checked = await run('go', ['run', '.', path], LINCHECK)
    console.log(`${acknowledged} safe increments, ${history.length - acknowledged} quorum reads; lincheck: ${checked.stdout.trim()}`)
    expect(checked.code, checked.stderr + checked.stdout).toBe(0)
  })
})
