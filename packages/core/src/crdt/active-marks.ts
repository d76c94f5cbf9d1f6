import type { MarkOp } from './marks.ts'

/** A mark op as a text holds it (see MarkSet). */
export interface Mark {
  readonly tag: string
  readonly author: string
  readonly op: MarkOp
  /** Its value as canonical JSON. */
  readonly valueKey: string
  /** What it competes for: its type, or for a value of a multi-valued type the type and that value. */
  readonly key: string
}

/** What one type shows on a character, and it as canonical JSON. */
export interface Shown {
  readonly value: unknown
  readonly key: string
}

/** Whether mark `a` wins over `b`: Lamport stamp, then author id, then tag. */
export function later(a: Mark, b: Mark): boolean {
  if (a.op[5] !== b.op[5]) return a.op[5] > b.op[5]
  if (a.author !== b.author) return a.author > b.author
  return a.tag > b.tag
}

/** A binary heap of marks, the latest (see `later`) on top; marks leave it lazily, when they reach the top. */
class LatestFirst {
  private readonly items: Mark[] = []

  push(m: Mark): void {
    const a = this.items
    a.push(m)
    let i = a.length - 1
    while (i > 0) {
      const up = (i - 1) >> 1
      if (!later(a[i] as Mark, a[up] as Mark)) break
      ;[a[i], a[up]] = [a[up] as Mark, a[i] as Mark]
      i = up
    }
  }

  /** The latest mark `live` keeps, after dropping those above it that it does not. */
  top(live: (m: Mark) => boolean): Mark | undefined {
    const a = this.items
    while (a.length && !live(a[0] as Mark)) {
      const last = a.pop() as Mark
      if (a.length === 0) break
      a[0] = last
      let i = 0
      for (;;) {
        const l = 2 * i + 1
        const r = l + 1
        let best = i
        if (l < a.length && later(a[l] as Mark, a[best] as Mark)) best = l
        if (r < a.length && later(a[r] as Mark, a[best] as Mark)) best = r
        if (best === i) break
        ;[a[i], a[best]] = [a[best] as Mark, a[i] as Mark]
        i = best
      }
    }
    return a[0]
  }
}

/**
 * The marks of one type covering the characters a walk over the text is
 * passing, and what they show there (Peritext's rule, see `shown`): the
 * latest wins, and for a multi-valued type each value its latest op adds.
 * Heaps keep the latest at hand, so a text with many overlapping marks of
 * one type costs a logarithm per mark boundary, not a pass over every
 * mark covering it (which made a text with thousands of nested marks take
 * seconds at each change).
 */
export class ActiveMarks {
  private readonly live = new Set<Mark>()
  private readonly all = new LatestFirst()
  /** The multi-valued ones, by `Mark.key` (type and value): their heap, and how many are live. */
  private readonly byValue = new Map<string, { readonly heap: LatestFirst; live: number }>()
  private readonly isLive = (m: Mark): boolean => this.live.has(m)

  add(m: Mark): void {
    if (this.live.has(m)) return
    this.live.add(m)
    this.all.push(m)
    if (m.op[6] === 0) return
    let e = this.byValue.get(m.key)
    if (!e) this.byValue.set(m.key, (e = { heap: new LatestFirst(), live: 0 }))
    e.heap.push(m)
    e.live++
  }

  delete(m: Mark): void {
    if (!this.live.delete(m) || m.op[6] === 0) return
    const e = this.byValue.get(m.key) as { live: number }
    if (--e.live === 0) this.byValue.delete(m.key)
  }

  /** What the type shows on the characters passed now; undefined for nothing. */
  shown(): Shown | undefined {
    const latest = this.all.top(this.isLive)
    if (!latest) return undefined
    if (latest.op[6] === 0) return latest.op[2] === null ? undefined : { value: latest.op[2], key: latest.valueKey }
    // A multi-valued type: each value that its latest op adds.
    const kept: Array<[string, Mark]> = []
    for (const [key, e] of this.byValue) {
      const w = e.heap.top(this.isLive) as Mark
      if (w.op[6] === 1) kept.push([key, w])
    }
    if (!kept.length) return undefined
    kept.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return { value: Object.freeze(kept.map(([, m]) => m.op[2])), key: `[${kept.map(([, m]) => m.valueKey).join(',')}]` }
  }
}
