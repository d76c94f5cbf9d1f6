import { describe, expect, it } from 'vitest'
import type { ClientLie } from '@stead/relay'
import { ConsensusCore } from '@stead/relay/consensus'
import { ClockVotes } from '@stead/relay/testing'
import { STRATEGIES, prepareWorkload, runSimulation, type SimOptions } from '../src/index.ts'

/**
 * The CI slice of the simulator: fixed seeds that cover every Byzantine
 * strategy at N = 4 and N = 7, with crashes, a partition and message loss.
 * The soak is `npm run sim -- --seeds 200 ...` (see the README).
 */
async function run(options: Partial<SimOptions> & { seed: number }, envelopesPerClient = 6) {
  const o: SimOptions = { relays: 4, byzantine: 0, strategy: 'silent', crash: 0, steps: 6000, partition: true, loss: 0.02, ...options }
  const workload = await prepareWorkload(o.seed, 3, envelopesPerClient, o.byzantine > 0)
  return runSimulation(o, workload)
}

describe('deterministic simulation', () => {
  it('replays a seed exactly', async () => {
    const a = await run({ seed: 42, byzantine: 1, strategy: 'equivocate', crash: 1 })
    const b = await run({ seed: 42, byzantine: 1, strategy: 'equivocate', crash: 1 })
    expect(b).toEqual(a)
  })

  it("orders an admin's policy changes like any update: every attested verdict agrees with a policy model kept apart from the audit (N = 4 and 7, Byzantine relays, a Byzantine client revoked mid-run, two guests racing for one invitation, a revoked phone writing on)", async () => {
    let unauthorized = 0
    for (const [relays, byzantine, seed] of [
      [4, 1, 1],
      [4, 1, 3],
      [7, 2, 5],
    ] as const) {
      const o: SimOptions = { relays, byzantine, strategy: 'equivocate', crash: 1, steps: 12000, partition: true, loss: 0.02, sdkClients: 2, seed }
      const r = await runSimulation(o, await prepareWorkload(seed, 3, 6, true, true))
      expect(r.violation).toBeUndefined()
      // Creation, an invitation, the Byzantine client's revocation, an honest client's revocation and its return,
      // everyone reads, a history retention, a writer revokes its phone; of two guests redeeming the single-use
      // invitation at once, exactly one gets it.
      expect(r.policy.redeemed).toBe(1)
      expect(r.policy.changes).toBe(9)
      // The admin's deletion of the guest list, committed.
      expect(r.policy.deleted).toBe(1)
      unauthorized += r.policy.unauthorized
    }
    // (The phone's writes after its revocation are refused at the doors, or where one got in, by the audit: the
    // oracle checks each verdict; which of the two depends on timing.)
    expect(unauthorized).toBeGreaterThan(0)
  }, 120_000)

  it.each([
    ['a revoked client takes a refused sequence number with a filler', 14, 'split-refusal'],
    ["a peer's wake for an envelope let in before its author was revoked is not refused", 90, 'equivocate'],
  ] as const)('keeps going when %s (N = 7, the CLI defaults of that seed)', async (_what, seed, strategy) => {
    const o: SimOptions = { seed, relays: 7, byzantine: 2, strategy, crash: 2, steps: 20_000, partition: true, loss: 0.02, retainRounds: 80, sdkClients: 2 }
    const r = await runSimulation(o, await prepareWorkload(seed, 3, 8, true, true))
    expect(r.violation).toBeUndefined()
    expect(r.endedIdle).toBe(true)
  }, 120_000)

  it('commits everything with no faults', async () => {
    const r = await run({ seed: 1, partition: false, loss: 0 })
    expect(r.violation).toBeUndefined()
    expect(r.committedEnvelopes).toBe(r.honestEnvelopes)
    // It ended idle, so every end-of-run check ran (every correct relay at the same last commit among them).
    expect(r.endedIdle).toBe(true)
  })

  it('catches a weakened protocol: a direct rule on 2f authors lets an equivocator get two blocks of one slot committed', async () => {
    const r = await run({ seed: 3, byzantine: 1, strategy: 'equivocate', weakQuorum: true, partition: false })
    expect(r.violation?.message).toMatch(/two blocks of relay 3 round \d+ (both qualify|were ordered)|commit at round \d+ is .*, another relay's/)
    expect(r.violation?.step).toBeGreaterThan(0)
    expect(r.seed).toBe(3)
  })

  it('catches a weakened clock validator: relays that forget the vote they cast for one envelope of a slot vote for its twin too', async () => {
    // A relay seeing the twin of an envelope it voted for forgets that vote: its monotonicity validator holds nothing for the slot.
    const see = ClockVotes.prototype.see
    ClockVotes.prototype.see = function (this: ClockVotes, ...args: Parameters<typeof see>) {
      const [env] = args
      const table = (this as unknown as { lastVote: Map<string, { seq: number; idHex: string }> }).lastVote
      const last = table.get(`${env.space}\0${env.authorId}`)
      if (last && last.seq === env.seq && last.idHex !== env.idHex) table.set(`${env.space}\0${env.authorId}`, { seq: env.seq - 1, idHex: '' })
      see.apply(this, args)
    }
    try {
      const caught: string[] = []
      for (const seed of [3, 10, 15]) {
        const r = await run({ seed, byzantine: 1, strategy: 'vote-anything', partition: false })
        if (r.violation) caught.push(r.violation.message)
      }
      expect(caught.length).toBeGreaterThan(0)
      for (const m of caught) expect(m).toMatch(/voted for two envelopes of|two envelopes of slot .* have clock certificates/)
    } finally {
      ClockVotes.prototype.see = see
    }
  })

  it("catches a relay's consensus core breaking an invariant, at the step it happens: every live core is checked after every event", async () => {
    // Relay 0's core takes back its last commit once it has one (relay/test/consensus-invariants.test.ts breaks the others).
    const onMessage = ConsensusCore.prototype.onMessage
    let broken = false
    ConsensusCore.prototype.onMessage = function (this: ConsensusCore, ...args: Parameters<typeof onMessage>) {
      const out = onMessage.apply(this, args)
      if (!broken && this.me === 0 && this.committedRound > 0) {
        broken = true
        ;(this as unknown as { linearizer: { lastCommitRound: number } }).linearizer.lastCommitRound -= 1
      }
      return out
    }
    try {
      const r = await run({ seed: 1, partition: false, loss: 0 })
      expect(broken).toBe(true)
      // (Which check says so depends on what the previous check saw: here the commit it takes back was made in the same event.)
      expect(r.violation?.message).toMatch(/^relay 0 broke a consensus invariant: (last committed leader round went down|an envelope was ordered at round \d+, after the last commit)/)
      expect(r.violation?.step).toBeGreaterThan(0)
    } finally {
      ConsensusCore.prototype.onMessage = onMessage
    }
  })

  it('restarts crashed relays from snapshot plus suffix, with stores pruned as a relay prunes them', async () => {
    let restarts = 0
    let pruned = 0
    let lost = 0
    let replayed = 0
    for (const seed of [1, 5]) {
      const r = await run({ seed, byzantine: 1, strategy: 'equivocate', crash: 1, steps: 20_000 }, 30)
      expect(r.violation).toBeUndefined()
      expect(r.snapshots).toBeGreaterThan(0)
      restarts += r.restartsFromSnapshot
      pruned = Math.max(pruned, r.prunedBelowRound)
      lost += r.lostWrites
      replayed += r.replayedFrames
    }
    expect(restarts).toBeGreaterThan(0)
    expect(pruned).toBeGreaterThan(0)
    // Peers held what they sent the crashed relay while it was down and sent it once it was back (as the real mesh does).
    expect(replayed).toBeGreaterThan(0)
    // A crash lost a write its disk had not finished (persist, then speak: nothing said depended on it).
    expect(lost).toBeGreaterThan(0)
  }, 60_000)

  it('a relay down longer than its peers keep blocks starts over from a checkpoint they vouch for, and agrees with them after', async () => {
    // Down about 17 s of a 60 s run, while the others go 100+ rounds on and keep 80: it must
    // hear 'pruned' from f+1 peers, then fetch and install a checkpoint.
    const workload = await prepareWorkload(1, 3, 80, true)
    const r = await runSimulation({ seed: 1, relays: 4, byzantine: 1, strategy: 'equivocate', crash: 1, steps: 40_000, partition: false, loss: 0.02, durationMs: 60_000 }, workload)
    expect(r.violation).toBeUndefined()
    expect(r.checkpointInstalls).toBe(1)
    expect(new Set(r.anchors.slice(0, 3)).size).toBe(1)
  }, 60_000)

  it('catches a disk that loses the batches after the snapshot', async () => {
    // Whether a crash hits the window the lost batches matter in depends on the schedule: some of these seeds must show it.
    const caught = []
    for (const seed of [1, 2, 3, 4]) {
      const r = await run({ seed, byzantine: 1, strategy: 'equivocate', crash: 1, steps: 20_000, loseBatchesOnRestart: true }, 30)
      if (r.violation) caught.push(r.violation.message)
    }
    expect(caught.length).toBeGreaterThan(0)
    expect(caught[0]).toMatch(/attested round \d+ .*differently from another relay|replaying the attested commits gives|never decided/)
  }, 60_000)

  it('catches a relay that speaks before its block is safe from a crash: with its journal lost, a quickly restarted relay signs a second block for a round it sent', async () => {
    // Whether a crash lands between a block's send and its transaction depends on the schedule: some of these seeds must show it.
    const caught: string[] = []
    for (let seed = 27; seed <= 36; seed++) {
      // Asking peers for its latest block at start would cover for the lost journal too: weakened away.
      const weakened = await run({ seed, crash: 1, restartDelayMs: 50, loseJournalOnCrash: true, skipOwnLastAsk: true })
      if (weakened.violation) caught.push(weakened.violation.message)
      // The same crash with the journal kept: the relay takes its block back at the restart.
      const r = await run({ seed, crash: 1, restartDelayMs: 50, skipOwnLastAsk: true })
      expect(r.violation).toBeUndefined()
      // With the journal lost, asking its peers brings its block back before it proposes.
      const asked = await run({ seed, crash: 1, restartDelayMs: 50, loseJournalOnCrash: true })
      expect(asked.violation).toBeUndefined()
    }
    expect(caught.filter((m) => /sent two blocks for round \d+/.test(m)).length).toBeGreaterThan(0)
  })

  it('catches a relay that lost its store and proposes at once: it signs a second block for a round it sent; asking its peers first, it never does', async () => {
    // Whether the relay has work before any peer's block reaches it depends on the schedule: some of these seeds must show it.
    const caught: string[] = []
    for (const seed of [13, 22, 29, 30]) {
      const weakened = await run({ seed, crash: 1, restartDelayMs: 50, loseStoreOnCrash: true, skipOwnLastAsk: true })
      if (weakened.violation) caught.push(weakened.violation.message)
      const r = await run({ seed, crash: 1, restartDelayMs: 50, loseStoreOnCrash: true })
      expect(r.violation).toBeUndefined()
      expect(r.endedIdle).toBe(true)
    }
    expect(caught.filter((m) => /sent two blocks for round \d+/.test(m)).length).toBeGreaterThan(0)
    // With an equivocating relay beside it, the amnesiac relay catches up and the cluster agrees.
    const r = await run({ seed: 5, byzantine: 1, strategy: 'equivocate', crash: 1, loseStoreOnCrash: true })
    expect(r.violation).toBeUndefined()
    expect(new Set(r.anchors.slice(0, 3)).size).toBe(1)
  })

  for (const strategy of STRATEGIES) {
    it(`N=4 stays safe and live with a Byzantine relay that does '${strategy}' and a crash`, async () => {
      // A flooding relay sends 20 requests with each block: more messages, so more steps for the same work.
      const r = await run({ seed: 7, byzantine: 1, strategy, crash: 1, sdkClients: 2, ...(strategy.startsWith('flood-') ? { steps: 20_000 } : {}) })
      expect(r.violation).toBeUndefined()
      expect(Math.min(...r.anchors.slice(0, 3))).toBeGreaterThan(3)
      // Once the work is done every correct relay goes quiet, whatever the Byzantine one did
      // (a block naming ancestors that do not exist used to keep them fetching forever).
      expect(r.endedIdle).toBe(true)
    })
  }

  for (const [i, strategy] of (['equivocate', 'blame-leader', 'forged-envelopes', 'withhold-block'] as const).entries()) {
    it(`N=7 stays safe and live with two Byzantine relays ('${strategy}') and a crash`, async () => {
      const r = await run({ seed: 100 + i, relays: 7, byzantine: 2, strategy, crash: 1, steps: 10_000, sdkClients: 2 })
      expect(r.violation).toBeUndefined()
      expect(Math.min(...r.anchors.slice(0, 5))).toBeGreaterThan(3)
    })
  }
})

describe('SDK clients in the simulated world', () => {
  it('replays a seed exactly, clients, their crash and the lies told them included', async () => {
    const a = await run({ seed: 42, byzantine: 1, strategy: 'equivocate', crash: 1, sdkClients: 2, clientLie: 'lie-attest' })
    const b = await run({ seed: 42, byzantine: 1, strategy: 'equivocate', crash: 1, sdkClients: 2, clientLie: 'lie-attest' })
    expect(a.violation).toBeUndefined()
    expect(b).toEqual(a)
  })

  // What each lie must make the clients do: blame the liar, or just take frames and attestations from the others.
  const blamedFor: Record<string, boolean> = {
    'lie-attest': true,
    junk: true,
    'forge-envelope': true,
    'withhold-commits': false,
    'withhold-envelopes': false,
    slow: false,
    // Proven only on a client that takes frames from the liar, or not at all: not required here.
    'pad-frames': false,
    'name-unsent': false,
    censor: false,
    impostor: true,
    rechallenge: true,
  }
  for (const [i, lie] of Object.keys(blamedFor).entries()) {
    it(`keeps every client guarantee against a relay that tells its clients '${lie}', a relay crash and a client crash`, async () => {
      const r = await run({ seed: 200 + i, byzantine: 1, strategy: 'silent', crash: 1, steps: 20_000, sdkClients: 2, clientLie: lie as ClientLie })
      expect(r.violation).toBeUndefined()
      // Ended quiet: every client held the last attested state, with nothing pending, and G5 was checked.
      expect(r.endedIdle).toBe(true)
      expect(r.safeUpdates.committed).toBeGreaterThan(0)
      if (blamedFor[lie]) expect(r.clientBlames).toBeGreaterThan(0)
    })
  }

  // Seeds where, before relays vouched on subscribe for the commits a client already holds, clients ended with their own
  // outcomes unconfirmed for ever: the relay that had crashed came back with nothing more to commit, and a liar withheld.
  // (Each with the strategy the soak gave it then: a longer list of strategies would give it another.)
  for (const [seed, strategy] of [[1, 'withhold-block'], [24, 'flood-fetch'], [34, 'flood']] as const) {
    it(`confirms every client's own outcomes once the cluster is quiet, with a liar and a relay that was down (seed ${seed})`, async () => {
      const r = await run({ seed, byzantine: 1, strategy, crash: 1, steps: 20_000, sdkClients: 2 }, 30)
      expect(r.violation).toBeUndefined()
      expect(r.busyAtEnd).toBeUndefined()
      expect(r.endedIdle).toBe(true)
    })
  }

  // The soak's long outages (npm run sim: every 4th seed with --crash): peers prune what the relay that is down needs.
  for (const [seed, strategy] of [[20, 'flood'], [28, 'equivocate']] as const) {
    it(`a relay down until its peers pruned its rounds starts over from a checkpoint, clients and a liar beside it (seed ${seed})`, async () => {
      const r = await run({ seed, byzantine: 1, strategy, crash: 1, steps: 40_000, sdkClients: 2, longOutage: true }, 30)
      expect(r.violation).toBeUndefined()
      expect(r.checkpointInstalls).toBe(1)
      expect(r.endedIdle).toBe(true)
    })
  }

  // A client a relay told `pruned` (its snapshot bootstrap fails here: no HTTP) kept waiting for a snapshot after
  // commits had brought it past that point, following nothing: it ended with updates undecided.
  it('a client told pruned follows commits again once it stands where the relays keep them (seed 1000)', async () => {
    // Without the paced reader: in this seed it is a few deltas behind when its source lies, the relays (pruning
    // hard in a long outage) prune past it meanwhile, and only a snapshot over HTTP, which the simulator lacks, helps.
    const r = await run({ seed: 1000, byzantine: 1, strategy: 'flood', crash: 1, steps: 40_000, sdkClients: 2, longOutage: true, sdkPaced: false }, 8)
    expect(r.violation).toBeUndefined()
    expect(r.busyAtEnd).toBeUndefined()
    expect(r.endedIdle).toBe(true)
  })

  it('catches a weakened client: told f = 0, it takes one lying attestation for a quorum and blames the correct relays', async () => {
    const r = await run({ seed: 3, byzantine: 1, strategy: 'silent', partition: false, sdkClients: 2, weakClients: true, clientLie: 'lie-attest' })
    expect(r.violation?.message).toMatch(/client \d blamed correct relay \d/)
    expect(r.violation?.step).toBeGreaterThan(0)
    // The same run with clients that know f holds.
    const honest = await run({ seed: 3, byzantine: 1, strategy: 'silent', partition: false, sdkClients: 2, clientLie: 'lie-attest' })
    expect(honest.violation).toBeUndefined()
  })
})
