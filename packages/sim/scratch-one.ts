import { runSimulation } from './src/simulation.ts'
import { prepareWorkload } from './src/workload.ts'
const seed = Number(process.env.SEED ?? 1)
const workload = await prepareWorkload(seed, 3, Number(process.env.ENV ?? 80), true)
const r = await runSimulation({ seed, relays: 4, byzantine: 1, strategy: 'silent', crash: 1, steps: 60000, partition: true, loss: 0.02, retainRounds: 80, sdkClients: 2, durationMs: Number(process.env.DUR ?? 60000), restartDelayMs: Number(process.env.OUT ?? 20000) }, workload)
console.log(r.violation)
