import {
  asGeneric,
  compactOps,
  type AnyCrdt,
  type AnyOp,
  type Declaration,
  type ObjectUpdate,
  type ORSet,
  type SafeGroup,
  type SetElement,
  type SetOp,
} from '@stead/core'
import type { SafeResult, UpdateResult } from './types.ts'

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

/** The operation an intent makes on `crdt` as it stands (a removal names the tags it sees). */
function opOf(crdt: AnyCrdt, item: DraftItem): AnyOp {
  return isRemove(item.intent) ? (['r', item.intent.remove, (crdt as ORSet).tagsOf(item.intent.remove)] as SetOp) : (item.intent as AnyOp)
}

/**
 * Applies an intent to a throwaway prospective view (tags of unsigned ops
 * are local). With `checked`, only if the view's invariants still hold
 * afterwards; returns whether it applied.
 */
export function applyIntent(crdt: AnyCrdt, item: DraftItem, replica: string, tag: string, checked = false): boolean {
  const op = opOf(crdt, item)
  if (checked) return asGeneric(crdt).tryApply(op, { replica, tag }).ok
  asGeneric(crdt).apply(op, { replica, tag })
  return true
}

function isRemove(intent: Intent): intent is { readonly remove: SetElement } {
  return typeof intent === 'object' && intent !== null && !Array.isArray(intent) && 'remove' in intent
}

/**
 * Turns a draft batch into envelope content: regular operations grouped and
 * compacted per object (a removal cancels adds of the same element earlier
 * in the batch and removes the tags already observed), then safe groups in
 * order. `observed` gives the tags of an element in the signed prospective state.
 */
export function compileBatch(batch: DraftBatch, observed: (key: string, e: SetElement) => string[]): { updates: ObjectUpdate[]; safe: SafeGroup[] } {
  const byKey = new Map<string, { decl: Declaration; ops: AnyOp[] }>()
  for (const item of batch.regular) {
    let entry = byKey.get(item.key)
    if (!entry) byKey.set(item.key, (entry = { decl: item.decl, ops: [] }))
    if (isRemove(item.intent)) {
      const e = item.intent.remove
      entry.ops = entry.ops.filter((op) => !(Array.isArray(op) && op[0] === 'a' && op[1] === e))
      const tags = observed(item.key, e)
      if (tags.length > 0) entry.ops.push(['r', e, tags])
    } else entry.ops.push(item.intent)
  }
  const updates: ObjectUpdate[] = []
  for (const [key, { decl, ops }] of byKey) {
    const compacted = compactOps(decl, ops)
    if (compacted.length > 0) updates.push({ key, decl, ops: compacted })
  }
  const safe: SafeGroup[] = batch.safe.map((g) => ({
    atomic: true,
    updates: g.items.map((item) => ({
      key: item.key,
      decl: item.decl,
      op: isRemove(item.intent) ? (['r', item.intent.remove, observed(item.key, item.intent.remove)] as SetOp) : item.intent,
    })),
  }))
  return { updates, safe }
}
