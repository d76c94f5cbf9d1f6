import { bytesEqual, stableReadBytes } from '@stead/core'
import { Bucket } from './bucket.ts'
import type { HostClock, Signed } from '@stead/core'
import type { Committee, Message, SyncCrypto } from '../consensus/index.ts'

/**
 * Proven heads for linearizable quorum reads.
 *
 * A relay's word alone on how far a space has come can be inflated by a
 * liar, which would make a reader wait for a commit that never comes. So a
 * relay answers a head request with its latest attested head and f+1
 * relays' signatures over stableReadBytes(space, index, state hash): at
 * least one correct relay reached that index with that state. It gathers
 * the other relays' signatures on demand, over the mesh (`head-ask` ->
 * `head-sig`), and keeps the latest proof per space, so reads of a space
 * that did not move cost no mesh traffic. Peers sign only a head they
 * attested themselves (waiting a moment when slightly behind).
 *
 * The read protocol built on it is in the client README ("Quorum reads").
 */
export interface HeadProof {
  readonly index: number
  readonly stateHash: Uint8Array
  /** f+1 or more [relay, signature over stableReadBytes(space, index, stateHash)]. */
  readonly sigs: ReadonlyArray<readonly [number, Uint8Array]>
  /**
   * The attestation of the commit the head is the state after, with f+1
   * or more relays' signatures over its bytes (what a paced client
   * believes a delta's end by); absent when too few relays sent theirs.
   */
  readonly attestation?: { readonly bytes: Uint8Array; readonly sigs: ReadonlyArray<readonly [number, Uint8Array]> }
}

/** What head proofs need of the relay around them. */
export interface HeadProofHost {
  /**
   * The position and result of this relay's latest attested commit of
   * `space` (index 0 and the empty state's hash for a space with none);
   * null for a space whose state this relay holds without an attestation
   * of it (started over from a checkpoint): it cannot prove that head, and
   * must not answer 0 for it.
   */
  latest(space: string): { fromIndex: number; round: number; index: number; stateHash: Uint8Array; attestation?: Signed } | null
  /** This relay's attested commit of `space` at [fromIndex, round] once it is stored here, waiting up to `timeoutMs`; undefined if it is not. */
  attested(space: string, fromIndex: number, round: number, timeoutMs: number): Promise<{ index: number; stateHash: Uint8Array; attestation: Signed } | undefined>
  send(to: number, message: Message): void
}

export interface HeadProofOptions {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly host: HeadProofHost
  readonly clock: HostClock
}

/** A head of one space being proven: the signatures so far (ours first). */
interface Pending {
  readonly index: number
  readonly stateHash: Uint8Array
  readonly fromIndex: number
  readonly round: number
  readonly sigs: Map<number, Uint8Array>
  /** Our attestation of the commit, and the signatures over its bytes so far (ours first). */
  readonly attestation: Signed | undefined
  readonly attested: Map<number, Uint8Array>
  askedAt: number
}

/** A read waiting for a proof at or past an index (with the commit's attestation certified, for a paced delta). */
interface Waiter {
  readonly atLeast: number
  readonly certified: boolean
  readonly done: (proof: HeadProof | undefined) => void
}

/** One space's proofs: heads being proven (a few, oldest first), the latest proven, and reads waiting for one. */
interface SpaceProofs {
  pending: Pending[]
  proven: HeadProof | undefined
  readonly waiters: Set<Waiter>
}

/** How long a peer waits to reach a head it was asked to sign (it may be a round or two behind). */
const ASK_WAIT_MS = 3_000
/** A peer's asks answered at once at most: each costs a store read and a signature. */
const ASKS_IN_FLIGHT = 64
/** A peer's asks per second (and burst): beyond it they are dropped, and the asker's read waits for others. */
const ASKS_PER_SECOND = 1_000
/** An unanswered ask is sent again after this long, when a read still waits (frames may be lost while a peer reconnects). */
const REASK_MS = 1_000
/** Heads of one space being proven at once: a space that moves faster than its proofs drops the oldest (a later proof serves its reads). */
const PENDING_PER_SPACE = 4
/** Spaces whose proofs are kept. */
const KEPT_SPACES = 10_000

export class HeadProofs {
  private readonly spaces = new Map<string, SpaceProofs>()
  private readonly inFlight: number[]
  private readonly asks: Bucket[]
  private readonly o: HeadProofOptions
  constructor(o: HeadProofOptions) {
    this.o = o
    this.inFlight = o.committee.keys.map(() => 0)
    const rate = { perSecond: ASKS_PER_SECOND, burst: ASKS_PER_SECOND, bytesPerSecond: Number.MAX_SAFE_INTEGER, burstBytes: Number.MAX_SAFE_INTEGER }
    this.asks = o.committee.keys.map(() => new Bucket(rate, () => o.clock.now()))
  }

  /**
   * This relay's latest attested head of `space`, or a later one, with f+1
   * signatures, once gathered (up to `timeoutMs`); undefined if none could
   * be by then. Head 0 (a space with no attested commit) needs no proof.
   * `certified`: only a proof that also carries f+1 signatures over the
   * commit's attestation (what a paced delta needs).
   */
  async prove(space: string, timeoutMs: number, certified = false): Promise<HeadProof | undefined> {
    const latest = this.o.host.latest(space)
    if (latest === null) return undefined
    if (latest.index === 0) return { index: 0, stateHash: latest.stateHash, sigs: [] }
    const sp = this.spaceProofs(space)
    // A commit that only parks envelopes keeps the index and changes the state: a proof of the old state is not one of this head.
    const proven = sp.proven
    if (proven && (proven.index > latest.index || (proven.index === latest.index && bytesEqual(proven.stateHash, latest.stateHash))) && (!certified || proven.attestation)) return proven
    let p = sp.pending.find((x) => x.index === latest.index && bytesEqual(x.stateHash, latest.stateHash))
    if (!p) {
      const own = this.o.crypto.sign(this.o.secretKey, stableReadBytes(space, latest.index, latest.stateHash))
      const attested = new Map(latest.attestation ? [[this.o.me, latest.attestation.sig]] : [])
      p = { index: latest.index, stateHash: latest.stateHash, fromIndex: latest.fromIndex, round: latest.round, sigs: new Map([[this.o.me, own]]), attestation: latest.attestation, attested, askedAt: -Infinity }
      sp.pending.push(p)
      if (sp.pending.length > PENDING_PER_SPACE) sp.pending.shift()
      // f = 0: our own signature is proof enough.
      if (this.complete(sp, p) && (!certified || sp.proven?.attestation)) return sp.proven
    }
    if (this.o.clock.now() - p.askedAt >= REASK_MS) {
      p.askedAt = this.o.clock.now()
      for (let to = 0; to < this.o.committee.keys.length; to++) {
        if (to !== this.o.me && (!p.sigs.has(to) || (certified && !p.attested.has(to)))) this.o.host.send(to, { kind: 'head-ask', space, fromIndex: p.fromIndex, round: p.round })
      }
    }
    return new Promise((resolve) => {
      const waiter: Waiter = {
        atLeast: latest.index,
        certified,
        done: (proof: HeadProof | undefined): void => {
          timer.cancel()
          sp.waiters.delete(waiter)
          resolve(proof)
        },
      }
      const timer = this.o.clock.setTimer(timeoutMs, () => waiter.done(undefined))
      sp.waiters.add(waiter)
    })
  }

  private spaceProofs(space: string): SpaceProofs {
    let sp = this.spaces.get(space)
    if (sp) return sp
    sp = { pending: [], proven: undefined, waiters: new Set() }
    this.spaces.set(space, sp)
    for (const [name, other] of this.spaces) {
      if (this.spaces.size <= KEPT_SPACES) break
      // A space with reads waiting stays (they end within their timeout).
      if (other.waiters.size === 0) this.spaces.delete(name)
    }
    return sp
  }

  /**
   * Whether `p` has f+1 signatures; if so it is the space's proven head
   * and answers every read waiting for one at or below it. It stays
   * pending until f+1 relays also signed the commit's attestation (their
   * signatures may come after the f+1 over the head, or never from a
   * relay that lies or predates them), so a later signature still
   * certifies it.
   */
  private complete(sp: SpaceProofs, p: Pending): boolean {
    const f = this.o.committee.f
    if (p.sigs.size < f + 1) return false
    const certified = p.attestation !== undefined && p.attested.size >= f + 1
    // The latest head wins, a same-index one included (a commit that only parked envelopes comes later).
    if (!sp.proven || p.index >= sp.proven.index) sp.proven = { index: p.index, stateHash: p.stateHash, sigs: [...p.sigs], ...(certified ? { attestation: { bytes: (p.attestation as Signed).bytes, sigs: [...p.attested] } } : {}) }
    sp.pending = sp.pending.filter((x) => x.index > p.index || (x === p && !certified && p.attestation !== undefined))
    const proven = sp.proven
    for (const w of [...sp.waiters]) if (w.atLeast <= proven.index && (!w.certified || proven.attestation)) w.done(proven)
    return true
  }

  /** Handles head-ask and head-sig; false for every other message. */
  onMessage(from: number, m: Message): boolean {
    if (m.kind === 'head-ask') {
      this.answer(from, m.space, m.fromIndex, m.round)
      return true
    }
    if (m.kind !== 'head-sig') return false
    const sp = this.spaces.get(m.space)
    // Only a signature for a head being proven counts; others (late, or made up) are dropped unread.
    const p = sp?.pending.find((x) => x.index === m.index && bytesEqual(x.stateHash, m.stateHash))
    if (!sp || !p || (p.sigs.has(from) && (p.attested.has(from) || !m.attestationSig))) return true
    const key = this.o.committee.keys[from]
    if (!key || !this.o.crypto.verify(key, stableReadBytes(m.space, m.index, m.stateHash), m.sig)) return true
    p.sigs.set(from, m.sig)
    // Correct relays sign identical attestation bytes: another relay's signature over ours counts, one over anything else does not.
    if (m.attestationSig && p.attestation && this.o.crypto.verify(key, p.attestation.bytes, m.attestationSig)) p.attested.set(from, m.attestationSig)
    this.complete(sp, p)
    return true
  }

  private answer(from: number, space: string, fromIndex: number, round: number): void {
    if ((this.inFlight[from] ?? ASKS_IN_FLIGHT) >= ASKS_IN_FLIGHT || !this.asks[from]?.tryTake(0)) return
    this.inFlight[from] = (this.inFlight[from] as number) + 1
    void this.o.host
      .attested(space, fromIndex, round, ASK_WAIT_MS)
      .then((head) => {
        if (!head) return
        const sig = this.o.crypto.sign(this.o.secretKey, stableReadBytes(space, head.index, head.stateHash))
        this.o.host.send(from, { kind: 'head-sig', space, index: head.index, stateHash: head.stateHash, sig, attestationSig: head.attestation.sig })
      })
      .finally(() => {
        this.inFlight[from] = (this.inFlight[from] as number) - 1
      })
  }
}
