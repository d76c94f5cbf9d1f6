import {
  CollabList,
  CollabMap,
  MAX_LIST_INSERT,
  MAX_TEXT_DELETE_RANGES,
  bytesEqual,
  encode,
  spendsRights,
  type AnyCrdt,
  type AnyOp,
  type BoundedCounterOp,
  type BoundedCounterParams,
  type CollabText,
  type CrdtTypeName,
  type Declaration,
  type ListEntry,
  type ListOp,
  type LWWRegister,
  type MapEntry,
  type MapOp,
  type ORSet,
  type RegisterValue,
  type RightsKind,
  type SetElement,
  type TextOp,
  type TextRange,
} from '@stead/core'
import { boundedSpend } from '../handles/bounded-counter-handle.ts'
import { registerStamp, type HeldUpdate } from '../handles/handles.ts'
import { MAX_TEXT_INSERT } from '../handles/text-handle.ts'
import type { DraftItem, Intent } from '../space/drafts.ts'
import type { Fate } from './fates.ts'
import { TextFormat } from './format-record.ts'

/** What a record reads and sends when it takes its edit back. */
export interface RevertContext {
  /** This client's author id. */
  readonly authorId: string
  prospective(key: string): AnyCrdt | undefined
  heldBack(key: string): readonly HeldUpdate[]
  /** What an element id of an unsigned draft became once signed. */
  signedId(id: string): string | undefined
  spendableRights(key: string, decl: Declaration, kind: RightsKind): number
  /** The time register writes are stamped with (the handles' `now`). */
  now(): number
  fate(item: DraftItem): Fate
  /** The prefix of the op tags of the envelope `item` went into, once signed. */
  prefixOf(item: DraftItem): string | undefined
  /** Queues a regular update as a handle does: its draft, or undefined if it could not be queued. */
  send(key: string, decl: Declaration, intent: Intent): DraftItem | undefined
  /** Queues a safe atomic group as a handle does (a bounded counter's claim and spend); false if it could not be queued. */
  sendGroup(items: ReadonlyArray<{ key: string; decl: Declaration; intent: Intent }>): boolean
  /** What undo and redo made again, for the edits that still name what was there before. */
  readonly redirects: Redirects
}

/** Most element ids, and set elements, whose successors are remembered. */
const MAX_REDIRECTS = 100_000
/** Most adds remembered for one set element (each undo of its removal adds one). */
const MAX_ADDS_PER_ELEMENT = 1000

/**
 * What taking a delete back made anew, as Yjs's `redone`: the new
 * character or element that stands for a deleted one, and the add that
 * stands for the adds a set removal removed. An older edit naming the old
 * one (an insert to take back, a move) follows it to the new one.
 * Bounded: past MAX_REDIRECTS the oldest are forgotten.
 */
export class Redirects {
  private readonly ids = new Map<string, string>()
  private readonly adds = new Map<string, Array<{ readonly tag: string; readonly to: DraftItem }>>()

  /** Element `from` of object `key` was made again as `to`. */
  element(key: string, from: string, to: string): void {
    this.ids.set(`${key}\u0000${from}`, to)
    if (this.ids.size > MAX_REDIRECTS) this.ids.delete(this.ids.keys().next().value as string)
  }

  /** What element `from` of `key` was made again as, if it was. */
  elementOf(key: string, from: string): string | undefined {
    return this.ids.get(`${key}\u0000${from}`)
  }

  /** The add that `tag` made of `element` was removed, and `to` added the element again. */
  add(key: string, element: SetElement, tag: string, to: DraftItem): void {
    const k = `${key}\u0000${typeof element}${element}`
    let list = this.adds.get(k)
    if (!list) this.adds.set(k, (list = []))
    list.push({ tag, to })
    if (list.length > MAX_ADDS_PER_ELEMENT) list.shift()
    if (this.adds.size > MAX_REDIRECTS) this.adds.delete(this.adds.keys().next().value as string)
  }

  /** The adds of `element` made again, by the tag of the add they stand for. */
  addsOf(key: string, element: SetElement): ReadonlyArray<{ readonly tag: string; readonly to: DraftItem }> {
    return this.adds.get(`${key}\u0000${typeof element}${element}`) ?? []
  }
}

/** What capturing an edit reads: the prospective state before the edit shows, and draft tags. */
export interface CaptureContext {
  prospective(key: string): AnyCrdt | undefined
  /** The draft tag of an item (given now if it has none: the views would give the same one). */
  tagOf(item: DraftItem): string
}

/**
 * One edit of this client, with what it takes to take it back later:
 * never a raw inverse replayed blindly, but a compensation computed
 * against the prospective state as it is when undo runs, out of ordinary
 * wire-legal ops (so it is ordered, audited and shown like any update).
 */
export interface EditRecord {
  readonly key: string
  /** The drafts it stands for (their fates say whether there is anything to take back). */
  readonly items: readonly DraftItem[]
  /**
   * Whether its revert can join an atomic group (see UndoManager's revert):
   * it sends what it computed from the state before, and reads nothing back
   * after sending (a re-insert reads the ids it made).
   */
  readonly groupable: boolean
  /** The safe group of several updates it was made in (a `space.safe` transaction): taken back together, atomically. */
  group?: object
  /** Takes in a later edit that continues this one (typing into one text), if it can. */
  absorb?(next: EditRecord): boolean
  /** Sends what takes the edit back; false if there is nothing left to take back. */
  revert(ctx: RevertContext): boolean
}

/** The record of one queued item (before it shows), or undefined for an edit nothing should take back (a claim of rights, a transfer). */
export function capture(item: DraftItem, ctx: CaptureContext): EditRecord | undefined {
  const view = ctx.prospective(item.key)
  if (view && view.type !== item.decl.type) return undefined
  return captures[item.decl.type](item, view, ctx)
}

type Capture = (item: DraftItem, view: AnyCrdt | undefined, ctx: CaptureContext) => EditRecord | undefined

const sameOp = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b)

/** Whether an own undecided update like `op` is held back from the object's prospective value (it would cross a bound there). */
function heldOwn(held: readonly HeldUpdate[], op: AnyOp): boolean {
  return held.some((h) => h.own && sameOp(h.op, op))
}

/**
 * Whether there is anything to take back of a counter update: not if it
 * was rejected (already reversed), nor while an invariant holds it back
 * from the prospective value (it shows nothing; the stable order decides
 * it, and a compensation shown now could outlive its rejection).
 */
function countable(ctx: RevertContext, item: DraftItem, op: AnyOp): boolean {
  const fate = ctx.fate(item)
  if (fate === 'rejected') return false
  return !(fate === 'undecided' && heldOwn(ctx.heldBack(item.key), op))
}

/** A PN-Counter update: taken back by the opposite amount. */
class CounterEdit implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly amount: number

  constructor(item: DraftItem, amount: number) {
    this.key = item.key
    this.items = [item]
    this.amount = amount
  }

  revert(ctx: RevertContext): boolean {
    const item = this.items[0] as DraftItem
    return countable(ctx, item, this.amount) && ctx.send(this.key, item.decl, -this.amount) !== undefined
  }
}

/** A bounded counter's increment or decrement: taken back by the opposite one, which spends rights (claimed from the pool if need be) or gains them. */
class BoundedEdit implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly op: readonly ['i' | 'd', number]

  constructor(item: DraftItem, op: readonly ['i' | 'd', number]) {
    this.key = item.key
    this.items = [item]
    this.op = op
  }

  revert(ctx: RevertContext): boolean {
    const item = this.items[0] as DraftItem
    if (!countable(ctx, item, this.op as BoundedCounterOp)) return false
    const [kind, n] = this.op
    const back = kind === 'i' ? 'd' : 'i'
    const params = (item.decl as { params: BoundedCounterParams }).params
    if (!spendsRights(params, back)) return ctx.send(this.key, item.decl, [back, n] as BoundedCounterOp) !== undefined
    // As the handle spends: within this client's rights a regular update, else a safe claim and spend the stable order decides.
    const items = boundedSpend(this.key, item.decl, back, n, ctx.spendableRights(this.key, item.decl, back))
    return items.length === 1 ? ctx.send(this.key, item.decl, (items[0] as { intent: Intent }).intent) !== undefined : ctx.sendGroup(items)
  }
}

/** Whether set tag `tag` was made by the add `item`: its draft tag until signed, then one of its envelope's (an add of this client in the same envelope counts too). */
function madeBy(tag: string, item: DraftItem, ctx: RevertContext): boolean {
  if (tag === item.tag) return true
  const prefix = ctx.prefixOf(item)
  return prefix !== undefined && tag.startsWith(`${prefix}:`)
}

/**
 * An OR-Set add: taken back by removing the tags it made (or the adds that
 * stand for it since an undo put the element back), never another
 * client's add of the same element.
 */
class SetAdd implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly element: SetElement

  constructor(item: DraftItem, element: SetElement) {
    this.key = item.key
    this.items = [item]
    this.element = element
  }

  revert(ctx: RevertContext): boolean {
    const item = this.items[0] as DraftItem
    const live = (ctx.prospective(this.key) as ORSet | undefined)?.tagsOf(this.element) ?? []
    const adds = [item]
    const again = ctx.redirects.addsOf(this.key, this.element)
    for (let i = 0; i < adds.length; i++) for (const r of again) if (!adds.includes(r.to) && madeBy(r.tag, adds[i] as DraftItem, ctx)) adds.push(r.to)
    const ours = live.filter((t) => adds.some((a) => madeBy(t, a, ctx)))
    if (ours.length === 0) return false
    const drafts = ours.filter((t) => adds.some((a) => a.tag === t))
    if (drafts.length === 0) return ctx.send(this.key, item.decl, ['r', this.element, ours]) !== undefined
    // A draft's tag is not on the wire yet: a removal of what is observed names it once signed, when every live add is ours.
    return ours.length === live.length && ctx.send(this.key, item.decl, { remove: this.element }) !== undefined
  }
}

/** An OR-Set removal: taken back by adding the element again (a new add, as Yjs re-inserts), unless it is back already. */
class SetRemove implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly element: SetElement
  /** The adds it removed, by tag. */
  private readonly tags: readonly string[]

  constructor(item: DraftItem, element: SetElement, tags: readonly string[]) {
    this.key = item.key
    this.items = [item]
    this.element = element
    this.tags = tags
  }

  revert(ctx: RevertContext): boolean {
    if ((ctx.prospective(this.key) as ORSet | undefined)?.has(this.element)) return false
    const to = ctx.send(this.key, (this.items[0] as DraftItem).decl, ['a', this.element])
    if (!to) return false
    // The new add stands for the removed ones: undoing one of them removes it.
    for (const tag of this.tags) ctx.redirects.add(this.key, this.element, tag, to)
    return true
  }
}

const sameValue = (a: RegisterValue | undefined, b: RegisterValue | undefined): boolean => a === b || (a !== undefined && b !== undefined && bytesEqual(encode(a), encode(b)))

/**
 * A register write: taken back by writing the value before it, if the
 * register still holds what this client wrote (else someone wrote since,
 * and their write stays, as Yjs leaves a key another user changed). A
 * register's first write is not taken back: it has no empty state to go
 * back to.
 */
class RegisterWrite implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly before: RegisterValue | undefined
  private readonly value: RegisterValue

  constructor(item: DraftItem, before: RegisterValue | undefined, value: RegisterValue) {
    this.key = item.key
    this.items = [item]
    this.before = before
    this.value = value
  }

  revert(ctx: RevertContext): boolean {
    const view = ctx.prospective(this.key) as LWWRegister | undefined
    if (!view || this.before === undefined || !sameValue(view.value(), this.value)) return false
    return ctx.send(this.key, (this.items[0] as DraftItem).decl, ['s', this.before, registerStamp(ctx.now(), view)]) !== undefined
  }
}

function sameEntry(a: MapEntry | undefined, b: MapEntry | undefined): boolean {
  if (a === undefined || b === undefined) return a === b
  if ('value' in a || 'value' in b) return 'value' in a && 'value' in b && sameValue(a.value, b.value)
  return a.gen === b.gen && sameOp(a.object, b.object)
}

/**
 * A write of a map field (a value, a nested object, a delete): taken back
 * by writing what the field held before (a nested object by its
 * generation, so it comes back with its content), if the field still
 * holds what this client wrote.
 */
class MapWrite implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly field: string
  private readonly before: MapEntry | undefined
  private readonly after: MapEntry | undefined

  constructor(item: DraftItem, field: string, before: MapEntry | undefined, after: MapEntry | undefined) {
    this.key = item.key
    this.items = [item]
    this.field = field
    this.before = before
    this.after = after
  }

  revert(ctx: RevertContext): boolean {
    const view = ctx.prospective(this.key) as CollabMap | undefined
    const now = view?.get(this.field)
    const ours = this.after === undefined ? now === undefined : view?.writerOf(this.field)?.author === ctx.authorId && sameEntry(now, this.after)
    if (!ours || sameEntry(now, this.before)) return false
    const stamp = (view ?? new CollabMap()).nextStamp()
    const b = this.before
    const op: MapOp = b === undefined ? ['x', this.field, stamp] : 'value' in b ? ['s', this.field, b.value, stamp] : ['o', this.field, b.object, stamp, b.gen]
    return ctx.send(this.key, (this.items[0] as DraftItem).decl, op) !== undefined
  }
}

/** Most redirects followed from one id (each undo of a delete adds one). */
const MAX_HOPS = 1000

/**
 * Element `id` of `key` as the view names it now: itself while its draft
 * is unsigned, else its signed id, or what an undo made again in its
 * place (followed); undefined if `has` knows none of them.
 */
export function present(key: string, id: string, has: (id: string) => boolean, ctx: RevertContext): string | undefined {
  let at: string | undefined = id
  for (let hops = 0; at !== undefined && hops < MAX_HOPS; hops++) {
    if (has(at)) return at
    const signed = ctx.signedId(at)
    if (signed !== undefined && has(signed)) return signed
    at = ctx.redirects.elementOf(key, at) ?? (signed === undefined ? undefined : ctx.redirects.elementOf(key, signed))
  }
  return undefined
}

/** Element ids (`${tag}.${k}`) as delete ranges, runs of one insert joined. */
function rangesOf(ids: readonly string[]): TextRange[] {
  const ranges: Array<[string, number, number]> = []
  for (const id of ids) {
    const dot = id.lastIndexOf('.')
    const tag = id.slice(0, dot)
    const k = Number(id.slice(dot + 1))
    const last = ranges[ranges.length - 1]
    if (last && last[0] === tag && last[1] + last[2] === k) last[2]++
    else ranges.push([tag, k, 1])
  }
  return ranges
}

/** Deletes `ids` in as few ops as the delete limit allows. */
function sendDeletes(ctx: RevertContext, item: DraftItem, ids: readonly string[]): boolean {
  const ranges = rangesOf(ids)
  if (ranges.length === 0) return false
  let sent = false
  for (let i = 0; i < ranges.length; i += MAX_TEXT_DELETE_RANGES) sent = ctx.send(item.key, item.decl, ['d', ranges.slice(i, i + MAX_TEXT_DELETE_RANGES)]) !== undefined || sent
  return sent
}

/** Runs of inserted elements (`${tag}.${k}` for k < length), a text's or a list's. */
interface Run {
  readonly tag: string
  readonly length: number
}

/**
 * Inserts into a text or list (typing joins into one record): taken back
 * by deleting the characters or elements they made that still show (by
 * id, draft ids resolved to signed ones); none of another client's.
 */
class SequenceInsert implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: DraftItem[]
  group?: object
  private readonly runs: Run[]
  private readonly visible: (view: AnyCrdt | undefined) => (id: string) => boolean

  constructor(item: DraftItem, run: Run, visible: (view: AnyCrdt | undefined) => (id: string) => boolean) {
    this.key = item.key
    this.items = [item]
    this.runs = [run]
    this.visible = visible
  }

  absorb(next: EditRecord): boolean {
    if (!(next instanceof SequenceInsert) || next.key !== this.key || next.group !== this.group) return false
    this.items.push(...next.items)
    this.runs.push(...next.runs)
    return true
  }

  revert(ctx: RevertContext): boolean {
    const has = this.visible(ctx.prospective(this.key))
    const ids: string[] = []
    for (const { tag, length } of this.runs) {
      for (let k = 0; k < length; k++) {
        const id = present(this.key, `${tag}.${k}`, has, ctx)
        if (id !== undefined) ids.push(id)
      }
    }
    return sendDeletes(ctx, this.items[0] as DraftItem, ids)
  }
}

const textVisible = (view: AnyCrdt | undefined) => (id: string): boolean => (view as CollabText | undefined)?.indexOfId(id) !== undefined

function listVisible(view: AnyCrdt | undefined): (id: string) => boolean {
  const ids = new Set(((view as CollabList | undefined)?.value() ?? []).map((e) => e.id))
  return (id) => ids.has(id)
}

/**
 * A text delete: taken back by inserting the deleted characters again as
 * new ones (as Yjs does: a delete is only ever taken back on the wire by
 * an insert), each run where its deleted characters still lie, so
 * concurrent edits around them keep their place. Characters showing again
 * (the delete was rejected) or gone are left out.
 */
class TextDelete implements EditRecord {
  readonly key: string
  readonly groupable = false
  readonly items: readonly DraftItem[]
  /** The deleted characters, in text order, each with the character that showed just before it ('' at the start). */
  private readonly chars: ReadonlyArray<{ readonly id: string; readonly ch: string; readonly prev: string }>

  constructor(item: DraftItem, chars: ReadonlyArray<{ id: string; ch: string; prev: string }>) {
    this.key = item.key
    this.items = [item]
    this.chars = chars
  }

  /**
   * Where a run that starts with `c` goes back in `view`: after the
   * character that showed before it, followed to what an undo made again
   * in its place (an undo of typing and its redo make new characters, and
   * the deleted one lies among the old ones); else where it lies.
   */
  private placeOf(view: CollabText, c: { readonly prev: string }, id: string, ctx: RevertContext): number {
    const lies = view.positionOf(id) ?? 0
    const signed = ctx.signedId(c.prev)
    // The character before it still shows: where the deleted one lies is right (others' typing around it included).
    if (c.prev === '' || view.indexOfId(c.prev) !== undefined || (signed !== undefined && view.indexOfId(signed) !== undefined)) return lies
    const again = present(this.key, c.prev, (i) => view.indexOfId(i) !== undefined, ctx)
    const at = again === undefined ? undefined : view.indexOfId(again)
    return at !== undefined ? at + 1 : lies
  }

  revert(ctx: RevertContext): boolean {
    const view = ctx.prospective(this.key) as CollabText | undefined
    if (!view) return false
    // Runs of characters still deleted with nothing showing between them: each goes back where its first one lies.
    const runs: Array<{ first: string; start: { readonly prev: string }; pos: number; ids: string[]; text: string[] }> = []
    let open = false
    for (const c of this.chars) {
      // The character itself: a deleted one keeps its place (what an undo made in its place shows, or is gone).
      const id = present(this.key, c.id, (i) => view.charOf(i) !== undefined && view.indexOfId(i) === undefined, ctx)
      if (id === undefined) {
        open = false
        continue
      }
      const pos = view.positionOf(id) ?? 0
      const last = runs[runs.length - 1]
      if (open && last && last.pos === pos) {
        last.ids.push(id)
        last.text.push(c.ch)
      } else runs.push({ first: id, start: c, pos, ids: [id], text: [c.ch] })
      open = true
    }
    let sent = false
    // Last run first: inserting it moves nothing before it.
    for (const run of runs.reverse()) {
      let pos = this.placeOf(ctx.prospective(this.key) as CollabText, run.start, run.first, ctx)
      for (let i = 0; i < run.text.length; i += MAX_TEXT_INSERT) {
        const chunk = run.text.slice(i, i + MAX_TEXT_INSERT)
        const draft = ctx.send(this.key, (this.items[0] as DraftItem).decl, (ctx.prospective(this.key) as CollabText).insertOp(pos, chunk.join('')))
        if (!draft) continue
        sent = true
        // The new characters stand for the deleted ones: an older insert to take back names them by the old ids.
        // Named by the draft's own ids, never read back by position: an insert an invariant holds back shows
        // nothing there, and what shows there is someone else's.
        chunk.forEach((_, k) => draft.tag !== undefined && ctx.redirects.element(this.key, run.ids[i + k] as string, `${draft.tag}.${k}`))
        pos += chunk.length
      }
    }
    return sent
  }
}

/** Where an element next to `before`/`after` (ids, '' for the start/end) goes in `ids`, else `index`. */
function placeBetween(ids: readonly string[], before: string, after: string, index: number, find: (id: string) => number | undefined): number {
  if (before === '') return 0
  const b = find(before)
  if (b !== undefined) return b + 1
  if (after === '') return ids.length
  const a = find(after)
  return a !== undefined ? a : Math.min(index, ids.length)
}

/**
 * A list delete: taken back by inserting the deleted elements again as
 * new ones next to the elements that were beside them; an element holding
 * a nested object comes back holding the same object, content and all.
 */
class ListDelete implements EditRecord {
  readonly key: string
  readonly groupable = false
  readonly items: readonly DraftItem[]
  private readonly entries: readonly ListEntry[]
  private readonly before: string
  private readonly after: string
  private readonly index: number

  constructor(item: DraftItem, entries: readonly ListEntry[], place: { before: string; after: string; index: number }) {
    this.key = item.key
    this.items = [item]
    this.entries = entries
    this.before = place.before
    this.after = place.after
    this.index = place.index
  }

  revert(ctx: RevertContext): boolean {
    const item = this.items[0] as DraftItem
    const view = (): CollabList => (ctx.prospective(this.key) as CollabList | undefined) ?? new CollabList()
    const ids = view().value().map((e) => e.id)
    const at = new Map(ids.map((id, i) => [id, i]))
    const has = (id: string): boolean => at.has(id)
    const gone = this.entries.filter((e) => present(this.key, e.id, has, ctx) === undefined)
    if (gone.length === 0) return false
    const find = (id: string): number | undefined => {
      const p = present(this.key, id, has, ctx)
      return p === undefined ? undefined : at.get(p)
    }
    let pos = placeBetween(ids, this.before, this.after, this.index, find)
    let sent = false
    for (let i = 0; i < gone.length; ) {
      const first = gone[i] as ListEntry
      const run: ListEntry[] = []
      // A run of plain values goes in one insert; an element holding an object alone (it comes back holding the same object).
      if ('object' in first) run.push(first)
      while (!('object' in first) && i + run.length < gone.length && run.length < MAX_LIST_INSERT && 'value' in (gone[i + run.length] as ListEntry)) run.push(gone[i + run.length] as ListEntry)
      i += run.length
      const op = 'object' in first ? view().insertObjectOp(pos, first.object, first.name) : view().insertOp(pos, run.map((e) => (e as { value: RegisterValue }).value))
      const draft = ctx.send(this.key, item.decl, op)
      if (!draft) continue
      sent = true
      // The new elements stand for the deleted ones (see Redirects), by the draft's own ids (see TextDelete).
      run.forEach((e, k) => draft.tag !== undefined && ctx.redirects.element(this.key, e.id, `${draft.tag}.${k}`))
      pos += run.length
    }
    return sent
  }
}

/** A list move: taken back by moving the element back beside its old neighbours, if it still stands where this client put it. */
class ListMove implements EditRecord {
  readonly key: string
  readonly groupable = true
  readonly items: readonly DraftItem[]
  private readonly element: string
  private readonly before: string
  private readonly after: string
  private readonly index: number

  constructor(item: DraftItem, element: string, place: { before: string; after: string; index: number }) {
    this.key = item.key
    this.items = [item]
    this.element = element
    this.before = place.before
    this.after = place.after
    this.index = place.index
  }

  revert(ctx: RevertContext): boolean {
    const view = ctx.prospective(this.key) as CollabList | undefined
    if (!view) return false
    const ids = view.value().map((e) => e.id)
    const at = new Map(ids.map((id, i) => [id, i]))
    const has = (id: string): boolean => at.has(id)
    const element = present(this.key, this.element, has, ctx)
    const from = element === undefined ? undefined : at.get(element)
    // Gone, or moved since by someone else: their move stays.
    if (from === undefined || view.placers()[from] !== ctx.authorId) return false
    const find = (id: string): number | undefined => {
      const p = present(this.key, id, has, ctx)
      return p === undefined ? undefined : at.get(p)
    }
    // Where it goes in the list without it, which is the index it ends at.
    const rest = ids.filter((_, i) => i !== from)
    const restAt = (id: string): number | undefined => {
      const i = find(id)
      return i === undefined || i === from ? undefined : i > from ? i - 1 : i
    }
    const to = placeBetween(rest, this.before, this.after, this.index, restAt)
    if (to === from) return false
    const op = view.moveOp(from, to)
    return op !== undefined && ctx.send(this.key, (this.items[0] as DraftItem).decl, op) !== undefined
  }
}

/** The neighbours of the run `from`..`to` of `ids` ('' past either end), and where it starts. */
function neighbours(ids: readonly string[], from: number, to: number): { before: string; after: string; index: number } {
  return { before: from > 0 ? (ids[from - 1] as string) : '', after: to + 1 < ids.length ? (ids[to + 1] as string) : '', index: from }
}

const captures: Record<CrdtTypeName, Capture> = {
  counter: (item) => (typeof item.intent === 'number' ? new CounterEdit(item, item.intent) : undefined),
  // Membership changes are not editing: an undo never takes one back; nor a deletion (its object's state is gone).
  policy: () => undefined,
  deletion: () => undefined,
  'bounded-counter': (item) => {
    const op = item.intent as BoundedCounterOp
    // Claims and transfers move rights, not the value: nothing to undo.
    return Array.isArray(op) && (op[0] === 'i' || op[0] === 'd') ? new BoundedEdit(item, op as readonly ['i' | 'd', number]) : undefined
  },
  set: (item, view, ctx) => {
    const intent = item.intent
    if (!Array.isArray(intent)) {
      const e = (intent as { remove: SetElement }).remove
      const tags = (view as ORSet | undefined)?.tagsOf(e) ?? []
      return tags.length ? new SetRemove(item, e, tags) : undefined
    }
    if (intent[0] === 'r') {
      const tags = (intent[2] as readonly string[]).filter((t) => (view as ORSet | undefined)?.tagsOf(intent[1] as SetElement).includes(t))
      return tags.length ? new SetRemove(item, intent[1] as SetElement, tags) : undefined
    }
    if (intent[0] !== 'a') return undefined
    ctx.tagOf(item)
    return new SetAdd(item, intent[1] as SetElement)
  },
  register: (item, view) => {
    const op = item.intent as readonly unknown[]
    return op[0] === 's' ? new RegisterWrite(item, (view as LWWRegister | undefined)?.value(), op[1] as RegisterValue) : undefined
  },
  map: (item, view) => {
    const op = item.intent as MapOp
    if (op[0] === 'u') return undefined
    const after: MapEntry | undefined = op[0] === 's' ? { value: op[2] } : op[0] === 'o' ? { object: op[2], gen: op[4] } : undefined
    return new MapWrite(item, op[1], (view as CollabMap | undefined)?.get(op[1]), after)
  },
  text: (item, view, ctx) => {
    const op = item.intent as TextOp
    if (op[0] === 'i') return new SequenceInsert(item, { tag: ctx.tagOf(item), length: [...op[4]].length }, textVisible)
    if (op[0] === 'm') return view ? TextFormat.capture(item, op, view as CollabText) : undefined
    if (op[0] !== 'd' || !view) return undefined
    const text = view as CollabText
    const chars: Array<{ id: string; ch: string; prev: string }> = []
    const ids = text.visibleIds()
    for (const [tag, from, count] of op[1]) {
      for (let k = from; k < from + count; k++) {
        const c = text.charOf(`${tag}.${k}`)
        const at = text.indexOfId(`${tag}.${k}`)
        if (c) chars.push({ id: `${tag}.${k}`, ch: c.ch, prev: at === undefined || at === 0 ? '' : (ids[at - 1] as string) })
      }
    }
    return chars.length ? new TextDelete(item, chars) : undefined
  },
  list: (item, view, ctx) => {
    const op = item.intent as ListOp
    if (op[0] === 'i' || op[0] === 'o') return new SequenceInsert(item, { tag: ctx.tagOf(item), length: op[0] === 'i' ? op[4].length : 1 }, listVisible)
    const entries = (view as CollabList | undefined)?.value() ?? []
    const ids = entries.map((e) => e.id)
    if (op[0] === 'm') {
      const from = ids.indexOf(op[1])
      return from < 0 ? undefined : new ListMove(item, op[1], neighbours(ids, from, from))
    }
    if (op[0] !== 'd') return undefined
    const named = new Set<string>()
    for (const [tag, from, count] of op[1]) for (let k = from; k < from + count; k++) named.add(`${tag}.${k}`)
    const at = entries.flatMap((e, i) => (named.has(e.id) ? [i] : []))
    if (at.length === 0) return undefined
    return new ListDelete(item, at.map((i) => entries[i] as ListEntry), neighbours(ids, at[0] as number, at[at.length - 1] as number))
  },
}
