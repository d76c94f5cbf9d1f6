import { clockFrom, clockInit, encode, encodeEnvelope, encodePresence, sealEnvelope, toHex, type Envelope, type EnvelopeDraft } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import { afterEach, describe, expect, it } from 'vitest'
import { createClient, type ClientOptions, type Space, type SteadClient, type SteadError } from '../src/index.node.ts'
import { decodePeerMessage, MAX_PEER_IDS, PEER_TAG } from '../src/peers/peers.ts'
import { SimCluster } from '@stead/sim'
import { boardAddress, PeerBoard } from './helpers/peer-board.ts'
import { until } from './helpers/until.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []

afterEach(async () => {
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
})

async function cluster(): Promise<SimCluster> {
  const c = await SimCluster.start()
  clusters.push(c)
  return c
}

/** Takes every relay down (sessions close, nothing is ordered) until the test brings them back. */
async function relaysDown(c: SimCluster): Promise<void> {
  for (const r of c.relays) await r.down()
}

/** Waits until each client exchanges the space with `n` peers (the relays named them all). */
async function exchanging(c: SimCluster, clients: ReadonlyArray<{ client: SteadClient }>, n: (i: number) => number): Promise<void> {
  await c.until('peers vouched for by the relays', () => clients.every((p, i) => p.client.peers?.exchanging === n(i)))
}

async function client(c: SimCluster, extra: Partial<ClientOptions>): Promise<{ client: SteadClient; space: Space; errors: SteadError[] }> {
  const cl = await createClient(c.clientOptions(extra))
  open.push(cl)
  const errors: SteadError[] = []
  cl.onError((e) => errors.push(e))
  return { client: cl, space: await cl.space('bank'), errors }
}

/** Deliveries of a PeerBoard on the cluster's simulated clock (1 ms), so peers and relays share one time. */
const onClock = (c: SimCluster) => (deliver: () => void): void => c.later(1, deliver)

/**
 * Has relays `relays` (default all) name the board peer holding `key` as a
 * client of the space, as they do for any client: a session under that key
 * subscribes and announces its address on each.
 */
async function namePeer(c: SimCluster, key: { secretKey: Uint8Array; publicKey: Uint8Array }, relays: readonly number[] = c.relays.map((r) => r.index)): Promise<void> {
  for (const i of relays) {
    const s = await c.session(i, key.secretKey)
    s.send({ type: 'subscribe', space: 'bank', fromIndex: 0, frames: false })
    s.send({ type: 'announce', space: 'bank', addrs: [boardAddress(key.publicKey)] })
  }
}


/** Whether a message shares something of the space: anything but `sync`, which says only where a space stands and goes to every linked peer. */
const shares = (m: Uint8Array): boolean => decodePeerMessage(m).kind !== 'sync'

const op = (key: string, n = 1): EnvelopeDraft['updates'][number] => ({ key, decl: { type: 'counter', bounds: {} }, ops: [n] })
const identity = (byte: number): { secretKey: Uint8Array; publicKey: Uint8Array } => {
  const secretKey = new Uint8Array(32).fill(byte)
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}

/** Three clients linked to each other, each told of the other two by the relays, which then all go down. */
async function threeOffline(c: SimCluster): Promise<Array<Awaited<ReturnType<typeof client>>>> {
  const board = new PeerBoard(undefined, onClock(c))
  const peers = await Promise.all([1, 2, 3].map(() => client(c, { peers: board.network() })))
  await exchanging(c, peers, () => 2)
  await relaysDown(c)
  await c.until('offline', () => peers.every((p) => !p.space.status.online))
  return peers
}

/** Four clients in a line, 0 - 1 - 2 - 3, each linked to its neighbours only and told of them by the relays, which then all go down. */
async function lineOffline(c: SimCluster): Promise<Array<Awaited<ReturnType<typeof client>>>> {
  const board = new PeerBoard((a, b) => Math.abs(a - b) === 1, onClock(c))
  const line: Array<Awaited<ReturnType<typeof client>>> = []
  for (let i = 0; i < 4; i++) line.push(await client(c, { peers: board.network() }))
  await exchanging(c, line, (i) => (i === 0 || i === 3 ? 1 : 2))
  await relaysDown(c)
  return line
}

describe('peer-to-peer sync', () => {
  it('keeps clients collaborating while every relay is down, then commits what they did once the relays are back', async () => {
    const c = await cluster()
    const peers = await threeOffline(c)
    await peers[0]?.space.counter('likes').increment(10)
    for (const [i, p] of peers.entries()) await p.space.counter('likes').increment(i + 1)
    await c.until('every client sees every update', () => peers.every((p) => p.space.counter('likes').value === 16))
    expect(peers.every((p) => p.space.counter('likes').stable === 0)).toBe(true)
    expect(peers.every((p) => p.client.peers?.peers === 2)).toBe(true)

    for (const r of c.relays) await r.up()
    await c.until('the updates are stable everywhere', () => peers.every((p) => p.space.counter('likes').stable === 16))
    expect(c.relays[0]?.stableValue('bank', 'likes')).toBe(16)
    expect(peers.flatMap((p) => p.errors)).toEqual([])
  })

  it('keeps three clients editing one text, list and map while every relay is down, and they end identical, stable once the relays are back', async () => {
    const c = await cluster()
    const peers = await threeOffline(c)
    await peers[0]?.space.text('doc').insert(0, 'shared text')
    await c.until('everyone has the text', () => peers.every((p) => p.space.text('doc').value === 'shared text'))
    // Each types at its own place, key by key, and edits the list and the map at once.
    await Promise.all(
      peers.map(async (p, i) => {
        const t = p.space.text('doc')
        // A cursor, as an editor keeps one: after the last character typed, wherever the others' edits moved it.
        let at = i === 0 ? 0 : i === 1 ? 6 : t.length
        for (const ch of `<${i}>`) {
          const typed = t.insert(at, ch)
          const mine = t.anchor(at) // taken at once: the insert shows synchronously
          await typed
          at = t.position(mine) + 1
        }
        await p.space.list<string>('todos').push(`task ${i}`)
        await p.space.map('card').set(`by${i}`, i)
      }),
    )
    const converged = (): boolean => {
      const [a, ...rest] = peers.map((p) => JSON.stringify([p.space.text('doc').value, p.space.list('todos').value, p.space.map('card').value]))
      return rest.every((x) => x === a)
    }
    await c.until('every client sees every edit', () => converged() && peers[0]?.space.text('doc').length === 20)
    const text = peers[0]?.space.text('doc').value as string
    for (const run of ['<0>', '<1>', '<2>']) expect(text).toContain(run)
    expect(peers[0]?.space.list('todos').length).toBe(3)
    for (const r of c.relays) await r.up()
    await c.until('stable everywhere, equal to what they showed', () => peers.every((p) => p.space.text('doc').stable === text && p.space.list('todos').stable.length === 3 && Object.keys(p.space.map('card').stable).length === 3))
    expect(peers.flatMap((p) => p.errors)).toEqual([])
  })

  it('spreads an update along a line of peers that are not all linked: news of it, then the envelope on request', async () => {
    const c = await cluster()
    const line = await lineOffline(c)
    await line[0]?.space.counter('likes').increment(7)
    await line[3]?.space.counter('likes').increment(1)
    await c.until('both ends see both updates', () => line.every((p) => p.space.counter('likes').value === 8))
    // The middle ones passed ids on and handed out what their neighbours asked for: each end got the other end's update once.
    expect([line[0]?.client.peers?.framesReceived, line[3]?.client.peers?.framesReceived]).toEqual([1, 1])
    expect(line.flatMap((p) => p.errors)).toEqual([])
  })

  it('passes presence along a line of peers while every relay is down, each state once per link', async () => {
    const c = await cluster()
    const line = await lineOffline(c)
    line[0]?.space.presence.set({ name: 'first' })
    line[3]?.space.presence.set({ name: 'last' })
    const names = (p: (typeof line)[number]) => p.space.presence.others.map((o) => (o.state as { name: string }).name).sort()
    await c.until('both ends are seen everywhere', () => line.every((p, i) => names(p).length === (i === 0 || i === 3 ? 1 : 2)))
    expect(names(line[0] as (typeof line)[number])).toEqual(['last'])
    expect(names(line[1] as (typeof line)[number])).toEqual(['first', 'last'])
    line[0]?.space.presence.update({ cursor: 3 })
    await c.until('the move reaches the far end', () => (line[3]?.space.presence.others[0]?.state as { cursor?: number }).cursor === 3)
    expect(line.flatMap((p) => p.errors)).toEqual([])
  })

  it('says where each space stands on every link once per keepalive period, which keeps quiet links open', async () => {
    const { PeerHub } = await import('../src/peers/peers.ts')
    const board = new PeerBoard()
    const heard: Uint8Array[] = []
    const hub = new PeerHub(board.network(), () => undefined, 20)
    await hub.start(identity(30))
    const at = { stableIndex: 7, lastRound: 42 }
    hub.join({
      space: 'bank', held: () => [], frame: () => undefined, fromPeer: () => undefined, knows: () => false, mayShare: () => true, reachableAt: () => undefined, ownPresence: () => undefined, presenceFromPeer: () => undefined,
      position: () => at, followsCommits: () => true, catchUpFor: () => undefined, commitsFromPeer: async () => undefined, snapshotFromPeer: async () => undefined,
    })
    board.attach('quiet', (_to, m) => heard.push(m))
    // One when the space starts on the link, then one per period.
    await until('two keepalives', () => heard.filter((m) => decodePeerMessage(m).kind === 'sync').length >= 3)
    expect(heard.map((m) => decodePeerMessage(m)).filter((m) => m.kind === 'sync').every((m) => m.kind === 'sync' && m.space === 'bank' && m.stableIndex === 7 && m.lastRound === 42)).toBe(true)
    await hub.stop()
  })

  it('tells every peer with few links of each envelope it passes on, and a peer with many links now and then', async () => {
    const { PeerHub } = await import('../src/peers/peers.ts')
    const board = new PeerBoard()
    // Keepalives (anti-entropy) out of the way: only news can tell the peers.
    const hub = new PeerHub(board.network(), () => undefined, 3_600_000)
    await hub.start(identity(31))
    hub.join({
      space: 'bank', held: () => [], frame: () => undefined, fromPeer: () => undefined, knows: () => false, mayShare: () => true, reachableAt: () => undefined, ownPresence: () => undefined, presenceFromPeer: () => undefined,
      position: () => ({ stableIndex: 0, lastRound: 0 }), followsCommits: () => true, catchUpFor: () => undefined, commitsFromPeer: async () => undefined, snapshotFromPeer: async () => undefined,
    })
    // Three newcomers linked to this client alone, and nine peers that each exchange the space with a hundred.
    const heard = new Map<string, number>()
    const haves = new Map<string, number>()
    const peers = [...['leaf 1', 'leaf 2', 'leaf 3'].map((name) => ({ name, links: 1 })), ...Array.from({ length: 9 }, (_, i) => ({ name: `busy ${i}`, links: 100 }))]
    for (const { name, links } of peers) {
      const [link] = board.attach(name, (_to, m) => {
        const message = decodePeerMessage(m)
        if (message.kind === 'news') heard.set(name, (heard.get(name) ?? 0) + message.ids.length)
        if (message.kind === 'have') haves.set(name, (haves.get(name) ?? 0) + 1)
      })
      link?.send(encode([PEER_TAG, 'links', 'bank', links]))
      // Asking for an answer: the answer shows the hub read the count (a link keeps its order).
      link?.send(encode([PEER_TAG, 'have', 'bank', [], true]))
    }
    // Each got the hub's `have` when the link opened, then its answer.
    await until('the hub heard how many links each peer has', () => peers.every((p) => haves.get(p.name) === 2))
    const rounds = 30
    for (let i = 0; i < rounds; i++) {
      // An envelope first heard from a peer outside the test's twelve: its news goes in its own batch.
      hub.relay('bank', toHex(new Uint8Array(32).fill(i + 1)), 'the author')
      await until(`news of envelope ${i} reached the newcomers`, () => ['leaf 1', 'leaf 2', 'leaf 3'].every((leaf) => heard.get(leaf) === i + 1), 2000)
    }
    // The busy peers hear it from about 6 of their 100 peers each: from this one about 6% of the time.
    const busy = peers.slice(3).reduce((sum, p) => sum + (heard.get(p.name) ?? 0), 0)
    expect(busy).toBeLessThan((rounds * 9) / 3)
    await hub.stop()
  })

  it('dials and hears a peer only once f+1 relays name it: one relay naming it again and again is one vote', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const network = board.network()
    await client(c, { peers: network })
    const heard = new Map<string, number>()
    const lonely = identity(6)
    const control = identity(7)
    for (const [peer, key] of [['lonely', lonely], ['control', control]] as const) board.attach(peer, (_to, m) => shares(m) && heard.set(peer, (heard.get(peer) ?? 0) + 1), key.publicKey)
    for (let k = 0; k < 3; k++) await namePeer(c, lonely, [0])
    // Everything relay 0 was told reached the client (simulated time: no frame takes over 3 ms).
    await c.advance(50)
    await namePeer(c, control, [0, 1])
    await c.until('the control peer is heard', () => (heard.get('control') ?? 0) > 0)
    expect(heard.get('lonely')).toBeUndefined()
    expect(network.dialled).toEqual([boardAddress(control.publicKey)])
    await namePeer(c, lonely, [2])
    await c.until('lonely is heard', () => (heard.get('lonely') ?? 0) > 0)
    expect(network.dialled).toEqual([boardAddress(control.publicKey), boardAddress(lonely.publicKey)])
  })

  it('stops sending a space to a peer once a relay that vouched for it turns out faulty', async () => {
    const c = await cluster()
    // Relay 0 attests every commit with a state hash of its own: the client finds it out at its first commit.
    await c.relays[0]?.lie('lie-attest')
    const board = new PeerBoard(undefined, onClock(c))
    const { client: cl, space } = await client(c, { peers: board.network() })
    const envelopes = new Map<string, number>()
    const opened = new Set<string>()
    const count = (peer: string) => (_to: string, m: Uint8Array) => {
      const kind = decodePeerMessage(m).kind
      if (kind === 'have') opened.add(peer)
      if (kind === 'env') envelopes.set(peer, (envelopes.get(peer) ?? 0) + 1)
    }
    const watcher = identity(12)
    const control = identity(13)
    board.attach('watcher', count('watcher'), watcher.publicKey)
    board.attach('control', count('control'), control.publicKey)
    await namePeer(c, watcher, [0, 1]) // f+1 = 2, one of them relay 0
    await namePeer(c, control, [1, 2, 3])
    await c.until('the client exchanges the space with both', () => opened.size === 2)
    await space.counter('likes').increment(1)
    await c.until('both peers got the envelope', () => envelopes.get('watcher') === 1 && envelopes.get('control') === 1)
    // Its commit: relay 0's attestation differs from the others', the client marks it faulty, and the watcher has one vouching relay left.
    await c.until('relay 0 is faulty', () => cl.status.relays[0]?.faulty !== undefined)
    await space.counter('likes').increment(1)
    await c.until('the control peer got the next envelope', () => envelopes.get('control') === 2)
    expect(envelopes.get('watcher')).toBe(1)
  })

  it('refuses a peer that lies, and keeps showing only what verifies', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const honest = await Promise.all([1, 2].map(() => client(c, { peers: board.network() })))
    await exchanging(c, honest, () => 1)
    await honest[0]?.space.counter('likes').increment(1)
    await c.until('shared', () => honest.every((p) => p.space.counter('likes').value === 1))

    const liarKey = identity(9)
    const seal = (draft: Partial<EnvelopeDraft>, key = liarKey): Promise<Envelope> => sealEnvelope(nodeCrypto, key, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('likes', 100)], safe: [], ...draft })
    const envMessage = (frames: Uint8Array[], space = 'bank'): Uint8Array => encode([PEER_TAG, 'env', space, frames])
    const honestId = honest[0]?.client.authorId as string
    // Each lie is told by a peer of its own (a peer found faulty is refused for good), about envelopes it signed itself.
    const lies: Array<[string, (key: { secretKey: Uint8Array; publicKey: Uint8Array }) => Promise<Uint8Array>]> = [
      ['garbage', async () => new Uint8Array([0xc1, 0x00, 0x01])],
      ['a message of another protocol', async () => encode(['stead/peer/v0', 'env', 'bank', []])],
      [
        'a signature that does not verify',
        async (key) => {
          const forgedSig = encodeEnvelope(await seal({}, key))
          forgedSig[forgedSig.length - 5] = (forgedSig[forgedSig.length - 5] as number) ^ 1
          return envMessage([forgedSig])
        },
      ],
      ['a clock claiming updates nobody made', async (key) => envMessage([encodeEnvelope(await seal({ clock: clockFrom([[honestId, 999]]) }, key))])],
      ['an envelope of another space', async (key) => envMessage([encodeEnvelope(await seal({ space: 'other' }, key))])],
      ['a count of links that is not one', async () => encode([PEER_TAG, 'links', 'bank', -1])],
      ['too many ids', async () => encode([PEER_TAG, 'have', 'bank', Array.from({ length: MAX_PEER_IDS + 1 }, () => new Uint8Array(32)), false])],
      [
        'a presence its author did not sign',
        async (key) => {
          const body = encodePresence({ space: 'bank', seq: 5, ttlMs: 30_000, state: { name: 'forged' } })
          return encode([PEER_TAG, 'presence', 'bank', [key.publicKey, body, signSync(identity(77).secretKey, body)]])
        },
      ],
    ]
    // A peer the relays do not name as a client of the space gets nothing of it (not even where it stands), and is not heard.
    const heardByStranger: Uint8Array[] = []
    const stranger = board.attach('stranger', (_to, m) => heardByStranger.push(m), liarKey.publicKey)
    for (const s of stranger) s.send(encode([PEER_TAG, 'have', 'bank', [], true]))
    for (const s of stranger) s.send(envMessage([encodeEnvelope(await seal({ updates: [op('likes', 40)] }))]))
    await c.advance(50)
    expect(heardByStranger).toEqual([])
    expect(honest.map((p) => p.space.counter('likes').value)).toEqual([1, 1])

    for (const [i, [what, lie]] of lies.entries()) {
      const before = honest.map((p) => p.errors.length)
      let asked = 0
      const peerKey = identity(100 + i)
      const message = await lie(peerKey)
      const senders = board.attach(`liar-${i}`, (_to, m) => shares(m) && asked++, peerKey.publicKey)
      await namePeer(c, peerKey)
      // Once the relays vouch for it, the honest clients open the exchange (and so hear it).
      await c.until('the exchange is open', () => asked >= honest.length)
      for (const s of senders) s.send(message)
      await c.until(`the liar sending ${what} is cut off`, () => senders.every((s) => !s.open()))
      expect(honest.map((p) => p.errors.length - (before[honest.indexOf(p)] as number)), what).toEqual([1, 1])
      expect(honest.every((p) => p.errors.at(-1)?.reason === 'untrusted')).toBe(true)
    }
    expect(honest.every((p) => p.client.peers?.faulty === lies.length)).toBe(true)
    // A peer that only passes on another author's bad clock is not blamed (it may have lacked what shows it); the envelope is not shown.
    let forwarderAsked = 0
    const forwarderKey = identity(10)
    const forwarder = board.attach('forwarder', (_to, m) => shares(m) && forwarderAsked++, forwarderKey.publicKey)
    await namePeer(c, forwarderKey)
    await c.until('the forwarder is heard', () => forwarderAsked >= honest.length)
    for (const s of forwarder) s.send(envMessage([encodeEnvelope(await seal({ seq: 1, clock: clockFrom([[honestId, 777]]), updates: [op('likes', 50)] }))]))
    await c.advance(50)
    expect(forwarder.every((s) => s.open())).toBe(true)
    expect(honest.every((p) => p.client.peers?.faulty === lies.length)).toBe(true)
    // None of it showed; the honest clients still sync with each other.
    expect(honest.map((p) => p.space.counter('likes').value)).toEqual([1, 1])
    await honest[1]?.space.counter('likes').increment(1)
    await c.until('still shared', () => honest.every((p) => p.space.counter('likes').value === 2))
  })

  it('fetches a missing dep by hash from the peer that named it, and passes both on', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const a = await client(c, { peers: board.network() })
    await c.until('online', () => a.space.status.online)
    const other = identity(11)
    const author = identity(12)
    const first = await sealEnvelope(nodeCrypto, other, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('k', 1)], safe: [] })
    const second = await sealEnvelope(nodeCrypto, author, { space: 'bank', seq: 1, clock: clockFrom([[first.authorId, 1]]), deps: [first.id], updates: [op('k', 2)], safe: [] })
    const wanted: string[][] = []
    let asked = false
    const holder = identity(14)
    const [to] = board.attach('holder', (_to, message) => {
      const m = decodePeerMessage(message)
      asked = true
      if (m.kind !== 'want') return
      wanted.push(m.ids.map(toHex))
      to?.send(encode([PEER_TAG, 'env', 'bank', [encodeEnvelope(first)]]))
    }, holder.publicKey)
    await namePeer(c, holder)
    await c.until('the holder is heard', () => asked)
    to?.send(encode([PEER_TAG, 'env', 'bank', [encodeEnvelope(second)]]))
    await c.until('both show', () => a.space.counter('k').value === 3)
    expect(wanted).toEqual([[first.idHex]])
    // A client that joins later gets both in one exchange of what each holds.
    const b = await client(c, { peers: board.network() })
    await c.until('the newcomer has both', () => b.space.counter('k').value === 3)
    expect(a.errors.concat(b.errors)).toEqual([])
  })

  it('asks other peers for a dep when the peer that named it does not answer', async () => {
    const c = await cluster()
    const board = new PeerBoard(undefined, onClock(c))
    const [a, b] = [await client(c, { peers: board.network() }), await client(c, { peers: board.network() })]
    await exchanging(c, [a, b], () => 1)
    const other = identity(21)
    const author = identity(22)
    const first = await sealEnvelope(nodeCrypto, other, { space: 'bank', seq: 1, clock: clockInit(), deps: [], updates: [op('k', 1)], safe: [] })
    const second = await sealEnvelope(nodeCrypto, author, { space: 'bank', seq: 1, clock: clockFrom([[first.authorId, 1]]), deps: [first.id], updates: [op('k', 2)], safe: [] })
    // Two scripted peers: one hands `first` to b alone; the other hands `second` to a alone and answers nothing.
    const keys = [identity(23), identity(24)] as const
    const wantedOfMute: string[][] = []
    const [toA, toB] = board.attach('giver', () => undefined, keys[0].publicKey)
    const [muteToA] = board.attach('mute', (to, m) => {
      const msg = decodePeerMessage(m)
      if (msg.kind === 'want') wantedOfMute.push(msg.ids.map(toHex))
    }, keys[1].publicKey)
    for (const key of keys) await namePeer(c, key)
    await c.until('the scripted peers are vouched for', () => [a, b].every((p) => p.client.peers?.exchanging === 3))
    // No relay passes anything on from here: the dep can only come from a peer. And b's news of it never reaches a (lost).
    await relaysDown(c)
    const [aId, bId] = [toA?.to, toB?.to]
    board.drop = (from, to, m) => from === bId && to === aId && decodePeerMessage(m).kind === 'news'
    toB?.send(encode([PEER_TAG, 'env', 'bank', [encodeEnvelope(first)]]))
    await c.until('b holds the dep', () => b.space.counter('k').value === 1)
    muteToA?.send(encode([PEER_TAG, 'env', 'bank', [encodeEnvelope(second)]]))
    await c.until('a got the dep from b, after the mute peer did not answer', () => a.space.counter('k').value === 3)
    expect(wantedOfMute).toEqual([[first.idHex]])
    expect(a.errors.concat(b.errors)).toEqual([])
  })
})
