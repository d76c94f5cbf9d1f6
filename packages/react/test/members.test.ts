// @vitest-environment happy-dom
/**
 * useMembers against real clients and relays in simulated time
 * (SimCluster): a space's policy as a component shows it, the actions it
 * hands out, and how a change shows at once, settles, or is reversed.
 */
import { createClient, type SafeResult, type Space, type SteadClient } from '@stead/client'
import { act, cleanup, render, screen, waitFor } from '@testing-library/react'
import { StrictMode, createElement as h } from 'react'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { SimCluster } from '@stead/sim'
import { SteadProvider, useMembers, type MembersState } from '../src/index.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []
let reactErrors: string[] = []

beforeEach(() => {
  reactErrors = []
  vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => {
    reactErrors.push(args.map(String).join(' '))
  })
})

afterEach(async () => {
  cleanup()
  vi.restoreAllMocks()
  for (const c of open.splice(0)) await c.close()
  for (const c of clusters.splice(0)) await c.close()
  expect(reactErrors).toEqual([])
})

async function person(c: SimCluster, byte: number): Promise<SteadClient> {
  const client = await createClient(c.clientOptions({ identity: { secretKey: new Uint8Array(32).fill(byte) } }))
  open.push(client)
  return client
}

/** Renders the policy as `user:role,...|everyone` (prospective), the stable one, and my role; hands its state out. */
function Members({ id, space, out }: { id: string; space?: Space; out: { state?: MembersState } }) {
  const state = useMembers(space)
  out.state = state
  const show = (v: MembersState['value']) => (v ? `${Object.entries(v.members).map(([u, r]) => `${u.slice(0, 4)}:${r}`).join(',')}|${v.everyone}` : 'none')
  return h('p', { 'data-testid': id }, `${show(state.value)} / ${show(state.stable)} / ${state.myRole ?? '-'}`)
}

const text = (id: string) => screen.getByTestId(id).textContent

describe.each([
  ['plain', false],
  ['StrictMode', true],
])('useMembers (%s)', (_mode, strict) => {
  it('shows the policy and my role, a grant at once and then stable, and a non-admin change reversed', async () => {
    const c = await SimCluster.start()
    clusters.push(c)
    const [alice, bob, carol] = await Promise.all([person(c, 1), person(c, 2), person(c, 3)])
    const a = alice.userId.slice(0, 4)
    const b = bob.userId.slice(0, 4)
    const cr = carol.userId.slice(0, 4)
    // Everyone reads: bob sees the space before he is a member.
    const team = await alice.createSpace('team', { everyone: 'reader' })
    const bobs = await bob.space('team')
    const mine: { state?: MembersState } = {}
    const his: { state?: MembersState } = {}
    const wrap = (el: ReturnType<typeof h>) => (strict ? h(StrictMode, null, el) : el)
    // Alice's from the provider, bob's given outright.
    render(wrap(h('div', null, h(SteadProvider, { space: team }, h(Members, { id: 'alice', out: mine })), h(Members, { id: 'bob', space: bobs, out: his }))))
    expect(text('alice')).toBe(`${a}:admin|reader / ${a}:admin|reader / admin`)
    await waitFor(() => expect(text('bob')).toBe(`${a}:admin|reader / ${a}:admin|reader / -`), { timeout: 10_000 })

    let granted: Promise<SafeResult> | undefined
    act(() => void (granted = mine.state?.grant(bob.userId, 'writer')))
    // Members come sorted by user id.
    const both = alice.userId < bob.userId ? `${a}:admin,${b}:writer` : `${b}:writer,${a}:admin`
    // Prospective in the same act; stable once committed; on bob's side when it reaches him.
    expect(text('alice')).toMatch(new RegExp(`^.*${b}:writer.*\\|reader / ${a}:admin\\|reader / admin$`))
    expect((await granted)?.status).toBe('committed')
    await waitFor(() => expect(text('alice')).toBe(`${both}|reader / ${both}|reader / admin`), { timeout: 10_000 })
    await waitFor(() => expect(text('bob')).toBe(`${both}|reader / ${both}|reader / writer`), { timeout: 10_000 })

    // Bob is no admin: his grant shows on his side, is rejected, and goes.
    let refused: Promise<SafeResult> | undefined
    act(() => void (refused = his.state?.grant(carol.userId, 'reader')))
    expect(text('bob')).toContain(`${cr}:reader`)
    expect(await refused).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    await waitFor(() => expect(text('bob')).toBe(`${both}|reader / ${both}|reader / writer`), { timeout: 10_000 })
    expect(text('alice')).not.toContain(cr)

    // setEveryone and revoke through the hook.
    await act(async () => {
      expect((await mine.state?.setEveryone('writer'))?.status).toBe('committed')
      expect((await mine.state?.revoke(bob.userId))?.status).toBe('committed')
    })
    await waitFor(() => expect(text('bob')).toBe(`${a}:admin|writer / ${a}:admin|writer / -`), { timeout: 10_000 })
    expect(text('alice')).toBe(`${a}:admin|writer / ${a}:admin|writer / admin`)

    // A retention, then the space deleted, through the hook: the value says so on both sides.
    await act(async () => {
      expect((await mine.state?.setRetention({ days: 30 }))?.status).toBe('committed')
      expect((await mine.state?.deleteSpace())?.status).toBe('committed')
    })
    expect([mine.state?.stable?.retention, mine.state?.stable?.deleted]).toEqual([{ entries: 0, days: 30 }, true])
    await waitFor(() => expect(his.state?.stable?.deleted).toBe(true), { timeout: 10_000 })
  })
})

/** Renders the open invitations as `role:left,...`; hands its state out. */
function Invitations({ id, space, out }: { id: string; space: Space; out: { state?: MembersState } }) {
  const state = useMembers(space)
  out.state = state
  return h('p', { 'data-testid': id }, state.invitations.map((i) => `${i.role}:${i.left}`).join(',') || 'none')
}

describe.each([
  ['plain', false],
  ['StrictMode', true],
])('useMembers invitations (%s)', (_mode, strict) => {
  it('invites, shows the open invitations as they are used and closed, and lets the token join', async () => {
    const c = await SimCluster.start()
    clusters.push(c)
    const [alice, bob] = await Promise.all([person(c, 1), person(c, 2)])
    const team = await alice.createSpace('team')
    const mine: { state?: MembersState } = {}
    render(strict ? h(StrictMode, null, h(Invitations, { id: 'inv', space: team, out: mine })) : h(Invitations, { id: 'inv', space: team, out: mine }))
    expect(text('inv')).toBe('none')
    let tokens: string[] = []
    await act(async () => {
      tokens = await Promise.all([mine.state?.invite('writer') as Promise<string>, mine.state?.invite('reader', { uses: 3 }) as Promise<string>])
    })
    expect(tokens.every((t) => t.startsWith('stead-invite:'))).toBe(true)
    expect(text('inv').split(',').sort()).toEqual(['reader:3', 'writer:1'])
    // The invitations keep their identity while nothing changes.
    const seen = mine.state?.invitations
    expect(mine.state?.invitations).toBe(seen)

    // Bob joins with the writer's: it is used up, and goes from the list.
    const bobs = await bob.join(tokens[0] as string)
    expect(bobs.members.myRole).toBe('writer')
    await waitFor(() => expect(text('inv')).toBe('reader:3'), { timeout: 10_000 })
    // Closed through the hook, by token.
    await act(async () => {
      expect((await mine.state?.closeInvitation(tokens[1] as string))?.status).toBe('committed')
    })
    expect(text('inv')).toBe('none')
  })
})

describe('useMembers', () => {
  it('shows none before a space has a policy, and needs a space', async () => {
    const c = await SimCluster.start()
    clusters.push(c)
    const s = await (await person(c, 1)).space('plain')
    const out: { state?: MembersState } = {}
    render(h(Members, { id: 'm', space: s, out }))
    expect(text('m')).toBe('none / none / -')
    expect(out.state?.handle).toBe(s.members)
    cleanup()
    expect(() => render(h(Members, { id: 'x', out }))).toThrow(/give it a space, or put a <SteadProvider/)
    // React reports the error it rethrew; that is expected here.
    reactErrors = []
  })
})
