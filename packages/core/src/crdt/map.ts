import { SteadError } from '../errors.ts'
import { registerWriteWins, validateRegisterValue, type RegisterValue } from './register.ts'
import { recordPatch } from './value-patch.ts'
import { OK, invalid, isSafeInt, violates, type ApplyResult, type Crdt, decodeBounds, encodeBounds, type ObjectType, type OpContext } from './types.ts'

/** What a schema declares a field to hold: plain values (`'value'`), or a nested object of a type, given as its declaration's wire form. */
export type FieldSchema = 'value' | readonly unknown[]

/** Declared invariants of a map. */
export interface MapBounds {
  /** The map never holds more than this many keys. */
  readonly maxKeys?: number
  /**
   * What some fields hold: a write of another kind to such a field (a plain
   * value where a nested text is declared, a nested object of another type
   * or other invariants) is rejected with `type-mismatch`. Fields it does
   * not name take anything.
   */
  readonly schema?: Readonly<Record<string, FieldSchema>>
}

/** The schema in its wire form: `[field, 'v' | declaration]` pairs sorted by field, or null. */
function encodeSchema(schema: MapBounds['schema']): unknown {
  if (!schema) return null
  return Object.keys(schema)
    .sort()
    .map((f) => [f, schema[f] === 'value' ? 'v' : schema[f]])
}

/** Parses a wire schema (see encodeSchema); `declaration` checks a nested declaration. Throws SteadError('malformed'). */
function decodeSchema(enc: unknown, declaration: (enc: unknown) => string | null): MapBounds['schema'] {
  if (enc === null || enc === undefined) return undefined
  if (!Array.isArray(enc) || enc.length > 1000) throw new SteadError('malformed', 'a map schema is a list of at most 1,000 [field, kind] pairs')
  const out: Record<string, FieldSchema> = {}
  let last = ''
  for (const e of enc as unknown[]) {
    if (!Array.isArray(e) || e.length !== 2) throw new SteadError('malformed', 'a map schema entry is [field, kind]')
    const [field, kind] = e as [unknown, unknown]
    const problem = validField(field) ?? ((field as string) <= last ? 'map schema fields must be distinct and sorted' : null)
    if (problem) throw new SteadError('malformed', problem)
    if (kind !== 'v') {
      const bad = declaration(kind)
      if (bad) throw new SteadError('malformed', `map schema field ${field as string}: ${bad}`)
    }
    Object.defineProperty(out, field as string, { value: kind === 'v' ? 'value' : (kind as readonly unknown[]), enumerable: true })
    last = field as string
  }
  return out
}

/** Why a write breaks the schema, or null. */
function schemaProblem(schema: MapBounds['schema'], op: Exclude<MapOp, readonly ['u']>): string | null {
  if (!schema || op[0] === 'x' || !Object.hasOwn(schema, op[1])) return null
  const want = schema[op[1]] as FieldSchema
  if (want === 'value') return op[0] === 's' ? null : `field ${op[1]} holds plain values, not a nested object`
  if (op[0] === 's') return `field ${op[1]} holds a nested ${JSON.stringify(want)}, not a plain value`
  return JSON.stringify(op[2]) === JSON.stringify(want) ? null : `field ${op[1]} holds a nested ${JSON.stringify(want)}, not ${JSON.stringify(op[2])}`
}

/**
 * Map operations, each on one field, decided by a Lamport stamp (the
 * writer's: one more than the highest stamp it had seen on the map), then
 * the writer's author id, then the op tag; never by a device clock:
 * - `['s', field, value, stamp]` sets a plain value;
 * - `['o', field, declaration, stamp, gen]` makes the field a nested
 *   object of the declared type (encoded declaration). The nested object is
 *   the object keyed `nestedKey(map key, field, gen, declaration)`: writers
 *   that create the same field concurrently pick the same `gen` (one more
 *   than any the field had) and so edit one object, merged; a field deleted
 *   and made again gets a fresh object;
 * - `['x', field, stamp]` deletes the field;
 * - `['u']` withdraws the write made under the same context: only ever
 *   produced by `inverse`.
 */
export type MapOp =
  | readonly ['s', string, RegisterValue, number]
  | readonly ['o', string, readonly unknown[], number, number]
  | readonly ['x', string, number]
  | readonly ['u']

/** Longest field name, in UTF-16 units. */
export const MAX_FIELD_CHARS = 128
/** How far past the highest stamp a map has seen a write's stamp may go: one stamped far ahead would win every concurrent write for good. */
export const MAX_STAMP_JUMP = 1_000_000

/** What a field holds: a plain value, or a nested object (its declaration's wire form and generation). */
export type MapEntry =
  | {
      /** The plain value. */
      readonly value: RegisterValue
    }
  | {
      /** The nested object's declaration, in its wire form. */
      readonly object: readonly unknown[]
      /** Its generation (see {@link nestedKey}). */
      readonly gen: number
    }

interface Write {
  readonly op: Exclude<MapOp, readonly ['u']>
  /** The Lamport stamp, as `t` so register tie-breaks apply. */
  readonly t: number
  readonly replica: string
  readonly tag: string
}

interface Field {
  readonly writes: Map<string, Write>
  winner: Write | undefined
}

/** The key of the object nested at `field` of the map keyed `mapKey`, generation `gen`, of the declared type. */
export function nestedKey(mapKey: string, field: string, gen: number, declaration: readonly unknown[]): string {
  return `${mapKey}\u0000${field}\u0000${gen}${String(declaration[0])}`
}

function validField(f: unknown): string | null {
  if (typeof f !== 'string' || f.length === 0 || f.length > MAX_FIELD_CHARS) return `a map field is 1 to ${MAX_FIELD_CHARS} characters`
  return null
}

function validStamp(t: unknown): string | null {
  return isSafeInt(t) && t >= 0 ? null : 'a map stamp is a non-negative safe integer'
}

/** What is wrong with a map op from the wire, or null; `declaration` checks a nested object's declaration (the registry's decodeDeclaration). */
export function validateMapOp(op: unknown, declaration: (enc: unknown) => string | null = () => null): string | null {
  if (!Array.isArray(op)) return 'map op must be an array'
  switch (op[0]) {
    case 's':
      if (op.length !== 4) return "map set must be ['s', field, value, stamp]"
      return validField(op[1]) ?? validStamp(op[3]) ?? validateRegisterValue(op[2])
    case 'o':
      if (op.length !== 5) return "map object must be ['o', field, declaration, stamp, gen]"
      if (!Array.isArray(op[2])) return 'a nested object needs a declaration'
      if (!isSafeInt(op[4]) || op[4] < 1) return 'a nested object generation is a positive safe integer'
      return validField(op[1]) ?? validStamp(op[3]) ?? declaration(op[2])
    case 'x':
      if (op.length !== 3) return "map delete must be ['x', field, stamp]"
      return validField(op[1]) ?? validStamp(op[2])
    default:
      return `unknown map op ${JSON.stringify(op[0])}`
  }
}

/** What is wrong with map bounds, or null. */
export function validateMapBounds(b: MapBounds): string | null {
  if (b.maxKeys !== undefined && (!Number.isSafeInteger(b.maxKeys) || b.maxKeys < 0)) return 'maxKeys must be a non-negative safe integer'
  return null
}

/**
 * A map of fields, each a last-writer-wins slot holding a plain value or a
 * nested object. Like the register, it keeps every write `apply` gave it
 * so any one can be withdrawn exactly; `tryApply` (the stable path) keeps
 * only each field's winner.
 */
export class CollabMap implements Crdt<MapOp, Record<string, MapEntry>> {
  readonly type = 'map' as const
  /** The declared invariants. */
  readonly bounds: MapBounds
  private readonly fields = new Map<string, Field>()
  /** Which field each withdrawable write is on, by tag. */
  private readonly fieldOfTag = new Map<string, string>()
  private live = 0
  private maxStamp = 0

  constructor(bounds: MapBounds = {}) {
    const problem = validateMapBounds(bounds)
    if (problem) throw new RangeError(problem)
    this.bounds = bounds
  }

  /** Every field that holds something, in field name order (the same on every replica). */
  value(): Record<string, MapEntry> {
    const out: Record<string, MapEntry> = {}
    for (const [name, f] of [...this.fields].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      const e = f.winner && entryOf(f.winner)
      if (e) Object.defineProperty(out, name, { value: e, enumerable: true, writable: true, configurable: true })
    }
    return out
  }

  /** What `field` holds, or undefined. */
  get(field: string): MapEntry | undefined {
    const w = this.fields.get(field)?.winner
    return w && entryOf(w)
  }

  /** Which write `field` holds now (its tag, the same on every replica) and its author id, or undefined if it holds nothing. */
  writerOf(field: string):
    | {
        /** The write's op tag. */
        readonly tag: string
        /** Its author id. */
        readonly author: string
      }
    | undefined {
    const w = this.fields.get(field)?.winner
    return w && entryOf(w) ? { tag: w.tag, author: w.replica } : undefined
  }

  /** How many fields hold something. */
  get size(): number {
    return this.live
  }

  /** The stamp a new write should carry: one more than any this map has seen. */
  nextStamp(): number {
    return this.maxStamp + 1
  }

  /** The generation a nested object made now at `field` gets: one more than any the field had. */
  nextGen(field: string): number {
    let gen = 0
    for (const w of this.fields.get(field)?.writes.values() ?? []) if (w.op[0] === 'o' && w.op[4] > gen) gen = w.op[4]
    return gen + 1
  }

  tryApply(op: MapOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'u') {
      this.apply(op, ctx)
      return OK
    }
    const problem = validateMapOp(op)
    if (problem) return invalid(problem)
    const t = op[0] === 'x' ? op[2] : op[3]
    if (t > this.maxStamp + MAX_STAMP_JUMP) return { ok: false, reason: 'clock-ahead', detail: `map stamp ${t} is more than ${MAX_STAMP_JUMP} past the highest seen (${this.maxStamp})` }
    const mismatch = schemaProblem(this.bounds.schema, op)
    if (mismatch) return { ok: false, reason: 'type-mismatch', detail: mismatch }
    const max = this.bounds.maxKeys
    if (max !== undefined && op[0] !== 'x' && !this.get(op[1]) && this.live + 1 > max && this.wouldWin(op, ctx)) return violates(`map would exceed its maximum of ${max} keys`)
    this.apply(op, ctx)
    // The stable path is never compensated: each field keeps its winner, and the nested object of
    // the highest generation (the next one made here must be fresh).
    const f = this.fields.get(op[1]) as Field
    let newest: Write | undefined
    for (const w of f.writes.values()) if (w.op[0] === 'o' && (!newest || w.op[4] > (newest.op[4] as number))) newest = w
    for (const [tag, w] of f.writes) {
      if (w === f.winner || w === newest) continue
      f.writes.delete(tag)
      this.fieldOfTag.delete(tag)
    }
    return OK
  }

  apply(op: MapOp, ctx: OpContext): void {
    if (op[0] === 'u') {
      const name = this.fieldOfTag.get(ctx.tag)
      const f = name === undefined ? undefined : this.fields.get(name)
      if (!f || !f.writes.delete(ctx.tag)) return
      this.fieldOfTag.delete(ctx.tag)
      if (f.winner?.tag === ctx.tag) this.setWinner(f, best(f))
      return
    }
    const write: Write = { op, t: op[0] === 'x' ? op[2] : op[3], replica: ctx.replica, tag: ctx.tag }
    this.add(op[1], write)
  }

  inverse(): MapOp {
    return ['u']
  }

  merge(other: CollabMap): void {
    for (const [name, f] of other.fields) for (const w of f.writes.values()) if (!this.fields.get(name)?.writes.has(w.tag)) this.add(name, w)
  }

  clone(): this {
    const copy = new CollabMap(this.bounds)
    copy.merge(this)
    return copy as this
  }

  /** Every kept write as [field, tag, author, op], sorted by field then tag. */
  snapshot(): Array<[string, string, string, Write['op']]> {
    const out: Array<[string, string, string, Write['op']]> = []
    for (const [name, f] of this.fields) for (const w of f.writes.values()) out.push([name, w.tag, w.replica, w.op])
    return out.sort((a, b) => (a[0] !== b[0] ? (a[0] < b[0] ? -1 : 1) : a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0))
  }

  /** Rebuilds a map from its `snapshot()` (trusted input). */
  static fromSnapshot(bounds: MapBounds, snap: Array<[string, string, string, Write['op']]>): CollabMap {
    const m = new CollabMap(bounds)
    for (const [name, tag, replica, op] of snap) m.add(name, { op, t: op[0] === 'x' ? op[2] : op[3], replica, tag })
    return m
  }

  invariantsHold(): boolean {
    return this.bounds.maxKeys === undefined || this.live <= this.bounds.maxKeys
  }

  private wouldWin(op: Write['op'], ctx: OpContext): boolean {
    const winner = this.fields.get(op[1])?.winner
    return !winner || registerWriteWins({ t: op[0] === 'x' ? op[2] : op[3], replica: ctx.replica, tag: ctx.tag, value: null }, { t: winner.t, replica: winner.replica, tag: winner.tag, value: null })
  }

  private add(name: string, write: Write): void {
    let f = this.fields.get(name)
    if (!f) this.fields.set(name, (f = { writes: new Map(), winner: undefined }))
    f.writes.set(write.tag, write)
    this.fieldOfTag.set(write.tag, name)
    if (write.t > this.maxStamp) this.maxStamp = write.t
    if (!f.winner || wins(write, f.winner)) this.setWinner(f, write)
  }

  private setWinner(f: Field, w: Write | undefined): void {
    const before = f.winner !== undefined && f.winner.op[0] !== 'x'
    f.winner = w
    const after = w !== undefined && w.op[0] !== 'x'
    if (before !== after) this.live += after ? 1 : -1
  }
}

function wins(a: Write, b: Write): boolean {
  return registerWriteWins({ t: a.t, replica: a.replica, tag: a.tag, value: null }, { t: b.t, replica: b.replica, tag: b.tag, value: null })
}

function best(f: Field): Write | undefined {
  let out: Write | undefined
  for (const w of f.writes.values()) if (!out || wins(w, out)) out = w
  return out
}

function entryOf(w: Write): MapEntry | undefined {
  if (w.op[0] === 's') return { value: w.op[2] }
  if (w.op[0] === 'o') return { object: w.op[2], gen: w.op[4] }
  return undefined
}

/** A map's declaration: its `maxKeys` and schema, if any. */
export interface MapDeclaration {
  /** A map of fields. */
  readonly type: 'map'
  /** Its `maxKeys` and schema, if any. */
  readonly bounds: MapBounds
}

/** The map in the registry; wire form `['m', maxKeys]`, or `['m', maxKeys, schema]`. Only each field's last write of a batch is kept. */
export const mapType: ObjectType<MapDeclaration, CollabMap> = {
  name: 'map',
  code: 'm',
  // A schema adds a third element: maps declared without one keep the two-element form.
  encode: (d) => (d.bounds.schema ? [...encodeBounds('m', d.bounds, ['maxKeys']), encodeSchema(d.bounds.schema)] : encodeBounds('m', d.bounds, ['maxKeys'])),
  decode(enc, declaration = () => null) {
    if (enc.length === 3) {
      const { maxKeys } = decodeBounds<MapBounds>(enc.slice(0, 2), 'map', ['maxKeys'], validateMapBounds)
      const schema = decodeSchema(enc[2], declaration)
      return { type: 'map', bounds: { ...(maxKeys === undefined ? {} : { maxKeys }), ...(schema ? { schema } : {}) } }
    }
    return { type: 'map', bounds: decodeBounds(enc, 'map', ['maxKeys'], validateMapBounds) }
  },
  validateOp: validateMapOp,
  create: (d) => new CollabMap(d.bounds),
  restore: (d, snap) => CollabMap.fromSnapshot(d.bounds, snap as Array<[string, string, string, Write['op']]>),
  compact(ops) {
    // Per field, only the last write counts: earlier ones of the same batch would lose to it anyway.
    const last = new Map<string, unknown>()
    for (const op of ops as MapOp[]) last.set(op[0] === 'u' ? '' : op[1], op)
    return [...last.values()]
  },
  hasInvariants: (d) => d.bounds.maxKeys !== undefined,
  historyPatch: (before, after) => recordPatch(before as Record<string, MapEntry>, after as Record<string, MapEntry>, sameEntry),
}

/** Whether two entries are one: the same plain value (by identity: a field's write keeps its value object) or the same nested object. */
function sameEntry(a: MapEntry, b: MapEntry): boolean {
  if ('value' in a || 'value' in b) return 'value' in a && 'value' in b && a.value === b.value
  return a.gen === b.gen && JSON.stringify(a.object) === JSON.stringify(b.object)
}
