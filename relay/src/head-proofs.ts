import { stableReadBytes, toHex } from '@stead/core'
import { Bucket } from './bucket.ts'
import type { Committee, Message, SyncCrypto } from './consensus/index.ts'

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
}

/** What head proofs need of the relay around them. */
export interface HeadProofHost {
  /**
   * The position and result of this relay's latest attested commit of
   * `space`; undefined for a space with none (head 0), null for a space
   * whose state this relay holds without an attestation of it (started
   * over from a checkpoint): it cannot prove that head, and must not
   * answer 0 for it.
   */
  latest(space: string): { fromIndex: number; round: number; index: number; stateHash: Uint8Array } | undefined | null
  /** This relay's attested commit of `space` at [fromIndex, round] once it is stored here, waiting up to `timeoutMs`; undefined if it is not. */
  attested(space: string, fromIndex: number, round: number, timeoutMs: number): Promise<{ index: number; stateHash: Uint8Array } | undefined>
  send(to: number, message: Message): void
}

export interface HeadProofOptions {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly host: HeadProofHost
  readonly now: () => number
}

interface Pending {
  readonly index: number
  readonly stateHash: Uint8Array
  readonly sigs: Map<number, Uint8Array>
  askedAt: number
  readonly waiters: Set<() => void>
}

/** How long a peer waits to reach a head it was asked to sign (it may be a round or two behind). */
const ASK_WAIT_MS = 3_000
/** A peer's asks answered at once at most: each costs a store read and a signature. */
const ASKS_IN_FLIGHT = 64
/** A peer's asks per second (and burst): beyond it they are dropped, and the asker's read waits for others. */
const ASKS_PER_SECOND = 1_000
/** An unanswered ask is sent again after this long, when a read still waits (frames may be lost while a peer reconnects). */
const REASK_MS = 1_000
/** Spaces whose latest proof is kept. */
const KEPT_PROOFS = 10_000

export class HeadProofs {
  /** Per space, the head being proven or proven last. */
  private readonly proofs = new Map<string, Pending>()
  private readonly inFlight: number[]
  private readonly asks: Bucket[]
  private readonly o: HeadProofOptions
  constructor(o: HeadProofOptions) {
    this.o = o
    this.inFlight = o.committee.keys.map(() => 0)
    const rate = { perSecond: ASKS_PER_SECOND, burst: ASKS_PER_SECOND, bytesPerSecond: Number.MAX_SAFE_INTEGER, burstBytes: Number.MAX_SAFE_INTEGER }
    this.asks = o.committee.keys.map(() => new Bucket(rate, o.now))
  }

  /**
   * This relay's latest attested head of `space` with f+1 signatures, once
   * gathered (up to `timeoutMs`); undefined if they could not be. A space
   * with no attested commit has head 0, which needs no proof.
   */
  async prove(space: string, timeoutMs: number): Promise<HeadProof | undefined> {
    const latest = this.o.host.latest(space)
    if (latest === null) return undefined
    if (!latest) return { index: 0, stateHash: new Uint8Array(0), sigs: [] }
    let p = this.proofs.get(space)
    if (!p || p.index !== latest.index || toHex(p.stateHash) !== toHex(latest.stateHash)) {
      const own = this.o.crypto.sign(this.o.secretKey, stableReadBytes(space, latest.index, latest.stateHash))
      p = { index: latest.index, stateHash: latest.stateHash, sigs: new Map([[this.o.me, own]]), askedAt: -Infinity, waiters: new Set() }
      this.proofs.delete(space)
      this.proofs.set(space, p)
      for (const name of this.proofs.keys()) {
        if (this.proofs.size <= KEPT_PROOFS) break
        this.proofs.delete(name)
      }
    }
    const enough = this.o.committee.f + 1
    if (p.sigs.size < enough && this.o.now() - p.askedAt >= REASK_MS) {
      p.askedAt = this.o.now()
      for (let to = 0; to < this.o.committee.keys.length; to++) {
        if (to !== this.o.me && !p.sigs.has(to)) this.o.host.send(to, { kind: 'head-ask', space, fromIndex: latest.fromIndex, round: latest.round })
      }
    }
    if (p.sigs.size < enough) {
      const pending = p
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(timer)
          pending.waiters.delete(done)
          resolve()
        }
        const timer = setTimeout(done, timeoutMs)
        pending.waiters.add(done)
      })
      if (p.sigs.size < enough) return undefined
    }
    return { index: p.index, stateHash: p.stateHash, sigs: [...p.sigs] }
  }

  /** Handles head-ask and head-sig; false for every other message. */
  onMessage(from: number, m: Message): boolean {
    if (m.kind === 'head-ask') {
      this.answer(from, m.space, m.fromIndex, m.round)
      return true
    }
    if (m.kind !== 'head-sig') return false
    const p = this.proofs.get(m.space)
    // Only a signature for the head being proven counts; others (late, or made up) are dropped unread.
    if (!p || p.index !== m.index || toHex(p.stateHash) !== toHex(m.stateHash) || p.sigs.has(from)) return true
    const key = this.o.committee.keys[from]
    if (!key || !this.o.crypto.verify(key, stableReadBytes(m.space, m.index, m.stateHash), m.sig)) return true
    p.sigs.set(from, m.sig)
    if (p.sigs.size >= this.o.committee.f + 1) for (const done of [...p.waiters]) done()
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
        this.o.host.send(from, { kind: 'head-sig', space, index: head.index, stateHash: head.stateHash, sig })
      })
      .finally(() => {
        this.inFlight[from] = (this.inFlight[from] as number) - 1
      })
  }
}
