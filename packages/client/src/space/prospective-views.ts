import { createCrdt, hasInvariants, isDeletion, type AnyCrdt, type AnyOp, type Declaration } from '@stead/core'
import { applyIntent, type DraftItem } from './drafts.ts'
import { GuardedViews, type GuardedSource } from './guarded.ts'
import type { HeldUpdate } from '../handles/handles.ts'
import { ViewCache } from './view-cache.ts'

/**
 * What handles show as `value`: each object's stable state, plus the
 * pending envelopes and this client's drafts on top. Views are computed
 * when read and kept until something underneath changes; objects with
 * invariants (and those atomic groups tie to them) get guarded views,
 * which hold back what would break an invariant.
 */
export class ProspectiveViews {
  private readonly cache = new ViewCache()
  /** Views of the stable state plus this client's own updates only (a bounded counter's spendable rights), dropped with the others. */
  private readonly own = new Map<string, AnyCrdt>()
  private readonly guarded: GuardedViews
  private readonly source: GuardedSource

  constructor(source: GuardedSource) {
    this.source = source
    this.guarded = new GuardedViews(source)
  }

  view(key: string): AnyCrdt | undefined {
    const cached = this.cache.get(key)
    if (cached) return cached
    const decl = this.source.declarationOf(key)
    if (decl && this.guarded.guards(key, decl)) return this.guardedView(key)
    const base = this.source.replica().prospective(key)
    const drafts = this.source.drafts()
    const drafted = drafts.some((d) => d.keys.has(key))
    if (!drafted) return base
    let view: AnyCrdt | undefined = base?.clone()
    for (const batch of drafts) {
      for (const item of batch.items()) {
        if (item.key !== key) continue
        // A deletion empties the key; what follows it starts afresh.
        if (isDeletion(item.decl)) {
          view = undefined
          continue
        }
        view ??= createCrdt(item.decl)
        if (view.type !== item.decl.type) continue
        applyIntent(view, item, this.source.authorId, this.source.names)
      }
    }
    if (view) this.cache.set(key, view)
    return view
  }

  /** Updates held back from `key`'s prospective value (see guardedView). */
  heldBack(key: string): readonly HeldUpdate[] {
    if (!this.cache.has(key)) this.view(key)
    return this.cache.heldBack(key) ?? []
  }

  /** The view of `key` that only this client's own updates shape, made by `compute` when none is kept; callers only read it. */
  ownView<T extends AnyCrdt>(key: string, compute: () => T): T {
    let view = this.own.get(key)
    if (!view) this.own.set(key, (view = compute()))
    return view as T
  }

  /** New drafts of this client join the views kept (`several`: one group). */
  show(items: readonly DraftItem[], several: boolean): void {
    for (const item of items) {
      this.own.delete(item.key)
      // A group is shown all or nothing: its views are computed again together (see guardedView); a deletion empties its view.
      if (several || isDeletion(item.decl)) {
        this.drop(item.key)
        continue
      }
      const view = this.cache.get(item.key)
      if (view && !applyIntent(view, item, this.source.authorId, this.source.names, hasInvariants(item.decl))) {
        this.cache.heldBack(item.key)?.push({ op: item.intent as AnyOp, own: true })
      }
    }
  }

  /** Drops a kept view, and every view computed together with it. */
  drop(key: string): void {
    this.cache.drop(key)
    this.own.delete(key)
  }

  /** Computes the views of guarded objects (and the objects tied to them) and keeps them with what each holds back. */
  private guardedView(key: string): AnyCrdt {
    const { keys, views, held } = this.guarded.compute(key)
    const replica = this.source.replica()
    this.cache.setJoint(keys, new Map([...keys].map((k) => [k, views.get(k) ?? replica.stable(k)?.clone()])), held)
    return this.cache.get(key) ?? createCrdt(this.source.declarationOf(key) as Declaration)
  }
}
