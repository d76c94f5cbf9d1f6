import { spawnSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestCluster, until } from '@stead/relay/testing'
import { createClient, memoryStorage, type SteadClient } from '../src/index.node.ts'

/**
 * Chrono's application validator, plugged in by the operators
 * (`stead-relay start --clock-validator <module>`) and run by real relay
 * processes: they vote for no clock it refuses, while the update still
 * commits (the audit does not run it).
 */
/** The relay's command, as the cluster's processes run it. */
const BIN = resolve(import.meta.dirname, '../../../relay/bin/stead-relay.mjs')

describe('an application validator the operators plug in', () => {
  let cluster: TestCluster
  let client: SteadClient | undefined
  const dir = mkdtempSync(join(tmpdir(), 'stead-validator-'))
  const module = join(dir, 'rule.mjs')
  writeFileSync(
    module,
    `export default (space) => space === 'ruled'
  ? (author, clock, envelope) => {
      if (envelope.updates.some((u) => u.key === 'boom')) throw new Error('a bug in the rule')
      return envelope.updates.some((u) => u.key === 'forbidden') ? { ok: false, reason: 'unauthorized', detail: 'nobody writes forbidden' } : { ok: true }
    }
  : undefined
`,
  )

  beforeAll(async () => {
    cluster = await TestCluster.create(4, { openSpaces: true })
    await cluster.startAll(() => ['--clock-validator', module])
  }, 90_000)

  afterAll(async () => {
    await client?.close()
    await cluster?.stopAll()
  })

  it('refuses its votes to what the rule refuses, and only there', async () => {
    const file = JSON.parse(readFileSync(cluster.clusterPath, 'utf8')) as unknown
    client = await createClient({ relays: cluster.relays.map((r) => `ws://${r.api}`), storage: memoryStorage(), cluster: file, maxBatchOps: 1 })
    const ruled = await client.space('ruled')
    await until('online', () => (ruled.status.online ? true : undefined), 30_000)
    const idOf = async (key: string): Promise<string> => {
      await ruled.counter(key).increment(1)
      await ruled.flush()
      const id = ruled.pendingUpdates().at(-1)?.id
      if (!id) throw new Error('decided before it could be named')
      return id
    }
    const fine = await idOf('fine')
    const forbidden = await idOf('forbidden')
    // A rule that throws refuses the vote; the relays go on.
    const boom = await idOf('boom')
    // All commit: the rule is the relays' word on clocks, not on what the stable history holds.
    await until('all committed', () => (['fine', 'forbidden', 'boom'].every((k) => ruled.counter(k).stable === 1) ? true : undefined), 30_000)
    const votes = async (id: string, space = 'ruled'): Promise<number[]> =>
      Promise.all(
        cluster.relays.map(async (r) => {
          const res = await fetch(`http://${r.api}/v1/spaces/${space}/clock/${id}`)
          return res.status === 200 ? ((await res.json()) as { votes: unknown[] }).votes.length : 0
        }),
      )
    expect((await votes(fine)).some((n) => n >= 3)).toBe(true)
    expect(await votes(forbidden)).toEqual([0, 0, 0, 0])
    expect(await votes(boom)).toEqual([0, 0, 0, 0])
    for (const r of cluster.relays) expect((await fetch(`http://${r.api}/health`)).status).toBe(200)
    const metrics = await (await fetch(`http://${cluster.relays[0]?.api}/metrics`)).text()
    expect(metrics).toMatch(/stead_clock_votes_total\{[^}]*result="refused"[^}]*\} [1-9]/)
    // Another space has no rule: its updates get votes whatever their keys.
    const open = await client.space('open')
    await until('online', () => (open.status.online ? true : undefined), 30_000)
    await open.counter('forbidden').increment(1)
    await open.flush()
    const id = open.pendingUpdates().at(-1)?.id
    expect(id).toBeDefined()
    await until('voted', async () => ((await votes(id as string, 'open')).some((n) => n >= 3) ? true : undefined), 30_000)
  }, 60_000)

  it('refuses to start on a module that is not one', async () => {
    const bad = join(dir, 'bad.mjs')
    writeFileSync(bad, 'export default 42\n')
    // A running relay's own id and data dir: the module is refused before the store is opened.
    const r = cluster.relays[0] as { id: string; data: string }
    const out = spawnSync(process.execPath, [BIN, 'start', '--config', cluster.clusterPath, '--id', r.id, '--data', r.data, '--clock-validator', bad], { encoding: 'utf8', timeout: 30_000 })
    expect(out.status).not.toBe(0)
    expect(out.stderr + out.stdout).toMatch(/--clock-validator .*not a function/)
  })
})
