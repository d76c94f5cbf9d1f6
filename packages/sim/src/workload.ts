import { MAX_STAMP_JUMP, POLICY_KEY, asGeneric, certifyDevice, redeemBytes, toHex, createCrdt, type CollabList, type CollabMap, type CollabText, authorIdOf, clockFrom, clockInit, composeClock, envelopeUnits, sealEnvelope, type AnyCrdt, type Declaration, type Envelope, type ObjectUpdate, type PolicyOp, type SafeGroup } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { Rng } from './rng.ts'

export const SPACE = 'sim'

const ACCOUNTS: Declaration = { type: 'counter', bounds: { min: 0 } }
const GUESTS: Declaration = { type: 'set', bounds: { maxSize: 8 } }
const SEATS: Declaration = { type: 'bounded-counter', params: { min: 0, initial: 20 } }
const STOCK: Declaration = { type: 'bounded-counter', params: { min: 0, max: 12, initial: 6 } }
const DOC: Declaration = { type: 'text', bounds: { maxLength: 200 } }
const TODO: Declaration = { type: 'list', bounds: { maxLength: 12 } }
const META: Declaration = { type: 'map', bounds: { maxKeys: 4 } }

/**
 * The documents as every client had seen them when it made its next edit
 * (the workload is signed up front): edits are made against these views,
 * then applied to them under their envelope's tags. The relays order the
 * envelopes as the run gives, so the audit meets edits before the ones they
 * are placed against, and invariants (maxLength, maxKeys) that reject some.
 */
class Documents {
  readonly views = new Map<string, AnyCrdt>([
    ['doc', createCrdt(DOC)],
    ['todo', createCrdt(TODO)],
    ['meta', createCrdt(META)],
  ])

  edit(rng: Rng, user: number): ObjectUpdate {
    const text = this.views.get('doc') as CollabText
    const list = this.views.get('todo') as CollabList
    const map = this.views.get('meta') as CollabMap
    switch (rng.int(0, 4)) {
      case 0:
        return { key: 'doc', decl: DOC, ops: [text.insertOp(rng.int(0, text.length), rng.pick(['a', 'bc', 'def ', 'é😀']))] }
      case 1:
        return text.length > 0 ? { key: 'doc', decl: DOC, ops: [text.deleteOp(rng.int(0, text.length - 1), rng.int(1, 3)) as never] } : { key: 'doc', decl: DOC, ops: [text.insertOp(0, 'x')] }
      case 2:
        return { key: 'todo', decl: TODO, ops: [list.insertOp(rng.int(0, list.length), [`t${user}`])] }
      case 3:
        return list.length > 1 ? { key: 'todo', decl: TODO, ops: [list.moveOp(rng.int(0, list.length - 1), rng.int(0, list.length - 1)) as never] } : { key: 'todo', decl: TODO, ops: [list.insertOp(0, ['first'])] }
      default:
        return { key: 'meta', decl: META, ops: [['s', rng.pick(['a', 'b', 'c', 'd', 'e']), user, map.nextStamp()]] }
    }
  }

  /** Applies a signed envelope's document ops to the views, under the tags every replica gives them. */
  seen(env: Envelope): void {
    for (const unit of envelopeUnits(env)) {
      for (const item of unit.kind === 'op' ? [unit] : unit.items) {
        const view = this.views.get(item.key)
        if (view && (item.decl.type === 'text' || item.decl.type === 'list' || item.decl.type === 'map')) asGeneric(view).apply(item.op, { replica: env.authorId, tag: item.tag })
      }
    }
  }
}

export interface Workload {
  /** Honest clients' envelopes, each list in sequence order. */
  readonly honest: readonly (readonly Envelope[])[]
  /** A Byzantine client's equivocations: two envelopes for each of its sequence numbers. */
  readonly twins: ReadonlyArray<readonly [Envelope, Envelope]>
  /** The Byzantine client's malformed document edits (envelopes that parse, with ops no honest client makes). */
  readonly junk: readonly Envelope[]
  /**
   * Policy changes, in the order they are sent (empty without `policy`): an
   * admin creates the space's policy (the honest clients, the Byzantine one
   * and the SDK clients writers) and a single-use invitation, revokes the
   * Byzantine client, revokes honest client 2 and later gives it its role
   * back, then lets everyone read and keeps the stable history of the last
   * 20 indexes; two guests redeem the invitation at the same moment (only
   * one can get it) and then each writes; a writer's phone (a device its
   * key certified) writes, the writer revokes it, and the phone writes on;
   * the admin deletes the guest list late in the run. Each group is sent
   * at one moment, its envelopes to different relays.
   */
  readonly policy: ReadonlyArray<readonly Envelope[]>
}

/** The secret key of the simulator's SDK client `id`. */
export function sdkClientSecret(id: number): Uint8Array {
  return nodeCrypto.sha256(new TextEncoder().encode(`sim-sdk-client-${id}`))
}

/** SDK clients the policy names as writers: more than any run starts. */
const SDK_WRITERS = 8

/** The key pair a label names in the simulator (`sha256(label)` as the secret key). */
export async function identity(label: string) {
  const secretKey = nodeCrypto.sha256(new TextEncoder().encode(label))
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

function randomParts(rng: Rng, user: number, seq: number, docs: Documents, authors: readonly string[]): { updates: ObjectUpdate[]; safe: SafeGroup[] } {
  const acct = (i: number) => `acct:${i}`
  const updates: ObjectUpdate[] = []
  const safe: SafeGroup[] = []
  switch (rng.int(0, 6)) {
    case 0:
      updates.push({ key: acct(rng.int(0, 2)), decl: ACCOUNTS, ops: [rng.int(1, 20)] })
      break
    case 1:
      // Withdrawals race each other: the audit decides which fit.
      safe.push({ atomic: false, updates: [{ key: acct(rng.int(0, 2)), decl: ACCOUNTS, op: -rng.int(1, 15) }] })
      break
    case 2: {
      const from = rng.int(0, 2)
      const n = rng.int(1, 10)
      safe.push({ atomic: true, updates: [{ key: acct(from), decl: ACCOUNTS, op: -n }, { key: acct((from + 1) % 3), decl: ACCOUNTS, op: n }] })
      break
    }
    case 3:
      updates.push({ key: 'guests', decl: GUESTS, ops: [['a', `u${user}-${seq % 12}`]] })
      break
    case 4:
      if (rng.int(0, 1) === 0) {
        safe.push({ atomic: false, updates: [{ key: 'seats', decl: SEATS, op: ['c', rng.int(1, 3)] }] })
        updates.push({ key: 'seats', decl: SEATS, ops: [['d', 1]] })
      } else if (rng.int(0, 1) === 0 || authors.length < 2) {
        // Both bounds: a claim of one kind of rights, then a move toward that bound (the audit rejects it past the author's rights).
        const kind = rng.int(0, 1) === 0 ? 'i' : 'd'
        safe.push({ atomic: false, updates: [{ key: 'stock', decl: STOCK, op: ['c', rng.int(1, 3), kind] }] })
        updates.push({ key: 'stock', decl: STOCK, ops: [[kind, rng.int(1, 2)]] })
      } else {
        // Rights that move without consensus: an ask of another client, and a grant to one (the audit refuses a
        // grant of more than half its author's rights, or one its ask's `seen` no longer matches: answered already).
        const kind = rng.int(0, 1) === 0 ? 'i' : 'd'
        const other = authors[(user + rng.int(1, authors.length - 1)) % authors.length] as string
        // Now and then a client gives all its rights back to the pool (it leaves; a later spend of it has nothing behind it).
        if (rng.int(0, 4) === 0) safe.push({ atomic: false, updates: [{ key: 'stock', decl: STOCK, op: ['r', authors[user] as string] }] })
        updates.push({ key: 'stock', decl: STOCK, ops: [rng.int(0, 1) === 0 ? ['q', rng.int(1, 4), other, rng.int(0, 2), seq, kind] : ['g', rng.int(1, 2), other, rng.int(0, 1), kind]] })
      }
      break
    default:
      updates.push(docs.edit(rng, user))
  }
  return { updates, safe }
}

/** Signs every client envelope of a run up front: the event loop itself stays synchronous. */
export async function prepareWorkload(seed: number, clients: number, perClient: number, byzantineClient: boolean, policy = false): Promise<Workload> {
  const rng = new Rng(seed ^ 0x5eed)
  const docs = new Documents()
  const honest: Envelope[][] = []
  const ids = await Promise.all(Array.from({ length: clients }, (_, c) => identity(`sim-client-${c}`)))
  for (let c = 0; c < clients; c++) honest.push([])
  const authors = ids.map((k) => authorIdOf(nodeCrypto, k.publicKey))
  // Round by round, each client's envelope follows the previous client's last one (it heard it):
  // deps and clocks as the SDK makes them, from a stable base of 0. The relays order them in
  // whatever order the run gives, so the audit meets deps it already holds and deps it does not.
  for (let seq = 1; seq <= perClient; seq++) {
    for (let c = 0; c < clients; c++) {
      const me = ids[c] as Awaited<ReturnType<typeof identity>>
      const mine = honest[c] as Envelope[]
      const heard = clients > 1 ? (honest[(c + clients - 1) % clients] as Envelope[]).at(-1) : undefined
      const prev = mine.at(-1)
      const { base, clock } = composeClock(authorIdOf(nodeCrypto, me.publicKey), prev, heard ? [heard] : [], 0, () => 0)
      const env = await sealEnvelope(nodeCrypto, me, { space: SPACE, seq, base, clock, deps: heard ? [heard.id] : [], ...randomParts(rng, c, seq, docs, authors) })
      docs.seen(env)
      mine.push(env)
    }
  }
  const twins: Array<[Envelope, Envelope]> = []
  const junk: Envelope[] = []
  if (byzantineClient) {
    const evil = await identity('sim-byzantine-client')
    for (let seq = 1; seq <= Math.max(2, perClient >> 1); seq++) {
      const a = await sealEnvelope(nodeCrypto, evil, { space: SPACE, seq, clock: clockInit(), deps: [], updates: [{ key: 'acct:0', decl: ACCOUNTS, ops: [seq] }], safe: [] })
      // Every other twin also forges its clock: an entry no input gives (bad-clock wherever it is judged).
      const forged = seq % 2 === 1 && ids[0] ? clockFrom([[authorIdOf(nodeCrypto, ids[0].publicKey), 999]]) : clockInit()
      const b = await sealEnvelope(nodeCrypto, evil, {
        space: SPACE,
        seq,
        clock: forged,
        deps: [],
        updates: [],
        safe: [{ atomic: false, updates: [{ key: 'acct:1', decl: ACCOUNTS, op: -seq }] }],
      })
      twins.push([a, b])
    }
    // Malformed document edits that parse: a text anchored to no character, a delete of a whole
    // tag's range, a move of an element that never existed, a map stamp far ahead (clock-ahead).
    const bad: ObjectUpdate[] = [
      { key: 'doc', decl: DOC, ops: [['i', 'nowhere:0.0', 1, '', 'ghost']] },
      { key: 'doc', decl: DOC, ops: [['d', [['nowhere:1', 0, 2 ** 31 - 1]]]] },
      { key: 'todo', decl: TODO, ops: [['m', 'nowhere:2.0', '', 1, '', 1]] },
      { key: 'meta', decl: META, ops: [['s', 'a', 'evil', 3 * MAX_STAMP_JUMP]] },
      // Rights it does not hold granted away, and the same ask over and over (only the first is taken).
      ...rightsJunk(authors[0]),
    ]
    const seq0 = Math.max(2, perClient >> 1)
    for (const [i, u] of bad.entries()) {
      junk.push(await sealEnvelope(nodeCrypto, evil, { space: SPACE, seq: seq0 + 1 + i, clock: clockInit(), deps: [], updates: [u], safe: [] }))
    }
    // And an honest client's rights reclaimed, which only it (or an admin) may do.
    if (authors[0]) {
      const reclaim: SafeGroup = { atomic: false, updates: [{ key: 'stock', decl: STOCK, op: ['r', authors[0]] }] }
      junk.push(await sealEnvelope(nodeCrypto, evil, { space: SPACE, seq: seq0 + 1 + bad.length, clock: clockInit(), deps: [], updates: [], safe: [reclaim] }))
    }
  }
  return { honest, twins, junk, policy: policy ? await policyChanges(ids.map((k) => k.publicKey), (await identity('sim-byzantine-client')).publicKey) : [] }
}

/** A Byzantine client's rights traffic toward `victim`: rights it does not hold granted away, and the same ask over and over (only the first is taken). */
function rightsJunk(victim: string | undefined): ObjectUpdate[] {
  if (victim === undefined) return []
  const grant: ObjectUpdate = { key: 'stock', decl: STOCK, ops: [['g', 3, victim, 0, 'd']] }
  const ask: ObjectUpdate = { key: 'stock', decl: STOCK, ops: [['q', 6, victim, 0, 1, 'i']] }
  return [grant, ask, ask, ask]
}

/** The label of the key that administers the simulated space: the cluster file lists it among the space's admins. */
export const SIM_ADMIN = 'sim-admin'

async function policyChanges(clients: readonly Uint8Array[], byzantine: Uint8Array): Promise<Envelope[][]> {
  const admin = await identity(SIM_ADMIN)
  const id = (key: Uint8Array): string => authorIdOf(nodeCrypto, key)
  const sdk = await Promise.all(Array.from({ length: SDK_WRITERS }, (_, i) => nodeCrypto.publicKeyOf(sdkClientSecret(i))))
  // A user whose phone (a device its key certified) writes, and which revokes the phone midway: the phone
  // goes on writing, as a thief would, and what the order puts after the revocation is refused.
  const owner = await identity('sim-owner')
  const phoneKeys = await identity('sim-owner-phone')
  const phone = { ...phoneKeys, certificate: await certifyDevice(nodeCrypto, owner, phoneKeys.publicKey) }
  const writers = [...clients, byzantine, ...sdk, owner.publicKey].map((k): [string, 'writer'] => [id(k), 'writer'])
  const victim = clients[2] ?? clients[0]
  const invitation = await identity('sim-invitation')
  const inviteKey = toHex(invitation.publicKey)
  const ops: PolicyOp[] = [['i', [[id(admin.publicKey), 'admin'], ...writers], 'none'], ['n', inviteKey, 'writer', 0, 1, 1], ['r', id(byzantine), null]]
  if (victim) ops.push(['r', id(victim), null], ['r', id(victim), 'writer'])
  // Relays keep the stable history of the last 20 indexes: they prune as they compact, crashes and checkpoints between.
  ops.push(['e', 'reader'], ['k', 20, 0])
  const chain = async (who: { secretKey: Uint8Array; publicKey: Uint8Array }, parts: Array<{ updates: ObjectUpdate[]; safe: SafeGroup[] }>): Promise<Envelope[]> => {
    const out: Envelope[] = []
    for (const [i, p] of parts.entries()) {
      const { base, clock } = composeClock(id(who.publicKey), out.at(-1), [], 0, () => 0)
      out.push(await sealEnvelope(nodeCrypto, who, { space: SPACE, seq: i + 1, base, clock, deps: [], ...p }))
    }
    return out
  }
  const change = (op: PolicyOp) => ({ updates: [], safe: [{ atomic: false, updates: [{ key: POLICY_KEY, decl: { type: 'policy' as const }, op }] }] })
  // Last, the admin deletes the guest list the clients keep adding to: what the order puts after it starts a new one.
  const deleteGuests = { updates: [], safe: [{ atomic: false, updates: [{ key: 'guests', decl: { type: 'deletion' as const }, op: ['x'] as const }] }] }
  const adminChain = await chain(admin, [...ops.map(change), deleteGuests])
  // Two guests race for the single-use invitation, then each writes: only the winner's write commits.
  const guests = await Promise.all(['sim-guest-a', 'sim-guest-b'].map(identity))
  const guestChains = await Promise.all(
    guests.map(async (g) => {
      const t = 2
      const sig = await nodeCrypto.sign(invitation.secretKey, redeemBytes(SPACE, id(g.publicKey), inviteKey, t))
      return chain(g, [change(['j', inviteKey, t, sig]), { updates: [{ key: 'acct:0', decl: ACCOUNTS, ops: [7] }], safe: [] }])
    }),
  )
  const write = (n: number) => ({ updates: [{ key: 'acct:1', decl: ACCOUNTS, ops: [n] }], safe: [] })
  const phoneChain = await chain(phone, [write(3), write(4), write(5)])
  const ownerChain = await chain(owner, [write(6), change(['v', id(owner.publicKey), id(phone.publicKey)])])
  // Sent in this order, spread over the run: the admin's first two, both redemptions at once, the rest; the phone
  // writes before its revocation and after it, which most runs order before those last writes.
  const [g0, g1] = guestChains as [Envelope[], Envelope[]]
  const [p0, p1, p2] = phoneChain as [Envelope, Envelope, Envelope]
  const [o0, o1] = ownerChain as [Envelope, Envelope]
  return [...adminChain.slice(0, 2).map((e) => [e]), [g0[0], g1[0]], [p0], [o0], ...adminChain.slice(2).map((e) => [e]), [o1], [p1], [g0[1], g1[1], p2]] as Envelope[][]
}
