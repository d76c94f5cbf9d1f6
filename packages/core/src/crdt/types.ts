import type { ErrorReason } from '../errors.ts'

/**
 * Who applies an operation and under which unique tag. Operations on the
 * wire carry neither: both are derived from the envelope that carries the
 * operation (author id, and `${envelope id prefix}:${index}`), so every replica
 * computes the same context and a client cannot forge another author's.
 */
export interface OpContext {
  readonly replica: string
  readonly tag: string
}

export type ApplyResult = { ok: true } | { ok: false; reason: ErrorReason; detail: string }

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
  readonly type: CrdtTypeName
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
  clone(): this
  /** A canonical, msgpack-friendly form: equal states give equal snapshots. */
  snapshot(): unknown
  /** Whether the current state satisfies every declared invariant. */
  invariantsHold(): boolean
}

export type CrdtTypeName = 'counter' | 'set' | 'register' | 'bounded-counter'

export function invalid(detail: string): ApplyResult {
  return { ok: false, reason: 'malformed', detail }
}

export function violates(detail: string): ApplyResult {
  return { ok: false, reason: 'invariant', detail }
}

export function isSafeInt(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n)
}
