import 'fake-indexeddb/auto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { isBuiltin } from 'node:module'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { bytesEqual, SteadError } from '@stead/core'
import fc from 'fast-check'
import { deleteDB, openDB } from 'idb'
import type * as Lmdb from 'lmdb'
import { afterEach, describe, expect, it, vi } from 'vitest'
import {
  compareStorageKeys,
  indexedDbStorage,
  isStorageError,
  lmdbStorage,
  MAX_KEY_BYTES,
  memoryStorage,
  StorageError,
  type ClientStorage,
  type StorageKey,
} from '../src/node.ts'
import { openIndexedDbStorage } from '../src/storage/indexeddb.ts'
import { decodeKey, encodeKey, encodedKeyLength } from '../src/storage/keys.ts'

// Lets one test make lmdb's putSync fail part-way through a transaction, the
// only way to see that a batch is rolled back by lmdb itself and not merely
// validated up front. Inactive (Infinity) everywhere else.
const lmdbFault = vi.hoisted(() => ({ putsBeforeFailure: Number.POSITIVE_INFINITY }))
vi.mock('lmdb', async (importOriginal) => {
  const real = await importOriginal<typeof Lmdb>()
  const open = (...args: unknown[]) => {
    const db = (real.open as (...a: unknown[]) => ReturnType<typeof real.open>)(...args)
    const putSync = db.putSync.bind(db) as (...a: unknown[]) => void
    db.putSync = ((...a: unknown[]) => {
      if (lmdbFault.putsBeforeFailure-- <= 0) throw new Error('injected failure: MDB_MAP_FULL: Environment mapsize limit reached')
      return putSync(...a)
    }) as typeof db.putSync
    return db
  }
  return { ...real, open }
})

// ---------------------------------------------------------------- harnesses

/** A fresh place to store things; `open` may be called again after `close` to test durability. */
interface Place {
  open(): Promise<ClientStorage>
}
interface Adapter {
  name: string
  persistent: boolean
  place(): Place
}

const cleanups: Array<() => Promise<void> | void> = []
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

function track(storage: ClientStorage): ClientStorage {
  cleanups.push(() => storage.close())
  return storage
}

let dbCounter = 0
const freshDbName = () => `stead-test-${process.pid}-${++dbCounter}`

function freshDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'stead-lmdb-'))
  cleanups.unshift(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

const adapters: Adapter[] = [
  {
    name: 'memory',
    persistent: false,
    place: () => ({ open: async () => track(memoryStorage()) }),
  },
  {
    name: 'indexeddb',
    persistent: true,
    place: () => {
      const name = freshDbName()
      cleanups.unshift(() => deleteDB(name))
      return { open: async () => track(await indexedDbStorage(name)) }
    },
  },
  {
    name: 'lmdb',
    persistent: true,
    place: () => {
      const dir = freshDir()
      return { open: async () => track(lmdbStorage(dir)) }
    },
  },
]

// ---------------------------------------------------------------- helpers

const bytes = (...b: number[]) => Uint8Array.from(b)
const keysOf = (entries: Array<{ key: StorageKey }>) => entries.map((e) => e.key)

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p
  } catch (err) {
    return err
  }
  throw new Error('expected a rejection')
}

async function expectSteadError(p: Promise<unknown>, reason: SteadError['reason']): Promise<SteadError> {
  const err = await rejection(p)
  expect(err).toBeInstanceOf(SteadError)
  expect((err as SteadError).reason).toBe(reason)
  return err as SteadError
}

// Code units that sit on the encoding's boundaries and on the places where
// UTF-16 order and code point order part ways (surrogates vs U+E000..U+FFFF).
const edgeUnits = ['\u0000', '\u0001', '\u007e', '\u007f', '\u0080', '\u07ff', '\u0800', '\ud7ff', '\ud800', '\udbff', '\udc00', '\udfff', '\ue000', '\uffff']
const anyUnit = fc.oneof(fc.constantFrom(...edgeUnits), fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u)))
/** Any JS string, including lone surrogates and NULs. */
const anyComponent = fc.string({ unit: anyUnit, maxLength: 6 })
const anyKey = fc.array(anyComponent, { minLength: 1, maxLength: 4 })
/** Few distinct components, so that keys collide and prefix each other often. */
const smallComponent = fc.constantFrom('', 'a', 'ab', 'b', 'a\u0000', '\uffff', '\u{10000}', '\ud800')
const smallKey = fc.array(smallComponent, { minLength: 1, maxLength: 3 })
const smallPrefix = fc.array(smallComponent, { maxLength: 3 })
const value = fc.uint8Array({ maxLength: 40 })
/** Mostly arbitrary keys, often equal or prefixes of each other. */
const orderKey = fc.oneof(anyKey, smallKey)

// ---------------------------------------------------------------- key order

describe('key order', () => {
  it('is component-wise JS string order with prefixes first (examples)', () => {
    const sorted: StorageKey[] = [
      [''],
      ['', ''],
      ['\u0000'],
      ['a'],
      ['a', ''],
      ['a', 'b'],
      ['a', 'b', ''],
      ['a\u0000'],
      ['ab'],
      ['b'],
      ['\ud7ff'],
      ['\u{10000}'], // D800 DC00: below U+E000 by code units, above it by code points
      ['\udfff'],
      ['\ue000'],
      ['\uffff'],
    ]
    const shuffled = [...sorted].reverse()
    expect(shuffled.sort(compareStorageKeys)).toEqual(sorted)
  })

  it('is a total order that agrees with IndexedDB.cmp on arrays of strings', () => {
    fc.assert(
      fc.property(orderKey, orderKey, orderKey, (a, b, c) => {
        const ab = compareStorageKeys(a, b)
        expect(Math.sign(ab)).toBe(indexedDB.cmp(a, b))
        expect(compareStorageKeys(b, a)).toBe(ab === 0 ? 0 : -ab)
        expect(compareStorageKeys(a, a)).toBe(0)
        if (ab <= 0 && compareStorageKeys(b, c) <= 0) expect(compareStorageKeys(a, c)).toBeLessThanOrEqual(0)
      }),
      { numRuns: 500 },
    )
  })

  it('LMDB byte encoding: round-trips any key and memcmp order equals the key order', () => {
    const memcmp = (x: Uint8Array, y: Uint8Array) => Math.sign(Buffer.compare(x, y))
    fc.assert(
      fc.property(orderKey, orderKey, (a, b) => {
        const ea = encodeKey(a)
        expect(ea.length).toBe(encodedKeyLength(a))
        expect(decodeKey(ea)).toEqual(a)
        expect(memcmp(ea, encodeKey(b))).toBe(Math.sign(compareStorageKeys(a, b)))
      }),
      { numRuns: 1000 },
    )
    // a prefix with a longer last component is not a key prefix
    expect(memcmp(encodeKey(['a']), encodeKey(['ab']))).toBe(-1)
    expect(Buffer.from(encodeKey(['ab'])).subarray(0, 2)).not.toEqual(Buffer.from(encodeKey(['a'])))
  })

  it('decodeKey rejects bytes encodeKey cannot produce', () => {
    for (const bad of [bytes(), bytes(0x62), bytes(0x80, 0), bytes(0xc1, 0x01, 0), bytes(0xe0, 0x80, 0), bytes(0xf0, 0x80, 0x80, 0x80, 0)]) {
      expect(() => decodeKey(bad)).toThrow(SteadError)
    }
  })
})

// ---------------------------------------------------------------- the contract

describe.each(adapters)('ClientStorage contract: $name', (adapter) => {
  it('round-trips bytes, including empty and large values; a missing key loads as undefined', async () => {
    const s = await adapter.place().open()
    const big = new Uint8Array(256 * 1024).map((_, i) => (i * 31) & 0xff)
    await s.write([
      { key: ['empty'], value: new Uint8Array(0) },
      { key: ['all'], value: Uint8Array.from({ length: 256 }, (_, i) => i) },
      { key: ['big'], value: big },
    ])
    expect(await s.load(['empty'])).toEqual(new Uint8Array(0))
    expect(await s.load(['all'])).toEqual(Uint8Array.from({ length: 256 }, (_, i) => i))
    // bytesEqual, not toEqual: vitest's deep equality takes a second per 256 KiB
    expect(bytesEqual((await s.load(['big'])) as Uint8Array, big)).toBe(true)
    expect(await s.load(['missing'])).toBeUndefined()
    expect(await s.load(['all', 'deeper'])).toBeUndefined()
    // plain Uint8Arrays everywhere (lmdb would hand out Buffers)
    expect(Object.getPrototypeOf(await s.load(['all']))).toBe(Uint8Array.prototype)
    await s.write([])
  })

  it('a random sequence of batches, deletes and removeRanges matches a Map model', async () => {
    type Op = { kind: 'write'; changes: Array<{ key: string[]; value: Uint8Array | undefined }> } | { kind: 'removeRange'; prefix: string[] }
    const op: fc.Arbitrary<Op> = fc.oneof(
      { weight: 5, arbitrary: fc.array(fc.record({ key: smallKey, value: fc.option(value, { nil: undefined }) }), { maxLength: 6 }).map((changes) => ({ kind: 'write' as const, changes })) },
      { weight: 1, arbitrary: smallPrefix.map((prefix) => ({ kind: 'removeRange' as const, prefix })) },
    )
    await fc.assert(
      fc.asyncProperty(fc.array(op, { maxLength: 8 }), fc.array(smallPrefix, { maxLength: 4 }), async (ops, prefixes) => {
        const s = await adapter.place().open()
        const model = new Map<string, { key: string[]; value: Uint8Array }>()
        const view = (prefix: StorageKey) =>
          [...model.values()]
            .filter((e) => e.key.length >= prefix.length && prefix.every((p, i) => e.key[i] === p))
            .sort((a, b) => compareStorageKeys(a.key, b.key))
        for (const o of ops) {
          if (o.kind === 'write') {
            await s.write(o.changes)
            for (const { key, value } of o.changes) {
              if (value === undefined) model.delete(JSON.stringify(key))
              else model.set(JSON.stringify(key), { key, value })
            }
          } else {
            await s.removeRange(o.prefix)
            for (const e of view(o.prefix)) model.delete(JSON.stringify(e.key))
          }
          expect(await s.loadRange([])).toEqual(view([]))
        }
        const allPrefixes = [...prefixes, ...[...model.values()].flatMap((e) => e.key.map((_, i) => e.key.slice(0, i + 1)))]
        for (const prefix of allPrefixes) expect(await s.loadRange(prefix)).toEqual(view(prefix))
        for (const o of ops) {
          if (o.kind !== 'write') continue
          for (const { key } of o.changes) expect(await s.load(key)).toEqual(model.get(JSON.stringify(key))?.value)
        }
        await s.close()
      }),
      { numRuns: adapter.name === 'lmdb' ? 25 : 40 },
    )
  })

  it('stores keys made of any strings (lone surrogates, NULs) and lists them in key order', async () => {
    await fc.assert(
      fc.asyncProperty(fc.uniqueArray(anyKey, { maxLength: 12, selector: (k) => JSON.stringify(k) }), async (keys) => {
        const s = await adapter.place().open()
        await s.write(keys.map((key, i) => ({ key, value: bytes(i) })))
        const listed = await s.loadRange([])
        expect(keysOf(listed)).toEqual([...keys].sort(compareStorageKeys))
        for (const { key, value } of listed) expect(value).toEqual(bytes(keys.findIndex((k) => JSON.stringify(k) === JSON.stringify(key))))
        await s.close()
      }),
      { numRuns: adapter.name === 'lmdb' ? 15 : 30 },
    )
  })

  it('prefixes match whole components: ["a"] never matches ["ab"]', async () => {
    const s = await adapter.place().open()
    const all: StorageKey[] = [['a'], ['a', ''], ['a', 'x'], ['a', 'x', 'y'], ['ab'], ['ab', 'y'], ['b'], ['a\u0000']]
    await s.write(all.map((key, i) => ({ key, value: bytes(i) })))
    expect(keysOf(await s.loadRange(['a']))).toEqual([['a'], ['a', ''], ['a', 'x'], ['a', 'x', 'y']])
    expect(keysOf(await s.loadRange(['ab']))).toEqual([['ab'], ['ab', 'y']])
    expect(keysOf(await s.loadRange(['a', 'x']))).toEqual([['a', 'x'], ['a', 'x', 'y']])
    expect(keysOf(await s.loadRange(['a', '']))).toEqual([['a', '']])
    expect(keysOf(await s.loadRange(['a', 'x', 'y', 'z']))).toEqual([])
    expect(keysOf(await s.loadRange(['']))).toEqual([])
    expect(keysOf(await s.loadRange([]))).toEqual([...all].sort(compareStorageKeys))
  })

  it('removeRange deletes exactly the keys under the prefix, and [] deletes everything', async () => {
    const s = await adapter.place().open()
    await s.write([['a'], ['a', 'x'], ['ab'], ['ab', 'y'], ['b']].map((key) => ({ key, value: bytes(1) })))
    await s.removeRange(['a'])
    expect(keysOf(await s.loadRange([]))).toEqual([['ab'], ['ab', 'y'], ['b']])
    await s.removeRange(['zzz'])
    expect(keysOf(await s.loadRange([]))).toEqual([['ab'], ['ab', 'y'], ['b']])
    await s.removeRange([])
    expect(await s.loadRange([])).toEqual([])
  })

  it('applies a batch in order: the last change to a key wins; deleting a missing key is fine', async () => {
    const s = await adapter.place().open()
    await s.write([
      { key: ['k'], value: bytes(1) },
      { key: ['k'], value: undefined },
      { key: ['k'], value: bytes(3) },
      { key: ['gone'], value: bytes(4) },
      { key: ['gone'], value: undefined },
      { key: ['never'], value: undefined },
    ])
    expect(await s.loadRange([])).toEqual([{ key: ['k'], value: bytes(3) }])
  })

  it('a failed batch writes nothing: non-bytes value, bad key, oversized key', async () => {
    const s = await adapter.place().open()
    await s.write([
      { key: ['keep'], value: bytes(1) },
      { key: ['doomed'], value: bytes(2) },
    ])
    const before = await s.loadRange([])
    const good = [
      { key: ['keep'], value: bytes(9) },
      { key: ['doomed'], value: undefined },
      { key: ['new'], value: bytes(3) },
    ]
    const bad = (change: unknown) => s.write([...good, change] as never)
    await expectSteadError(bad({ key: ['x'], value: 'not bytes' }), 'malformed')
    await expectSteadError(bad({ key: ['x'], value: [1, 2, 3] }), 'malformed')
    await expectSteadError(bad({ key: ['x'], value: new ArrayBuffer(2) }), 'malformed')
    await expectSteadError(bad({ key: ['x'], value: null }), 'malformed')
    await expectSteadError(bad({ key: [], value: bytes(1) }), 'malformed')
    await expectSteadError(bad({ key: ['x', 7], value: bytes(1) }), 'malformed')
    await expectSteadError(bad({ key: 'x', value: bytes(1) }), 'malformed')
    await expectSteadError(bad(null), 'malformed')
    await expectSteadError(bad({ key: ['x'.repeat(MAX_KEY_BYTES)], value: bytes(1) }), 'too-large')
    await expectSteadError(s.write('nope' as never), 'malformed')
    expect(await s.loadRange([])).toEqual(before)
  })

  it('accepts keys up to MAX_KEY_BYTES encoded bytes and refuses longer ones everywhere', async () => {
    const s = await adapter.place().open()
    // 1 terminator + 3 bytes per U+0800..U+FFFF unit + 1 per ASCII char
    const longest = ['\u0800'.repeat(600) + 'x'.repeat(MAX_KEY_BYTES - 1 - 1800)]
    expect(encodedKeyLength(longest)).toBe(MAX_KEY_BYTES)
    await s.write([{ key: longest, value: bytes(1) }])
    expect(await s.load(longest)).toEqual(bytes(1))
    const tooLong = [longest[0] + 'x']
    await expectSteadError(s.write([{ key: tooLong, value: bytes(1) }]), 'too-large')
    await expectSteadError(s.load(tooLong), 'too-large')
    await expectSteadError(s.load([]), 'malformed')
    await expectSteadError(s.loadRange(['a', 1] as never), 'malformed')
    await expectSteadError(s.removeRange('a' as never), 'malformed')
  })

  it('copies bytes in and out: callers cannot change what is stored', async () => {
    const s = await adapter.place().open()
    const input = bytes(1, 2, 3)
    // a view into a larger buffer: only the view's bytes are stored
    const backing = bytes(9, 9, 4, 5, 9)
    await s.write([
      { key: ['in'], value: input },
      { key: ['view'], value: backing.subarray(2, 4) },
      { key: ['buf'], value: Buffer.from([7, 7]) },
    ])
    input[0] = 100
    backing[2] = 100
    const loaded = (await s.load(['in'])) as Uint8Array
    expect(loaded).toEqual(bytes(1, 2, 3))
    expect(await s.load(['view'])).toEqual(bytes(4, 5))
    expect(((await s.load(['view'])) as Uint8Array).buffer.byteLength).toBe(2)
    expect(await s.load(['buf'])).toEqual(bytes(7, 7))
    loaded[1] = 100
    expect(await s.load(['in'])).toEqual(bytes(1, 2, 3))
    const [first] = await s.loadRange(['in'])
    first!.value[2] = 100
    ;(first!.key as string[])[0] = 'changed'
    expect(await s.loadRange(['in'])).toEqual([{ key: ['in'], value: bytes(1, 2, 3) }])
    // a key array mutated after write does not move the entry
    const key = ['moving']
    await s.write([{ key, value: bytes(5) }])
    key[0] = 'moved'
    expect(await s.load(['moving'])).toEqual(bytes(5))
    expect(await s.load(['moved'])).toBeUndefined()
  })

  it('close is idempotent, lets started writes finish, then every call fails with StorageError closed', async () => {
    const place = adapter.place()
    const s = await place.open()
    const writing = s.write([{ key: ['k'], value: bytes(1) }])
    const closing = s.close()
    await writing
    await closing
    await s.close()
    for (const call of [s.load(['k']), s.loadRange([]), s.write([{ key: ['k'], value: bytes(2) }]), s.removeRange([])]) {
      const err = await rejection(call)
      expect(err).toBeInstanceOf(StorageError)
      expect(isStorageError(err, 'closed')).toBe(true)
    }
    if (adapter.persistent) expect(await (await place.open()).load(['k'])).toEqual(bytes(1))
  })

  // only adapters that persist: memory has nothing to reopen
  const persistentIt = adapter.persistent ? it : () => undefined
  persistentIt('is durable across close and reopen, including deletes and removeRange', async () => {
    const place = adapter.place()
    const s1 = await place.open()
    await s1.write([
      { key: ['envelope', 'bank', '00ff'], value: bytes(1, 2) },
      { key: ['envelope', 'bank', '01aa'], value: bytes(3) },
      { key: ['envelope', 'other', '02'], value: bytes(4) },
      { key: ['identity'], value: bytes(5, 6, 7) },
      { key: ['snapshot', 'bank'], value: bytes(8) },
    ])
    await s1.write([{ key: ['snapshot', 'bank'], value: undefined }])
    await s1.removeRange(['envelope', 'other'])
    const expected = await s1.loadRange([])
    await s1.close()
    const s2 = await place.open()
    expect(await s2.loadRange([])).toEqual(expected)
    expect(keysOf(expected)).toEqual([['envelope', 'bank', '00ff'], ['envelope', 'bank', '01aa'], ['identity']])
    await s2.write([{ key: ['identity'], value: bytes(9) }])
    await s2.close()
    const s3 = await place.open()
    expect(await s3.load(['identity'])).toEqual(bytes(9))
  })
})

// ---------------------------------------------------------------- IndexedDB failures

describe('indexedDbStorage failures are typed', () => {
  it('no IndexedDB: StorageError unavailable with reason unsupported', async () => {
    const saved = Object.getOwnPropertyDescriptor(globalThis, 'indexedDB')!
    delete (globalThis as { indexedDB?: unknown }).indexedDB
    try {
      const err = await expectSteadError(indexedDbStorage(freshDbName()), 'unsupported')
      expect(isStorageError(err, 'unavailable')).toBe(true)
    } finally {
      Object.defineProperty(globalThis, 'indexedDB', saved)
    }
  })

  it('a quota error part-way through a batch aborts the whole transaction', async () => {
    const name = freshDbName()
    cleanups.unshift(() => deleteDB(name))
    const s = track(await indexedDbStorage(name))
    await s.write([{ key: ['keep'], value: bytes(1) }])
    const put = IDBObjectStore.prototype.put
    let calls = 0
    IDBObjectStore.prototype.put = function (this: IDBObjectStore, ...args: Parameters<IDBObjectStore['put']>) {
      if (++calls === 3) throw new DOMException('The quota has been exceeded.', 'QuotaExceededError')
      return put.apply(this, args)
    }
    try {
      const err = await expectSteadError(
        s.write([
          { key: ['keep'], value: bytes(2) },
          { key: ['a'], value: bytes(3) },
          { key: ['b'], value: bytes(4) },
        ]),
        'too-large',
      )
      expect(isStorageError(err, 'quota')).toBe(true)
      expect(err.cause).toBeInstanceOf(DOMException)
    } finally {
      IDBObjectStore.prototype.put = put
    }
    expect(await s.loadRange([])).toEqual([{ key: ['keep'], value: bytes(1) }])
    await s.write([{ key: ['after'], value: bytes(5) }])
    expect(await s.load(['after'])).toEqual(bytes(5))
  })

  it('versionchange: another tab deleting the database is not blocked; later calls fail with closed', async () => {
    const name = freshDbName()
    const s = track(await indexedDbStorage(name))
    await s.write([{ key: ['k'], value: bytes(1) }])
    let blocked = false
    await deleteDB(name, { blocked: () => (blocked = true) })
    expect(blocked).toBe(false)
    const err = await rejection(s.load(['k']))
    expect(isStorageError(err, 'closed')).toBe(true)
    expect(String((err as Error).message)).toMatch(/upgrades or deletes/)
  })

  it('blocked: an upgrade held up by another connection fails with StorageError blocked, never hangs', async () => {
    const name = freshDbName()
    cleanups.unshift(() => deleteDB(name))
    // an old tab that ignores versionchange
    const old = await openDB(name, 1, { upgrade: (db) => void db.createObjectStore('kv') })
    const err = await expectSteadError(openIndexedDbStorage(name, 2), 'conflict')
    expect(isStorageError(err, 'blocked')).toBe(true)
    old.close()
    // the upgrade then completes and its connection is dropped, so a delete is not blocked
    await vi.waitFor(async () => expect((await indexedDB.databases()).find((d) => d.name === name)?.version).toBe(2))
    let blocked = false
    await deleteDB(name, { blocked: () => (blocked = true) })
    expect(blocked).toBe(false)
  })

  it('a newer schema on disk: StorageError unavailable, not a bare DOMException', async () => {
    const name = freshDbName()
    cleanups.unshift(() => deleteDB(name))
    ;(await openDB(name, 5)).close()
    const err = await expectSteadError(indexedDbStorage(name), 'unsupported')
    expect(isStorageError(err, 'unavailable')).toBe(true)
    expect(err.message).toMatch(/newer version/)
  })

  it('a database of that name made by someone else: StorageError unavailable', async () => {
    const name = freshDbName()
    cleanups.unshift(() => deleteDB(name))
    ;(await openDB(name, 1, { upgrade: (db) => void db.createObjectStore('other') })).close()
    const err = await rejection(indexedDbStorage(name))
    expect(isStorageError(err, 'unavailable')).toBe(true)
  })
})

// ---------------------------------------------------------------- LMDB failures

describe('lmdbStorage failures are typed', () => {
  it('a failure inside the transaction rolls the whole batch back', async () => {
    const s = track(lmdbStorage(freshDir()))
    await s.write([{ key: ['keep'], value: bytes(1) }])
    lmdbFault.putsBeforeFailure = 2
    try {
      const err = await rejection(
        s.write([
          { key: ['keep'], value: bytes(2) },
          { key: ['a'], value: bytes(3) },
          { key: ['b'], value: bytes(4) },
        ]),
      )
      expect(isStorageError(err, 'quota')).toBe(true)
    } finally {
      lmdbFault.putsBeforeFailure = Number.POSITIVE_INFINITY
    }
    expect(await s.loadRange([])).toEqual([{ key: ['keep'], value: bytes(1) }])
    await s.write([{ key: ['after'], value: bytes(5) }])
    expect(await s.load(['after'])).toEqual(bytes(5))
  })

  it('a path LMDB cannot open: StorageError unavailable', () => {
    const file = join(freshDir(), 'not-a-dir')
    writeFileSync(file, 'x')
    let err: unknown
    try {
      track(lmdbStorage(join(file, 'db')))
    } catch (e) {
      err = e
    }
    expect(isStorageError(err, 'unavailable')).toBe(true)
  })
})

// ---------------------------------------------------------------- entry points

describe('entry points', () => {
  /** Bare specifiers reachable through relative imports from `entry`. */
  function externalImports(entry: string): Set<string> {
    const seen = new Set<string>()
    const external = new Set<string>()
    const visit = (file: string) => {
      if (seen.has(file)) return
      seen.add(file)
      const source = readFileSync(file, 'utf8')
      // Type-only imports are erased: they load nothing.
      for (const [, spec] of source.matchAll(/^\s*(?:import|export)\b(?!\s+type\b)[^'"]*?from\s+'([^']+)'/gm)) {
        if (spec!.startsWith('.')) visit(resolve(dirname(file), spec!))
        else external.add(spec!)
      }
    }
    visit(entry)
    return external
  }
  const src = join(dirname(fileURLToPath(import.meta.url)), '..', 'src')

  it('the main entry is isomorphic: no Node built-ins, no lmdb', () => {
    const external = [...externalImports(join(src, 'index.ts'))]
    expect(external.filter((spec) => isBuiltin(spec) || spec === 'lmdb')).toEqual([])
    expect(external.sort()).toEqual(['@stead/core', 'idb'])
  })

  it('the node entry adds lmdbStorage on top of everything in the main entry; libp2p comes only with the peers entry', async () => {
    const main = await import('../src/index.ts')
    const node = await import('../src/node.ts')
    expect(Object.keys(node).sort()).toEqual([...Object.keys(main), 'lmdbStorage'].sort())
    // Apps without peer sync need none of libp2p.
    for (const entry of ['index.ts', 'node.ts']) expect([...externalImports(join(src, entry))].filter((spec) => /libp2p|multiaddr/.test(spec))).toEqual([])
    const peers = await import('../src/peers-entry.ts')
    const peersNode = await import('../src/peers-entry.node.ts')
    expect(Object.keys(peers).sort()).toEqual(Object.keys(peersNode).sort())
  })
})
