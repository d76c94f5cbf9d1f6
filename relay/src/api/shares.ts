/**
 * What each holder (an address, a key) holds of a shared resource, and
 * which holder holds the most, found in constant time: counts move by one,
 * so holders are kept in buckets by count and the top bucket is known.
 * What a fair cap needs: past the total, the heaviest holder gives way.
 */
export class Shares<T> {
  private readonly held = new Map<string, Set<T>>()
  private readonly byCount = new Map<number, Set<string>>()
  private top = 0

  /** How many holders hold anything. */
  get holders(): number {
    return this.held.size
  }

  count(who: string): number {
    return this.held.get(who)?.size ?? 0
  }

  /** What `who` holds, oldest first. */
  itemsOf(who: string): ReadonlySet<T> {
    return this.held.get(who) ?? new Set()
  }

  add(who: string, item: T): void {
    let items = this.held.get(who)
    if (!items) this.held.set(who, (items = new Set()))
    if (items.has(item)) return
    this.move(who, items.size, items.size + 1)
    items.add(item)
  }

  delete(who: string, item: T): void {
    const items = this.held.get(who)
    if (!items?.delete(item)) return
    this.move(who, items.size + 1, items.size)
    if (items.size === 0) this.held.delete(who)
  }

  /** The holder with the most (of several, the one that got there first), and how many it holds. */
  heaviest(): { readonly who: string; readonly count: number } | undefined {
    const who = this.byCount.get(this.top)?.values().next().value
    return who === undefined ? undefined : { who, count: this.top }
  }

  private move(who: string, from: number, to: number): void {
    const old = this.byCount.get(from)
    old?.delete(who)
    if (old?.size === 0) this.byCount.delete(from)
    if (to > 0) {
      let bucket = this.byCount.get(to)
      if (!bucket) this.byCount.set(to, (bucket = new Set()))
      bucket.add(who)
    }
    if (to > this.top) this.top = to
    // Counts move by one: when the top bucket empties, its holder is now one below.
    else if (from === this.top && !this.byCount.has(from)) this.top = this.byCount.has(to) ? to : 0
  }
}
