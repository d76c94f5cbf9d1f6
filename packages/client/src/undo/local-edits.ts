import type { Decision, Envelope } from '@stead/core'
import type { DraftBatch, DraftItem } from '../space/drafts.ts'
import type { UpdateResult } from '../types.ts'

/**
 * What hears of a space's local edits (its undo managers): each edit as it
 * is made, the envelope its draft went into, and how the stable order
 * decided that envelope.
 */
export interface EditListener {
  /**
   * `items` are about to be queued by `origin` (undefined: the app; else
   * the undo manager that undoes or redoes). The prospective state does not
   * show them yet, so a listener reads there what they change. Returns what
   * to call once they are queued, with the promise of their update (or
   * undefined when queueing threw: they never happened).
   */
  editing(items: readonly DraftItem[], safe: boolean, origin: object | undefined): ((queued: Promise<UpdateResult> | undefined) => void) | undefined
  /** A draft batch became envelope `env` (undefined: it cancelled out, nothing was sent). */
  signed(batch: DraftBatch, env: Envelope | undefined): void
  /** The audit decided envelopes (this client's among others'); the prospective state already shows it. */
  decided(decisions: readonly Decision[]): void
}

/**
 * The space's local edits as its listeners hear them: a small registry, so
 * the space only says where edits pass and listeners decide what to keep.
 * Listeners run inside the app's update calls: one that throws is reported
 * (`failed`) and the edit goes on.
 */
export class LocalEdits {
  private readonly listeners = new Set<EditListener>()
  private readonly failed: (err: unknown) => void
  /** Who makes the edits now: an undo manager while it undoes or redoes, else undefined (the app). */
  private origin: object | undefined

  constructor(failed: (err: unknown) => void) {
    this.failed = failed
  }

  /** Adds a listener; returns the function that removes it. */
  listen(listener: EditListener): () => void {
    this.listeners.add(listener)
    return () => void this.listeners.delete(listener)
  }

  /** Runs `edits` with `origin` named as the maker of the edits they queue (until they return: then the outer one again). */
  as<T>(origin: object, edits: () => T): T {
    const outer = this.origin
    this.origin = origin
    try {
      return edits()
    } finally {
      this.origin = outer
    }
  }

  /** Queues `items` with `queue`, telling the listeners before (what they change) and after (the promise). */
  queue<T extends UpdateResult>(items: readonly DraftItem[], safe: boolean, queue: () => Promise<T>): Promise<T> {
    if (this.listeners.size === 0) return queue()
    const after: Array<(queued: Promise<UpdateResult> | undefined) => void> = []
    for (const l of this.listeners) {
      const then = this.guard(() => l.editing(items, safe, this.origin))
      if (then) after.push(then)
    }
    let p: Promise<T>
    try {
      p = queue()
    } catch (err) {
      for (const then of after) this.guard(() => then(undefined))
      throw err
    }
    for (const then of after) this.guard(() => then(p))
    return p
  }

  signed(batch: DraftBatch, env: Envelope | undefined): void {
    for (const l of this.listeners) this.guard(() => l.signed(batch, env))
  }

  decided(decisions: readonly Decision[]): void {
    if (decisions.length === 0) return
    for (const l of this.listeners) this.guard(() => l.decided(decisions))
  }

  private guard<T>(fn: () => T): T | undefined {
    try {
      return fn()
    } catch (err) {
      this.failed(err)
      return undefined
    }
  }
}
