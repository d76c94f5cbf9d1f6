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
  const out = new Map(base)
  for (const c of [a, ...others]) {
    if (c === base) continue
    for (const [id, n] of c) {
      const mine = out.get(id)
      if (mine === undefined || n > mine) out.set(id, n)
    }
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
  for (const [id, n] of a) {
    const m = b.get(id) ?? 0
    if (n > m) aBigger = true
    else if (n < m) bBigger = true
    if (aBigger && bBigger) return 'concurrent'
  }
  // Ids that only b has count as 0 in a.
  if (!bBigger) {
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
  let prev = ''
  for (let i = 0; i < flat.length; i += 2) {
    const id = expect.string(flat[i], 'clock id', 64, 1)
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
