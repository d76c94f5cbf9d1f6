import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { bytesEqual, concatBytes, fromBase64Url, fromHex, toBase64Url, toHex } from '../src/bytes.ts'
import { SteadError } from '../src/errors.ts'

function expectMalformed(run: () => unknown): void {
  let caught: unknown
  try {
    run()
  } catch (e) {
    caught = e
  }
  expect(caught).toBeInstanceOf(SteadError)
  expect((caught as SteadError).reason).toBe('malformed')
}

const utf8 = (text: string) => new TextEncoder().encode(text)

describe('hex', () => {
  it('encodes lowercase, two digits per byte', () => {
    expect(toHex(new Uint8Array(0))).toBe('')
    expect(toHex(Uint8Array.of(0, 1, 0x0f, 0x10, 0xab, 0xff))).toBe('00010f10abff')
  })

  it('round-trips any bytes, and agrees with Buffer', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        const hex = toHex(bytes)
        expect(hex).toBe(Buffer.from(bytes).toString('hex'))
        expect(fromHex(hex)).toEqual(bytes)
        expect(fromHex(hex.toUpperCase())).toEqual(bytes)
      }),
    )
  })

  it('decodes exactly the valid strings', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 12 }), (text) => {
        const valid = /^(?:[0-9a-fA-F]{2})*$/.test(text)
        if (valid) expect(toHex(fromHex(text))).toBe(text.toLowerCase())
        else expectMalformed(() => fromHex(text))
      }),
    )
  })

  it.each(['0', 'abc', 'zz', '0g', 'g0', ' 00', '00 ', '0x00', '+0', '-1', 'é0', '０0', '00\n'])(
    'rejects %j with SteadError malformed',
    (text) => expectMalformed(() => fromHex(text)),
  )

  it('rejects non-strings with SteadError malformed', () => {
    expectMalformed(() => fromHex(undefined as unknown as string))
    expectMalformed(() => fromHex(42 as unknown as string))
  })
})

describe('base64url', () => {
  it.each([
    ['', ''],
    ['f', 'Zg'],
    ['fo', 'Zm8'],
    ['foo', 'Zm9v'],
    ['foob', 'Zm9vYg'],
    ['fooba', 'Zm9vYmE'],
    ['foobar', 'Zm9vYmFy'],
  ])('matches RFC 4648 §10 for %j (without padding)', (text, encoded) => {
    expect(toBase64Url(utf8(text))).toBe(encoded)
    expect(fromBase64Url(encoded)).toEqual(utf8(text))
  })

  it('uses the URL-safe alphabet', () => {
    expect(toBase64Url(Uint8Array.of(0xfb, 0xff, 0xbf))).toBe('-_-_')
    expect(fromBase64Url('-_-_')).toEqual(Uint8Array.of(0xfb, 0xff, 0xbf))
  })

  it('round-trips any bytes, and agrees with Buffer', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
        const text = toBase64Url(bytes)
        expect(text).toBe(Buffer.from(bytes).toString('base64url'))
        expect(fromBase64Url(text)).toEqual(bytes)
      }),
    )
  })

  it('decodes only canonical strings: decoding then encoding gives the input back', () => {
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
    const chars = fc.constantFrom(...alphabet, '=', '+', '/', ' ', '.')
    fc.assert(
      fc.property(fc.array(chars, { maxLength: 11 }), (list) => {
        const text = list.join('')
        let decoded: Uint8Array | undefined
        try {
          decoded = fromBase64Url(text)
        } catch (e) {
          expect(e).toBeInstanceOf(SteadError)
          expect((e as SteadError).reason).toBe('malformed')
        }
        if (decoded !== undefined) expect(toBase64Url(decoded)).toBe(text)
      }),
      { numRuns: 500 },
    )
  })

  it.each([
    'A', // impossible length
    'AAAAA',
    'Zg==', // padding
    'Zm8=',
    'Zg=',
    'Zh', // non-zero unused bits
    'Zm9',
    'Zm+v', // standard alphabet
    'Zm/v',
    'Zm9v ', // whitespace
    ' Zm9v',
    'Zm\n9v',
    'Zm9vé',
    'Zm.v',
  ])('rejects %j with SteadError malformed', (text) => expectMalformed(() => fromBase64Url(text)))

  it('rejects non-strings with SteadError malformed', () => {
    expectMalformed(() => fromBase64Url(null as unknown as string))
  })
})

describe('bytesEqual', () => {
  it('is content equality', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), fc.uint8Array({ maxLength: 40 }), (a, b) => {
        expect(bytesEqual(a, b)).toBe(toHex(a) === toHex(b))
        expect(bytesEqual(a, a.slice())).toBe(true)
      }),
    )
  })

  it('distinguishes a prefix from the whole', () => {
    expect(bytesEqual(Uint8Array.of(1, 2), Uint8Array.of(1, 2, 0))).toBe(false)
    expect(bytesEqual(new Uint8Array(0), new Uint8Array(0))).toBe(true)
  })

  it('compares views by their own bytes only', () => {
    const backing = Uint8Array.of(9, 1, 2, 9)
    expect(bytesEqual(backing.subarray(1, 3), Uint8Array.of(1, 2))).toBe(true)
  })
})

describe('concatBytes', () => {
  it('joins parts in order into a fresh array', () => {
    fc.assert(
      fc.property(fc.array(fc.uint8Array({ maxLength: 20 }), { maxLength: 6 }), (parts) => {
        const joined = concatBytes(...parts)
        expect(toHex(joined)).toBe(parts.map(toHex).join(''))
        for (const part of parts) expect(joined.buffer).not.toBe(part.buffer)
      }),
    )
  })

  it('copies even a single part, so later writes do not alias', () => {
    const part = Uint8Array.of(1, 2, 3)
    const joined = concatBytes(part)
    part[0] = 7
    expect(joined).toEqual(Uint8Array.of(1, 2, 3))
    expect(concatBytes()).toEqual(new Uint8Array(0))
  })
})
