import { authorIdOf, decode, encode } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import type { SimCluster } from '@stead/sim'
import { createClient, memoryStorage, type ClientOptions, type ClientStorage, type Space, type SteadClient, type SteadError } from '../src/index.node.ts'
import { PEER_TAG, decodePeerMessage } from '../src/peers/peers.ts'
import { PeerBoard } from './helpers/peer-board.ts'
import { simWorld } from './helpers/sim-world.ts'

/**
 * Catching up from peers alone (issue 48, Merkle-CRDT sync): attested
 * commits and states travel peer to peer with the signatures of f+1
 * relays, so a client that was away, or one that never held the space,
 * gets ahead while every relay is down, and believes nothing a relay
 * quorum did not sign.
 */
const world = simWorld()

/** A cluster that orders what it gets (simWorld's start held). */
async function cluster(): Promise<SimCluster> {
  const c = await world.cluster()
  c.release()
  return c
}

const onClock = (c: SimCluster) => (deliver: () => void): void => c.later(1, deliver)
const seed = (byte: number): Uint8Array => new Uint8Array(32).fill(byte)
const userOf = (byte: number): string => authorIdOf(nodeCrypto, publicKeyOfSync(seed(byte)))

interface Peer {
  client: SteadClient
  space: Space
  errors: SteadError[]
}

async function peer(c: SimCluster, name: string, extra: Partial<ClientOptions>): Promise<Peer> {
  const space = await world.client(c, extra, name)
  const client = world.owner(space)
  const errors: SteadError[] = []
  client.onError((e) => errors.push(e))
  return { client, space, errors }
}

/** A memory store that outlives the clients opened on it (a client closes its storage when it closes). */
function reopenable(): ClientStorage {
  const disk = memoryStorage()
  return { load: (k) => disk.load(k), loadRange: (p) => disk.loadRange(p), write: (ch) => disk.write(ch), removeRange: (p) => disk.removeRange(p), close: async () => undefined }
}

async function relaysDown(c: SimCluster): Promise<void> {
  for (const r of c.relays) await r.down()
}

describe('catching up from peers', () => {
  it('a client that was away catches up on the commits it missed from its peers alone, every relay down', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const storage = reopenable()
    const a = await peer(c, 'bank', { peers: board.network(), identity: { secretKey: seed(1) } })
    let away = await peer(c, 'bank', { peers: board.network(), identity: { secretKey: seed(2) }, storage })
    await away.space.counter('likes').increment(1, { safe: true })
    await c.until('both stable at 1', () => a.space.counter('likes').stable === 1 && away.space.counter('likes').stable === 1)
    await world.shutdown(away.space)

    // While it is away, the others write and the relays commit it all.
    for (let i = 0; i < 20; i++) await a.space.counter('likes').increment(1, { safe: i % 5 === 4 })
    await a.space.map('card').set('title', 'written while away', { safe: true })
    await c.until('stable at 21', () => a.space.counter('likes').stable === 21)
    await relaysDown(c)

    away = await peer(c, 'bank', { peers: board.network(), identity: { secretKey: seed(2) }, storage })
    expect(away.space.counter('likes').stable).toBe(1)
    await c.until('caught up from its peer', () => away.space.counter('likes').stable === 21 && away.space.map('card').stable?.title === 'written while away')
    expect(away.space.status.online).toBe(false)
    // As commits (its peer keeps them all), not as a state.
    expect(away.client.peers).toMatchObject({ statesReceived: 0 })
    expect(away.client.peers?.commitsReceived).toBeGreaterThanOrEqual(5)
    expect(away.space.status.stableIndex).toBe(a.space.status.stableIndex)
    // Shared while the relays are down; committed once they are back.
    // Its writes wait for the relays: this space has no policy of its own, so only the relays can vouch for its peers.
    await away.space.counter('likes').increment(100)
    for (const r of c.relays) await r.up()
    await c.until('stable everywhere', () => a.space.counter('likes').stable === 121 && away.space.counter('likes').stable === 121)
    expect(a.errors.concat(away.errors)).toEqual([])
  })

  it('a new client joins a space with a policy from a restarted peer while every relay is down: the attested state, then writes that commit once the relays are back', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const storage = reopenable()
    const alice = await peer(c, 'team', { identity: { secretKey: seed(3) }, storage, peers: board.network() })
    const team = await alice.client.createSpace('team')
    expect(await team.members.grant(userOf(4), 'writer')).toMatchObject({ status: 'committed' })
    for (let i = 0; i < 5; i++) await team.counter('n').increment(2)
    await team.list<string>('todo').push('milk', { safe: true })
    await c.until('stable', () => team.counter('n').stable === 10 && team.list('todo').stable?.length === 1)
    // Alice restarts: her space opens from storage with the certificate of where it stands, and no commits to hand out.
    await world.shutdown(alice.space)
    await relaysDown(c)
    const back = await peer(c, 'team', { identity: { secretKey: seed(3) }, storage, peers: board.network() })
    expect(back.space.counter('n').stable).toBe(10)

    // Bob was granted the space but never opened it: he joins from alice alone. His client links to her before he
    // opens the space (her word that she is ahead comes first, and is answered once it opens), and not by her next keepalive.
    const bobClient = await createClient(c.clientOptions({ identity: { secretKey: seed(4) }, peers: board.network() }))
    await c.until('linked', () => (bobClient.peers?.peers ?? 0) > 0)
    await c.advance(100)
    const bob = { client: bobClient, space: await bobClient.space('team'), errors: [] as SteadError[] }
    bobClient.onError((e) => bob.errors.push(e))
    await c.until('bob has the attested state', () => bob.space.counter('n').stable === 10 && bob.space.list('todo').stable?.[0] === 'milk', 5_000)
    expect(bob.space.members.myRole).toBe('writer')
    // As a state: a restarted peer keeps no commits, only the certificate of where its state is.
    expect(bob.client.peers?.statesReceived).toBeGreaterThanOrEqual(1)
    expect(bob.space.status.online).toBe(false)
    // And they collaborate, his policy letting her share with him and hers him with her.
    await bob.space.counter('n').increment(5)
    await back.space.list<string>('todo').push('eggs')
    await c.until('both see both', () => back.space.counter('n').value === 15 && bob.space.list('todo').value?.length === 2)
    for (const r of c.relays) await r.up()
    await c.until('stable on both', () => back.space.counter('n').stable === 15 && bob.space.counter('n').stable === 15 && bob.space.list('todo').stable?.length === 2)
    expect(c.relays[0]?.stableValue('team', 'n')).toBe(15)
    expect(back.errors.concat(bob.errors)).toEqual([])
    await bobClient.close()
  })

  it('refuses a peer that hands on commits or a state the relays did not sign as they are, and applies nothing of it', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const storage = reopenable()
    const alice = await peer(c, 'open-team', { identity: { secretKey: seed(5) }, storage, peers: board.network() })
    const team = await alice.client.createSpace('open-team', { everyone: 'reader' })
    for (let i = 0; i < 3; i++) await team.counter('n').increment(1, { safe: true })
    await c.until('stable', () => team.counter('n').stable === 3)
    // What an honest peer hands a peer that holds nothing (anybody may read this space): every commit, then, once
    // restarted (it keeps no commits then), its state.
    const answers: Uint8Array[] = []
    const ask = async (): Promise<void> => {
      const before = answers.length
      const [asker] = board.attach('recorder', (_to, m) => {
        const kind = decodePeerMessage(m).kind
        if (kind === 'snapshot' || kind === 'commits') answers.push(m)
      }, publicKeyOfSync(seed(6)))
      asker?.send(encode([PEER_TAG, 'sync', 'open-team', [0, 0]]))
      await c.until('the honest answer', () => answers.length > before)
    }
    await ask()
    await world.shutdown(alice.space)
    const honest = await peer(c, 'open-team', { identity: { secretKey: seed(5) }, storage, peers: board.network() })
    await ask()
    expect(answers.map((m) => decodePeerMessage(m).kind)).toEqual(['commits', 'snapshot'])
    await world.shutdown(honest.space)
    await relaysDown(c)
    const commits = (decode(answers[0] as Uint8Array) as [string, string, string, Array<[Uint8Array, Array<[number, Uint8Array]>, Uint8Array[]]>])[3]
    type Commit = (typeof commits)[number]
    const first = commits[0] as Commit
    const last = commits.at(-1) as Commit
    const snapshot = decode(answers[1] as Uint8Array) as [string, string, string, [Uint8Array, Array<[number, Uint8Array]>, Uint8Array]]
    const [attestation, sigs, state] = snapshot[3]
    const flipped = (b: Uint8Array, at: number): Uint8Array => {
      // A copy (a decoded Buffer's slice would be a view of the honest answer).
      const out = new Uint8Array(b)
      out[at] = (out[at] as number) ^ 1
      return out
    }
    const lies: Array<[string, 'commits' | 'snapshot', unknown]> = [
      ['a commit whose frames the attested batch does not bind', 'commits', [[first[0], first[1], [...first[2], ...last[2]]]]],
      ['a commit whose relay signature does not verify', 'commits', [[first[0], [[first[1][0]?.[0], flipped(first[1][0]?.[1] as Uint8Array, 9)], ...first[1].slice(1)], first[2]]]],
      ['a relay signature that does not verify', 'snapshot', [attestation, [[0, flipped(sigs[0]?.[1] as Uint8Array, 3)], ...sigs.slice(1)], state]],
      ['f signatures only', 'snapshot', [attestation, sigs.slice(0, 1), state]],
      ['one relay signing twice', 'snapshot', [attestation, [sigs[0], sigs[0]], state]],
      ['a relay the cluster does not have', 'snapshot', [attestation, [...sigs.slice(0, 1), [9, sigs[1]?.[1]]], state]],
      ['a state that is not the attested one', 'snapshot', [attestation, sigs, flipped(state, state.length - 3)]],
      ['an attestation changed after signing', 'snapshot', [flipped(attestation, attestation.length - 3), sigs, state]],
    ]
    /** A scripted peer linked to `fresh` alone that says it is ahead; once `fresh` asks it, `send` speaks for it. */
    const ahead = async (name: string, key: number): Promise<{ send(m: Uint8Array): void; open(): boolean }> => {
      let synced = false
      const links = board.attach(name, (_to, m) => (synced ||= decodePeerMessage(m).kind === 'sync'), publicKeyOfSync(seed(key)))
      // The newest network on the board is `fresh`'s (the clients before it closed and left it).
      const link = links.at(-1)
      link?.send(encode([PEER_TAG, 'sync', 'open-team', [1000, 1000]]))
      await c.until(`${name}: asked`, () => synced)
      return link as NonNullable<typeof link>
    }
    for (const [what, kind, body] of lies) {
      const fresh = await peer(c, 'open-team', { peers: board.network() })
      const liar = await ahead(`liar ${what}`, 7)
      liar?.send(encode([PEER_TAG, kind, 'open-team', body]))
      await c.until(`${what}: the liar is cut off`, () => liar?.open() === false)
      expect(fresh.space.status.stableIndex, what).toBe(0)
      expect(fresh.space.counter('n').stable, what).toBe(0)
      expect(fresh.errors.at(-1)?.reason, what).toBe('untrusted')
      await world.shutdown(fresh.space)
    }
    // The honest answer is taken.
    const fresh = await peer(c, 'open-team', { peers: board.network() })
    const teller = await ahead('teller', 8)
    teller.send(answers[1] as Uint8Array)
    await c.until('the attested state', () => fresh.space.counter('n').stable === 3)
    expect(fresh.errors).toEqual([])
  })

  it("does not take a peer's state that decides one of the client's own envelopes: their outcomes come only with the commits", async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const [sa, sx] = [reopenable(), reopenable()]
    let a = await peer(c, 'owned', { identity: { secretKey: seed(11) }, storage: sa, peers: board.network() })
    await a.client.createSpace('owned', { everyone: 'writer' })
    let x = await peer(c, 'owned', { identity: { secretKey: seed(12) }, storage: sx, peers: board.network() })
    await c.until('x has the policy', () => x.space.status.stableIndex >= 1)
    const before = x.space.status.stableIndex
    // x's safe update reaches the relays, which order nothing yet; x stops before it is decided.
    c.hold()
    void x.space.counter('n').increment(5, { safe: true }).catch(() => undefined)
    await c.until('the relays hold it', () => [...c.submitted.values()].some((e) => e.authorId === x.client.authorId && e.safe.length > 0))
    await world.shutdown(x.space)
    c.release()
    await c.until('committed', () => a.space.counter('n').stable === 5)
    // a restarts (it keeps no commits then, only its state's certificate), every relay stops, x comes back.
    await world.shutdown(a.space)
    a = await peer(c, 'owned', { identity: { secretKey: seed(11) }, storage: sa, peers: board.network() })
    await relaysDown(c)
    x = await peer(c, 'owned', { identity: { secretKey: seed(12) }, storage: sx, peers: board.network() })
    await c.until('a handed x its state', () => (x.client.peers?.statesReceived ?? 0) >= 1)
    await c.advance(1000)
    // Not taken: it would settle x's own update without its outcome. x waits for the commits.
    expect(x.space.status.stableIndex).toBe(before)
    expect(x.space.counter('n').value).toBe(5)
    expect(x.space.counter('n').stable).toBe(0)
    for (const r of c.relays) await r.up()
    await c.until('x learns the outcome from the commits', () => x.space.counter('n').stable === 5 && x.space.status.pending === 0)
    expect(a.errors.concat(x.errors)).toEqual([])
  })

  it('a client that started from a relay snapshot hands that state on, with the certificate the relays vouched for it with', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const writer = await peer(c, 'snap', { identity: { secretKey: seed(13) } })
    await writer.client.createSpace('snap', { everyone: 'reader' })
    for (let i = 0; i < 40; i++) await writer.space.counter('n').increment(1, { safe: true })
    await c.until('stable', () => writer.space.counter('n').stable === 40)
    await world.shutdown(writer.space)
    // The reader starts from the relays' snapshot and sees no commit after it.
    const reader = await peer(c, 'snap', { identity: { secretKey: seed(14) }, peers: board.network() })
    await c.until('the reader at the state', () => reader.space.counter('n').stable === 40)
    expect(c.relays.some((r) => r.requests.some((q) => q.endsWith('/snapshot')))).toBe(true)
    await relaysDown(c)
    const newcomer = await peer(c, 'snap', { identity: { secretKey: seed(15) }, peers: board.network() })
    await c.until('the newcomer has it from the reader', () => newcomer.space.counter('n').stable === 40)
    expect(newcomer.client.peers?.statesReceived).toBeGreaterThanOrEqual(1)
    expect(reader.errors.concat(newcomer.errors)).toEqual([])
  })
})
