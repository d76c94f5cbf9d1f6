/**
 * Which objects to send as state rather than as operations (BENDY, "Adaptive
 * CRDT propagation", SAC 2016, sections 4.2 and 4.3).
 *
 * Sending an object's state beats sending its operations once a window's
 * updates to it weigh more than the state itself. Keeping those statistics
 * for every object would cost more than it saves, and most workloads are
 * skewed, so only the most frequently updated objects are considered: a
 * {@link SpaceSaving} tracker finds them in bounded memory, and
 * {@link chooseModes} applies the cost rule ({@link prefersState}) to those
 * alone. Everything else stays operation-based, the default.
 */

/** A monitored key's estimated count and how far above its true count that estimate may be. */
export interface SpaceSavingEstimate {
  /** An upper bound of the key's true count. */
  readonly count: number
  /** The most by which `count` may exceed the true count: `count - error <= true count <= count`. */
  readonly error: number
}

/** One monitored key with its estimate, as listed by {@link SpaceSaving.top}. */
export interface SpaceSavingEntry extends SpaceSavingEstimate {
  /** The key. */
  readonly key: string
}

/**
 * Space-Saving (Metwally, Agrawal and El Abbadi, "Efficient computation of
 * frequent and top-k elements in data streams", ICDT 2005): the approximate
 * top-k most frequent keys of a weighted stream in `capacity` counters.
 *
 * A new key arriving when every counter is taken replaces a key with the
 * least count and inherits that count (recorded as its error), so that
 * - the monitored counts always sum to {@link SpaceSaving.total};
 * - a monitored key's true count lies in `[count - error, count]`;
 * - an unmonitored key's true count is at most the least monitored count,
 *   itself at most `total / capacity`, so every key seen more often than
 *   that is monitored.
 *
 * The counters form a binary min-heap with a Map from key to heap slot, so
 * an offer costs O(log capacity). The heap orders by count, then by key
 * descending: the key evicted is always the one {@link SpaceSaving.top}
 * would list last, a function of the monitored counts alone, so the same
 * stream always gives the same result.
 */
export class SpaceSaving {
  /** The most keys monitored at once. */
  readonly capacity: number
  // Parallel arrays in heap order: no object per counter, and a swap moves three slots.
  private readonly keys: string[] = []
  private readonly counts: number[] = []
  private readonly errors: number[] = []
  private readonly slots = new Map<string, number>()
  private offered = 0

  /** Throws RangeError unless `capacity` is an integer of at least 1. */
  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError(`SpaceSaving capacity must be an integer >= 1, got ${capacity}`)
    this.capacity = capacity
  }

  /**
   * Counts `weight` occurrences of `key` (an integer of at least 1, by
   * default 1). Throws RangeError for another weight, or when the total
   * would pass Number.MAX_SAFE_INTEGER (past it, counts stop being exact).
   */
  offer(key: string, weight = 1): void {
    if (typeof key !== 'string') throw new RangeError(`SpaceSaving keys must be strings, got ${typeof key}`)
    if (!Number.isSafeInteger(weight) || weight < 1) throw new RangeError(`SpaceSaving weight must be an integer >= 1, got ${weight}`)
    if (weight > Number.MAX_SAFE_INTEGER - this.offered) throw new RangeError(`SpaceSaving total would pass Number.MAX_SAFE_INTEGER`)
    this.offered += weight
    const at = this.slots.get(key)
    if (at !== undefined) {
      this.counts[at] = (this.counts[at] as number) + weight
      this.down(at)
      return
    }
    if (this.keys.length < this.capacity) {
      const i = this.keys.length
      this.keys.push(key)
      this.counts.push(weight)
      this.errors.push(0)
      this.slots.set(key, i)
      this.up(i)
      return
    }
    // The newcomer may have occurred up to `least` times while unmonitored:
    // no more, since any key evicted held the least count then, and the
    // least count never decreases.
    const least = this.counts[0] as number
    this.slots.delete(this.keys[0] as string)
    this.keys[0] = key
    this.counts[0] = least + weight
    this.errors[0] = least
    this.slots.set(key, 0)
    this.down(0)
  }

  /** The estimate for `key`, or undefined when it is not monitored (its true count is then at most the least monitored count). */
  estimate(key: string): SpaceSavingEstimate | undefined {
    const at = this.slots.get(key)
    return at === undefined ? undefined : { count: this.counts[at] as number, error: this.errors[at] as number }
  }

  /**
   * The monitored keys, highest estimated count first and equal counts by
   * key ascending (UTF-16 code unit order), at most `k` of them (by
   * default all). Throws RangeError unless `k` is a non-negative integer.
   */
  top(k: number = this.keys.length): SpaceSavingEntry[] {
    if (!Number.isSafeInteger(k) || k < 0) throw new RangeError(`top(k) needs an integer k >= 0, got ${k}`)
    const all: SpaceSavingEntry[] = this.keys.map((key, i) => ({ key, count: this.counts[i] as number, error: this.errors[i] as number }))
    all.sort((a, b) => b.count - a.count || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
    return all.length > k ? all.slice(0, k) : all
  }

  /** The total weight offered since construction or the last {@link SpaceSaving.clear}. */
  get total(): number {
    return this.offered
  }

  /** How many keys are monitored (at most {@link SpaceSaving.capacity}). */
  get size(): number {
    return this.keys.length
  }

  /** Forgets every key and the total, to start a new period. */
  clear(): void {
    this.keys.length = 0
    this.counts.length = 0
    this.errors.length = 0
    this.slots.clear()
    this.offered = 0
  }

  /** Whether slot i sorts before slot j: a smaller count, or an equal count and a larger key (the one top() lists later). */
  private before(i: number, j: number): boolean {
    const ci = this.counts[i] as number
    const cj = this.counts[j] as number
    return ci < cj || (ci === cj && (this.keys[i] as string) > (this.keys[j] as string))
  }

  private swap(i: number, j: number): void {
    const k = this.keys[i] as string
    const c = this.counts[i] as number
    const e = this.errors[i] as number
    this.keys[i] = this.keys[j] as string
    this.counts[i] = this.counts[j] as number
    this.errors[i] = this.errors[j] as number
    this.keys[j] = k
    this.counts[j] = c
    this.errors[j] = e
    this.slots.set(this.keys[i] as string, i)
    this.slots.set(k, j)
  }

  private up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!this.before(i, parent)) return
      this.swap(i, parent)
      i = parent
    }
  }

  private down(i: number): void {
    const n = this.keys.length
    for (;;) {
      const left = 2 * i + 1
      if (left >= n) return
      const right = left + 1
      const child = right < n && this.before(right, left) ? right : left
      if (!this.before(child, i)) return
      this.swap(i, child)
      i = child
    }
  }
}

/** What the cost rule needs to know of one object over one window. */
export interface ObjectTraffic {
  /** U_x: how many updates the object received in the window. */
  readonly updates: number
  /** The bytes of those updates, summed (so an update's mean size, size(u_x), is `updateBytes / updates`). */
  readonly updateBytes: number
  /** size(O_x): the bytes of the object's encoded state. */
  readonly stateBytes: number
}

function checkTraffic(t: ObjectTraffic, what: string): void {
  for (const field of ['updates', 'updateBytes', 'stateBytes'] as const) {
    const v = t[field]
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) throw new RangeError(`${what}: ${field} must be a non-negative finite number, got ${String(v)}`)
  }
}

/**
 * BENDY's cost rule (section 4.2): send the object as state when
 * U_x * size(u_x) > size(O_x). Since size(u_x) is the mean update size,
 * the left side is the window's update bytes, compared as such so that no
 * division rounds the boundary. Equal sizes stay operation-based, the
 * default; so does an object with no updates, which has nothing to send.
 * Throws RangeError for a count or size that is negative or not finite.
 */
export function prefersState(t: ObjectTraffic): boolean {
  checkTraffic(t, 'prefersState')
  return stateWins(t)
}

function stateWins(t: ObjectTraffic): boolean {
  return t.updates > 0 && t.updateBytes > t.stateBytes
}

/**
 * The propagation mode of every object in `traffic` for one window
 * (section 4.3): 'state' for an object in `hot` (the tracker's top k) whose
 * traffic {@link prefersState}, 'ops' for every other, so an object that
 * has left the top k reverts to operations. Keys of `hot` without traffic
 * get no entry. Every entry is validated, hot or not, as in
 * {@link prefersState}.
 */
export function chooseModes(traffic: ReadonlyMap<string, ObjectTraffic>, hot: ReadonlySet<string>): Map<string, 'ops' | 'state'> {
  const modes = new Map<string, 'ops' | 'state'>()
  for (const [key, t] of traffic) {
    checkTraffic(t, `chooseModes(${key})`)
    modes.set(key, hot.has(key) && stateWins(t) ? 'state' : 'ops')
  }
  return modes
}
