// @vitest-environment happy-dom
/**
 * Every hook of @stead/react rendered with @testing-library/react against a
 * real client and real relays in simulated time (SimCluster), so local
 * updates, updates of other clients and commits all go through the real
 * SDK and relays. Each lifecycle test runs plainly and under <StrictMode>.
 */
import { createClient, type Space, type SteadClient } from '@stead/client'
import { act, cleanup, render, screen, waitFor } from '@testing-library/react'
import { StrictMode, createElement as h, type ReactElement } from 'react'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { SimCluster } from '@stead/sim'
import { SteadProvider, useBoundedCounter, usePresence, useSpace, useCounter, useHandle, useRegister, useSet, useStatus } from '../src/index.ts'

const open: SteadClient[] = []
const clusters: SimCluster[] = []
/** What React reported through console.error (a getSnapshot that is not cached, an update loop, a bad hook call). */
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

/** A cluster that orders nothing until commitUntil lets it (so a test sees the prospective value first). */
async function cluster(): Promise<SimCluster> {
  const c = await SimCluster.start()
  c.hold()
  clusters.push(c)
  return c
}

async function client(c: SimCluster): Promise<Space> {
  const owner = await createClient(c.clientOptions())
  open.push(owner)
  return owner.space('bank')
}

async function online(...clients: Space[]): Promise<void> {
  await waitFor(() => expect(clients.every((cl) => cl.status.online)).toBe(true), { timeout: 10_000 })
}

/** Lets the relays order what they hold until `assertion` passes, then holds them again. */
async function commitUntil(c: SimCluster, assertion: () => void): Promise<void> {
  c.release()
  await waitFor(assertion, { timeout: 10_000, interval: 5 })
  c.hold()
}

/**
 * Counts the subscriptions a hook holds on `target` (a handle's `subscribe`
 * or the client's `onStatus`): how many are open, how many were ever made,
 * and how many notifications reached them.
 */
function track<K extends string>(target: { [key in K]: (listener: () => void) => () => void }, method: K): { active: number; total: number; delivered: number } {
  const stats = { active: 0, total: 0, delivered: 0 }
  const original = target[method].bind(target)
  target[method] = ((listener: () => void) => {
    const off = original(() => {
      stats.delivered++
      listener()
    })
    stats.active++
    stats.total++
    let done = false
    return () => {
      if (!done) stats.active--
      done = true
      off()
    }
  }) as (typeof target)[K]
  return stats
}

function mount(cl: Space, element: ReactElement, strict: boolean) {
  const wrap = (el: ReactElement) => {
    const tree = h(SteadProvider, { space: cl }, el)
    return strict ? h(StrictMode, null, tree) : tree
  }
  const result = render(wrap(element))
  return { unmount: result.unmount, rerender: (el: ReactElement) => result.rerender(wrap(el)) }
}

const text = (id: string) => screen.getByTestId(id).textContent
let renders = 0
beforeEach(() => {
  renders = 0
})

function Counter({ k }: { k: string }) {
  renders++
  const { value, stable } = useCounter(k, { min: 0 })
  return h('p', { 'data-testid': 'counter' }, `${value}/${stable}`)
}

function BoundedCounter() {
  renders++
  const { value, stable } = useBoundedCounter('seats', { min: 0, initial: 10 })
  return h('p', { 'data-testid': 'bounded' }, `${value}/${stable}`)
}

function SetView({ maxSize }: { maxSize?: number }) {
  renders++
  const { values, stable } = useSet<string>('tags', maxSize === undefined ? undefined : { maxSize })
  return h('p', { 'data-testid': 'set' }, `${[...values].sort().join(',')}|${[...stable].sort().join(',')}`)
}

function Register() {
  renders++
  const { value, stable } = useRegister<string>('title')
  return h('p', { 'data-testid': 'register' }, `${value ?? '-'}|${stable ?? '-'}`)
}

function Status() {
  renders++
  const s = useStatus()
  return h('p', { 'data-testid': 'status' }, `${s.online ? 'online' : 'offline'} pending=${s.pending} stable=${s.stableIndex}`)
}

/** After unmount: nothing is subscribed, an update reaches no listener and renders nothing. */
async function expectDetached(stats: { active: number; delivered: number }, update: () => Promise<unknown>): Promise<void> {
  expect(stats.active).toBe(0)
  const delivered = stats.delivered
  const rendered = renders
  await act(async () => {
    await update()
  })
  expect(stats.delivered).toBe(delivered)
  expect(renders).toBe(rendered)
}

/** Plain: one subscription. StrictMode: React subscribes, cleans up and subscribes again, leaving exactly one. */
function expectSubscribed(stats: { active: number; total: number }, strict: boolean): void {
  expect(stats.active).toBe(1)
  expect(stats.total).toBe(strict ? 2 : 1)
}

describe.each([
  ['plain', false],
  ['StrictMode', true],
])('hooks (%s)', (_mode, strict) => {
  it('useCounter shows a local update at once, a commit and another client’s update when they arrive, and detaches on unmount', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    await online(a, b)
    const handle = a.counter('acct', { min: 0 })
    const stats = track(handle, 'subscribe')
    const view = mount(a, h(Counter, { k: 'acct' }), strict)
    expect(text('counter')).toBe('0/0')
    expectSubscribed(stats, strict)

    act(() => void handle.increment(5))
    expect(text('counter')).toBe('5/0') // prospective, in the same act
    await commitUntil(c, () => expect(text('counter')).toBe('5/5'))

    // Another client's update: prospective when its envelope arrives, then stable.
    await b.counter('acct', { min: 0 }).increment(2)
    await screen.findByText('7/5', {}, { timeout: 10_000 })
    await commitUntil(c, () => expect(text('counter')).toBe('7/7'))
    expectSubscribed(stats, strict)

    view.unmount()
    await expectDetached(stats, () => handle.increment(1))
    expect(handle.value).toBe(8)
  })

  it('useCounter moves its subscription when the key changes', async () => {
    const c = await cluster()
    const a = await client(c)
    const first = track(a.counter('x', { min: 0 }), 'subscribe')
    const second = track(a.counter('y', { min: 0 }), 'subscribe')
    await a.counter('y', { min: 0 }).increment(4)
    const view = mount(a, h(Counter, { k: 'x' }), strict)
    expect(text('counter')).toBe('0/0')
    view.rerender(h(Counter, { k: 'y' }))
    expect(text('counter')).toBe('4/0')
    expect(first.active).toBe(0)
    expect(second.active).toBe(1)
    act(() => void a.counter('x', { min: 0 }).increment(1))
    expect(text('counter')).toBe('4/0')
    act(() => void a.counter('y', { min: 0 }).increment(1))
    expect(text('counter')).toBe('5/0')
  })

  it('useBoundedCounter shows the initial value, a local increment, and a safe spend once committed', async () => {
    const c = await cluster()
    const a = await client(c)
    await online(a)
    const handle = a.boundedCounter('seats', { min: 0, initial: 10 })
    const stats = track(handle, 'subscribe')
    const view = mount(a, h(BoundedCounter), strict)
    expect(text('bounded')).toBe('10/10')
    expectSubscribed(stats, strict)

    act(() => void handle.increment(5)) // does not spend rights: a regular update
    expect(text('bounded')).toBe('15/10')
    await commitUntil(c, () => expect(text('bounded')).toBe('15/15'))

    // The increment gave this client 5 rights: spending 4 of them is a regular update, shown at once.
    expect(handle.rights).toBe(5)
    act(() => void handle.decrement(4))
    expect(text('bounded')).toBe('11/15')
    await commitUntil(c, () => expect(text('bounded')).toBe('11/11'))

    // Spending 7 needs more rights: claimed from the pool first (a safe update the stable order decides), then spent.
    let result: unknown
    void handle.decrement(7).then((r) => (result = r))
    await commitUntil(c, () => expect(text('bounded')).toBe('4/4'))
    await waitFor(() => expect(result).toMatchObject({ status: 'stored' }))
    expectSubscribed(stats, strict)

    view.unmount()
    await expectDetached(stats, () => handle.increment(1))
    expect(handle.value).toBe(5)
  })

  it('useSet shows adds and deletes at once and stable once committed, and detaches on unmount', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    await online(a, b)
    const handle = a.set<string>('tags')
    const stats = track(handle, 'subscribe')
    const view = mount(a, h(SetView, {}), strict)
    expect(text('set')).toBe('|')
    expectSubscribed(stats, strict)

    act(() => {
      void handle.add('x')
      void handle.add('y')
    })
    expect(text('set')).toBe('x,y|')
    await commitUntil(c, () => expect(text('set')).toBe('x,y|x,y'))
    act(() => void handle.delete('x'))
    expect(text('set')).toBe('y|x,y')
    await commitUntil(c, () => expect(text('set')).toBe('y|y'))

    await b.set<string>('tags').add('z')
    await screen.findByText('y,z|y', {}, { timeout: 10_000 })
    await commitUntil(c, () => expect(text('set')).toBe('y,z|y,z'))

    view.unmount()
    await expectDetached(stats, () => handle.add('w'))
    expect(handle.values().sort()).toEqual(['w', 'y', 'z'])
  })

  it('useRegister shows a local write at once, a commit and a later write of another client', async () => {
    const c = await cluster()
    const a = await client(c)
    const b = await client(c)
    await online(a, b)
    const handle = a.register<string>('title')
    const stats = track(handle, 'subscribe')
    const view = mount(a, h(Register), strict)
    expect(text('register')).toBe('-|-')
    expectSubscribed(stats, strict)

    act(() => void handle.set('draft'))
    expect(text('register')).toBe('draft|-')
    await commitUntil(c, () => expect(text('register')).toBe('draft|draft'))

    // b writes once it has seen a's value, so its write is the later one.
    const other = b.register<string>('title')
    await waitFor(() => expect(other.stable).toBe('draft'))
    await other.set('final')
    await screen.findByText('final|draft', {}, { timeout: 10_000 })
    await commitUntil(c, () => expect(text('register')).toBe('final|final'))

    view.unmount()
    await expectDetached(stats, () => handle.set('after'))
    expect(handle.value).toBe('after')
  })

  it('useStatus follows connecting, pending updates and the stable index, and detaches on unmount', async () => {
    const c = await cluster()
    for (const r of c.relays) await r.down()
    const a = await client(c)
    const stats = track(a, 'onStatus')
    const view = mount(a, h(Status), strict)
    expect(text('status')).toBe('offline pending=0 stable=0')
    expectSubscribed(stats, strict)

    for (const r of c.relays) await r.up()
    await screen.findByText('online pending=0 stable=0', {}, { timeout: 10_000 })
    act(() => void a.counter('n').increment(1))
    expect(text('status')).toBe('online pending=1 stable=0')
    await commitUntil(c, () => expect(text('status')).toBe('online pending=0 stable=1'))
    expectSubscribed(stats, strict)

    view.unmount()
    await expectDetached(stats, () => a.counter('n').increment(1))
    expect(a.status.pending).toBe(1)
  })
})

describe('usePresence', () => {
  it('shows who else is here as they come, move and leave, and sets this client\'s own state', async () => {
    const c = await cluster()
    const [a, b] = [await client(c), await client(c)]
    function People() {
      const p = usePresence()
      const names = p.others.map((o) => (o.state as { name: string }).name).join(',')
      return h('button', { 'data-testid': 'people', onClick: () => p.update({ name: 'Ann' }) }, `me=${(p.state as { name?: string } | null)?.name ?? '-'} others=${names || '-'}`)
    }
    mount(a, h(People), false)
    expect(text('people')).toBe('me=- others=-')
    act(() => screen.getByTestId('people').click())
    expect(text('people')).toBe('me=Ann others=-')
    act(() => b.presence.set({ name: 'Bo' }))
    await screen.findByText('me=Ann others=Bo', {}, { timeout: 10_000 })
    act(() => b.presence.set({ name: 'Bob' }))
    await screen.findByText('me=Ann others=Bob', {}, { timeout: 10_000 })
    await act(async () => {
      await b.close()
    })
    await screen.findByText('me=Ann others=-', {}, { timeout: 10_000 })
  })
})

describe('re-renders only when what a hook reads changes', () => {
  it('useHandle keeps a derived value and skips notifications that leave it unchanged; the latest inline read is used', async () => {
    const c = await cluster()
    const a = await client(c)
    const handle = a.counter('n')
    function Threshold({ limit }: { limit: number }) {
      renders++
      const reached = useHandle(handle, (hd) => hd.value >= limit)
      return h('p', { 'data-testid': 'reached' }, String(reached))
    }
    const view = mount(a, h(Threshold, { limit: 3 }), false)
    expect(text('reached')).toBe('false')
    const before = renders
    act(() => void handle.increment(1))
    act(() => void handle.increment(1))
    expect(renders).toBe(before) // 1 and 2 are both below 3
    act(() => void handle.increment(1))
    expect(text('reached')).toBe('true')
    expect(renders).toBe(before + 1)
    view.rerender(h(Threshold, { limit: 10 }))
    expect(text('reached')).toBe('false')
  })

  it('useSet keeps the identity of unchanged arrays when a notification changes nothing it shows', async () => {
    const c = await cluster()
    const a = await client(c)
    const handle = a.set<string>('tags')
    await handle.add('x')
    const seen: Array<readonly string[]> = []
    function Values() {
      renders++
      const { values } = useSet<string>('tags')
      seen.push(values)
      return h('p', { 'data-testid': 'values' }, values.join(','))
    }
    const notified = track(handle, 'subscribe')
    mount(a, h(Values), false)
    const before = renders
    const delivered = notified.delivered
    act(() => void handle.add('x')) // a new tag for an element already there: the handle notifies, the values are the same
    expect(notified.delivered).toBeGreaterThan(delivered)
    expect(renders).toBe(before)
    act(() => void handle.add('y'))
    expect(text('values')).toBe('x,y')
    expect(seen.at(-1)).not.toBe(seen[0])
    expect(seen).toHaveLength(before + 1)
    expect(new Set(seen.slice(0, before))).toEqual(new Set([seen[0]])) // every render before 'y' saw the same array
  })

  it('useStatus keeps its snapshot while the status is unchanged', async () => {
    const c = await cluster()
    const a = await client(c)
    await online(a)
    const seen: object[] = []
    function S() {
      renders++
      seen.push(useStatus())
      return null
    }
    const events = track(a, 'onStatus')
    mount(a, h(S), false)
    await act(async () => {
      await a.counter('n').increment(1)
    })
    await commitUntil(c, () => expect(a.status).toMatchObject({ pending: 0, stableIndex: 1 }))
    await waitFor(() => expect(seen.at(-1)).toMatchObject({ pending: 0, stableIndex: 1 }))
    // The client emits a status event for every step (queued, sent, accepted, committed, and per relay); React renders only the ones that changed it.
    expect(events.delivered).toBeGreaterThan(seen.length - 1)
    for (let i = 1; i < seen.length; i++) expect(seen[i]).not.toEqual(seen[i - 1])
  })
})

describe('useSet with invariants', () => {
  it('opens a set declared with maxSize (the same declaration as the rest of the app)', async () => {
    const c = await cluster()
    const a = await client(c)
    await a.set<string>('tags', { maxSize: 2 }).add('x')
    mount(a, h(SetView, { maxSize: 2 }), false)
    expect(text('set')).toBe('x|')
  })
})

describe('useSpace', () => {
  it('returns the client of the nearest provider', async () => {
    const c = await cluster()
    const a = await client(c)
    let got: Space | undefined
    function C() {
      got = useSpace()
      return null
    }
    mount(a, h(C), false)
    expect(got).toBe(a)
  })

  it('throws without a provider', () => {
    function C() {
      useSpace()
      return null
    }
    expect(() => render(h(C))).toThrow(/SteadProvider/)
    reactErrors = [] // React logs the error it rethrows
  })
})
