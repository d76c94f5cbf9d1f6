import { describe, expect, it } from 'vitest'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { lmdbStorage } from '../src/index.node.ts'
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
    // Each client hears the commit from its own frame source, not at the same moment.
    await c.until('a and b have the deletion and the increment after it', () => (a.counter('n').stable === 2 && b.counter('n').stable === 2) || undefined)
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

describe('space.members.deleteSpace', () => {
  it('empties the space on every client where the order puts it, and refuses every later update, a new policy included', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const b = await world.client(c)
    committing(c)
    await world.owner(a).createSpace('bank', { everyone: 'writer' })
    expect((await b.counter('n').increment(5, { safe: true })).status).toBe('committed')
    void b.text('doc').insert(0, 'gone soon')
    await c.until('a has both', () => (a.counter('n').stable === 5 && a.text('doc').stable === 'gone soon') || undefined)
    // Only an admin deletes a space.
    expect(await b.members.deleteSpace()).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    expect((await a.members.deleteSpace()).status).toBe('committed')
    expect([a.keys(), a.counter('n').stable, a.text('doc').stable, a.members.stable?.deleted]).toEqual([[], 0, '', true])
    await c.until('b sees it deleted', () => b.members.stable?.deleted || undefined)
    expect([b.keys(), b.counter('n').value, b.text('doc').value]).toEqual([[], 0, ''])
    expect(b.counter('n').history().map((h) => h.value)).toEqual([5, null])
    // Nothing takes after it: a write, a policy change, a new policy.
    expect(await b.counter('n').increment(1, { safe: true })).toMatchObject({ status: 'rejected', reason: 'unauthorized', detail: expect.stringMatching(/bank was deleted/) })
    expect(await a.members.grant(world.owner(b).userId, 'admin')).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    await expect(world.owner(b).createSpace('bank')).rejects.toMatchObject({ reason: 'unauthorized' })
    // A client that opens it later finds it deleted, with nothing in it.
    const d = await world.client(c)
    await c.until('d sees it deleted', () => d.members.stable?.deleted || undefined)
    expect([d.keys(), d.counter('n').stable]).toEqual([[], 0])
  })

  it('reaches a client that was away: back on its own storage, it catches up by a delta that proves the deletion, and its pending write is refused', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    const dir = mkdtempSync(join(tmpdir(), 'stead-deleted-'))
    const b = await world.client(c, { storage: lmdbStorage(dir) })
    committing(c)
    await world.owner(a).createSpace('bank', { everyone: 'writer' })
    expect((await b.counter('n').increment(5, { safe: true })).status).toBe('committed')
    void b.list('todo').push('milk')
    await c.until('a has both', () => (a.counter('n').stable === 5 && a.list('todo').stable.length === 1) || undefined)
    // B goes away with a write not sent; meanwhile a deletes the space, and commits go on past it.
    await b.flush()
    for (const r of c.relays) await r.down()
    void b.counter('n').increment(1)
    await world.shutdown(b)
    for (const r of c.relays) await r.up()
    expect((await a.members.deleteSpace()).status).toBe('committed')
    const back = await world.client(c, { storage: lmdbStorage(dir) })
    await c.until('b back sees it deleted', () => back.members.stable?.deleted || undefined)
    await c.until('b back settles its write', () => back.status.pending === 0 || undefined)
    expect([back.keys(), back.counter('n').value, back.counter('n').stable, back.list('todo').value]).toEqual([[], 0, 0, []])
  })

  it('sets a retention that admins alone may set, and refuses a bad one at the call', async () => {
    const c = await world.cluster()
    const a = await world.client(c)
    committing(c)
    await world.owner(a).createSpace('bank', { everyone: 'reader' })
    expect((await a.members.setRetention({ entries: 1000, days: 30 })).status).toBe('committed')
    expect(a.members.stable?.retention).toEqual({ entries: 1000, days: 30 })
    const b = await world.client(c)
    await c.until('b has the policy', () => b.members.stable !== undefined || undefined)
    expect(await b.members.setRetention({ entries: 1 })).toMatchObject({ status: 'rejected', reason: 'unauthorized' })
    for (const [bad, message] of [[{ entries: -1 }, /entries is a whole number/], [{ days: 36_501 }, /days is a whole number/], [{ weeks: 2 }, /no field weeks/], [null, /an object/]] as const) {
      await expect(a.members.setRetention(bad as never)).rejects.toThrow(message)
    }
  })
})
