import { envelopeUnits, unitTagPrefix, type Decision, type Envelope } from '@stead/core'
import type { DraftBatch, DraftItem } from '../space/drafts.ts'
import type { UpdateResult } from '../types.ts'

/**
 * What became of an edit: still `undecided` (it shows prospectively, unless
 * an invariant holds it back there), `in-effect` (committed, or cancelled
 * out by edits of its own batch), or `rejected` (the stable order rejected
 * it, its envelope was refused or lost its slot, or it was never stored):
 * the prospective state no longer shows it, and nothing should take it back.
 */
export type Fate = 'undecided' | 'in-effect' | 'rejected'

/** The replica's word on an envelope, for verdicts this follower did not hear (a delta decided it, say). */
export interface EnvelopeStates {
  isPending(idHex: string): boolean
  hasCommitted(idHex: string): boolean
}

/** Envelopes whose verdicts are awaited at once. */
const MAX_ENVELOPES = 4096

interface Followed {
  readonly safe: boolean
  /** The envelope it went into (hex id) and the prefix of that envelope's op tags. */
  env?: string
  prefix?: string
  /** The audit unit of its safe group, when this tab compiled the batch (a following tab's leader adds its own groups). */
  unit?: number
  outcome?: 'in-effect' | 'rejected'
}

/**
 * Follows tracked edits from draft to decision: which envelope each went
 * into (the space says when a batch is signed) and what the audit decided
 * of the unit that carries it. Regular edits are judged by their object's
 * units in the envelope (compaction folds an object's counter updates into
 * one unit), safe ones by their group's unit or their promise.
 */
export class Fates {
  /** Weak: an edit is followed while a stack item (or a later one that continues it) holds it. */
  private readonly followed = new WeakMap<DraftItem, Followed>()
  /** The followed edits of each envelope not decided yet (oldest first; bounded: a refused envelope is never decided here). */
  private readonly byEnv = new Map<string, Set<DraftItem>>()
  private readonly states: EnvelopeStates

  constructor(states: EnvelopeStates) {
    this.states = states
  }

  /** Starts following an edit just queued; `queued` is its update's promise. */
  follow(item: DraftItem, safe: boolean, queued: Promise<UpdateResult>): void {
    const f: Followed = { safe }
    this.followed.set(item, f)
    queued.then(
      (r) => {
        if (r.status === 'rejected') f.outcome = 'rejected'
        else if (r.status === 'committed') f.outcome ??= 'in-effect'
      },
      // Never stored (the batch failed, the space closed before it was decided): it does not show.
      () => void (f.outcome ??= 'rejected'),
    )
  }

  /** A draft batch became envelope `env`, or cancelled out (undefined). */
  signed(batch: DraftBatch, env: Envelope | undefined): void {
    const regularUnits = env ? env.updates.reduce((n, u) => n + u.ops.length, 0) : 0
    // This tab compiled the batch itself when its safe groups are the envelope's (a leader tab adds its own to a follower's).
    const ownGroups = env !== undefined && env.safe.length === batch.safe.length
    const seen = (item: DraftItem, unit: number | undefined): void => {
      const f = this.followed.get(item)
      if (!f) return
      if (!env) {
        // Everything in the batch cancelled out (+1 then -1): it is all in effect, as nothing.
        f.outcome ??= 'in-effect'
        return
      }
      f.env = env.idHex
      f.prefix = unitTagPrefix(env.id)
      if (unit !== undefined) f.unit = unit
      let items = this.byEnv.get(env.idHex)
      if (!items) this.byEnv.set(env.idHex, (items = new Set()))
      items.add(item)
      // Past the bound the oldest go: their fate is then read from the replica (see fate).
      if (this.byEnv.size > MAX_ENVELOPES) this.byEnv.delete(this.byEnv.keys().next().value as string)
    }
    for (const item of batch.regular) seen(item, undefined)
    batch.safe.forEach((g, i) => {
      for (const item of g.items) seen(item, ownGroups ? regularUnits + i : undefined)
    })
  }

  /** The audit decided envelopes: the verdicts on the followed edits in them. */
  decided(decisions: readonly Decision[]): void {
    for (const d of decisions) {
      const items = this.byEnv.get(d.env.idHex)
      // A gap or a duplicate is no outcome: the envelope is sent again, or its first copy decides.
      if (!items || (d.kind === 'dropped' && (d.reason === 'gap' || d.reason === 'duplicate'))) continue
      this.byEnv.delete(d.env.idHex)
      for (const item of items) {
        const f = this.followed.get(item)
        if (!f) continue
        if (d.kind !== 'committed') {
          f.outcome = 'rejected'
          continue
        }
        const rejected = f.safe ? (f.unit === undefined ? undefined : d.units[f.unit]?.status === 'rejected') : this.regularRejected(d, item.key)
        // A following tab's safe group: its promise says.
        if (rejected !== undefined) f.outcome = rejected ? 'rejected' : 'in-effect'
      }
    }
  }

  /** What became of an edit (see Fate). */
  fate(item: DraftItem): Fate {
    const f = this.followed.get(item)
    if (!f) return 'undecided'
    if (f.outcome) return f.outcome
    if (f.env === undefined || this.states.isPending(f.env)) return 'undecided'
    // Decided where this follower did not hear the units (a delta, a tab's lead changing hands).
    return this.states.hasCommitted(f.env) ? 'in-effect' : 'rejected'
  }

  /** The prefix of the op tags of the envelope the edit went into, once it is signed. */
  prefixOf(item: DraftItem): string | undefined {
    return this.followed.get(item)?.prefix
  }

  /** Whether a regular update of `key` in a committed envelope was rejected: its object's units there (an object's counter updates are one unit). */
  private regularRejected(d: Extract<Decision, { kind: 'committed' }>, key: string): boolean {
    const units = envelopeUnits(d.env)
    return d.units.some((u) => {
      const unit = units[u.unit]
      return u.status === 'rejected' && unit?.kind === 'op' && unit.key === key
    })
  }
}
