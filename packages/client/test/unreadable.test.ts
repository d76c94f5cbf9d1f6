import { decodeClientMessage, encodeRelayMessage } from '@stead/core'
import type { SimCluster } from '@stead/sim'
import { describe, expect, it } from 'vitest'
import type { SocketLike, SteadError } from '../src/index.node.ts'
import { people } from './helpers/people.ts'

/**
 * A space whose policy does not let this client read it: relays say
 * `unreadable` (issue 46). Here the space lets everyone read, and a socket
 * stands in for the relays that say otherwise (see unreadableAt), so that
 * one relay, or f+1, can say it while the others serve the space; the rest
 * is real relays in simulated time.
 */

const { cluster, person } = people()

/**
 * A relay that does not let this client read `space`: it takes no subscribe
 * for it and answers `unreadable` (as a relay whose policy does not name the
 * client does), while `refusing()` says so. Counts the subscribes it got.
 */
function unreadableAt(inner: SocketLike, space: string, refusing: () => boolean, later: (ms: number, action: () => void) => void, subscribes: { n: number }): SocketLike {
  const outer: SocketLike = {
    get binaryType() {
      return inner.binaryType
    },
    set binaryType(v: string) {
      inner.binaryType = v
    },
    get readyState() {
      return inner.readyState
    },
    send(data) {
      const m = decodeClientMessage(data)
      if (m.type === 'subscribe' && m.space === space) {
        subscribes.n++
        if (refusing()) {
          const frame = encodeRelayMessage({ type: 'unreadable', space, detail: 'the space policy does not name this key' })
          later(2, () => outer.onmessage?.({ data: frame }))
          return
        }
      }
      inner.send(data)
    },
    close: (code, reason) => inner.close(code, reason),
    onopen: null,
    onmessage: null,
    onclose: null,
    onerror: null,
  }
  inner.onopen = (ev) => outer.onopen?.(ev)
  inner.onmessage = (ev) => outer.onmessage?.(ev)
  inner.onclose = (ev) => outer.onclose?.(ev)
  inner.onerror = (ev) => outer.onerror?.(ev)
  return outer
}

describe('a space the relays say this client may not read', () => {
  /** A client whose relays in `refusing` (by index) say `team` is unreadable while `refuse.now`; its subscribes per relay. */
  async function refused(c: SimCluster, refusing: readonly number[]) {
    const refuse = { now: true }
    const subscribes = c.urls.map(() => ({ n: 0 }))
    const base = c.clientOptions()
    const client = await person(c, 2, {
      connect: (url) => {
        const i = c.urls.findIndex((u) => url.startsWith(u))
        const socket = (base.connect as (u: string) => SocketLike)(url)
        return refusing.includes(i) ? unreadableAt(socket, 'team', () => refuse.now, (ms, a) => c.later(ms, a), subscribes[i] as { n: number }) : socket
      },
    })
    return { client, refuse, subscribes }
  }

  it('one relay saying it is no verdict: the space follows the others, and that relay is not faulty', async () => {
    const c = await cluster()
    const alice = await person(c, 1)
    const team = await alice.createSpace('team', { everyone: 'writer' })
    // Relay 1 is the home relay of 'team', the one the space takes frames from first.
    const { client, subscribes } = await refused(c, [1])
    const s = await client.space('team')
    const errors: SteadError[] = []
    s.onError((e) => errors.push(e))
    expect((await s.counter('n').increment(1, { safe: true })).status).toBe('committed')
    await c.until('following the policy', () => s.members.stable?.everyone === 'writer' || undefined)
    await c.until('relay 1 said it', () => (subscribes[1]?.n ?? 0) > 0 || undefined)
    const asked = subscribes[1]?.n
    // Commits go on for a while: the others keep the space current, and relay 1 is not asked again while its session lasts.
    for (let i = 0; i < 5; i++) {
      expect((await team.counter('n').increment(1, { safe: true })).status).toBe('committed')
      await c.advance(3_000)
    }
    await c.until('the others keep it current', () => s.counter('n').stable === 6 || undefined)
    expect(subscribes[1]?.n).toBe(asked)
    expect(errors).toEqual([])
    expect(s.status.problem).toBeUndefined()
    expect(s.status.relays.every((r) => r.faulty === undefined && r.connected)).toBe(true)
  })

  it('at f+1 the app hears it once as unauthorized, the status says so, and the relays are not asked again until a new session', async () => {
    const c = await cluster()
    const alice = await person(c, 1)
    await alice.createSpace('team', { everyone: 'reader' })
    // Relays 1 and 2: the home relay of 'team' and the next, the space's first choices of a frame source.
    const { client, refuse, subscribes } = await refused(c, [1, 2])
    const s = await client.space('team')
    const errors: SteadError[] = []
    s.onError((e) => errors.push(e))
    await c.until('the app told', () => errors.length > 0 || undefined)
    expect(errors[0]?.reason).toBe('unauthorized')
    expect(errors[0]?.message).toMatch(/may not read space team/)
    expect(errors[0]?.message).toContain(s.status.problem)
    expect(s.status.relays.every((r) => r.faulty === undefined)).toBe(true)
    const asked = subscribes.map((x) => x.n)
    // Time passes and commits come (many ticks): the space follows the relays that serve it, asks the others
    // nothing more, and says nothing more.
    const team = await alice.space('team')
    for (let i = 0; i < 5; i++) {
      expect((await team.counter('n').increment(1, { safe: true })).status).toBe('committed')
      // The frame source's session drops once: another source is chosen, never one that said no.
      if (i === 1) c.relays[3]?.dropClients()
      await c.advance(3_000)
    }
    await c.until('the others keep it current', () => s.counter('n').stable === 5 || undefined)
    await c.advance(10_000)
    expect(subscribes.map((x) => x.n)).toEqual(asked)
    expect(errors).toHaveLength(1)
    // A new session asks once more; the same answer is no news.
    c.relays[1]?.dropClients()
    await c.until('asked on the new session', () => (subscribes[1]?.n ?? 0) > (asked[1] ?? 0) || undefined)
    await c.advance(10_000)
    expect(subscribes[1]?.n).toBe((asked[1] ?? 0) + 1)
    expect(errors).toHaveLength(1)
    expect(errors[0]?.message).toContain(s.status.problem)

    // The policy changes; a new session asks again, is served, and the problem goes.
    refuse.now = false
    c.relays[1]?.dropClients()
    c.relays[2]?.dropClients()
    await c.until('asked again', () => ((subscribes[1]?.n ?? 0) > (asked[1] ?? 0) + 1 && (subscribes[2]?.n ?? 0) > (asked[2] ?? 0)) || undefined)
    // A relay that said it serving the space (here its attestation of where the client stands) ends the problem.
    await c.until('readable again', () => (s.status.problem === undefined ? true : undefined))
    expect(errors).toHaveLength(1)
  })
})
