import { encode, toHex } from '@stead/core'
import { describe, expect, it } from 'vitest'
import type { ClusterDescriptor } from '../src/transport/cluster.ts'
import { decodeRelayUrls, encodeRelayUrls, startUrls } from '../src/transport/relay-urls.ts'

const relay = (i: number) => ({ id: `r${i}`, publicKey: Uint8Array.from({ length: 32 }, () => i), api: `relay${i}.example:4000` })
const grown: ClusterDescriptor = { f: 2, epoch: 3, startRound: 40, relays: [1, 2, 3, 4, 5, 6, 7].map(relay) }
const app = ['wss://a.example', 'wss://b.example', 'wss://c.example', 'wss://d.example']
const reached = ['wss://a.example', 'wss://b.example', 'wss://c.example', 'wss://d.example', 'wss://relay5.example:4000', 'wss://relay6.example:4000', 'wss://relay7.example:4000']

/** Where a restarted client's sessions go (the client's side of a committee change, see epoch-change.test.ts in @stead/sim). */
describe('relay URLs kept with a followed committee', () => {
  it('round-trips, and a client that starts again with the same app URLs goes where it reached that committee', () => {
    const stored = decodeRelayUrls(encodeRelayUrls({ epoch: 3, given: app, urls: reached }))
    expect(stored).toEqual({ epoch: 3, given: app, urls: reached })
    expect(startUrls(grown, stored, app)).toEqual(reached)
  })

  it("uses the app's URLs when the app changed them, the committee is of another epoch or size, or nothing was kept", () => {
    const stored = { epoch: 3, given: app, urls: reached }
    expect(startUrls(grown, stored, [...app.slice(0, 3), 'wss://e.example'])).toEqual([...app.slice(0, 3), 'wss://e.example'])
    expect(startUrls({ ...grown, epoch: 4 }, stored, app)).toBe(app)
    expect(startUrls({ ...grown, relays: grown.relays.slice(0, 4), f: 1 }, stored, app)).toBe(app)
    expect(startUrls(undefined, stored, app)).toBe(app)
    expect(startUrls(grown, undefined, app)).toBe(app)
  })

  it('a record that does not decode counts as none', () => {
    expect(decodeRelayUrls(Uint8Array.of(1, 2, 3))).toBeUndefined()
    expect(decodeRelayUrls(encode([3, app]))).toBeUndefined()
    expect(decodeRelayUrls(encode([-1, app, reached]))).toBeUndefined()
    expect(decodeRelayUrls(encode([3, app, [...reached.slice(0, 6), '']]))).toBeUndefined()
    expect(decodeRelayUrls(encode([3, app, [toHex(new Uint8Array(2000))]]))).toBeUndefined()
  })
})
