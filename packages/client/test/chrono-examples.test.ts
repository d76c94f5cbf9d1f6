import { spawn } from 'node:child_process'
import { resolve } from 'node:path'
import { nodeCrypto } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { createClient, memoryStorage, parseClusterDescriptor, type SteadClient } from '../src/index.node.ts'
import { ChronoMutex, GuardedResource } from '../examples/chrono/mutex.ts'

/** The Chrono examples against real relay processes: as the README runs them, and a mutex member that starts late. */
describe('Chrono examples on a real cluster', () => {
  let cluster: TestCluster
  const clients: SteadClient[] = []
  const mutexes: ChronoMutex[] = []
  const urls = (): string[] => cluster.relays.map((r) => `ws://${r.api}`)

  beforeAll(async () => {
    cluster = await TestCluster.create(4)
    await cluster.startAll()
  }, 90_000)

  afterAll(async () => {
    for (const m of mutexes) m.close()
    for (const c of clients) await c.close()
    await cluster?.stopAll()
  })

  /** Runs an example script as the README does (`npm run example:…`), against this cluster; resolves with what it printed and its exit code. */
  const example = (file: string): Promise<{ code: number | null; out: string }> =>
    new Promise((done) => {
      const child = spawn(process.execPath, ['--conditions=@stead/source', '--import', 'tsx', resolve(import.meta.dirname, '../examples/chrono', file)], {
        env: { ...process.env, RELAYS: urls().join(',') },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let out = ''
      child.stdout.on('data', (d: Buffer) => (out += d.toString()))
      child.stderr.on('data', (d: Buffer) => (out += d.toString()))
      child.on('close', (code) => done({ code, out })) // after the pipes drain, so `out` is whole
    })

  it('runs the mutual exclusion example: six turns, then a made-up proof and a stolen one refused', async () => {
    const { code, out } = await example('mutex-demo.ts')
    expect(code, out).toBe(0)
    expect(out.match(/ prints /g)).toHaveLength(6)
    expect(out).toContain('a made-up proof is refused: unauthorized')
    expect(out).toContain("another member's proof is refused: unauthenticated")
  }, 60_000)

  it('runs the causal store example: the stale photo refused, the current one served', async () => {
    const { code, out } = await example('causal-store-demo.ts')
    expect(code, out).toBe(0)
    expect(out).toMatch(/serves the old version: refused \(gap: /)
    expect(out).toMatch(/via replica B: "beach, sharp"/)
  }, 60_000)

  it('lets a member that starts after a request answer it, from the relays’ history, so the requester gets in', async () => {
    const open = async (): Promise<SteadClient & { secretKey: Uint8Array }> => {
      const secretKey = nodeCrypto.generateSecretKey()
      const c = await createClient({ relays: urls(), storage: memoryStorage(), identity: { secretKey } })
      clients.push(c)
      return Object.assign(c, { secretKey })
    }
    const [one, two, late] = [await open(), await open(), await open()]
    const rules = { resource: 'late-joiner', members: [one, two, late].map((c) => c.authorId) }
    const res = await fetch(`http://${cluster.relays[0]?.api}/v1/cluster`)
    const keys = parseClusterDescriptor(await res.json())
    const trust = { crypto: nodeCrypto, cluster: { f: keys.f, relayKeys: keys.relays.map((r) => r.publicKey) } }
    const first = new ChronoMutex(await one.space('late'), rules, one, trust)
    mutexes.push(new ChronoMutex(await two.space('late'), rules, two, trust))
    const waiting = first.acquire({ timeoutMs: 30_000 })
    // The third member opens the space only once the request is committed: its replica starts from the relays' snapshot, without that history.
    const spaceOne = await one.space('late')
    await until('the request is committed', () => (spaceOne.register(`mutex/late-joiner/${one.authorId}`).history().length ? true : undefined))
    mutexes.push(new ChronoMutex(await late.space('late'), rules, late, trust))
    const proof = await waiting
    expect(proof.replies).toHaveLength(2)
    mutexes.push(first)
    const owner = new GuardedResource(trust, rules)
    const nonce = owner.challenge()
    expect((await owner.enter(proof, nonce, await first.present(nonce))).author).toBe(one.authorId)
  }, 60_000)
})
