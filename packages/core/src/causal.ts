import { toHex } from './bytes.ts'
import { clockFrom, type Clock } from './clock.ts'
import type { Envelope } from './envelope.ts'

/**
 * Envelope clocks: Chrono's verifiable logical clocks, kept small by a
 * stable base.
 *
 * An envelope E of author x with sequence number s carries a base b (a
 * stable index x had applied), deps (ids of envelopes of other authors that
 * x had applied and that nothing else x cites already follows) and a listed
 * clock. Its full clock is
 *
 *   FC(E)[x] = s,  FC(E)[a] = max(F(b)[a], listed[a])  for every other a,
 *
 * where F(b)[a] is a's highest sequence number committed at stable index
 * b or below: the stable history up to b counts as seen without naming it,
 * so a clock lists only authors whose updates x saw beyond it, however many
 * authors the space has. The update rule (Chrono's UPDATE) is
 *
 *   FC(E) = UPDATE(x, FC(E's author's seq s-1), FC(d) for each dep d, F(b))
 *
 * with b at least the base of the previous envelope and of every dep, so
 * their bases are covered by E's. The audit checks it (`judgeClock`) with
 * what every correct replica holds alike: the committed envelopes' clock
 * records and F. An input it cannot see (a dep never committed, or one
 * committed so long ago that it left the author's recent records) leaves
 * the clock unverified: committed, without the audit's word for it. A
 * clock that contradicts inputs it can see is refused: `bad-clock`.
 */

/** What the audit remembers of one committed envelope's clock. */
export interface ClockRecord {
  /** The stable index the envelope took. */
  readonly index: number
  /** Its base. */
  readonly base: number
  /** Its listed entries; undefined when there were too many to keep. */
  readonly clock: Clock | undefined
  /** Whether the audit checked its clock against inputs it could all see, themselves verified. */
  readonly verified: boolean
}

/** Records with more listed entries keep none: a Byzantine author's huge clocks must not fill replicas' memory. */
export const MAX_KEPT_CLOCK_ENTRIES = 256

/** What `judgeClock` needs to know about the stable history; a replica provides it. */
export interface ClockInputs {
  /** The stable index before the envelope executes. */
  readonly stableIndex: number
  /** The record of the author's previous envelope (seq - 1); undefined for seq 1. */
  readonly prev: ClockRecord | undefined
  /** A committed envelope the replica still keeps a record of, by id (hex). */
  dep(idHex: string): CommittedClock | undefined
  /** Bounds on F(b)[author]: exact when `lo === hi`. */
  committedAt(authorId: string, base: number): SeqBounds
}

/** A committed envelope as `judgeClock` sees a dep. */
export interface CommittedClock {
  /** Its author. */
  readonly authorId: string
  /** Its author's sequence number. */
  readonly seq: number
  /** Its clock record. */
  readonly record: ClockRecord
}

/** What a replica knows of F(b)[a]: somewhere in lo..hi. */
export interface SeqBounds {
  /** At least this. */
  readonly lo: number
  /** At most this. */
  readonly hi: number
}

/** The clock-carrying part of an envelope. */
export type ClockedEnvelope = Pick<Envelope, 'authorId' | 'seq' | 'base' | 'clock' | 'deps'>

/** `judgeClock`'s verdict. */
export type ClockVerdict =
  | {
      /** The clock may commit. */
      readonly ok: true
      /** Whether it follows from inputs the audit could all see and vouch for; if not, why. */
      readonly verified: boolean
      /** Why it is unverified, for logs. */
      readonly detail?: string
    }
  | {
      /** Refused. */
      readonly ok: false
      /** Always `bad-clock`. */
      readonly reason: 'bad-clock'
      /** A sentence for logs. */
      readonly detail: string
    }

/**
 * Chrono's update validator for an envelope about to execute: its full
 * clock must equal UPDATE over its inputs. Pure and deterministic: every
 * replica that audits the same commits gives the same verdict.
 */
export function judgeClock(env: ClockedEnvelope, inputs: ClockInputs): ClockVerdict {
  const b = env.base
  const bad = (detail: string): ClockVerdict => ({ ok: false, reason: 'bad-clock', detail })
  // E commits after its base; a base not yet reached cannot be one its author applied.
  if (b > inputs.stableIndex) return bad(`base ${b} is ahead of the stable index ${inputs.stableIndex}`)
  const prev = inputs.prev
  if (prev && b < prev.base) return bad(`base ${b} is below the previous envelope's ${prev.base}`)
  let unverified: string | undefined = env.seq > 1 && !prev ? 'the previous envelope has no record' : undefined

  // The highest claim the inputs make per author, and whether a verified input makes it.
  const want = new Map<string, { n: number; sure: boolean }>()
  // Some input's claims are unknown (a dep not found, or a clock too large to keep).
  let blind = false
  const claims = (clock: Clock | undefined, sure: boolean): void => {
    if (!clock) blind = true
    else for (const [a, n] of clock) claim(a, n, sure)
  }
  const claim = (a: string, n: number, sure: boolean): void => {
    const w = want.get(a)
    if (!w || n > w.n) want.set(a, { n, sure })
    else if (n === w.n && sure) w.sure = true
  }
  if (prev) claims(prev.clock, prev.verified)
  for (const id of env.deps) {
    const idHex = toHex(id)
    const d = inputs.dep(idHex)
    if (!d) {
      // Its claims are unknown here, so a mismatch may be its doing: nothing is provably bad.
      blind = true
      unverified ??= `dep ${idHex.slice(0, 16)} is not in the stable history this replica keeps`
      continue
    }
    if (d.record.base > b) return bad(`base ${b} is below dep ${d.authorId}:${d.seq}'s ${d.record.base}`)
    // That the dep exists with its seq is the stable history's word, not a claim.
    claim(d.authorId, d.seq, true)
    claims(d.record.clock, d.record.verified)
  }
  // Verified inputs precede E in the stable order, so none can count E's author up to E.
  const own = want.get(env.authorId)
  if (own && own.n >= env.seq) {
    if (own.sure) return bad(`its inputs already count ${env.authorId}:${own.n}, not below seq ${env.seq}`)
    unverified ??= `an unverified input counts ${env.authorId}:${own.n}`
  }

  const keys = new Set([...want.keys(), ...env.clock.keys()])
  keys.delete(env.authorId)
  for (const a of keys) {
    const listed = env.clock.get(a) ?? 0
    const w = want.get(a)
    const n = w?.n ?? 0
    // Both sides are max(F(b)[a], ·): equal when the claims are, else only when F covers both.
    if (listed === n && (w === undefined || w.sure)) continue
    const f = inputs.committedAt(a, b)
    const top = Math.max(listed, n)
    if (top <= f.lo) continue
    if (listed !== n && top > f.hi && !blind) {
      return bad(listed > n ? `entry ${a} is ${listed} but the inputs give ${n}` : `entry ${a} is ${listed || 'absent'} but the inputs give ${n}`)
    }
    if (listed !== n) unverified ??= `entry ${a} depends on F(${b})[${a}], which this replica no longer knows`
    else unverified ??= `entry ${a} comes from an unverified input`
  }
  if (blind) unverified ??= `an input's clock was too large to keep`
  return unverified === undefined ? { ok: true, verified: true } : { ok: true, verified: false, detail: unverified }
}

/**
 * The sum of an envelope's full clock. Every envelope committed at or
 * below the base counts one for its author in F(b), so F(b) sums to b; the
 * listed entries and the author's own seq add what they have beyond F(b).
 * It strictly grows along happened-before (a full clock that follows
 * another is at least as large everywhere and larger at its author), so
 * ordering by it, ties broken by author and seq, is a total order that
 * extends the causal one: Lamport's timestamp, derived from the vector.
 * Undefined when F(b) is not known exactly where it matters.
 */
export function clockWeight(env: ClockedEnvelope, committedAt: (authorId: string, base: number) => SeqBounds): number | undefined {
  let weight = env.base
  const own: [string, number] = [env.authorId, env.seq]
  for (const [a, n] of [...[...env.clock].filter(([a]) => a !== env.authorId), own]) {
    const f = committedAt(a, env.base)
    if (n <= f.lo) continue
    if (f.lo !== f.hi) return undefined
    weight += n - f.lo
  }
  return weight
}

/** An envelope an author cites as a dep, as the author knows it. */
export type DepClock = Pick<Envelope, 'authorId' | 'seq' | 'base' | 'clock'>

/** The clock part of an author's next envelope. */
export interface ComposedClock {
  /** Its base. */
  readonly base: number
  /** Its listed entries. */
  readonly clock: Clock
}

/**
 * The base and listed clock of an author's next envelope (UPDATE, the
 * author's side of `judgeClock`). `committedSeq(a)` is a's highest
 * committed sequence number at `stableIndex`, the stable index the author
 * has applied.
 */
export function composeClock(
  authorId: string,
  prev: ComposedClock | undefined,
  deps: readonly DepClock[],
  stableIndex: number,
  committedSeq: (authorId: string) => number,
): ComposedClock {
  let base = Math.max(stableIndex, prev?.base ?? 0)
  const m = new Map<string, number>()
  const claim = (a: string, n: number): void => {
    if (n > (m.get(a) ?? 0)) m.set(a, n)
  }
  if (prev) for (const [a, n] of prev.clock) claim(a, n)
  for (const d of deps) {
    base = Math.max(base, d.base)
    claim(d.authorId, d.seq)
    for (const [a, n] of d.clock) claim(a, n)
  }
  m.delete(authorId)
  // Entries the applied stable history already covers go unlisted. A base
  // raised past `stableIndex` by an input only covers more, so the
  // entries kept are still right, if not all needed.
  return { base, clock: clockFrom([...m].filter(([a, n]) => n > committedSeq(a))) }
}
