import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { composeClock, judgeClock, type ClockInputs } from '../src/causal.ts'
import { causalOrder, clockQuorum, clockRank, encodeClockVote, verifyClockCertificate, type CertifiedClock, type ClockCertificate } from '../src/chrono.ts'
import { clockFrom, clockInit, type Clock } from '../src/clock.ts'
import { type Declaration } from '../src/crdt/index.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { authorIdOf, openEnvelopeSync, sealEnvelope, type Envelope } from '../src/envelope.ts'
import { ReliableReplica, type Decision } from '../src/replica.ts'
import { attestedDecision, decodeAttestation, encodeAttestation } from '../src/protocol.ts'
import { decodeAuditState, encodeAuditState } from '../src/state.ts'
import { isSteadError } from '../src/errors.ts'
import { toHex } from '../src/bytes.ts'

const crypto = nodeCrypto
const SPACE = 'causal'
const counter: Declaration = { type: 'counter', bounds: {} }

async function identity(n: number) {
  const secretKey = new Uint8Array(32).fill(n + 11)
  const publicKey = await crypto.publicKeyOf(secretKey)
  return { secretKey, publicKey, id: authorIdOf(crypto, publicKey) }
}
const users = await Promise.all([0, 1, 2, 3].map(identity))
const [alice, bob, carol] = users as [Awaited<ReturnType<typeof identity>>, Awaited<ReturnType<typeof identity>>, Awaited<ReturnType<typeof identity>>]

function seal(user: { secretKey: Uint8Array; publicKey: Uint8Array }, seq: number, o: { base?: number; clock?: Clock; deps?: Envelope[] } = {}): Promise<Envelope> {
  return sealEnvelope(crypto, user, { space: SPACE, seq, base: o.base ?? 0, clock: o.clock ?? clockInit(), deps: (o.deps ?? []).map((d) => d.id), updates: [{ key: 'c', decl: counter, ops: [1] }], safe: [] })
}

function only(r: ReliableReplica, env: Envelope): Decision {
  const { decisions } = r.commit([env])
  expect(decisions).toHaveLength(1)
  return decisions[0] as Decision
}

/** The full clock an envelope stands for (causal.ts): its listed entries over F(base), its own entry its seq. */
function fullClock(env: Envelope, committedAt: (author: string, index: number) => number, authors: readonly string[]): Map<string, number> {
  const out = new Map<string, number>()
  for (const a of authors) {
    const n = a === env.authorId ? env.seq : Math.max(committedAt(a, env.base), env.clock.get(a) ?? 0)
    if (n > 0) out.set(a, n)
  }
  return out
}

/** What a promise ends with: 'accepted', or the reason it was refused. */
const reason = (p: Promise<unknown>) => p.then(() => 'accepted', (e: unknown) => (isSteadError(e) ? e.reason : String(e)))

describe('envelope clocks (Chrono with a stable base)', () => {
  it('refuses a forged entry with bad-clock in the audit, and the slot stays open for an honest envelope', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const forged = await seal(alice, 1, { clock: clockFrom([[bob.id, 999]]) })
    expect(r.judgeClock(forged)).toMatchObject({ ok: false, reason: 'bad-clock' })
    const d = only(r, forged)
    expect(d).toMatchObject({ kind: 'dropped', reason: 'bad-clock' })
    expect(attestedDecision(d as Exclude<Decision, { kind: 'superseded' }>)[1]).toBe('bad-clock')
    const honest = await seal(alice, 1)
    expect(only(r, honest)).toMatchObject({ kind: 'committed', clockVerified: true })
  })

  it('refuses cherry-picking (an entry its dep carries, left out) and a base that goes back', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    const c1 = await seal(carol, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    r.commit([b1, c1])
    // Alice cites c1 at base 0: c1 carries bob:1, which F(0) does not cover.
    const picked = await seal(alice, 1, { clock: clockFrom([[carol.id, 1]]), deps: [c1] })
    expect(only(r, picked)).toMatchObject({ kind: 'dropped', reason: 'bad-clock' })
    const right = await seal(alice, 1, { clock: clockFrom([[bob.id, 1], [carol.id, 1]]), deps: [c1] })
    expect(only(r, right)).toMatchObject({ kind: 'committed', clockVerified: true })
    // Base 3 covers everything so far; the next envelope may not count from an earlier one.
    const a2 = await seal(alice, 2, { base: 3 })
    expect(only(r, a2)).toMatchObject({ kind: 'committed', clockVerified: true })
    const back = await seal(alice, 3, { base: 2 })
    expect(only(r, back)).toMatchObject({ kind: 'dropped', reason: 'bad-clock' })
    const ahead = await seal(alice, 3, { base: 99 })
    expect(only(r, ahead)).toMatchObject({ kind: 'dropped', reason: 'bad-clock' })
  })

  it('refuses an envelope that forgets what its previous envelope had seen', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    r.commit([b1, a1])
    // At base 0 bob:1 is not covered, so alice's next clock must keep it.
    expect(only(r, await seal(alice, 2))).toMatchObject({ kind: 'dropped', reason: 'bad-clock' })
    // At base 1 (b1 committed) it is covered and may go unlisted.
    expect(only(r, await seal(alice, 2, { base: 1 }))).toMatchObject({ kind: 'committed', clockVerified: true })
  })

  it('commits unverified, never refuses, an envelope citing a dep the stable history lacks', async () => {
    const r = new ReliableReplica({ space: SPACE })
    // Bob's envelope reached Alice but is never ordered (a Byzantine author's, say).
    const b1 = await seal(bob, 1)
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    expect(r.judgeClock(a1)).toMatchObject({ ok: true, verified: false })
    expect(only(r, a1)).toMatchObject({ kind: 'committed', clockVerified: false })
    // Even a wild claim is only unverified while an unseen dep may carry it.
    const wild = await seal(carol, 1, { clock: clockFrom([[bob.id, 50]]), deps: [b1] })
    expect(only(r, wild)).toMatchObject({ kind: 'committed', clockVerified: false })
    // Alice's next one inherits bob:1 from an unverified input: unverified until the base covers it.
    expect(only(r, await seal(alice, 2, { clock: clockFrom([[bob.id, 1]]) }))).toMatchObject({ kind: 'committed', clockVerified: false })
    r.commit([b1])
    expect(only(r, await seal(alice, 3, { base: r.stableIndex }))).toMatchObject({ kind: 'committed', clockVerified: true })
  })

  it('runs an envelope after the deps it names that the same commit carries later, so its clock verifies', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    const c1 = await seal(carol, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1], [carol.id, 1]]), deps: [c1] })
    const b2 = await seal(bob, 2)
    // Committed as [a1, b2, c1, b1]: the audit runs b1, c1, a1, then b2.
    const { decisions } = r.commit([a1, b2, c1, b1])
    expect(decisions.map((d) => [d.env.idHex, d.kind === 'committed' && d.clockVerified])).toEqual([
      [b1.idHex, true],
      [c1.idHex, true],
      [a1.idHex, true],
      [b2.idHex, true],
    ])
  })

  it('10,000 authors in one space: a clock lists only what its base does not cover, so it stays small and verifies', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const many = 10_000
    const committed = (a: string): number => r.nextSeq(a) - 1
    for (let from = 0; from < many; from += 1000) {
      const batch: Envelope[] = []
      for (let i = from; i < from + 1000; i++) {
        const secretKey = new Uint8Array(32)
        new DataView(secretKey.buffer).setUint32(0, i + 1000)
        batch.push(await seal({ secretKey, publicKey: await crypto.publicKeyOf(secretKey) }, 1))
      }
      // Each author's first envelope, seen nothing: an empty clock, which verifies.
      r.commit(batch, from / 1000 + 1)
    }
    expect(r.stableIndex).toBe(many)
    // One that saw all 10,000 (and the newest one uncommitted, by a dep) lists one entry over its base.
    const lastKey = new Uint8Array(32).fill(250)
    const pendingOne = await seal({ secretKey: lastKey, publicKey: await crypto.publicKeyOf(lastKey) }, 1)
    const { base, clock } = composeClock(alice.id, undefined, [{ authorId: pendingOne.authorId, seq: 1, base: pendingOne.base, clock: pendingOne.clock }], r.stableIndex, committed)
    expect(base).toBe(many)
    expect(clock.size).toBe(1)
    const a1 = await seal(alice, 1, { base, clock, deps: [pendingOne] })
    expect(a1.signed.bytes.length).toBeLessThan(400)
    const { decisions } = r.commit([pendingOne, a1], 11)
    expect(decisions.map((d) => d.kind === 'committed' && d.clockVerified)).toEqual([true, true])
  }, 60_000)

  it('a dep whose author moved on past the recent records leaves the clock unverified', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    r.commit([b1])
    for (let s = 2; s <= 258; s++) r.commit([await seal(bob, s)])
    const late = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    expect(only(r, late)).toMatchObject({ kind: 'committed', clockVerified: false })
  })

  it('honest authors composing clocks in any interleaving get verified clocks equal to their causal past', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 2 }), fc.boolean(), fc.integer({ min: 0, max: 3 })), { minLength: 1, maxLength: 30 }),
        async (steps) => {
          const audit = new ReliableReplica({ space: SPACE })
          // A client that gets every envelope as it is sent (peer to peer) and judges it before it shows.
          const viewer = new ReliableReplica({ space: SPACE })
          const authors = users.slice(0, 3)
          const ids = authors.map((u) => u.id)
          // Each author: what it heard (heads), its last clock, its seq; and the true causal past of every envelope.
          const state = authors.map(() => ({ seq: 0, last: { base: 0, clock: clockInit() }, heads: new Map<string, Envelope>(), applied: new Set<string>() }))
          const past = new Map<string, Map<string, number>>()
          const sent: Envelope[] = []
          const committedAt = (a: string, index: number): number => {
            let n = 0
            for (const d of decided) if ((d.index as number) <= index && d.env.authorId === a) n = Math.max(n, d.env.seq)
            return n
          }
          const decided: Array<CertifiedClock> = []
          const weights = new Map<string, number>()
          let unordered: Envelope[] = []
          for (const [who, commitNow, hear] of steps) {
            const me = state[who]!
            const author = authors[who]!
            // Hear up to `hear` envelopes of others, in the order sent.
            for (const e of sent.filter((e) => e.authorId !== author.id && !me.applied.has(e.idHex)).slice(0, hear)) {
              me.applied.add(e.idHex)
              for (const d of e.deps) me.heads.delete(toHex(d))
              for (const [id, h] of me.heads) if (h.authorId === e.authorId && h.seq < e.seq) me.heads.delete(id)
              me.heads.set(e.idHex, e)
            }
            const stable = audit.stableIndex
            const cited = [...me.heads.values()].filter((h) => !decided.some((d) => d.env.idHex === h.idHex))
            const { base, clock } = composeClock(author.id, me.last, cited, stable, (a) => audit.nextSeq(a) - 1)
            const seq = ++me.seq
            const env = await sealEnvelope(crypto, author, { space: SPACE, seq, base, clock, deps: cited.map((c) => c.id), updates: [{ key: 'c', decl: counter, ops: [1] }], safe: [] })
            me.last = { base, clock }
            me.heads.clear()
            // True causal past: own chain, every cited envelope's past, and everything committed up to the base.
            const truth = new Map<string, number>()
            const bump = (a: string, n: number) => truth.set(a, Math.max(truth.get(a) ?? 0, n))
            const prevEnv = sent.find((e) => e.authorId === author.id && e.seq === seq - 1)
            for (const src of [prevEnv, ...cited]) if (src) for (const [a, n] of past.get(src.idHex) ?? []) bump(a, n)
            for (const a of ids) bump(a, committedAt(a, base))
            bump(author.id, seq)
            for (const [a, n] of [...truth]) if (n === 0) truth.delete(a)
            past.set(env.idHex, truth)
            // The weight relays vote for is the sum of the true causal past, from what the stable history says of F(base).
            weights.set(env.idHex, audit.clockWeight(env) as number)
            expect(weights.get(env.idHex)).toBe([...truth.values()].reduce((x, y) => x + y, 0))
            sent.push(env)
            expect(viewer.judgeReceived(env)?.ok ?? true).toBe(true)
            viewer.receive(env)
            unordered.push(env)
            if (commitNow) {
              // Commit in an order that respects causality (what one relay's FIFO gives).
              viewer.commit(unordered)
              const { decisions } = audit.commit(unordered)
              unordered = []
              for (const d of decisions) {
                expect(d).toMatchObject({ kind: 'committed', clockVerified: true })
                if (d.kind === 'committed') {
                  decided.push({ env: d.env, index: d.index, rejected: [] })
                  expect(fullClock(d.env, committedAt, ids)).toEqual(past.get(d.env.idHex))
                }
              }
            }
          }
          // causalOrder agrees with the true causal past (Fidge and Mattern) for every pair committed.
          for (const x of decided) {
            for (const y of decided) {
              const xy = (past.get(y.env.idHex)?.get(x.env.authorId) ?? 0) >= x.env.seq
              const yx = (past.get(x.env.idHex)?.get(y.env.authorId) ?? 0) >= y.env.seq
              const want = x.env.idHex === y.env.idHex ? 'equal' : xy ? 'before' : yx ? 'after' : 'concurrent'
              expect(causalOrder(x, y)).toBe(want)
              // The weight grows along happened-before: ranking by it extends the causal order.
              if (want === 'before') expect(clockRank({ ...x, weight: weights.get(x.env.idHex) }, { ...y, weight: weights.get(y.env.idHex) })).toBeLessThan(0)
              // Certified before order (no stable index known), the answer is the same or waits for an index, never wrong.
              const early = causalOrder({ ...x, index: undefined }, { ...y, index: undefined })
              if (early !== undefined) expect(early).toBe(want)
              if (xy && x.env.authorId !== y.env.authorId && (y.env.clock.get(x.env.authorId) ?? 0) >= x.env.seq) expect(early).toBe('before')
            }
          }
        },
      ),
      { numRuns: 60 },
    )
  })

  it('a validator certificate is ceil((N+f+1)/2) relays voting for the clock before any order; fewer, forged or repeated votes are refused', async () => {
    const relays = await Promise.all([0, 1, 2, 3].map(async (i) => { const secretKey = new Uint8Array(32).fill(90 + i); return { secretKey, publicKey: await crypto.publicKeyOf(secretKey) } }))
    const cluster = { f: 1, relayKeys: relays.map((r) => r.publicKey) }
    expect(clockQuorum(cluster)).toBe(3)
    expect(clockQuorum({ f: 2, relayKeys: [...relays, ...relays, ...relays].slice(0, 7).map((r) => r.publicKey) })).toBe(5)
    const b1 = await seal(bob, 1)
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    // Weights: b1 and c1 have seen nothing (1); a1 saw b1 (2).
    const weightOf = (env: Envelope) => (env === a1 ? 2 : 1)
    const vote = async (i: number, env = b1, space = SPACE, weight = weightOf(env)) => ({ relay: i, sig: await crypto.sign(relays[i]!.secretKey, encodeClockVote(space, env.id, weight)) })
    const b = await verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(3)] })
    expect(b.index).toBeUndefined()
    expect(b.weight).toBe(1)
    const a = await verifyClockCertificate(crypto, cluster, a1.signed, { kind: 'validators', weight: 2, signatures: [await vote(1, a1), await vote(2, a1), await vote(3, a1)] })
    expect(clockRank(b, a)).toBeLessThan(0)
    // A vote for another weight counts for nothing; a weight below the seq is no weight.
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(2, b1, SPACE, 5)] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, a1.signed, { kind: 'validators', weight: 0, signatures: [] }))).toBe('malformed')
    // a1 lists bob:1: before, with no order at all.
    expect(causalOrder(b, a)).toBe('before')
    expect(causalOrder(a, b)).toBe('after')
    // f+1 is enough for the audit's word, not for a stateful validator's.
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1)] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(1)] }))).toBe('bad-signature')
    // A vote for another envelope, another space, or by a relay outside the cluster counts for nothing.
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(2, a1)] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(2, b1, 'elsewhere')] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), { relay: 7, sig: (await vote(2)).sig }] }))).toBe('bad-signature')
    // Votes for one envelope do not certify a forgery of it (its id is the hash of its bytes).
    const forged = { bytes: b1.signed.bytes.slice(), sig: b1.signed.sig }
    forged.bytes[forged.bytes.length - 1] = (forged.bytes[forged.bytes.length - 1] as number) ^ 1
    expect(await reason(verifyClockCertificate(crypto, cluster, forged, { kind: 'validators', weight: 1, signatures: [await vote(0), await vote(1), await vote(3)] }))).not.toBe('accepted')
    // Neither lists the other and neither index is known: it waits for one, unless the bases decide.
    const c1 = await seal(carol, 1)
    const c = await verifyClockCertificate(crypto, cluster, c1.signed, { kind: 'validators', weight: 1, signatures: [await vote(0, c1), await vote(1, c1), await vote(2, c1)] })
    expect(causalOrder(b, c)).toBe('concurrent') // both bases 0: neither can have committed at or below the other's
    const late = { env: { ...c1, base: 5 } as typeof c1, index: undefined, rejected: [] }
    expect(causalOrder(b, late)).toBeUndefined() // b may have committed at or below 5
    expect(causalOrder({ ...b, index: 4 }, late)).toBe('before')
    expect(causalOrder({ ...b, index: 6 }, late)).toBe('concurrent')
  })

  it('judges a received envelope against the pending ones it names, before anything ordered them', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const a1 = await seal(alice, 1)
    r.receive(a1)
    // Honest: cites a1, which only this replica's pending set holds.
    const b1 = await seal(bob, 1, { clock: clockFrom([[alice.id, 1]]), deps: [a1] })
    expect(r.judgeReceived(b1)).toMatchObject({ ok: true })
    r.receive(b1)
    // Inflated: claims more of alice than its dep carries.
    expect(r.judgeReceived(await seal(carol, 1, { clock: clockFrom([[alice.id, 5]]), deps: [a1] }))).toMatchObject({ ok: false, reason: 'bad-clock' })
    // Forgetful: bob's next envelope drops what its pending previous one had seen.
    expect(r.judgeReceived(await seal(bob, 2))).toMatchObject({ ok: false, reason: 'bad-clock' })
    expect(r.judgeReceived(await seal(bob, 2, { clock: clockFrom([[alice.id, 1]]) }))).toMatchObject({ ok: true })
    // A dep it does not hold: nothing is provably wrong.
    const unseen = await seal(carol, 1)
    expect(r.judgeReceived(await seal(alice, 2, { clock: clockFrom([[carol.id, 1]]), deps: [unseen] }))).toMatchObject({ ok: true, verified: false })
    // Twins in the previous slot name no single previous clock: unverified, not refused.
    r.receive(await seal(carol, 1, { clock: clockFrom([[alice.id, 1]]), deps: [a1] }))
    r.receive(unseen)
    expect(r.judgeReceived(await seal(carol, 2))).toMatchObject({ ok: true, verified: false })
    // A base this replica has not reached cannot be judged here.
    expect(r.judgeReceived(await seal(alice, 2, { base: 3 }))).toBeUndefined()
  })

  it('a replica started from the served audit state judges clocks like the original', async () => {
    // Trusted here: the envelopes were sealed above.
    const open = (signed: { bytes: Uint8Array; sig: Uint8Array }) => openEnvelopeSync({ sha256: (b) => crypto.sha256(b), verify: () => true }, [signed.bytes, signed.sig])
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    r.commit([b1, a1])
    const state = decodeAuditState(encodeAuditState(r.auditState()), open)
    const copy = ReliableReplica.fromAuditState({ space: SPACE }, state, 1)
    const restored = ReliableReplica.restore({ space: SPACE }, r.checkpoint(), open)
    const c1 = await seal(carol, 1, { clock: clockFrom([[alice.id, 1], [bob.id, 1]]), deps: [a1] })
    const bad = await seal(alice, 2)
    for (const x of [r, copy, restored]) {
      expect(x.judgeClock(c1)).toEqual({ ok: true, verified: true })
      expect(x.judgeClock(bad)).toMatchObject({ ok: false, reason: 'bad-clock' })
    }
  })

  it('the own entry is the seq, never listed; judgeClock on made-up inputs', async () => {
    const err = await seal(alice, 1, { clock: clockFrom([[alice.id, 1]]) }).catch((e: unknown) => e)
    expect(isSteadError(err) && err.reason).toBe('malformed')
    const none: ClockInputs = { stableIndex: 5, prev: undefined, dep: () => undefined, committedAt: () => ({ lo: 0, hi: 9 }) }
    // F(5)[bob] is somewhere in 0..9: a claim of bob:9 without inputs might be covered, so it is not provably bad.
    expect(judgeClock({ authorId: alice.id, seq: 1, base: 5, clock: clockInit(), deps: [] }, none)).toEqual({ ok: true, verified: true })
    expect(judgeClock({ authorId: alice.id, seq: 1, base: 5, clock: clockFrom([[bob.id, 9]]), deps: [] }, none)).toMatchObject({ ok: true, verified: false })
    expect(judgeClock({ authorId: alice.id, seq: 1, base: 5, clock: clockFrom([[bob.id, 10]]), deps: [] }, none)).toMatchObject({ ok: false, reason: 'bad-clock' })
  })

  it('a clock certificate is f+1 relays signing the attestation that says the clock is verified; a client needs to trust none of them', async () => {
    const relays = await Promise.all([0, 1, 2, 3].map(async (i) => { const secretKey = new Uint8Array(32).fill(80 + i); return { secretKey, publicKey: await crypto.publicKeyOf(secretKey) } }))
    const cluster = { f: 1, relayKeys: relays.map((r) => r.publicKey) }
    const r = new ReliableReplica({ space: SPACE })
    const b1 = await seal(bob, 1)
    const a1 = await seal(alice, 1, { clock: clockFrom([[bob.id, 1]]), deps: [b1] })
    const dave = users[3] as typeof alice
    const lost = await seal(dave, 1) // never committed: cited by c1, so c1's clock is unverified
    const c1 = await seal(carol, 1, { clock: clockFrom([[dave.id, 1]]), deps: [lost] })
    const { decisions } = r.commit([b1, a1, c1])
    const attestation = encodeAttestation({ space: SPACE, round: 1, prevRound: 0, fromIndex: 0, toIndex: 3, decisions: decisions.map((d) => attestedDecision(d as Exclude<Decision, { kind: 'superseded' }>)), stateHash: new Uint8Array(32), batch: new Uint8Array(32) })
    const sign = async (i: number, bytes = attestation) => ({ relay: i, sig: await crypto.sign(relays[i]!.secretKey, bytes) })
    const cert: ClockCertificate = { attestation, signatures: [await sign(0), await sign(2)] }
    const certified = await verifyClockCertificate(crypto, cluster, b1.signed, cert)
    expect(certified.index).toBe(1)
    expect(certified.rejected).toEqual([])
    const ab = await verifyClockCertificate(crypto, cluster, a1.signed, cert)
    expect(causalOrder(certified, ab)).toBe('before')
    expect(causalOrder(ab, certified)).toBe('after')
    // One relay is not enough, nor the same relay twice, nor a signature over other bytes, nor a relay outside the cluster.
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { attestation, signatures: [await sign(0)] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { attestation, signatures: [await sign(1), await sign(1)] }))).toBe('bad-signature')
    const other = encodeAttestation({ ...decodeAttestation(attestation), toIndex: 4 })
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { attestation, signatures: [await sign(0), await sign(1, other)] }))).toBe('bad-signature')
    expect(await reason(verifyClockCertificate(crypto, cluster, b1.signed, { attestation, signatures: [await sign(0), { relay: 9, sig: (await sign(1)).sig }] }))).toBe('bad-signature')
    // The unverified clock gets no certificate; an envelope the attestation does not decide, none either.
    expect(decisions[2]).toMatchObject({ kind: 'committed', clockVerified: false })
    expect(await reason(verifyClockCertificate(crypto, cluster, c1.signed, cert))).toBe('bad-clock')
    expect(await reason(verifyClockCertificate(crypto, cluster, lost.signed, cert))).toBe('malformed')
  })
})
