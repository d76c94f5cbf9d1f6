export { runSimulation, STRATEGIES, type SimOptions, type SimResult, type Strategy } from './simulation.ts'
export { prepareWorkload, type Workload } from './workload.ts'
export { Rng } from './rng.ts'
export { SimCluster, SimRelay, type SimClusterOptions, type ClientTraffic } from './sim-cluster.ts'
