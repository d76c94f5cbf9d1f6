import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { clockFrom } from '../src/clock.ts'
import { asSigned, decode, encode, encodeSigned } from '../src/codec.ts'
import { nobleCrypto } from '../src/crypto/noble.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { decodeEnvelope, encodeEnvelope, envelopeUnits, openEnvelope, sealEnvelope, type EnvelopeDraft } from '../src/envelope.ts'
import { SteadError } from '../src/errors.ts'

const crypto = nodeCrypto
const secretKey = new Uint8Array(32).fill(7)
const identity = { secretKey, publicKey: await crypto.publicKeyOf(secretKey) }

const draft: EnvelopeDraft = {
  space: 'bank',
  seq: 3,
  clock: clockFrom([['x0000000000000000', 2]]),
  deps: [new Uint8Array(32).fill(1)],
  updates: [
    { key: 'acct:alice', decl: { type: 'counter', bounds: { min: 0 } }, ops: [5] },
    { key: 'guests', decl: { type: 'set', bounds: {} }, ops: [['a', 'bob'], ['r', 'eve', ['t1']]] },
  ],
  safe: [
    {
      atomic: true,
      updates: [
        { key: 'acct:alice', decl: { type: 'counter', bounds: { min: 0 } }, op: -3 },
        { key: 'acct:bob', decl: { type: 'counter', bounds: { min: 0 } }, op: 3 },
      ],
    },
    { atomic: false, updates: [{ key: 'seats', decl: { type: 'bounded-counter', params: { min: 0, initial: 10 } }, op: ['c', 2] }] },
  ],
}

/** Signs an arbitrary payload as if it were an envelope: what a buggy or hostile client could send. */
async function signRaw(payload: unknown): Promise<Uint8Array> {
  const bytes = encode(payload)
  return encodeSigned({ bytes, sig: await crypto.sign(secretKey, bytes) })
}

async function reasonOf(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'accepted'
  } catch (e) {
    if (e instanceof SteadError) return e.reason
    throw e
  }
}

describe('envelopes', () => {
  it('round-trip through the wire with the same id, across backends', async () => {
    const env = await sealEnvelope(crypto, identity, draft)
    const frame = encodeEnvelope(env)
    for (const backend of [nodeCrypto, nobleCrypto]) {
      const back = await decodeEnvelope(backend, frame)
      expect(back.idHex).toBe(env.idHex)
      expect(back.authorId).toBe(env.authorId)
      expect(back.seq).toBe(3)
      expect(back.updates).toEqual(draft.updates)
      expect(back.safe).toEqual(draft.safe)
      expect([...back.clock]).toEqual([...draft.clock])
      expect(back.deps.map((d) => [...d])).toEqual(draft.deps.map((d) => [...d]))
    }
    expect(env.id).toEqual(crypto.sha256(env.signed.bytes))
    expect(env.authorId).toMatch(/^[A-Za-z0-9_-]{16}$/)
  })

  it('numbers units and tags: regular ops one by one, an atomic group as one unit', async () => {
    const env = await sealEnvelope(crypto, identity, draft)
    const units = envelopeUnits(env)
    expect(units.map((u) => u.kind)).toEqual(['op', 'op', 'op', 'group', 'group'])
    const tags = units.flatMap((u) => (u.kind === 'op' ? [u.tag] : u.items.map((i) => i.tag)))
    const prefix = Buffer.from(env.id.subarray(0, 12)).toString('base64url')
    expect(tags).toEqual([0, 1, 2, 3, 4, 5].map((n) => `${prefix}:${n}`))
  })

  it('refuses to seal what peers would refuse', async () => {
    const bad = { ...draft, updates: [{ key: 'seats', decl: { type: 'bounded-counter' as const, params: { min: 0, initial: 1 } }, ops: [['c', 1] as const] }], safe: [] }
    expect(await reasonOf(sealEnvelope(crypto, identity, bad))).toBe('malformed')
    expect(await reasonOf(sealEnvelope(crypto, identity, { ...draft, seq: 0 }))).toBe('malformed')
    expect(await reasonOf(sealEnvelope(crypto, identity, { ...draft, updates: [], safe: [] }))).toBe('malformed')
  })

  it('a sealed envelope is what peers read from its bytes, even where a string does not survive UTF-8', async () => {
    const lone = { ...draft, updates: [{ key: 'title', decl: { type: 'register' as const }, ops: [['s', 'a\uD800b', 1] as const] }], safe: [] }
    const sealed = await sealEnvelope(crypto, identity, lone)
    const read = await decodeEnvelope(crypto, encodeEnvelope(sealed))
    expect(sealed.updates).toEqual(read.updates)
    expect(JSON.stringify(sealed.updates)).not.toContain('\\ud800')
  })

  it('rejects a bad signature, a wrong key and truncated or trailing bytes with typed reasons', async () => {
    const env = await sealEnvelope(crypto, identity, draft)
    const sig = new Uint8Array(env.signed.sig)
    sig[0]! ^= 1
    expect(await reasonOf(openEnvelope(crypto, { bytes: env.signed.bytes, sig }))).toBe('bad-signature')
    const other = await crypto.sign(new Uint8Array(32).fill(8), env.signed.bytes)
    expect(await reasonOf(openEnvelope(crypto, { bytes: env.signed.bytes, sig: other }))).toBe('bad-signature')

    const frame = encodeEnvelope(env)
    expect(await reasonOf(decodeEnvelope(crypto, frame.subarray(0, frame.length - 5)))).toBe('malformed')
    expect(await reasonOf(decodeEnvelope(crypto, new Uint8Array([...frame, 0])))).toBe('malformed')
    expect(await reasonOf(decodeEnvelope(crypto, new Uint8Array(0)))).toBe('malformed')
    expect(await reasonOf(decodeEnvelope(crypto, encode([env.signed.bytes])))).toBe('malformed')
  })

  it('rejects wrong types field by field, even when validly signed', async () => {
    const good = decode(encodeEnvelope(await sealEnvelope(crypto, identity, draft))) as [Uint8Array, Uint8Array]
    const payload = decode(good[0]) as unknown[]
    const variants: Array<[string, (p: unknown[]) => void]> = [
      ['tag', (p) => (p[0] = 'other')],
      ['space type', (p) => (p[1] = 5)],
      ['empty space', (p) => (p[1] = '')],
      ['author length', (p) => (p[2] = new Uint8Array(31))],
      ['seq type', (p) => (p[3] = '3')],
      ['negative seq', (p) => (p[3] = -1)],
      ['float seq', (p) => (p[3] = 1.5)],
      ['clock', (p) => (p[4] = { a: 1 })],
      ['dep length', (p) => (p[5] = [new Uint8Array(3)])],
      ['updates type', (p) => (p[6] = 'x')],
      ['unknown decl', (p) => (p[6] = [['k', ['z'], [1]]])],
      ['op type', (p) => (p[6] = [['k', ['c', null, null], ['1']]])],
      ['zero op', (p) => (p[6] = [['k', ['c', null, null], [0]]])],
      ['empty ops', (p) => (p[6] = [['k', ['c', null, null], []]])],
      ['duplicate key', (p) => (p[6] = [['k', ['c', null, null], [1]], ['k', ['c', null, null], [2]]])],
      ['safe group shape', (p) => (p[7] = [[true]])],
      ['atomic type', (p) => (p[7] = [[1, [['k', ['c', null, null], 1]]]])],
      ['restore op from the wire', (p) => (p[6] = [['s', ['s', null], [['R', 'x', ['t']]]]])],
      ['extra field', (p) => p.push(1)],
      ['pool in clock', (p) => (p[4] = ['*', 1])],
    ]
    for (const [name, mutate] of variants) {
      const p = structuredClone(payload)
      mutate(p)
      expect([name, await reasonOf(decodeEnvelope(crypto, await signRaw(p)))]).toEqual([name, 'malformed'])
    }
  })

  it('rejects oversized input before decoding it', async () => {
    const limits = { maxFrameBytes: 1 << 20, maxEnvelopeBytes: 200, maxClockEntries: 2, maxDeps: 1, maxOpsPerEnvelope: 3, maxKeyChars: 8, maxSpaceChars: 8 }
    const big = { ...draft, updates: [{ key: 'k', decl: { type: 'register' as const }, ops: [['s', 'x'.repeat(500), 1] as const] }], safe: [] }
    expect(await reasonOf(sealEnvelope(crypto, identity, big, limits))).toBe('too-large')
    const manyOps = { ...draft, updates: [{ key: 'k', decl: { type: 'set' as const, bounds: {} }, ops: [1, 2, 3, 4].map((n) => ['a', n] as const) }], safe: [] }
    expect(await reasonOf(sealEnvelope(crypto, identity, manyOps, { ...limits, maxEnvelopeBytes: 10_000 }))).toBe('too-large')
    const bigClock = { ...draft, clock: clockFrom([['a', 1], ['b', 1], ['c', 1]]) }
    expect(await reasonOf(sealEnvelope(crypto, identity, bigClock, { ...limits, maxEnvelopeBytes: 10_000, maxOpsPerEnvelope: 100 }))).toBe('too-large')
    expect(() => decode(new Uint8Array(300), 200)).toThrowError(expect.objectContaining({ reason: 'too-large' }))
  })

  it('any corruption of a frame gives a typed error, never a crash or a half-valid envelope', async () => {
    const frame = encodeEnvelope(await sealEnvelope(crypto, identity, draft))
    await fc.assert(
      fc.asyncProperty(fc.array(fc.tuple(fc.nat(frame.length - 1), fc.integer({ min: 1, max: 255 })), { minLength: 1, maxLength: 4 }), async (flips) => {
        const bad = new Uint8Array(frame)
        for (const [at, x] of flips) bad[at]! ^= x
        const reason = await reasonOf(decodeEnvelope(crypto, bad))
        // Two flips of one byte by the same value cancel out: the frame is the signed one again.
        const unchanged = bad.every((b, i) => b === frame[i])
        if (unchanged) expect(reason).toBe('accepted')
        else expect(['malformed', 'too-large', 'bad-signature']).toContain(reason)
      }),
      { numRuns: 300 },
    )
  })
})

describe('codec', () => {
  it('signed pairs need exactly [bytes, 64-byte sig]', () => {
    expect(() => asSigned([new Uint8Array(1), new Uint8Array(63)])).toThrowError(expect.objectContaining({ reason: 'malformed' }))
    expect(() => asSigned({ bytes: 1 })).toThrowError(expect.objectContaining({ reason: 'malformed' }))
  })
  it('never lets a __proto__ key change an object prototype', () => {
    // msgpack map {"__proto__": {"polluted": 1}}
    const bytes = new Uint8Array([0x81, 0xa9, ...new TextEncoder().encode('__proto__'), 0x81, 0xa8, ...new TextEncoder().encode('polluted'), 0x01])
    let v: unknown
    try {
      v = decode(bytes)
    } catch (e) {
      expect(e).toBeInstanceOf(SteadError)
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined()
    if (v) expect(Object.getPrototypeOf(v)).toBe(Object.prototype)
  })
})
