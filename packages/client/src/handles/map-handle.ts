import { CollabList, CollabMap, SteadError, createCrdt, decodeDeclaration, encodeDeclaration, nestedKey, validateRegisterValue, type AnyCrdt, type Declaration, type FieldSchema, type MapBounds, type MapOp, type RegisterValue } from '@stead/core'
import { ChangeFeed, mapChange, mapState, type MapChange, type MapState } from './changes.ts'
import { Handle, guarded, type CounterHandle, type HandleHost } from './handles.ts'
import type { TextHandle } from './text-handle.ts'
import type { ObjectOptions, SafeResult, UpdateOptions, UpdateResult, WaitOptions } from '../types.ts'

/** How a map opens the objects nested in it: the space's own openers, given the nested object's key. */
export interface NestedOpener {
  map(key: string, options?: { maxKeys?: number; schema?: Readonly<Record<string, FieldKind>> } & ObjectOptions): MapHandle
  text(key: string, options?: { maxLength?: number } & ObjectOptions): TextHandle
  counter(key: string, options?: { min?: number; max?: number } & ObjectOptions): CounterHandle
}

/**
 * What a map's schema says a field holds (`space.map(key, { schema })`):
 * plain values, or a nested object of a type with its invariants. Every
 * client must open the map with the same schema.
 */
export type FieldKind =
  | 'value'
  | readonly unknown[]
  | 'text'
  | 'map'
  | 'counter'
  | 'list'
  | {
      /** A nested text with these invariants. */
      readonly text: {
        /** Its `maxLength`. */
        readonly maxLength?: number
      }
    }
  | {
      /** A nested map with these invariants. */
      readonly map: {
        /** Its `maxKeys`. */
        readonly maxKeys?: number
      }
    }
  | {
      /** A nested counter with these bounds. */
      readonly counter: {
        /** Its `min`. */
        readonly min?: number
        /** Its `max`. */
        readonly max?: number
      }
    }
  | {
      /** A nested list with these invariants. */
      readonly list: {
        /** Its `maxLength`. */
        readonly maxLength?: number
      }
    }

/** @internal A schema as the map's declaration holds it. Throws SteadError('malformed') for a kind it does not know. */
export function schemaOf(schema: Readonly<Record<string, FieldKind>>): Record<string, FieldSchema> {
  const out: Record<string, FieldSchema> = {}
  for (const [field, kind] of Object.entries(schema)) {
    checkField('schema', field)
    if (Array.isArray(kind)) {
      // A declaration's wire form, as a map's declaration holds its schema.
      decodeDeclaration(kind)
      Object.defineProperty(out, field, { value: kind, enumerable: true })
      continue
    }
    const decl: Declaration | 'value' | undefined =
      kind === 'value'
        ? 'value'
        : kind === 'text' || (typeof kind === 'object' && 'text' in kind)
          ? { type: 'text', bounds: kind === 'text' ? {} : { ...kind.text } }
          : kind === 'map' || (typeof kind === 'object' && 'map' in kind)
            ? { type: 'map', bounds: kind === 'map' ? {} : { ...kind.map } }
            : kind === 'counter' || (typeof kind === 'object' && 'counter' in kind)
              ? { type: 'counter', bounds: kind === 'counter' ? {} : { ...kind.counter } }
              : kind === 'list' || (typeof kind === 'object' && 'list' in kind)
                ? { type: 'list', bounds: kind === 'list' ? {} : { ...kind.list } }
                : undefined
    if (!decl) throw new SteadError('malformed', `schema field ${field}: a kind is 'value', 'text', 'map', 'counter', 'list' or { text | map | counter | list: invariants }`)
    Object.defineProperty(out, field, { value: decl === 'value' ? 'value' : encodeDeclaration(decl), enumerable: true })
  }
  return out
}

/** The longest a nested object's key may be (the wire's object key limit). */
const MAX_KEY_CHARS = 256

/**
 * A map of fields, as Y.Map users know it. Open it with `space.map(key)`.
 * A field holds a plain value (`set`) or a nested object made in place
 * (`map`, `text`, `counter`). Concurrent writes to one field resolve to the
 * one made after seeing the most (a Lamport order, then author id: never a
 * device clock). Two clients creating the same nested field at once get
 * one object with both their edits; a nested object deleted while someone
 * edits inside it stays deleted (as in Yjs), and making the field again
 * gives a fresh one.
 */
export class MapHandle extends Handle {
  private readonly opener: NestedOpener
  private feed: ChangeFeed<MapState, MapChange> | undefined

  /** @internal Use `space.map(key)` or a map's `map(field)`. */
  constructor(host: HandleHost, key: string, declaration: MapHandle['declaration'], opener: NestedOpener) {
    super(host, key, declaration)
    this.opener = opener
  }

  /** The prospective map as plain data: nested maps as objects, texts as strings, counters as numbers. */
  get value(): Record<string, unknown> {
    return plainObject(this.key, encodeDeclaration(this.declaration), (k) => this.host.prospective(k)) as Record<string, unknown>
  }

  /** The stable map as plain data (see `value`), within `maxKeys`. */
  get stable(): Record<string, unknown> {
    return plainObject(this.key, encodeDeclaration(this.declaration), (k) => this.host.stable(k)) as Record<string, unknown>
  }

  /**
   * Calls `listener` whenever the map or any object nested in it may have
   * changed (as Y.Map's observeDeep); `subscribe` hears the map's own
   * fields only. Returns the unsubscribe function.
   */
  subscribeDeep(listener: () => void): () => void {
    return subscribeDeep(this.host, this.key, listener)
  }

  /**
   * Calls `listener` with the fields that changed each time the map's own
   * fields change (as Y.Map's observe; not what is nested in them: observe
   * those handles): per field `add`, `update` or `delete`, the plain value
   * it held before, and the author of what it holds now; and whether this
   * client made the change. Edits of one `space.transact` come as one
   * change. Returns the function that stops it.
   */
  observe(listener: (change: MapChange) => void): () => void {
    this.feed ??= new ChangeFeed(this.host, this.key, () => mapState(this.view()), mapChange)
    return this.feed.listen(listener)
  }

  /** The fields that hold something, prospectively. */
  keys(): string[] {
    return Object.keys(this.view()?.value() ?? {})
  }

  /** How many fields hold something, prospectively. */
  get size(): number {
    return this.view()?.size ?? 0
  }

  /** Whether `field` holds something, prospectively. */
  has(field: string): boolean {
    return this.view()?.get(field) !== undefined
  }

  /** What `field` holds prospectively, as plain data (a nested object as in `value`), or undefined. */
  get(field: string): unknown {
    const entry = this.view()?.get(field)
    if (!entry) return undefined
    return 'value' in entry ? entry.value : plainObject(nestedKey(this.key, field, entry.gen, entry.object), entry.object, (k) => this.host.prospective(k))
  }

  /**
   * Sets `field` to a plain value (msgpack data, as a register holds).
   * Regular: shows at once and resolves `stored` once durable on this device.
   *
   * @throws SteadError `malformed` (the promise rejects) for a bad field (1 to 128 characters) or value; {@link ClosedError} after the space closed.
   */
  set(field: string, value: RegisterValue): Promise<UpdateResult>
  /**
   * Sets `field` as a safe update: resolves once the stable order decided it (`rejected` with `invariant` past `maxKeys`).
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  set(field: string, value: RegisterValue, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Sets `field`, regular or safe as `options.safe` says (see the other forms).
   *
   * @throws SteadError as the other forms.
   */
  set(field: string, value: RegisterValue, options?: UpdateOptions): Promise<UpdateResult>
  set(field: string, value: RegisterValue, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      checkField(this.key, field)
      const declared = this.schema()?.[field]
      if (declared !== undefined && declared !== 'value') throw new SteadError('type-mismatch', `${this.key}.${field} holds a nested ${JSON.stringify(declared)} (its schema), not a plain value`)
      const problem = validateRegisterValue(value)
      if (problem) throw new SteadError('malformed', `${this.key}.${field}: ${problem}`)
      return this.send(['s', field, value, this.stamp()] satisfies MapOp, options)
    })
  }

  /**
   * Deletes `field` (a nested object in it with it). Regular: shows at once.
   *
   * @throws SteadError `malformed` (the promise rejects) for a bad field; {@link ClosedError} after the space closed.
   */
  delete(field: string): Promise<UpdateResult>
  /**
   * Deletes `field` as a safe update.
   *
   * @throws SteadError as the regular form, and `timeout` or `aborted` as `options` say.
   */
  delete(field: string, options: { safe: true } & WaitOptions): Promise<SafeResult>
  /**
   * Deletes `field`, regular or safe as `options.safe` says.
   *
   * @throws SteadError as the other forms.
   */
  delete(field: string, options?: UpdateOptions): Promise<UpdateResult>
  delete(field: string, options?: UpdateOptions): Promise<UpdateResult> {
    return guarded(() => {
      checkField(this.key, field)
      return this.send(['x', field, this.stamp()] satisfies MapOp, options)
    })
  }

  /**
   * The map nested at `field`, made there if the field holds no map yet
   * (a regular update). The same object for every client that makes it
   * concurrently.
   *
   * @throws SteadError `malformed` for a bad field or options, `too-large` when nesting makes the key longer than 256 characters, `type-mismatch` as `space.map` does; {@link ClosedError} after `close()`.
   */
  map(field: string, options: { maxKeys?: number; schema?: Readonly<Record<string, FieldKind>> } & ObjectOptions = {}): MapHandle {
    return this.nested(field, 'm', options, (key, o) => this.opener.map(key, o as typeof options))
  }

  /** The text nested at `field`, made there if the field holds no text yet (see `map(field)`). */
  text(field: string, options: { maxLength?: number } & ObjectOptions = {}): TextHandle {
    return this.nested(field, 't', options, (key, o) => this.opener.text(key, o as typeof options))
  }

  /** The counter nested at `field`, made there if the field holds no counter yet (see `map(field)`). */
  counter(field: string, options: { min?: number; max?: number } & ObjectOptions = {}): CounterHandle {
    return this.nested(field, 'c', options, (key, o) => this.opener.counter(key, o as typeof options))
  }

  /**
   * Opens the object nested at `field` (made there if the field holds none
   * of this type yet). A field the schema declares opens with the schema's
   * invariants unless `given` names others (then they must match).
   */
  private nested<H extends Handle>(field: string, code: string, given: object, open: (key: string, options: object) => H): H {
    checkField(this.key, field)
    const declared = this.schema()?.[field]
    if (declared === 'value') throw new SteadError('type-mismatch', `${this.key}.${field} holds plain values (its schema), not a nested object`)
    if (declared !== undefined && declared[0] !== code) throw new SteadError('type-mismatch', `${this.key}.${field} holds a nested ${JSON.stringify(declared)} (its schema)`)
    const own = Object.keys(given).some((k) => k !== 'freshness')
    const options = declared !== undefined && !own ? { ...(decodeDeclaration(declared) as { bounds?: object }).bounds, ...given } : given
    const view = this.view()
    const entry = view?.get(field)
    const held = entry && 'object' in entry && entry.object[0] === code ? entry : undefined
    const gen = held?.gen ?? view?.nextGen(field) ?? 1
    const key = nestedKey(this.key, field, gen, [code])
    if (key.length > MAX_KEY_CHARS) throw new SteadError('too-large', `${this.key}: nesting ${field} here makes a key of ${key.length} characters (at most ${MAX_KEY_CHARS}); use shorter keys or nest less deep`)
    const handle = open(key, options)
    const decl = encodeDeclaration(handle.declaration)
    if (declared !== undefined && JSON.stringify(declared) !== JSON.stringify(decl)) {
      throw new SteadError('type-mismatch', `${this.key}.${field} holds a nested ${JSON.stringify(declared)} (its schema), not ${JSON.stringify(decl)}: open it with the invariants the schema gives`)
    }
    if (!held || JSON.stringify(held.object) !== JSON.stringify(decl)) {
      // Made in place, as a regular update: its outcome reaches the space's onError if the stable order rejects it.
      this.send(['o', field, decl, this.stamp(), gen] satisfies MapOp).catch(() => undefined)
    }
    return handle
  }

  private view(): CollabMap | undefined {
    return this.host.prospective(this.key) as CollabMap | undefined
  }

  private schema(): MapBounds['schema'] {
    return (this.declaration as { bounds: MapBounds }).bounds.schema
  }

  private stamp(): number {
    return (this.view() ?? new CollabMap()).nextStamp()
  }
}

/** @internal The keys of every object nested (at any depth) in the object keyed `key`, as `read` has them. */
export function nestedKeysOf(key: string, read: (key: string) => AnyCrdt | undefined, out = new Set<string>()): Set<string> {
  const crdt = read(key)
  const children: Array<[string, readonly unknown[]]> = []
  if (crdt instanceof CollabMap) for (const [field, e] of Object.entries(crdt.value())) if ('object' in e) children.push([nestedKey(key, field, e.gen, e.object), e.object])
  if (crdt instanceof CollabList) for (const e of crdt.value()) if ('object' in e) children.push([nestedKey(key, e.name, 1, e.object), e.object])
  for (const [child] of children) {
    if (out.has(child)) continue
    out.add(child)
    nestedKeysOf(child, read, out)
  }
  return out
}

/**
 * @internal Calls `listener` on any change of the object keyed `key` or of
 * any object nested in it (prospective or stable), following nested
 * objects as they come and go. Returns the unsubscribe function.
 */
export function subscribeDeep(host: HandleHost, key: string, listener: () => void): () => void {
  const subs = new Map<string, () => void>()
  const sync = (): void => {
    const keys = nestedKeysOf(key, (k) => host.prospective(k), nestedKeysOf(key, (k) => host.stable(k)))
    keys.add(key)
    for (const k of keys) if (!subs.has(k)) subs.set(k, host.subscribe(k, onChange))
    for (const [k, off] of subs) {
      if (keys.has(k)) continue
      off()
      subs.delete(k)
    }
  }
  const onChange = (): void => {
    sync()
    listener()
  }
  sync()
  return () => {
    for (const off of subs.values()) off()
    subs.clear()
  }
}

/** @internal A nested object's value as plain data: a map's fields resolved in turn, anything else as its CRDT's value. */
export function plainObject(key: string, decl: readonly unknown[], read: (key: string) => AnyCrdt | undefined): unknown {
  const crdt = read(key) ?? createCrdt(decodeDeclaration(decl))
  if (!(crdt instanceof CollabMap)) return crdt.value()
  const out: Record<string, unknown> = {}
  for (const [field, entry] of Object.entries(crdt.value())) {
    const v = 'value' in entry ? entry.value : plainObject(nestedKey(key, field, entry.gen, entry.object), entry.object, read)
    Object.defineProperty(out, field, { value: v, enumerable: true, writable: true, configurable: true })
  }
  return out
}

function checkField(key: string, field: unknown): void {
  if (typeof field !== 'string' || field.length === 0 || field.length > 128) throw new SteadError('malformed', `${key}: a map field is a string of 1 to 128 characters`)
}
