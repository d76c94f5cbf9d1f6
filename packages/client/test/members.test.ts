import { authorIdOf, fromHex, type ErrorReason } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import type { SimRelay } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { RejectedError, type SteadError } from '../src/index.node.ts'
import { FakeOrigin } from './helpers/tabs.ts'
import { failure, people } from './helpers/people.ts'

/**
 * Members and permissions (issue 46): a space's policy at `$policy`, made
 * by `createSpace` and changed through `space.members`, against real relays
 * in simulated time: the audit's verdict (every relay and every client
 * runs it), the relays' door and reads, and the SDK's own behaviour.
 */

const { cluster, person } = people()

const rejected = (reason: ErrorReason) => ({ status: 'rejected', reason, detail: expect.any(String) })

describe('who a client is', () => {
  it('has a hex public key and a user id derived from it, the author id its updates carry', async () => {
    const c = await cluster()
    const alice = await person(c, 1)
    expect(alice.publicKey).toMatch(/^[0-9a-f]{64}$/)
    expect(alice.publicKey).toBe(Buffer.from(await nodeCrypto.publicKeyOf(new Uint8Array(32).fill(1))).toString('hex'))
    expect(alice.userId).toBe(authorIdOf(nodeCrypto, fromHex(alice.publicKey)))
    expect(alice.userId).toBe(alice.authorId)
    const s = await alice.space('notes')
    await s.counter('n').increment(1, { safe: true })
    expect([...c.submitted.values()].map((e) => e.authorId)).toEqual([alice.userId])
    const bob = await person(c, 2)
    expect(bob.userId).not.toBe(alice.userId)
  })

  it('is the same in a tab that follows the leading one', async () => {
    const c = await cluster()
    const origin = new FakeOrigin()
    try {
      const lead = await origin.tab(c.clientOptions({ identity: { secretKey: new Uint8Array(32).fill(7) } }))
      const follower = await origin.tab(c.clientOptions())
      expect(lead.leading).toBe(true)
      expect(follower.leading).toBe(false)
      expect(follower.publicKey).toBe(lead.publicKey)
      expect(follower.userId).toBe(lead.userId)
      expect(lead.publicKey).toBe(Buffer.from(await nodeCrypto.publicKeyOf(new Uint8Array(32).fill(7))).toString('hex'))
    } finally {
      for (const client of origin.clients.reverse()) await client.close()
    }
  })
})

describe('members and permissions', () => {
  it('creates a space with a policy, and lets only those it names write', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('team', { readers: [carol.userId] })
    expect(team).toBe(await alice.space('team'))
    expect(team.members.stable).toEqual({ members: { [alice.userId]: 'admin', [carol.userId]: 'reader' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
    expect(team.members.value).toEqual(team.members.stable)
    expect(team.members.myRole).toBe('admin')
    expect(team.members.roleOf(carol.userId)).toBe('reader')
    expect(team.members.roleOf(bob.userId)).toBeUndefined()
    // The creator writes.
    expect(await team.counter('n').increment(1, { safe: true })).toEqual({ status: 'committed', index: expect.any(Number) })

    // Bob is named nowhere: the relays do not let him read the space, nor write to it.
    const bobs = await bob.space('team')
    await c.until('bob is told he may not read', () => bobs.status.problem?.includes('may not read space team') || undefined)
    expect(bobs.members.stable).toBeUndefined()
    expect(await bobs.counter('n').increment(10, { safe: true })).toEqual(rejected('unauthorized'))
    expect(bobs.counter('n').value).toBe(0)
    // A reader may not write either.
    const carols = await carol.space('team')
    expect(await carols.counter('n').increment(100, { safe: true })).toEqual(rejected('unauthorized'))
    expect(carols.members.myRole).toBe('reader')
    await c.until('alice sees the rejections', () => team.status.stableIndex >= 4 || undefined)
    expect(team.counter('n').stable).toBe(1)
  })

  it('stops serving a reader taken off, and serves it again from where it stood once it is given a role back, in the same session', async () => {
    const c = await cluster()
    const [alice, carol] = await Promise.all([person(c, 1), person(c, 3)])
    const team = await alice.createSpace('team', { readers: [carol.userId] })
    expect((await team.counter('n').increment(1, { safe: true })).status).toBe('committed')
    const carols = await carol.space('team')
    await c.until('carol reads the first write', () => carols.counter('n').stable === 1 || undefined)

    expect((await team.members.revoke(carol.userId)).status).toBe('committed')
    await c.until('carol is told she may no longer read', () => carols.status.problem?.includes('may no longer read') || undefined)
    expect((await team.counter('n').increment(10, { safe: true })).status).toBe('committed')
    const shown = carols.counter('n').stable

    expect((await team.members.grant(carol.userId, 'reader')).status).toBe('committed')
    expect((await team.counter('n').increment(100, { safe: true })).status).toBe('committed')
    await c.until('carol reads on, without opening the space again', () => (carols.counter('n').stable === 111 && carols.status.problem === undefined) || undefined)
    // Nothing committed while she was off reached her before the grant.
    expect(shown).toBe(1)
  })

  it('lets a user write once granted, and rejects what the user writes after its revocation while what it wrote before stands', async () => {
    const c = await cluster()
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    const team = await alice.createSpace('team')
    const bobs = await bob.space('team')
    const n = bobs.counter('n')

    const grant = await team.members.grant(bob.userId, 'writer')
    expect(grant).toEqual({ status: 'committed', index: expect.any(Number) })
    expect(team.members.stable?.members[bob.userId]).toBe('writer')
    // Bob's replica reaches the grant; then his write commits.
    await c.until('bob sees the grant', () => bobs.members.stable?.members[bob.userId] === 'writer' || undefined)
    expect(bobs.members.myRole).toBe('writer')
    expect(await n.increment(5, { safe: true })).toEqual({ status: 'committed', index: expect.any(Number) })

    // His right to write is taken back; he stays a reader, so he sees what follows.
    const revoke = await team.members.grant(bob.userId, 'reader')
    expect(revoke.status).toBe('committed')
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin', [bob.userId]: 'reader' })
    await c.until('bob sees the revocation', () => (bobs.members.stable?.members[bob.userId] === 'reader' ? true : undefined))
    expect(bobs.members.myRole).toBe('reader')

    // A safe write after the revocation: rejected, and never shown once decided.
    expect(await n.increment(7, { safe: true })).toEqual(rejected('unauthorized'))
    expect(n.value).toBe(5)
    expect(n.stable).toBe(5)

    // A regular one shows at once, then is reversed (G5) when the order rejects it; onError says why.
    const errors: SteadError[] = []
    bobs.onError((e) => errors.push(e))
    await n.increment(3)
    expect(n.value).toBe(8)
    await c.until('the regular write rejected', () => errors.length > 0 || undefined)
    expect(errors[0]).toBeInstanceOf(RejectedError)
    expect(errors[0]?.reason).toBe('unauthorized')
    await c.until('reversed', () => n.value === 5 || undefined)
    // What bob wrote while he was a writer stands, on his replica and on alice's.
    await c.until('alice has it all', () => team.counter('n').stable === 5 && team.status.stableIndex === bobs.status.stableIndex || undefined)
    expect(n.stable).toBe(5)

    // Taken off the members altogether: the relays stop serving him the space, and he is told.
    expect((await team.members.revoke(bob.userId)).status).toBe('committed')
    await c.until('bob told he may no longer read', () => bobs.status.problem?.includes('may not read space team') || undefined)
    expect(errors.at(-1)?.reason).toBe('unauthorized')
  })

  it('reports a relay that attests a write the policy refused as committed (admit-revoked), and follows the others', async () => {
    const c = await cluster()
    // Relay 1 is the home relay of 'team': the frame source of the clients that follow it.
    const liar = c.relays[1] as SimRelay
    await liar.lie('admit-revoked')
    const [alice, carol] = await Promise.all([person(c, 1), person(c, 3)])
    const team = await alice.createSpace('team')
    expect(await team.counter('n').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    // Carol is named nowhere: the door refuses her write, and the envelope that takes its sequence number
    // (which changes nothing, so it passes) is rejected by the audit as unauthorized. The liar says it committed.
    const carols = await carol.space('team')
    expect(await carols.counter('n').increment(5, { safe: true })).toEqual(rejected('unauthorized'))
    await c.until('alice reports the liar', () => team.status.relays[1]?.faulty !== undefined || undefined)
    expect(team.status.relays[1]?.faulty).toMatch(/attested round \d+ differently|decisions differ/)
    for (const r of [0, 2, 3]) expect(team.status.relays[r]?.faulty).toBeUndefined()
    expect(await team.counter('n').increment(1, { safe: true })).toMatchObject({ status: 'committed' })
    expect(team.counter('n').stable).toBe(2)
  })

  it('rejects a policy change by a non-admin, and reverses it where it showed', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('team', { writers: [bob.userId] })
    const bobs = await bob.space('team')
    await c.until('bob sees the policy', () => bobs.members.stable !== undefined || undefined)
    const members = bobs.members
    const grant = members.grant(carol.userId, 'admin')
    // Shown at once on bob's side (a prospective change) ...
    expect(members.value?.members[carol.userId]).toBe('admin')
    expect(members.roleOf(carol.userId)).toBe('admin')
    // ... rejected by the order: a writer does not change the policy.
    expect(await grant).toEqual(rejected('unauthorized'))
    expect(members.roleOf(carol.userId)).toBeUndefined()
    expect(members.value).toEqual(members.stable)
    expect(await members.setEveryone('writer')).toEqual(rejected('unauthorized'))
    expect(await members.revoke(alice.userId)).toEqual(rejected('unauthorized'))
    await c.until('alice sees them decided', () => team.status.stableIndex >= bobs.status.stableIndex || undefined)
    expect(team.members.stable).toEqual({ members: { [alice.userId]: 'admin', [bob.userId]: 'writer' }, everyone: 'none', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
    // The last admin cannot leave the space without one.
    expect(await team.members.revoke(alice.userId)).toEqual(rejected('invariant'))
    expect(await team.members.grant(alice.userId, 'writer')).toEqual(rejected('invariant'))
    // Opening the space to everyone lets a stranger write.
    expect((await team.members.setEveryone('writer')).status).toBe('committed')
    const carols = await carol.space('team')
    await c.until('carol sees the change', () => carols.members.stable?.everyone === 'writer' || undefined)
    expect((await carols.counter('n').increment(1, { safe: true })).status).toBe('committed')
  })

  it('rejects a second createSpace, by anyone, with the audit reason', async () => {
    const c = await cluster()
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    await alice.createSpace('team', { everyone: 'writer' })
    const again = await failure(alice.createSpace('team'))
    expect(again.reason).toBe('malformed')
    expect(again.message).toMatch(/has a policy already/)
    // Bob may write (everyone may) but not make the space his: a policy change needs an admin.
    const taken = await failure(bob.createSpace('team'))
    expect(taken.reason).toBe('unauthorized')
    expect(taken.message).toMatch(/may not change the policy/)
    const team = await alice.space('team')
    await c.until('alice sees both decided', () => team.status.stableIndex >= 3 || undefined)
    expect(team.members.stable).toEqual({ members: { [alice.userId]: 'admin' }, everyone: 'writer', revokedDevices: {}, retention: { entries: 0, days: 0 }, deleted: false })
  })

  it('gives a space in use without a policy one; what was written before stands', async () => {
    const c = await cluster()
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    const bobs = await bob.space('team')
    expect(bobs.members.value).toBeUndefined()
    expect(bobs.members.myRole).toBeUndefined()
    expect((await bobs.counter('n').increment(2, { safe: true })).status).toBe('committed')
    const team = await alice.createSpace('team')
    expect(team.counter('n').stable).toBe(2)
    expect(await bobs.counter('n').increment(2, { safe: true })).toEqual(rejected('unauthorized'))
  })

  it('refuses a bad policy up front, sending nothing', async () => {
    const c = await cluster()
    const alice = await person(c, 1)
    const bob = await person(c, 2)
    const bad: Array<[unknown, RegExp]> = [
      [{ writers: ['nope'] }, /user id/],
      [{ writers: [bob.publicKey] }, /looks like a public key/],
      [{ writers: [bob.userId], readers: [bob.userId] }, /named twice/],
      [{ readers: [bob.userId, bob.userId] }, /named twice/],
      [{ writers: [alice.userId] }, /always an admin/],
      [{ everyone: 'admin' }, /everyone is one of/],
      [{ owners: [bob.userId] }, /no field owners/],
      [{ writers: bob.userId }, /array of user ids/],
      [[bob.userId], /the policy is an object/],
    ]
    for (const [policy, message] of bad) {
      const err = await failure(alice.createSpace('team', policy as never))
      expect(err.reason, String(policy)).toBe('malformed')
      expect(err.message).toMatch(message)
    }
    // The creator listing itself among the admins is fine.
    const team = await alice.createSpace('team', { admins: [alice.userId, bob.userId] })
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin', [bob.userId]: 'admin' })
    expect(c.submitted.size).toBe(1)
    const members = team.members
    expect((await failure(members.grant('x', 'writer'))).reason).toBe('malformed')
    expect((await failure(members.grant(bob.userId, 'owner' as never))).message).toMatch(/role is one of/)
    expect((await failure(members.setEveryone('all' as never))).reason).toBe('malformed')
    expect((await failure(members.revoke(''))).reason).toBe('malformed')
    expect(c.submitted.size).toBe(1)
    // The policy's key holds nothing else.
    expect(() => team.counter('$policy')).toThrowError(expect.objectContaining({ reason: 'type-mismatch' }))
  })
})
