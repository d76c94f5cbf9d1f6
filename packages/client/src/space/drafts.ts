import {
  asGeneric,
  compactOps,
  joinRun,
  namesElements,
  renameOp,
  runLength,
  type AnyCrdt,
  type AnyOp,
  type Declaration,
  type ObjectUpdate,
  type ORSet,
  type SafeGroup,
  type SetElement,
  type SetOp,
} from '@stead/core'
import type { DraftPlaces } from './draft-ids.ts'
import type { SafeResult, UpdateResult } from '../types.ts'

/**
 * What a handle asks for. Almost always the operation itself; a set removal
 * is an intent because the tags it removes are only known when the
 * envelope is signed (an add in the same envelope has no tag yet).
 */
export type Intent = AnyOp | { readonly remove: SetElement }

export interface DraftItem {
  readonly key: string
  readonly decl: Declaration
  readonly intent: Intent
  /** Its draft tag once it has one (see DraftIds): ops made against views name its text characters by it. */
  tag?: string
}

export interface Deferred<T> {
  readonly promise: Promise<T>
  resolve(v: T): void
  reject(e: unknown): void
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (v: T) => void
  let reject!: (e: unknown) => void
  const promise = new Promise<T>((ok, fail) => {
    resolve = ok
    reject = fail
  })
  // Whoever awaits it sees a rejection; one nobody awaits (a fire-and-forget update when the
  // client closes) must not take the app down as an unhandled rejection.
  promise.catch(() => undefined)
  return { promise, resolve, reject }
}

export interface DraftSafeGroup {
  readonly items: readonly DraftItem[]
  readonly waiter: Deferred<SafeResult>
}

/** Operations made since the last envelope, shown prospectively until they are signed into one. */
export class DraftBatch {
  readonly regular: DraftItem[] = []
  readonly safe: DraftSafeGroup[] = []
  readonly stored: Array<Deferred<UpdateResult>> = []
  readonly keys = new Set<string>()
  /** Updates other tabs forwarded into this batch (this tab leads): their request id and the indexes of their safe groups in `safe`. */
  readonly requests: Array<{ readonly id: string; readonly safe: readonly number[] }> = []

  get size(): number {
    return this.regular.length + this.safe.reduce((n, g) => n + g.items.length, 0)
  }

  /** Every item, in the order the audit will run them: regular ones, then safe groups. */
  *items(): Iterable<DraftItem> {
    yield* this.regular
    for (const g of this.safe) yield* g.items
  }
}

/**
 * The operation an intent makes on `crdt` as it stands: a removal names the
 * tags it sees; an op naming elements of drafts signed since it was made
 * names them as signed (the view holds them under their real tags now).
 */
function opOf(crdt: AnyCrdt, item: DraftItem, names: DraftNames): AnyOp {
  if (isRemove(item.intent)) return ['r', item.intent.remove, (crdt as ORSet).tagsOf(item.intent.remove)] as SetOp
  return namesElements(item.decl) ? renameOp(item.decl, item.intent, (t) => names.renamed(t)) : item.intent
}

/**
 * Applies an intent to a throwaway prospective view, under the item's own
 * draft tag (see DraftIds). With `checked`, only if the view's invariants
 * still hold afterwards; returns whether it applied.
 */
export function applyIntent(crdt: AnyCrdt, item: DraftItem, replica: string, names: DraftNames, checked = false): boolean {
  const op = opOf(crdt, item, names)
  const ctx = { replica, tag: names.tagOf(item) }
  if (checked) return asGeneric(crdt).tryApply(op, ctx).ok
  asGeneric(crdt).apply(op, ctx)
  return true
}

function isRemove(intent: Intent): intent is { readonly remove: SetElement } {
  return typeof intent === 'object' && intent !== null && !Array.isArray(intent) && 'remove' in intent
}

/** What compileBatch needs to know of draft ids (see DraftIds). */
export interface DraftNames {
  tagOf(item: DraftItem): string
  renamed(tag: string): { tag: string; shift: number } | undefined
}

/**
 * Turns a draft batch into envelope content: regular operations grouped and
 * compacted per object (a removal cancels adds of the same element earlier
 * in the batch and removes the tags already observed; text typed as runs
 * becomes one insert), then safe groups in order. `observed` gives the tags
 * of an element in the signed prospective state. Text ops name characters
 * by the draft tags of the ops that made them: those of this batch become
 * `^n` (op n of this envelope), those of batches signed already their real
 * tags. `places` says where each draft went, for DraftIds.signedAs.
 */
export function compileBatch(batch: DraftBatch, observed: (key: string, e: SetElement) => string[], names: DraftNames): { updates: ObjectUpdate[]; safe: SafeGroup[]; places: DraftPlaces } {
  const byKey = new Map<string, { decl: Declaration; ops: AnyOp[]; drafts: Map<string, { i: number; shift: number }> }>()
  for (const item of batch.regular) {
    let entry = byKey.get(item.key)
    if (!entry) byKey.set(item.key, (entry = { decl: item.decl, ops: [], drafts: new Map() }))
    if (isRemove(item.intent)) {
      const e = item.intent.remove
      entry.ops = entry.ops.filter((op) => !(Array.isArray(op) && op[0] === 'a' && op[1] === e))
      const tags = observed(item.key, e)
      if (tags.length > 0) entry.ops.push(['r', e, tags])
    } else if (namesElements(item.decl)) addNamingDraft(entry, item.decl, item.intent, names.tagOf(item))
    else entry.ops.push(item.intent)
  }
  const updates: Array<{ key: string; decl: Declaration; ops: AnyOp[]; drafts: Map<string, { i: number; shift: number }> }> = []
  for (const [key, { decl, ops, drafts }] of byKey) {
    const compacted = compactOps(decl, ops)
    if (compacted.length > 0) updates.push({ key, decl, ops: compacted, drafts })
  }
  // Where each draft of this batch went: op n of the envelope (regular ops first, then safe ones).
  const places = new Map<string, { n: number; shift: number }>()
  let n = 0
  for (const u of updates) {
    for (const [draft, at] of u.drafts) places.set(draft, { n: n + at.i, shift: at.shift })
    n += u.ops.length
  }
  const safeItems = batch.safe.flatMap((g) => g.items)
  safeItems.forEach((item, i) => places.set(names.tagOf(item), { n: n + i, shift: 0 }))
  const rename = (tag: string): { tag: string; shift: number } | undefined => {
    const here = places.get(tag)
    return here ? { tag: `^${here.n}`, shift: here.shift } : names.renamed(tag)
  }
  const named = (decl: Declaration, op: AnyOp): AnyOp => renameOp(decl, op, rename)
  const safe: SafeGroup[] = batch.safe.map((g) => ({
    atomic: true,
    updates: g.items.map((item) => ({
      key: item.key,
      decl: item.decl,
      op: isRemove(item.intent) ? (['r', item.intent.remove, observed(item.key, item.intent.remove)] as SetOp) : named(item.decl, item.intent),
    })),
  }))
  return { updates: updates.map(({ key, decl, ops }) => ({ key, decl, ops: ops.map((op) => named(decl, op)) })), safe, places }
}

/** Adds a draft of an element-naming type (text, list) to its object's ops: typing that continues the last insert joins its run. */
function addNamingDraft(entry: { ops: AnyOp[]; drafts: Map<string, { i: number; shift: number }> }, decl: Declaration, op: AnyOp, tag: string): void {
  const i = entry.ops.length - 1
  const last = entry.ops[i]
  const length = last === undefined ? 0 : runLength(decl, last)
  if (last !== undefined && length > 0) {
    // The run's last element is the last one of the draft placed furthest into it.
    let end: { tag: string; shift: number } | undefined
    for (const [t, at] of entry.drafts) if (at.i === i && (!end || at.shift > end.shift)) end = { tag: t, shift: at.shift }
    const joined = end && joinRun(decl, last, `${end.tag}.${length - 1 - end.shift}`, op)
    if (joined) {
      entry.drafts.set(tag, { i, shift: length })
      entry.ops[i] = joined
      return
    }
  }
  entry.drafts.set(tag, { i: entry.ops.length, shift: 0 })
  entry.ops.push(op)
}
