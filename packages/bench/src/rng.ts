import { Rng } from '@stead/sim'

/** The simulator's seeded PRNG (sfc32 through splitmix32): every workload choice comes from one, so a run's op sequence replays. */
export { Rng }

/** `[0, 1)` numbers from the seeded PRNG: the same edits for every system compared on a workload. */
export function rng(seed: number): () => number {
  const r = new Rng(seed)
  return () => r.next()
}

/** Zipf(s) over n ranks by inverse CDF (binary search over the cumulative weights). */
export function zipfSampler(n: number, s: number, rng: Rng): () => number {
  const cdf = new Float64Array(n)
  let mass = 0
  for (let i = 0; i < n; i++) cdf[i] = mass += 1 / Math.pow(i + 1, s)
  return () => {
    const u = rng.next() * mass
    let lo = 0
    let hi = n - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if ((cdf[mid] as number) < u) lo = mid + 1
      else hi = mid
    }
    return lo
  }
}
