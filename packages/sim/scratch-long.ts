import { runSimulation } from './src/simulation.ts'
import { prepareWorkload } from './src/workload.ts'
for (let seed = 1; seed <= 8; seed++) {
  const workload = await prepareWorkload(seed, 3, Number(process.env.ENV ?? 30), true)
  const t0 = performance.now()
  const r = await runSimulation({ seed, relays: 4, byzantine: 1, strategy: 'silent', crash: 1, steps: 60000, partition: true, loss: 0.02, retainRounds: 80, sdkClients: 2, durationMs: Number(process.env.DUR ?? 45000), restartDelayMs: Number(process.env.OUT ?? 25000) }, workload)
  console.log(seed, r.ok, r.violation?.message?.slice(0, 120), 'installs', r.checkpointInstalls, 'replayed', r.replayedFrames, 'dropped', r.droppedHeldFrames, 'rounds', r.rounds.join('/'), 'steps', r.steps, (performance.now() - t0).toFixed(0), 'ms')
}
