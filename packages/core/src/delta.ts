import { fromHex, toHex } from './bytes.ts'
import { DEFAULT_LIMITS, decode, encode, expect, type Signed } from './codec.ts'
import { encodeDeclaration, isDeletion, type AnyOp, type Declaration } from './crdt/index.ts'
import { envelopeUnits, unitTagPrefix, type Envelope } from './envelope.ts'
import { SteadError } from './errors.ts'
import { SpaceSaving, chooseModes, type ObjectTraffic } from './hot-objects.ts'
import type { CommitResult, StableAudit } from './replica.ts'
import { compareKeys, decodeAuthors, decodeParked, strictlyAscending, type AuditAuthor, type AuditObject, type ParkedEnvelope, type WaitingEnvelope } from './state.ts'

/**
 * What changed in a space's audit state from one stable index to a later
 * one: the objects that changed, each as its committed operations or as its
 * state (BENDY: whichever is cheaper for that object), the authors whose
 * records changed, and the whole list of parked envelopes. A replica at
 * `fromIndex` that applies it holds the audit state at `toIndex`, and
 * checks that against the state hash f+1 relays attested there
 * (`ReliableReplica.catchUp`), so a relay that serves a wrong delta is
 * caught, whichever form each object took.
 */
export interface StateDelta<E extends WaitingEnvelope = WaitingEnvelope> {
  /** The space. */
  readonly space: string
  /** The stable index the receiver holds. */
  readonly fromIndex: number
  /** The stable index it reaches. */
  readonly toIndex: number
  /**
   * Every author with an envelope committed in (fromIndex, toIndex]: its
   * last seq at toIndex and the recent records of the envelopes committed
   * in the range (the receiver holds the older ones); ascending by id.
   */
  readonly authors: ReadonlyArray<AuditAuthor>
  /** The envelopes parked behind a sequence gap at toIndex, sorted by (author, seq). */
  readonly waiting: ReadonlyArray<ParkedEnvelope<E>>
  /** Every object a unit committed in (fromIndex, toIndex] changed, ascending by key. */
  readonly objects: ReadonlyArray<DeltaObject>
}

/** One changed object in a delta: its committed operations, in order, or its state at `toIndex`. */
export type DeltaObject =
  | {
      /** The object's key. */
      readonly key: string
      /** Its encoded declaration. */
      readonly decl: unknown
      /** Sent as operations. */
      readonly mode: 'ops'
      /** [author id, unit tag, op] of every committed op on it in (fromIndex, toIndex], in stable order. */
      readonly ops: ReadonlyArray<readonly [author: string, tag: string, op: AnyOp]>
    }
  | {
      /** The object's key. */
      readonly key: string
      /** Its encoded declaration. */
      readonly decl: unknown
      /** Sent as state. */
      readonly mode: 'state'
      /** Its CRDT snapshot at toIndex. */
      readonly snapshot: unknown
    }

/** How a delta sends objects: as operations, as state, or each the cheaper way (BENDY's rule on the hot ones). */
export type DeltaMode = 'ops' | 'state' | 'adaptive'

const DELTA_TAG = 'stead/delta/v2'
/** Deltas of relays before authors' records were packed (see packAuthors): still read. */
const DELTA_TAG_V1 = 'stead/delta/v1'

/** About what one logged op holds in memory (its object, tag and op), charged against a change log's budget. */
const LOGGED_OP_BYTES = 256

/** About what naming an op's envelope record and unit costs on the wire: [place, seq, n] in msgpack. */
const OP_REFERENCE_BYTES = 8

/**
 * Wire form of a delta. Parked envelopes travel as their signed bytes. An
 * op whose envelope's recent record the delta carries travels as
 * [author's place in `authors`, seq, n, op]: its author and unit tag
 * (`envelopeUnits`: the id's first 12 bytes and n) are read back from that
 * record, so an op costs a few bytes more than itself.
 */
export function encodeStateDelta(d: StateDelta): Uint8Array {
  const byPrefix = new Map<string, readonly [author: number, seq: number]>()
  d.authors.forEach(([, , recent], i) => {
    for (const r of recent) byPrefix.set(tagPrefix(r[1]), [i, r[0]])
  })
  const wireOp = ([author, tag, op]: readonly [string, string, AnyOp]): unknown[] => {
    const colon = tag.lastIndexOf(':')
    const at = byPrefix.get(tag.slice(0, colon))
    const n = Number(tag.slice(colon + 1))
    return at && d.authors[at[0]]?.[0] === author && Number.isSafeInteger(n) && tag === `${tag.slice(0, colon)}:${n}` ? [at[0], at[1], n, op] : [author, tag, op]
  }
  return encode([
    DELTA_TAG,
    d.space,
    d.fromIndex,
    d.toIndex,
    packAuthors(d.authors),
    d.waiting.map((w) => [w.env.signed.bytes, w.env.signed.sig, w.since]),
    d.objects.map((o) => (o.mode === 'ops' ? [o.key, o.decl, 0, o.ops.map(wireOp)] : [o.key, o.decl, 1, o.snapshot])),
  ])
}

/**
 * The authors' recent records as a delta carries them: mostly what a
 * delta weighs (one record per envelope in its range, whatever the objects
 * travel as), so packed: an envelope id as its 32 bytes, not 64 hex
 * characters, and an author id in a clock as its place in `authors` when
 * it is one of them (the writers of a space cite each other).
 */
function packAuthors(authors: ReadonlyArray<AuditAuthor>): unknown[] {
  const places = new Map(authors.map(([id], i) => [id, i]))
  const packClock = (clock: ReadonlyArray<string | number> | null) => clock && clock.map((x, k) => (k % 2 === 0 ? (places.get(x as string) ?? x) : x))
  return authors.map(([id, seq, recent]) => [id, seq, recent.map((r) => [r[0], fromHex(r[1]), r[2], r[3], packClock(r[4]), r[5]])])
}

/** The records packAuthors packed, as decodeAuthors reads them (anything else is left for it to refuse). */
function unpackAuthors(v: unknown): unknown {
  const authors = expect.array(v, 'delta.authors', 10_000_000)
  const nameOf = (place: number): string => {
    const a = authors[place]
    if (!Array.isArray(a) || typeof a[0] !== 'string') throw new SteadError('malformed', `a clock in delta.authors names author ${place}, which the delta does not carry`)
    return a[0]
  }
  const unpackRecord = (r: unknown): unknown => {
    if (!Array.isArray(r)) return r
    const clock = Array.isArray(r[4]) ? r[4].map((x: unknown, k: number) => (k % 2 === 0 && typeof x === 'number' ? nameOf(x) : x)) : r[4]
    return [r[0], r[1] instanceof Uint8Array && r[1].length === 32 ? toHex(r[1]) : r[1], r[2], r[3], clock, ...r.slice(5)]
  }
  return authors.map((a) => (Array.isArray(a) && Array.isArray(a[2]) ? [a[0], a[1], (a[2] as unknown[]).map(unpackRecord)] : a))
}

/** The part of a unit tag that names the envelope with this id (hex). */
function tagPrefix(idHex: string): string {
  return unitTagPrefix(fromHex(idHex))
}

/**
 * Reads `encodeStateDelta` bytes from an untrusted relay: shapes and sizes
 * only (ops are checked against their declaration when applied, and the
 * result against the attested state hash); `open` turns a parked
 * envelope's signed bytes into the envelope.
 *
 * @throws SteadError `malformed` or `too-large`.
 */
export function decodeStateDelta<E extends WaitingEnvelope>(bytes: Uint8Array, open: (signed: Signed) => E, maxBytes = 1024 * 1024 * 1024): StateDelta<E> {
  const v = expect.array(decode(bytes, maxBytes), 'delta', 7)
  if (v.length !== 7 || (v[0] !== DELTA_TAG && v[0] !== DELTA_TAG_V1)) throw new SteadError('malformed', `not a ${DELTA_TAG}`)
  const authors = decodeAuthors(v[0] === DELTA_TAG ? unpackAuthors(v[4]) : v[4], 'delta.authors')
  const waiting = decodeParked(v[5], 'delta.waiting', open)
  const records = new Map<number, Map<number, string>>()
  const idOf = (author: number, seq: number): string | undefined => {
    let bySeq = records.get(author)
    if (!bySeq) records.set(author, (bySeq = new Map(authors[author]?.[2].map((r) => [r[0], r[1]]))))
    return bySeq.get(seq)
  }
  const objects = expect.array(v[6], 'delta.objects', 100_000_000).map((o, i): DeltaObject => {
    const t = expect.array(o, `objects[${i}]`, 4)
    if (t.length !== 4) throw new SteadError('malformed', `objects[${i}] is [key, declaration, mode, ops or snapshot]`)
    const key = expect.string(t[0], `objects[${i}].key`, DEFAULT_LIMITS.maxKeyChars, 1)
    if (t[2] === 1) return { key, decl: t[1], mode: 'state', snapshot: t[3] }
    if (t[2] !== 0) throw new SteadError('malformed', `objects[${i}].mode is 0 (ops) or 1 (state)`)
    const ops = expect.array(t[3], `objects[${i}].ops`, 100_000_000).map((x, j) => {
      const field = `objects[${i}].ops[${j}]`
      const op = expect.array(x, field, 4)
      if (op.length === 4) {
        const place = expect.uint(op[0], `${field}.author`)
        const idHex = idOf(place, expect.uint(op[1], `${field}.seq`))
        if (idHex === undefined) throw new SteadError('malformed', `${field} names a recent record the delta does not carry`)
        return [(authors[place] as AuditAuthor)[0], `${tagPrefix(idHex)}:${expect.uint(op[2], `${field}.n`)}`, op[3] as AnyOp] as const
      }
      if (op.length !== 3) throw new SteadError('malformed', `${field} is [author, tag, op] or [author's place, seq, n, op]`)
      return [expect.string(op[0], `${field}.author`, 256, 1), expect.string(op[1], `${field}.tag`, 64, 1), op[2] as AnyOp] as const
    })
    return { key, decl: t[1], mode: 'ops', ops }
  })
  strictlyAscending(objects.map((o) => o.key), 'delta.objects')
  const fromIndex = expect.uint(v[2], 'delta.fromIndex')
  const toIndex = expect.uint(v[3], 'delta.toIndex')
  if (toIndex < fromIndex) throw new SteadError('malformed', `a delta from stable index ${fromIndex} cannot end at ${toIndex}`)
  return { space: expect.string(v[1], 'delta.space', DEFAULT_LIMITS.maxSpaceChars, 1), fromIndex, toIndex, authors, waiting, objects }
}

/** One committed op, as a change log keeps it. */
const DELETION: Declaration = { type: 'deletion' }

interface LoggedOp {
  readonly author: string
  readonly tag: string
  readonly key: string
  readonly decl: Declaration
  readonly op: AnyOp
}

/** What one commit changed: the stable indexes it took and the ops it committed, in stable order. */
interface LoggedCommit {
  readonly fromIndex: number
  readonly toIndex: number
  readonly authors: readonly string[]
  readonly ops: readonly LoggedOp[]
  /** What it is charged against the log's budget (see LOGGED_OP_BYTES). */
  readonly bytes: number
  /** Its ordered envelopes' signed bytes: what replaying it costs a client (its attestations aside). */
  readonly envelopeBytes: number
}

/** Options of a change log. */
export interface ChangeLogOptions {
  /** Budget of the commits kept, charged at their envelopes' signed bytes and 256 bytes per logged op; the oldest go first. Default 4 MiB. */
  readonly maxBytes?: number
  /** How many objects BENDY's rule may send as state in one delta: the tracker's top k. Default 64. */
  readonly hotObjects?: number
  /** Committed ops per tracking period: at its end the period's top k become the hot set and counting starts over. Default 4,096. */
  readonly periodOps?: number
}

/**
 * The recent commits of one space, as what they changed (committed ops per
 * object, authors), so that a relay can serve a replica that is behind a
 * `StateDelta` instead of every commit it missed. It also tracks, with
 * Space-Saving, the objects updated most (BENDY's top-k analysis,
 * repeated every `periodOps` ops): only those can travel as state.
 * Deterministic; the relay feeds it every commit of its replica.
 */
export class ChangeLog {
  private readonly maxBytes: number
  private readonly hotObjects: number
  private readonly periodOps: number
  private readonly commits: LoggedCommit[] = []
  private head = 0
  private held = 0
  /** The stable index the oldest kept commit starts from (undefined until the first commit). */
  private start: number | undefined
  private end: number | undefined
  private readonly tracker: SpaceSaving
  private periodSeen = 0
  private lastHot: ReadonlySet<string> = new Set()

  constructor(options: ChangeLogOptions = {}) {
    this.maxBytes = options.maxBytes ?? 4 * 1024 * 1024
    this.hotObjects = options.hotObjects ?? 64
    this.periodOps = options.periodOps ?? 4096
    // Space-Saving finds every key above total/capacity; a few times k keeps the top k's estimates tight.
    this.tracker = new SpaceSaving(Math.max(1, this.hotObjects * 4))
  }

  /**
   * Records one commit of the replica: `fromIndex` is its stable index
   * before the commit. A commit that does not start where the last one
   * ended (the log missed some) starts the log over.
   */
  record(fromIndex: number, result: CommitResult): void {
    if (this.end !== fromIndex) this.reset(fromIndex)
    if (result.stableIndex === fromIndex) return
    const ops: LoggedOp[] = []
    const authors: string[] = []
    let envelopeBytes = 0
    for (const d of result.decisions) {
      if (d.kind === 'superseded') continue
      // Every envelope the commit ordered is downloaded by a client that replays it, dropped ones too.
      envelopeBytes += d.env.signed.bytes.length + d.env.signed.sig.length
      if (d.kind !== 'committed') continue
      authors.push(d.env.authorId)
      const units = envelopeUnits(d.env)
      for (const outcome of d.units) {
        if (outcome.status !== 'committed') continue
        const unit = units[outcome.unit]
        if (!unit) continue
        for (const item of unit.kind === 'op' ? [unit] : unit.items) {
          ops.push({ author: d.env.authorId, tag: item.tag, key: item.key, decl: item.decl, op: item.op })
          this.track(item.key)
        }
      }
    }
    // Objects a deletion of the whole space took have no op of their own: logged as deleted, they travel as they stand.
    const deletedByOp = new Set(ops.filter((o) => isDeletion(o.decl)).map((o) => o.key))
    for (const h of result.history) if (h.deleted && !deletedByOp.has(h.key)) ops.push({ author: '', tag: '', key: h.key, decl: DELETION, op: ['x'] })
    // Charged as held in memory: the envelopes' bytes and an object per op (with its tag).
    const bytes = envelopeBytes + ops.length * LOGGED_OP_BYTES
    this.commits.push({ fromIndex, toIndex: result.stableIndex, authors, ops, bytes, envelopeBytes })
    this.held += bytes
    this.end = result.stableIndex
    while (this.held > this.maxBytes && this.head < this.commits.length - 1) {
      const old = this.commits[this.head++] as LoggedCommit
      this.held -= old.bytes
      this.start = old.toIndex
    }
    if (this.head > 1024 && this.head * 2 > this.commits.length) {
      this.commits.splice(0, this.head)
      this.head = 0
    }
  }

  /** What the log holds, as charged against its budget. */
  get bytes(): number {
    return this.held
  }

  /** What replaying the commits from `fromIndex` costs a client: their envelopes' signed bytes, attestations aside (0 if the log does not reach back). */
  replayBytes(fromIndex: number): number {
    let sum = 0
    for (let i = this.head; i < this.commits.length; i++) {
      const c = this.commits[i] as LoggedCommit
      if (c.toIndex > fromIndex) sum += c.envelopeBytes
    }
    return sum
  }

  /**
   * The keys of the objects that commits after stable index `afterIndex`
   * changed (each once), or undefined when the log does not reach back
   * that far, or when finding out would read more than `maxOps` ops (the
   * caller asked about a long range: it need not know each key).
   */
  changedKeys(afterIndex: number, maxOps = Number.POSITIVE_INFINITY): string[] | undefined {
    if (this.start === undefined || afterIndex < this.start) return undefined
    const keys = new Set<string>()
    let read = 0
    for (let i = this.commits.length - 1; i >= this.head; i--) {
      const c = this.commits[i] as LoggedCommit
      if (c.toIndex <= afterIndex) break
      if ((read += c.ops.length) > maxOps) return undefined
      for (const op of c.ops) keys.add(op.key)
    }
    return [...keys]
  }

  /** The objects BENDY's rule considers for state: last period's top k and the current period's. */
  private hot(): ReadonlySet<string> {
    return new Set([...this.lastHot, ...this.tracker.top(this.hotObjects).map((e) => e.key)])
  }

  /**
   * What changed from `fromIndex` to the replica's stable index, each
   * changed object as its ops or its state as `mode` says (adaptive: state
   * for a hot object whose ops in the range outweigh its state, BENDY's
   * rule; ops for the rest). Undefined when the log does not reach back to
   * `fromIndex` or the replica is not where the log ends.
   */
  delta(replica: StableAudit, fromIndex: number, mode: DeltaMode = 'adaptive'): StateDelta<Envelope> | undefined {
    if (this.start === undefined || fromIndex < this.start || this.end !== replica.stableIndex || fromIndex > replica.stableIndex) return undefined
    const byKey = new Map<string, { decl: Declaration; ops: LoggedOp[] }>()
    const authors = new Set<string>()
    for (let i = this.head; i < this.commits.length; i++) {
      const c = this.commits[i] as LoggedCommit
      if (c.toIndex <= fromIndex) continue
      // Commits are whole: a delta starts at a commit's boundary, which is where every replica stops.
      if (c.fromIndex < fromIndex) return undefined
      for (const a of c.authors) authors.add(a)
      for (const op of c.ops) {
        let o = byKey.get(op.key)
        if (!o) byKey.set(op.key, (o = { decl: op.decl, ops: [] }))
        o.ops.push(op)
      }
    }
    const states = this.states(replica, byKey, mode)
    const objects: DeltaObject[] = [...byKey.keys()].sort(compareKeys).map((key) => {
      const o = byKey.get(key) as { decl: Declaration; ops: LoggedOp[] }
      // A deletion in the range (its ops may be of several types), or the policy (its ops act for their envelope's
      // user, a device's too, which ops in a delta do not carry): the key travels as it stands, or as deleted.
      const whole = o.decl.type === 'policy' || o.ops.some((x) => isDeletion(x.decl))
      const s = states.get(key) ?? (whole ? replica.stableObject(key) : undefined)
      if (s) return { key, decl: s[1], mode: 'state', snapshot: s[2] }
      if (whole) return { key, decl: encodeDeclaration({ type: 'deletion' }), mode: 'state', snapshot: null }
      return { key, decl: encodeDeclaration(o.decl), mode: 'ops', ops: o.ops.map((x) => [x.author, x.tag, x.op] as const) }
    })
    return {
      space: replica.space,
      fromIndex,
      toIndex: replica.stableIndex,
      authors: [...authors].sort(compareKeys).map((id): AuditAuthor => {
        const [, seq, recent] = replica.authorRecord(id) as AuditAuthor
        return [id, seq, recent.filter((r) => r[2] > fromIndex)]
      }),
      waiting: replica.parkedEnvelopes(),
      objects,
    }
  }

  /** The stable entries of the changed objects that travel as state (each snapshot taken once). */
  private states(replica: StableAudit, byKey: ReadonlyMap<string, { ops: readonly LoggedOp[] }>, mode: DeltaMode): ReadonlyMap<string, AuditObject> {
    const states = new Map<string, AuditObject>()
    if (mode === 'ops') return states
    // Only the hot objects are weighed (sizing a state costs its encoding); the rest stay ops.
    const hot = mode === 'adaptive' ? this.hot() : undefined
    const candidates = hot ? [...hot].filter((key) => byKey.has(key)) : [...byKey.keys()]
    const traffic = new Map<string, ObjectTraffic>()
    for (const key of candidates) {
      const s = replica.stableObject(key)
      if (!s) continue
      states.set(key, s)
      if (!hot) continue
      const ops = (byKey.get(key) as { ops: readonly LoggedOp[] }).ops
      // What an op costs on the wire (encodeStateDelta): itself and a few bytes naming its record.
      const updateBytes = ops.reduce((sum, x) => sum + encode(x.op).length + OP_REFERENCE_BYTES, 0)
      traffic.set(key, { updates: ops.length, updateBytes, stateBytes: encode(s[2]).length })
    }
    if (hot) for (const [key, m] of chooseModes(traffic, hot)) if (m === 'ops') states.delete(key)
    return states
  }

  private track(key: string): void {
    this.tracker.offer(key)
    if (++this.periodSeen < this.periodOps) return
    this.lastHot = new Set(this.tracker.top(this.hotObjects).map((e) => e.key))
    this.tracker.clear()
    this.periodSeen = 0
  }

  private reset(fromIndex: number): void {
    this.commits.length = 0
    this.head = 0
    this.held = 0
    this.start = fromIndex
    this.end = fromIndex
  }
}
