#!/usr/bin/env node
import { parseArgs } from 'node:util'
import { runEpochSeed } from './epoch-runs.ts'

const USAGE = `usage: npm run sim:epochs -- [--seeds N] [--from S] [--changes K]

Seeded runs of committee changes (issue 49) on the simulator harness
(SimCluster: real relays and an SDK client in simulated time): per seed,
K changes (default 3) drawn from replace a relay by a new machine, move
one's API, rotate one's key, grow 4 to 7 and shrink 7 to 4, each backed by
the operators of 2f+1 correct current relays, with one fault per change
drawn too: none; a Byzantine member (it lies to its clients and misbehaves
towards the other relays with a --byzantine strategy, and stays Byzantine
in the next epoch); a member crashed at the boundary; one cut off from the
others; or the committee split in two sides without a quorum for 0.5-6 s.
A seed fails when the relays end apart, the client does not follow, or an
acknowledged update is missing or counted twice; it replays exactly with
--from S --seeds 1.`

const { values } = parseArgs({ options: { seeds: { type: 'string', default: '20' }, from: { type: 'string', default: '1' }, changes: { type: 'string', default: '3' }, help: { type: 'boolean' } } })
if (values.help) {
  console.log(USAGE)
  process.exit(0)
}
const seeds = Number(values.seeds)
const from = Number(values.from)
const changes = Number(values.changes)
if (![seeds, from, changes].every((n) => Number.isSafeInteger(n) && n > 0)) {
  console.error(`--seeds, --from and --changes take whole numbers above 0\n\n${USAGE}`)
  process.exit(2)
}
const started = Date.now()
const failed: number[] = []
const kinds = new Map<string, number>()
for (let seed = from; seed < from + seeds; seed++) {
  try {
    const r = await runEpochSeed(seed, changes)
    for (const c of r.changes) kinds.set(c.split(' ')[0]!, (kinds.get(c.split(' ')[0]!) ?? 0) + 1)
    console.log(`seed ${seed}: ok, ${r.changes.join(', ')}; ${r.acknowledged} safe updates in ${(r.simulatedMs / 1000).toFixed(1)} s simulated`)
  } catch (err) {
    failed.push(seed)
    console.log(`seed ${seed}: FAILED: ${(err as Error).message}`)
  }
}
console.log(`${seeds - failed.length} passed, ${failed.length} failed${failed.length ? ` (seeds ${failed.join(', ')})` : ''}; changes: ${[...kinds].map(([k, n]) => `${k} ${n}`).join(', ')}; ${((Date.now() - started) / 1000).toFixed(0)} s`)
process.exit(failed.length ? 1 : 0)
