import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockInit } from '../src/clock.ts'
import { POLICY_KEY, POOL, REDEEM_SLACK_MS, SpacePolicy, redeemBytes, type BoundedCounter, type Declaration, type PolicyOp } from '../src/crdt/index.ts'
import { toHex } from '../src/bytes.ts'
import { nodeCrypto, verifySync } from '../src/crypto/node.ts'
import { certifyDevice } from '../src/device.ts'
import { openEnvelope, openEnvelopeSync, sealEnvelope, type Envelope, type EnvelopeDraft, type ObjectUpdate, type SafeGroup } from '../src/envelope.ts'
import { decode, encode } from '../src/codec.ts'
import { attestedDecision } from '../src/protocol.ts'
import { caughtUpByDelta } from './catch-up.ts'
import { ReliableReplica, StableAudit, type Decision } from '../src/replica.ts'
import { SteadError } from '../src/errors.ts'

const crypto = nodeCrypto
const SPACE = 'team'
const sha = (b: Uint8Array): Uint8Array => crypto.sha256(b)

async function identity(n: number) {
  const secretKey = new Uint8Array(32).fill(n + 11)
  const publicKey = await crypto.publicKeyOf(secretKey)
  const env = await sealEnvelope(crypto, { secretKey, publicKey }, { space: SPACE, seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'x', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] })
  return { secretKey, publicKey, id: env.authorId }
}
const people = await Promise.all([0, 1, 2, 3, 4, 5].map(identity))
/** Users 0 to 3 sign with their own keys; 4 is a device of user 1, 5 a device of user 0 (certified by their users' keys). */
const DEVICE_OF: Record<number, number> = { 4: 1, 5: 0 }
const users = await Promise.all(people.map(async (p, u) => (DEVICE_OF[u] === undefined ? p : { ...p, certificate: await certifyDevice(crypto, people[DEVICE_OF[u]]!, p.publicKey) })))
const id = (u: number): string => users[u]!.id
/** Whom a policy sees when `u` signs: the user of a device. */
const userId = (u: number): string => id(DEVICE_OF[u] ?? u)

const policy: Declaration = { type: 'policy' }
const counter: Declaration = { type: 'counter', bounds: {} }

function seal(user: number, seq: number, parts: { updates?: ObjectUpdate[]; safe?: SafeGroup[] }): Promise<Envelope> {
  const draft: EnvelopeDraft = { space: SPACE, seq, clock: clockInit(), deps: [], updates: parts.updates ?? [], safe: parts.safe ?? [] }
  return sealEnvelope(crypto, users[user]!, draft)
}
const change = (op: PolicyOp): SafeGroup => ({ atomic: false, updates: [{ key: POLICY_KEY, decl: policy, op }] })
const inc = (key: string, n: number): ObjectUpdate => ({ key, decl: counter, ops: [n] })

/** Each unit's status and reason, per committed envelope: what replicas must agree on. */
function split(decisions: readonly Decision[]): string[] {
  return decisions.flatMap((d) => (d.kind === 'superseded' ? [] : [JSON.stringify(attestedDecision(d))]))
}

/** Each envelope's first unit's status, with its reason when rejected. */
const statuses = (decisions: readonly Decision[]) => decisions.map((d) => (d.kind === 'committed' ? (d.units[0]?.status === 'rejected' ? `rejected:${d.units[0].reason}` : 'committed') : d.kind))

describe('space policy: the object', () => {
  const ctx = (tag: string) => ({ replica: 'r', tag })

  it('is created once, with an admin, and keeps one admin', () => {
    const p = new SpacePolicy()
    expect(p.tryApply(['r', 'a', 'writer'], ctx('t:0'))).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.tryApply(['i', [['a', 'writer']], 'none'], ctx('t:1'))).toMatchObject({ ok: false, reason: 'invariant' })
    expect(p.tryApply(['i', [['a', 'admin'], ['b', 'reader']], 'none'], ctx('t:2'))).toEqual({ ok: true })
    expect(p.tryApply(['i', [['c', 'admin']], 'none'], ctx('t:3'))).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.tryApply(['r', 'a', null], ctx('t:4'))).toMatchObject({ ok: false, reason: 'invariant' })
    expect(p.tryApply(['r', 'b', 'admin'], ctx('t:5'))).toEqual({ ok: true })
    expect(p.tryApply(['r', 'a', null], ctx('t:6'))).toEqual({ ok: true })
    expect(p.value()).toEqual({ members: { b: 'admin' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
    expect(p.mayRead('a')).toBe(false)
    expect(p.tryApply(['e', 'reader'], ctx('t:7'))).toEqual({ ok: true })
    expect(p.mayRead(undefined)).toBe(true)
    expect(p.mayWrite('a')).toBe(false)
    expect(SpacePolicy.fromSnapshot(p.snapshot()).value()).toEqual(p.value())
  })

  it('withdraws an op applied last exactly', () => {
    const p = new SpacePolicy()
    p.apply(['i', [['a', 'admin']], 'none'], ctx('t:1'))
    const before = p.value()
    p.apply(['r', 'b', 'writer'], ctx('t:2'))
    p.apply(p.inverse(), ctx('t:2'))
    expect(p.value()).toEqual(before)
  })

  it('lives only at $policy, as safe updates, never nested: such an envelope cannot even be sealed', async () => {
    await expect(seal(0, 1, { safe: [{ atomic: false, updates: [{ key: 'p', decl: policy, op: ['e', 'reader'] }] }] })).rejects.toThrow(/lives only at \$policy/)
    await expect(seal(0, 1, { updates: [inc(POLICY_KEY, 1)] })).rejects.toThrow(/holds the space's policy/)
    await expect(seal(0, 1, { updates: [{ key: POLICY_KEY, decl: policy, ops: [['e', 'reader']] }] })).rejects.toThrow(/must be a safe update/)
    await expect(seal(0, 1, { updates: [{ key: 'm', decl: { type: 'map', bounds: { schema: { p: ['p'] } } } as unknown as Declaration, ops: [['s', 'p', 1]] }] })).rejects.toThrow(SteadError)
  })
})

describe('space policy: the audit', () => {
  it("lets a replica retire its own bounded-counter rights, an admin anyone's, and a user its revoked device's; nobody else", async () => {
    const seats: Declaration = { type: 'bounded-counter', params: { min: 0, initial: 10 } }
    const retire = (who: number): SafeGroup => ({ atomic: false, updates: [{ key: 'seats', decl: seats, op: ['r', id(who)] }] })
    const claim = (n: number): SafeGroup => ({ atomic: false, updates: [{ key: 'seats', decl: seats, op: ['c', n] }] })
    const r = new StableAudit({ space: SPACE })
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer'], [id(2), 'writer'], [id(3), 'writer']], 'none'])] })
    const claims = [await seal(1, 1, { safe: [claim(2)] }), await seal(2, 1, { safe: [claim(2)] }), await seal(3, 1, { safe: [claim(2)] }), await seal(4, 1, { safe: [claim(2)] })]
    const byStranger = await seal(2, 2, { safe: [retire(3)] })
    const byItself = await seal(3, 2, { safe: [retire(3)] })
    const byAdmin = await seal(0, 2, { safe: [retire(2)] })
    const byUserBeforeRevoking = await seal(1, 2, { safe: [retire(4)] })
    const revoke = await seal(1, 3, { safe: [change(['v', id(1), id(4)])] })
    const byUser = await seal(1, 4, { safe: [retire(4)] })
    const decisions = r.commit([create, ...claims, byStranger, byItself, byAdmin, byUserBeforeRevoking, revoke, byUser]).decisions
    expect(statuses(decisions).slice(5)).toEqual(['rejected:unauthorized', 'committed', 'committed', 'rejected:unauthorized', 'committed', 'committed'])
    const stock = r.stable('seats') as BoundedCounter
    // The retired replicas' rights went back to the pool; user 1's own stayed with it.
    expect(stock.localRights(POOL)).toBe(2 + 2 + 2 + 2)
    expect(stock.localRights(id(1))).toBe(2)
  })

  it('checks every update against the policy in force at its position: a revoked writer keeps its earlier updates, loses its later ones', async () => {
    const r = new StableAudit({ space: SPACE })
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] })
    const early = await seal(1, 1, { updates: [inc('c', 5)] })
    const stranger = await seal(2, 1, { updates: [inc('c', 100)] })
    const revoke = await seal(0, 2, { safe: [change(['r', id(1), null])] })
    const late = await seal(1, 2, { updates: [inc('c', 7)] })
    const coup = await seal(1, 3, { safe: [change(['r', id(1), 'admin'])] })
    const result = r.commit([create, early, stranger, revoke, late, coup])
    const units = result.decisions.map((d) => (d.kind === 'committed' ? d.units[0] : undefined))
    expect(units.map((u) => u?.status)).toEqual(['committed', 'committed', 'rejected', 'committed', 'rejected', 'rejected'])
    expect(units[2]).toMatchObject({ reason: 'unauthorized' })
    expect(units[4]).toMatchObject({ reason: 'unauthorized' })
    expect(units[5]).toMatchObject({ reason: 'unauthorized' })
    expect(r.stableValue('c')).toBe(5)
    expect(r.policy()?.value()).toEqual({ members: { [id(0)]: 'admin' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
  })

  it('lets a creator write in the envelope that creates the policy, and anyone once everyone may write', async () => {
    const r = new StableAudit({ space: SPACE })
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none']), { atomic: false, updates: [{ key: 'c', decl: counter, op: 2 }] }] })
    const open = await seal(0, 2, { safe: [change(['e', 'writer'])] })
    const anyone = await seal(3, 1, { updates: [inc('c', 1)] })
    const decisions = r.commit([create, open, anyone]).decisions
    expect(decisions.flatMap((d) => (d.kind === 'committed' ? d.units.map((u) => u.status) : []))).toEqual(['committed', 'committed', 'committed', 'committed'])
    expect(r.stableValue('c')).toBe(3)
  })

  it('defers to the authorize option only while the space has no policy', async () => {
    const onlyZero = (author: string) => (author === id(0) ? { ok: true as const } : { ok: false as const, reason: 'unauthorized' as const, detail: 'file' })
    const r = new StableAudit({ space: SPACE, authorize: onlyZero })
    const before = await seal(1, 1, { updates: [inc('c', 1)] })
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] })
    const after = await seal(1, 2, { updates: [inc('c', 1)] })
    const d = r.commit([before, create, after]).decisions
    expect(d.map((x) => (x.kind === 'committed' ? x.units[0]?.status : x.kind))).toEqual(['rejected', 'committed', 'committed'])
  })

  it('shows a pending grant prospectively and settles to the stable policy', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none'])] })
    r.receive(create)
    r.commit([create])
    const grant = await seal(0, 2, { safe: [change(['r', id(1), 'reader'])] })
    const forged = await seal(2, 1, { safe: [change(['r', id(2), 'admin'])] })
    r.receive(forged)
    r.receive(grant)
    expect(r.value(POLICY_KEY)).toEqual({ members: { [id(0)]: 'admin', [id(1)]: 'reader', [id(2)]: 'admin' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
    r.commit([forged, grant])
    expect(r.pendingCount).toBe(0)
    expect(r.value(POLICY_KEY)).toEqual({ members: { [id(0)]: 'admin', [id(1)]: 'reader' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
    expect(r.value(POLICY_KEY)).toEqual(r.stableValue(POLICY_KEY))
  })
})

/** An invitation: its key pair (the secret travels in the link). */
async function invitationKey(n: number) {
  const secretKey = new Uint8Array(32).fill(100 + n)
  return { secretKey, key: toHex(await crypto.publicKeyOf(secretKey)) }
}
const redeem = async (inv: { secretKey: Uint8Array; key: string }, user: number, t: number, as = user): Promise<PolicyOp> => ['j', inv.key, t, await crypto.sign(inv.secretKey, redeemBytes(SPACE, userId(as), inv.key, t))]

describe('space policy: invitations', () => {

  it('lets whoever holds an invitation take its role, as many times as it allows, until it expires or is closed', async () => {
    const a = await invitationKey(1)
    const once = await invitationKey(2)
    const r = new StableAudit({ space: SPACE })
    const envs = [
      await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none']), change(['n', a.key, 'writer', 5_000, 2, 1_000]), change(['n', once.key, 'reader', 0, 1, 1_000])] }),
      await seal(1, 1, { safe: [change(await redeem(a, 1, 2_000))] }),
      await seal(1, 2, { updates: [inc('c', 1)] }),
      // Used twice already after this one: the third is refused.
      await seal(2, 1, { safe: [change(await redeem(a, 2, 2_100))] }),
      await seal(3, 1, { safe: [change(await redeem(a, 3, 2_200))] }),
      // Single use: the first redemption takes it, the second finds it gone.
      await seal(3, 2, { safe: [change(await redeem(once, 3, 2_300))] }),
      await seal(2, 2, { safe: [change(await redeem(once, 2, 2_400))] }),
    ]
    expect(statuses(r.commit(envs).decisions)).toEqual(['committed', 'committed', 'committed', 'committed', 'rejected:unauthorized', 'committed', 'rejected:unauthorized'])
    // A redemption never lowers a role: user 2 stays a writer.
    expect(r.policy()?.value().members).toEqual({ [id(0)]: 'admin', [id(1)]: 'writer', [id(2)]: 'writer', [id(3)]: 'reader' })
    expect(r.policy()?.openInvitations().size).toBe(0)
  })

  it('refuses an expired, closed, forged or stolen redemption, one backdated past the space, and an invitation from a non-admin', async () => {
    const a = await invitationKey(3)
    const b = await invitationKey(4)
    const wrong = await invitationKey(5)
    const r = new StableAudit({ space: SPACE })
    const envs = [
      await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none']), change(['n', a.key, 'writer', 5_000, 0, 1_000]), change(['n', b.key, 'reader', 0, 0, 1_000])] }),
      // Expired.
      await seal(2, 1, { safe: [change(await redeem(a, 2, 6_000))] }),
      // Signed by another key than the invitation's.
      await seal(2, 2, { safe: [change(['j', a.key, 2_000, (await redeem(wrong, 2, 2_000))[3] as Uint8Array])] }),
      // Signed for user 3, sent by user 2 (a redemption seen on the wire cannot be taken over).
      await seal(2, 3, { safe: [change(await redeem(a, 2, 2_000, 3))] }),
      // A writer may not open invitations.
      await seal(1, 1, { safe: [change(['n', wrong.key, 'admin', 0, 0, 1_500])] }),
      // Someone redeems b at 3,000,000; one claiming a time more than REDEEM_SLACK_MS earlier afterwards is backdated.
      await seal(3, 1, { safe: [change(await redeem(b, 3, 3_000_000))] }),
      await seal(2, 4, { safe: [change(await redeem(b, 2, 3_000_000 - REDEEM_SLACK_MS - 1))] }),
      // Closed.
      await seal(0, 2, { safe: [change(['x', b.key])] }),
      await seal(2, 5, { safe: [change(await redeem(b, 2, 3_000_100))] }),
    ]
    expect(statuses(r.commit(envs).decisions)).toEqual([
      'committed',
      'rejected:unauthorized',
      'rejected:unauthorized',
      'rejected:unauthorized',
      'rejected:unauthorized',
      'committed',
      'rejected:unauthorized',
      'committed',
      'rejected:unauthorized',
    ])
    expect(r.policy()?.roleOf(id(2))).toBeUndefined()
    expect(r.policy()?.roleOf(id(3))).toBe('reader')
  })

  it('lets two people join at once whatever order their clocks signed in (within the slack)', async () => {
    const many = await invitationKey(8)
    const r = new StableAudit({ space: SPACE })
    const envs = [
      await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none']), change(['n', many.key, 'writer', 0, 0, 1_000_000])] }),
      // Signed a minute later, ordered first.
      await seal(1, 1, { safe: [change(await redeem(many, 1, 1_060_000))] }),
      await seal(2, 1, { safe: [change(await redeem(many, 2, 1_000_500))] }),
    ]
    expect(statuses(r.commit(envs).decisions)).toEqual(['committed', 'committed', 'committed'])
  })

  it('decides two redemptions of a single-use invitation by the order alone: whichever comes first, on every replica', async () => {
    const once = await invitationKey(6)
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none']), change(['n', once.key, 'writer', 0, 1, 1_000])] })
    const x = await seal(1, 1, { safe: [change(await redeem(once, 1, 2_000))] })
    const y = await seal(2, 1, { safe: [change(await redeem(once, 2, 2_000))] })
    for (const [first, second, winner] of [
      [x, y, 1],
      [y, x, 2],
    ] as const) {
      const replicas = [new StableAudit({ space: SPACE }), new ReliableReplica({ space: SPACE })]
      ;(replicas[1] as ReliableReplica).receive(second)
      ;(replicas[1] as ReliableReplica).receive(first)
      const splits = replicas.map((r) => [...split(r.commit([create]).decisions), ...split(r.commit([first, second]).decisions)])
      expect(splits[1]).toEqual(splits[0])
      for (const r of replicas) expect(Object.keys(r.policy()?.value().members ?? {}).sort()).toEqual([id(0), id(winner)].sort())
    }
  })

  it('allows one redemption per envelope', async () => {
    const a = await invitationKey(7)
    await expect(seal(1, 1, { safe: [change(await redeem(a, 1, 1)), change(await redeem(a, 1, 2))] })).rejects.toThrow(/at most one invitation/)
  })
})

/** One step of a random history: who acts, and what. */
type Step = { user: number; kind: 'grant' | 'revoke' | 'everyone' | 'write' | 'invite' | 'redeem' | 'close' | 'revokeDevice' | 'retain'; target: number; role: 'admin' | 'writer' | 'reader'; everyone: 'none' | 'reader' | 'writer'; n: number }

const stepArb: fc.Arbitrary<Step> = fc.record({
  user: fc.integer({ min: 0, max: 5 }),
  kind: fc.constantFrom('grant', 'revoke', 'everyone', 'write', 'write', 'invite', 'redeem', 'redeem', 'close', 'revokeDevice', 'retain'),
  target: fc.integer({ min: 0, max: 3 }),
  role: fc.constantFrom('admin', 'writer', 'reader'),
  everyone: fc.constantFrom('none', 'reader', 'writer'),
  n: fc.integer({ min: 1, max: 9 }),
})

async function history(steps: readonly Step[]): Promise<Envelope[]> {
  const seqs = [1, 1, 1, 1, 1, 1]
  const next = (u: number): number => (seqs[u] = (seqs[u] ?? 1) + 1) - 1
  const out = [await seal(0, next(0), { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] })]
  for (const s of steps) {
    const seq = next(s.user)
    if (s.kind === 'write') out.push(await seal(s.user, seq, { updates: [inc(`c${s.target % 2}`, s.n)] }))
    else if (s.kind === 'grant') out.push(await seal(s.user, seq, { safe: [change(['r', id(s.target), s.role])] }))
    else if (s.kind === 'revoke') out.push(await seal(s.user, seq, { safe: [change(['r', id(s.target), null])] }))
    else if (s.kind === 'everyone') out.push(await seal(s.user, seq, { safe: [change(['e', s.everyone])] }))
    // Device 4 (of user 1) or 5 (of user 0) revoked, by whoever tries: its user's own key and admins succeed.
    // A retention, or now and then (n = 9) the space's deletion, by whoever tries: admins succeed.
    else if (s.kind === 'retain') out.push(await seal(s.user, seq, { safe: [change(s.n === 9 ? ['d'] : ['k', s.n * 10, s.n % 3])] }))
    else if (s.kind === 'revokeDevice') out.push(await seal(s.user, seq, { safe: [change(['v', userId(4 + (s.target % 2)), id(4 + (s.target % 2))])] }))
    else {
      // Two invitations, opened and closed by whoever tries (admins only succeed), redeemed by anyone, with times
      // that grow with the history and sometimes run past an expiry or fall back past the slack.
      const inv = invitations[s.target % 2] as { secretKey: Uint8Array; key: string }
      const t = out.length * 60_000 + (s.n === 9 ? -REDEEM_SLACK_MS * 2 : 0)
      if (s.kind === 'invite') out.push(await seal(s.user, seq, { safe: [change(['n', inv.key, s.role, s.n > 6 ? Math.max(0, t) + 120_000 : 0, s.n % 3, Math.max(0, t)])] }))
      else if (s.kind === 'close') out.push(await seal(s.user, seq, { safe: [change(['x', inv.key])] }))
      else out.push(await seal(s.user, seq, { safe: [change(await redeem(inv, s.user, Math.max(0, t)))] }))
    }
  }
  return out
}
const invitations = await Promise.all([20, 21].map(invitationKey))

/** `items` cut into consecutive batches at the given (sorted, deduplicated) points. */
function batches<T>(items: readonly T[], cuts: readonly number[]): T[][] {
  const points = [...new Set(cuts.map((c) => c % (items.length + 1)))].sort((a, b) => a - b)
  const out: T[][] = []
  let from = 0
  for (const p of [...points, items.length]) {
    if (p > from) out.push(items.slice(from, p))
    from = Math.max(from, p)
  }
  return out
}

describe('space policy: retention and deleting the space', () => {
  it('keeps a retention that only admins set, in values and snapshots', async () => {
    const r = new StableAudit({ space: SPACE })
    const envs = [
      await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] }),
      await seal(1, 1, { safe: [change(['k', 5, 0])] }),
      await seal(0, 2, { safe: [change(['k', 100, 30])] }),
    ]
    expect(statuses(r.commit(envs).decisions)).toEqual(['committed', 'rejected:unauthorized', 'committed'])
    expect(r.policy()?.retention).toEqual({ entries: 100, days: 30 })
    const copy = SpacePolicy.fromSnapshot(decode(encode(r.policy()?.snapshot())) as never)
    expect(copy.value()).toEqual(r.policy()?.value())
    // Back to keeping everything: the snapshot takes the form it had before retentions existed (same state hash).
    r.commit([await seal(0, 3, { safe: [change(['k', 0, 0])] })])
    expect(r.policy()?.snapshot()).toHaveLength(5)
  })

  it('refuses a retention out of range and a malformed deletion', () => {
    const p = new SpacePolicy()
    const ctx = { replica: 'a', tag: 't' }
    p.tryApply(['i', [['a', 'admin']], 'none'], ctx)
    expect(p.tryApply(['k', -1, 0], ctx)).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.tryApply(['k', 0, 1.5], ctx)).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.tryApply(['k', 0, 36_501], ctx)).toMatchObject({ ok: false, reason: 'malformed' })
    expect(p.tryApply(['d', 1] as unknown as PolicyOp, ctx)).toMatchObject({ ok: false, reason: 'malformed' })
  })

  it('deletes the space where the order puts it: what came before goes, nothing after takes, not even a new policy, on every replica', async () => {
    const create = await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] })
    const write = await seal(1, 1, { updates: [inc('c', 5), inc('d', 1)] })
    const notAdmin = await seal(1, 2, { safe: [change(['d'])] })
    const del = await seal(0, 2, { safe: [change(['d'])] })
    const late = await seal(1, 3, { updates: [inc('c', 7)] })
    const recreate = await seal(0, 3, { safe: [change(['i', [[id(0), 'admin']], 'none'])] })
    const grant = await seal(0, 4, { safe: [change(['r', id(2), 'writer'])] })
    const envs = [create, write, notAdmin, del, late, recreate, grant]
    const a = new StableAudit({ space: SPACE })
    const result = a.commit(envs)
    expect(statuses(result.decisions)).toEqual(['committed', 'committed', 'rejected:unauthorized', 'committed', 'rejected:unauthorized', 'rejected:unauthorized', 'rejected:unauthorized'])
    expect([a.stableValue('c'), a.stableValue('d'), a.policy()?.deleted]).toEqual([undefined, undefined, true])
    expect([...a.keys()]).toEqual([POLICY_KEY])
    // Its histories say null where the deletion went.
    expect(result.history.filter((h) => h.index === 4).map((h) => [h.key, h.value])).toEqual([[POLICY_KEY, expect.anything()], ['c', null], ['d', null]])
    // A replica that saw everything prospectively first ends empty too, and one restored from a checkpoint before it alike.
    const b = new ReliableReplica({ space: SPACE })
    for (const e of [...envs].reverse()) b.receive(e)
    expect(b.value('c')).toBe(12)
    b.commit(envs.slice(0, 3))
    b.commit(envs.slice(3))
    expect([b.value('c'), b.value('d'), b.pendingCount]).toEqual([undefined, undefined, 0])
    expect(b.stableHash(sha)).toEqual(a.stableHash(sha))
    const d = new StableAudit({ space: SPACE })
    d.commit(envs.slice(0, 2))
    const restored = StableAudit.restore({ space: SPACE }, decode(encode(d.checkpoint())), (signed) => openEnvelopeSync({ sha256: sha, verify: () => true }, signed))
    restored.commit(envs.slice(2))
    expect(restored.stableHash(sha)).toEqual(a.stableHash(sha))
  })
})

describe('space policy: every replica splits the same updates alike', () => {
  it('whatever the delivery order and however the order is cut into commits (property)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(stepArb, { minLength: 1, maxLength: 24 }), fc.array(fc.nat(), { maxLength: 6 }), fc.array(fc.nat(), { maxLength: 6 }), fc.integer(), async (steps, cutsA, cutsB, shuffleSeed) => {
        const envs = await history(steps)
        // The stable order every replica is given; A commits one envelope at a time, B and C in batches.
        const a = new StableAudit({ space: SPACE })
        const splitA = envs.flatMap((e) => split(a.commit([e]).decisions))
        const b = new ReliableReplica({ space: SPACE })
        const splitB = batches(envs, cutsA).flatMap((batch) => split(b.commit(batch).decisions))
        // C saw everything prospectively first, in another order.
        const c = new ReliableReplica({ space: SPACE })
        let seed = shuffleSeed >>> 0
        const shuffled = [...envs].sort(() => ((seed = (seed * 1103515245 + 12345) >>> 0) % 3) - 1)
        for (const e of shuffled) c.receive(e)
        const splitC = batches(envs, cutsB).flatMap((batch) => split(c.commit(batch).decisions))
        expect(splitB).toEqual(splitA)
        expect(splitC).toEqual(splitA)
        for (const r of [b, c]) expect(r.stableHash(sha)).toEqual(a.stableHash(sha))
        // G5: with nothing pending, prospective equals stable, the policy included.
        expect(c.pendingCount).toBe(0)
        for (const key of [POLICY_KEY, 'c0', 'c1']) expect(c.value(key)).toEqual(c.stableValue(key))
        // The stable policy is the one the sequential rule gives: replayed by hand.
        const byHand = new SpacePolicy()
        for (const e of envs) for (const g of e.safe) for (const u of g.updates) {
          if (u.key !== POLICY_KEY) continue
          const op = u.op as PolicyOp
          // Redemptions are anybody's (their signatures are good here); a revoked device's nothing; the rest are admins',
          // and a device's revocation its user key's too.
          const mayChange = op[0] === 'i' ? !byHand.created : !byHand.deleted && !byHand.isRevoked(e.userId, e.authorId) && (op[0] === 'j' || byHand.mayAdminister(e.userId) || (op[0] === 'v' && op[1] === e.authorId))
          if (mayChange) byHand.tryApply(op, { replica: e.authorId, user: e.userId, tag: 'x' })
        }
        expect(a.policy()?.value()).toEqual(byHand.value())
        // A deleted space holds nothing but its policy.
        if (byHand.deleted) for (const key of ['c0', 'c1']) expect([a.stableValue(key), c.value(key)]).toEqual([undefined, undefined])
        expect([...(a.policy()?.openInvitations() ?? [])]).toEqual([...byHand.openInvitations()])
        // Restored from a checkpoint midway, a replica goes on alike.
        const half = Math.floor(envs.length / 2)
        const d = new StableAudit({ space: SPACE })
        d.commit(envs.slice(0, half))
        const restored = StableAudit.restore({ space: SPACE }, decode(encode(d.checkpoint())), (signed) => openEnvelopeSync({ sha256: sha, verify: () => true }, signed))
        restored.commit(envs.slice(half))
        expect(restored.stableHash(sha)).toEqual(a.stableHash(sha))
        expect(encode(restored.policy()?.snapshot())).toEqual(encode(a.policy()?.snapshot()))
        // A replica at the midpoint catches up by a delta, a deletion of the space in it included.
        const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: sha, verify: () => true }, [signed.bytes, signed.sig])
        for (const { replica: behind } of caughtUpByDelta(SPACE, envs, half, sha, open)) {
          expect(behind.stableHash(sha)).toEqual(a.stableHash(sha))
          for (const key of [POLICY_KEY, 'c0', 'c1']) expect(behind.value(key)).toEqual(a.stableValue(key))
        }
      }),
      { numRuns: Number(process.env.POLICY_RUNS ?? 150) },
    )
  }, 120_000)
})

describe('space policy: devices', () => {

  it("a device acts for its user, and once revoked its later updates are rejected while its earlier ones and the user's other keys stand", async () => {
    const r = new StableAudit({ space: SPACE })
    const envs = [
      await seal(0, 1, { safe: [change(['i', [[id(0), 'admin'], [id(1), 'writer']], 'none'])] }),
      // Device 4 is user 1's: it writes as user 1 (its own author id is in no policy).
      await seal(4, 1, { updates: [inc('c', 1)] }),
      // A device may not revoke its user's devices (it may be the stolen one)...
      await seal(4, 2, { safe: [change(['v', id(1), id(4)])] }),
      // ...the user's own key may.
      await seal(1, 1, { safe: [change(['v', id(1), id(4)])] }),
      await seal(4, 3, { updates: [inc('c', 10)] }),
      await seal(1, 2, { updates: [inc('c', 100)] }),
      // An admin revokes another user's device: user 0's own device 5, then writes with its own key.
      await seal(5, 1, { updates: [inc('c', 1000)] }),
    ]
    expect(statuses(r.commit(envs).decisions)).toEqual(['committed', 'committed', 'rejected:unauthorized', 'committed', 'rejected:unauthorized', 'committed', 'committed'])
    expect(r.stableValue('c')).toBe(1101)
    expect(r.policy()?.value().revokedDevices).toEqual({ [id(1)]: [id(4)] })
    expect(r.policy()?.isRevoked(id(1), id(4))).toBe(true)
    const admin = await seal(0, 2, { safe: [change(['v', id(1), id(2)])] })
    expect(statuses(r.commit([admin]).decisions)).toEqual(['committed'])
  })

  it('a redemption from a device gives the role to its user', async () => {
    const inv = await invitationKey(9)
    const r = new StableAudit({ space: SPACE })
    r.commit([await seal(0, 1, { safe: [change(['i', [[id(0), 'admin']], 'none']), change(['n', inv.key, 'writer', 0, 1, 1_000])] })])
    const d = r.commit([await seal(4, 1, { safe: [change(await redeem(inv, 4, 2_000))] })]).decisions
    expect(statuses(d)).toEqual(['committed'])
    expect(r.policy()?.roleOf(id(1))).toBe('writer')
    expect(r.policy()?.roleOf(id(4))).toBeUndefined()
  })

  it('refuses a forged certificate, one of another key, and a key named its own user, before any audit', async () => {
    const device = users[4] as { secretKey: Uint8Array; publicKey: Uint8Array; certificate: { user: Uint8Array; sig: Uint8Array } }
    const draft: EnvelopeDraft = { space: SPACE, seq: 1, clock: clockInit(), deps: [], updates: [inc('c', 1)], safe: [] }
    const ok = await sealEnvelope(crypto, device, draft)
    expect(ok.userId).toBe(id(1))
    expect(ok.authorId).toBe(id(4))
    const syncCrypto = { sha256: sha, verify: verifySync }
    const open = (e: Envelope) => openEnvelopeSync(syncCrypto, e.signed)
    expect(open(ok).userId).toBe(id(1))
    // Claims to be user 0's device with user 1's signature; user 1's certificate of device 5 on device 4; device 4 as its own user.
    const forged = { ...device, certificate: { user: users[0]!.publicKey, sig: device.certificate.sig } }
    const other = { ...device, certificate: (users[5] as typeof device).certificate }
    const own = { ...device, certificate: await certifyDevice(crypto, device, device.publicKey) }
    for (const who of [forged, other, own]) {
      // The author signs a valid envelope: only the certificate is wrong.
      const bytes = ok.signed.bytes
      const payload = decode(bytes) as unknown[]
      payload[9] = [who.certificate.user, who.certificate.sig]
      const reBytes = encode(payload)
      const signed = { bytes: reBytes, sig: await crypto.sign(device.secretKey, reBytes) }
      expect(() => openEnvelopeSync(syncCrypto, signed)).toThrow(/device certificate does not verify/)
      await expect(openEnvelope(crypto, signed)).rejects.toThrow(SteadError)
      await expect(sealEnvelope(crypto, who, draft).then((e) => open(e))).rejects.toThrow(/device certificate does not verify/)
    }
  })
})
