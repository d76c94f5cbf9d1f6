import { SteadError, clockInit, decode, encodeEnvelope, openEnvelopeSync, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { ConsensusCore, ConsensusInvariantError, decodeMessage, encodeMessage, payloadInfoOf, signBlock, type Block, type Committee, type Output, type PayloadInfo, type SyncCrypto } from '../src/consensus/index.ts'

const crypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }
const secrets = [0, 1, 2, 3].map((i) => new Uint8Array(32).fill(i + 10))
const committee: Committee = { f: 1, keys: secrets.map(publicKeyOfSync) }
const GC_DEPTH = 4

function inspect(frame: Uint8Array): PayloadInfo | SteadError {
  try {
    return payloadInfoOf(openEnvelopeSync({ sha256: crypto.sha256, verify: verifySync }, decode(frame)))
  } catch (e) {
    if (e instanceof SteadError) return e
    throw e
  }
}

const author = { secretKey: new Uint8Array(32).fill(77), publicKey: publicKeyOfSync(new Uint8Array(32).fill(77)) }
async function envelope(seq: number): Promise<Uint8Array> {
  const env = await sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [seq] }], safe: [] })
  return encodeEnvelope(env)
}

/** The private state the corruptions below reach into (the core exposes none of it). */
interface Internals {
  lastCommitRound: number
  proposer: { lastProposed: number }
  infosOf: Map<string, readonly PayloadInfo[]>
  dag: { gcRound: number; accept(block: Block): { digestHex: string; round: number; author: number }; byDigest: Map<string, unknown>; rounds: Map<number, Map<number, unknown[]>> }
  ordered: { hasBlock(digestHex: string): boolean; orderBlock(block: { round: number; author: number; digestHex: string }): void }
  payload: { bytes: number }
}
/** Where that state lives since the core was split into its sub-protocols (proposer.ts, linearizer.ts). */
interface Parts {
  dag: Internals['dag']
  payload: Internals['payload']
  proposer: { state: Internals['proposer'] }
  linearizer: { lastCommitRound: number; infosOf: Internals['infosOf']; ordered: Internals['ordered'] }
}
const internals = (c: ConsensusCore): Internals => {
  const p = c as unknown as Parts
  return {
    get lastCommitRound() {
      return p.linearizer.lastCommitRound
    },
    set lastCommitRound(round: number) {
      p.linearizer.lastCommitRound = round
    },
    proposer: p.proposer.state,
    infosOf: p.linearizer.infosOf,
    dag: p.dag,
    ordered: p.linearizer.ordered,
    payload: p.payload,
  }
}

/**
 * Four cores wired directly commit envelopes one at a time, past several GC
 * rounds (gcDepth 4), every core's full check passing after every output
 * taken. Returns the cores.
 */
async function committedCluster(): Promise<ConsensusCore[]> {
  const cores = [0, 1, 2, 3].map((me) => new ConsensusCore({ committee, me, secretKey: secrets[me]!, crypto, inspect, paceMs: 0, gcDepth: GC_DEPTH }))
  const inbox: Array<{ from: number; out: Output }> = []
  const route = (from: number, outs: Output[]) => {
    for (const o of outs) inbox.push({ from, out: o })
  }
  for (let seq = 1; seq <= 8; seq++) {
    const frame = await envelope(seq)
    const c = cores[seq % 4]!
    if (c.submit(frame, inspect(frame) as PayloadInfo) === 'queued') route(seq % 4, c.onSubmitted())
    for (let steps = 0; inbox.length; steps++) {
      expect(steps).toBeLessThan(20_000)
      const { from, out } = inbox.shift()!
      if (out.type === 'send') route(out.to, cores[out.to]!.onMessage(from, decodeMessage(crypto, committee, encodeMessage(out.message))))
      else if (out.type === 'broadcast') {
        for (let to = 0; to < 4; to++) if (to !== from) route(to, cores[to]!.onMessage(from, out.message))
      } else if (out.type === 'timer' && cores[from]!.busy) route(from, cores[from]!.onTimer(out.name, out.round))
      for (const core of cores) core.checkInvariants('full')
    }
  }
  expect(Math.min(...cores.map((c) => c.committedRound))).toBeGreaterThan(2 * GC_DEPTH)
  return cores
}

/**
 * An event that changes nothing here (a leader timer for round 0): the
 * full check walks again only after one of the core's state-changing
 * methods ran, and the corruptions below bypass them.
 */
const touch = (c: ConsensusCore) => void c.onTimer('leader', 0)

describe('ConsensusCore.checkInvariants', () => {
  it('holds after every output of four cores committing past several GC rounds', async () => {
    const cores = await committedCluster()
    for (const c of cores) expect(() => c.checkInvariants('full')).not.toThrow()
  })

  it("catches a commit round or an own round that went down, in the cheap check production runs", async () => {
    const [a, b] = await committedCluster()
    internals(a!).lastCommitRound -= 1
    expect(() => a!.checkInvariants('cheap')).toThrow(ConsensusInvariantError)
    expect(() => a!.checkInvariants('cheap')).toThrow(/last committed leader round went down/)
    internals(b!).proposer.lastProposed -= 1
    expect(() => b!.checkInvariants('cheap')).toThrow(/own round went down/)
  })

  it('catches a second block of one slot in the ordered set, in the full check only', async () => {
    const [c] = await committedCluster()
    const core = internals(c!)
    // An ordered block above the GC round, and a twin of it (same slot and ancestors, listed in another order).
    let ordered: Block | undefined
    for (let round = core.dag.gcRound + 1; !ordered && round <= c!.committedRound; round++) {
      for (let a = 0; a < 4 && !ordered; a++) ordered = c!.blocksAt(round, a).find((b) => core.ordered.hasBlock(b.digestHex))
    }
    expect(ordered).toBeDefined()
    const { round, author: by, ancestors } = ordered!.header
    const twin = signBlock(crypto, secrets[by]!, { round, author: by, ancestors: [...ancestors].reverse(), payload: [] })
    expect(twin.digestHex).not.toBe(ordered!.digestHex)
    const node = core.dag.accept(twin)
    core.infosOf.set(twin.digestHex, [])
    core.ordered.orderBlock(node)
    touch(c!)
    expect(() => c!.checkInvariants('cheap')).not.toThrow()
    expect(() => c!.checkInvariants('full')).toThrow(new RegExp(`two blocks of relay ${by} round ${round} are ordered`))
  })

  it('catches a block leaving the DAG above the GC round, and a new block whose ancestor is not there, in the full check only', async () => {
    const [c, d] = await committedCluster()
    // A block of the highest round held, and one of its ancestors above the GC round, dropped from the DAG's indexes.
    const drop = (core: Internals, hex: string, round: number, by: number) => {
      core.dag.byDigest.delete(hex)
      const slot = core.dag.rounds.get(round)!.get(by)!
      slot.splice(slot.findIndex((b) => (b as { digestHex: string }).digestHex === hex), 1)
      if (slot.length === 0) core.dag.rounds.get(round)!.delete(by)
      core.infosOf.delete(hex)
    }
    const core = internals(c!)
    const top = Math.max(...core.dag.rounds.keys())
    const [block] = [0, 1, 2, 3].flatMap((a) => c!.blocksAt(top, a))
    const gone = block!.header.ancestors.find((a) => a.round > core.dag.gcRound)!
    expect(core.dag.byDigest.has(toHex(gone.digest))).toBe(true)
    drop(core, toHex(gone.digest), gone.round, gone.author)
    touch(c!)
    expect(() => c!.checkInvariants('cheap')).not.toThrow()
    expect(() => c!.checkInvariants('full')).toThrow(new RegExp(`1 block\\(s\\) of round ${gone.round} left the DAG above the GC round`))

    // A block new to the check (here a block put back into the indexes after its ancestor was dropped, without
    // Dag.accept, which would refuse it as the core's own assert): its ancestors are checked as it is new.
    const other = internals(d!)
    const dTop = Math.max(...other.dag.rounds.keys())
    const [fresh] = [0, 1, 2, 3].flatMap((a) => d!.blocksAt(dTop, a))
    drop(other, fresh!.digestHex, dTop, fresh!.header.author)
    const lost = fresh!.header.ancestors.find((a) => a.round > other.dag.gcRound)!
    drop(other, toHex(lost.digest), lost.round, lost.author)
    other.dag.byDigest.set(fresh!.digestHex, { block: fresh, round: dTop, author: fresh!.header.author, digestHex: fresh!.digestHex, ancestors: fresh!.header.ancestors.map((a) => ({ round: a.round, author: a.author, digestHex: toHex(a.digest) })) })
    other.dag.rounds.get(dTop)!.set(fresh!.header.author, [other.dag.byDigest.get(fresh!.digestHex)])
    other.infosOf.set(fresh!.digestHex, fresh!.header.payload.map(() => ({}) as PayloadInfo))
    touch(d!)
    expect(() => d!.checkInvariants('full')).toThrow(/neither in the DAG nor at or below the GC round/)
  })

  it("catches the payload queue's byte count drifting from what it holds: in the full check, and in the cheap one once the queue is empty", async () => {
    const [c] = await committedCluster()
    const frame = await envelope(100)
    // Queued, not proposed yet (onSubmitted would take it into a block).
    expect(c!.submit(frame, inspect(frame) as PayloadInfo)).toBe('queued')
    internals(c!).payload.bytes += 1
    expect(() => c!.checkInvariants('cheap')).not.toThrow()
    expect(() => c!.checkInvariants('full')).toThrow(/payload queue counts 1 envelopes, \d+ bytes/)
    // Proposing takes the envelope and its bytes: one byte is left over, with nothing queued.
    c!.onSubmitted()
    expect(c!.queuedEnvelopes).toBe(0)
    expect(() => c!.checkInvariants('cheap')).toThrow(/payload queue accounts 1 bytes for 0 envelopes/)
  })
})
