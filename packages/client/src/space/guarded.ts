import { asGeneric, createCrdt, envelopeUnits, type AnyCrdt, type AnyOp, type Declaration, type Envelope, type PendingMark, type ReliableReplica } from '@stead/core'
import { hasInvariants, isDeletion } from '@stead/core'
import { applyIntent, type DraftBatch, type DraftItem, type DraftNames } from './drafts.ts'
import type { HeldUpdate } from '../handles/handles.ts'

/** What guarded views read from their space. */
export interface GuardedSource {
  /** The replica the views stand on (a tab taking over the lead replaces it). */
  replica(): ReliableReplica
  /** Drafts not yet signed, oldest first. */
  drafts(): readonly DraftBatch[]
  readonly authorId: string
  declarationOf(key: string): Declaration | undefined
  /** The draft tags of unsigned ops and what they became once signed (see DraftIds). */
  readonly names: DraftNames
}

/** Prospective views of objects that atomic groups tie together, and what was held back from each. */
export interface GuardedResult {
  readonly keys: ReadonlySet<string>
  readonly views: ReadonlyMap<string, AnyCrdt>
  readonly held: ReadonlyMap<string, HeldUpdate[]>
}

type Items = ReadonlyArray<{ readonly key: string; readonly decl: Declaration }>

/** One op of a unit, ready to try on a view. */
interface Step {
  readonly key: string
  readonly decl: Declaration
  readonly op: AnyOp
  readonly own: boolean
  apply(view: AnyCrdt, checked: boolean): boolean
}

/** Views over the stable state plus the pending envelopes, for `keys`; drafts go on top of copies. */
interface PendingPart {
  readonly replica: ReliableReplica
  mark: PendingMark
  readonly keys: ReadonlySet<string>
  readonly views: Map<string, AnyCrdt>
  readonly held: Map<string, HeldUpdate[]>
}

/** Atomic groups of pending envelopes that include a key. */
interface PendingTies {
  readonly replica: ReliableReplica
  mark: PendingMark
  readonly groups: Items[]
}

/** Keys atomic groups tie together are bounded, to keep a view cheap. */
const MAX_TIED_KEYS = 64

/**
 * Prospective views of objects with invariants, and of the objects atomic
 * groups tie to them: the stable state, then every undecided update
 * (received, signed, drafted) in the order this client has them, except
 * those that would break an invariant there, which are held back
 * (`handle.pending`) until the stable order decides. An atomic group is
 * shown all or nothing, on every object it touches. So a value an
 * invariant forbids is never shown, a transfer never shows half of itself,
 * and once nothing is pending the views are the stable state again (G5).
 *
 * The part built from the stable state and the pending envelopes is kept
 * and extended as envelopes arrive (a view costs the drafts and the new
 * envelopes, not every pending one); it is rebuilt when the replica's
 * pending epoch changes (a commit, a discard, an expiry).
 */
export class GuardedViews {
  private readonly source: GuardedSource
  private readonly parts = new Map<string, PendingPart>()
  private readonly ties = new Map<string, PendingTies>()

  constructor(source: GuardedSource) {
    this.source = source
  }

  /** Whether `key` needs a guarded view: it has invariants, or an atomic group ties it to an object that has. */
  guards(key: string, decl: Declaration): boolean {
    return hasInvariants(decl) || this.groupsWith(key).some((items) => items.some((i) => hasInvariants(i.decl)))
  }

  /** The views of `key` and of every key tied to it, drafts included. The views are the caller's to keep and change. */
  compute(key: string): GuardedResult {
    const part = this.pendingPart(this.tiedKeys(key))
    const views = new Map<string, AnyCrdt>()
    for (const [k, v] of part.views) views.set(k, v.clone())
    const held = new Map<string, HeldUpdate[]>([...part.keys].map((k) => [k, [...(part.held.get(k) ?? [])]]))
    const draftStep = (i: DraftItem): Step => ({
      key: i.key,
      decl: i.decl,
      op: i.intent as AnyOp,
      own: true,
      apply: (v, checked) => applyIntent(v, i, this.source.authorId, this.source.names, checked),
    })
    for (const batch of this.source.drafts()) {
      // Only the drafts on these keys (a batch holds up to maxBatchOps items on any keys).
      for (const i of batch.regular) if (part.keys.has(i.key)) this.applyUnit(part.keys, views, held, [draftStep(i)])
      for (const g of batch.safe) if (g.items.some((i) => part.keys.has(i.key))) this.applyUnit(part.keys, views, held, g.items.map(draftStep))
    }
    return { keys: part.keys, views, held }
  }

  /** Atomic groups (pending or drafted) of more than one item that include `key`. */
  private groupsWith(key: string): Items[] {
    const out = [...this.pendingGroupsWith(key)]
    for (const batch of this.source.drafts()) for (const g of batch.safe) if (g.items.length > 1 && g.items.some((i) => i.key === key)) out.push(g.items)
    return out
  }

  private pendingGroupsWith(key: string): readonly Items[] {
    const replica = this.source.replica()
    let t = this.ties.get(key)
    const arrived = t && t.replica === replica ? replica.arrivedSince(t.mark, [key]) : undefined
    if (!t || !arrived) {
      t = { replica, mark: replica.pendingMark(), groups: [] }
      this.ties.set(key, t)
      for (const env of replica.pendingTouching(key)) t.groups.push(...atomicGroupsWith(env, key))
    } else {
      for (const env of arrived) t.groups.push(...atomicGroupsWith(env, key))
      t.mark = replica.pendingMark()
    }
    return t.groups
  }

  /** The keys atomic groups tie together, starting from `key`. */
  private tiedKeys(key: string): Set<string> {
    const keys = new Set([key])
    for (const k of keys) {
      if (keys.size >= MAX_TIED_KEYS) break
      for (const items of this.groupsWith(k)) for (const i of items) keys.add(i.key)
    }
    return keys
  }

  /** The stable state plus the pending envelopes for `keys`: the kept part, extended by what arrived since, or built anew. */
  private pendingPart(keys: ReadonlySet<string>): PendingPart {
    const replica = this.source.replica()
    const [first] = keys
    const kept = this.parts.get(first as string)
    const arrived = kept && kept.replica === replica && sameKeys(kept.keys, keys) ? replica.arrivedSince(kept.mark, keys) : undefined
    if (kept && arrived) {
      for (const env of arrived) this.applyEnvelope(kept, env)
      kept.mark = replica.pendingMark()
      return kept
    }
    const part: PendingPart = { replica, mark: replica.pendingMark(), keys, views: new Map(), held: new Map() }
    for (const env of pendingTouchingAny(replica, keys)) this.applyEnvelope(part, env)
    for (const k of keys) {
      const old = this.parts.get(k)
      // A key leaves an old part: drop that part for all its keys (they are recomputed together).
      if (old && old !== part) for (const o of old.keys) this.parts.delete(o)
    }
    for (const k of keys) this.parts.set(k, part)
    return part
  }

  private applyEnvelope(part: PendingPart, env: Envelope): void {
    const own = env.authorId === this.source.authorId
    for (const u of envelopeUnits(env)) {
      const items = u.kind === 'op' ? [u] : u.items
      if (!items.some((i) => part.keys.has(i.key))) continue
      this.applyUnit(
        part.keys,
        part.views,
        part.held,
        items.map((i) => ({
          key: i.key,
          decl: i.decl,
          op: i.op,
          own,
          apply: (v, checked) => {
            const ctx = { replica: env.authorId, user: env.userId, tag: i.tag }
            if (checked) return asGeneric(v).tryApply(i.op, ctx).ok
            asGeneric(v).apply(i.op, ctx)
            return true
          },
        })),
      )
    }
  }

  /** Applies a unit's steps on `keys` all or nothing; holds every step back when one does not fit. */
  private applyUnit(keys: ReadonlySet<string>, views: Map<string, AnyCrdt>, held: Map<string, HeldUpdate[]>, steps: readonly Step[]): void {
    const mine = steps.filter((st) => keys.has(st.key))
    if (mine.length === 0) return
    // A deletion empties its key: what comes after it starts from an empty object of the key's declaration.
    const emptied = (k: string): AnyCrdt | undefined => {
      const d = this.source.declarationOf(k)
      return d && createCrdt(d)
    }
    const viewOf = (k: string, decl: Declaration): AnyCrdt | undefined => {
      let v = views.get(k)
      if (!v) views.set(k, (v = this.source.replica().stable(k)?.clone() ?? createCrdt(this.source.declarationOf(k) ?? decl)))
      return v.type === decl.type ? v : undefined
    }
    const hold = (st: Step): void => {
      let list = held.get(st.key)
      if (!list) held.set(st.key, (list = []))
      list.push({ op: st.op, own: st.own })
    }
    if (steps.length > 1) {
      const trial = new Map<string, AnyCrdt>()
      const fits = mine.every((st) => {
        if (isDeletion(st.decl)) {
          const e = emptied(st.key)
          if (e) trial.set(st.key, e)
          return true
        }
        const base = viewOf(st.key, st.decl)
        if (!base) return false
        let t = trial.get(st.key)
        if (!t) trial.set(st.key, (t = base.clone()))
        return st.apply(t, hasInvariants(st.decl))
      })
      if (fits) for (const [k, t] of trial) views.set(k, t)
      else for (const st of mine) hold(st)
      return
    }
    const st = mine[0] as Step
    if (isDeletion(st.decl)) {
      const e = emptied(st.key)
      if (e) views.set(st.key, e)
      else views.delete(st.key)
      return
    }
    const v = viewOf(st.key, st.decl)
    if (v && !st.apply(v, hasInvariants(st.decl))) hold(st)
  }
}

function atomicGroupsWith(env: Envelope, key: string): Items[] {
  const out: Items[] = []
  for (const unit of envelopeUnits(env)) if (unit.kind === 'group' && unit.atomic && unit.items.length > 1 && unit.items.some((i) => i.key === key)) out.push(unit.items)
  return out
}

/** Pending envelopes touching any of `keys`, in the order they arrived (one key's list already is). */
function pendingTouchingAny(replica: ReliableReplica, keys: ReadonlySet<string>): readonly Envelope[] {
  const [only] = keys
  if (keys.size === 1) return replica.pendingTouching(only as string)
  const touching = new Set<string>()
  for (const k of keys) for (const env of replica.pendingTouching(k)) touching.add(env.idHex)
  return replica.pendingEnvelopes().filter((env) => touching.has(env.idHex))
}

function sameKeys(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  if (a.size !== b.size) return false
  for (const k of a) if (!b.has(k)) return false
  return true
}
