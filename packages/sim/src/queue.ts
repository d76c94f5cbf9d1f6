/** Min-heap of events by (time, insertion order): ties resolve in the order they were scheduled. */
export class EventQueue<T> {
  private heap: Array<{ at: number; seq: number; item: T }> = []
  private seq = 0

  get size(): number {
    return this.heap.length
  }

  /** Whether any queued item satisfies `test` (in no particular order). */
  some(test: (item: T) => boolean): boolean {
    return this.heap.some((e) => test(e.item))
  }

  /** When the earliest item is due (undefined when empty). */
  peekAt(): number | undefined {
    return this.heap[0]?.at
  }

  push(at: number, item: T): void {
    this.heap.push({ at, seq: this.seq++, item })
    let i = this.heap.length - 1
    while (i > 0) {
      const parent = (i - 1) >> 1
      if (!this.less(i, parent)) break
      this.swap(i, parent)
      i = parent
    }
  }

  pop(): { at: number; item: T } | undefined {
    const top = this.heap[0]
    if (!top) return undefined
    const last = this.heap.pop() as (typeof this.heap)[number]
    if (this.heap.length) {
      this.heap[0] = last
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        const r = l + 1
        let m = i
        if (l < this.heap.length && this.less(l, m)) m = l
        if (r < this.heap.length && this.less(r, m)) m = r
        if (m === i) break
        this.swap(i, m)
        i = m
      }
    }
    return { at: top.at, item: top.item }
  }

  private less(i: number, j: number): boolean {
    const a = this.heap[i] as { at: number; seq: number }
    const b = this.heap[j] as { at: number; seq: number }
    return a.at < b.at || (a.at === b.at && a.seq < b.seq)
  }

  private swap(i: number, j: number): void {
    const t = this.heap[i] as (typeof this.heap)[number]
    this.heap[i] = this.heap[j] as (typeof this.heap)[number]
    this.heap[j] = t
  }
}
