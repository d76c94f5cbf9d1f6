import { toHex } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { ConfigError, clusterToJson, generateIdentity, parseCluster } from '../src/process/config.ts'

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
    expect(parseCluster(clusterToJson(c))).toEqual(c)
  })

  it('closes spaces unless openSpaces is true, and caps new spaces per key', () => {
    const four = [1, 2, 3, 4].map((i) => relay(i))
    const closed = parseCluster({ relays: four })
    expect(closed.openSpaces).toBe(false)
    expect(closed.newSpacesPerKeyPerHour).toBe(100)
    const open = parseCluster({ relays: four, openSpaces: true, newSpacesPerKeyPerHour: 5 })
    expect(open.openSpaces).toBe(true)
    expect(open.newSpacesPerKeyPerHour).toBe(5)
    expect(parseCluster(clusterToJson(open))).toEqual(open)
    for (const bad of [-1, 1.5, '10']) expect(() => parseCluster({ relays: four, newSpacesPerKeyPerHour: bad }, 'cluster.json')).toThrowError(/"newSpacesPerKeyPerHour" must be a non-negative integer/)
    // Live spaces per user, counted by the cluster only when the file sets it (clients pin the file's JSON: a file without it reads back the same).
    expect(closed.spacesPerUser).toBeUndefined()
    expect(clusterToJson(closed)).not.toHaveProperty('spacesPerUser')
    const few = parseCluster({ relays: four, openSpaces: true, spacesPerUser: 2 })
    expect(few.spacesPerUser).toBe(2)
    expect(parseCluster(clusterToJson(few))).toEqual(few)
    for (const bad of [0, -1, 1.5, '10']) expect(() => parseCluster({ relays: four, spacesPerUser: bad }, 'cluster.json')).toThrowError(/"spacesPerUser" must be a whole number from 1 to 1000000000/)
    expect(closed.checkpointRounds).toBe(1000)
    expect(parseCluster({ relays: four, checkpointRounds: 50 }).checkpointRounds).toBe(50)
    for (const bad of [0, 9, 2.5, '100']) expect(() => parseCluster({ relays: four, checkpointRounds: bad }, 'cluster.json')).toThrowError(/"checkpointRounds" must be a whole number from 10 to 1000000/)
  })

  it('parses readers next to writers and round-trips them', () => {
    const [w, r1, r2] = [generateIdentity(), generateIdentity(), generateIdentity()].map((k) => k.publicKey)
    const c = parseCluster({ relays: [1, 2, 3, 4].map((i) => relay(i)), spaces: { bank: { writers: [toHex(w!)], readers: [toHex(r1!), toHex(r2!)] }, board: { readers: [] }, chat: {} } })
    expect(c.spaces.get('bank')).toEqual({ writers: [w], readers: [r1, r2] })
    expect(c.spaces.get('board')).toEqual({ readers: [] })
    expect(c.spaces.get('chat')).toEqual({})
    expect(parseCluster(clusterToJson(c))).toEqual(c)
    expect((clusterToJson(c) as { spaces: Record<string, unknown> }).spaces.bank).toEqual({ writers: [toHex(w!)], readers: [toHex(r1!), toHex(r2!)] })
    expect(() => parseCluster({ relays: [1, 2, 3, 4].map((i) => relay(i)), spaces: { bank: { readers: [toHex(w!), 'abcd'] } } }, 'cluster.json')).toThrowError(
      /^cluster\.json: spaces\.bank\.readers\[1\] must be a 32-byte hex public key$/,
    )
    expect(() => parseCluster({ relays: [1, 2, 3, 4].map((i) => relay(i)), spaces: { bank: { readers: 'x' } } })).toThrowError(/spaces\.bank\.readers must be an array of hex public keys/)
  })

  it('refuses unknown keys anywhere, naming the key, where it is and the closest known key', () => {
    const four = [1, 2, 3, 4].map((i) => relay(i))
    const cases: Array<[unknown, string]> = [
      [{ relays: four, openspaces: false }, 'cluster.json: unknown key "openspaces" at top level; did you mean "openSpaces"?'],
      [{ relay: four }, 'cluster.json: unknown key "relay" at top level; did you mean "relays"?'],
      [{ relays: four, newSpacesPerHour: 3 }, 'cluster.json: unknown key "newSpacesPerHour" at top level; did you mean "newSpacesPerKeyPerHour"?'],
      [{ relays: [...four.slice(0, 3), { ...four[3], pubkey: 'ab' }] }, 'cluster.json: unknown key "pubkey" in relays[3]; did you mean "publicKey"?'],
      [{ relays: four, spaces: { bank: { writer: [] } } }, 'cluster.json: unknown key "writer" in spaces.bank; did you mean "writers"?'],
      [{ relays: four, spaces: { bank: { Readers: [] } } }, 'cluster.json: unknown key "Readers" in spaces.bank; did you mean "readers"?'],
      [{ relays: four, comment: 'x' }, 'cluster.json: unknown key "comment" at top level; known keys: f, relays, spaces, openSpaces, spaceCreators, newSpacesPerKeyPerHour, spacesPerUser, checkpointRounds'],
    ]
    for (const [raw, message] of cases) {
      let error: unknown
      try {
        parseCluster(raw, 'cluster.json')
      } catch (err) {
        error = err
      }
      expect(error).toBeInstanceOf(ConfigError)
      expect((error as Error).message).toBe(message)
    }
  })

  it('refuses inconsistent configs with a message that names the problem', () => {
    const four = [1, 2, 3, 4].map((i) => relay(i))
    const cases: Array<[unknown, RegExp]> = [
      [{ relays: [] }, /non-empty array/],
      [{ f: 2, relays: four }, /cannot tolerate f = 2/],
      [{ f: 1, relays: [...four, relay(5)] }, /N must be exactly 3f\+1/],
      [{ relays: [...four.slice(0, 3), { ...four[3], publicKey: four[0]!.publicKey }] }, /keys must be distinct/],
      [{ relays: [...four.slice(0, 3), relay(4, { publicKey: 'zz' })] }, /relays\[3\]\.publicKey is not hex/],
      [{ relays: [...four.slice(0, 3), relay(4, { mesh: 'localhost:1' })] }, /relays\[3\]\.mesh must look like/],
      [{ relays: [...four.slice(0, 3), relay(4, { api: 'http://x' })] }, /relays\[3\]\.api must be host:port/],
      [{ relays: [...four.slice(0, 3), relay(4, { id: 'r1' })] }, /ids must be distinct/],
      [{ relays: four, spaces: { bank: { writers: ['00'] } } }, /spaces\.bank\.writers\[0\]/],
      [{ relays: four, openSpaces: 'no' }, /openSpaces/],
      [{ relays: four, f: '1' }, /"f" must be a non-negative integer/],
      [{ relays: four, spaces: { bank: null } }, /spaces\.bank must be an object/],
      [{ relays: four, spaces: { bank: { writers: '00' } } }, /spaces\.bank\.writers must be an array of hex public keys/],
      [{ relays: [...four.slice(0, 3), relay(4, { publicKey: 'ab' })] }, /relays\[3\]\.publicKey must be 32 bytes/],
      [{ relays: [...four.slice(0, 3), relay(4, { id: '' })] }, /relays\[3\]\.id must be a non-empty string/],
      [[], /must be a JSON object/],
    ]
    for (const [raw, message] of cases) expect(() => parseCluster(raw, 'cluster.json')).toThrowError(message)
    expect(() => parseCluster({ relays: [] })).toThrowError(ConfigError)
  })
})
