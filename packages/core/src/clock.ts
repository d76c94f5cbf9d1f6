import { SteadError } from './errors.ts'
import { expect } from './codec.ts'

/** How clock `a` relates to clock `b` (see {@link clockCompare}): happened before, equal, after, or neither (concurrent). */
export type Ordering = 'before' | 'equal' | 'after' | 'concurrent'

// Module-private doors into Clock, set by its static block: the walks below
// read the arrays directly, yet the class exposes neither them nor a way to
// build a clock that breaks its invariants.
let idsOf!: (c: Clock) => readonly string[]
let countersOf!: (c: Clock) => readonly number[]
let make!: (ids: readonly string[], counters: readonly number[]) => Clock

/**
 * Logical clock (Chrono, "Byzantine Causal Broadcast with verifiable logical
 * clocks"): replica id → counter, absent ids counting as 0. An immutable
 * value; every operation returns a new clock or one of its inputs.
 *
 * Held as parallel arrays sorted by id, with every counter > 0. Comparing and
 * merging are then one linear walk over both clocks with no hashing and no
 * Map to build (a 1,000-entry Map costs ~33 µs to construct in V8), and a
 * clock has exactly one representation, so deep equality of two Clock
 * objects is clock equality. Iteration is in ascending id order.
 */
export class Clock implements Iterable<[string, number]> {
  private readonly ids: readonly string[]
  private readonly counters: readonly number[]

  static {
    idsOf = (c) => c.ids
    countersOf = (c) => c.counters
    make = (ids, counters) => new Clock(ids, counters)
  }

  private constructor(ids: readonly string[], counters: readonly number[]) {
    this.ids = ids
    this.counters = counters
  }

  /** Number of ids with a counter above 0. */
  get size(): number {
    return this.ids.length
  }

  /** The counter at `id`, or undefined when absent (which counts as 0), as Map.get. */
  get(id: string): number | undefined {
    const i = indexOf(this.ids, id)
    return i < 0 ? undefined : this.counters[i]
  }

  /** Whether `id` has a counter above 0. */
  has(id: string): boolean {
    return indexOf(this.ids, id) >= 0
  }

  /** The ids with a counter above 0, in ascending order. */
  keys(): IterableIterator<string> {
    return this.ids.values()
  }

  /** `[id, counter]` pairs in ascending id order. */
  *entries(): IterableIterator<[string, number]> {
    for (let i = 0; i < this.ids.length; i++) yield [this.ids[i] as string, this.counters[i] as number]
  }

  /** The same as `entries()`, so a clock spreads and iterates like a Map. */
  [Symbol.iterator](): IterableIterator<[string, number]> {
    return this.entries()
  }
}

/** Index of the first id not less than `id` (ids.length when none): where `id` is or would go. */
function lowerBound(ids: readonly string[], id: string): number {
  let lo = 0
  let hi = ids.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if ((ids[mid] as string) < id) lo = mid + 1
    else hi = mid
  }
  return lo
}

function indexOf(ids: readonly string[], id: string): number {
  const i = lowerBound(ids, id)
  return i < ids.length && ids[i] === id ? i : -1
}

const EMPTY = make([], [])

/** The empty clock (every counter 0): where every author starts. */
export function clockInit(): Clock {
  return EMPTY
}

/**
 * A clock from [id, counter] pairs, e.g. a Map. As with `new Map(entries)`,
 * a repeated id keeps its last counter. Zero counters are dropped (absent
 * means 0) so every clock encodes to something `decodeClock` accepts.
 * Throws RangeError for a counter that is not a non-negative safe integer.
 */
export function clockFrom(entries: Iterable<readonly [string, number]>): Clock {
  const byId = new Map<string, number>()
  for (const [id, n] of entries) {
    if (typeof id !== 'string') throw new RangeError('clock ids must be strings')
    if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`clock counter for ${id} must be a non-negative safe integer, got ${n}`)
    byId.set(id, n)
  }
  // Default sort order is UTF-16 code units, the same as `<` in the walks and the wire order.
  const ids = [...byId.keys()].filter((id) => (byId.get(id) as number) > 0).sort()
  // Interned as in decodeClock: ids built by concatenation or slicing compare slowly otherwise.
  const interned: Record<string, 0> = Object.create(null)
  for (const id of ids) interned[id] = 0
  return make(ids, ids.map((id) => byId.get(id) as number))
}

/** Element-wise max of the given clocks. */
export function clockMerge(a: Clock, ...others: Clock[]): Clock {
  let out = a
  for (const o of others) out = merge2(out, o)
  return out
}

/**
 * One walk over both sorted id lists. When one side already holds the max
 * of every entry it is returned as is: clocks are immutable, and the common
 * case (merging in a clock that is wholly ahead or behind) then allocates
 * nothing that outlives the call. Likewise, when the larger clock's ids
 * already include the other's (clocks of one space converge on the same
 * ids), the result shares that clock's id array and only counters are new.
 */
function merge2(a: Clock, b: Clock): Clock {
  if (a === b) return a
  if (b.size > a.size) [a, b] = [b, a]
  const ai = idsOf(a)
  const ac = countersOf(a)
  const bi = idsOf(b)
  const bc = countersOf(b)
  const na = ai.length
  const nb = bi.length
  if (nb === 0) return a
  const counters: number[] = []
  // Merged ids, built only from the first id that a lacks; until then they are a's.
  let ids: string[] | undefined
  let aCovers = true // a's counter is the max at every id seen so far
  let bCovers = true
  let i = 0
  let j = 0
  while (i < na && j < nb) {
    const x = ai[i] as string
    const y = bi[j] as string
    if (x === y) {
      const n = ac[i] as number
      const m = bc[j] as number
      if (n >= m) {
        counters.push(n)
        if (n > m) bCovers = false
      } else {
        counters.push(m)
        aCovers = false
      }
      ids?.push(x)
      i++
      j++
    } else if (x < y) {
      counters.push(ac[i] as number)
      bCovers = false
      ids?.push(x)
      i++
    } else {
      counters.push(bc[j] as number)
      aCovers = false
      ids ??= ai.slice(0, i)
      ids.push(y)
      j++
    }
  }
  if (i < na) {
    bCovers = false
    if (aCovers) return a
    for (; i < na; i++) {
      counters.push(ac[i] as number)
      ids?.push(ai[i] as string)
    }
  } else if (j < nb) {
    aCovers = false
    if (bCovers) return b
    ids ??= ai.slice()
    for (; j < nb; j++) {
      counters.push(bc[j] as number)
      ids.push(bi[j] as string)
    }
  }
  if (aCovers) return a
  if (bCovers) return b
  return make(ids ?? ai, counters)
}

/**
 * Chrono's update: element-wise max of `clock` and `others`, then increment at `id`.
 * Throws RangeError when the counter at `id` is already Number.MAX_SAFE_INTEGER.
 */
export function clockUpdate(id: string, clock: Clock, others: readonly Clock[] = []): Clock {
  const merged = clockMerge(clock, ...others)
  const ids = idsOf(merged)
  const counters = countersOf(merged).slice()
  const at = lowerBound(ids, id)
  if (ids[at] === id) {
    const n = counters[at] as number
    // Past 2^53 - 1 a counter would no longer be exact, and no replica could decode it.
    if (n >= Number.MAX_SAFE_INTEGER) throw new RangeError(`clock counter for ${id} cannot advance past ${n}`)
    counters[at] = n + 1
    return make(ids, counters)
  }
  const nextIds = ids.slice()
  nextIds.splice(at, 0, id)
  counters.splice(at, 0, 1)
  return make(nextIds, counters)
}

/**
 * One walk over both sorted id lists, stopping as soon as each side is
 * ahead somewhere. An id only one side has is ahead there, as every stored
 * counter is > 0.
 */
export function clockCompare(a: Clock, b: Clock): Ordering {
  if (a === b) return 'equal'
  const ai = idsOf(a)
  const ac = countersOf(a)
  const bi = idsOf(b)
  const bc = countersOf(b)
  const na = ai.length
  const nb = bi.length
  let aBigger = false // some entry of a exceeds b's
  let bBigger = false
  if (ai === bi) {
    // Shared id array (see merge2): counters only.
    for (let k = 0; k < na; k++) {
      const n = ac[k] as number
      const m = bc[k] as number
      if (n > m) aBigger = true
      else if (n < m) bBigger = true
      if (aBigger && bBigger) return 'concurrent'
    }
    return aBigger ? 'after' : bBigger ? 'before' : 'equal'
  }
  let i = 0
  let j = 0
  while (i < na && j < nb) {
    const x = ai[i] as string
    const y = bi[j] as string
    if (x === y) {
      const n = ac[i] as number
      const m = bc[j] as number
      if (n > m) aBigger = true
      else if (n < m) bBigger = true
      i++
      j++
    } else if (x < y) {
      aBigger = true
      i++
    } else {
      bBigger = true
      j++
    }
    if (aBigger && bBigger) return 'concurrent'
  }
  if (i < na) aBigger = true
  if (j < nb) bBigger = true
  if (aBigger && bBigger) return 'concurrent'
  if (aBigger) return 'after'
  if (bBigger) return 'before'
  return 'equal'
}

/** Whether two clocks hold the same counters (`clockCompare(a, b) === 'equal'`, faster). */
export function clockEquals(a: Clock, b: Clock): boolean {
  if (a === b) return true
  const ai = idsOf(a)
  const ac = countersOf(a)
  const bi = idsOf(b)
  const bc = countersOf(b)
  if (ai.length !== bi.length) return false
  for (let i = 0; i < ai.length; i++) if (ai[i] !== bi[i] || ac[i] !== bc[i]) return false
  return true
}

/** Flat wire form [id, n, id, n, ...] sorted by id: compact and canonical. */
export function encodeClock(c: Clock): Array<string | number> {
  const ids = idsOf(c)
  const counters = countersOf(c)
  const out: Array<string | number> = []
  for (let i = 0; i < ids.length; i++) out.push(ids[i] as string, counters[i] as number)
  return out
}

/**
 * Reads the wire form of {@link encodeClock}, refusing any other encoding of
 * a clock (unsorted or repeated ids, zero counters), so that a clock has one
 * encoding.
 *
 * @throws SteadError `malformed`, or `too-large` past `maxEntries` entries.
 */
export function decodeClock(v: unknown, maxEntries: number): Clock {
  const flat = expect.array(v, 'clock', maxEntries * 2)
  if (flat.length % 2 !== 0) throw new SteadError('malformed', 'clock must be [id, counter] pairs')
  const ids: string[] = []
  const counters: number[] = []
  // Performance only: using each id once as a property key makes V8 intern
  // it. msgpackr's native decoder hands out ids as slices of one larger
  // string, which V8 compares in its slow C++ path (several times slower
  // compare and merge of a 1,000-entry clock); interned ids take the fast
  // path, and equal ids then share one string in memory.
  const interned: Record<string, 0> = Object.create(null)
  let prev = ''
  for (let i = 0; i < flat.length; i += 2) {
    const id = expect.string(flat[i], 'clock id', 64, 1)
    interned[id] = 0
    const n = expect.uint(flat[i + 1], 'clock counter')
    // Sorted and unique ids keep one canonical encoding per clock, and are what the walks rely on.
    if (i > 0 && id <= prev) throw new SteadError('malformed', 'clock ids must be sorted and unique')
    if (n === 0) throw new SteadError('malformed', 'clock counters must be positive (absent means 0)')
    ids.push(id)
    counters.push(n)
    prev = id
  }
  return ids.length === 0 ? EMPTY : make(ids, counters)
}
