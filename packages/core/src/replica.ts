import type { Validation } from './chrono.ts'
import {
  asGeneric,
  createCrdt,
  decodeDeclaration,
  describeDeclaration,
  disposesOf,
  encodeDeclaration,
  historyPatch,
  historyValue,
  isDeletion,
  isSpaceDeletion,
  isOrdered,
  patchesHistory,
  POLICY_KEY,
  SpacePolicy,
  isRedemption,
  policyProblem,
  redeemBytes,
  type RedeemOp,
  sameDeclaration,
  type AnyCrdt,
  type AnyOp,
  type ApplyResult,
  type Declaration,
  type OpContext,
  restoreCrdt,
  validateOp,
  type ValuePatch,
} from './crdt/index.ts'
import { encode, type Signed } from './codec.ts'
import { clockWeight, judgeClock, MAX_KEPT_CLOCK_ENTRIES, type ClockInputs, type ClockRecord, type ClockVerdict, type CommittedClock } from './causal.ts'
import { envelopeUnits, type Envelope, type EnvelopeUnit } from './envelope.ts'
import { bytesEqual, fromHex, toHex } from './bytes.ts'
import { verifyEd25519Sync } from './crypto/noble.ts'
import { SteadError, type ErrorReason } from './errors.ts'
import { MerkleIndex } from './merkle.ts'
import type { StateDelta } from './delta.ts'
import { auditStateHash, authorLeafOf, compareKeys, decodeRecent, encodeRecent, liveObjectDigest, parkedDigest, recentDigest, stateHashOf, type AuditAuthor, type AuditObject, type AuditState, type ObjectProof, type ParkedEnvelope, type ProofProblem, type RecentRecord } from './state.ts'

/** The audit's verdict on one unit (a regular op, or a safe group) of a committed envelope. */
export type UnitOutcome =
  | {
      /** The unit's place in the envelope (see `envelopeUnits`). */
      readonly unit: number
      /** It is in the stable state. */
      readonly status: 'committed'
    }
  | {
      /** The unit's place in the envelope (see `envelopeUnits`). */
      readonly unit: number
      /** It never takes effect. */
      readonly status: 'rejected'
      /** Why: `invariant`, `type-mismatch`, `unauthorized`, `malformed`. */
      readonly reason: ErrorReason
      /** A sentence for logs. */
      readonly detail: string
    }

/** What the audit (or a later commit) decided about one envelope. */
export type Decision =
  /** Took stable index `index`; each unit committed or was rejected on its own. */
  | {
      /** Committed: it took a stable index. */
      readonly kind: 'committed'
      /** The envelope. */
      readonly env: Envelope
      /** The stable index it took. */
      readonly index: number
      /** The verdict on each of its units, in order. */
      readonly units: readonly UnitOutcome[]
      /** Whether the audit could check its clock against inputs it all holds (see `judgeClock`). */
      readonly clockVerified: boolean
    }
  /** Ordered, but never enters the stable history: a duplicate, a conflict (another envelope holds its author+seq), a gap that never filled, or a clock its inputs contradict. */
  | {
      /** Ordered but not applied. */
      readonly kind: 'dropped'
      /** The envelope. */
      readonly env: Envelope
      /** Why it was dropped. */
      readonly reason: 'duplicate' | 'conflict' | 'gap' | 'malformed' | 'bad-clock'
      /** A sentence for logs. */
      readonly detail: string
    }
  /**
   * Received but not ordered, and now it never can be: another envelope
   * committed under its author+seq. Local news (it depends on what this
   * replica received), unlike the other decisions, which every replica makes alike.
   */
  | {
      /** Lost its slot to another envelope of the same author. */
      readonly kind: 'superseded'
      /** The envelope that lost. */
      readonly env: Envelope
      /** The id (hex) of the envelope that committed in its place. */
      readonly by: string
    }

/** What `ReliableReplica.commit` decided. */
export interface CommitResult {
  /** One decision per envelope it decided, in order (parked envelopes decided later appear in a later result). */
  readonly decisions: readonly Decision[]
  /** The stable index after the commit: the number of envelopes committed in this space so far. */
  readonly stableIndex: number
  /** Keys whose prospective or stable value may have changed. */
  readonly changed: ReadonlySet<string>
  /** Every stable value an object took in this commit, in order (whatever `historyLimit` keeps in memory). */
  readonly history: readonly StableChange[]
}

/** One stable value an object took. */
export interface StableChange {
  /** The object. */
  readonly key: string
  /** The stable index of the envelope that changed it. */
  readonly index: number
  /** Its stable value from then on (null once deleted). */
  readonly value: unknown
  /** The object was deleted here (its value is null; a register's own null is a value, not a deletion). */
  readonly deleted?: true
  /**
   * With `historyPatches`, for types whose values grow long: the same value
   * as a patch of the object's value at stable index `base` (its previous
   * change this replica saw), usually far smaller than `value`.
   */
  readonly patch?: {
    /** The stable index of the change it patches. */
    readonly base: number
    /** From that change's value to this one's. */
    readonly patch: ValuePatch
  }
}

/** A point in a replica's pending set (see `ReliableReplica.pendingMark`). */
export interface PendingMark {
  /** Changes whenever an envelope leaves the pending set or a commit runs. */
  readonly epoch: number
  /** How many envelopes joined the pending set in this epoch before the mark. */
  readonly arrived: number
}

/** What `ReliableReplica.receive` did with an envelope. */
export interface ReceiveResult {
  /**
   * `applied` to the prospective state; `duplicate` when already pending or
   * decided; `conflict` when another envelope claims its author+seq: not
   * applied if the audit already decided that slot, else applied, and the
   * audit will keep at most one of them.
   */
  readonly status: 'applied' | 'duplicate' | 'conflict'
  /** Keys whose prospective value may have changed. */
  readonly changed: ReadonlySet<string>
}

/** Application validator: may this author apply this op to this object? */
export type Authorize = (author: string, key: string, decl: Declaration, op: AnyOp) => Validation

/** Options of a {@link ReliableReplica}. */
export interface ReplicaOptions {
  /** The space it replicates; envelopes of other spaces are refused. */
  readonly space: string
  /** The space's write policy, applied by the audit (every replica of the space must use the same). Default: anyone may write. */
  readonly authorize?: Authorize
  /** Synchronous Ed25519 verification for signatures inside updates (an invitation's redemption); default: pure JS (verifyEd25519Sync). */
  readonly verify?: (publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array) => boolean
  /** Stable history entries kept in memory per object (older ones live in the store); 0 keeps none (relays store each commit's `history`). */
  readonly historyLimit?: number
  /**
   * How far (in commit positions: consensus rounds when the caller passes
   * them, else commit calls) an envelope may wait for its author's missing
   * sequence numbers before it is dropped as 'gap'.
   */
  readonly gapWaitCommits?: number
  /** Envelopes per author that may wait for a gap at once; more are dropped as 'gap'. */
  readonly maxWaitingPerAuthor?: number
  /**
   * How far (in commit positions) an envelope received with `{ expires: true }`
   * (another author's, from a relay's prospective feed) may stay undecided
   * before its prospective effect is reversed. Relays forward envelopes before
   * they are ordered, and a few never will be (an equivocating relay's losing
   * block); without this they would stay in the prospective state forever.
   * An expired envelope that commits later is applied then. Default 128.
   */
  readonly foreignWaitCommits?: number
  /** Each stable change of a text, list or map also says how it differs from the previous one (StableChange.patch): relays store those. */
  readonly historyPatches?: boolean
  /**
   * After each commit, recompute the state hash from scratch and check it
   * equals the one kept incrementally (what relays sign): slow, for
   * simulators and tests. The cheap checks of a commit always run.
   */
  readonly verifyStateHash?: (bytes: Uint8Array) => Uint8Array
}

/** A broken invariant of the audit: a bug, or state corrupted under it. Whoever runs the audit must stop (a relay does). */
export class AuditInvariantError extends Error {
  /** 'AuditInvariantError'. */
  override readonly name = 'AuditInvariantError'
}

function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AuditInvariantError(message)
}

/** How an envelope reached the replica. */
export interface ReceiveOptions {
  /** Another author's envelope that is not ordered yet: reversed if it stays undecided too long (see `foreignWaitCommits`). */
  readonly expires?: boolean
}

/** Most bytes of values one object's in-memory stable history holds (besides its latest entry). */
export const HISTORY_BYTES = 8 * 1024 * 1024

/** What an entry's value takes in memory, about: two bytes a character for a text, its encoded size for anything else. */
function historyBytes(value: unknown): number {
  return typeof value === 'string' ? 2 * value.length : encode(value).length
}

/** One step of an object's stable history. */
export interface HistoryEntry {
  /** The stable index of the envelope that changed the object. */
  readonly index: number
  /** The object's stable value from then on. */
  readonly value: unknown
}

interface Obj {
  decl: Declaration
  crdt: AnyCrdt
}

/** A delta `ReliableReplica.verifyDelta` found to lead to the attested state: what `applyDelta` installs. */
export interface VerifiedDelta {
  /** The stable index it starts from. */
  readonly fromIndex: number
  /** The stable index it reaches. */
  readonly toIndex: number
  /** @internal The changed objects as they stand at toIndex (undefined: deleted). */
  readonly objects: ReadonlyMap<string, { decl: Declaration; crdt: AnyCrdt } | undefined>
  /** @internal Their leaves in the state hash, as verified. */
  readonly leaves: ReadonlyMap<string, Uint8Array>
  /** @internal The changed authors at toIndex: last seq, and recent records by seq, ascending. */
  readonly authors: ReadonlyMap<string, { readonly seq: number; readonly recent: ReadonlyArray<[number, { readonly idHex: string; readonly record: ClockRecord; digest?: Uint8Array }]> }>
  /** @internal The parked envelopes at toIndex. */
  readonly waiting: ReadonlyArray<ParkedEnvelope<Envelope>>
}

interface Pending {
  readonly env: Envelope
  /** Tags of the ops that were applied to the prospective state. */
  readonly applied: Set<string>
  readonly keys: ReadonlySet<string>
  /** Commit position at which it is reversed if still undecided (another author's envelope). */
  expiresAt: number | undefined
}

interface AuthorState {
  seq: number
  /**
   * Recent sequence numbers: the id, to tell a duplicate from a conflict,
   * and the clock record, which later clocks are checked against.
   */
  readonly recent: Map<number, Recent>
}

interface Recent {
  readonly idHex: string
  readonly record: ClockRecord
  /** Its digest in the author's leaf, once computed (records never change). */
  digest?: Uint8Array
}

const RECENT_IDS_PER_AUTHOR = 256
const CHECKPOINT_TAG = 'stead/checkpoint/v2'

/**
 * The audit of one space (Janus's stable path): a stable state built only
 * from the committed order, which every correct replica runs the same way,
 * with the state hash relays sign. Pure: no I/O, no clocks, no randomness;
 * the caller feeds committed batches and persists what it needs. Relays run
 * it alone; clients run it inside a {@link ReliableReplica}.
 *
 * Audit rules for each committed envelope, in order:
 * - per author, sequence numbers apply in order; an envelope ahead of its
 *   author's next number waits (at most `gapWaitCommits` commits since
 *   it, or a copy of it, was last ordered);
 * - a second envelope for an (author, seq) already decided is dropped as a
 *   duplicate (same id) or a conflict (other id);
 * - each unit is checked (declaration, authorization, invariants via
 *   tryApply) against the stable state; an atomic safe group applies wholly
 *   or not at all.
 */
export class StableAudit {
  /** The space this replica holds. */
  readonly space: string
  private readonly authorize: Authorize | undefined
  private readonly verify: (publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array) => boolean
  private readonly historyLimit: number
  private readonly gapWaitCommits: number
  private readonly maxWaitingPerAuthor: number
  /** With historyPatches: the latest stable change of each object whose type patches its history. */
  private readonly lastChange: Map<string, { readonly index: number; readonly value: unknown }> | undefined
  private readonly verifyStateHash: ((bytes: Uint8Array) => Uint8Array) | undefined

  protected readonly stableObjects = new Map<string, Obj>()
  private readonly histories = new Map<string, Array<HistoryEntry & { readonly bytes: number }>>()
  /** Bytes of each in-memory history's values (see HISTORY_BYTES). */
  private readonly historyTotals = new Map<string, number>()
  private readonly authors = new Map<string, AuthorState>()
  /** Envelope id (hex) → author and seq, for every id in the authors' recent records: how deps are found. */
  private readonly recentIds = new Map<string, { authorId: string; seq: number }>()
  private readonly waiting = new Map<string, Map<number, { env: Envelope; since: number }>>()
  private index = 0
  protected commits = 0
  /** Stable index the in-memory histories start after: above 0 for a replica started from an audit state (older entries live on the relays). */
  private historyFrom = 0
  /** The stable values objects took in the commit being run (CommitResult.history). */
  private committed: StableChange[] = []
  /** The trees of the state hash, recomputed for what commits touched (see state.ts). */
  private readonly objectLeaves = new MerkleIndex()
  private readonly authorLeaves = new MerkleIndex()

  constructor(options: ReplicaOptions) {
    this.space = options.space
    this.authorize = options.authorize
    this.verify = options.verify ?? verifyEd25519Sync
    this.historyLimit = options.historyLimit ?? 1000
    this.gapWaitCommits = options.gapWaitCommits ?? 64
    this.maxWaitingPerAuthor = options.maxWaitingPerAuthor ?? 1024
    this.lastChange = options.historyPatches ? new Map() : undefined
    this.verifyStateHash = options.verifyStateHash
  }

  /** How many envelopes the audit committed so far: the stable index every correct replica agrees on. */
  get stableIndex(): number {
    return this.index
  }

  /** Committed envelopes parked behind a sequence gap. */
  get waitingCount(): number {
    let n = 0
    for (const queue of this.waiting.values()) n += queue.size
    return n
  }

  /** The stable value of `key` (undefined before its first commit). */
  stableValue(key: string): unknown {
    return this.stableObjects.get(key)?.crdt.value()
  }

  /** The committed declaration of a key, once there is one. */
  declaration(key: string): Declaration | undefined {
    return this.stableObjects.get(key)?.decl
  }

  /** The stable CRDT of `key`: the replica's own, do not mutate (clone it). */
  stable(key: string): AnyCrdt | undefined {
    return this.stableObjects.get(key)?.crdt
  }

  /**
   * The space's policy in force at the stable index, once one was created
   * (the replica's own, do not mutate): who administers, writes and reads.
   * Without one, writes are checked by the `authorize` option alone.
   */
  policy(): SpacePolicy | undefined {
    const crdt = this.stableObjects.get(POLICY_KEY)?.crdt
    return crdt instanceof SpacePolicy && crdt.created ? crdt : undefined
  }

  /** The stable history of `key` held in memory (the latest `historyLimit` entries, and none from before `historyStart`), oldest first. */
  history(key: string): readonly HistoryEntry[] {
    return this.histories.get(key) ?? []
  }

  /** The in-memory histories hold no entry at or below this stable index (where the replica started from an audit state); 0 for one that saw every commit. */
  get historyStart(): number {
    return this.historyFrom
  }

  /** Every key with a stable object (and, for a ReliableReplica, a prospective one), sorted. */
  keys(): string[] {
    return [...this.stableObjects.keys()].sort()
  }

  /**
   * Whether the audit already decided this envelope's (author, seq):
   * 'duplicate' when it decided this very envelope (or one too old to tell),
   * 'conflict' when it decided another one, null when the slot is still open.
   */
  decided(env: Envelope): 'duplicate' | 'conflict' | null {
    const author = this.authors.get(env.authorId)
    if (!author || env.seq > author.seq) return null
    const id = author.recent.get(env.seq)?.idHex
    return id === undefined || id === env.idHex ? 'duplicate' : 'conflict'
  }

  /** Whether the audit committed this envelope (known for each author's latest 256). */
  hasCommitted(idHex: string): boolean {
    return this.recentIds.has(idHex)
  }

  /** The clock record of `author`'s committed envelope `seq`, while the audit keeps it (its author's latest 256). */
  clockRecord(author: string, seq: number): ClockRecord | undefined {
    return this.authors.get(author)?.recent.get(seq)?.record
  }

  /** The next sequence number the audit expects from `author`. */
  nextSeq(author: string): number {
    return (this.authors.get(author)?.seq ?? 0) + 1
  }

  /**
   * Canonical stable state: index, authors' sequence numbers and every
   * object's declaration and CRDT snapshot, sorted (the core of a
   * checkpoint; see `auditState` for what attestations hash).
   */
  stableSnapshot(): unknown {
    const objects = [...this.stableObjects.entries()].sort(([a], [b]) => compareKeys(a, b)).map(([key, o]) => [key, encodeDeclaration(o.decl), o.crdt.snapshot()])
    const authors = [...this.authors.entries()].sort(([a], [b]) => compareKeys(a, b)).map(([id, a]) => [id, a.seq])
    return ['stead/stable/v1', this.space, this.index, authors, objects]
  }

  /**
   * The canonical audit state (see state.ts): equal on every correct
   * replica after the same commit, and enough to audit every later commit
   * as they do. What a relay serves a client that bootstraps.
   */
  auditState(): AuditState<Envelope> {
    const objects = [...this.stableObjects.keys()].sort(compareKeys).map((key) => this.auditObject(key))
    const authors = [...this.authors.keys()].sort(compareKeys).map((id) => this.auditAuthor(id))
    return { space: this.space, index: this.index, authors, waiting: this.parked(), objects }
  }

  /**
   * SHA-256 of the audit state: what attestations and heads sign. Costs
   * the objects and authors changed since the last call and the tree
   * paths above them.
   */
  stableHash(sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array {
    return stateHashOf(sha256, this.space, this.index, this.authorsRoot(sha256), this.objectsRoot(sha256), parkedDigest(sha256, this.parked()))
  }

  /**
   * `key`'s stable state with the path that proves it (or its absence)
   * against `stableHash` at this stable index: what a relay serves a
   * client that wants one object without the whole state.
   */
  objectProof(sha256: (bytes: Uint8Array) => Uint8Array, key: string): ObjectProof {
    const authorsRoot = this.authorsRoot(sha256)
    this.objectsRoot(sha256)
    const o = this.stableObjects.has(key) ? this.auditObject(key) : undefined
    return {
      space: this.space,
      index: this.index,
      key,
      object: o ? [o[1], o[2]] : undefined,
      path: this.objectLeaves.path(sha256, key),
      authorsRoot,
      parked: parkedDigest(sha256, this.parked()),
    }
  }

  /** `key`'s stable entry as audit states carry it ([key, encoded declaration, snapshot]); undefined for an object with no stable state. */
  stableObject(key: string): AuditObject | undefined {
    return this.stableObjects.has(key) ? this.auditObject(key) : undefined
  }

  /** An author's record as audit states carry it; undefined for an author with nothing committed. */
  authorRecord(id: string): AuditAuthor | undefined {
    return this.authors.has(id) ? this.auditAuthor(id) : undefined
  }

  /** The envelopes parked behind a sequence gap, as audit states carry them (by author and seq). */
  parkedEnvelopes(): Array<ParkedEnvelope<Envelope>> {
    return this.parked()
  }

  /**
   * Checks a delta from this replica's stable index (see `ChangeLog.delta`)
   * against `stateHash`, which f+1 relays attested for its end: builds the
   * changed objects (from their state, or the stable ones with the ops
   * applied as the audit did) and hashes the state they make, without
   * changing anything. A problem means the relay that served the delta
   * lied; otherwise `applyDelta` installs it.
   */
  verifyDelta(sha256: (bytes: Uint8Array) => Uint8Array, delta: StateDelta<Envelope>, stateHash: Uint8Array): VerifiedDelta | ProofProblem {
    if (delta.space !== this.space) return { problem: `a delta of space ${delta.space}, not ${this.space}` }
    if (delta.fromIndex !== this.index) return { problem: `a delta from stable index ${delta.fromIndex}, not ${this.index}` }
    const objects = new Map<string, Obj | undefined>()
    for (const o of delta.objects) {
      try {
        objects.set(o.key, this.deltaObject(o))
      } catch (err) {
        return { problem: `object ${o.key}: ${(err as Error).message}` }
      }
    }
    // A delta lists only the recent records its range added; the rest are this replica's own, as
    // many as an author keeps (the window ends at the delta's last seq).
    const authors = new Map<string, { seq: number; recent: Array<[number, Recent]> }>()
    for (const [id, seq, added] of delta.authors) {
      const kept = [...(this.authors.get(id)?.recent ?? [])].filter(([s]) => s > seq - RECENT_IDS_PER_AUTHOR && s <= seq)
      const fresh = new Map<number, Recent>([...kept, ...decodedRecent(id, added)])
      authors.set(id, { seq, recent: [...fresh].sort((x, y) => x[0] - y[0]) })
    }
    const touch = (): void => {
      for (const key of objects.keys()) this.objectLeaves.touch(key)
      for (const id of authors.keys()) this.authorLeaves.touch(id)
    }
    touch()
    const leaves = new Map<string, Uint8Array>()
    const objectsRoot = this.objectLeaves.rootOf(sha256, (key) => {
      if (!objects.has(key)) return this.objectLeaf(sha256, key)
      const o = objects.get(key)
      if (!o) return undefined
      const leaf = liveObjectDigest(sha256, key, o.decl, o.crdt)
      leaves.set(key, leaf)
      return leaf
    })
    const authorsRoot = this.authorLeaves.rootOf(sha256, (id) => {
      const a = authors.get(id)
      return a ? authorLeaf(sha256, id, a.seq, a.recent) : this.authorLeaf(sha256, id)
    })
    const hash = stateHashOf(sha256, this.space, delta.toIndex, authorsRoot, objectsRoot, parkedDigest(sha256, delta.waiting))
    // The trees go back to what this replica holds (the same keys, rehashed when next asked).
    touch()
    if (!bytesEqual(hash, stateHash)) return { problem: `the delta to stable index ${delta.toIndex} does not lead to the attested state hash` }
    return { fromIndex: delta.fromIndex, toIndex: delta.toIndex, objects, leaves, authors, waiting: delta.waiting }
  }

  /**
   * Installs a delta `verifyDelta` accepted (the replica must not have
   * moved since): the stable state jumps to its end, the commit position
   * to `round`. Pending envelopes the delta decided leave the pending set
   * and are returned (whether their units committed is only in the commits
   * skipped); the rest stay on top of the new stable state. In-memory
   * histories start over from there, as for a replica started from an
   * audit state.
   *
   * @returns The pending envelopes the delta decided.
   */
  applyDelta(sha256: (bytes: Uint8Array) => Uint8Array, delta: VerifiedDelta, round: number): Envelope[] {
    if (delta.fromIndex !== this.index) throw new Error(`a delta from stable index ${delta.fromIndex} cannot apply at ${this.index}`)
    const changed = new Set<string>(delta.objects.keys())
    for (const [key, o] of delta.objects) {
      if (o) this.stableObjects.set(key, o)
      else this.stableObjects.delete(key)
      this.objectLeaves.touch(key)
    }
    // Hashed once already, by verifyDelta: the tree takes those leaves instead of encoding the objects again.
    this.objectLeaves.rootOf(sha256, (key) => delta.leaves.get(key) ?? this.objectLeaf(sha256, key))
    for (const [id, a] of delta.authors) {
      this.restoreAuthor(id, a.seq, a.recent)
      this.authorLeaves.touch(id)
    }
    this.waiting.clear()
    for (const { env, since } of delta.waiting) this.waitingOf(env.authorId).set(env.seq, { env, since })
    this.index = delta.toIndex
    this.commits = Math.max(this.commits, round)
    this.histories.clear()
    this.historyTotals.clear()
    this.historyFrom = delta.toIndex
    return this.deltaApplied(changed)
  }

  /** An object of a delta as it stands at the delta's end: its state, or the stable one with the delta's ops applied as the audit did; undefined for one deleted. */
  private deltaObject(o: StateDelta['objects'][number]): Obj | undefined {
    const decl = decodeDeclaration(o.decl)
    if (isDeletion(decl)) {
      if (o.mode !== 'state') throw new Error('a deletion travels as a state (the key deleted)')
      return undefined
    }
    if (o.mode === 'state') return { decl, crdt: restoreCrdt(decl, o.snapshot) }
    const base = this.stableObjects.get(o.key)
    if (base && !sameDeclaration(base.decl, decl)) throw new Error(`declared ${describeDeclaration(decl)}, but it is ${describeDeclaration(base.decl)}`)
    const crdt = base ? base.crdt.clone() : createCrdt(decl)
    for (const [author, tag, op] of o.ops) {
      const problem = validateOp(decl, op)
      if (problem) throw new Error(problem)
      const result = asGeneric(crdt).tryApply(op, { replica: author, tag })
      if (!result.ok) throw new Error(`an op the delta says committed does not apply: ${result.detail}`)
    }
    return { decl, crdt }
  }

  private objectsRoot(sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array {
    return this.objectLeaves.rootOf(sha256, (key) => this.objectLeaf(sha256, key))
  }

  /** A stable object's leaf in the state hash; undefined for a key with no stable state. */
  private objectLeaf(sha256: (bytes: Uint8Array) => Uint8Array, key: string): Uint8Array | undefined {
    const o = this.stableObjects.get(key)
    return o && liveObjectDigest(sha256, key, o.decl, o.crdt)
  }

  private authorsRoot(sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array {
    return this.authorLeaves.rootOf(sha256, (id) => this.authorLeaf(sha256, id))
  }

  private authorLeaf(sha256: (bytes: Uint8Array) => Uint8Array, id: string): Uint8Array | undefined {
    const a = this.authors.get(id)
    return a && authorLeaf(sha256, id, a.seq, bySeq(a))
  }

  /** Envelopes parked behind a gap, by author and seq. */
  private parked(): Array<{ env: Envelope; since: number }> {
    return [...this.waiting.entries()].sort(([a], [b]) => compareKeys(a, b)).flatMap(([, queue]) => [...queue.values()].sort((a, b) => a.env.seq - b.env.seq))
  }

  private auditObject(key: string): readonly [string, unknown, unknown] {
    const o = this.stableObjects.get(key) as Obj
    return [key, encodeDeclaration(o.decl), o.crdt.snapshot()]
  }

  private auditAuthor(id: string): AuditAuthor {
    const a = this.authors.get(id) as AuthorState
    return [id, a.seq, encodedRecent(a)]
  }

  /**
   * Everything the stable path holds, msgpack-friendly: the stable snapshot,
   * each author's recent ids (to tell duplicates from conflicts), envelopes
   * parked behind a gap, the commit position and the in-memory histories.
   * `ReliableReplica.restore` rebuilds a replica that audits every later
   * commit exactly as this one would. Pending (prospective-only) envelopes
   * are not included: the caller keeps and re-receives those.
   */
  checkpoint(): unknown {
    const authors = [...this.authors.entries()].map(([id, a]) => [id, a.seq, encodedRecent(a)])
    const waiting = [...this.waiting.values()].flatMap((q) => [...q.values()].map((w) => [w.env.signed.bytes, w.env.signed.sig, w.since]))
    const histories = [...this.histories.entries()].map(([key, h]) => [key, h.map((e) => [e.index, e.value])])
    return [CHECKPOINT_TAG, this.stableSnapshot(), this.commits, authors, waiting, histories, this.historyFrom]
  }

  /**
   * Rebuilds a replica from `checkpoint()` output. Trusted input (the
   * caller's own storage): `open` turns a parked envelope's signed bytes
   * back into an Envelope, typically without verifying the signature again.
   */
  static restore<T extends StableAudit>(this: new (options: ReplicaOptions) => T, options: ReplicaOptions, checkpoint: unknown, open: (signed: Signed) => Envelope): T {
    const [tag, stable, commits, authors, waiting, histories, historyFrom] = checkpoint as [string, unknown[], number, Array<[string, number, unknown[]]>, Array<[Uint8Array, Uint8Array, number]>, Array<[string, Array<[number, unknown]>]>, number | undefined]
    if (tag !== CHECKPOINT_TAG) throw new SteadError('malformed', `not a ${CHECKPOINT_TAG}`)
    const [, space, index, , objects] = stable as [string, string, number, unknown, Array<[string, unknown, unknown]>]
    if (space !== options.space) throw new SteadError('malformed', `checkpoint of space ${space}, not ${options.space}`)
    const r = new this(options)
    r.index = index
    r.commits = commits
    r.historyFrom = historyFrom ?? 0
    for (const [key, enc, snap] of objects) {
      const decl = decodeDeclaration(enc)
      r.stableObjects.set(key, { decl, crdt: restoreCrdt(decl, snap) })
    }
    for (const [id, seq, recent] of authors) r.restoreAuthor(id, seq, decodedRecent(id, recent))
    for (const [bytes, sig, since] of waiting) {
      const env = open({ bytes, sig })
      r.waitingOf(env.authorId).set(env.seq, { env, since })
    }
    for (const [key, h] of histories) {
      const entries = h.map(([i, value]) => ({ index: i, value, bytes: historyBytes(value) }))
      r.histories.set(key, entries)
      r.historyTotals.set(key, entries.reduce((n, e) => n + e.bytes, 0))
    }
    r.touchAll()
    r.restored()
    return r
  }

  /**
   * A replica that starts at an audit state a relay served (see
   * `decodeAuditState`), after the commit at position `round`. Check the
   * state's hash against f+1 attestations first: the objects' snapshots
   * are only checked for shape here. Its stable histories start empty.
   */
  static fromAuditState<T extends StableAudit>(this: new (options: ReplicaOptions) => T, options: ReplicaOptions, state: AuditState<Envelope>, round: number): T {
    if (state.space !== options.space) throw new SteadError('malformed', `audit state of space ${state.space}, not ${options.space}`)
    const r = new this(options)
    r.index = state.index
    r.commits = round
    r.historyFrom = state.index
    for (const [key, enc, snap] of state.objects) {
      const decl = decodeDeclaration(enc)
      let crdt: AnyCrdt
      try {
        crdt = restoreCrdt(decl, snap)
      } catch (err) {
        throw new SteadError('malformed', `object ${key}: ${(err as Error).message}`)
      }
      r.stableObjects.set(key, { decl, crdt })
    }
    for (const [id, seq, recent] of state.authors) r.restoreAuthor(id, seq, decodedRecent(id, recent))
    for (const { env, since } of state.waiting) r.waitingOf(env.authorId).set(env.seq, { env, since })
    r.touchAll()
    r.restored()
    return r
  }

  /** Sets an author's last seq and recent records (replacing any it had), and indexes their ids. */
  private restoreAuthor(id: string, seq: number, recent: ReadonlyArray<readonly [number, Recent]>): void {
    for (const r of this.authors.get(id)?.recent.values() ?? []) this.recentIds.delete(r.idHex)
    this.authors.set(id, { seq, recent: new Map(recent) })
    for (const [s, r] of recent) this.recentIds.set(r.idHex, { authorId: id, seq: s })
  }

  /** An author's queue of envelopes parked behind its sequence gap, made if it has none. */
  private waitingOf(authorId: string): Map<number, { env: Envelope; since: number }> {
    let queue = this.waiting.get(authorId)
    if (!queue) this.waiting.set(authorId, (queue = new Map()))
    return queue
  }

  private touchAll(): void {
    for (const key of this.stableObjects.keys()) this.objectLeaves.touch(key)
    for (const id of this.authors.keys()) this.authorLeaves.touch(id)
  }

  // ---- stable path: the audit ----

  /**
   * Audits one committed batch (the envelopes a consensus commit ordered, in
   * order). `at` is the commit's position (its anchor round); gap waits are
   * measured in it. Without `at`, every call counts one, and then every
   * replica must be given every commit, empty ones too.
   */
  commit(batch: readonly Envelope[], at?: number): CommitResult {
    // Positions only grow: a replica that sees only some commits (a client
    // replaying attested ones) still times out gaps exactly like the relays.
    this.commits = at === undefined ? this.commits + 1 : Math.max(this.commits, at)
    const decisions: Decision[] = []
    const changed = new Set<string>()
    this.committed = []
    const before = this.index
    this.commitStarting(batch)
    for (const env of causalOrderOf(batch)) this.audit(env, decisions, changed)
    this.expireWaiting(decisions, changed)
    this.commitEnding(changed)
    this.checkCommit(before, decisions)
    return { decisions, stableIndex: this.index, changed, history: this.committed }
  }

  /** What every commit must leave true (cheap: linear in the commit), and with verifyStateHash the state hash against a recomputation. */
  private checkCommit(before: number, decisions: readonly Decision[]): void {
    const committed = decisions.filter((d) => d.kind === 'committed')
    check(this.index === before + committed.length, `stable index ${before} + ${committed.length} committed is not ${this.index}`)
    committed.forEach((d, i) => check(d.kind === 'committed' && d.index === before + i + 1, `commit ${i} of the batch took index ${d.kind === 'committed' ? d.index : '?'}, not ${before + i + 1}`))
    for (const d of decisions) {
      // A duplicate's drop says nothing of the first copy, which may wait behind a gap.
      if (d.kind === 'superseded' || (d.kind === 'dropped' && d.reason === 'duplicate')) continue
      check(!this.stillPending(d.env.idHex), `decided envelope ${d.env.idHex} (${d.kind}${d.kind === "dropped" ? ` ${d.reason}` : ""}) is still pending`)
    }
    for (const { key } of this.committed) {
      const o = this.stableObjects.get(key)
      // A deleted key holds nothing to break.
      check(!o || o.crdt.invariantsHold(), `stable ${key} breaks its declared invariants`)
    }
    for (const [author, queue] of this.waiting) check(queue.size <= this.maxWaitingPerAuthor, `${queue.size} envelopes of ${author} wait, more than ${this.maxWaitingPerAuthor}`)
    if (this.verifyStateHash) {
      const sha = this.verifyStateHash
      check(bytesEqual(this.stableHash(sha), auditStateHash(sha, this.auditState())), `the state hash kept across commits differs from the state's at stable index ${this.index}`)
    }
  }

  private audit(env: Envelope, decisions: Decision[], changed: Set<string>): void {
    if (env.space !== this.space) {
      decisions.push({ kind: 'dropped', env, reason: 'malformed', detail: `envelope for space ${env.space} in ${this.space}` })
      return
    }
    // Read-only here: the stable state changes only with the stable index, and a waiting envelope takes none.
    const author = this.authors.get(env.authorId) ?? { seq: 0, recent: new Map<number, Recent>() }
    if (env.seq <= author.seq) {
      const decidedId = author.recent.get(env.seq)?.idHex
      if (decidedId === env.idHex) decisions.push({ kind: 'dropped', env, reason: 'duplicate', detail: `${env.authorId}:${env.seq} already committed` })
      else this.drop(env, decidedId === undefined ? 'duplicate' : 'conflict', `${env.authorId}:${env.seq} was already decided`, decisions, changed)
      return
    }
    if (env.seq > author.seq + 1) {
      this.wait(env, decisions, changed)
      return
    }
    if (!this.execute(env, decisions, changed)) return
    // Its successors may have been waiting for it.
    const queue = this.waiting.get(env.authorId)
    let next = queue?.get(env.seq + 1)
    while (queue && next) {
      queue.delete(next.env.seq)
      if (!this.execute(next.env, decisions, changed)) break
      next = queue.get(next.env.seq + 1)
    }
    if (queue && queue.size === 0) this.waiting.delete(env.authorId)
  }

  private wait(env: Envelope, decisions: Decision[], changed: Set<string>): void {
    const queue = this.waitingOf(env.authorId)
    const taken = queue.get(env.seq)
    if (taken) {
      if (taken.env.idHex === env.idHex) {
        // Ordered again (its author resubmitted it while it waited): its wait starts over. Relays
        // refuse to order an id again for their dedupe window (gcDepth rounds, below the gap wait)
        // after they last ordered it; timed from the first ordering, the gap drop could come while
        // the id is still in that window, and the author's resends of it would be refused as
        // duplicates by a cluster that then has nothing to do, for good.
        queue.set(env.seq, { env: taken.env, since: this.commits })
        decisions.push({ kind: 'dropped', env, reason: 'duplicate', detail: `${env.authorId}:${env.seq} is already waiting` })
      } else this.drop(env, 'conflict', `${env.authorId}:${env.seq} is already taken by another envelope`, decisions, changed)
      return
    }
    if (queue.size >= this.maxWaitingPerAuthor) {
      this.drop(env, 'gap', `${env.authorId} has ${queue.size} envelopes waiting for a gap`, decisions, changed)
      return
    }
    queue.set(env.seq, { env, since: this.commits })
  }

  private expireWaiting(decisions: Decision[], changed: Set<string>): void {
    if (this.waiting.size === 0) return
    // In canonical order (author, seq), not arrival order: a replica started from an audit state must decide alike.
    for (const { env, since } of this.parked()) {
      if (this.commits - since < this.gapWaitCommits) continue
      const queue = this.waiting.get(env.authorId) as Map<number, { env: Envelope; since: number }>
      queue.delete(env.seq)
      if (queue.size === 0) this.waiting.delete(env.authorId)
      this.drop(env, 'gap', `${env.authorId}:${env.seq} waited ${this.gapWaitCommits} commits for seq ${this.nextSeq(env.authorId)}`, decisions, changed)
    }
  }

  /** Drops an envelope from the stable path and undoes whatever it did prospectively. */
  private drop(env: Envelope, reason: 'duplicate' | 'conflict' | 'gap' | 'bad-clock', detail: string, decisions: Decision[], changed: Set<string>): void {
    decisions.push({ kind: 'dropped', env, reason, detail })
    this.decidedEnvelope(env, () => false, decisions, changed)
  }

  /**
   * Chrono's update validator on an envelope that is next in its author's
   * sequence, against the stable history as it stands (see causal.ts).
   * Relays ask it before they queue an envelope; the audit, before it
   * executes one.
   */
  judgeClock(env: Envelope): ReturnType<typeof judgeClock> {
    return judgeClock(env, this.clockInputs(env))
  }

  /**
   * The update validator before any order: inputs the stable history has
   * no record of are taken from `held` (envelopes not committed yet), as
   * verified clocks when `vouched` (the caller validated each of them
   * itself) or else as mere claims, so that only a clock contradicting
   * what is held is refused. Undefined while the envelope's base is ahead
   * of the stable index: it cannot be judged here yet.
   */
  judgeBeforeOrder(env: Envelope, held: { readonly prev: Envelope | undefined; byId(idHex: string): Envelope | undefined }, vouched: boolean): ClockVerdict | undefined {
    if (env.base > this.index) return undefined
    const stable = this.clockInputs(env)
    const claimOf = (e: Envelope | undefined): CommittedClock | undefined =>
      e && { authorId: e.authorId, seq: e.seq, record: { index: Number.MAX_SAFE_INTEGER, base: e.base, clock: e.clock.size <= MAX_KEPT_CLOCK_ENTRIES ? e.clock : undefined, verified: vouched } }
    const prev = stable.prev ?? claimOf(held.prev)?.record
    return judgeClock(env, { ...stable, prev, dep: (idHex) => stable.dep(idHex) ?? claimOf(held.byId(idHex)) })
  }

  /** The sum of `env`'s full clock (see `clockWeight`), from this stable history; undefined while its base is ahead or where it no longer knows F(base). */
  clockWeight(env: Envelope): number | undefined {
    return env.base > this.index ? undefined : clockWeight(env, (a, b) => this.committedAt(a, b))
  }

  protected clockInputs(env: Envelope): ClockInputs {
    return {
      stableIndex: this.index,
      prev: this.authors.get(env.authorId)?.recent.get(env.seq - 1)?.record,
      dep: (idHex) => {
        const at = this.recentIds.get(idHex)
        const r = at && this.authors.get(at.authorId)?.recent.get(at.seq)
        return at && r ? { authorId: at.authorId, seq: at.seq, record: r.record } : undefined
      },
      committedAt: (authorId, base) => this.committedAt(authorId, base),
    }
  }

  /** Bounds on the highest seq of `authorId` committed at stable index `base` or below, from its recent records. */
  private committedAt(authorId: string, base: number): { lo: number; hi: number } {
    const a = this.authors.get(authorId)
    if (!a) return { lo: 0, hi: 0 }
    // Recent seqs are consecutive, ending at a.seq, and their indices grow with them.
    const first = a.seq - a.recent.size + 1
    const indexOf = (seq: number): number => (a.recent.get(seq) as Recent).record.index
    if (indexOf(first) > base) return first === 1 ? { lo: 0, hi: 0 } : { lo: 0, hi: first - 1 }
    let lo = first
    let hi = a.seq
    while (lo < hi) {
      const mid = (lo + hi + 1) >>> 1
      if (indexOf(mid) <= base) lo = mid
      else hi = mid - 1
    }
    return { lo, hi: lo }
  }

  /** Commits `env` unless its clock is bad; false when it dropped it. */
  private execute(env: Envelope, decisions: Decision[], changed: Set<string>): boolean {
    const verdict = this.judgeClock(env)
    if (!verdict.ok) {
      this.drop(env, 'bad-clock', `${env.authorId}:${env.seq}: ${verdict.detail}`, decisions, changed)
      return false
    }
    const author = this.authorState(env.authorId)
    const index = ++this.index
    author.seq = env.seq
    const kept = env.clock.size <= MAX_KEPT_CLOCK_ENTRIES
    const record: ClockRecord = { index, base: env.base, clock: kept ? env.clock : undefined, verified: verdict.verified && kept }
    author.recent.set(env.seq, { idHex: env.idHex, record })
    this.recentIds.set(env.idHex, { authorId: env.authorId, seq: env.seq })
    const old = author.recent.get(env.seq - RECENT_IDS_PER_AUTHOR)
    if (old) {
      author.recent.delete(env.seq - RECENT_IDS_PER_AUTHOR)
      this.recentIds.delete(old.idHex)
    }

    const outcomes: UnitOutcome[] = []
    const committedTags = new Set<string>()
    const touched = new Set<string>()
    /** Objects a deletion of the space took. */
    const wiped: string[] = []
    this.authorLeaves.touch(env.authorId)
    for (const unit of envelopeUnits(env)) {
      const items = itemsOf(unit)
      // A rejected unit may have changed an object and restored it: its leaf is recomputed all the same.
      for (const item of items) this.objectLeaves.touch(item.key)
      const result = unit.kind === 'group' && unit.atomic ? this.applyAtomic(env, items) : this.applyStable(env, items[0] as Item)
      if (result.ok) {
        outcomes.push({ unit: unit.unit, status: 'committed' })
        for (const item of items) {
          committedTags.add(item.tag)
          touched.add(item.key)
          if (item.key === POLICY_KEY && isSpaceDeletion(item.op)) wiped.push(...this.deleteObjects())
        }
      } else {
        outcomes.push({ unit: unit.unit, status: 'rejected', reason: result.reason, detail: result.detail })
      }
    }
    for (const key of new Set([...touched, ...wiped])) {
      this.appendHistory(key, index)
      changed.add(key)
    }
    decisions.push({ kind: 'committed', env, index, units: outcomes, clockVerified: record.verified })
    this.decidedEnvelope(env, (tag) => committedTags.has(tag), decisions, changed)
    if (wiped.length) this.objectsWiped(wiped)
    return true
  }

  /**
   * The space was deleted here in the stable order: every object but its
   * policy goes, as if each were deleted (their histories say null, their
   * leaves leave the state hash). Their prospective copies are rebuilt
   * from nothing once the envelope is decided: what is pending on them
   * will be refused. Returns their keys.
   */
  private deleteObjects(): string[] {
    const keys = [...this.stableObjects.keys()].filter((key) => key !== POLICY_KEY)
    for (const key of keys) {
      this.stableObjects.delete(key)
      this.objectLeaves.touch(key)
    }
    return keys
  }

  private applyStable(env: Envelope, item: Item): ApplyResult {
    const check = this.admissible(env, item)
    if (!check.ok) return check
    if (isDeletion(item.decl)) {
      this.stableObjects.delete(item.key)
      return { ok: true }
    }
    const ctx = opContext(env, item.tag)
    const existing = this.stableObjects.get(item.key)
    if (existing) return asGeneric(existing.crdt).tryApply(item.op, ctx)
    // Only an op that applies may fix a key's declaration.
    const fresh: Obj = { decl: item.decl, crdt: createCrdt(item.decl) }
    const result = asGeneric(fresh.crdt).tryApply(item.op, ctx)
    if (result.ok) this.stableObjects.set(item.key, fresh)
    return result
  }

  private applyAtomic(env: Envelope, items: readonly Item[]): ApplyResult {
    // Undo by restoring copies: stable CRDTs drop what they need for inverses.
    const saved = new Map<string, Obj | undefined>()
    for (const item of items) {
      if (!saved.has(item.key)) {
        const o = this.stableObjects.get(item.key)
        saved.set(item.key, o && { decl: o.decl, crdt: o.crdt.clone() })
      }
      const result = this.applyStable(env, item)
      if (!result.ok) {
        for (const [key, o] of saved) {
          if (o) this.stableObjects.set(key, o)
          else this.stableObjects.delete(key)
        }
        return { ok: false, reason: result.reason, detail: `${item.key}: ${result.detail}` }
      }
    }
    return { ok: true }
  }

  private admissible(env: Envelope, item: Item): ApplyResult {
    const fixed = this.stableObjects.get(item.key)?.decl
    // A deletion takes whatever the key holds.
    if (fixed && !isDeletion(item.decl) && !sameDeclaration(fixed, item.decl)) {
      return { ok: false, reason: 'type-mismatch', detail: `${item.key} is ${describeDeclaration(fixed)}, not ${describeDeclaration(item.decl)}` }
    }
    // The policy in force at this position of the stable order: the same on every correct replica.
    const policy = this.policy()
    const owner = disposesOf(item.decl, item.op)
    // A replica's own state is its own to give away; another's, only an admin's or (for a device it revoked) its user's.
    if (owner !== undefined && owner !== env.authorId && !(policy && (policy.mayAdminister(env.userId) || policy.isRevoked(env.userId, owner)))) {
      return { ok: false, reason: 'unauthorized', detail: `${env.userId} may not give away ${owner}'s ${item.key}: only that replica, a space admin, or the user of a device it revoked may` }
    }
    if (policy) {
      const problem = policyProblem(policy, env, this.space, item.key, item.op)
      if (problem) return { ok: false, reason: 'unauthorized', detail: problem }
      // Anybody may redeem an invitation: what it takes is the invitation key's signature.
      if (item.key === POLICY_KEY && isRedemption(item.op)) return this.checkRedemption(env.userId, item.op)
      return { ok: true }
    }
    if (this.authorize) {
      const v = this.authorize(env.userId, item.key, item.decl, item.op)
      if (!v.ok) return { ok: false, reason: v.reason, detail: v.detail }
    }
    return { ok: true }
  }

  /** A redemption is signed by the invitation's key for this user, space and time (the policy then checks the invitation itself). */
  private checkRedemption(user: string, op: RedeemOp): ApplyResult {
    const [, key, t, sig] = op
    if (!this.verify(fromHex(key), redeemBytes(this.space, user, key, t), sig)) {
      return { ok: false, reason: 'unauthorized', detail: `${user}'s redemption of invitation ${key.slice(0, 8)} is not signed by its key` }
    }
    return { ok: true }
  }

  private appendHistory(key: string, index: number): void {
    const obj = this.stableObjects.get(key)
    // Deleted: the history says so with null, and what comes after starts whole.
    const value = obj ? historyValue(obj.decl, obj.crdt) : null
    if (!obj) this.lastChange?.delete(key)
    const changes = obj && this.lastChange && patchesHistory(obj.decl) ? this.lastChange : undefined
    const last = changes?.get(key)
    changes?.set(key, { index, value })
    const patch = obj && last && historyPatch(obj.decl, last.value, value)
    this.committed.push(!obj ? { key, index, value, deleted: true } : last && patch ? { key, index, value, patch: { base: last.index, patch } } : { key, index, value })
    if (this.historyLimit === 0) return
    let h = this.histories.get(key)
    if (!h) this.histories.set(key, (h = []))
    const entry = { index, value, bytes: historyBytes(value) }
    h.push(entry)
    // The latest historyLimit entries, and of a long document no more than HISTORY_BYTES (older ones live on the relays).
    let total = (this.historyTotals.get(key) ?? 0) + entry.bytes
    let drop = 0
    while (h.length - drop > 1 && (h.length - drop > this.historyLimit || total > HISTORY_BYTES)) total -= (h[drop++] as { bytes: number }).bytes
    if (drop) h.splice(0, drop)
    this.historyTotals.set(key, total)
  }

  private authorState(authorId: string): AuthorState {
    let a = this.authors.get(authorId)
    if (!a) this.authors.set(authorId, (a = { seq: 0, recent: new Map() }))
    return a
  }

  protected checkSpace(env: Envelope): void {
    if (env.space !== this.space) throw new SteadError('malformed', `envelope for space ${env.space} given to replica of ${this.space}`)
  }

  // ---- what a replica that also keeps a prospective state adds (ReliableReplica) ----

  /** A commit of `batch` begins. */
  protected commitStarting(_batch: readonly Envelope[]): void {}

  /** The commit's envelopes are audited; anything to settle locally is settled here (`changed` gets the keys). */
  protected commitEnding(_changed: Set<string>): void {}

  /** The audit decided `env`: `committed` says which of its ops' tags committed (none for a dropped one). */
  protected decidedEnvelope(_env: Envelope, _committed: (tag: string) => boolean, _decisions: Decision[], _changed: Set<string>): void {}

  /** A deletion of the space took these objects from the stable state. */
  protected objectsWiped(_keys: readonly string[]): void {}

  /** A delta moved the stable state (the keys in `changed`): returns the envelopes held locally that it decided. */
  protected deltaApplied(_changed: Set<string>): Envelope[] {
    return []
  }

  /** The stable state was restored (restore, fromAuditState). */
  protected restored(): void {}

  /** Whether an envelope is held locally, undecided (a commit checks none it decided is). */
  protected stillPending(_idHex: string): boolean {
    return false
  }
}

/**
 * The reliable replica of one space (Janus) as a client keeps it: the
 * audit (StableAudit) and a prospective state that shows every received
 * update at once. After each audited envelope the prospective state
 * reverses what was rejected and applies what it had not seen, so once all
 * updates are decided it equals the stable state (eventual validity, G5).
 */
export class ReliableReplica extends StableAudit {
  private readonly foreignWaitCommits: number
  private readonly prospectiveObjects = new Map<string, Obj>()
  private readonly pending = new Map<string, Pending>()
  /** key → ids of the pending envelopes touching it, in arrival order. */
  private readonly pendingKeys = new Map<string, Set<string>>()
  /** author:seq → ids of pending envelopes claiming that slot. */
  private readonly slots = new Map<string, Set<string>>()
  /** Changes whenever an envelope leaves `pending` or a commit runs (see pendingMark). */
  private pendingEpoch = 0
  /** How many envelopes joined `pending` in this epoch, and for each key, the places (in that count) of those touching it. */
  private arrived = 0
  private arrivalsByKey = new Map<string, Array<{ at: number; env: Envelope }>>()

  /** Envelopes received but not yet decided by the audit. */
  get pendingCount(): number {
    return this.pending.size
  }

  // ---- reads ----

  /** The prospective value of `key` (undefined for an unknown key, and one deleted). */
  value(key: string): unknown {
    return this.prospective(key)?.value()
  }

  /** The prospective CRDT of `key`: the replica's own, do not mutate (clone it); undefined for none (a deleted key holds none). */
  prospective(key: string): AnyCrdt | undefined {
    const o = this.prospectiveObjects.get(key)
    return o && !isDeletion(o.decl) ? o.crdt : undefined
  }

  /** The keys of every object this replica holds, stable or only prospective, in no order. */
  *prospectiveKeys(): IterableIterator<string> {
    for (const [key, o] of this.prospectiveObjects) if (!isDeletion(o.decl)) yield key
  }

  /** Whether an envelope of `author` with sequence number `seq` is received and not decided yet. */
  hasPending(author: string, seq: number): boolean {
    return this.slots.has(`${author}:${seq}`)
  }

  /** Envelopes received but not yet decided, oldest first. */
  pendingEnvelopes(): Envelope[] {
    return [...this.pending.values()].map((p) => p.env)
  }

  /** Pending envelopes that touch `key`, in the order they were received. */
  pendingTouching(key: string): Envelope[] {
    return [...(this.pendingKeys.get(key) ?? [])].map((id) => (this.pending.get(id) as Pending).env)
  }

  /**
   * Where the pending set stands, for views built on top of it (a client's
   * views of guarded objects): while the epoch stays the same, envelopes
   * only join the pending set and the stable state does not change.
   */
  pendingMark(): PendingMark {
    return { epoch: this.pendingEpoch, arrived: this.arrived }
  }

  /**
   * The envelopes touching any of `keys` that joined the pending set since
   * `mark`, oldest first; undefined if anything else changed since. Costs
   * what arrived for those keys, not what arrived in all.
   */
  arrivedSince(mark: PendingMark, keys: Iterable<string>): readonly Envelope[] | undefined {
    if (mark.epoch !== this.pendingEpoch) return undefined
    const found = new Map<number, Envelope>()
    for (const key of keys) {
      const list = this.arrivalsByKey.get(key) ?? []
      // The list is in arrival order: the new ones are its tail.
      let lo = 0
      let hi = list.length
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if ((list[mid] as { at: number }).at < mark.arrived) lo = mid + 1
        else hi = mid
      }
      for (let i = lo; i < list.length; i++) found.set((list[i] as { at: number }).at, (list[i] as { env: Envelope }).env)
    }
    return [...found.entries()].sort((a, b) => a[0] - b[0]).map(([, env]) => env)
  }

  /** Whether the envelope is received and not decided yet. */
  isPending(idHex: string): boolean {
    return this.pending.has(idHex)
  }

  /** The prospective object of `key` anew: the stable one with every pending op on it that still applies. */
  private rebuildProspective(key: string): void {
    const stable = this.stableObjects.get(key)
    if (stable) this.prospectiveObjects.set(key, { decl: stable.decl, crdt: stable.crdt.clone() })
    else this.prospectiveObjects.delete(key)
    for (const idHex of this.pendingKeys.get(key) ?? []) {
      const p = this.pending.get(idHex) as Pending
      for (const unit of envelopeUnits(p.env)) {
        for (const item of itemsOf(unit)) {
          if (item.key !== key) continue
          p.applied.delete(item.tag)
          if (this.applyProspective(key, item.decl, item.op, opContext(p.env, item.tag))) p.applied.add(item.tag)
        }
      }
    }
  }

  // ---- prospective path ----

  /** Applies a received (or locally created) envelope to the prospective state. */
  receive(env: Envelope, options: ReceiveOptions = {}): ReceiveResult {
    this.checkSpace(env)
    const changed = new Set<string>()
    const known = this.pending.get(env.idHex)
    if (known) {
      // Received as our own (or from a source that does not expire it): it stays.
      if (!options.expires) known.expiresAt = undefined
      return { status: 'duplicate', changed }
    }
    // Already decided: applied at commit time if it was the one committed.
    const verdict = this.decided(env)
    if (verdict) return { status: verdict, changed }
    const applied = new Set<string>()
    for (const unit of envelopeUnits(env)) {
      for (const item of itemsOf(unit)) {
        if (this.applyProspective(item.key, item.decl, item.op, opContext(env, item.tag))) {
          applied.add(item.tag)
          changed.add(item.key)
        }
      }
    }
    const keys = new Set(envelopeUnits(env).flatMap((u) => itemsOf(u).map((i) => i.key)))
    for (const key of keys) {
      let ids = this.pendingKeys.get(key)
      if (!ids) this.pendingKeys.set(key, (ids = new Set()))
      ids.add(env.idHex)
    }
    this.pending.set(env.idHex, { env, applied, keys, expiresAt: options.expires ? this.commits + this.foreignWaitCommits : undefined })
    const at = this.arrived++
    for (const key of keys) {
      let list = this.arrivalsByKey.get(key)
      if (!list) this.arrivalsByKey.set(key, (list = []))
      list.push({ at, env })
    }
    const slot = slotOf(env)
    let ids = this.slots.get(slot)
    if (!ids) this.slots.set(slot, (ids = new Set()))
    ids.add(env.idHex)
    return { status: ids.size > 1 ? 'conflict' : 'applied', changed }
  }

  /**
   * Forgets a pending envelope that will never be ordered (every relay
   * refused it) and reverses what it did to the prospective state. Local
   * news, like 'superseded'. Returns the keys that changed.
   */
  discard(idHex: string): ReadonlySet<string> {
    const changed = new Set<string>()
    const p = this.pending.get(idHex)
    if (p) this.settle(p.env, () => false, changed)
    return changed
  }

  /**
   * The update validator on a received envelope before it shows, when
   * nothing has ordered it yet (an envelope from a peer): an input the
   * stable history has no record of is taken from the pending envelope it
   * names, as an unverified claim, so only a clock that contradicts what
   * this replica holds is refused. Undefined while the envelope's base is
   * ahead of this replica's stable index: it cannot be judged here yet.
   */
  judgeReceived(env: Envelope): ClockVerdict | undefined {
    // A slot with two envelopes in it (an author's twins) names no single previous clock.
    const twins = this.slots.get(`${env.authorId}:${env.seq - 1}`)
    const prev = twins?.size === 1 ? this.pending.get(twins.values().next().value as string)?.env : undefined
    return this.judgeBeforeOrder(env, { prev, byId: (idHex) => this.pending.get(idHex)?.env }, false)
  }

  /** A pending envelope by id, for a client to hand to a peer. */
  pendingEnvelope(idHex: string): Envelope | undefined {
    return this.pending.get(idHex)?.env
  }

  /**
   * Brings the prospective state in line with the audit's verdict on `env`:
   * reverse what was applied but not committed, apply what was committed
   * but never seen, and forget the envelope.
   */
  private settle(env: Envelope, committed: (tag: string) => boolean, changed: Set<string>): void {
    const p = this.pending.get(env.idHex)
    // An object nothing pending has touched is simply a copy of the stable one,
    // which already holds this envelope's committed ops.
    const fresh = new Set<string>()
    for (const unit of envelopeUnits(env)) {
      for (const item of itemsOf(unit)) {
        if (fresh.has(item.key) || this.prospectiveObjects.has(item.key)) continue
        fresh.add(item.key)
        const stable = this.stableObjects.get(item.key)
        if (stable) {
          this.prospectiveObjects.set(item.key, { decl: stable.decl, crdt: stable.crdt.clone() })
          changed.add(item.key)
        }
      }
    }
    // An op applied here and not committed is undone by rebuilding its object (the stable one plus what is still
    // pending), not by its inverse: later ops may have built on it (an insert placed after an element that the
    // stable state never had waits there, and must wait here too), and only the rebuild sees them as the audit did.
    const undo = new Set<string>()
    for (const unit of envelopeUnits(env)) {
      for (const item of itemsOf(unit)) {
        if (fresh.has(item.key)) continue
        const wasApplied = p?.applied.has(item.tag) ?? false
        const isCommitted = committed(item.tag)
        // Ops that do not commute: only the stable order says where this one went, so the object is rebuilt.
        if (isOrdered(item.decl) && (wasApplied || isCommitted)) undo.add(item.key)
        else if (wasApplied && !isCommitted) undo.add(item.key)
        else if (!wasApplied && isCommitted && !undo.has(item.key)) {
          this.applyProspective(item.key, item.decl, item.op, opContext(env, item.tag))
          changed.add(item.key)
        }
      }
    }
    if (p) {
      this.newPendingEpoch()
      this.forgetPending(p)
    }
    for (const key of undo) {
      this.rebuildProspective(key)
      changed.add(key)
    }
    for (const key of changed) this.alignDeclaration(key)
  }

  /** Takes an envelope out of the pending set and its indexes. */
  private forgetPending(p: Pending): void {
    const { env } = p
    this.pending.delete(env.idHex)
    const slot = slotOf(env)
    const ids = this.slots.get(slot)
    ids?.delete(env.idHex)
    if (ids?.size === 0) this.slots.delete(slot)
    for (const key of p.keys) {
      const ids = this.pendingKeys.get(key)
      ids?.delete(env.idHex)
      if (!ids || ids.size === 0) {
        this.pendingKeys.delete(key)
        // Nothing pending and nothing stable: the object never existed.
        if (!this.stableObjects.has(key)) this.prospectiveObjects.delete(key)
      }
    }
  }

  /** Applies without checks; false when the object exists under another declaration. */
  private applyProspective(key: string, decl: Declaration, op: AnyOp, ctx: OpContext): boolean {
    if (isDeletion(decl)) {
      // What the key holds goes; it keeps a place, so that what comes after starts afresh (not from the stable object).
      this.prospectiveObjects.set(key, { decl, crdt: createCrdt(decl) })
      return true
    }
    let obj = this.prospectiveObjects.get(key)
    if (obj && isDeletion(obj.decl)) {
      obj = { decl, crdt: createCrdt(decl) }
      this.prospectiveObjects.set(key, obj)
    }
    if (!obj) {
      const fixed = this.stableObjects.get(key)
      obj = fixed ? { decl: fixed.decl, crdt: fixed.crdt.clone() } : { decl, crdt: createCrdt(decl) }
      this.prospectiveObjects.set(key, obj)
    }
    if (!sameDeclaration(obj.decl, decl)) return false
    asGeneric(obj.crdt).apply(op, ctx)
    return true
  }

  /**
   * If the prospective object was created from a declaration that lost to
   * the committed one, rebuild it from the stable object plus the pending
   * ops that match the committed declaration.
   */
  private alignDeclaration(key: string): void {
    const stable = this.stableObjects.get(key)
    const prospective = this.prospectiveObjects.get(key)
    if (!stable || !prospective || sameDeclaration(stable.decl, prospective.decl)) return
    this.rebuildProspective(key)
  }

  private newPendingEpoch(): void {
    this.pendingEpoch++
    this.arrived = 0
    this.arrivalsByKey = new Map()
  }

  constructor(options: ReplicaOptions) {
    super(options)
    this.foreignWaitCommits = options.foreignWaitCommits ?? 128
  }

  /** Every key with a prospective or stable object (not one a pending deletion empties), sorted. */
  override keys(): string[] {
    const deleted = (key: string): boolean => {
      const o = this.prospectiveObjects.get(key)
      return o !== undefined && isDeletion(o.decl)
    }
    return [...new Set([...this.prospectiveKeys(), ...super.keys().filter((k) => !deleted(k))])].sort()
  }

  protected override commitStarting(batch: readonly Envelope[]): void {
    if (batch.length > 0) this.newPendingEpoch()
  }

  protected override commitEnding(changed: Set<string>): void {
    // Local news, like discard(): no decision, the stable path is untouched.
    for (const p of [...this.pending.values()]) if (p.expiresAt !== undefined && this.commits >= p.expiresAt) this.settle(p.env, () => false, changed)
  }

  protected override decidedEnvelope(env: Envelope, committed: (tag: string) => boolean, decisions: Decision[], changed: Set<string>): void {
    const slot = slotOf(env)
    const taken = decisions[decisions.length - 1]?.kind === 'committed' && decisions[decisions.length - 1]?.env === env
    this.settle(env, committed, changed)
    if (!taken) return
    // No other envelope can ever take this slot now: undo any that tried.
    for (const idHex of this.slots.get(slot) ?? []) {
      const other = this.pending.get(idHex)
      if (!other) continue
      decisions.push({ kind: 'superseded', env: other.env, by: env.idHex })
      this.settle(other.env, () => false, changed)
    }
  }

  protected override objectsWiped(keys: readonly string[]): void {
    for (const key of keys) this.rebuildProspective(key)
  }

  protected override deltaApplied(changed: Set<string>): Envelope[] {
    const decided: Envelope[] = []
    this.newPendingEpoch()
    for (const p of [...this.pending.values()]) {
      // Decided in the range, or (another author's, still unordered) past its wait, as commit() would expire it.
      const expired = p.expiresAt !== undefined && this.commits >= p.expiresAt
      const settled = this.decided(p.env) !== null
      if (!expired && !settled) continue
      if (settled) decided.push(p.env)
      for (const key of p.keys) changed.add(key)
      this.forgetPending(p)
    }
    for (const key of changed) this.rebuildProspective(key)
    return decided
  }

  protected override restored(): void {
    for (const key of super.keys()) {
      const o = this.stableObjects.get(key) as Obj
      this.prospectiveObjects.set(key, { decl: o.decl, crdt: o.crdt.clone() })
    }
  }

  protected override stillPending(idHex: string): boolean {
    return this.pending.has(idHex)
  }
}

interface Item {
  readonly key: string
  readonly decl: Declaration
  readonly op: AnyOp
  readonly tag: string
}

function itemsOf(unit: EnvelopeUnit): readonly Item[] {
  return unit.kind === 'op' ? [unit] : unit.items
}

/** An author's leaf from its recent records ascending by seq, each record hashed once (its digest is kept on it). */
function authorLeaf(sha256: (bytes: Uint8Array) => Uint8Array, id: string, seq: number, recent: ReadonlyArray<readonly [number, Recent]>): Uint8Array {
  return authorLeafOf(
    sha256,
    id,
    seq,
    recent.map(([s, r]) => (r.digest ??= recentDigest(sha256, encodeRecent(s, r.idHex, r.record)))),
  )
}

/** Recent records in their wire form, read into what an author keeps (trusted or hashed before use). */
function decodedRecent(id: string, recent: readonly unknown[]): Array<[number, Recent]> {
  return recent.map((e, i) => {
    const r = decodeRecent(e, `authors.${id}.recent[${i}]`)
    return [r.seq, { idHex: r.idHex, record: r.record }]
  })
}

/** An author's recent records, ascending by seq. */
function bySeq(a: AuthorState): Array<[number, Recent]> {
  return [...a.recent.entries()].sort((x, y) => x[0] - y[0])
}

/** An author's recent records in their wire form, ascending by seq (audit states and checkpoints). */
function encodedRecent(a: AuthorState): RecentRecord[] {
  return bySeq(a).map(([seq, r]) => encodeRecent(seq, r.idHex, r.record))
}

function slotOf(env: Envelope): string {
  return `${env.authorId}:${env.seq}`
}

/**
 * The batch in the order the audit runs it: as committed, except that an
 * envelope goes after the envelopes of the same batch it names as deps
 * (consensus orders blocks, not causality, so a dep can land later in the
 * same commit, and its follower's clock could not be verified before it).
 * Deterministic, and linear in the batch and its deps: a depth-first walk
 * in commit order that puts each envelope's deps first.
 */
function causalOrderOf(batch: readonly Envelope[]): readonly Envelope[] {
  if (batch.length < 2 || batch.every((e) => e.deps.length === 0)) return batch
  // First copies only: a second copy of an id stays where it is (and is decided a duplicate there).
  const at = new Map<string, number>()
  const slotAt = new Map<string, number>()
  batch.forEach((e, i) => {
    if (!at.has(e.idHex)) at.set(e.idHex, i)
    if (!slotAt.has(`${e.authorId}:${e.seq}`)) slotAt.set(`${e.authorId}:${e.seq}`, i)
  })
  // An envelope waits for its deps in the batch, and for its author's previous seq if the batch has it
  // (else a dep placed first would only park behind its own gap).
  const waitsFor = batch.map((e, i) => {
    if (at.get(e.idHex) !== i) return []
    const w = e.deps.map((d) => at.get(toHex(d))).filter((j): j is number => j !== undefined)
    const prev = slotAt.get(`${e.authorId}:${e.seq - 1}`)
    if (prev !== undefined) w.push(prev)
    return w
  })
  if (waitsFor.every((w, i) => w.every((j) => j < i))) return batch
  const state = new Uint8Array(batch.length) // 0 unseen, 1 on the walk, 2 placed
  const out: Envelope[] = []
  for (let i = 0; i < batch.length; i++) {
    if (state[i]) continue
    state[i] = 1
    const walk: Array<[node: number, nextDep: number]> = [[i, 0]]
    while (walk.length) {
      const top = walk[walk.length - 1] as [number, number]
      const deps = waitsFor[top[0]] as number[]
      if (top[1] < deps.length) {
        const j = deps[top[1]++] as number
        // (1 would be a cycle, which ids that are hashes cannot form.)
        if (state[j] === 0) {
          state[j] = 1
          walk.push([j, 0])
        }
      } else {
        walk.pop()
        state[top[0]] = 2
        out.push(batch[top[0]] as Envelope)
      }
    }
  }
  return out
}

/** The context of an envelope's op: its author is the CRDTs' replica, its user whom a policy names. */
function opContext(env: Envelope, tag: string): OpContext {
  return { replica: env.authorId, user: env.userId, tag }
}

