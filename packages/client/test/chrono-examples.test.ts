import { spawn } from 'node:child_process'
import { resolve } from 'node:path'
import { nodeCrypto } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster } from '@stead/relay/testing'
import { createClient, memoryStorage, parseClusterDescriptor, type SteadClient } from '../src/index.node.ts'
import { ChronoMutex, GuardedResource } from '../examples/chrono/mutex.ts'

/** The Chrono examples against real relay processes: as the README runs them, and a mutex member that starts late. */
describe('Chrono examples on a real cluster', () => {
  let cluster: TestCluster
  const clients: SteadClient[] = []
  const urls = (): string[] => cluster.relays.map((r) => `ws://${r.api}`)

  beforeAll(async () => {
    cluster = await TestCluster.create(4)
    await cluster.startAll()
  }, 90_000)

  afterAll(async () => {
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
      child.on('exit', (code) => done({ code, out }))
    })

  it('runs the mutual exclusion example: six turns, then a made-up proof refused', async () => {
    const { code, out } = await example('mutex-demo.ts')
    expect(code, out).toBe(0)
    expect(out.match(/ prints /g)).toHaveLength(6)
    expect(out).toContain('a made-up proof is refused: unauthorized')
  }, 60_000)

  it('runs the causal store example: the stale photo refused, the current one served', async () => {
    const { code, out } = await example('causal-store-demo.ts')
    expect(code, out).toBe(0)
    expect(out).toMatch(/serves the old version: refused \(gap: /)
    expect(out).toMatch(/via replica B: "beach, sharp"/)
  }, 60_000)

  it('lets a member that starts after a request answer it, from the relays’ history, so the requester gets in', async () => {
    const open = async (): Promise<SteadClient> => {
      const c = await createClient({ relays: urls(), storage: memoryStorage() })
      clients.push(c)
      return c
    }
    const [one, two, late] = [await open(), await open(), await open()]
    const rules = { resource: 'late-joiner', members: [one, two, late].map((c) => c.authorId) }
    const res = await fetch(`http://${cluster.relays[0]?.api}/v1/cluster`)
    const keys = parseClusterDescriptor(await res.json())
    const trust = { crypto: nodeCrypto, cluster: { f: keys.f, relayKeys: keys.relays.map((r) => r.publicKey) } }
    const first = new ChronoMutex(await one.space('late'), rules, one.authorId, trust)
    new ChronoMutex(await two.space('late'), rules, two.authorId, trust)
    const waiting = first.acquire({ timeoutMs: 30_000 })
    // The third member opens the space only once the request is committed: its replica starts from the relays' snapshot, without that history.
    const spaceOne = await one.space('late')
    while (!spaceOne.register(`mutex/late-joiner/${one.authorId}`).history().length) await new Promise((r) => setTimeout(r, 20))
    new ChronoMutex(await late.space('late'), rules, late.authorId, trust)
    const proof = await waiting
    expect(proof.replies).toHaveLength(2)
    expect((await new GuardedResource(trust, rules).enter(proof)).author).toBe(one.authorId)
  }, 60_000)
})
