import { asSigned, decode, decodeAttestation, encode, freshHeadBytes, historyPageBytes, stableReadBytes, toHex, type DeltaMode, type HostClock, type Signed } from '@stead/core'
import type { Admission } from './admission.ts'
import type { Reader } from './space-access.ts'
import type { ClientNews, Subscriber } from './client-news.ts'
import type { Committee, Message, SyncCrypto } from '../consensus/index.ts'
import { CommitFeed } from '../store/feed.ts'
import { HeadProofs } from './head-proofs.ts'
import type { Ledger } from './ledger.ts'
import type { SpaceHead } from './space-table.ts'
import type { RelayStore } from '../store/store.ts'
import { RECORD_LIMIT } from '../store/kv.ts'

/** The largest delta a paced client is sent: a quarter of a session's buffer (maxBufferedBytes, 8 MiB by default). */
const MAX_PACED_DELTA_BYTES = 2 * 1024 * 1024

/** A delta for a paced client: what changed from its index to a commit f+1 relays attested alike, with their signatures on that attestation. */
export interface CertifiedDelta {
  readonly toIndex: number
  readonly delta: Uint8Array
  readonly attestation: Uint8Array
  readonly sigs: ReadonlyArray<readonly [number, Uint8Array]>
}

export interface ClientReadsOptions {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  readonly clock: HostClock
  readonly ledger: Ledger
  readonly admission: Admission
  readonly news: ClientNews
  /** The relay's store (opened at start, so asked for when needed). */
  readonly store: () => RelayStore
  /** Sends a message to a peer relay (head proofs gather their signatures over the mesh). */
  readonly send: (to: number, message: Message) => void
}

/**
 * What clients read from a relay, besides the commits they follow: heads
 * (signed by this relay alone, or proven by f+1), history pages, snapshots,
 * deltas and object proofs vouched for by an attestation, commit feeds.
 * Everything it answers is signed by this relay or carries an attestation
 * f+1 relays sign alike, so a client can check it against the others.
 */
export class ClientReads {
  private readonly o: ClientReadsOptions
  private readonly headProofs: HeadProofs

  constructor(options: ClientReadsOptions) {
    this.o = options
    const { ledger } = options
    this.headProofs = new HeadProofs({
      committee: options.committee,
      me: options.me,
      secretKey: options.secretKey,
      crypto: options.crypto,
      clock: options.clock,
      host: {
        latest: (space) => {
          const latest = ledger.latestAttested(space)
          if (latest) return latest
          // State without an attestation of it (started over from a checkpoint): no provable head.
          if (ledger.spaces.head(space)?.index) return null
          return { fromIndex: 0, round: 0, ...ledger.currentHead(space) }
        },
        attested: async (space, fromIndex, round, timeoutMs) => {
          const latest = ledger.latestAttested(space)
          if (latest && latest.fromIndex === fromIndex && latest.round === round) return latest
          const signed = await this.attestationAt(space, fromIndex, round, timeoutMs)
          if (!signed) return undefined
          const a = decodeAttestation(signed.bytes)
          return { index: a.toIndex, stateHash: a.stateHash, attestation: signed }
        },
        send: options.send,
      },
    })
  }

  /** A peer's message about head proofs (a `head-ask` or `head-sig`): whether it was one. */
  onPeerMessage(from: number, message: Message): boolean {
    return this.headProofs.onMessage(from, message)
  }

  /** The stable index a space's commit feed starts from here (above 0 once older commits were pruned), or undefined if it has none. */
  feedStart(space: string): number | undefined {
    return this.o.store().feedStart(space)
  }

  /** This relay's signature on the last commit of `space` that ends at or below stable index `index`, if it stored one: it vouches for every commit up to there. */
  attestedBy(space: string, index: number): { round: number; sig: Uint8Array } | undefined {
    const head = this.o.store().commitEndingBy(space, index)
    return head && { round: head.position[1], sig: head.attestation.sig }
  }

  /**
   * Registers `sub` for a space's live news and returns its feed of stored
   * commits from `fromIndex` on: the subscriber reads the feed at its own
   * pace, and `committed` tells it when there is more to read. Without
   * `frames` the feed carries attestations only; `chunkFor` rewrites each
   * stored chunk of envelope frames before it is sent (see CommitFeed).
   */
  subscribe(space: string, fromIndex: number, sub: Subscriber, frames = true, chunkFor?: (chunk: Uint8Array) => Uint8Array): { feed: CommitFeed; unsubscribe: () => void } {
    return { feed: new CommitFeed(this.o.store(), space, fromIndex, frames, chunkFor), unsubscribe: this.o.news.subscribe(space, sub) }
  }

  /** `sub` hears `space`'s news without reading its feed (a session waiting to be let in) until the returned function is called. */
  watch(space: string, sub: Subscriber): () => void {
    return this.o.news.subscribe(space, sub)
  }

  /**
   * Whether a session or request that proved to be `reader` (undefined:
   * nobody, e.g. plain HTTP) may read a space (see SpaceAccess.canRead).
   */
  canRead(space: string, reader: Reader | undefined): boolean {
    return this.o.admission.canRead(space, reader)
  }

  /** Spaces this relay holds, in name order after `after`, at most `limit`; spaces with readers are left out. */
  listSpaces(after: string, limit: number): Array<{ space: string; stableIndex: number }> {
    const { spaces } = this.o.ledger
    const names = spaces.names().filter((name) => name > after && this.canRead(name, undefined)).sort()
    return names.slice(0, limit).map((space) => ({ space, stableIndex: (spaces.head(space) as SpaceHead).index }))
  }

  /**
   * This relay's current (index, state hash) of a space, signed by it alone
   * (stableReadBytes); index 0 with the empty state's hash for a space with
   * no commit yet. For progress checks: quorum reads take provenHead.
   */
  stableHead(space: string): { relay: number; index: number; stateHash: string; sig: string } {
    const { index, stateHash } = this.o.ledger.currentHead(space)
    return { relay: this.o.me, index, stateHash: toHex(stateHash), sig: toHex(this.sign(stableReadBytes(space, index, stateHash))) }
  }

  /**
   * A signed page of an object's stable history: up to `limit` entries
   * before stable index `before`, newest first, as msgpack [index, value]
   * pairs (values may be bytes, which JSON cannot carry). The page stops
   * early once its values reach `maxBytes` (at least one entry, so every
   * history can be read); `next` is where the next page starts (its
   * `before`), or null at the start of the history. Correct relays cut a
   * page at the same entry, so their pages stay alike.
   */
  historyPage(space: string, key: string, before: number, limit: number, maxBytes = Number.POSITIVE_INFINITY): { relay: number; entries: Uint8Array; sig: Uint8Array; next: number | null } {
    const page = this.o.store().historyOf(space, key, before, limit, maxBytes)
    const entries = encode(page.entries.map((e) => [e.index, e.value]))
    const next = page.more ? (page.entries[page.entries.length - 1]?.index ?? null) : null
    return { relay: this.o.me, entries, sig: this.sign(historyPageBytes(space, key, before, entries)), next }
  }

  /**
   * A space's audit state as of its latest attested commit, with this
   * relay's attestation of that commit (whose state hash covers it): what
   * a client starts from instead of replaying the space's history. The
   * client believes it once f+1 relays signed the same attestation (see
   * attestationAt). Undefined for a space with no attested commit.
   */
  bootstrapSnapshot(space: string): { attestation: Signed; state: Uint8Array } | undefined {
    return this.o.ledger.bootstrapSnapshot(space)
  }

  /**
   * One object's stable state at the latest attested commit, with the path
   * proving it (or its absence) against that commit's state hash, and this
   * relay's attestation of the commit: a client believes it once f+1
   * relays signed that attestation. Costs the path, not the space.
   */
  objectProof(space: string, key: string): { attestation: Signed; proof: Uint8Array } | undefined {
    return this.o.ledger.objectProof(space, key)
  }

  /**
   * What changed in a space from stable index `fromIndex` to the latest
   * attested commit, each object as its ops or its state (BENDY: `mode`,
   * adaptive by default), with this relay's attestation of that commit: a
   * client that is behind applies it and believes it once the result
   * hashes to that attestation's state hash and f+1 relays signed it.
   * Undefined when this relay's change log does not reach back that far
   * (then the client follows the commits instead).
   */
  stateDelta(space: string, fromIndex: number, mode: DeltaMode = 'adaptive'): { attestation: Signed; delta: Uint8Array } | undefined {
    return this.o.ledger.stateDelta(space, fromIndex, mode)
  }

  /**
   * For a paced subscription: what changed in a space from `fromIndex` to
   * this relay's latest attested commit, with f+1 relays' signatures on
   * that commit's attestation (gathered over the mesh with the head proofs,
   * up to `timeoutMs`). `unavailable` when the change log does not reach
   * back to `fromIndex`; undefined when the signatures could not be had,
   * or this relay is behind `fromIndex`, or nothing was ever attested.
   */
  async certifiedDelta(space: string, fromIndex: number, mode: DeltaMode, timeoutMs: number): Promise<CertifiedDelta | 'unavailable' | undefined> {
    // The space may move while the signatures come: the delta must end exactly at the certified commit.
    for (let attempt = 0; attempt < 3; attempt++) {
      const proof = await this.headProofs.prove(space, timeoutMs, true)
      if (!proof?.attestation || proof.index < fromIndex) return undefined
      const delta = this.o.ledger.pacedDelta(space, fromIndex, mode, proof.attestation.bytes)
      if (delta === 'moved') continue
      // Past what a session may queue towards its client at once, the client follows the commits instead (they come in parts).
      if (delta === undefined || delta.length > MAX_PACED_DELTA_BYTES) return 'unavailable'
      return { toIndex: proof.index, delta, attestation: proof.attestation.bytes, sigs: proof.attestation.sigs }
    }
    return undefined
  }

  /** The objects a space's commits after `afterIndex` changed, or undefined when this relay no longer knows, or would read more than `maxOps` ops to find out. */
  changedKeys(space: string, afterIndex: number, maxOps: number): readonly string[] | undefined {
    return this.o.ledger.changedKeys(space, afterIndex, maxOps)
  }

  /** The stable index of a space here (0 for one it does not hold). */
  stableIndexOf(space: string): number {
    return this.o.ledger.spaces.head(space)?.index ?? 0
  }

  /**
   * This relay's latest attested head of a space, proven by f+1 relays'
   * signatures (see head-proofs.ts), signed over the client's `nonce` so it
   * cannot be replayed: what a linearizable quorum read takes. Gathering
   * the signatures may take up to `timeoutMs`; undefined if they could not
   * be had by then.
   */
  async provenHead(space: string, nonce: Uint8Array, timeoutMs: number): Promise<{ relay: number; index: number; stateHash: string; sig: string; proof: Array<[number, string]> } | undefined> {
    const proof = await this.headProofs.prove(space, timeoutMs)
    if (!proof) return undefined
    const sig = this.sign(freshHeadBytes(space, proof.index, proof.stateHash, nonce))
    return { relay: this.o.me, index: proof.index, stateHash: toHex(proof.stateHash), sig: toHex(sig), proof: proof.sigs.map(([relay, s]) => [relay, toHex(s)]) }
  }

  /**
   * This relay's signed attestation of the space's commit at [fromIndex,
   * round], once it is on disk here; waits up to `timeoutMs` for a relay
   * slightly behind to get there. Undefined if it did not (a client asking
   * about a round no correct relay attests waits that long for nothing).
   */
  async attestationAt(space: string, fromIndex: number, round: number, timeoutMs: number): Promise<Signed | undefined> {
    const find = (): Signed | undefined => {
      const head = this.o.store().commitAt(space, [fromIndex, round])
      return head && head.position[0] === fromIndex && head.position[1] === round ? head.attestation : undefined
    }
    const found = find()
    if (found) return found
    return new Promise((resolve) => {
      const done = (value: Signed | undefined): void => {
        timer.cancel()
        stopListening()
        resolve(value)
      }
      const listener = (spaces: ReadonlySet<string> | null): void => {
        if (!spaces) return done(undefined)
        const a = spaces.has(space) ? find() : undefined
        if (a) done(a)
      }
      const timer = this.o.clock.setTimer(timeoutMs, () => done(undefined))
      const stopListening = this.o.news.onAttested(listener)
    })
  }

  /**
   * Envelope `idHex` of `space` as the commit that decided it stored it
   * (its frame, when it is among the commit's envelopes) and this relay's
   * attestation of that commit; undefined for an envelope no kept commit
   * decided. Ids are hashes of the frames' signed bytes: nothing is verified here.
   */
  decidedEnvelope(space: string, idHex: string): { frame: Uint8Array | undefined; attestation: Signed } | undefined {
    const store = this.o.store()
    const head = store.commitDeciding(space, idHex)
    if (!head) return undefined
    for (let k = 0; k < head.chunks; k++) {
      for (const frame of decode(store.commitChunk(space, head.position, k), RECORD_LIMIT) as Uint8Array[]) {
        if (toHex(this.o.crypto.sha256(asSigned(decode(frame)).bytes)) === idHex) return { frame, attestation: head.attestation }
      }
    }
    return { frame: undefined, attestation: head.attestation }
  }

  /** A signed snapshot of a space's stable state, for quorum reads. */
  stableSnapshot(space: string): { index: number; stateHash: string; sig: string; snapshot: unknown } {
    // A space nothing was committed to yet is at index 0 with an empty state, which every correct relay signs alike.
    const r = this.o.ledger.replicaOrEmpty(space)
    const hash = r.stableHash((b) => this.o.crypto.sha256(b))
    return { index: r.stableIndex, stateHash: toHex(hash), sig: toHex(this.sign(stableReadBytes(space, r.stableIndex, hash))), snapshot: r.stableSnapshot() }
  }

  private sign(bytes: Uint8Array): Uint8Array {
    return this.o.crypto.sign(this.o.secretKey, bytes)
  }
}
