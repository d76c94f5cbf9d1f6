import { bytesEqual, canonicalMarkValue, encode, type CollabList, type CollabMap, type CollabText, type ListEntry, type MapEntry, type MarkValue } from '@stead/core'
import { isDraftId } from '../space/draft-ids.ts'
import type { HandleHost } from './handles.ts'

/**
 * One step of a text change, as Quill and Y.Text deltas: read from the
 * start of the text as it was, keep `retain` code points, insert `insert`
 * (made by `author`), or remove `delete` code points. In a text with
 * marks, `attributes` on an insert are the marks of the inserted
 * characters, and on a retain what changed in the marks of the characters
 * kept (a type's new value, null for a type taken off); absent when none.
 */
export type TextDelta =
  | {
      /** Code points kept as they were. */
      readonly retain: number
      /** The marks that changed on them: a type's new value, null for a type taken off. */
      readonly attributes?: Readonly<Record<string, unknown>>
    }
  | {
      /** The characters inserted here. */
      readonly insert: string
      /** The author id that made them. */
      readonly author: string
      /** Their marks, by type (see `TextHandle.spans`). */
      readonly attributes?: Readonly<Record<string, unknown>>
    }
  | {
      /** How many code points were removed here. */
      readonly delete: number
    }

/** One step of a list change: keep `retain` elements, insert `insert` (placed by `author`), or remove `delete` elements. A moved element is removed at its old place and inserted at its new one. */
export type ListDelta =
  | {
      /** Elements kept as they were. */
      readonly retain: number
    }
  | {
      /** The elements inserted here, as plain data (see `ListHandle.value`). */
      readonly insert: readonly unknown[]
      /** The author id that placed them here (inserted them, or moved them here). */
      readonly author: string
    }
  | {
      /** How many elements were removed here. */
      readonly delete: number
    }

/** What happened to one field of a map. */
export interface FieldChange {
  /** `add`: the field held nothing before; `update`: it holds another write; `delete`: it holds nothing now. */
  readonly action: 'add' | 'update' | 'delete'
  /** What the field held before: a plain value, or undefined (nothing, or a nested object). */
  readonly oldValue: unknown
  /** The author id of the write the field holds now (add and update; undefined for delete). */
  readonly author: string | undefined
}

/** A change to a text's prospective value (see `TextHandle.observe`). */
export interface TextChange {
  /** The steps from the text as it was to the text as it is. */
  readonly delta: readonly TextDelta[]
  /** Made here: an edit this client (any of its tabs) just made, else one received, reversed or restored. */
  readonly local: boolean
}

/** A change to a list's own elements (see `ListHandle.observe`). */
export interface ListChange {
  /** The steps from the list as it was to the list as it is. */
  readonly delta: readonly ListDelta[]
  /** Made here (see TextChange.local). */
  readonly local: boolean
}

/** A change to a map's own fields (see `MapHandle.observe`). */
export interface MapChange {
  /** Each field that changed. */
  readonly keys: ReadonlyMap<string, FieldChange>
  /** Made here (see TextChange.local). */
  readonly local: boolean
}

/** A step of a delta between two sequences of ids: keep, insert `after[from..to)`, or remove. */
export type IdStep = { readonly retain: number } | { readonly from: number; readonly to: number } | { readonly delete: number }

/**
 * The steps that turn the sequence of ids `before` into `after` (ids are
 * unique in each). Common ends cost a comparison each; the middle is walked
 * with the position of every id in the other sequence, so an id whose
 * relative order changed (a moved list element) is removed and inserted.
 */
export function sequenceDelta(before: readonly string[], after: readonly string[]): IdStep[] {
  let head = 0
  while (head < before.length && head < after.length && before[head] === after[head]) head++
  let tail = 0
  while (tail < before.length - head && tail < after.length - head && before[before.length - 1 - tail] === after[after.length - 1 - tail]) tail++
  const steps: IdStep[] = []
  const push = (step: IdStep): void => {
    const last = steps[steps.length - 1]
    if (last && 'retain' in last && 'retain' in step) steps[steps.length - 1] = { retain: last.retain + step.retain }
    else if (last && 'delete' in last && 'delete' in step) steps[steps.length - 1] = { delete: last.delete + step.delete }
    else if (last && 'to' in last && 'to' in step && last.to === step.from) steps[steps.length - 1] = { from: last.from, to: step.to }
    else steps.push(step)
  }
  if (head) push({ retain: head })
  const oldEnd = before.length - tail
  const newEnd = after.length - tail
  const inNew = new Map<string, number>()
  for (let j = head; j < newEnd; j++) inNew.set(after[j] as string, j)
  const inOld = new Map<string, number>()
  for (let i = head; i < oldEnd; i++) inOld.set(before[i] as string, i)
  // Ids both sequences hold but met out of order (moved): inserted where `after` has them and removed where `before` had them.
  const insertedEarly = new Set<string>()
  let i = head
  let j = head
  while (i < oldEnd || j < newEnd) {
    const was = i < oldEnd ? (before[i] as string) : undefined
    const is = j < newEnd ? (after[j] as string) : undefined
    if (was !== undefined && was === is) {
      push({ retain: 1 })
      i++
      j++
      continue
    }
    const wasAt = was === undefined ? undefined : inNew.get(was)
    const isAt = is === undefined ? undefined : inOld.get(is)
    let insert: boolean
    if (was !== undefined && (wasAt === undefined || insertedEarly.has(was))) insert = false
    else if (is !== undefined && (isAt === undefined || isAt < i)) insert = true
    else if (was === undefined || is === undefined) insert = was === undefined
    // Both are met again further on: move whichever is displaced less far from here.
    else insert = (wasAt as number) - j < (isAt as number) - i
    if (insert) {
      if (isAt !== undefined && isAt >= i) insertedEarly.add(is as string)
      push({ from: j, to: j + 1 })
      j++
    } else {
      push({ delete: 1 })
      i++
    }
  }
  if (tail) push({ retain: tail })
  return steps
}

/**
 * Turns "something changed" notifications of one object into change events:
 * keeps what the object looked like when last told, and on each
 * notification compares it with what it looks like now (`read`), telling
 * listeners only when `diff` finds a change. Costs one `read` and `diff`
 * per notification while anyone listens, so a handle makes one only once
 * `observe` is called.
 */
export class ChangeFeed<S, C> {
  private readonly listeners = new Set<(change: C) => void>()
  private state: S | undefined
  private unsubscribe: (() => void) | undefined
  private readonly host: HandleHost
  private readonly key: string
  private readonly read: () => S
  private readonly diff: (before: S, after: S, local: boolean) => C | undefined

  constructor(host: HandleHost, key: string, read: () => S, diff: (before: S, after: S, local: boolean) => C | undefined) {
    this.host = host
    this.key = key
    this.read = read
    this.diff = diff
  }

  /** Adds a listener; returns the function that removes it. */
  listen(listener: (change: C) => void): () => void {
    if (this.listeners.size === 0) {
      this.state = this.read()
      this.unsubscribe = this.host.subscribe(this.key, (local) => this.changed(local === true))
    }
    this.listeners.add(listener)
    return () => {
      this.listeners.delete(listener)
      if (this.listeners.size > 0) return
      this.unsubscribe?.()
      this.unsubscribe = undefined
      this.state = undefined
    }
  }

  private changed(local: boolean): void {
    const before = this.state as S
    const after = this.read()
    this.state = after
    const change = this.diff(before, after, local)
    if (change === undefined) return
    let failed: { err: unknown } | undefined
    for (const l of [...this.listeners]) {
      try {
        l(change)
      } catch (err) {
        failed ??= { err }
      }
    }
    // Every listener heard it; the first failure goes on to the space's onError.
    if (failed) throw failed.err
  }
}

/** Ids as they are now: those of drafts that were signed since under their signed names (`signedId`). */
function signedIds(ids: readonly string[], signedId: (id: string) => string | undefined): readonly string[] {
  return ids.some(isDraftId) ? ids.map((id) => signedId(id) ?? id) : ids
}

/**
 * The steps from a sequence (ids `before`) to the next (ids `after`), an
 * insert step per run of one author: `authorAt(k)` is who placed
 * `after[k]`, `inserted(from, to)` what `after[from..to)` holds.
 */
function sequenceChange<I>(
  before: readonly string[],
  after: readonly string[],
  signedId: (id: string) => string | undefined,
  authorAt: (k: number) => string,
  inserted: (from: number, to: number) => I,
): Array<{ readonly retain: number } | { readonly delete: number } | { readonly insert: I; readonly author: string }> {
  const delta: Array<{ readonly retain: number } | { readonly delete: number } | { readonly insert: I; readonly author: string }> = []
  for (const step of sequenceDelta(signedIds(before, signedId), after)) {
    if (!('from' in step)) {
      delta.push(step)
      continue
    }
    // A run typed by two people is two steps.
    for (let k = step.from; k < step.to; ) {
      const author = authorAt(k)
      let end = k + 1
      while (end < step.to && authorAt(end) === author) end++
      delta.push({ insert: inserted(k, end), author })
      k = end
    }
  }
  return delta
}

/** The marks of one character as change events compare them: the marks, and their canonical form. */
interface CharMarks {
  readonly key: string
  readonly marks: Readonly<Record<string, unknown>>
}

const NO_MARKS: CharMarks = { key: '{}', marks: {} }

/** A text as change events compare it: its characters' ids in order, and each one's marks if the text has any. */
export interface TextState {
  readonly ids: readonly string[]
  readonly marks: readonly CharMarks[] | undefined
}

/** @internal */
export function textState(text: CollabText | undefined): TextState {
  const ids = text?.visibleIds() ?? []
  if (!text?.hasMarks) return { ids, marks: undefined }
  const marks: CharMarks[] = []
  for (const span of text.spans()) {
    const m: CharMarks = { key: canonicalMarkValue(span.marks as MarkValue), marks: span.marks }
    for (const _ of span.text) marks.push(m)
  }
  return { ids, marks }
}

/** @internal The change from one text state to the next (`text`: the text now), or undefined if there is none. */
export function textChange(before: TextState, after: TextState, local: boolean, signedId: (id: string) => string | undefined, text: CollabText | undefined): TextChange | undefined {
  const charAt = (k: number): { ch: string; author: string } => text?.charOf(after.ids[k] as string) as { ch: string; author: string }
  const inserted = (from: number, to: number): string => {
    let s = ''
    for (let k = from; k < to; k++) s += charAt(k).ch
    return s
  }
  const steps = sequenceChange(before.ids, after.ids, signedId, (k) => charAt(k).author, inserted)
  return trimmed(before.marks || after.marks ? withAttributes(steps, before, after) : steps, local)
}

/**
 * Text steps with the marks of a text that has some: an insert split where
 * the marks of its characters change, with them as `attributes`; a retain
 * split where the marks of the characters kept changed, with what changed.
 */
function withAttributes(steps: readonly TextDelta[], before: TextState, after: TextState): TextDelta[] {
  const was = (i: number): CharMarks => before.marks?.[i] ?? NO_MARKS
  const is = (j: number): CharMarks => after.marks?.[j] ?? NO_MARKS
  const changes = new Map<string, Readonly<Record<string, unknown>> | undefined>()
  const changeOf = (a: CharMarks, b: CharMarks): Readonly<Record<string, unknown>> | undefined => {
    if (a.key === b.key) return undefined
    const id = `${a.key}\u0001${b.key}`
    if (!changes.has(id)) changes.set(id, markChange(a.marks, b.marks))
    return changes.get(id)
  }
  const out: TextDelta[] = []
  let i = 0
  let j = 0
  for (const step of steps) {
    if ('delete' in step) {
      out.push(step)
      i += step.delete
    } else if ('retain' in step) {
      for (let k = 0; k < step.retain; ) {
        const pair = `${was(i + k).key}\u0001${is(j + k).key}`
        let end = k + 1
        while (end < step.retain && `${was(i + end).key}\u0001${is(j + end).key}` === pair) end++
        const attributes = changeOf(was(i + k), is(j + k))
        const last = out[out.length - 1]
        if (!attributes && last && 'retain' in last && !last.attributes) out[out.length - 1] = { retain: last.retain + end - k }
        else out.push(attributes ? { retain: end - k, attributes } : { retain: end - k })
        k = end
      }
      i += step.retain
      j += step.retain
    } else {
      const chars = [...step.insert]
      for (let k = 0; k < chars.length; ) {
        const m = is(j + k)
        let end = k + 1
        while (end < chars.length && is(j + end).key === m.key) end++
        const insert = chars.slice(k, end).join('')
        out.push(m.key === NO_MARKS.key ? { insert, author: step.author } : { insert, author: step.author, attributes: m.marks })
        k = end
      }
      j += chars.length
    }
  }
  return out
}

/** What changed from marks `a` to `b`: each type whose value is new, null for each taken off; undefined for nothing. */
function markChange(a: Readonly<Record<string, unknown>>, b: Readonly<Record<string, unknown>>): Readonly<Record<string, unknown>> | undefined {
  const out: Record<string, unknown> = {}
  const set = (type: string, v: unknown): void => void Object.defineProperty(out, type, { value: v, enumerable: true })
  for (const type of Object.keys(b)) {
    if (!Object.hasOwn(a, type) || canonicalMarkValue(a[type] as MarkValue) !== canonicalMarkValue(b[type] as MarkValue)) set(type, b[type])
  }
  for (const type of Object.keys(a)) if (!Object.hasOwn(b, type)) set(type, null)
  return Object.keys(out).length ? Object.freeze(out) : undefined
}

/** A list as change events compare it: its elements (ids, what they hold) and who placed each. */
export interface ListState {
  readonly entries: readonly ListEntry[]
  readonly ids: readonly string[]
  readonly placers: readonly string[]
}

/** @internal */
export function listState(list: CollabList | undefined): ListState {
  const entries = list?.value() ?? []
  return { entries, ids: entries.map((e) => e.id), placers: list?.placers() ?? [] }
}

/** @internal The change from one list state to the next (`plain` turns an element into plain data), or undefined. */
export function listChange(before: ListState, after: ListState, local: boolean, signedId: (id: string) => string | undefined, plain: (e: ListEntry) => unknown): ListChange | undefined {
  return trimmed(
    sequenceChange(before.ids, after.ids, signedId, (k) => after.placers[k] as string, (from, to) => after.entries.slice(from, to).map(plain)),
    local,
  )
}

function trimmed<D>(delta: D[], local: boolean): { delta: D[]; local: boolean } | undefined {
  // A change ends where its last insert, delete or change of marks does.
  const plainRetain = (d: D): boolean => 'retain' in (d as object) && !('attributes' in (d as object))
  while (delta.length && plainRetain(delta[delta.length - 1] as D)) delta.pop()
  return delta.length ? { delta, local } : undefined
}

/** A map as change events compare it: each field's write (tag, author) and entry. */
export type MapState = ReadonlyMap<string, { readonly tag: string; readonly author: string; readonly entry: MapEntry }>

/** @internal */
export function mapState(map: CollabMap | undefined): MapState {
  const out = new Map<string, { tag: string; author: string; entry: MapEntry }>()
  if (!map) return out
  for (const [field, entry] of Object.entries(map.value())) {
    const writer = map.writerOf(field) as { tag: string; author: string }
    out.set(field, { ...writer, entry })
  }
  return out
}

/** Whether two writes are one (an unsigned draft's and the same write signed, under another tag), by author and content. */
function sameWrite(a: { author: string; entry: MapEntry }, b: { author: string; entry: MapEntry }): boolean {
  if (a.author !== b.author) return false
  if ('value' in a.entry || 'value' in b.entry) return 'value' in a.entry && 'value' in b.entry && bytesEqual(encode(a.entry.value), encode(b.entry.value))
  return a.entry.gen === b.entry.gen && JSON.stringify(a.entry.object) === JSON.stringify(b.entry.object)
}

/** @internal The change from one map state to the next, or undefined if no field changed. */
export function mapChange(before: MapState, after: MapState, local: boolean): MapChange | undefined {
  const keys = new Map<string, FieldChange>()
  const old = (e: MapEntry | undefined): unknown => (e && 'value' in e ? e.value : undefined)
  for (const [field, was] of before) {
    const is = after.get(field)
    if (!is) keys.set(field, { action: 'delete', oldValue: old(was.entry), author: undefined })
    else if (is.tag !== was.tag && !sameWrite(was, is)) keys.set(field, { action: 'update', oldValue: old(was.entry), author: is.author })
  }
  for (const [field, is] of after) if (!before.has(field)) keys.set(field, { action: 'add', oldValue: undefined, author: is.author })
  return keys.size ? { keys, local } : undefined
}
