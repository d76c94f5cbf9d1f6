import { SteadError } from './errors.ts'
import { expect } from './codec.ts'

/**
 * Map-based logical clock (Chrono, "Byzantine Causal Broadcast with
 * verifiable logical clocks"): replica id → counter. Absent ids count as 0.
 * Clocks are immutable values; every operation returns a new map.
 */
export type Clock = ReadonlyMap<string, number>

export type Ordering = 'before' | 'equal' | 'after' | 'concurrent'

export function clockInit(): Clock {
  return new Map()
}

/** Element-wise max of the given clocks. */
export function clockMerge(a: Clock, ...others: Clock[]): Clock {
  // Start from the largest so most entries are copied once, not compared.
  let base = a
  for (const o of others) if (o.size > base.size) base = o
  let out: Map<string, number> | undefined
  for (const c of others.length === 0 ? others : [a, ...others]) {
    if (c === base) continue
    if (out === undefined) {
      out = mergeInto(base, c)
      continue
    }
    for (const [id, n] of c) {
      const mine = out.get(id)
      if (mine === undefined || n > mine) out.set(id, n)
    }
  }
  return out ?? copyClock(base)
}

// Entry by entry is faster in V8 than `new Map(map)`.
function copyClock(c: Clock): Map<string, number> {
  const out = new Map<string, number>()
  for (const [id, n] of c) out.set(id, n)
  return out
}

/**
 * A fresh map with base's ids in base's order, each at the max of both
 * values, then c's other ids in c's order: one lookup per entry of base,
 * and c is scanned only when it has ids that base lacks.
 */
function mergeInto(base: Clock, c: Clock): Map<string, number> {
  const out = new Map<string, number>()
  let shared = 0
  for (const [id, n] of base) {
    const m = c.get(id)
    if (m === undefined) {
      out.set(id, n)
    } else {
      shared++
      out.set(id, n === undefined || m > n ? m : n)
    }
  }
  if (shared < c.size) {
    for (const [id, m] of c) if (!out.has(id)) out.set(id, m)
  }
  return out
}

/** Chrono's update: element-wise max of `clock` and `others`, then increment at `id`. */
export function clockUpdate(id: string, clock: Clock, others: readonly Clock[] = []): Clock {
  const merged = clockMerge(clock, ...others) as Map<string, number>
  merged.set(id, (merged.get(id) ?? 0) + 1)
  return merged
}

export function clockCompare(a: Clock, b: Clock): Ordering {
  let aBigger = false // some entry of a exceeds b's
  let bBigger = false
  let shared = 0 // ids of a that b has too
  for (const [id, n] of a) {
    const found = b.get(id)
    let m = 0
    if (found !== undefined) {
      shared++
      m = found
    }
    if (n > m) aBigger = true
    else if (n < m) bBigger = true
    if (aBigger && bBigger) return 'concurrent'
  }
  // Ids that only b has count as 0 in a. If b has no id beyond those seen above, skip the scan.
  if (!bBigger && shared < b.size) {
    for (const [id, m] of b) {
      if (m > 0 && !a.has(id)) {
        bBigger = true
        break
      }
    }
  }
  if (aBigger && bBigger) return 'concurrent'
  if (aBigger) return 'after'
  if (bBigger) return 'before'
  return 'equal'
}

/** Flat wire form [id, n, id, n, ...] sorted by id: compact and canonical. */
export function encodeClock(c: Clock): Array<string | number> {
  const ids = [...c.keys()].sort()
  const out: Array<string | number> = []
  for (const id of ids) out.push(id, c.get(id) as number)
  return out
}

export function decodeClock(v: unknown, maxEntries: number): Clock {
  const flat = expect.array(v, 'clock', maxEntries * 2)
  if (flat.length % 2 !== 0) throw new SteadError('malformed', 'clock must be [id, counter] pairs')
  const out = new Map<string, number>()
  // Performance only: using each id once as a property key makes V8 intern
  // it. msgpackr's native decoder hands out ids as slices of one larger
  // string, and Map lookups with those go through V8's slow string compare
  // (about 4x slower compare and merge of a 1,000-entry clock); interned ids
  // take the fast path, and equal ids then share one string in memory.
  const interned: Record<string, 0> = Object.create(null)
  let prev = ''
  for (let i = 0; i < flat.length; i += 2) {
    const id = expect.string(flat[i], 'clock id', 64, 1)
    interned[id] = 0
    const n = expect.uint(flat[i + 1], 'clock counter')
    // Sorted and unique ids keep one canonical encoding per clock.
    if (i > 0 && id <= prev) throw new SteadError('malformed', 'clock ids must be sorted and unique')
    if (n === 0) throw new SteadError('malformed', 'clock counters must be positive (absent means 0)')
    out.set(id, n)
    prev = id
  }
  return out
}

export function clockEquals(a: Clock, b: Clock): boolean {
  return clockCompare(a, b) === 'equal'
}
