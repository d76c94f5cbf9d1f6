/** Latency samples of one op class, in milliseconds. Kept whole (a run is seconds long), sorted once at the end. */
export class Samples {
  private data = new Float64Array(1024)
  private n = 0

  add(ms: number): void {
    if (this.n === this.data.length) {
      const next = new Float64Array(this.data.length * 2)
      next.set(this.data)
      this.data = next
    }
    this.data[this.n++] = ms
  }

  get count(): number {
    return this.n
  }

  summary(): LatencySummary | null {
    if (this.n === 0) return null
    const sorted = this.data.slice(0, this.n).sort()
    let sum = 0
    for (const v of sorted) sum += v
    const q = (p: number): number => sorted[Math.min(this.n - 1, Math.floor(p * this.n))] as number
    return { count: this.n, mean: round(sum / this.n), p50: round(q(0.5)), p95: round(q(0.95)), p99: round(q(0.99)), max: round(sorted[this.n - 1] as number) }
  }
}

export interface LatencySummary {
  readonly count: number
  readonly mean: number
  readonly p50: number
  readonly p95: number
  readonly p99: number
  readonly max: number
}

export function round(v: number, digits = 3): number {
  const m = 10 ** digits
  return Math.round(v * m) / m
}

/** The median of a few measurements (the mean of the middle two for an even count). */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const mid = s.length >> 1
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2
}

/**
 * Prints, per implementation and experiment, the median of the runs' p50
 * and their range: what the A/B reports (one row per run and kind) sum up.
 */
export function printRunMedians<E extends string>(rows: ReadonlyArray<{ readonly kind: string } & { readonly [K in E]: LatencySummary | null }>, kinds: readonly string[], experiments: readonly E[]): void {
  for (const name of kinds) {
    for (const exp of experiments) {
      const p50s = rows
        .filter((r) => r.kind === name)
        .map((r) => r[exp]?.p50)
        .filter((x): x is number => x !== undefined)
        .sort((a, b) => a - b)
      if (p50s.length) console.log(`${name}, ${exp}: median of the runs' p50 ${p50s[p50s.length >> 1]?.toFixed(1)} ms (runs ${p50s[0]?.toFixed(1)}-${p50s.at(-1)?.toFixed(1)})`)
    }
  }
}

/** One latency summary on a line: p50 / p95 / max and the count. */
export function formatLatency(s: LatencySummary | null): string {
  return s ? `p50 ${s.p50.toFixed(1)} / p95 ${s.p95.toFixed(1)} / max ${s.max.toFixed(1)} ms (${s.count})` : '-'
}
