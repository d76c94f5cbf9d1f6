import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CommitAssembler, decode, decodeClientMessage, decodeRelayMessage, encode, encodeClientMessage, encodeCommitFrame, encodeRelayMessage, isSteadError, MAX_WANTED_IDS, MAX_CLIENT_VOTES,
  type RelayMessage } from '../src/index.ts'

const attestation = { bytes: new Uint8Array([1, 2, 3]), sig: new Uint8Array(64).fill(9) }
/** Buffers and Uint8Arrays compare as their bytes; -0 as 0 (msgpack writes it as the integer 0). */
const plain = (v: unknown): unknown =>
  v instanceof Uint8Array
    ? [...v]
    : Array.isArray(v)
      ? v.map(plain)
      : v && typeof v === 'object'
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)]))
        : Object.is(v, -0)
          ? 0
          : v
const roundTrip = (m: RelayMessage) => plain(decodeRelayMessage(encodeRelayMessage(m)))
const frames = (n: number, size = 10) => Array.from({ length: n }, (_, i) => new Uint8Array(size).fill(i))

describe('subscribe', () => {
  it('asks for frames or attestations only; the older three-element form means frames', () => {
    expect(decodeClientMessage(encodeClientMessage({ type: 'subscribe', space: 's', fromIndex: 7, frames: false }))).toEqual({ type: 'subscribe', space: 's', fromIndex: 7, frames: false })
    expect(decodeClientMessage(encodeClientMessage({ type: 'subscribe', space: 's', fromIndex: 7, frames: true }))).toEqual({ type: 'subscribe', space: 's', fromIndex: 7, frames: true })
    expect(decodeClientMessage(encode(['subscribe', 's', 7]))).toEqual({ type: 'subscribe', space: 's', fromIndex: 7, frames: true })
    expect(() => decodeClientMessage(encode(['subscribe', 's', 7, 'no']))).toThrow(/boolean/)
    expect(() => decodeClientMessage(encode(['subscribe', 's']))).toThrow(/fields/)
  })

  it('may ask for envelopes sent early to be named by id in commits', () => {
    expect(decodeClientMessage(encodeClientMessage({ type: 'subscribe', space: 's', fromIndex: 7, frames: true, refs: true }))).toEqual({ type: 'subscribe', space: 's', fromIndex: 7, frames: true, refs: true })
    expect(decodeClientMessage(encode(['subscribe', 's', 7, true, false]))).toEqual({ type: 'subscribe', space: 's', fromIndex: 7, frames: true })
    expect(() => decodeClientMessage(encode(['subscribe', 's', 7, true, 1]))).toThrow(/boolean/)
    expect(() => decodeClientMessage(encode(['subscribe', 's', 7, true, true, 1]))).toThrow(/boolean/)
    expect(() => decodeClientMessage(encode(['subscribe', 's', 7, true, true, true, 1]))).toThrow(/items/)
  })
})

describe('want (a relay asks the submitter for envelopes a clock cites)', () => {
  it('round-trips, and refuses ids that are not 32 bytes or more than MAX_WANTED_IDS of them', () => {
    const want: RelayMessage = { type: 'want', space: 's', ids: [new Uint8Array(32).fill(1), new Uint8Array(32).fill(2)] }
    expect(roundTrip(want)).toEqual(plain(want))
    expect(() => decodeRelayMessage(encode(['want', 's', [new Uint8Array(31)]]))).toThrow(/want.ids/)
    expect(() => decodeRelayMessage(encode(['want', 's', Array.from({ length: MAX_WANTED_IDS + 1 }, () => new Uint8Array(32))]))).toThrow(/want.ids/)
  })
})

describe('votes (a relay tells its subscribers its own clock votes)', () => {
  it('round-trips, is asked for by subscribe, and refuses a vote that is not [32-byte id, weight, 64-byte signature] or too many', () => {
    const votes: RelayMessage = { type: 'votes', space: 's', votes: [[new Uint8Array(32).fill(1), 7, new Uint8Array(64).fill(2)]] }
    expect(roundTrip(votes)).toEqual(plain(votes))
    expect(decodeClientMessage(encodeClientMessage({ type: 'subscribe', space: 's', fromIndex: 3, votes: true }))).toEqual({ type: 'subscribe', space: 's', fromIndex: 3, frames: true, votes: true })
    expect(decodeClientMessage(encodeClientMessage({ type: 'subscribe', space: 's', fromIndex: 3, refs: true, votes: true }))).toEqual({ type: 'subscribe', space: 's', fromIndex: 3, frames: true, refs: true, votes: true })
    expect(() => decodeRelayMessage(encode(['votes', 's', [[new Uint8Array(31), 7, new Uint8Array(64)]]]))).toThrow(/votes\[0\]\.id/)
    expect(() => decodeRelayMessage(encode(['votes', 's', [[new Uint8Array(32), -1, new Uint8Array(64)]]]))).toThrow(/weight/)
    expect(() => decodeRelayMessage(encode(['votes', 's', [[new Uint8Array(32), 7]]]))).toThrow(/votes\[0\]/)
    expect(() => decodeRelayMessage(encode(['votes', 's', Array.from({ length: MAX_CLIENT_VOTES + 1 }, () => [new Uint8Array(32), 1, new Uint8Array(64)])]))).toThrow(/votes/)
  })
})

describe('paced subscriptions (BENDY on the live stream)', () => {
  it('pace, applied, delta and unpaced round-trip; adaptive is the default mode', () => {
    expect(decodeClientMessage(encodeClientMessage({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500 }))).toEqual({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500 })
    expect(decodeClientMessage(encodeClientMessage({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500, mode: 'state' }))).toEqual({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500, mode: 'state' })
    expect(decodeClientMessage(encodeClientMessage({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500, mode: 'adaptive' }))).toEqual({ type: 'pace', space: 's', fromIndex: 7, freshnessMs: 500 })
    expect(decodeClientMessage(encodeClientMessage({ type: 'applied', space: 's', index: 9 }))).toEqual({ type: 'applied', space: 's', index: 9 })
    const delta: RelayMessage = { type: 'delta', space: 's', delta: new Uint8Array([1, 2]), attestation: new Uint8Array([3]), sigs: [[0, new Uint8Array(64).fill(1)], [2, new Uint8Array(64).fill(2)]] }
    expect(roundTrip(delta)).toEqual(plain(delta))
    expect(roundTrip({ type: 'unpaced', space: 's', detail: 'no log' })).toEqual({ type: 'unpaced', space: 's', detail: 'no log' })
  })

  it('refuses bounds out of range, unknown modes, and signatures of the wrong size', () => {
    for (const ms of [0, 49, 3_600_001]) expect(() => decodeClientMessage(encode(['pace', 's', 0, ms])), String(ms)).toThrow(/freshnessMs/)
    expect(() => decodeClientMessage(encode(['pace', 's', 0, 500, 'diff']))).toThrow(/mode/)
    expect(() => decodeClientMessage(encode(['pace', 's', 0]))).toThrow(/fields/)
    expect(() => decodeRelayMessage(encode(['delta', 's', new Uint8Array(1), new Uint8Array(1), [[0, new Uint8Array(63)]]]))).toThrow(/sig/)
    expect(() => decodeRelayMessage(encode(['delta', 's', 'not bytes', new Uint8Array(1), []]))).toThrow(/bytes/)
  })
})

describe('session authentication both ways', () => {
  it('a hello may carry a nonce for the relay to sign; the welcome carries the signature, with or without peer addresses', () => {
    const hello = { type: 'hello' as const, publicKey: new Uint8Array(32).fill(1), sig: new Uint8Array(64).fill(2), nonce: new Uint8Array(32).fill(3) }
    expect(plain(decodeClientMessage(encodeClientMessage(hello)))).toEqual(plain(hello))
    const { nonce: _nonce, ...old } = hello
    expect(plain(decodeClientMessage(encodeClientMessage(old)))).toEqual(plain(old))
    expect(() => decodeClientMessage(encode(['hello', hello.publicKey, hello.sig, new Uint8Array(31)]))).toThrow(/nonce/)
    const welcome: RelayMessage = { type: 'welcome', relay: 2, n: 4, f: 1, sig: new Uint8Array(64).fill(4) }
    expect(roundTrip(welcome)).toEqual(plain(welcome))
    const withPeers: RelayMessage = { ...welcome, peers: ['/ip4/127.0.0.1/tcp/1/ws/p2p/x'] }
    expect(roundTrip(withPeers)).toEqual(plain(withPeers))
    expect(roundTrip({ type: 'welcome', relay: 2, n: 4, f: 1 })).toEqual({ type: 'welcome', relay: 2, n: 4, f: 1 })
    expect(() => decodeRelayMessage(encode(['welcome', 2, 4, 1, [], new Uint8Array(63)]))).toThrow(/sig/)
  })
})

describe('compact attestations', () => {
  it('round-trip, and refuse a signature of the wrong size', () => {
    const m: RelayMessage = { type: 'attest', space: 's', round: 42, sig: new Uint8Array(64).fill(3) }
    expect(roundTrip(m)).toEqual(plain(m))
    expect(() => decodeRelayMessage(encode(['attest', 's', 42, new Uint8Array(63)]))).toThrow(/sig/)
    expect(() => decodeRelayMessage(encode(['attest', 's', -1, new Uint8Array(64)]))).toThrow(/round/)
  })
})

describe('commits in several frames', () => {
  it('round-trip through the wire codec', () => {
    const first: RelayMessage = { type: 'commit', space: 's', attestation, envelopes: frames(2), more: true }
    const rest: RelayMessage = { type: 'commit-more', space: 's', envelopes: frames(1), more: false }
    expect(roundTrip(first)).toEqual(plain(first))
    expect(roundTrip(rest)).toEqual(plain(rest))
    // A whole commit keeps the four-field form older clients read.
    const whole: RelayMessage = { type: 'commit', space: 's', attestation, envelopes: frames(1) }
    expect(roundTrip(whole)).toEqual(plain({ ...whole, more: false }))
    expect(() => decodeRelayMessage(encodeRelayMessage({ ...rest, more: 'yes' as unknown as boolean }))).toThrow(/boolean/)
  })

  it('built around stored envelope bytes, equal byte for byte to encoding the whole message', () => {
    const envs = frames(3, 40)
    const same = (x: Uint8Array, y: Uint8Array) => expect(Buffer.from(x).equals(Buffer.from(y))).toBe(true)
    same(encodeCommitFrame('s', attestation, encode(envs), true), encode(['commit', 's', [attestation.bytes, attestation.sig], envs, true]))
    same(encodeCommitFrame('s', attestation, encode(envs), false), encode(['commit', 's', [attestation.bytes, attestation.sig], envs]))
    same(encodeCommitFrame('s', undefined, encode(envs), false), encode(['commit-more', 's', envs, false]))
    same(encodeCommitFrame('s', undefined, encode([]), true), encode(['commit-more', 's', [], true]))
  })

  it('join back into the commit whatever the split', () => {
    fc.assert(
      fc.property(fc.array(fc.nat(5), { minLength: 1, maxLength: 8 }), (sizes) => {
        const all = frames(sizes.reduce((a, b) => a + b, 0))
        const parts: RelayMessage[] = []
        let at = 0
        sizes.forEach((n, i) => {
          const envelopes = all.slice(at, (at += n))
          const more = i < sizes.length - 1
          parts.push(i === 0 ? { type: 'commit', space: 's', attestation, envelopes, more } : { type: 'commit-more', space: 's', envelopes, more })
        })
        const a = new CommitAssembler()
        const out = parts.map((p) => a.push(p as Extract<RelayMessage, { type: 'commit' | 'commit-more' }>))
        expect(out.slice(0, -1).every((o) => o === undefined)).toBe(true)
        expect(out[out.length - 1]).toMatchObject({ type: 'commit', space: 's', attestation, envelopes: all })
      }),
    )
  })

  it('refuses parts that never started or grow past the bound, and drops a commit its relay abandoned', () => {
    const a = new CommitAssembler(25)
    expect(() => a.push({ type: 'commit-more', space: 's', envelopes: frames(1), more: false })).toThrow(/never started/)
    a.push({ type: 'commit', space: 's', attestation, envelopes: frames(1), more: true })
    let err: unknown
    try {
      a.push({ type: 'commit-more', space: 's', envelopes: frames(2), more: true })
    } catch (e) {
      err = e
    }
    expect(isSteadError(err, 'too-large')).toBe(true)
    a.reset()
    a.push({ type: 'commit', space: 's', attestation, envelopes: frames(1), more: true })
    // The relay gave up on that one (an unsubscribe): the next commit stands alone.
    expect(a.push({ type: 'commit', space: 't', attestation, envelopes: frames(1) })).toMatchObject({ space: 't' })
    expect(() => a.push({ type: 'commit-more', space: 's', envelopes: [], more: false })).toThrow(/never started/)
  })
})

describe('the msgpack decoder', () => {
  it('refuses extension types that could hang or crash msgpackr (a fuzzer found this 9-byte frame)', () => {
    const bundled = new Uint8Array([0xa0, 0xa0, 0xd6, 0x62, 0xff, 0xff, 0xff, 0xfc, 0xc0])
    expect(() => decode(bundled)).toThrow(/not valid msgpack/)
    expect(() => decode(new Uint8Array([0x92, 0xa0, 0xd6, 0x62, 0xff, 0xff, 0xff, 0xfc]))).toThrow(/type 0x62|not allowed/)
    expect(() => decode(new Uint8Array([0xd6, 0xff, 0, 0, 0, 0]))).toThrow(/not allowed/) // a timestamp
    expect(() => decode(new Uint8Array([0xc7, 1, 0x70, 0]))).toThrow(/not allowed/)
  })

  it('refuses lengths past the end, trailing bytes and truncation, however large the declared count', () => {
    expect(() => decode(new Uint8Array([0xdd, 0xff, 0xff, 0xff, 0xff]))).toThrow(/items declared/)
    expect(() => decode(new Uint8Array([0xdb, 0x7f, 0xff, 0xff, 0xff, 1]))).toThrow(/past the end/)
    expect(() => decode(new Uint8Array([0x01, 0x02]))).toThrow(/one msgpack value/)
    expect(() => decode(new Uint8Array([0x92, 0x01]))).toThrow(/items declared|truncated/)
    expect(() => decode(new Uint8Array([0x91, 0xcd, 0x01]))).toThrow(/past the end/)
  })

  it('reads back everything Stead writes, undefined included', () => {
    // Stead writes no "__proto__" keys (register values refuse them: msgpack decoders rename them).
    const written = fc.jsonValue().filter((j) => !JSON.stringify(j).includes('"__proto__":'))
    fc.assert(
      fc.property(written, fc.uint8Array({ maxLength: 40 }), (json, bin) => {
        const value = [json, bin, undefined, -1.5, 2 ** 40, -(2 ** 40)]
        expect(plain(decode(encode(value)))).toEqual(plain(value))
      }),
    )
  })

  it('answers any bytes with a value or a typed error', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 64 }), (bytes) => {
        try {
          decode(bytes)
        } catch (err) {
          expect(isSteadError(err, 'malformed')).toBe(true)
        }
      }),
      { numRuns: 20_000 },
    )
  })
})

describe('pong with the relay clock', () => {
  it('carries the time and reads back; a pong without one (older relays) still reads', () => {
    expect(decodeRelayMessage(encodeRelayMessage({ type: 'pong', n: 3, time: 1_750_000_000_000 }))).toEqual({ type: 'pong', n: 3, time: 1_750_000_000_000 })
    expect(decodeRelayMessage(encode(['pong', 3]))).toEqual({ type: 'pong', n: 3 })
    expect(isSteadError(catching(() => decodeRelayMessage(encode(['pong', 3, 'noon']))), 'malformed')).toBe(true)
  })
})

function catching(f: () => unknown): unknown {
  try {
    f()
  } catch (err) {
    return err
  }
  return undefined
}
