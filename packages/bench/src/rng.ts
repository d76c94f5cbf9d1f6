import { Rng } from '@stead/sim'

/** The simulator's seeded PRNG (sfc32 through splitmix32): every workload choice comes from one, so a run's op sequence replays. */
export { Rng }

/** `[0, 1)` numbers from the seeded PRNG: the same edits for every system compared on a workload. */
export function rng(seed: number): () => number {
  const r = new Rng(seed)
  return () => r.next()
}
