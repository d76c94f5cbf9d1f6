import { POLICY_KEY, isRedemption, type PolicyValue } from '@stead/core'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import { invitationSpace, type Space, type SteadClient, type SteadError } from '../src/index.node.ts'
import { failure, people } from './helpers/people.ts'

/**
 * Invitations (issue 46): an admin's `space.members.invite` and a user's
 * `client.join`, against real relays in simulated time (SimCluster): the
 * relays check a redemption's signature and time at their door and
 * enforce reads, the audit decides each redemption in the stable order,
 * and a redeemer that may not read the space never sees a rejection (its
 * join times out on the client's clock, here simulated).
 */

const { cluster, person } = people()

/** The space's policy as every relay holds it in its stable state. */
function relayPolicies(c: SimCluster, space: string): Array<PolicyValue | undefined> {
  return c.relays.map((r) => r.stableValue(space, POLICY_KEY) as PolicyValue | undefined)
}

/** Envelopes `client` submitted that redeem an invitation (so a refused join was sent, and decided by the audit). */
function redemptionsBy(c: SimCluster, client: SteadClient): number {
  return [...c.submitted.values()].filter((e) => e.authorId === client.userId && e.safe.some((g) => g.updates.some((u) => u.key === POLICY_KEY && isRedemption(u.op)))).length
}

/**
 * `user`'s join that must fail: `timeout` (it may not read the space, so
 * it never sees the verdict) after its redemption was sent, with the relays
 * then holding a policy that does not name `user`.
 */
async function refusedJoin(c: SimCluster, user: SteadClient, token: string, space: string, timeoutMs?: number): Promise<SteadError> {
  const sent = redemptionsBy(c, user)
  const err = await failure(user.join(token, timeoutMs === undefined ? {} : { timeoutMs }))
  expect(err.reason).toBe('timeout')
  expect(err.message).toMatch(/may be used up, expired or closed/)
  expect(redemptionsBy(c, user)).toBe(sent + 1)
  for (const p of relayPolicies(c, space)) expect(p?.members[user.userId]).toBeUndefined()
  const mine = await user.space(space)
  expect(mine.status.problem).toMatch(`may not read space ${space}`)
  expect(mine.members.myRole).toBeUndefined()
  return err
}

describe('invitations', () => {
  it('lets one user join with a single-use token: it writes, the admin sees it, and the next holder of the token is refused', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('team')
    const invitedAt = c.now
    const token = await team.members.invite('writer')
    expect(token).toMatch(/^stead-invite:[A-Za-z0-9_-]+$/)
    expect(invitationSpace(token)).toBe('team')
    // Committed when invite resolves: 7 days, one use, by default.
    const [open1] = team.members.invitations
    expect(team.members.invitations).toHaveLength(1)
    expect(open1).toEqual({ key: expect.stringMatching(/^[0-9a-f]{64}$/), role: 'writer', expires: expect.any(Number), left: 1 })
    expect(open1?.expires).toBeGreaterThanOrEqual(invitedAt + 7 * 24 * 3_600_000)
    expect(open1?.expires).toBeLessThanOrEqual(c.now + 7 * 24 * 3_600_000)
    expect(token).not.toContain(open1?.key)

    // Bob redeems it: the space is his to write once join resolves, and the relays serve it to him.
    const bobs = await bob.join(token)
    expect(bobs).toBe(await bob.space('team'))
    expect(bobs.members.myRole).toBe('writer')
    expect(bobs.members.stable?.members[bob.userId]).toBe('writer')
    expect(await bobs.counter('n').increment(5, { safe: true })).toEqual({ status: 'committed', index: expect.any(Number) })
    await c.until('alice sees bob write', () => team.counter('n').stable === 5 || undefined)
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin', [bob.userId]: 'writer' })
    // Used up: it left the policy.
    expect(team.members.invitations).toEqual([])
    await c.until('bob sees the invitation gone', () => (bobs.members.invitations.length === 0 ? true : undefined))
    expect(bobs.status.problem).toBeUndefined()

    // Carol holds the same token: her redemption is sent and rejected in the order; she may not read
    // the space, so she never sees the verdict, and her join times out (30 s by default, on her clock).
    const before = c.now
    const err = await refusedJoin(c, carol, token, 'team')
    expect(c.now - before).toBeGreaterThanOrEqual(30_000)
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin', [bob.userId]: 'writer' })
    expect(err.message).toMatch(/not seen committed within 30000 ms/)
  })

  it('of two redemptions of a single-use token at the same moment, lets exactly one through', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('race')
    const token = await team.members.invite('reader')
    const joins = await Promise.allSettled([bob.join(token, { timeoutMs: 10_000 }), carol.join(token, { timeoutMs: 10_000 })])
    expect(joins.map((j) => j.status).sort()).toEqual(['fulfilled', 'rejected'])
    const lost = joins.find((j) => j.status === 'rejected') as PromiseRejectedResult
    expect((lost.reason as SteadError).reason).toBe('timeout')
    const winner = joins[0].status === 'fulfilled' ? bob : carol
    const loser = winner === bob ? carol : bob
    await c.until('alice sees the winner', () => team.members.stable?.members[winner.userId] === 'reader' || undefined)
    expect(team.members.stable?.members[loser.userId]).toBeUndefined()
    expect(redemptionsBy(c, loser)).toBe(1)
    for (const p of relayPolicies(c, 'race')) expect(Object.keys(p?.members ?? {}).sort()).toEqual([alice.userId, winner.userId].sort())
  })

  it('admits as many users as a counted invitation allows, and no more; a member redeeming keeps the higher role', async () => {
    const c = await cluster()
    const [alice, bob, carol, dave] = await Promise.all([person(c, 1), person(c, 2), person(c, 3), person(c, 4)])
    const team = await alice.createSpace('club')
    const token = await team.members.invite('reader', { uses: 2 })
    expect(team.members.invitations.map((i) => [i.role, i.left])).toEqual([['reader', 2]])
    const bobs = await bob.join(token)
    expect(bobs.members.myRole).toBe('reader')
    await c.until('alice sees one use left', () => team.members.invitations[0]?.left === 1 || undefined)
    const carols = await carol.join(token)
    expect(carols.members.myRole).toBe('reader')
    await c.until('alice sees it used up', () => (team.members.invitations.length === 0 ? true : undefined))
    // A reader reads: bob sees carol join.
    await c.until('bob sees carol', () => bobs.members.stable?.members[carol.userId] === 'reader' || undefined)
    // A third is refused.
    await refusedJoin(c, dave, token, 'club', 5_000)
    expect(Object.keys(team.members.stable?.members ?? {}).sort()).toEqual([alice.userId, bob.userId, carol.userId].sort())

    // An unlimited invitation: any number join, and a member who redeems it keeps a higher role.
    const any = await team.members.invite('reader', { uses: 0 })
    expect(team.members.invitations.map((i) => [i.role, i.left])).toEqual([['reader', 0]])
    expect((await team.members.grant(bob.userId, 'writer')).status).toBe('committed')
    await c.until('bob sees his grant', () => bobs.members.stable?.members[bob.userId] === 'writer' || undefined)
    expect(await bob.join(any)).toBe(bobs)
    expect(bobs.members.myRole).toBe('writer')
    expect((await dave.join(any)).members.myRole).toBe('reader')
    expect(team.members.invitations.map((i) => [i.role, i.left])).toEqual([['reader', 0]])
  })

  it('refuses a closed invitation (by token or by key), and an expired one', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('team')
    const byToken = await team.members.invite('writer')
    const byKey = await team.members.invite('reader', { uses: 5 })
    expect(team.members.invitations).toHaveLength(2)
    const readerKey = team.members.invitations.find((i) => i.role === 'reader')?.key as string
    expect(await team.members.closeInvitation(byToken)).toEqual({ status: 'committed', index: expect.any(Number) })
    expect(await team.members.closeInvitation(readerKey)).toEqual({ status: 'committed', index: expect.any(Number) })
    expect(team.members.invitations).toEqual([])
    // Closing it again: no such invitation.
    expect(await team.members.closeInvitation(readerKey)).toMatchObject({ status: 'rejected', reason: 'malformed' })
    await refusedJoin(c, bob, byToken, 'team', 5_000)
    await refusedJoin(c, bob, byKey, 'team', 5_000)

    // Expired: the audit judges the redemption's time (its author's clock, within the relays' window) against the expiry.
    const brief = await team.members.invite('writer', { expiresInMs: 1_000 })
    const expires = team.members.invitations[0]?.expires as number
    await c.advance(Math.max(0, expires - c.now) + 1_000)
    await refusedJoin(c, carol, brief, 'team', 5_000)
    // It stays listed (refused) until closed.
    expect(team.members.invitations.map((i) => i.expires)).toEqual([expires])
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin' })

    // Joined before it expires, the same kind of invitation works (what failed above was the expiry).
    const fresh = await team.members.invite('writer', { expiresInMs: 60_000 })
    expect((await carol.join(fresh)).members.myRole).toBe('writer')
  })

  it('stamps invitations and redemptions with the relays time as measured, not a device clock 10 minutes off', async () => {
    const c = await cluster()
    const skewed = async (byte: number, skewMs: number): Promise<SteadClient> => {
      const sim = c.clock()
      const client = await person(c, byte, { clock: { now: () => sim.now() + skewMs, setTimer: (ms, fire) => sim.setTimer(ms, fire) } })
      const warned: SteadError[] = []
      client.onError((e) => warned.push(e))
      // The offset is measured from the relays' pongs: the client says so once it is past 5 s.
      await c.until(`client ${byte} measures its clock`, () => warned.find((e) => e.reason === 'clock-skew'))
      return client
    }
    const MIN = 60_000
    // Alice's device runs 10 minutes fast: her invitation's time would be in the future, and
    // redemptions before it would be refused as backdated. Bob's runs 10 minutes slow: the relays'
    // door would refuse his redemption (more than 5 minutes from their clock).
    const [alice, bob] = await Promise.all([skewed(1, 10 * MIN), skewed(2, -10 * MIN)])
    const team = await alice.createSpace('team')
    const token = await team.members.invite('writer', { expiresInMs: MIN })
    expect(Math.abs((team.members.invitations[0]?.expires as number) - MIN - c.now)).toBeLessThan(MIN / 2)
    const bobs = await bob.join(token, { timeoutMs: 10_000 })
    expect(bobs.members.myRole).toBe('writer')
  })

  it('rejects an invitation made by a non-admin with the audit reason, and refuses bad input before sending anything', async () => {
    const c = await cluster()
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    const team = await alice.createSpace('team', { writers: [bob.userId] })
    const bobs = await bob.space('team')
    await c.until('bob sees the policy', () => bobs.members.stable !== undefined || undefined)
    const notAdmin = await failure(bobs.members.invite('writer'))
    expect(notAdmin.reason).toBe('unauthorized')
    expect(notAdmin.message).toMatch(/may not change the policy/)
    expect(bobs.members.invitations).toEqual([])
    // In a space without a policy there is nothing to invite to.
    const plain = await bob.space('plain')
    expect((await failure(plain.members.invite('writer'))).reason).toBe('malformed')

    const sent = c.submitted.size
    const badOptions: Array<[unknown, RegExp]> = [
      [{ expiresInMs: 0 }, /expiresInMs/],
      [{ expiresInMs: -5 }, /expiresInMs/],
      [{ expiresInMs: 1.5 }, /expiresInMs/],
      [{ expiresInMs: Number.NaN }, /expiresInMs/],
      [{ expiresInMs: Number.MAX_SAFE_INTEGER }, /expires/],
      [{ uses: -1 }, /uses/],
      [{ uses: 10_001 }, /uses/],
      [{ uses: 2.5 }, /uses/],
      [{ uses: '2' }, /uses/],
      [{ expires: 5 }, /no option expires/],
      [null, /options are an object/],
    ]
    for (const [options, message] of badOptions) {
      const err = await failure(team.members.invite('writer', options as never))
      expect(err.reason, JSON.stringify(options)).toBe('malformed')
      expect(err.message).toMatch(message)
    }
    expect((await failure(team.members.invite('owner' as never))).message).toMatch(/role is one of/)
    expect((await failure(team.members.closeInvitation('nope'))).reason).toBe('malformed')
    expect((await failure(team.members.closeInvitation('A'.repeat(64)))).reason).toBe('malformed')
    const other = await team.members.invite('reader', { expiresInMs: Number.POSITIVE_INFINITY })
    expect(team.members.invitations[0]?.expires).toBe(0)
    const sentNow = c.submitted.size
    expect(sentNow).toBe(sent + 1)
    const elsewhere = (await alice.createSpace('elsewhere')).members
    const wrongSpace = await failure(elsewhere.closeInvitation(other))
    expect(wrongSpace.message).toMatch(/invitation to space "team", not "elsewhere"/)

    // Junk tokens: join rejects at once, opens no space and sends nothing.
    const carol = await person(c, 3)
    const before = c.submitted.size
    for (const junk of ['', 'team', 'stead-invite:', 'stead-invite:@@@', other.slice(0, -10), `https://app.example/join#${other}`, 42 as unknown as string]) {
      const err = await failure(carol.join(junk))
      expect(err.reason, String(junk)).toBe('malformed')
      expect(err.message).toMatch(/not an invitation token/)
    }
    expect((await failure(carol.join(other, { timeoutMs: -1 }))).reason).toBe('malformed')
    await c.advance(5_000)
    expect(c.submitted.size).toBe(before)
    expect(redemptionsBy(c, carol)).toBe(0)
  })

  it('lets a user who can read the space see its redemption rejected, with the audit reason', async () => {
    const c = await cluster()
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const team = await alice.createSpace('open', { everyone: 'reader' })
    const token = await team.members.invite('writer')
    await bob.join(token)
    const err = await failure(carol.join(token))
    expect(err.reason).toBe('unauthorized')
    expect(err.message).toMatch(/no open invitation/)
    expect(team.members.roleOf(carol.userId)).toBeUndefined()
  })

  it('takes a joined user out on revoke: the next write is refused as unauthorized and the status says so', async () => {
    const c = await cluster()
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    const team = await alice.createSpace('team')
    const bobs: Space = await bob.join(await team.members.invite('writer'))
    expect((await bobs.counter('n').increment(1, { safe: true })).status).toBe('committed')
    expect((await team.members.revoke(bob.userId)).status).toBe('committed')
    await c.until('bob told he may no longer read', () => bobs.status.problem?.includes('may not read space team') || undefined)
    expect(await bobs.counter('n').increment(2, { safe: true })).toEqual({ status: 'rejected', reason: 'unauthorized', detail: expect.any(String) })
    expect(bobs.status.problem).toMatch(/may not read space team/)
    await c.advance(5_000)
    expect(team.counter('n').stable).toBe(1)
    expect(team.members.stable?.members).toEqual({ [alice.userId]: 'admin' })
  })
})
