import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { POLICY_KEY, authorIdOf, clockInit, encodeEnvelope, sealEnvelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestClient } from './helpers/client.ts'
import { TestCluster, until } from './helpers/cluster.ts'
import { envelopes, identity } from './helpers/envelopes.ts'

/**
 * An existing cluster's data dirs, written by the release before space
 * policies (fixtures/pre-policies.tar.gz: four relays, a file space `ledger`
 * whose only writer made five deposits while another key's was refused,
 * and an open space `notes`; fixtures/README.md says how it was made),
 * start under this one: the same stable state on every relay, the file's
 * rules still in force, and spaces with policies of their own on top
 * (issue 46: existing clusters keep working).
 */
const FIXTURE = join(import.meta.dirname, 'fixtures', 'pre-policies.tar.gz')
type Head = { index: number; stateHash: string }
const writer = identity(61)
const other = identity(62)
const admin = identity(63)
const counter = { type: 'counter' as const, bounds: { min: 0 } }

describe('data dirs of the release before space policies, under this one (4 relay processes)', () => {
  let cluster: TestCluster
  const envelope = envelopes()

  let expected: { ledger: Head; notes: Head }

  beforeAll(async () => {
    cluster = await TestCluster.fromFixture(FIXTURE)
    expected = JSON.parse(readFileSync(join(cluster.dir, 'expected.json'), 'utf8')) as typeof expected
    await cluster.startAll()
  }, 90_000)

  afterAll(async () => {
    await cluster?.stopAll()
  })

  const heads = (space: string): Promise<Head[]> => Promise.all([0, 1, 2, 3].map((i) => cluster.json<Head>(i, `/v1/spaces/${space}/head`)))

  it('serve the stable state they had, keep the file space rules, and take new writes and runtime policies', async () => {
    // The stable state the old release attested, on every relay.
    for (const h of await heads('ledger')) expect(h).toMatchObject(expected.ledger)
    for (const h of await heads('notes')) expect(h).toMatchObject(expected.notes)

    // The file's writers still decide the file space: the writer's sixth envelope commits; the other key, whose
    // envelope was refused at the door before (so its first is still to come), is refused again.
    const sixth = encodeEnvelope(await sealEnvelope(nodeCrypto, writer, { space: 'ledger', seq: 6, clock: clockInit(), deps: [], updates: [{ key: 'acct', decl: counter, ops: [6] }], safe: [] }))
    const w = await TestClient.connect(cluster.relays[0]!.api, writer)
    expect(await w.submit(sixth)).toMatchObject({ type: 'accepted' })
    const o = await TestClient.connect(cluster.relays[1]!.api, other)
    expect(await o.submit(await envelope(other, 'ledger', { updates: [{ key: 'acct', decl: counter, ops: [1000] }] }))).toMatchObject({ type: 'error', reason: 'unauthorized' })
    await until('every relay has the sixth deposit, alike', async () => {
      const h = await heads('ledger')
      return h.every((x) => x.index === expected.ledger.index + 1 && x.stateHash === h[0]?.stateHash) ? true : undefined
    })

    // A space created at runtime, with a policy of its own (anybody reads): its admin writes, a key it does not name is refused.
    const a = await TestClient.connect(cluster.relays[2]!.api, admin)
    const create = { atomic: false, updates: [{ key: POLICY_KEY, decl: { type: 'policy' as const }, op: ['i', [[authorIdOf(nodeCrypto, admin.publicKey), 'admin']], 'reader'] as never }] }
    expect(await a.submit(await envelope(admin, 'team', { safe: [create] }))).toMatchObject({ type: 'accepted' })
    await until('every relay has the team policy', async () => ((await heads('team')).every((x) => x.index === 1) ? true : undefined))
    expect(await a.submit(await envelope(admin, 'team', { updates: [{ key: 'n', decl: counter, ops: [1] }] }))).toMatchObject({ type: 'accepted' })
    expect(await o.submit(await envelope(other, 'team', { updates: [{ key: 'n', decl: counter, ops: [1] }] }))).toMatchObject({ type: 'error', reason: 'unauthorized' })
    for (const c of [w, o, a]) c.close()
  }, 120_000)
})
