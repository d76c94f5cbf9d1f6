import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { CommitAssembler, decodeRelayMessage, encodeRelayMessage, isSteadError, type RelayMessage } from '../src/index.ts'

const attestation = { bytes: new Uint8Array([1, 2, 3]), sig: new Uint8Array(64).fill(9) }
/** Buffers and Uint8Arrays compare as their bytes. */
const plain = (v: unknown): unknown =>
  v instanceof Uint8Array ? [...v] : Array.isArray(v) ? v.map(plain) : v && typeof v === 'object' ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, plain(x)])) : v
const roundTrip = (m: RelayMessage) => plain(decodeRelayMessage(encodeRelayMessage(m)))
const frames = (n: number, size = 10) => Array.from({ length: n }, (_, i) => new Uint8Array(size).fill(i))

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
