import { authorIdOf, encodePresence, systemClock, type RegisterValue, type SteadError } from '@stead/core'
import type { SimCluster } from '@stead/sim'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { Presence } from '../src/space/presence.ts'
import { PresenceWire } from '../src/upstream/presence-wire.ts'
import type { RelayLink } from '../src/transport/transport.ts'
import { until } from './helpers/until.ts'
import { ClosedError, createClient, type PresenceChange, type Space } from '../src/index.node.ts'
import { simWorld } from './helpers/sim-world.ts'

const world = simWorld()

/** A client of `c` on space `bank`, its author id beside it. */
async function client(c: SimCluster, presenceTtlMs?: number): Promise<{ space: Space; client: { authorId: string } }> {
  const space = await world.client(c, presenceTtlMs ? { presenceTtlMs } : {})
  return { space, client: { authorId: space.authorId } }
}

const cluster = (): Promise<SimCluster> => world.cluster()

const stateOf = (space: Space, author: string): RegisterValue | undefined => space.presence.others.find((p) => p.author === author)?.state

/** A presence message signed by `secret` for space `notes`, as a client would send it. */
function signed(secret: Uint8Array, seq: number, state: RegisterValue | null, ttlMs = 30_000, space = 'bank', ahead = false) {
  const bytes = encodePresence({ space, seq, ttlMs, state, ...(ahead ? { ahead: true as const } : {}) })
  return { bytes, sig: signSync(secret, bytes) }
}

describe('space.presence', () => {
  it('shows who is here and what they show, changes as they change, and forgets them when they close the space', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    const changes: PresenceChange[] = []
    b.space.presence.subscribe((ch) => changes.push(ch))
    a.space.presence.set({ name: 'Ann', colour: '#e33' })
    expect(a.space.presence.state).toEqual({ name: 'Ann', colour: '#e33' })
    await c.until('b sees ann', () => stateOf(b.space, a.client.authorId) !== undefined)
    expect(stateOf(b.space, a.client.authorId)).toEqual({ name: 'Ann', colour: '#e33' })
    expect(changes[0]).toEqual({ added: [a.client.authorId], updated: [], removed: [], local: false })
    // A client never lists itself.
    expect(a.space.presence.others).toEqual([])
    a.space.presence.update({ cursor: 7 })
    await c.until('b sees the cursor', () => (stateOf(b.space, a.client.authorId) as { cursor?: number })?.cursor === 7)
    expect(stateOf(b.space, a.client.authorId)).toEqual({ name: 'Ann', colour: '#e33', cursor: 7 })
    // Many moves at once go out at a bounded pace, the last one last.
    for (let i = 0; i < 50; i++) a.space.presence.update({ cursor: i })
    await c.until('b sees the last move', () => (stateOf(b.space, a.client.authorId) as { cursor?: number })?.cursor === 49)
    await a.space.close()
    await c.until('ann is gone', () => b.space.presence.others.length === 0)
    expect(changes.at(-1)).toMatchObject({ removed: [a.client.authorId] })
    expect(() => a.space.presence.set({ name: 'again' })).toThrow(ClosedError)
  })

  it('shows a newcomer who was here before it came, renews while the author stays, and drops an author that goes quiet after its ttl', async () => {
    const c = await cluster()
    const a = await client(c, 4000)
    a.space.presence.set({ name: 'Ann' })
    await c.until('the relays hold it', () => c.relays.every((r) => r.presenceIn('bank') === 1))
    const b = await client(c)
    await c.until('b sees ann', () => stateOf(b.space, a.client.authorId) !== undefined)
    // Renewed at half its ttl: still there long after it.
    await c.advance(20_000)
    expect(stateOf(b.space, a.client.authorId)).toEqual({ name: 'Ann' })
    // A client that goes quiet (its state never renewed, its session still open) is dropped after its ttl.
    const mute = new Uint8Array(32).fill(7)
    const raw = await c.session(0, mute)
    await raw.welcomed
    raw.send({ type: 'presence', space: 'bank', signed: signed(mute, 1, { name: 'Mute' }, 2000) })
    const muteId = authorIdOf(nodeCrypto, publicKeyOfSync(mute))
    await c.until('b sees mute', () => stateOf(b.space, muteId) !== undefined)
    await c.advance(2500)
    expect(stateOf(b.space, muteId)).toBeUndefined()
    expect(stateOf(b.space, a.client.authorId)).toEqual({ name: 'Ann' })
  })

  it('sends the leave a vanished client signed ahead: others see it go at once, not after its ttl', async () => {
    const c = await cluster()
    const b = await client(c)
    const gone = new Uint8Array(32).fill(8)
    const goneId = authorIdOf(nodeCrypto, publicKeyOfSync(gone))
    const raw = await c.session(1, gone)
    await raw.welcomed
    raw.send({ type: 'presence', space: 'bank', signed: signed(gone, 10, { name: 'Gone' }), leave: signed(gone, 11, null, 30_000, 'bank', true) })
    await c.until('b sees it', () => stateOf(b.space, goneId) !== undefined)
    raw.close()
    await c.until('b sees it leave', () => stateOf(b.space, goneId) === undefined, 1000)
  })

  it('refuses presence not signed by the session key, for another space, too large, or a leave that is none; and a replayed older state changes nothing', async () => {
    const c = await cluster()
    const b = await client(c)
    const me = new Uint8Array(32).fill(9)
    const other = new Uint8Array(32).fill(10)
    const meId = authorIdOf(nodeCrypto, publicKeyOfSync(me))
    const raw = await c.session(0, me)
    await raw.welcomed
    const errors = () => raw.received.flatMap((m) => (m.type === 'error' ? [m.reason] : []))
    raw.send({ type: 'presence', space: 'bank', signed: signed(other, 1, { name: 'forged' }) })
    raw.send({ type: 'presence', space: 'bank', signed: signed(me, 1, { name: 'elsewhere' }, 30_000, 'other') })
    raw.send({ type: 'presence', space: 'bank', signed: signed(me, 1, { blob: 'x'.repeat(5000) }) })
    raw.send({ type: 'presence', space: 'bank', signed: signed(me, 1, { name: 'ok' }), leave: signed(me, 5, null, 30_000, 'bank', true) })
    await c.until('four refusals', () => (errors().length === 4 ? true : undefined))
    expect(errors()).toEqual(['bad-signature', 'malformed', 'too-large', 'malformed'])
    await c.advance(500)
    expect(b.space.presence.others).toEqual([])
    raw.send({ type: 'presence', space: 'bank', signed: signed(me, 5, { name: 'new' }) })
    await c.until('b sees it', () => stateOf(b.space, meId) !== undefined)
    // A replay of an older state (a relay could send one) loses to the newer one.
    raw.send({ type: 'presence', space: 'bank', signed: signed(me, 4, { name: 'old' }) })
    await c.advance(500)
    expect(stateOf(b.space, meId)).toEqual({ name: 'new' })
  })

  it('is never stored: a relay that restarts forgets it, and clients publish it to it again', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    a.space.presence.set({ name: 'Ann' })
    await c.until('held everywhere', () => c.relays.every((r) => r.presenceIn('bank') === 1))
    await c.relays[2]!.down()
    await c.relays[2]!.up()
    // Nothing of it came back from the relay's store; the client's link came up again and sent it.
    await c.until('republished to the restarted relay', () => c.relays[2]!.presenceIn('bank') === 1)
    expect(stateOf(b.space, a.client.authorId)).toEqual({ name: 'Ann' })
  })

  it('refuses states it could not send, with typed errors', async () => {
    const c = await cluster()
    const a = await client(c)
    expect(() => a.space.presence.set({ blob: 'x'.repeat(5000) })).toThrow(expect.objectContaining({ reason: 'too-large' }) as SteadError)
    expect(() => a.space.presence.set({ f: () => 1 } as unknown as RegisterValue)).toThrow(expect.objectContaining({ reason: 'malformed' }) as SteadError)
    expect(a.space.presence.state).toBeNull()
    await expect(createClient({ ...c.clientOptions(), presenceTtlMs: 10 })).rejects.toThrow(/presenceTtlMs/)
  })
})

describe('presence from relays', () => {
  it('shows only what its author signed for this space: a relay cannot forge or move presence', async () => {
    const presence = new Presence({ space: 'bank', clock: systemClock, out: () => undefined, listenerFailed: () => undefined })
    const me = new Uint8Array(32).fill(1)
    const wire = new PresenceWire({ space: 'bank', presence, crypto: nodeCrypto, identity: { secretKey: me, publicKey: publicKeyOfSync(me) }, links: () => [], peers: undefined })
    const alice = new Uint8Array(32).fill(2)
    const mallory = new Uint8Array(32).fill(3)
    const from = (author: Uint8Array, s: { bytes: Uint8Array; sig: Uint8Array }) => ({ type: 'presence' as const, space: 'bank', author: publicKeyOfSync(author), signed: s })
    const relay = (n: number) => ({ url: `ws://relay${n}.test` }) as RelayLink
    // Forgeries of the same seq as the true state, sent first by a lying relay, do not hide it.
    wire.heard(from(alice, signed(mallory, 5, { name: 'forged' })), relay(0))
    wire.heard(from(alice, signed(alice, 5, { name: 'moved' }, 30_000, 'other')), relay(0))
    wire.heard(from(alice, { ...signed(alice, 5, { name: 'bad' }), sig: new Uint8Array(64) }), relay(0))
    // This client's own presence, sent back by a relay, is not listed.
    wire.heard(from(me, signed(me, 5, { name: 'me' })), relay(0))
    const state = signed(alice, 5, { name: 'Alice' })
    wire.heard(from(alice, state), relay(0))
    await until('alice shows', () => presence.others.length > 0)
    expect(presence.others.map((p) => p.state)).toEqual([{ name: 'Alice' }])
    // The same state from a second relay; then the first sends her leave signed ahead (a lying relay can, any time):
    // she is still there, as the second brought her state too. When it sends the leave as well, she goes.
    wire.heard(from(alice, state), relay(1))
    const ahead = (() => {
      const bytes = encodePresence({ space: 'bank', seq: 6, ttlMs: 30_000, state: null, ahead: true })
      return { bytes, sig: signSync(alice, bytes) }
    })()
    wire.heard(from(alice, ahead), relay(0))
    expect(presence.others).toHaveLength(1)
    wire.heard(from(alice, ahead), relay(1))
    expect(presence.others).toHaveLength(0)
    // A replay of her last state (or an older one) does not bring her back.
    wire.heard(from(alice, state), relay(2))
    wire.heard(from(alice, signed(alice, 3, { name: 'older' })), relay(2))
    // A newer one does (a barrier: once it shows, the replays above were weighed).
    wire.heard(from(alice, signed(alice, 8, { name: 'back' })), relay(2))
    await until('alice is back', () => presence.others.length > 0)
    expect(presence.others.map((p) => p.state)).toEqual([{ name: 'back' }])
  })

  it('lists at most 512 others, however many keys a lying relay makes up', async () => {
    const presence = new Presence({ space: 'bank', clock: systemClock, out: () => undefined, listenerFailed: () => undefined })
    for (let i = 0; i < 600; i++) presence.heardFrom(`author-${i}`, { space: 'bank', seq: 1, ttlMs: 30_000, state: { i } }, 'ws://r', `sig-${i}`)
    expect(presence.others).toHaveLength(512)
    presence.close()
  })
})
