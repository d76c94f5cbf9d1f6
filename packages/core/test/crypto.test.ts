import { createHash, createPublicKey, verify as opensslVerify } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { ed25519 } from '@noble/curves/ed25519.js'
import { bytesToNumberLE, numberToBytesLE } from '@noble/curves/utils.js'
import { sha512 } from '@noble/hashes/sha2.js'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { bytesEqual, concatBytes, fromHex, toHex } from '../src/bytes.ts'
import {
  createWebCrypto,
  defaultCrypto,
  isAcceptablePublicKey,
  isAcceptableSignature,
  nobleCrypto,
  webCryptoSupportsEd25519,
  type Crypto,
} from '../src/crypto/index.ts'
import { KeyCache, SMALL_ORDER_ENCODINGS } from '../src/crypto/noble.ts'
import { isSteadError } from '../src/errors.ts'
import { nodeCrypto, signSync, verifySync } from '../src/node.ts'

const webCrypto = createWebCrypto(globalThis.crypto.subtle)
const backends: Crypto[] = [nobleCrypto, webCrypto, nodeCrypto]
const utf8 = (text: string) => new TextEncoder().encode(text)

// RFC 8032 §7.1, typed in from the RFC; the three independent engines
// agreeing with every byte is the check against typos.
const RFC8032_VECTORS = [
  {
    name: 'TEST 1',
    secretKey: '9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60',
    publicKey: 'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
    message: '',
    signature:
      'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
  },
  {
    name: 'TEST 2',
    secretKey: '4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb',
    publicKey: '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c',
    message: '72',
    signature:
      '92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00',
  },
  {
    name: 'TEST 3',
    secretKey: 'c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7',
    publicKey: 'fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025',
    message: 'af82',
    signature:
      '6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a',
  },
  {
    name: 'TEST SHA(abc)',
    secretKey: '833fe62409237b9d62ec77587520911e9a759cec1d19755b7da901b96dca3d42',
    publicKey: 'ec172b93ad5e563bf4932c70e1245034c35467ef2efd4d64ebf819683467e2bf',
    message:
      'ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f',
    signature:
      'dc2a4459e7369633a52b1bf277839a00201009a3efbf3ecb69bea2186c26b58909351fc9ac90b3ecfdfbc7c66431e0303dca179c138ac17ad9bef1177331a704',
  },
]

const L = 2n ** 252n + 27742317777372353535851937790883648493n
const Point = ed25519.Point

const seedArb = fc.uint8Array({ minLength: 32, maxLength: 32 })
const messageArb = fc.uint8Array({ maxLength: 300 })

function flipBit(bytes: Uint8Array, bit: number): Uint8Array {
  const copy = bytes.slice()
  copy[(bit >> 3) % copy.length]! ^= 1 << (bit & 7)
  return copy
}

async function verifyAll(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): Promise<boolean[]> {
  const results = await Promise.all(backends.map((b) => b.verify(publicKey, message, signature)))
  results.push(verifySync(publicKey, message, signature))
  return results
}

describe('platform', () => {
  it('Node globalThis.crypto.subtle supports Ed25519 (the webcrypto backend is tested for real)', async () => {
    expect(await webCryptoSupportsEd25519(globalThis.crypto.subtle)).toBe(true)
    expect(await webCryptoSupportsEd25519()).toBe(true)
  })

  it('defaultCrypto picks WebCrypto here, and always the same instance', async () => {
    const chosen = await defaultCrypto()
    expect(chosen.name).toBe('webcrypto')
    expect(await defaultCrypto()).toBe(chosen)
  })

  it('webCryptoSupportsEd25519 is false, not a throw, for an engine without Ed25519', async () => {
    const broken = {
      importKey: () => Promise.reject(new DOMException('nope', 'NotSupportedError')),
    } as unknown as SubtleCrypto
    expect(await webCryptoSupportsEd25519(broken)).toBe(false)
  })

  it('the isomorphic crypto entry never reaches Node built-ins or the node backend', () => {
    const srcDir = resolve(dirname(fileURLToPath(import.meta.url)), '../src')
    const pending = [resolve(srcDir, 'crypto/index.ts'), resolve(srcDir, 'bytes.ts')]
    const seen = new Set<string>()
    while (pending.length > 0) {
      const file = pending.pop()!
      if (seen.has(file)) continue
      seen.add(file)
      for (const [, specifier] of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
        expect(specifier!.startsWith('node:'), `${file} imports ${specifier}`).toBe(false)
        if (specifier!.startsWith('.')) pending.push(resolve(dirname(file), specifier!))
      }
    }
    expect(seen).not.toContain(resolve(srcDir, 'crypto/node.ts'))
    expect(seen).toContain(resolve(srcDir, 'crypto/webcrypto.ts'))
  })

  it('backends report their names', () => {
    expect(backends.map((b) => b.name)).toEqual(['noble', 'webcrypto', 'node'])
  })
})

describe.each(backends.map((b) => [b.name, b] as const))('%s backend', (_name, backend) => {
  it.each(RFC8032_VECTORS)('matches RFC 8032 $name exactly', async (v) => {
    const secretKey = fromHex(v.secretKey)
    const message = fromHex(v.message)
    expect(toHex(await backend.publicKeyOf(secretKey))).toBe(v.publicKey)
    const signature = await backend.sign(secretKey, message)
    expect(signature).toBeInstanceOf(Uint8Array)
    expect(toHex(signature)).toBe(v.signature)
    expect(await backend.verify(fromHex(v.publicKey), message, signature)).toBe(true)
  })

  it('hashes the FIPS 180-2 vectors', () => {
    expect(toHex(backend.sha256(new Uint8Array(0)))).toBe('e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
    expect(toHex(backend.sha256(utf8('abc')))).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
    expect(
      toHex(backend.sha256(utf8('abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq'))),
    ).toBe('248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1')
  })

  it('generates 32 fresh random bytes per secret key', async () => {
    const keys = Array.from({ length: 16 }, () => backend.generateSecretKey())
    for (const key of keys) {
      expect(key).toBeInstanceOf(Uint8Array)
      expect(key.length).toBe(32)
    }
    expect(new Set(keys.map(toHex)).size).toBe(keys.length)
    // A fresh key works end to end.
    const key = keys[0]!
    const message = utf8('hello')
    expect(await backend.verify(await backend.publicKeyOf(key), message, await backend.sign(key, message))).toBe(true)
  })

  it('rejects tampered messages, tampered signatures and wrong keys', async () => {
    await fc.assert(
      fc.asyncProperty(seedArb, seedArb, messageArb, fc.nat(), async (seed, otherSeed, message, bit) => {
        fc.pre(!bytesEqual(seed, otherSeed))
        const publicKey = await backend.publicKeyOf(seed)
        const signature = await backend.sign(seed, message)
        expect(await backend.verify(publicKey, message, signature)).toBe(true)
        if (message.length > 0) {
          expect(await backend.verify(publicKey, flipBit(message, bit % (message.length * 8)), signature)).toBe(false)
        }
        expect(await backend.verify(publicKey, message, flipBit(signature, bit % 512))).toBe(false)
        expect(await backend.verify(await backend.publicKeyOf(otherSeed), message, signature)).toBe(false)
        expect(await backend.verify(flipBit(publicKey, bit % 256), message, signature)).toBe(false)
      }),
      { numRuns: 50 },
    )
  })

  it('returns false, never throws, for malformed verify inputs', async () => {
    const seed = fromHex(RFC8032_VECTORS[1]!.secretKey)
    const publicKey = await backend.publicKeyOf(seed)
    const message = utf8('m')
    const signature = await backend.sign(seed, message)
    const bad: [unknown, unknown, unknown][] = [
      [publicKey.subarray(0, 31), message, signature],
      [concatBytes(publicKey, Uint8Array.of(0)), message, signature],
      [new Uint8Array(0), message, signature],
      [publicKey, message, signature.subarray(0, 63)],
      [publicKey, message, concatBytes(signature, Uint8Array.of(0))],
      [publicKey, message, new Uint8Array(0)],
      [publicKey, message, new Uint8Array(64)],
      [new Uint8Array(32), message, signature],
      [new Uint8Array(32).fill(0xff), message, signature],
      [undefined, message, signature],
      [publicKey, undefined, signature],
      [publicKey, message, undefined],
      [Array.from(publicKey), message, signature],
      [publicKey, message, 'not bytes'],
    ]
    for (const [pk, msg, sig] of bad) {
      const result = backend.verify(pk as Uint8Array, msg as Uint8Array, sig as Uint8Array)
      await expect(result).resolves.toBe(false)
    }
  })

  it('refuses secret keys that are not 32 bytes with SteadError malformed', async () => {
    for (const secretKey of [new Uint8Array(31), new Uint8Array(33), new Uint8Array(64), new Uint8Array(0)]) {
      for (const attempt of [() => backend.sign(secretKey, utf8('m')), () => backend.publicKeyOf(secretKey)]) {
        const error = await attempt().then(
          () => undefined,
          (e: unknown) => e,
        )
        expect(isSteadError(error, 'malformed')).toBe(true)
      }
    }
  })

  it('keeps working after its key cache has evicted entries', async () => {
    const seeds = Array.from({ length: 1100 }, (_, i) => {
      const seed = new Uint8Array(32)
      new DataView(seed.buffer).setUint32(0, i + 1)
      return seed
    })
    const message = utf8('eviction')
    const first = seeds[0]!
    const firstPublic = await backend.publicKeyOf(first)
    const firstSig = await backend.sign(first, message)
    // Only the JS-side caches need exercising; signing with every key is slow on noble.
    for (const seed of backend.name === 'noble' ? seeds.slice(0, 50) : seeds) await backend.sign(seed, message)
    expect(await backend.sign(first, message)).toEqual(firstSig)
    expect(await backend.verify(firstPublic, message, firstSig)).toBe(true)
  })
})

describe('cross-backend agreement', () => {
  it('all backends derive the same keys and signatures, and verify each other', async () => {
    await fc.assert(
      fc.asyncProperty(seedArb, messageArb, async (seed, message) => {
        const publicKeys = await Promise.all(backends.map((b) => b.publicKeyOf(seed)))
        const signatures = await Promise.all(backends.map((b) => b.sign(seed, message)))
        signatures.push(signSync(seed, message))
        for (const pk of publicKeys) expect(pk).toEqual(publicKeys[0])
        for (const sig of signatures) expect(sig).toEqual(signatures[0])
        for (const signature of signatures) {
          expect(await verifyAll(publicKeys[0]!, message, signature)).toEqual([true, true, true, true])
        }
      }),
      { numRuns: 50 },
    )
  })

  it('sha256 agrees on random inputs', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 2000 }), (data) => {
        const expected = toHex(createHash('sha256').update(data).digest())
        for (const b of backends) expect(toHex(b.sha256(data))).toBe(expected)
      }),
      { numRuns: 50 },
    )
  })

  it('the SHA(abc) vector message really is SHA-512("abc")', () => {
    expect(toHex(sha512(utf8('abc')))).toBe(RFC8032_VECTORS[3]!.message)
  })

  it('signSync/verifySync match the async node backend', async () => {
    const v = RFC8032_VECTORS[2]!
    expect(toHex(signSync(fromHex(v.secretKey), fromHex(v.message)))).toBe(v.signature)
    expect(verifySync(fromHex(v.publicKey), fromHex(v.message), fromHex(v.signature))).toBe(true)
    expect(verifySync(fromHex(v.publicKey), fromHex('af83'), fromHex(v.signature))).toBe(false)
    expect(verifySync(fromHex(v.publicKey), fromHex(v.message), fromHex(v.signature).subarray(1))).toBe(false)
    expect(() => signSync(new Uint8Array(5), fromHex(v.message))).toThrow(/malformed/)
  })
})

describe('shared strictness policy', () => {
  const identity = fromHex('01' + '00'.repeat(31))
  const zeroScalar = new Uint8Array(32)

  function opensslAlone(publicKey: Uint8Array, message: Uint8Array, signature: Uint8Array): boolean {
    const spki = concatBytes(fromHex('302a300506032b6570032100'), publicKey)
    return opensslVerify(null, message, createPublicKey({ key: Buffer.from(spki), format: 'der', type: 'spki' }), signature)
  }

  it('lists exactly the eight small-order points', () => {
    const order8 = Point.fromBytes(fromHex(SMALL_ORDER_ENCODINGS[4]!))
    const multiples = new Set<string>()
    let p = Point.ZERO
    for (let i = 0; i < 8; i++) {
      multiples.add(toHex(p.toBytes()))
      p = p.add(order8)
    }
    expect(p.is0()).toBe(true)
    expect(multiples).toEqual(new Set(SMALL_ORDER_ENCODINGS))
    for (const hex of SMALL_ORDER_ENCODINGS) {
      expect(Point.fromBytes(fromHex(hex)).isSmallOrder()).toBe(true)
      expect(isAcceptablePublicKey(fromHex(hex))).toBe(false)
    }
  })

  it('rejects small-order keys in every backend, although OpenSSL alone accepts them', async () => {
    // With A = identity, (R = identity, S = 0) satisfies [S]B = R + [k]A for every message.
    const signature = concatBytes(identity, zeroScalar)
    const message = utf8('anything at all')
    expect(opensslAlone(identity, message, signature)).toBe(true)
    expect(await verifyAll(identity, message, signature)).toEqual([false, false, false, false])
  })

  it('rejects non-canonical key encodings, although OpenSSL alone accepts them', async () => {
    const signature = concatBytes(identity, zeroScalar)
    const message = utf8('m')
    const nonCanonical = [
      'ee' + 'ff'.repeat(30) + '7f', // y = p + 1, i.e. the identity again
      '01' + '00'.repeat(30) + '80', // identity with x "negative zero"
      'ec' + 'ff'.repeat(31), // order-2 point with x "negative zero"
      'ed' + 'ff'.repeat(30) + '7f', // y = p, i.e. y = 0
    ]
    for (const hex of nonCanonical) {
      expect(isAcceptablePublicKey(fromHex(hex))).toBe(false)
      expect(await verifyAll(fromHex(hex), message, signature)).toEqual([false, false, false, false])
    }
    expect(opensslAlone(fromHex(nonCanonical[0]!), message, signature)).toBe(true)
  })

  it('rejects S >= L (signature malleability) everywhere', async () => {
    const v = RFC8032_VECTORS[0]!
    const signature = fromHex(v.signature)
    const s = bytesToNumberLE(signature.subarray(32))
    for (const bigS of [s + L, L, 2n ** 256n - 1n]) {
      const malleated = concatBytes(signature.subarray(0, 32), numberToBytesLE(bigS, 32))
      expect(isAcceptableSignature(malleated)).toBe(false)
      expect(await verifyAll(fromHex(v.publicKey), new Uint8Array(0), malleated)).toEqual([false, false, false, false])
    }
    expect(isAcceptableSignature(concatBytes(signature.subarray(0, 32), numberToBytesLE(L - 1n, 32)))).toBe(true)
  })

  it('agrees with OpenSSL on keys with a torsion component (cofactorless equation)', async () => {
    // A' = [a]B + T with T of order 8. An honest-looking signature by the holder
    // of a satisfies the cofactored equation always, but the cofactorless one
    // only when 8 divides k; every backend must land on the same side.
    const seed = fromHex(RFC8032_VECTORS[0]!.secretKey)
    const { scalar } = ed25519.utils.getExtendedPublicKey(seed)
    const torsion = Point.fromBytes(fromHex(SMALL_ORDER_ENCODINGS[4]!))
    const mixed = Point.BASE.multiply(scalar).add(torsion)
    const mixedBytes = mixed.toBytes()
    expect(isAcceptablePublicKey(mixedBytes)).toBe(true)
    const seen = new Set<boolean>()
    for (let i = 0; i < 48; i++) {
      const message = utf8(`torsion ${i}`)
      const r = Point.Fn.create(bytesToNumberLE(sha512(concatBytes(utf8('nonce'), message))))
      const R = Point.BASE.multiply(r).toBytes()
      const k = Point.Fn.create(bytesToNumberLE(sha512(concatBytes(R, mixedBytes, message))))
      const signature = concatBytes(R, numberToBytesLE(Point.Fn.create(r + k * scalar), 32))
      const expected = opensslAlone(mixedBytes, message, signature)
      seen.add(expected)
      expect(await verifyAll(mixedBytes, message, signature)).toEqual([expected, expected, expected, expected])
      // noble's own strict mode is cofactored, hence the custom equation in noble.ts.
      expect(ed25519.verify(signature, message, mixedBytes, { zip215: false })).toBe(true)
    }
    expect(seen).toEqual(new Set([true, false]))
  })

  it('rejects a non-canonical R everywhere', async () => {
    const v = RFC8032_VECTORS[0]!
    const signature = fromHex(v.signature)
    const badR = concatBytes(fromHex('ee' + 'ff'.repeat(30) + '7f'), signature.subarray(32))
    expect(isAcceptableSignature(badR)).toBe(false)
    expect(await verifyAll(fromHex(v.publicKey), new Uint8Array(0), badR)).toEqual([false, false, false, false])
  })
})

describe('KeyCache', () => {
  it('is bounded and evicts the least recently used entry', () => {
    const cache = new KeyCache<number>(2)
    let creations = 0
    const make = () => ++creations
    const a = Uint8Array.of(1)
    const b = Uint8Array.of(2)
    const c = Uint8Array.of(3)
    expect(cache.getOrCreate(a, make)).toBe(1)
    expect(cache.getOrCreate(b, make)).toBe(2)
    expect(cache.getOrCreate(a, make)).toBe(1) // a is now most recent
    expect(cache.getOrCreate(c, make)).toBe(3) // evicts b
    expect(cache.size).toBe(2)
    expect(cache.getOrCreate(a, make)).toBe(1)
    expect(cache.getOrCreate(b, make)).toBe(4)
  })

  it('keys by content, not by array identity', () => {
    const cache = new KeyCache<string>(4)
    expect(cache.getOrCreate(Uint8Array.of(9, 9), () => 'first')).toBe('first')
    expect(cache.getOrCreate(Uint8Array.of(9, 9), () => 'second')).toBe('first')
  })

  it('caches null values too', () => {
    const cache = new KeyCache<null>(4)
    let calls = 0
    cache.getOrCreate(Uint8Array.of(1), () => (calls++, null))
    cache.getOrCreate(Uint8Array.of(1), () => (calls++, null))
    expect(calls).toBe(1)
  })
})
