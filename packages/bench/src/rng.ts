/** The simulator's seeded PRNG (sfc32 through splitmix32): every workload choice comes from one, so a run's op sequence replays. */
export { Rng } from '@stead/sim'
