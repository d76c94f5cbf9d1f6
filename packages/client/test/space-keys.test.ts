import { describe, expect, it } from 'vitest'
import { commitUntil, committing, simWorld } from './helpers/sim-world.ts'

/** Listing a space's objects and following every change of a space with one subscription (issue 46, item 5). */
const world = simWorld()

describe('space.keys and space.onChange', () => {
  it("lists the objects a client holds, its own unsent ones and others' included, by prefix, after and limit, without system objects", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    void a.counter('doc:1').increment(1)
    void a.text('doc:2').insert(0, 'hi')
    void a.set('tag:x').add('y')
    // Unsent edits are listed at once.
    expect(a.keys()).toEqual(['doc:1', 'doc:2', 'tag:x'])
    void b.counter('doc:0').increment(1)
    await commitUntil(c, 'a has b', () => a.keys().includes('doc:0'))
    expect(a.keys({ prefix: 'doc:' })).toEqual(['doc:0', 'doc:1', 'doc:2'])
    expect(a.keys({ prefix: 'doc:', after: 'doc:0', limit: 1 })).toEqual(['doc:1'])
    expect(a.keys({ limit: 0 })).toEqual([])
    expect(() => a.keys({ limit: -1 })).toThrow(/limit/)
    // A space's policy is a system object: not among the app's objects.
    const made = world.owner(b).createSpace('bank', { everyone: 'writer' })
    await commitUntil(c, 'b has the policy and all', () => b.members.stable !== undefined && b.keys().length === 4)
    await made
    expect(b.keys()).toEqual(['doc:0', 'doc:1', 'doc:2', 'tag:x'])
  })

  it('tells one subscriber of every change of the space, with the keys, local or not', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    const seen: Array<{ keys: string[]; local: boolean }> = []
    const stop = a.onChange(({ keys, local }) => seen.push({ keys: [...keys].sort(), local }))
    void a.counter('x').increment(1)
    expect(seen).toContainEqual({ keys: ['x'], local: true })
    void b.list('todo').push('milk')
    await commitUntil(c, "b's list at a", () => seen.some((s) => !s.local && s.keys.includes('todo')))
    stop()
    const before = seen.length
    void a.counter('y').increment(1)
    expect(seen).toHaveLength(before)
  })
})

describe('space.delete', () => {
  it("takes an object away on every client, shown at once; what is written after it starts afresh, under any type; its history says where", async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    await a.counter('n').increment(5)
    void a.text('doc').insert(0, 'keep me')
    await commitUntil(c, 'b has both', () => b.counter('n').stable === 5 && b.text('doc').stable === 'keep me')

    const deleted = a.delete('n')
    // Shown at once: the key is empty, and no longer listed.
    expect(a.counter('n').value).toBe(0)
    expect(a.keys()).toEqual(['doc'])
    // Made right after the deletion, in the same moment: it comes after it, so it stands.
    void a.counter('n').increment(2)
    expect(a.counter('n').value).toBe(2)
    // The relays order from here on.
    committing(c)
    expect((await deleted).status).toBe('committed')
    await c.until('b has the deletion and the increment after it', () => b.counter('n').stable === 2 || undefined)
    expect(a.counter('n').stable).toBe(2)
    expect(b.counter('n').history().map((h) => h.value)).toEqual([5, null, 2])

    // Deleted again, and written as a text: another type is welcome at an emptied key (by a client whose handle
    // of it is not a counter: handles keep the type they were opened with).
    expect((await b.delete('n')).status).toBe('committed')
    const d = await world.client(c)
    await c.until('d has the deletion', () => d.keys().length === 1 || undefined)
    expect((await d.text('n').insert(0, 'now a text', { safe: true })).status).toBe('committed')
    await c.until('b has the text', () => b.keys().includes('n') || undefined)
    expect(b.keys()).toEqual(['doc', 'n'])
    expect(d.text('n').stable).toBe('now a text')
    expect(b.counter('n').stable).toBe(0)
    expect(a.text('doc').stable).toBe('keep me')
  })

  it('refuses a system key or a bad one at the call', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    await expect(a.delete('$policy')).rejects.toThrow(/system object/)
    await expect(a.delete('')).rejects.toThrow(/object keys are 1 to 256/)
    await expect(a.delete('half \ud800')).rejects.toThrow(/unpaired surrogate/)
  })
})
