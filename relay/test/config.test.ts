import { toHex } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { ConfigError, clusterToJson, generateIdentity, parseCluster } from '../src/config.ts'

const relay = (i: number, over: Record<string, unknown> = {}) => ({
  id: `r${i}`,
  publicKey: toHex(generateIdentity().publicKey),
  mesh: `/ip4/127.0.0.1/tcp/${7500 + i}`,
  api: `127.0.0.1:${7400 + i}`,
  ...over,
})

describe('cluster file', () => {
  it('round-trips and derives f', () => {
    const c = parseCluster({ relays: [1, 2, 3, 4].map((i) => relay(i)), spaces: { bank: { writers: [toHex(generateIdentity().publicKey)] }, chat: {} } })
    expect(c.f).toBe(1)
    expect(c.openSpaces).toBe(true)
    expect(parseCluster(clusterToJson(c))).toEqual(c)
  })

  it('refuses inconsistent configs with a message that names the problem', () => {
    const four = [1, 2, 3, 4].map((i) => relay(i))
    const cases: Array<[unknown, RegExp]> = [
      [{ relays: [] }, /non-empty array/],
      [{ f: 2, relays: four }, /cannot tolerate f = 2/],
      [{ relays: [...four.slice(0, 3), { ...four[3], publicKey: four[0]!.publicKey }] }, /keys must be distinct/],
      [{ relays: [...four.slice(0, 3), relay(4, { publicKey: 'zz' })] }, /relays\[3\]\.publicKey is not hex/],
      [{ relays: [...four.slice(0, 3), relay(4, { mesh: 'localhost:1' })] }, /relays\[3\]\.mesh must look like/],
      [{ relays: [...four.slice(0, 3), relay(4, { api: 'http://x' })] }, /relays\[3\]\.api must be host:port/],
      [{ relays: [...four.slice(0, 3), relay(4, { id: 'r1' })] }, /ids must be distinct/],
      [{ relays: four, spaces: { bank: { writers: ['00'] } } }, /spaces\.bank\.writers\[0\]/],
      [{ relays: four, openSpaces: 'no' }, /openSpaces/],
    ]
    for (const [raw, message] of cases) expect(() => parseCluster(raw, 'cluster.json')).toThrowError(message)
    expect(() => parseCluster({ relays: [] })).toThrowError(ConfigError)
  })
})
