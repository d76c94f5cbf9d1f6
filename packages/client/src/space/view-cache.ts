import type { AnyCrdt } from '@stead/core'
import type { HeldUpdate } from '../handles/handles.ts'

/**
 * The prospective views a space computed (stable state plus what is
 * pending and drafted), kept until something underneath changes. A
 * guarded object's view comes with the updates held back from it (they
 * would break an invariant), and objects an atomic group ties together are
 * computed and dropped together.
 */
export class ViewCache {
  private readonly views = new Map<string, AnyCrdt>()
  private readonly held = new Map<string, HeldUpdate[]>()
  /** Keys whose views were computed together: dropping one drops them all. */
  private readonly joint = new Map<string, ReadonlySet<string>>()

  get(key: string): AnyCrdt | undefined {
    return this.views.get(key)
  }

  has(key: string): boolean {
    return this.views.has(key)
  }

  set(key: string, view: AnyCrdt): void {
    this.views.set(key, view)
  }

  /** Views computed together (`keys`), each with what it holds back. */
  setJoint(keys: ReadonlySet<string>, views: ReadonlyMap<string, AnyCrdt | undefined>, held: ReadonlyMap<string, HeldUpdate[]>): void {
    for (const k of keys) {
      const v = views.get(k)
      if (v) this.views.set(k, v)
      this.held.set(k, held.get(k) ?? [])
      this.joint.set(k, keys)
    }
  }

  /** Updates held back from `key`'s cached view (none known when it has none). */
  heldBack(key: string): HeldUpdate[] | undefined {
    return this.held.get(key)
  }

  /** Drops `key`'s view, and every view computed together with it. */
  drop(key: string): void {
    for (const k of this.joint.get(key) ?? [key]) {
      this.views.delete(k)
      this.held.delete(k)
      this.joint.delete(k)
    }
  }
}
