import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { authorIdOf, clockInit, decode, encode, encodeEnvelope, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import pino from 'pino'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { parseCluster } from '../src/process/config.ts'
import { CheckpointFetch, decodeManifest, encodeManifest, isCheckpointCommit, signStatement, type CheckpointManifest, type Committee, type SyncCrypto } from '../src/consensus/index.ts'
import type { Mesh } from '../src/mesh/types.ts'
import { RelayNode } from '../src/runtime/node.ts'
import { RelayCheckpoints } from '../src/runtime/checkpoints.ts'
import { systemClock } from '@stead/core'
import type { RelayStore } from '../src/store/store.ts'
import { until as waitUntil } from './helpers/cluster.ts'

const crypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (b) => nodeCrypto.sha256(b) }
const secrets = [1, 2, 3, 4].map((i) => new Uint8Array(32).fill(i))
const committee: Committee = { f: 1, keys: secrets.map((s) => publicKeyOfSync(s)) }

describe('checkpoint manifests', () => {
  it('carry whom each space is charged to, and read manifests written before spaces had one', () => {
    const hash = new Uint8Array(32).fill(7)
    const m: CheckpointManifest = { anchorRound: 20, commits: [], spaces: [{ space: 'a', stateHash: hash, lastAttested: 3, starter: 'alice' }, { space: 'b', stateHash: hash, lastAttested: 4 }] }
    const hexed = (x: CheckpointManifest) => x.spaces.map((sp) => ({ ...sp, stateHash: toHex(sp.stateHash) }))
    expect(hexed(decodeManifest(encodeManifest(m)))).toEqual(hexed(m))
    const older = encode(['stead/checkpoint/v1', 20, [], [['a', hash, 3]]])
    expect(hexed(decodeManifest(older))).toEqual([{ space: 'a', stateHash: toHex(hash), lastAttested: 3 }])
    expect(() => decodeManifest(encode(['stead/checkpoint/v1', 20, [], [['a', hash, 3, 5]]]))).toThrowError(/starter/)
  })
})

describe('checkpoint commits', () => {
  it('fall on the first commit that reaches each multiple of the interval, whatever the commits before', () => {
    expect(isCheckpointCommit(0, 9, 10)).toBe(false)
    expect(isCheckpointCommit(9, 10, 10)).toBe(true)
    expect(isCheckpointCommit(7, 13, 10)).toBe(true)
    expect(isCheckpointCommit(10, 19, 10)).toBe(false)
    expect(isCheckpointCommit(13, 31, 10)).toBe(true)
  })
})

describe('serving checkpoint parts', () => {
  it('serves a peer at most one part per 100 ms however fast it asks, with the latest request it made, and other peers at once', () => {
    vi.useFakeTimers()
    const manifest = encodeManifest({ anchorRound: 10, commits: [], spaces: [{ space: 'a', stateHash: new Uint8Array(32), lastAttested: 1 }] } as unknown as CheckpointManifest)
    const reads: number[] = []
    const store = {
      checkpoint: () => ({ anchorRound: 10, manifest, statement: new Uint8Array(0) }),
      checkpointPart: (_round: number, spaces: readonly string[]) => {
        reads.push(spaces.length)
        return spaces.map(() => new Uint8Array(8))
      },
    }
    const sent: Array<{ to: number; from: number }> = []
    const checkpoints = new RelayCheckpoints({
      committee,
      me: 0,
      secretKey: secrets[0]!,
      crypto,
      every: 10,
      gcDepth: 50,
      log: pino({ level: 'silent' }),
      clock: systemClock,
      host: { spaces: () => [], auditState: () => { throw new Error('unused') }, send: (to, m) => m.kind === 'checkpoint-part' && sent.push({ to, from: m.part.from }), broadcast: () => undefined, openEnvelope: () => { throw new Error('unused') }, install: () => undefined },
    })
    checkpoints.load(store as unknown as RelayStore, 0, [])
    // A liar asks 500 times at once; then an honest peer asks once.
    for (let i = 0; i < 500; i++) checkpoints.onMessage(1, { kind: 'checkpoint-get', anchorRound: 10, from: i % 2 })
    checkpoints.onMessage(2, { kind: 'checkpoint-get', anchorRound: 10, from: 0 })
    expect(sent).toEqual([{ to: 1, from: 0 }, { to: 2, from: 0 }])
    vi.advanceTimersByTime(99)
    expect(sent).toHaveLength(2)
    vi.advanceTimersByTime(1000)
    // One more for the liar, 100 ms later: its latest request, and nothing else.
    expect(sent).toEqual([{ to: 1, from: 0 }, { to: 2, from: 0 }, { to: 1, from: 1 }])
    expect(reads).toHaveLength(3)
    checkpoints.stop()
    vi.useRealTimers()
  })
})

describe('fetching a checkpoint', () => {
  // A "state" here is bytes whose first byte names the space; its hash is sha256 of the bytes.
  const state = (space: string, fill: number) => new Uint8Array([space.charCodeAt(0), fill])
  const open = (bytes: Uint8Array) => {
    if (bytes.length !== 2) throw new Error('not a state')
    return { state: bytes, space: String.fromCharCode(bytes[0] as number), hash: crypto.sha256(bytes) }
  }
  const manifest: CheckpointManifest = {
    anchorRound: 40,
    commits: [{ anchorRound: 40, ordered: ['ab'.repeat(32)], payloadIds: [] }],
    spaces: ['a', 'b', 'c'].map((space, i) => ({ space, stateHash: crypto.sha256(state(space, i)), lastAttested: 30 + i })),
  }
  const bytes = encodeManifest(manifest)
  const statement = (author: number, m: Uint8Array = bytes, round = 40) => signStatement(crypto, secrets[author] as Uint8Array, author, round, crypto.sha256(m))

  it('waits for f+1 relays to vouch for one checkpoint, then pulls it from one of them and checks every part', () => {
    const fetch = new CheckpointFetch(committee, crypto.sha256, 20, open)
    expect(fetch.statement(statement(1))).toBeUndefined()
    // One other relay vouching for another manifest does not make two for either.
    expect(fetch.statement(statement(2, encodeManifest({ ...manifest, spaces: [] })))).toBeUndefined()
    // A checkpoint the relay is already past is of no use.
    expect(fetch.statement(statement(3, bytes, 20))).toBeUndefined()
    const first = fetch.statement(statement(3))
    expect(first).toEqual({ to: 1, anchorRound: 40, from: 0 })
    // The manifest with the first two spaces, then the last one.
    expect(fetch.part(1, { anchorRound: 40, from: 0, held: true, manifest: bytes, states: [state('a', 0), state('b', 1)] })).toEqual({ request: { to: 1, anchorRound: 40, from: 2 } })
    const { done } = fetch.part(1, { anchorRound: 40, from: 2, held: true, manifest: null, states: [state('c', 2)] })
    expect(toHex(encodeManifest(done?.manifest as CheckpointManifest))).toBe(toHex(bytes))
    expect(done?.spaces.map((s) => [s.space, s.lastAttested])).toEqual([['a', 30], ['b', 31], ['c', 32]])
    expect(done?.statements.map((s) => s.author)).toEqual([1, 3])
    expect(fetch.faults).toEqual([])
  })

  it('takes the checkpoint an epoch certificate names from the one relay that holds it; any other still needs f+1', () => {
    const fetch = new CheckpointFetch(committee, crypto.sha256, 39, open, { anchorRound: 40, digest: crypto.sha256(bytes) })
    // Another checkpoint of that round, vouched for by one relay: not the certified one.
    const other = encodeManifest({ ...manifest, spaces: [] })
    expect(fetch.statement(statement(2, other))).toBeUndefined()
    expect(fetch.statement(statement(3))).toEqual({ to: 3, anchorRound: 40, from: 0 })
    // Its manifest must be the certified one too.
    expect(fetch.part(3, { anchorRound: 40, from: 0, held: true, manifest: other, states: [] })).toEqual({ askAgain: true })
    expect(fetch.faults[0]?.reason).toMatch(/manifest for round 40 that was not vouched for/)
    expect(fetch.statement(statement(1))).toEqual({ to: 1, anchorRound: 40, from: 0 })
    const { done } = fetch.part(1, { anchorRound: 40, from: 0, held: true, manifest: bytes, states: [state('a', 0), state('b', 1), state('c', 2)] })
    expect(done?.statements.map((s) => s.author)).toEqual([1])
  })

  it('moves to the next voucher when a source lies or no longer holds it, and starts over once every voucher failed', () => {
    const fetch = new CheckpointFetch(committee, crypto.sha256, 0, open)
    fetch.statement(statement(1))
    expect(fetch.statement(statement(2))).toEqual({ to: 1, anchorRound: 40, from: 0 })
    // Relay 1 sends a manifest nobody vouched for: relay 2 is asked instead.
    const forged = encodeManifest({ ...manifest, spaces: manifest.spaces.map((s) => ({ ...s, lastAttested: 0 })) })
    expect(fetch.part(1, { anchorRound: 40, from: 0, held: true, manifest: forged, states: [] })).toEqual({ request: { to: 2, anchorRound: 40, from: 0 } })
    // A part from a relay not asked is ignored.
    expect(fetch.part(3, { anchorRound: 40, from: 0, held: true, manifest: bytes, states: [] })).toEqual({})
    // Relay 2 sends the right manifest but a state of space b that is not the one vouched for.
    expect(fetch.part(2, { anchorRound: 40, from: 0, held: true, manifest: bytes, states: [state('a', 0), state('b', 9)] })).toEqual({ askAgain: true })
    expect(fetch.faults.map((f) => f.relay)).toEqual([1, 2])
    expect(fetch.faults[1]?.reason).toMatch(/space b that does not hash/)
    expect(fetch.anchorRound).toBeUndefined()
    // Starting over: statements again, and a source that moved on says so.
    fetch.statement(statement(2))
    expect(fetch.statement(statement(3))).toEqual({ to: 2, anchorRound: 40, from: 0 })
    expect(fetch.part(2, { anchorRound: 40, from: 0, held: false, manifest: null, states: [] })).toEqual({ request: { to: 3, anchorRound: 40, from: 0 } })
    expect(fetch.part(3, { anchorRound: 40, from: 0, held: true, manifest: bytes, states: [state('a', 0), state('b', 1), state('c', 2)] }).done?.spaces).toHaveLength(3)
  })
})

/** Relays in one process, their frames delivered on the next turn; a relay that is down gets nothing. */
class Hub {
  private readonly handlers = new Map<number, (from: number, frame: Uint8Array) => void>()
  /** Rewrites or delays a frame on its way (a Byzantine relay, a slow link). */
  private readonly filter: (from: number, frame: Uint8Array) => { frame: Uint8Array; delayMs: number }
  constructor(filter: (from: number, frame: Uint8Array) => { frame: Uint8Array; delayMs: number } = (_, frame) => ({ frame, delayMs: 0 })) {
    this.filter = filter
  }

  mesh(me: number, n: number): Mesh {
    const deliver = (to: number, sent: Uint8Array) => {
      const { frame, delayMs } = this.filter(me, sent)
      const go = () => this.handlers.get(to)?.(me, frame)
      if (delayMs) setTimeout(go, delayMs)
      else setImmediate(go)
    }
    return {
      start: async () => undefined,
      stop: async () => void this.handlers.delete(me),
      send: deliver,
      broadcast: (frame) => {
        for (let i = 0; i < n; i++) if (i !== me) deliver(i, frame)
      },
      onFrame: (handler) => void this.handlers.set(me, handler),
      onPeerConnected: () => {},
      connectedPeers: () => [...this.handlers.keys()].filter((i) => i !== me),
      queuedBytes: () => 0,
    }
  }
}

const nodes: RelayNode[] = []
afterEach(async () => {
  for (const n of nodes.splice(0)) await n.stop()
})

/** Waits for `check` to hold, looking every 5 ms. */
const until = (what: string, check: () => boolean, timeoutMs = 20_000): Promise<unknown> => waitUntil(what, check, timeoutMs, 5)

/**
 * Relay 4 stops; the others commit well past their retention of the rounds
 * it needs; it comes back, must start over from a checkpoint, and must end
 * with the others' stable state and commit on with them. Returns relay 4's log.
 */
async function behindPastRetention(hub: Hub): Promise<Array<{ msg: string; [k: string]: unknown }>> {
  const cluster = parseCluster({
    f: 1,
    relays: secrets.map((s, i) => ({ id: `r${i + 1}`, publicKey: toHex(publicKeyOfSync(s)), mesh: `/ip4/127.0.0.1/tcp/${i + 1}`, api: `127.0.0.1:${i + 1}` })),
    openSpaces: true,
    spacesPerUser: 100,
    checkpointRounds: 10,
  })
  const dirs = secrets.map(() => mkdtempSync(join(tmpdir(), 'stead-cp-')))
  // GC depth 3: blocks are kept for 26 rounds (two checkpoint intervals and two GC depths).
  const logs: string[] = []
  const start = async (i: number): Promise<RelayNode> => {
    const node = new RelayNode({
      cluster,
      me: i,
      secretKey: secrets[i] as Uint8Array,
      dataDir: dirs[i] as string,
      mesh: hub.mesh(i, 4),
      logger: i === 3 ? pino({ level: 'info' }, { write: (line: string) => void logs.push(line) }) : pino({ level: 'silent' }),
      gcDepth: 3,
      leaderTimeoutMs: 20,
      syncIntervalMs: 30,
      snapshotEveryBatches: 2,
      retention: { blockRounds: 1 },
    })
    nodes.push(node)
    await node.start()
    return node
  }
  const relays = [await start(0), await start(1), await start(2), await start(3)]
  const author = { secretKey: new Uint8Array(32).fill(9), publicKey: publicKeyOfSync(new Uint8Array(32).fill(9)) }
  // Sequence numbers are per author and space.
  const seqs = new Map<string, number>()
  const deposit = async (space: string) => {
    const seq = (seqs.get(space) ?? 0) + 1
    seqs.set(space, seq)
    const env = await sealEnvelope(nodeCrypto, author, { space, seq, clock: clockInit(), deps: [], updates: [{ key: `k${seq % 3}`, decl: { type: 'counter' as const, bounds: {} }, ops: [1] }], safe: [] })
    await new Promise<void>((ok) => void (relays[0] as RelayNode).submit(encodeEnvelope(env), 'test', () => ok()))
  }
  const index = (i: number, space: string) => (relays[i] as RelayNode).reads.stableHead(space).index
  for (let k = 0; k < 6; k++) await deposit(k % 2 ? 'a' : 'b')
  await until('relay 4 to have the first commits', () => index(3, 'a') + index(3, 'b') === 6)
  const behind = relays[3] as RelayNode
  const leftAt = behind.status().committedRound as number
  await behind.stop()
  nodes.splice(nodes.indexOf(behind), 1)
  // The others go on, well past their retention of the rounds it needs.
  for (let k = 0; k < 40; k++) await deposit(k % 3 ? 'a' : 'c')
  const committed = (relays[0] as RelayNode).status().committedRound as number
  expect(committed).toBeGreaterThan(leftAt + 40)
  const back = await start(3)
  relays[3] = back
  // It learns how far behind it is from the blocks of new work (an idle cluster makes no rounds).
  const caughtUp = () => ['a', 'b', 'c'].every((s) => index(3, s) === index(0, s))
  for (let k = 0; k < 50 && !caughtUp(); k++) await deposit('c')
  await until('relay 4 to catch up', caughtUp)
  for (const s of ['a', 'b', 'c']) expect(back.reads.stableHead(s).stateHash).toBe(relays[0]?.reads.stableHead(s).stateHash)
  // The checkpoint's manifest told it whom each space is charged to: it counts the author's spaces as the others do.
  const authorId = authorIdOf(nodeCrypto, author.publicKey)
  expect(back.spaceQuota?.held(authorId)).toBe(3)
  for (const s of ['a', 'b', 'c']) expect(back.spaceQuota?.starterOf(s)).toBe(authorId)
  // It took a checkpoint, not the blocks (the others no longer hold them).
  const installed = logs.map((l) => JSON.parse(l) as { msg: string; from?: number; to?: number }).find((l) => l.msg.startsWith('started over from the checkpoint'))
  expect(installed?.from).toBe(leftAt)
  expect(installed?.to).toBeGreaterThan(leftAt + 20)
  // And it commits on with the others.
  await deposit('c')
  const next = index(0, 'c')
  await until('every relay to commit the next one', () => relays.every((_, i) => index(i, 'c') === next))
  expect(new Set(relays.map((r) => r.reads.stableHead('c').stateHash)).size).toBe(1)
  return logs.map((l) => JSON.parse(l) as { msg: string })
}

describe('a relay behind past its peers\' retention', () => {
  it('starts over from a checkpoint f+1 relays vouch for, reaches the same stable state and commits on with them', async () => {
    const logs = await behindPastRetention(new Hub())
    expect(logs.filter((l) => l.msg.startsWith('a peer served a checkpoint'))).toEqual([])
  }, 60_000)

  it('refuses the states a lying relay serves for a checkpoint and takes them from the next voucher', async () => {
    // Relay 1 changes every space state it serves (its stable index, one more); the others'
    // statements come late, so relay 1 vouches first and is asked first.
    const hub = new Hub((from, frame) => {
      const m = decode(frame) as unknown[]
      if (from === 0 && m[0] === 'checkpoint-part') {
        const states = (m[5] as Uint8Array[]).map((bytes) => {
          const v = decode(bytes) as unknown[]
          v[2] = (v[2] as number) + 1
          return encode(v)
        })
        return { frame: encode([...m.slice(0, 5), states]), delayMs: 0 }
      }
      return { frame, delayMs: from !== 0 && m[0] === 'checkpoint' ? 50 : 0 }
    })
    const logs = await behindPastRetention(hub)
    const faults = logs.filter((l) => l.msg.startsWith('a peer served a checkpoint'))
    expect(faults.length).toBeGreaterThan(0)
    expect(faults.every((f) => f['peer'] === 0 && /does not hash to the checkpoint/.test(String(f['reason'])))).toBe(true)
  }, 60_000)
})
