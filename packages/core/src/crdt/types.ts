import { SteadError, type ErrorReason } from '../errors.ts'
import type { ValuePatch } from './value-patch.ts'

/**
 * Who applies an operation and under which unique tag. Operations on the
 * wire carry neither: both are derived from the envelope that carries the
 * operation (author id, and `${envelope id prefix}:${index}`), so every replica
 * computes the same context and a client cannot forge another author's.
 */
export interface OpContext {
  /** The author id of the envelope's author: whose update it is. */
  readonly replica: string
  /** The user the author acts for (Envelope.userId), where it differs: what a policy names. */
  readonly user?: string
  /** The operation's unique tag: `${envelope id prefix}:${index}`. */
  readonly tag: string
}

/** What `tryApply` says: applied, or refused with a reason (the state is untouched then). */
export type ApplyResult =
  | {
      /** Applied. */
      ok: true
    }
  | {
      /** Refused; the state is as it was. */
      ok: false
      /** `invariant` when a declared invariant would break, `malformed` for an op invalid here. */
      reason: ErrorReason
      /** A sentence for logs and audit decisions. */
      detail: string
    }

/** The one "applied" result. */
export const OK: ApplyResult = Object.freeze({ ok: true })

/**
 * A reversible CRDT replica: op-based `apply`, state-based `merge`, and a
 * compensation (`inverse`) for every operation.
 *
 * `apply` and `inverse` are exact in value: apply(op) then apply(inverse(op))
 * leaves `value()` as it was. Compensations are op-level: the reliable
 * replica applies each one exactly once, and `merge` joins states that
 * were built from operations (the stable states relays and clients exchange),
 * never states holding compensations of different rejected updates.
 */
export interface Crdt<Op, Value> {
  /** Which CRDT this is. */
  readonly type: CrdtTypeName
  /** The current value: a plain value that callers may keep (never aliased state). */
  value(): Value
  /**
   * Applies `op` unless it would break an invariant (or the op is invalid for
   * this state); in that case the state is left exactly as it was and the
   * reason is returned. Use this on the stable state.
   */
  tryApply(op: Op, ctx: OpContext): ApplyResult
  /**
   * Applies `op` without checking invariants: the prospective state shows
   * what the replica has seen, even if the audit will reject some of it.
   */
  apply(op: Op, ctx: OpContext): void
  /** The compensation of `op` applied under `ctx`. */
  inverse(op: Op, ctx: OpContext): Op
  /** Joins another state of the same object into this one (a lattice join). */
  merge(other: this): void
  /** An independent copy: applying to one never changes the other. */
  clone(): this
  /** A canonical, msgpack-friendly form: equal states give equal snapshots. */
  snapshot(): unknown
  /** Whether the current state satisfies every declared invariant. */
  invariantsHold(): boolean
}

/** The object types Stead has: PN-Counter, OR-Set, LWW-Register, Bounded Counter, collaborative text, map, list, and a space's policy. */
export type CrdtTypeName = 'counter' | 'set' | 'register' | 'bounded-counter' | 'text' | 'map' | 'list' | 'policy' | 'deletion'

/**
 * One object type, as the registry knows it: how its declaration travels,
 * how its ops are checked, and how its CRDT is made. Each type's module
 * exports one; the replica, deltas, Merkle leaves and the SDK go through
 * the registry (index.ts) and never switch on type names.
 */
export interface ObjectType<
  D extends {
    /** The type's name. */
    readonly type: CrdtTypeName
  },
  C,
> {
  /** The `type` of its declarations. */
  readonly name: D['type']
  /** The first element of its declaration's wire form. */
  readonly code: string
  /** The declaration's compact wire form, `[code, ...params]`. */
  encode(d: D): readonly unknown[]
  /** Parses a wire declaration whose first element is `code`; `declaration` checks one nested in it (a map schema's). Throws SteadError('malformed'). */
  decode(enc: readonly unknown[], declaration?: (enc: unknown) => string | null): D
  /** What is wrong with an op from the wire, or null; `declaration` checks a declaration an op carries (a nested object's). */
  validateOp(op: unknown, declaration: (enc: unknown) => string | null): string | null
  /** A fresh, empty CRDT (throws RangeError for invariants the type does not allow). */
  create(d: D): C
  /** Rebuilds a CRDT from its `snapshot()` (trusted input). */
  restore(d: D, snap: unknown): C
  /** Compacts one object's regular ops before they are signed; absent: every op is kept. */
  compact?(ops: readonly unknown[]): unknown[]
  /** Whether the declaration has invariants a prospective view must respect. */
  hasInvariants(d: D): boolean
  /**
   * For types whose ops name elements made by other ops (`${tag}.${k}`): the
   * op with the tags it names renamed (`rename` gives a tag's new name and
   * how far its offsets move, or undefined to keep it). A client turns the
   * names of its unsigned drafts into envelope names with it.
   */
  rename?(op: unknown, rename: (tag: string) => { tag: string; shift: number } | undefined): unknown
  /** How many elements an op makes (named `${tag}.0` on), or 0. */
  runLength?(op: unknown): number
  /** `prev` and `next` as one op when `next` continues `prev`'s run as typing does (`lastId`: the id of prev's last element), else undefined. */
  joinRun?(prev: unknown, lastId: string, next: unknown): unknown
  /**
   * For types whose state can be long (text): what the state hash holds for
   * the object instead of its whole snapshot, a digest the CRDT keeps up to
   * date cheaply (`digest`), equal to `digestSnapshot` of its snapshot (what
   * a verifier computes from a snapshot it was sent).
   */
  digest?(crdt: C, sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array
  /** The same digest computed from a snapshot alone (see `digest`). */
  digestSnapshot?(snap: unknown, sha256: (bytes: Uint8Array) => Uint8Array): Uint8Array
  /**
   * For types whose values grow long: the patch from one history value of
   * an object to a later one (see ValuePatch), so a stable history keeps
   * changes instead of a whole value per change; undefined when none fits
   * (the later value is kept whole).
   */
  historyPatch?(before: unknown, after: unknown): ValuePatch | undefined
  /** What the stable history holds of an object's state, when not its `value()` (a text with marks: its spans). */
  historyValue?(crdt: C): unknown
  /**
   * Ops that do not commute (a space's policy): the stable order alone says
   * what the state is, so a replica rebuilds its prospective copy from the
   * stable one each time the order decides one of its ops.
   */
  readonly ordered?: boolean
  /** The one key objects of this type live at (a system object); absent: any key, and nesting in maps. */
  readonly onlyAt?: string
  /** Whether an op must travel as a safe update (only the stable order may decide it). */
  mustBeSafe?(op: unknown): boolean
  /**
   * The replica whose own state an op disposes of (a bounded counter's
   * retirement gives a replica's rights away), if any: the audit lets only
   * that replica, a space admin, or the user of a device the policy revoked
   * make it.
   */
  disposesOf?(op: unknown): string | undefined
  /** Whether it is the deletion of whatever its key holds (see deletion.ts): no object of its own, never nested. */
  readonly deletes?: boolean
}


/** A declaration's wire form when it is its type's optional bounds in order: `[code, ...bounds]`, null for an absent one. */
export function encodeBounds<B extends object>(code: string, bounds: B, names: ReadonlyArray<keyof B & string>): unknown[] {
  return [code, ...names.map((n) => bounds[n] ?? null)]
}

/** Parses `[code, ...bounds]` (see encodeBounds) and checks the bounds with `problem`; throws SteadError('malformed'). */
export function decodeBounds<B>(enc: readonly unknown[], what: string, names: readonly string[], problem: (b: B) => string | null): B {
  if (enc.length !== names.length + 1) throw new SteadError('malformed', `${what} declaration is [${[enc[0], ...names].join(', ')}]`)
  const bounds: Record<string, unknown> = {}
  names.forEach((n, i) => {
    if (enc[i + 1] !== null && enc[i + 1] !== undefined) bounds[n] = enc[i + 1]
  })
  const p = problem(bounds as B)
  if (p) throw new SteadError('malformed', p)
  return bounds as B
}

/** A `malformed` refusal: the op is invalid for this object. */
export function invalid(detail: string): ApplyResult {
  return { ok: false, reason: 'malformed', detail }
}

/** An `invariant` refusal: applying the op would break a declared invariant. */
export function violates(detail: string): ApplyResult {
  return { ok: false, reason: 'invariant', detail }
}

/** Whether `n` is a number and a safe integer. */
export function isSafeInt(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n)
}
