#!/usr/bin/env node
import { parseArgs } from 'node:util'
import { runSimulation, STRATEGIES, type Strategy } from './simulation.ts'
import { prepareWorkload } from './workload.ts'
import { CLIENT_LIES, type ClientLie } from '@stead/relay'

/**
 * A flooding relay sends 20 requests with each block: every one is an event, so the same work takes more steps
 * (and more since frames for a peer that is down wait and are delivered when it is back instead of lost:
 * N=7 seed 95, flood-asks, took 102,489 steps).
 */
const FLOOD_STEPS_FACTOR = 8

const USAGE = `usage: npm run sim -- [--seeds N | --seed S] [--relays N] [--byzantine K] [--strategy NAME|all]
                     [--crash K] [--steps N] [--clients N] [--envelopes N] [--sdk-clients N]
                     [--client-lie NAME|none] [--loss P] [--no-partition]
                     [--retain-rounds N] [--restart-after MS] [--lose-store] [--long-outage-every K]
                     [--consensus-checks full|cheap|off] [--policy on|off]

Runs real relays (RelayNode: event loop, consensus, audit, store,
attestations, snapshots, checkpoints) over a seeded simulated network, disk
and clock, and checks what they store and attest: identical commit
sequences, at most one block ordered per author and round, identical
attestations, a client replaying them reaches the attested state with every
invariant kept, no correct relay sends two blocks for one round, and
progress after faults heal. Crashed relays lose the writes their disk had
not finished and restart from their store (--restart-after MS: that long
after the crash; --lose-store: with an empty store and journal, as after a
lost disk, and it must ask its peers for its latest block). Relays
snapshot every 8 batches and prune blocks older than --retain-rounds
(default 80 = 4 x gcDepth, the least a relay accepts). A failing seed prints
its step and replays exactly. --steps (default 20000) caps the events of a
run; the flood-* strategies get ${FLOOD_STEPS_FACTOR} times as many, since each of their
requests is an event too. With --crash, every K-th seed (--long-outage-every,
default 4; 0: none) keeps its first crashed relay down until its peers pruned
the rounds it needs, so it must start over from a checkpoint (a 40 s run,
with twice the steps). Real SDK clients (--sdk-clients, default 2) run
beside the relays; Byzantine relays tell them a lie (--client-lie, default
one per seed; none: honest to clients). After every event each live
relay's consensus core checks its invariants (--consensus-checks: full,
the default, walks its DAG too; cheap is what production is meant to
run; off). An admin changes the space's policy during the run (--policy,
default on): it makes the workload's clients and the SDK clients writers,
revokes the Byzantine client and one honest client, gives the latter its
role back, sets a history retention (relays then prune histories as they
compact, crashes and checkpoints between), and two guests race for a
single-use invitation; every
verdict the relays attest is checked against a policy model kept apart
from the audit (policy=changes/unauthorized/redeemed/revoked-device writes refused).
strategies: ${STRATEGIES.join(', ')}`

const { values } = parseArgs({
  options: {
    seeds: { type: 'string' },
    seed: { type: 'string' },
    relays: { type: 'string', default: '4' },
    byzantine: { type: 'string', default: '0' },
    strategy: { type: 'string', default: 'all' },
    crash: { type: 'string', default: '0' },
    steps: { type: 'string', default: '20000' },
    clients: { type: 'string', default: '3' },
    'sdk-clients': { type: 'string', default: '2' },
    policy: { type: 'string', default: 'on' },
    'client-lie': { type: 'string' },
    envelopes: { type: 'string', default: '8' },
    loss: { type: 'string', default: '0.02' },
    'no-partition': { type: 'boolean', default: false },
    'retain-rounds': { type: 'string', default: '80' },
    'restart-after': { type: 'string' },
    'lose-store': { type: 'boolean', default: false },
    'long-outage-every': { type: 'string', default: '4' },
    'consensus-checks': { type: 'string', default: 'full' },
    help: { type: 'boolean', default: false },
  },
})

if (values.help) {
  console.log(USAGE)
  process.exit(0)
}

function int(name: string, v: string | undefined): number {
  const n = Number(v)
  if (!Number.isSafeInteger(n) || n < 0) {
    console.error(`--${name} must be a non-negative integer, got ${v}\n\n${USAGE}`)
    process.exit(2)
  }
  return n
}

const strategyArg = values.strategy as string
if (strategyArg !== 'all' && !STRATEGIES.includes(strategyArg as Strategy)) {
  console.error(`unknown strategy ${strategyArg}\n\n${USAGE}`)
  process.exit(2)
}
const consensusChecks = values['consensus-checks'] as string
if (consensusChecks !== 'full' && consensusChecks !== 'cheap' && consensusChecks !== 'off') {
  console.error(`--consensus-checks must be full, cheap or off, got ${consensusChecks}\n\n${USAGE}`)
  process.exit(2)
}
const seeds = values.seed !== undefined ? [int('seed', values.seed)] : Array.from({ length: int('seeds', values.seeds ?? '10') }, (_, i) => i + 1)
const relays = int('relays', values.relays)
const byzantine = int('byzantine', values.byzantine)
if (relays < 4 || byzantine > Math.floor((relays - 1) / 3)) {
  console.error(`need N >= 4 relays and at most f = floor((N-1)/3) Byzantine ones\n\n${USAGE}`)
  process.exit(2)
}

const lieArg = values['client-lie']
if (lieArg !== undefined && lieArg !== 'none' && !CLIENT_LIES.includes(lieArg as ClientLie)) {
  console.error(`unknown client lie ${lieArg}\n\n${USAGE}`)
  process.exit(2)
}
const clientLie = lieArg === undefined ? undefined : lieArg === 'none' ? null : (lieArg as ClientLie)

let failed = 0
const totals = { installs: 0, replayed: 0, stepLimit: 0, blames: 0, safe: 0, paced: 0 }
const started = performance.now()
for (const seed of seeds) {
  const strategy = strategyArg === 'all' ? (STRATEGIES[seed % STRATEGIES.length] as Strategy) : (strategyArg as Strategy)
  const workload = await prepareWorkload(seed, int('clients', values.clients), int('envelopes', values.envelopes), byzantine > 0, values.policy !== 'off')
  const every = int('long-outage-every', values['long-outage-every'])
  const longOutage = every > 0 && int('crash', values.crash) > 0 && seed % every === 0
  const t0 = performance.now()
  const r = await runSimulation(
    {
      seed,
      relays,
      byzantine,
      strategy,
      crash: int('crash', values.crash),
      steps: int('steps', values.steps) * (strategy.startsWith('flood-') ? FLOOD_STEPS_FACTOR : 1) * (longOutage ? 2 : 1),
      ...(longOutage ? { longOutage } : {}),
      partition: !values['no-partition'],
      loss: Number(values.loss),
      retainRounds: int('retain-rounds', values['retain-rounds']),
      ...(values['restart-after'] !== undefined ? { restartDelayMs: int('restart-after', values['restart-after']) } : {}),
      ...(values['lose-store'] ? { loseStoreOnCrash: true } : {}),
      sdkClients: int('sdk-clients', values['sdk-clients']),
      ...(clientLie !== undefined ? { clientLie } : {}),
      consensusChecks,
    },
    workload,
  )
  const faults = `--crash ${values.crash}${values['restart-after'] !== undefined ? ` --restart-after ${values['restart-after']}` : ''}${values['lose-store'] ? ' --lose-store' : ''}`
  const head = `seed=${seed} N=${relays} byz=${byzantine}${byzantine ? `(${strategy})` : ''} ${faults.slice(2)}${longOutage ? ' long-outage' : ''}`
  const body = `steps=${r.steps} sim=${(r.simulatedMs / 1000).toFixed(1)}s rounds=${r.rounds.join('/')} anchors=${r.anchors.join('/')} stable=${r.committedEnvelopes} envelopes=${r.honestEnvelopes} clocks=${r.clocks.verified}/${r.clocks.unverified} votes=${r.clockVotes.votes}/${r.clockVotes.certified} policy=${r.policy.changes}/${r.policy.unauthorized}/${r.policy.redeemed}/${r.policy.revokedDevice} rejected=${r.rejectedMessages}${r.rejectedMessages ? JSON.stringify(r.rejectedReasons) : ''} snapshots=${r.snapshots} prunedBelowRound=${r.prunedBelowRound} restartsFromSnapshot=${r.restartsFromSnapshot}${r.clientLie ? ` clientLie=${r.clientLie}` : ''} safe=${r.safeUpdates.committed}/${r.safeUpdates.rejected} blames=${r.clientBlames} paced=${r.pacedDeltas} checkpointInstalls=${r.checkpointInstalls} replayed=${r.replayedFrames}${r.droppedHeldFrames ? `(dropped ${r.droppedHeldFrames})` : ''} lostWrites=${r.lostWrites}${r.endedIdle ? '' : ` (ended on the step limit: ${r.busyAtEnd})`} ${(performance.now() - t0).toFixed(0)}ms`
  totals.installs += r.checkpointInstalls
  totals.replayed += r.replayedFrames
  totals.stepLimit += r.endedIdle ? 0 : 1
  totals.blames += r.clientBlames
  totals.paced += r.pacedDeltas
  totals.safe += r.safeUpdates.committed + r.safeUpdates.rejected
  if (r.ok) console.log(`ok   ${head} ${body}`)
  else {
    failed++
    console.log(`FAIL ${head} at step ${r.violation?.step}: ${r.violation?.message}\n     ${body}\n     replay: npm run sim -- --seed ${seed} --relays ${relays} --byzantine ${byzantine} --strategy ${strategy} ${faults} --steps ${values.steps} --sdk-clients ${values['sdk-clients']} --long-outage-every ${values['long-outage-every']} --policy ${values.policy}${lieArg !== undefined ? ` --client-lie ${lieArg}` : ''}`)
  }
}
console.log(`${seeds.length - failed} passed, ${failed} failed (${((performance.now() - started) / 1000).toFixed(1)}s); checkpoint installs ${totals.installs}, replayed frames ${totals.replayed}, runs on the step limit ${totals.stepLimit}, safe updates resolved ${totals.safe}, liars blamed ${totals.blames}, paced deltas ${totals.paced}`)
process.exit(failed ? 1 : 0)
