import { ReliableReplica, SteadError, StableAudit, encode, clockFrom, clockInit, encodeClockVote, fromHex, sealEnvelope, verifyClockCertificate, type Envelope, type EnvelopeDraft } from '@stead/core'
import { nodeCrypto, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { ClockVotes, HELD_MS, MAX_VOTES_ONLY, PARK_MS, VOTE_FLUSH_MS, type CastVote } from '../src/runtime/clock-votes.ts'
import { decodeMessage, encodeMessage, type Message } from '../src/consensus/index.ts'
import { HandClock } from './helpers/hand-clock.ts'
import { identity } from './helpers/envelopes.ts'

const SPACE = 's'
const relays = [1, 2, 3, 4].map((n) => identity(100 + n))
const committee = { keys: relays.map((r) => r.publicKey), f: 1 }
const cluster = { f: 1, relayKeys: committee.keys }
const crypto = { sign: signSync, verify: verifySync, sha256: (d: Uint8Array) => nodeCrypto.sha256(d) }
const [alice, bob, carol, dave] = [identity(1), identity(2), identity(3), identity(4)]

async function seal(who: typeof alice, seq: number, parts: Partial<EnvelopeDraft> & { deps?: never } = {}, deps: readonly Envelope[] = []): Promise<Envelope> {
  return sealEnvelope(nodeCrypto, who, { space: SPACE, seq, clock: clockInit(), updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [], ...parts, deps: deps.map((d) => d.id) })
}

/** A relay's votes with everything around them in the test's hands: the disk answers when told, the mesh is a list. */
function relay(o: { replica?: StableAudit; denied?: string; cast?: CastVote[] } = {}) {
  const clock = new HandClock()
  const sent: Message[] = []
  const disk: Array<{ votes: readonly CastVote[]; done: () => void }> = []
  const judged: string[] = []
  const written: CastVote[] = []
  const checks = { verifies: 0 }
  const replica = o.replica ?? new StableAudit({ space: SPACE })
  const votes = new ClockVotes({
    committee,
    me: 0,
    secretKey: relays[0]!.secretKey,
    crypto: { ...crypto, verify: (k: Uint8Array, m: Uint8Array, sig: Uint8Array) => (checks.verifies++, crypto.verify(k, m, sig)) },
    clock,
    replica: () => replica,
    application: (env) => (env.authorId === o.denied ? new SteadError('unauthorized', 'not a writer') : undefined),
    persist: (cast) => new Promise<void>((done) => disk.push({ votes: cast, done: () => (written.push(...cast), done()) })),
    broadcast: (m) => sent.push(m),
    judged: (result, env) => judged.push(`${result} ${env.seq}`),
  })
  if (o.cast) votes.load(o.cast)
  /** Lets the pending flush run and the disk finish every write. */
  const durable = async (): Promise<void> => {
    await clock.advance(clock.t + VOTE_FLUSH_MS)
    for (const w of disk.splice(0)) w.done()
    await clock.advance(clock.t)
  }
  const votedIds = (): string[] => sent.flatMap((m) => (m.kind === 'clock-votes' ? m.votes.map(([, id]) => Buffer.from(id).toString('hex')) : []))
  return { votes, clock, sent, disk, judged, written, checks, replica, durable, votedIds }
}

/** A value with its bytes as hex, whatever kind of byte array holds them. */
const plain = (v: unknown): unknown => (v instanceof Uint8Array ? Buffer.from(v).toString('hex') : Array.isArray(v) ? v.map(plain) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)])) : v)

const peerVote = (relay: number, env: Envelope, weight: number, space = SPACE) => [space, env.id, weight, signSync(relays[relay]!.secretKey, encodeClockVote(space, env.id, weight))] as const

describe('ClockVotes', () => {
  it('votes once its inputs are here, persists before it speaks, and gathers a certificate of ceil((N+f+1)/2) votes', async () => {
    const r = relay()
    const a1 = await seal(alice, 1)
    const b1 = await seal(bob, 1, { clock: clockFrom([[a1.authorId, 1]]) }, [a1])
    const asked: string[][] = []
    // b1 cites a1, which is not here yet: it waits, and the client that brought it is asked for a1.
    r.votes.see(b1, b1.signed.bytes, (ids) => asked.push([...ids]))
    expect(asked).toEqual([[a1.idHex]])
    r.votes.see(a1, a1.signed.bytes)
    // Both voted (a1, then b1 which it unblocked), in one write and one message, sent only once durable.
    await r.clock.advance(VOTE_FLUSH_MS)
    expect(r.disk.map((w) => w.votes.map((v) => v.idHex))).toEqual([[a1.idHex, b1.idHex]])
    // Not one vote leaves before it is durable; the client's envelope goes to the peers at once, for them to judge meanwhile.
    expect(r.votedIds()).toEqual([])
    expect(r.sent.flatMap((m) => (m.kind === 'clock-votes' ? (m.frames ?? []).map((f) => Buffer.from(f).toString('hex')) : []))).toEqual([Buffer.from(b1.signed.bytes).toString('hex')])
    expect(r.votes.certificate(SPACE, b1.idHex)).toBeUndefined()
    await r.durable()
    expect(r.votedIds()).toEqual([a1.idHex, b1.idHex])
    // Its weight: the sum of its full clock, alice:1 and its own 1.
    expect(r.votes.certificate(SPACE, b1.idHex)?.votes).toEqual([[0, 2, expect.any(Uint8Array)]])
    // Peers' votes: a forged one and one for another space count for nothing; two good ones make three.
    r.votes.onVotes(3, [[SPACE, b1.id, 2, signSync(relays[2]!.secretKey, encodeClockVote(SPACE, b1.id, 2))]])
    r.votes.onVotes(2, [peerVote(2, b1, 2, 'elsewhere')])
    expect(r.votes.certificate(SPACE, b1.idHex)?.votes.length).toBe(1)
    r.votes.onVotes(1, [peerVote(1, b1, 2)])
    r.votes.onVotes(2, [peerVote(2, b1, 2)])
    const held = r.votes.certificate(SPACE, b1.idHex)
    expect(held?.votes.map(([relay]) => relay).sort()).toEqual([0, 1, 2])
    const signatures = (held?.votes ?? []).map(([relay, , sig]) => ({ relay, sig }))
    expect(await verifyClockCertificate(nodeCrypto, cluster, b1.signed, { kind: 'validators', weight: 2, signatures })).toMatchObject({ index: undefined, weight: 2 })
    await expect(verifyClockCertificate(nodeCrypto, cluster, b1.signed, { kind: 'validators', weight: 2, signatures: signatures.slice(0, 2) })).rejects.toMatchObject({ reason: 'bad-signature' })
    await expect(verifyClockCertificate(nodeCrypto, cluster, b1.signed, { kind: 'validators', weight: 3, signatures })).rejects.toMatchObject({ reason: 'bad-signature' })
  })

  it('takes peers’ votes that come before the envelope, and checks them once it is here', async () => {
    const r = relay()
    const a1 = await seal(alice, 1)
    const forged = signSync(relays[3]!.secretKey, encodeClockVote(SPACE, new Uint8Array(32), 1))
    r.votes.onVotes(1, [peerVote(1, a1, 1)])
    r.votes.onVotes(3, [[SPACE, a1.id, 1, forged]])
    // A liar's vote for another weight is kept as what it is, and makes no certificate of that weight.
    r.votes.onVotes(2, [peerVote(2, a1, 7)])
    expect(r.votes.certificate(SPACE, a1.idHex)).toBeUndefined()
    r.votes.see(a1, a1.signed.bytes)
    await r.durable()
    expect(r.votes.certificate(SPACE, a1.idHex)?.votes.map(([relay, weight]) => [relay, weight]).sort()).toEqual([[0, 1], [1, 1], [2, 7]])
    // Votes for envelopes never seen are kept unchecked, a bounded number.
    for (let i = 0; i < MAX_VOTES_ONLY + 500; i++) r.votes.onVotes(2, [[SPACE, fromHex(i.toString(16).padStart(64, '0')), 1, forged]])
    expect(r.votes.size).toBeLessThanOrEqual(MAX_VOTES_ONLY + 1)
    expect(r.votes.certificate(SPACE, a1.idHex)).toBeDefined()
  })

  it('votes for one envelope per author and seq, in seq order, also after a restart', async () => {
    const r = relay()
    const a1 = await seal(alice, 1)
    const a2 = await seal(alice, 2)
    const b1 = await seal(bob, 1)
    const twin = await seal(bob, 1, { updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [2] }] })
    // seq 2 before seq 1: it waits for its previous envelope.
    r.votes.see(a2, a2.signed.bytes)
    r.votes.see(a1, a1.signed.bytes)
    // A twin of a voted envelope (same author and seq), and an envelope older than one voted for: neither.
    r.votes.see(b1, b1.signed.bytes)
    r.votes.see(twin, twin.signed.bytes)
    const old = await seal(alice, 1, { updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [3] }] })
    r.votes.see(old, old.signed.bytes)
    await r.durable()
    expect(r.votedIds()).toEqual([a1.idHex, a2.idHex, b1.idHex])
    expect(r.judged.filter((j) => j === 'refused 1').length).toBe(2)
    // Restarted with what it wrote: the twin still gets nothing; the same envelope again, the same vote.
    const again = relay({ cast: r.written })
    again.votes.see(twin, twin.signed.bytes)
    again.votes.see(b1, b1.signed.bytes)
    await again.durable()
    expect(again.votedIds()).toEqual([b1.idHex])
  })

  it('refuses a clock its inputs contradict and a writer the space refuses; an input that never comes expires', async () => {
    const d1 = await seal(dave, 1)
    const r = relay({ denied: d1.authorId })
    const a1 = await seal(alice, 1)
    r.votes.see(a1, a1.signed.bytes)
    // Claims more of alice than its dep carries.
    const inflated = await seal(carol, 1, { clock: clockFrom([[a1.authorId, 5]]) }, [a1])
    r.votes.see(inflated, inflated.signed.bytes)
    r.votes.see(d1, d1.signed.bytes)
    const lost = await seal(carol, 2)
    const waiting = await seal(bob, 1, { clock: clockFrom([[lost.authorId, 2]]) }, [lost])
    r.votes.see(waiting, waiting.signed.bytes)
    await r.durable()
    expect(r.votedIds()).toEqual([a1.idHex])
    expect(r.judged.filter((j) => j.startsWith('refused')).length).toBe(2)
    await r.clock.advance(PARK_MS + 1)
    expect(r.judged.some((j) => j.startsWith('expired'))).toBe(true)
    expect(r.votes.certificate(SPACE, waiting.idHex)).toBeUndefined()
  })

  it('waits for a base ahead of its stable index, and keeps serving a certificate after the audit decided it', async () => {
    const replica = new ReliableReplica({ space: SPACE })
    const r = relay({ replica })
    const a1 = await seal(alice, 1)
    const b1 = await seal(bob, 1, { base: 1 })
    r.votes.see(b1, b1.signed.bytes)
    await r.durable()
    expect(r.votedIds()).toEqual([])
    replica.commit([a1])
    r.votes.decided(SPACE, a1.idHex, a1.authorId, a1.seq)
    r.votes.settle()
    await r.durable()
    expect(r.votedIds()).toEqual([b1.idHex])
    // Decided: its commit proves it too, and its votes (which state its weight) are served for a while yet.
    replica.commit([b1])
    r.votes.decided(SPACE, b1.idHex, b1.authorId, b1.seq)
    expect(r.votes.certificate(SPACE, b1.idHex)?.votes).toEqual([[0, 2, expect.any(Uint8Array)]])
    await r.clock.advance(HELD_MS + PARK_MS)
    expect(r.votes.certificate(SPACE, b1.idHex)).toBeUndefined()
  })

  it('sends a client envelope ahead of its vote, and the mesh message round-trips; a malformed one is refused', async () => {
    const r = relay()
    const a1 = await seal(alice, 1)
    const b1 = await seal(bob, 1)
    r.votes.see(a1, a1.signed.bytes, () => undefined) // from a client: peers may not hold it yet
    r.votes.see(b1, b1.signed.bytes) // from a peer's block: they hold it
    await r.durable()
    const [m, votes] = r.sent
    expect(m?.kind === 'clock-votes' && m.frames).toEqual([a1.signed.bytes])
    expect(m?.kind === 'clock-votes' && m.votes).toEqual([])
    expect(votes?.kind === 'clock-votes' && votes.votes.length).toBe(2)
    const back = decodeMessage(crypto, committee, encodeMessage(m as Message))
    expect(plain(back)).toEqual(plain(m))
    const bare = encodeMessage({ kind: 'clock-votes', votes: [peerVote(1, a1, 1)] })
    expect(plain(decodeMessage(crypto, committee, bare))).toEqual(plain({ kind: 'clock-votes', votes: [peerVote(1, a1, 1)] }))
    expect(() => decodeMessage(crypto, committee, encode(['clock-votes', [peerVote(1, a1, 1)], ['not bytes']]))).toThrow(/frames\[0\]/)
    expect(() => decodeMessage(crypto, committee, encode(['clock-votes', [[SPACE, a1.id, -1, new Uint8Array(64)]]]))).toThrow(/weight/)
    expect(() => decodeMessage(crypto, committee, encode(['clock-votes', [[SPACE, a1.id.slice(1), 1, new Uint8Array(64)]]]))).toThrow(/id/)
  })

  it('is not led astray by a liar: votes naming another space for an id, or a bad signature sent over and over', async () => {
    const r = relay()
    const a1 = await seal(alice, 1)
    // A liar votes first, naming another space for a1's id: the envelope, once here, says which space it is of.
    r.votes.onVotes(3, [peerVote(3, a1, 1, 'elsewhere')])
    r.votes.see(a1, a1.signed.bytes)
    await r.durable()
    expect(r.votes.certificate(SPACE, a1.idHex)?.votes.map(([relay]) => relay)).toEqual([0])
    expect(r.votes.certificate('elsewhere', a1.idHex)).toBeUndefined()
    expect(r.votedIds()).toEqual([a1.idHex])
    // Peers' votes are checked when served, once each: a bad signature costs one check, however often it comes.
    const before = r.checks.verifies
    const bad = [SPACE, a1.id, 1, new Uint8Array(64).fill(9)] as const
    for (let i = 0; i < 100; i++) r.votes.onVotes(3, [bad])
    expect(r.checks.verifies - before).toBe(0)
    expect(r.votes.certificate(SPACE, a1.idHex)?.votes.map(([relay]) => relay)).toEqual([0])
    expect(r.checks.verifies - before).toBe(1)
    for (let i = 0; i < 100; i++) r.votes.onVotes(3, [bad])
    r.votes.onVotes(1, [peerVote(1, a1, 1)])
    expect(r.votes.certificate(SPACE, a1.idHex)?.votes.map(([relay]) => relay).sort()).toEqual([0, 1])
    expect(r.checks.verifies - before).toBe(2)
  })

  it('asks the client for what an envelope cites even when a peer brought the envelope first; holds nothing for one decided already', async () => {
    const replica = new ReliableReplica({ space: SPACE })
    const r = relay({ replica })
    const a1 = await seal(alice, 1)
    const b1 = await seal(bob, 1, { clock: clockFrom([[a1.authorId, 1]]) }, [a1])
    r.votes.see(b1, b1.signed.bytes) // a peer's frame: nobody to ask
    const asked: string[][] = []
    r.votes.see(b1, b1.signed.bytes, (ids) => asked.push([...ids])) // then the client's own submit
    expect(asked).toEqual([[a1.idHex]])
    // Decided here already: a late copy (a peer's frame, a block) holds nothing and pushes nothing out.
    const c1 = await seal(carol, 1)
    replica.commit([c1])
    const before = r.votes.size
    r.votes.see(c1, c1.signed.bytes)
    expect(r.votes.size).toBe(before)
  })
})
