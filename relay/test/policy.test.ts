import { POLICY_KEY, asSigned, authorIdOf, bytesEqual, decode, openEnvelopeSync, toHex, type PolicyOp, type RelayMessage, type SafeGroup } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestClient } from './helpers/client.ts'
import { TestCluster, until } from './helpers/cluster.ts'
import { envelopes, identity, type Identity } from './helpers/envelopes.ts'

/**
 * Issue 46 on four `stead-relay start` processes: spaces created at runtime
 * in a closed cluster, their policy ordered and audited like any update, a
 * revoked writer refused identically by every relay, a revoked reader cut
 * off, a space of the cluster file handed over to a policy of its own, and
 * a space deleted, its histories pruned by every relay as it compacts.
 */
const alice = identity(211) // may create spaces
const bob = identity(212)
const stranger = identity(213)
const carol = identity(214) // admin of the file's space 'legacy'
const dave = identity(215)

const idOf = (who: Identity): string => authorIdOf(nodeCrypto, who.publicKey)

const envelope = envelopes()
/** Envelopes the door refuses: numbered apart, so the authors' accepted ones leave no gap. */
const refused = envelopes()
const change = (op: PolicyOp): SafeGroup => ({ atomic: false, updates: [{ key: POLICY_KEY, decl: { type: 'policy' }, op }] })
const policyOp = (who: Identity, space: string, op: PolicyOp, make = envelope) => make(who, space, { safe: [change(op)] })
const deposit = (who: Identity, space: string, n: number, make = envelope) => make(who, space, { updates: [{ key: 'acct', decl: { type: 'counter', bounds: {} }, ops: [n] }] })
const idOfFrame = (frame: Uint8Array): string => toHex(openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: () => true }, asSigned(decode(frame))).id)

const submit = (c: TestClient, frame: Uint8Array): Promise<RelayMessage> => c.submit(frame)

type Head = { index: number; stateHash: string }

describe('space policies on real relays (4 relay processes)', () => {
  let cluster: TestCluster
  const api = (i: number) => cluster.relays[i]!.api
  const head = (i: number, space: string) => cluster.json<Head>(i, `/v1/spaces/${space}/head`)
  const agreeAt = (space: string, index: number) =>
    until(
      `relays to reach ${space}@${index}`,
      async () => {
        const heads = await Promise.all([0, 1, 2, 3].map((i) => head(i, space)))
        if (heads.some((h) => h.index < index)) return undefined
        expect(new Set(heads.map((h) => `${h.index}/${h.stateHash}`)).size).toBe(1)
        return heads[0]
      },
      60_000,
    )

  beforeAll(async () => {
    cluster = await TestCluster.create(4, {
      openSpaces: false,
      spaceCreators: [toHex(alice.publicKey)],
      spaces: { legacy: { writers: [toHex(carol.publicKey)], admins: [toHex(carol.publicKey)] } },
    })
    // A snapshot (and with it the compaction that applies retentions and deletions) after every committed batch.
    await cluster.startAll(() => ['--snapshot-every', '1'])
  }, 90_000)

  afterAll(async () => cluster?.stopAll())

  it('creates a space at runtime, refuses a writer the policy does not name, and rejects a revoked writer identically on every relay', async () => {
    const a = await TestClient.connect(api(0), alice)
    const b = await TestClient.connect(api(0), bob)
    const s = await TestClient.connect(api(1), stranger)
    // Only the cluster's space creators may create a space.
    expect(await submit(s, await policyOp(stranger, 'team', ['i', [[idOf(stranger), 'admin']], 'none'], refused))).toMatchObject({ type: 'error', reason: 'unauthorized' })
    expect(await submit(a, await policyOp(alice, 'team', ['i', [[idOf(alice), 'admin'], [idOf(bob), 'writer']], 'none']))).toMatchObject({ type: 'accepted' })
    await agreeAt('team', 1)
    expect(await submit(b, await deposit(bob, 'team', 5))).toMatchObject({ type: 'accepted' })
    await agreeAt('team', 2)
    // The policy names no stranger: refused at the door of every relay.
    for (const i of [1, 2]) {
      const c = await TestClient.connect(api(i), stranger)
      expect(await submit(c, await deposit(stranger, 'team', 1, refused))).toMatchObject({ type: 'error', reason: 'unauthorized' })
      c.close()
    }

    // Every relay's attestations, to compare the one that decides bob's write after the revocation.
    const watchers = await Promise.all([0, 1, 2, 3].map((i) => TestClient.connect(api(i), alice)))
    for (const w of watchers) w.send({ type: 'subscribe', space: 'team', fromIndex: 2 })
    // Bob follows the space too: he may read it while he is a writer.
    b.send({ type: 'subscribe', space: 'team', fromIndex: 2 })

    // Hold the order (two relays stopped: no quorum), so the revocation and bob's next write both pass the door
    // of relay 0 while bob still may write; once released, relay 0 orders them as queued: revocation first.
    for (const i of [2, 3]) cluster.relays[i]!.process!.kill('SIGSTOP')
    try {
      expect(await submit(a, await policyOp(alice, 'team', ['r', idOf(bob), null]))).toMatchObject({ type: 'accepted' })
      const late = await deposit(bob, 'team', 7)
      expect(await submit(b, late)).toMatchObject({ type: 'accepted' })
      const lateId = idOfFrame(late)
      for (const i of [2, 3]) cluster.relays[i]!.process!.kill('SIGCONT')
      await agreeAt('team', 4)
      const verdicts = await Promise.all(
        watchers.map(async (w) => {
          await w.next(() => w.commits.some((c) => c.attestation.decisions.some((d) => toHex(d[0] as Uint8Array) === lateId)), 30_000)
          return w.commits.find((c) => c.attestation.decisions.some((d) => toHex(d[0] as Uint8Array) === lateId))!
        }),
      )
      // The same signed statement from all four: bob's write rejected as unauthorized.
      for (const v of verdicts) expect(bytesEqual(v.bytes, verdicts[0]!.bytes)).toBe(true)
      const decision = verdicts[0]!.attestation.decisions.find((d) => toHex(d[0] as Uint8Array) === lateId)
      expect(JSON.stringify(decision)).toContain('unauthorized')
      // A revoked reader's session is told, and hears nothing more of the space.
      await b.next((m) => m.type === 'unreadable' && m.space === 'team', 30_000)
      const heard = b.commits.length
      expect(await submit(a, await deposit(alice, 'team', 1))).toMatchObject({ type: 'accepted' })
      await agreeAt('team', 5)
      await watchers[0]!.next(() => watchers[0]!.commits.some((c) => c.attestation.toIndex === 5), 30_000)
      expect(b.commits.length).toBe(heard)
      // And is refused when it asks again, over WebSocket and HTTP.
      b.send({ type: 'subscribe', space: 'team', fromIndex: 0 })
      await b.next((m) => m.type === 'unreadable' && b.messages.filter((x) => x.type === 'unreadable').length >= 2, 30_000)
      expect((await fetch(`http://${api(0)}/v1/spaces/team/head`)).status).toBe(403)
    } finally {
      for (const i of [2, 3]) cluster.relays[i]!.process?.kill('SIGCONT')
      for (const c of [a, b, s, ...watchers]) c.close()
    }
  }, 120_000)

  it('serves a subscription the policy refused as soon as a grant lets its key read, without being asked again', async () => {
    const a = await TestClient.connect(api(0), alice)
    const waiting = await Promise.all([1, 3].map((i) => TestClient.connect(api(i), dave)))
    try {
      expect(await submit(a, await policyOp(alice, 'club', ['i', [[idOf(alice), 'admin']], 'none']))).toMatchObject({ type: 'accepted' })
      await agreeAt('club', 1)
      for (const w of waiting) {
        w.send({ type: 'subscribe', space: 'club', fromIndex: 0 })
        await w.next((m) => m.type === 'unreadable' && m.space === 'club', 30_000)
      }
      expect(await submit(a, await deposit(alice, 'club', 1))).toMatchObject({ type: 'accepted' })
      await agreeAt('club', 2)
      for (const w of waiting) expect(w.commits).toHaveLength(0)
      expect(await submit(a, await policyOp(alice, 'club', ['r', idOf(dave), 'reader']))).toMatchObject({ type: 'accepted' })
      await agreeAt('club', 3)
      // Each waiting session now gets the space from where it asked, the grant included.
      for (const w of waiting) await w.next(() => w.commits.some((c) => c.space === 'club' && c.attestation.toIndex === 3), 30_000)
      for (const w of waiting) expect(w.commits[0]?.attestation.fromIndex).toBe(0)
    } finally {
      for (const c of [a, ...waiting]) c.close()
    }
  }, 60_000)

  it("hands a file space over to a policy of its own, created by the file's admin", async () => {
    const c = await TestClient.connect(api(1), carol)
    const d = await TestClient.connect(api(2), dave)
    try {
      // The file names carol only: dave may not write, nor create the policy.
      expect(await submit(d, await deposit(dave, 'legacy', 1, refused))).toMatchObject({ type: 'error', reason: 'unauthorized' })
      expect(await submit(d, await policyOp(dave, 'legacy', ['i', [[idOf(dave), 'admin']], 'none'], refused))).toMatchObject({ type: 'error', reason: 'unauthorized' })
      expect(await submit(c, await deposit(carol, 'legacy', 2))).toMatchObject({ type: 'accepted' })
      expect(await submit(c, await policyOp(carol, 'legacy', ['i', [[idOf(carol), 'admin'], [idOf(dave), 'writer']], 'none']))).toMatchObject({ type: 'accepted' })
      await agreeAt('legacy', 2)
      // From now on the space's policy decides: dave writes.
      expect(await submit(d, await deposit(dave, 'legacy', 3))).toMatchObject({ type: 'accepted' })
      await agreeAt('legacy', 3)
    } finally {
      c.close()
      d.close()
    }
  }, 60_000)

  it('deletes a space: later writes are refused by every relay, and each relay drops its histories when it compacts', async () => {
    const a = await TestClient.connect(api(0), alice)
    const b = await TestClient.connect(api(2), bob)
    const history = async (i: number, key: string): Promise<Array<[number, unknown]>> => {
      const page = await cluster.json<{ entries: string }>(i, `/v1/spaces/gone/history/${encodeURIComponent(key)}`)
      return decode(Buffer.from(page.entries, 'base64url')) as Array<[number, unknown]>
    }
    try {
      expect(await submit(a, await policyOp(alice, 'gone', ['i', [[idOf(alice), 'admin'], [idOf(bob), 'writer']], 'reader']))).toMatchObject({ type: 'accepted' })
      await agreeAt('gone', 1)
      for (let n = 1; n <= 3; n++) expect(await submit(b, await deposit(bob, 'gone', n))).toMatchObject({ type: 'accepted' })
      await agreeAt('gone', 4)
      for (const i of [0, 1, 2, 3]) expect((await history(i, 'acct')).map(([index]) => index)).toEqual([4, 3, 2])
      // Bob is no admin: his deletion is refused; alice's deletes the space.
      expect(await submit(b, await policyOp(bob, 'gone', ['d'], refused))).toMatchObject({ type: 'error', reason: 'unauthorized' })
      expect(await submit(a, await policyOp(alice, 'gone', ['d']))).toMatchObject({ type: 'accepted' })
      await agreeAt('gone', 5)
      // Compacted with the commit's own write: on every relay, nothing left of the counter, the policy's last value.
      await until('every relay to drop the deleted space\'s histories', async () => ((await Promise.all([0, 1, 2, 3].map((i) => history(i, 'acct')))).every((h) => h.length === 0) ? true : undefined), 30_000)
      for (const i of [0, 1, 2, 3]) expect((await history(i, POLICY_KEY)).map(([index]) => index)).toEqual([5])
      // Nothing more is taken in it, at the door of any relay.
      for (const i of [1, 3]) {
        const c = await TestClient.connect(api(i), bob)
        const refusal = await submit(c, await deposit(bob, 'gone', 1, refused))
        expect(refusal).toMatchObject({ type: 'error', reason: 'unauthorized' })
        expect(JSON.stringify(refusal)).toMatch(/gone was deleted/)
        c.close()
      }
    } finally {
      a.close()
      b.close()
    }
  }, 90_000)
})
