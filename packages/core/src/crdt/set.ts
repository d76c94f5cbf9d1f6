import { OK, invalid, violates, type ApplyResult, type Crdt, decodeBounds, encodeBounds, type ObjectType, type OpContext } from './types.ts'

/** Set elements are strings or finite numbers: they have a canonical key and encode compactly. */
export type SetElement = string | number

/** Declared invariants of a set. */
export interface SetBounds {
  /** The set never holds more than this many elements. */
  readonly maxSize?: number
}

/**
 * OR-Set operations:
 * - `['a', e]` adds e under the operation's own tag (unique by construction);
 * - `['r', e, tags]` removes the tags of e its author had observed;
 * - `['R', e, tags]` restores them: only ever produced by `inverse` of a remove,
 *   never accepted from the wire.
 */
export type SetOp = readonly ['a', SetElement] | readonly ['r', SetElement, readonly string[]] | readonly ['R', SetElement, readonly string[]]

/** Longest string element, in UTF-16 units. */
export const MAX_SET_ELEMENT_CHARS = 1024
/** Most tags one remove may name (the adds of an element it observed). */
export const MAX_REMOVE_TAGS = 4096

/** What is wrong with a set element (not a finite number or a string of at most {@link MAX_SET_ELEMENT_CHARS} units), or null. */
export function validateSetElement(e: unknown): string | null {
  if (typeof e === 'string') return e.length <= MAX_SET_ELEMENT_CHARS ? null : `set element longer than ${MAX_SET_ELEMENT_CHARS} chars`
  if (typeof e === 'number') return Number.isFinite(e) ? null : 'set element must be a finite number'
  return 'set element must be a string or a finite number'
}

/** Validates an op as it arrives from the wire (restores are refused there). */
export function validateSetOp(op: unknown): string | null {
  if (!Array.isArray(op)) return 'set op must be an array'
  if (op[0] === 'a') return op.length === 2 ? validateSetElement(op[1]) : 'set add must be [\'a\', element]'
  if (op[0] === 'r') {
    if (op.length !== 3) return "set remove must be ['r', element, tags]"
    const tags = op[2] as unknown
    if (!Array.isArray(tags) || tags.length > MAX_REMOVE_TAGS || !tags.every((t) => typeof t === 'string' && t.length <= 256)) {
      return `set remove tags must be at most ${MAX_REMOVE_TAGS} strings`
    }
    return validateSetElement(op[1])
  }
  return `unknown set op ${JSON.stringify(op[0])}`
}

/** What is wrong with set bounds (`maxSize` not a non-negative safe integer), or null. */
export function validateSetBounds(b: SetBounds): string | null {
  if (b.maxSize !== undefined && (!Number.isSafeInteger(b.maxSize) || b.maxSize < 0)) return 'maxSize must be a non-negative safe integer'
  return null
}

function keyOf(e: SetElement): string {
  // Distinct prefixes keep the string "1" and the number 1 apart.
  return typeof e === 'string' ? `s${e}` : `n${e}`
}

interface TagState {
  added: boolean
  /** Tags of the remove operations that removed this tag; live iff added and empty. */
  removers: Set<string>
}

interface Entry {
  element: SetElement
  tags: Map<string, TagState>
  live: number
}

/**
 * Add-wins observed-remove set. A remove only cancels the tags it observed,
 * so a concurrent add (a new tag) survives it. Removes are recorded per tag
 * by remover, even for tags not yet seen, which makes every pair of
 * operations commute without causal delivery and makes a remove exactly
 * reversible when another remove hit the same tag.
 */
export class ORSet implements Crdt<SetOp, SetElement[]> {
  readonly type = 'set' as const
  /** The declared invariants. */
  readonly bounds: SetBounds
  private entries = new Map<string, Entry>()
  private size = 0

  constructor(bounds: SetBounds = {}) {
    const problem = validateSetBounds(bounds)
    if (problem) throw new RangeError(problem)
    this.bounds = bounds
  }

  value(): SetElement[] {
    const out: SetElement[] = []
    for (const entry of this.entries.values()) if (entry.live > 0) out.push(entry.element)
    return out
  }

  /** Whether `e` is in the set (has a live add). */
  has(e: SetElement): boolean {
    return (this.entries.get(keyOf(e))?.live ?? 0) > 0
  }

  /** How many elements the set holds. */
  get count(): number {
    return this.size
  }

  /** The live tags of e: what a remove issued now must name. */
  tagsOf(e: SetElement): string[] {
    const entry = this.entries.get(keyOf(e))
    if (!entry) return []
    const out: string[] = []
    for (const [tag, st] of entry.tags) if (st.added && st.removers.size === 0) out.push(tag)
    return out
  }

  tryApply(op: SetOp, ctx: OpContext): ApplyResult {
    const problem = op[0] === 'R' ? validateSetElement(op[1]) : validateSetOp(op)
    if (problem) return invalid(problem)
    if (op[0] === 'a' && this.bounds.maxSize !== undefined && !this.has(op[1]) && this.size + 1 > this.bounds.maxSize) {
      return violates(`set would exceed its maximum size ${this.bounds.maxSize}`)
    }
    if (op[0] === 'R' && this.bounds.maxSize !== undefined && !this.has(op[1])) {
      // A restore can revive the element; check on a copy of just this entry.
      const probe = this.clone()
      probe.apply(op, ctx)
      if (probe.size > this.bounds.maxSize) return violates(`set would exceed its maximum size ${this.bounds.maxSize}`)
    }
    this.apply(op, ctx)
    return OK
  }

  apply(op: SetOp, ctx: OpContext): void {
    const element = op[1]
    const key = keyOf(element)
    let entry = this.entries.get(key)
    if (!entry) {
      entry = { element, tags: new Map(), live: 0 }
      this.entries.set(key, entry)
    }
    if (op[0] === 'a') {
      this.update(entry, ctx.tag, (st) => {
        st.added = true
        // A tag only removes itself as this add's compensation; applying the
        // add again (a dropped envelope that commits later) takes that back.
        st.removers.delete(ctx.tag)
      })
    } else if (op[0] === 'r') {
      for (const tag of op[2]) this.update(entry, tag, (st) => st.removers.add(ctx.tag))
    } else {
      for (const tag of op[2]) this.update(entry, tag, (st) => st.removers.delete(ctx.tag))
    }
  }

  inverse(op: SetOp, ctx: OpContext): SetOp {
    if (op[0] === 'a') return ['r', op[1], [ctx.tag]]
    if (op[0] === 'r') return ['R', op[1], op[2]]
    return ['r', op[1], op[2]]
  }

  merge(other: ORSet): void {
    for (const [key, theirs] of other.entries) {
      let entry = this.entries.get(key)
      if (!entry) {
        entry = { element: theirs.element, tags: new Map(), live: 0 }
        this.entries.set(key, entry)
      }
      for (const [tag, st] of theirs.tags) {
        this.update(entry, tag, (mine) => {
          mine.added ||= st.added
          for (const r of st.removers) mine.removers.add(r)
        })
      }
    }
  }

  clone(): this {
    const copy = new ORSet(this.bounds)
    for (const [key, entry] of this.entries) {
      const tags = new Map<string, TagState>()
      for (const [tag, st] of entry.tags) tags.set(tag, { added: st.added, removers: new Set(st.removers) })
      copy.entries.set(key, { element: entry.element, tags, live: entry.live })
    }
    copy.size = this.size
    return copy as this
  }

  /** [element, [tag, added, removers[]][]][] with everything sorted. */
  snapshot(): Array<[SetElement, Array<[string, boolean, string[]]>]> {
    return [...this.entries.entries()]
      .filter(([, entry]) => entry.tags.size > 0)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([, entry]) => [
        entry.element,
        [...entry.tags.entries()]
          .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
          .map(([tag, st]): [string, boolean, string[]] => [tag, st.added, [...st.removers].sort()]),
      ])
  }

  /** Rebuilds a set from its `snapshot()` (trusted input). */
  static fromSnapshot(bounds: SetBounds, snap: Array<[SetElement, Array<[string, boolean, string[]]>]>): ORSet {
    const s = new ORSet(bounds)
    for (const [element, tags] of snap) {
      const entry: Entry = { element, tags: new Map(), live: 0 }
      s.entries.set(keyOf(element), entry)
      for (const [tag, added, removers] of tags) s.update(entry, tag, (st) => {
        st.added = added
        for (const r of removers) st.removers.add(r)
      })
    }
    return s
  }

  invariantsHold(): boolean {
    return this.bounds.maxSize === undefined || this.size <= this.bounds.maxSize
  }

  /** Mutates one tag's state and keeps the live counts in step. */
  private update(entry: Entry, tag: string, change: (st: TagState) => void): void {
    let st = entry.tags.get(tag)
    if (!st) {
      st = { added: false, removers: new Set() }
      entry.tags.set(tag, st)
    }
    const wasLive = st.added && st.removers.size === 0
    change(st)
    const isLive = st.added && st.removers.size === 0
    if (wasLive === isLive) return
    const before = entry.live
    entry.live += isLive ? 1 : -1
    if (before === 0 && entry.live === 1) this.size++
    else if (before === 1 && entry.live === 0) this.size--
  }
}

/** An OR-Set's declaration: its `maxSize`, if any. */
export interface SetDeclaration {
  /** An OR-Set. */
  readonly type: 'set'
  /** Its `maxSize`, if any. */
  readonly bounds: SetBounds
}

/** The set in the registry; wire form `['s', maxSize]`. Every op is kept: tags depend on each one. */
export const setType: ObjectType<SetDeclaration, ORSet> = {
  name: 'set',
  code: 's',
  encode: (d) => encodeBounds('s', d.bounds, ['maxSize']),
  decode: (enc) => ({ type: 'set', bounds: decodeBounds(enc, 'set', ['maxSize'], validateSetBounds) }),
  validateOp: validateSetOp,
  create: (d) => new ORSet(d.bounds),
  restore: (d, snap) => ORSet.fromSnapshot(d.bounds, snap as Array<[SetElement, Array<[string, boolean, string[]]>]>),
  hasInvariants: (d) => d.bounds.maxSize !== undefined,
}
