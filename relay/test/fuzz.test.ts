/**
 * Property-based fuzzing of the client protocol against live relay
 * processes (issue 11): four `stead-relay start` processes (f = 1) get
 * random frames, random msgpack values, valid client messages mutated at
 * the byte and the structure level, and envelopes with mutated inner fields
 * (re-signed or not), before and after hello. Every frame must be answered
 * with a normal reply or a typed `error` (or, where the protocol says so, a
 * typed error and then a documented close code); after the run every relay
 * is alive and healthy, its log holds no fatal error or uncaught exception,
 * and a valid update still commits with the same stable hash on all four.
 *
 * Each fuzzed frame is followed by a `ping` with a unique n as a barrier: the
 * relay handles a connection's frames in order, so once its pong arrives,
 * everything it sent for the frame has arrived too. Before hello the ping
 * itself is answered with `unauthenticated`, so there the barrier is the
 * second answer.
 *
 *   npx vitest run relay/test/fuzz.test.ts                          CI: 3,000 frames
 *   STEAD_FUZZ_RUNS=100000 npx vitest run relay/test/fuzz.test.ts   a longer run
 *   STEAD_FUZZ_SEED=<seed> [STEAD_FUZZ_PATH=<path>]                 replay a failure (the failure message gives both)
 *   STEAD_FUZZ_SHRINK=1                                             shrink a failure to a smaller frame (slow when
 *                                                                   the frame kills a relay: each step restarts it)
 */
import {
  ERROR_REASONS,
  authBytes,
  clockInit,
  decode,
  decodeClientMessage,
  decodeRelayMessage,
  encode,
  encodeClientMessage,
  encodeEnvelope,
  sealEnvelope,
  type ClientMessage,
  type Declaration,
  type EnvelopeDraft,
  type ObjectUpdate,
  type RelayMessage,
  type SafeUpdate,
} from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync } from '@stead/core/node'
import fc from 'fast-check'
import WebSocket from 'ws'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { TestClient } from './helpers/client.ts'
import { TestCluster, sleep, until, type TestRelay } from './helpers/cluster.ts'

const RUNS = Number(process.env.STEAD_FUZZ_RUNS ?? 3000)
const SEED = process.env.STEAD_FUZZ_SEED === undefined ? undefined : Number(process.env.STEAD_FUZZ_SEED)
const SHRINK = process.env.STEAD_FUZZ_SHRINK === '1'

/** Every ErrorReason of @stead/core. */
const REASON_SET: ReadonlySet<string> = new Set<string>(ERROR_REASONS)

/**
 * Close codes a relay ends a session with, always after a typed error: 4000 idle, 4001 bad hello
 * signature, 4003 no hello in time, 4008 slow consumer, 1013 too many sessions.
 */
const CLOSE_CODES: ReadonlySet<number> = new Set([4000, 4001, 4003, 4008, 1013])
/** The relay's default frame limit (relay/src/api/server.ts): ws refuses a longer frame at its header. */
const MAX_FRAME = 2 * 1024 * 1024
/** The frame limit before hello (relay/src/api/server.ts PRE_AUTH_FRAME_BYTES). */
const PRE_AUTH_FRAME = 64 * 1024
/**
 * A frame over the limit is refused at its header: the session closes with 1009 (message too big),
 * or 1006 when the close frame is lost to the reset the rest of the frame causes, before any of it
 * is buffered, so no typed error can come first.
 */
const HEADER_CLOSE_CODES: ReadonlySet<number> = new Set([1009, 1006])
/** No answer within this long is silence. */
const ANSWER_TIMEOUT_MS = 10_000
/** Per connection, below the relay's per-connection rate limit; `rate-limited` answers are accepted all the same. */
const PACE_PER_SECOND = 300
const PACE_BURST = 300
/** Barrier pings use n from here on; fuzzed pings stay far below. */
const BARRIER_BASE = 8_000_000_000_000_000
const FUZZ_SPACES = ['fuzz-a', 'fuzz-b']
const AFTER_SPACE = 'fuzz-after'

const fuzzer = identityOf(new Uint8Array(32).fill(9))
const stranger = identityOf(new Uint8Array(32).fill(10))

function identityOf(secretKey: Uint8Array): { secretKey: Uint8Array; publicKey: Uint8Array } {
  return { secretKey, publicKey: publicKeyOfSync(secretKey) }
}

function hex(bytes: Uint8Array, max = 256): string {
  const h = Buffer.from(bytes.subarray(0, max)).toString('hex')
  return bytes.length > max ? `${h}… (${bytes.length} bytes)` : h
}

// ---------------------------------------------------------------- a bare client

type Got = { readonly m: RelayMessage; readonly raw: Uint8Array } | { readonly bad: string; readonly raw: Uint8Array }

/** One WebSocket session that records every frame the relay sends, decoded with the protocol's own decoder. */
class Conn {
  readonly got: Got[] = []
  closed: { code: number; reason: string } | null = null
  authed = false
  challenge: { nonce: Uint8Array; relayKey: Uint8Array } | null = null
  readonly openedAt = Date.now()
  private readonly ws: WebSocket
  private waiters: Array<() => void> = []
  private tokens = PACE_BURST
  private lastRefill = Date.now()

  readonly relay: number
  private constructor(relay: number, api: string) {
    this.relay = relay
    this.ws = new WebSocket(`ws://${api}/v1/ws`)
    this.ws.binaryType = 'nodebuffer'
    this.ws.on('message', (data: Buffer, isBinary: boolean) => {
      const raw = new Uint8Array(data)
      try {
        if (!isBinary) throw new Error('a text frame')
        const m = decodeRelayMessage(raw)
        if (m.type === 'challenge') this.challenge = { nonce: m.nonce, relayKey: m.relayKey }
        if (m.type === 'welcome') this.authed = true
        this.got.push({ m, raw })
      } catch (err) {
        this.got.push({ bad: (err as Error).message, raw })
      }
      this.wake()
    })
    this.ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString() }
      this.wake()
    })
    this.ws.on('error', () => this.wake())
  }

  /** Connects, waits for the challenge and, with an identity, says hello. */
  static async open(relay: number, api: string, identity?: { secretKey: Uint8Array; publicKey: Uint8Array }): Promise<Conn> {
    const c = new Conn(relay, api)
    if (!(await c.until(() => c.challenge !== null || c.closed !== null, ANSWER_TIMEOUT_MS)) || !c.challenge) {
      c.close()
      throw new Error(`no challenge from relay ${relay}${c.closed ? ` (closed ${c.closed.code} ${c.closed.reason})` : ''}`)
    }
    if (identity) {
      await c.send(c.hello(identity))
      if (!(await c.until(() => c.authed || c.closed !== null, ANSWER_TIMEOUT_MS)) || !c.authed) {
        c.close()
        throw new Error(`relay ${relay} did not welcome a valid hello`)
      }
    }
    return c
  }

  hello(identity: { secretKey: Uint8Array; publicKey: Uint8Array }): Uint8Array {
    const ch = this.challenge as { nonce: Uint8Array; relayKey: Uint8Array }
    return encodeClientMessage({ type: 'hello', publicKey: identity.publicKey, sig: signSync(identity.secretKey, authBytes(ch.nonce, ch.relayKey)) })
  }

  async send(frame: Uint8Array | string): Promise<void> {
    for (;;) {
      const now = Date.now()
      this.tokens = Math.min(PACE_BURST, this.tokens + ((now - this.lastRefill) / 1000) * PACE_PER_SECOND)
      this.lastRefill = now
      if (this.tokens >= 1) break
      await sleep(Math.ceil(((1 - this.tokens) * 1000) / PACE_PER_SECOND))
    }
    this.tokens -= 1
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(frame)
  }

  /** Resolves true once `done()` holds, false after `timeoutMs`. */
  async until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs
    while (!done()) {
      if (Date.now() > deadline) return false
      await new Promise<void>((r) => {
        this.waiters.push(r)
        setTimeout(r, 100)
      })
    }
    return true
  }

  close(): void {
    this.ws.close()
  }

  private wake(): void {
    const ws = this.waiters
    this.waiters = []
    for (const w of ws) w()
  }
}

// ---------------------------------------------------------------- generators

type Bytes = Uint8Array
type Identity = { secretKey: Uint8Array; publicKey: Uint8Array }

/** A mutation of encoded bytes; positions are taken modulo the length. */
type ByteMut =
  | { t: 'flip'; pos: number; bit: number }
  | { t: 'set'; pos: number; value: number }
  | { t: 'truncate'; pos: number }
  | { t: 'extend'; bytes: Bytes }
  | { t: 'insert'; pos: number; bytes: Bytes }
  | { t: 'delete'; pos: number; count: number }
  | { t: 'header'; pos: number; header: readonly number[] }

/** A mutation of a decoded array (a message or an envelope payload); paths descend modulo each level's length. */
type StructMut =
  | { t: 'replace'; path: number[]; value: unknown }
  | { t: 'swap'; i: number; j: number }
  | { t: 'remove'; i: number }
  | { t: 'append'; value: unknown }
  | { t: 'wrap'; path: number[]; depth: number; asMap: boolean }
  | { t: 'retype'; path: number[]; to: 'string' | 'number' | 'bytes' | 'boolean' | 'null' | 'array' | 'map' | 'float' | 'negative' }

interface OpSpec {
  readonly decl: Declaration
  readonly op: unknown
  readonly safe: boolean
}
interface EnvSpec {
  readonly secret: Bytes
  readonly space: string
  readonly seq: number
  readonly ops: readonly OpSpec[]
  readonly atomic: boolean
}

type BaseMessage =
  | { type: 'hello'; who: 'fuzzer' | 'stranger' }
  | { type: 'subscribe'; space: string; fromIndex: number }
  | { type: 'unsubscribe'; space: string }
  | { type: 'submit'; id: number; env: EnvSpec }
  | { type: 'ping'; n: number }
  | { type: 'announce'; space: string; addrs: string[] }
  | { type: 'pace'; space: string; fromIndex: number; freshnessMs: number; mode?: 'ops' | 'state' | 'adaptive' }
  | { type: 'applied'; space: string; index: number }
  | { type: 'presence'; space: string; seq: number; ttlMs: number; state: unknown; who: 'fuzzer' | 'stranger'; leave: boolean }

type Recipe =
  | { t: 'bytes'; bytes: Bytes }
  | { t: 'text'; text: string }
  | { t: 'value'; value: unknown }
  | { t: 'nested'; depth: number; open: readonly number[]; close: readonly number[] }
  | { t: 'header'; header: readonly number[]; tail: Bytes; prefix: readonly unknown[] }
  | { t: 'ext'; type: number; format: number; data: Bytes; prefix: readonly unknown[]; suffix: Bytes }
  /** `offset` is the raw signed offset, or with `aim` the start of value number `offset` (modulo) before the extension. */
  | { t: 'bundle'; strings: readonly string[]; aim: boolean; offset: number; suffix: Bytes }
  | { t: 'oversize'; size: number; submit: boolean }
  | { t: 'message'; base: BaseMessage; struct: StructMut[]; bytes: ByteMut[] }
  | { t: 'envelope'; env: EnvSpec; id: number; payload: PayloadMut[]; seal: 'resign' | 'keep' | 'random' | 'short' | 'other-key'; pair: StructMut[]; bytes: ByteMut[] }

type PayloadMut = StructMut | { t: 'field'; index: number; value: unknown }

/** Headers that declare far more than the frame holds. */
const HUGE_HEADERS: readonly (readonly number[])[] = [
  [0xdb, 0xff, 0xff, 0xff, 0xff], // str32
  [0xc6, 0xff, 0xff, 0xff, 0xff], // bin32
  [0xdd, 0xff, 0xff, 0xff, 0xff], // array32
  [0xdf, 0xff, 0xff, 0xff, 0xff], // map32
  [0xdd, 0x7f, 0xff, 0xff, 0xff],
  [0xdf, 0x00, 0x10, 0x00, 0x00],
  [0xc9, 0xff, 0xff, 0xff, 0xff, 0x01], // ext32
  [0xc9, 0x7f, 0xff, 0xff, 0xff, 0x42],
  [0xda, 0xff, 0xff], // str16
  [0xc5, 0xff, 0xff], // bin16
  [0xdc, 0xff, 0xff], // array16
  [0xde, 0xff, 0xff], // map16
  [0xd9, 0xff], // str8
  [0xc4, 0xff], // bin8
]

/** msgpack extension types msgpackr's decoder acts on (undefined, bigint, error, structured clone id and pointer, set, typed array, regexp, bundled strings, date), and a few it does not know. */
const EXT_TYPES = [0x00, 0x42, 0x65, 0x69, 0x70, 0x73, 0x74, 0x78, 0x62, 0xff, 0x01, 0x7f, 0x80, 0xfe]

const giantString = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 129, max: 5000 }) },
  { weight: 1, arbitrary: fc.constantFrom(64 * 1024, 1024 * 1024 + 1, 1536 * 1024) },
).map((n) => 'x'.repeat(n))

const deepValue = fc.tuple(fc.integer({ min: 17, max: 2000 }), fc.boolean()).map(([depth, asMap]) => {
  let v: unknown = 1
  for (let i = 0; i < depth; i++) v = asMap ? { k: v } : [v]
  return v
})

const junk: fc.Arbitrary<unknown> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.anything({
      maxDepth: 3,
      maxKeys: 5,
      withBigInt: true,
      withBoxedValues: true,
      withDate: true,
      withMap: true,
      withNullPrototype: true,
      withSet: true,
      withSparseArray: true,
      withTypedArray: true,
      stringUnit: 'binary',
    }),
  },
  {
    weight: 4,
    arbitrary: fc.constantFrom<unknown>(0, -1, 1, 1.5, -0, NaN, Infinity, -Infinity, 2 ** 53, 2 ** 53 - 1, 2 ** 64, -(2 ** 63), Number.MAX_VALUE, '', 'x', null, true, false, undefined, [], {}, [[]], new Uint8Array(0)),
  },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 100 }) },
  { weight: 1, arbitrary: fc.integer({ min: 31, max: 65 }).chain((n) => fc.uint8Array({ minLength: n, maxLength: n })) },
  { weight: 1, arbitrary: giantString },
  { weight: 1, arbitrary: deepValue },
  { weight: 1, arbitrary: fc.integer({ min: 100, max: 20_000 }).map((n) => new Array<number>(n).fill(1)) },
)

const path = fc.array(fc.nat(), { maxLength: 5 })
const structMut: fc.Arbitrary<StructMut> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant('replace' as const), path, value: junk }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('swap' as const), i: fc.nat(), j: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('remove' as const), i: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('append' as const), value: junk }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('wrap' as const), path, depth: fc.oneof(fc.integer({ min: 1, max: 3 }), fc.integer({ min: 100, max: 3000 })), asMap: fc.boolean() }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('retype' as const),
      path,
      to: fc.constantFrom('string' as const, 'number' as const, 'bytes' as const, 'boolean' as const, 'null' as const, 'array' as const, 'map' as const, 'float' as const, 'negative' as const),
    }),
  },
)

const byteMut: fc.Arbitrary<ByteMut> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ t: fc.constant('flip' as const), pos: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('set' as const), pos: fc.nat(), value: fc.oneof(fc.constantFrom(0x00, 0xc0, 0xc1, 0xff, 0x7f, 0x80, 0x90, 0xa0, 0xdd, 0xdf, 0xc9), fc.integer({ min: 0, max: 255 })) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('truncate' as const), pos: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('extend' as const), bytes: fc.uint8Array({ minLength: 1, maxLength: 64 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('insert' as const), pos: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('delete' as const), pos: fc.nat(), count: fc.integer({ min: 1, max: 32 }) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('header' as const), pos: fc.nat(), header: fc.constantFrom(...HUGE_HEADERS) }) },
)

const spaceArb = fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...FUZZ_SPACES) }, { weight: 1, arbitrary: fc.string({ minLength: 1, maxLength: 128 }) })
const idArb = fc.oneof(fc.nat(), fc.constantFrom(0, 2 ** 32, Number.MAX_SAFE_INTEGER))

const counterDecl = fc.oneof(
  fc.constant<Declaration>({ type: 'counter', bounds: {} }),
  fc.constant<Declaration>({ type: 'counter', bounds: { min: 0 } }),
  fc.constant<Declaration>({ type: 'counter', bounds: { min: -10, max: 10 } }),
)
const opSpec: fc.Arbitrary<OpSpec> = fc.oneof(
  fc.record({ decl: counterDecl, op: fc.integer({ min: -1000, max: 1000 }).filter((n) => n !== 0), safe: fc.boolean() }),
  fc.record({ decl: fc.constant<Declaration>({ type: 'set', bounds: { maxSize: 3 } }), op: fc.oneof(fc.string({ maxLength: 20 }), fc.integer()).map((e) => ['a', e]), safe: fc.boolean() }),
  fc.record({ decl: fc.constant<Declaration>({ type: 'register' }), op: fc.tuple(fc.oneof(fc.string({ maxLength: 20 }), fc.integer(), fc.constant(null)), fc.nat()).map(([v, t]) => ['s', v, t]), safe: fc.boolean() }),
  fc.record({
    decl: fc.constant<Declaration>({ type: 'bounded-counter', params: { min: 0, initial: 100 } }),
    op: fc.tuple(fc.constantFrom('i', 'd', 'c'), fc.integer({ min: 1, max: 200 })),
    safe: fc.constant(true),
  }),
)
/** A valid envelope: a fresh author (so seq 1 commits), or seq 2-3 with nothing before it (parked as a gap). */
const envSpec: fc.Arbitrary<EnvSpec> = fc.record({
  secret: fc.uint8Array({ minLength: 32, maxLength: 32 }),
  space: spaceArb,
  seq: fc.oneof({ weight: 5, arbitrary: fc.constant(1) }, { weight: 1, arbitrary: fc.integer({ min: 2, max: 3 }) }),
  ops: fc.array(opSpec, { minLength: 1, maxLength: 3 }),
  atomic: fc.boolean(),
})

const baseMessage: fc.Arbitrary<BaseMessage> = fc.oneof(
  fc.record({ type: fc.constant('hello' as const), who: fc.constantFrom('fuzzer' as const, 'stranger' as const) }),
  fc.record({ type: fc.constant('subscribe' as const), space: spaceArb, fromIndex: fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)) }),
  fc.record({ type: fc.constant('unsubscribe' as const), space: spaceArb }),
  fc.record(
    {
      type: fc.constant('pace' as const),
      space: spaceArb,
      fromIndex: fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)),
      // Mostly bounds a relay takes, some it refuses.
      freshnessMs: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(50, 300, 3_600_000) }, { weight: 1, arbitrary: fc.nat() }),
      mode: fc.constantFrom('ops' as const, 'state' as const, 'adaptive' as const),
    },
    { requiredKeys: ['type', 'space', 'fromIndex', 'freshnessMs'] },
  ),
  fc.record({ type: fc.constant('applied' as const), space: spaceArb, index: fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)) }),
  fc.record({ type: fc.constant('submit' as const), id: idArb, env: envSpec }),
  fc.record({ type: fc.constant('ping' as const), n: fc.nat() }),
  fc.record({ type: fc.constant('announce' as const), space: spaceArb, addrs: fc.array(fc.oneof(fc.constant('/ip4/127.0.0.1/tcp/1/p2p/12D3KooWfuzz'), fc.string({ maxLength: 600 })), { maxLength: 10 }) }),
  fc.record({
    type: fc.constant('presence' as const),
    space: spaceArb,
    seq: fc.oneof(fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)),
    ttlMs: fc.oneof(fc.constant(30_000), fc.nat()),
    state: fc.oneof({ weight: 3, arbitrary: fc.constant({ name: 'fuzz', cursor: 3 }) }, { weight: 1, arbitrary: fc.constant(null) }, { weight: 2, arbitrary: junk }),
    who: fc.constantFrom('fuzzer' as const, 'stranger' as const),
    leave: fc.boolean(),
  }),
)

/** Replacements aimed at one field of an envelope payload: [tag, space, author, seq, base, clock, deps, updates, safe]. */
const payloadField: fc.Arbitrary<{ t: 'field'; index: number; value: unknown }> = fc.oneof(
  fc.record({ t: fc.constant('field' as const), index: fc.constant(0), value: fc.oneof(fc.constantFrom('stead/env/v3', 'stead/env/v2 ', 'stead/env/v1', ''), junk) }),
  fc.record({ t: fc.constant('field' as const), index: fc.constant(1), value: fc.oneof(fc.constantFrom('', 'x'.repeat(129), '\u0000', '\ud800'), giantString, junk) }),
  fc.record({ t: fc.constant('field' as const), index: fc.constant(2), value: fc.oneof(fc.constant(stranger.publicKey), fc.uint8Array({ minLength: 31, maxLength: 33 }), junk) }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(3),
    value: fc.oneof(fc.constantFrom<unknown>(0, -1, 1.5, 2 ** 53, 2 ** 53 - 1, 2 ** 64, NaN, Infinity, '1', null, [1]), fc.integer({ min: 2, max: 1_000_000 }), junk),
  }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(4),
    value: fc.oneof(fc.constantFrom<unknown>(-1, 1.5, 2 ** 53, 2 ** 64, NaN, '0', null), fc.nat(), junk),
  }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(5),
    value: fc.oneof(
      fc.array(fc.oneof(fc.string({ maxLength: 70 }), fc.integer({ min: -2, max: 2 ** 53 }), fc.constantFrom('*', 0, -1, 1.5)), { maxLength: 12 }),
      fc.integer({ min: 1, max: 3 }).map((k) => Array.from({ length: 10_000 * k + 2 }, (_, i) => (i % 2 ? 1 : `c${i}`))),
      junk,
    ),
  }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(6),
    value: fc.oneof(
      fc.integer({ min: 0, max: 70 }).map((n) => Array.from({ length: n }, (_, i) => new Uint8Array(32).fill(i))),
      fc.array(fc.uint8Array({ minLength: 31, maxLength: 33 }), { maxLength: 3 }),
      junk,
    ),
  }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(7),
    value: fc.oneof(
      // unknown op kinds and declarations, wrong arities, ops a declaration forbids
      fc
        .tuple(
          fc.oneof(fc.string({ minLength: 1, maxLength: 10 }), giantString),
          fc.oneof(
            fc.constantFrom<unknown>(['z'], ['c', 5, null], ['c', null, -5], ['c', 'a', 'b'], ['s', -1], ['r', 1], ['b', 'mid', 0, 0], ['b', 'min', 10, 0], ['b', 'min', 0], ['c', null, null, null], []),
            fc.constantFrom<unknown>(['c', null, null], ['s', null], ['r'], ['b', 'min', 0, 5]),
            junk,
          ),
          fc.oneof(
            fc.array(fc.oneof(fc.constantFrom<unknown>(0, 1.5, NaN, 2 ** 53, ['z', 1], ['x', ['i', 1]], ['t', 1, ''], ['c', 1], ['a'], ['r', 'e', [1]], ['R', 'e', []], ['s', 1], ['u'], ['s', new Map(), 1]), junk), { maxLength: 4 }),
            fc.constant(new Array<number>(10_001).fill(1)),
          ),
        )
        .map((u) => [u]),
      fc.constant([
        ['k', ['c', null, null], [1]],
        ['k', ['c', null, null], [2]],
      ]),
      junk,
    ),
  }),
  fc.record({
    t: fc.constant('field' as const),
    index: fc.constant(8),
    value: fc.oneof(
      fc
        .tuple(
          fc.oneof(fc.boolean(), junk),
          fc.array(fc.tuple(fc.oneof(fc.constant('k'), fc.string({ maxLength: 300 })), fc.oneof(fc.constantFrom<unknown>(['c', 0, null], ['b', 'max', 10, 0], ['z']), junk), fc.oneof(fc.constantFrom<unknown>(-1, ['c', 1], ['x', ['c', 1]], ['d', 0]), junk)), { maxLength: 3 }),
        )
        .map((g) => [g]),
      junk,
    ),
  }),
)

const recipe: fc.Arbitrary<Recipe> = fc.oneof(
  // (a) random bytes, text frames and random msgpack values
  { weight: 3, arbitrary: fc.record({ t: fc.constant('bytes' as const), bytes: fc.uint8Array({ maxLength: 300 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('text' as const), text: fc.string({ unit: 'binary', maxLength: 200 }) }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant('value' as const), value: junk }) },
  // hostile encodings: deep nesting, huge declared lengths, the decoder's extensions, oversized frames
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('nested' as const),
      depth: fc.oneof(fc.integer({ min: 1, max: 200 }), fc.integer({ min: 1000, max: 300_000 })),
      open: fc.constantFrom([0x91], [0x81, 0xa1, 0x6b], [0xdc, 0x00, 0x01], [0x92, 0xc0]),
      close: fc.constantFrom([0xc0], [], [0x90]),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('header' as const),
      header: fc.constantFrom(...HUGE_HEADERS),
      tail: fc.uint8Array({ maxLength: 32 }),
      prefix: fc.constantFrom<readonly unknown[]>([], ['submit', 1], ['hello'], ['subscribe'], ['ping']),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('ext' as const),
      type: fc.oneof(fc.constantFrom(...EXT_TYPES), fc.integer({ min: 0, max: 255 })),
      format: fc.constantFrom(0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xc7, 0xc8, 0xc9),
      data: fc.oneof(fc.uint8Array({ maxLength: 20 }), junk.map((v) => safeEncode(v))),
      prefix: fc.oneof(fc.constant([]), fc.array(fc.oneof(fc.string({ maxLength: 3 }), fc.nat(), fc.constant(null)), { maxLength: 3 })),
      suffix: fc.oneof(fc.constant(new Uint8Array(0)), fc.uint8Array({ maxLength: 8 })),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('bundle' as const),
      strings: fc.array(fc.string({ maxLength: 3 }), { maxLength: 3 }),
      aim: fc.boolean(),
      offset: fc.integer({ min: -24, max: 24 }),
      suffix: fc.oneof(fc.constant(new Uint8Array([0xc0])), fc.uint8Array({ maxLength: 4 })),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('oversize' as const), size: fc.constantFrom(MAX_FRAME + 1, 3 * 1024 * 1024), submit: fc.boolean() }) },
  // (b) valid client messages, then mutated (or not)
  {
    weight: 12,
    arbitrary: fc.record({
      t: fc.constant('message' as const),
      base: baseMessage,
      struct: fc.oneof({ weight: 2, arbitrary: fc.constant<StructMut[]>([]) }, { weight: 3, arbitrary: fc.array(structMut, { minLength: 1, maxLength: 3 }) }),
      bytes: fc.oneof({ weight: 2, arbitrary: fc.constant<ByteMut[]>([]) }, { weight: 3, arbitrary: fc.array(byteMut, { minLength: 1, maxLength: 4 }) }),
    }),
  },
  // (c) valid envelopes with mutated inner fields, re-signed or not
  {
    weight: 8,
    arbitrary: fc.record({
      t: fc.constant('envelope' as const),
      env: envSpec,
      id: idArb,
      payload: fc.array(fc.oneof({ weight: 3, arbitrary: payloadField }, { weight: 2, arbitrary: structMut }), { minLength: 1, maxLength: 3 }),
      seal: fc.constantFrom('resign' as const, 'resign' as const, 'resign' as const, 'keep' as const, 'random' as const, 'short' as const, 'other-key' as const),
      pair: fc.oneof({ weight: 6, arbitrary: fc.constant<StructMut[]>([]) }, { weight: 1, arbitrary: fc.array(structMut, { minLength: 1, maxLength: 2 }) }),
      bytes: fc.oneof({ weight: 6, arbitrary: fc.constant<ByteMut[]>([]) }, { weight: 1, arbitrary: fc.array(byteMut, { minLength: 1, maxLength: 2 }) }),
    }),
  },
)

const target = fc.record({ relay: fc.integer({ min: 0, max: 3 }), authed: fc.boolean() })

// ---------------------------------------------------------------- building frames

function safeEncode(v: unknown): Uint8Array {
  try {
    return encode(v)
  } catch {
    // what msgpackr cannot encode (a null-prototype object with a bigint inside, say) becomes a short string
    return encode(Object.prototype.toString.call(v))
  }
}

function concat(...parts: ReadonlyArray<ArrayLike<number>>): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0))
  let at = 0
  for (const p of parts) {
    out.set(p, at)
    at += p.length
  }
  return out
}

function mutateBytes(input: Uint8Array, muts: readonly ByteMut[]): Uint8Array {
  let b = input
  for (const m of muts) {
    const at = (pos: number) => (b.length === 0 ? 0 : pos % (b.length + 1))
    switch (m.t) {
      case 'flip': {
        if (b.length === 0) break
        b = b.slice()
        const i = m.pos % b.length
        b[i] = (b[i] as number) ^ (1 << m.bit)
        break
      }
      case 'set': {
        if (b.length === 0) break
        b = b.slice()
        b[m.pos % b.length] = m.value
        break
      }
      case 'truncate':
        b = b.slice(0, b.length === 0 ? 0 : m.pos % b.length)
        break
      case 'extend':
        b = concat(b, m.bytes)
        break
      case 'insert':
        b = concat(b.subarray(0, at(m.pos)), m.bytes, b.subarray(at(m.pos)))
        break
      case 'delete':
        b = concat(b.subarray(0, at(m.pos)), b.subarray(at(m.pos) + m.count))
        break
      case 'header':
        b = concat(b.subarray(0, at(m.pos)), m.header, b.subarray(Math.min(b.length, at(m.pos) + m.header.length)))
        break
    }
  }
  return b
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array) && !(v instanceof Map) && !(v instanceof Set)
}

/** Applies `f` to the node at `path` (indices modulo each level's size; stops early at a leaf), copying on the way. */
function modifyAt(v: unknown, p: readonly number[], f: (x: unknown) => unknown): unknown {
  if (p.length === 0) return f(v)
  if (Array.isArray(v) && v.length > 0) {
    const i = (p[0] as number) % v.length
    const copy = v.slice()
    copy[i] = modifyAt(copy[i], p.slice(1), f)
    return copy
  }
  if (isPlainObject(v)) {
    const keys = Object.keys(v)
    if (keys.length === 0) return f(v)
    const k = keys[(p[0] as number) % keys.length] as string
    return { ...v, [k]: modifyAt(v[k], p.slice(1), f) }
  }
  return f(v)
}

function retype(v: unknown, to: Extract<StructMut, { t: 'retype' }>['to']): unknown {
  switch (to) {
    case 'string':
      return typeof v === 'string' ? v.length : v instanceof Uint8Array ? Buffer.from(v).toString('latin1') : typeof v === 'object' && v !== null ? Object.prototype.toString.call(v) : String(v)
    case 'number':
      return typeof v === 'number' ? String(v) : v instanceof Uint8Array ? v.length : typeof v === 'string' ? Number(v) : 1
    case 'bytes':
      return v instanceof Uint8Array ? Array.from(v) : safeEncode(v)
    case 'boolean':
      return Boolean(v)
    case 'null':
      return null
    case 'array':
      return Array.isArray(v) ? Object.fromEntries(Array.from(v, (x, i) => [String(i), x])) : [v]
    case 'map':
      return { v }
    case 'float':
      return typeof v === 'number' ? v + 0.5 : 0.5
    case 'negative':
      return typeof v === 'number' ? -v - 1 : -1
  }
}

function mutateStruct(input: readonly unknown[], muts: readonly StructMut[]): unknown[] {
  let a: unknown[] = input.slice()
  for (const m of muts) {
    switch (m.t) {
      case 'replace':
        a = modifyAt(a, m.path.length ? m.path : [0], () => m.value) as unknown[]
        break
      case 'swap': {
        if (a.length === 0) break
        const i = m.i % a.length
        const j = m.j % a.length
        ;[a[i], a[j]] = [a[j], a[i]]
        break
      }
      case 'remove':
        if (a.length) a.splice(m.i % a.length, 1)
        break
      case 'append':
        a.push(m.value)
        break
      case 'wrap':
        a = modifyAt(a, m.path.length ? m.path : [0], (x) => {
          let w = x
          for (let i = 0; i < m.depth; i++) w = m.asMap ? { w } : [w]
          return w
        }) as unknown[]
        break
      case 'retype':
        a = modifyAt(a, m.path.length ? m.path : [0], (x) => retype(x, m.to)) as unknown[]
        break
    }
    if (!Array.isArray(a)) a = [a]
  }
  return a
}

async function seal(spec: EnvSpec): Promise<{ frame: Uint8Array; bytes: Uint8Array; sig: Uint8Array; author: Identity }> {
  const author = identityOf(spec.secret)
  const updates: ObjectUpdate[] = []
  const safe: SafeUpdate[] = []
  spec.ops.forEach((o, i) => {
    // a bounded counter's claims are only valid as safe updates
    if (o.safe) safe.push({ key: `k${i}`, decl: o.decl, op: o.op as SafeUpdate['op'] })
    else updates.push({ key: `k${i}`, decl: o.decl, ops: [o.op as ObjectUpdate['ops'][number]] })
  })
  const draft: EnvelopeDraft = { space: spec.space, seq: spec.seq, clock: clockInit(), deps: [], updates, safe: safe.length ? [{ atomic: spec.atomic, updates: safe }] : [] }
  const env = await sealEnvelope(nodeCrypto, author, draft)
  return { frame: encodeEnvelope(env), bytes: env.signed.bytes, sig: env.signed.sig, author }
}

/** The frame a recipe stands for on this connection (a hello is signed over the connection's own challenge). */
async function build(r: Recipe, conn: Conn): Promise<Uint8Array | string> {
  switch (r.t) {
    case 'bytes':
      return r.bytes
    case 'text':
      return r.text
    case 'value':
      return safeEncode(r.value)
    case 'nested': {
      const parts: number[] = []
      for (let i = 0; i < r.depth; i++) parts.push(...r.open)
      return concat(parts, r.close)
    }
    case 'header':
      // an array header for the prefix plus one more element, which is the huge one
      return concat(r.prefix.length ? safeEncode([...r.prefix, null]).subarray(0, -1) : [], r.header, r.tail)
    case 'ext': {
      const len = r.data.length
      let head: number[]
      if (r.format >= 0xd4 && r.format <= 0xd8) head = [r.format, r.type] // fixext: the length is implied, the data may not match it
      else if (r.format === 0xc7) head = [0xc7, len & 0xff, r.type]
      else if (r.format === 0xc8) head = [0xc8, (len >> 8) & 0xff, len & 0xff, r.type]
      else head = [0xc9, 0, 0, (len >> 8) & 0xff, len & 0xff, r.type]
      const prefix = r.prefix.length ? safeEncode([...r.prefix, null]).subarray(0, -1) : []
      return concat(prefix, head, r.data, r.suffix)
    }
    case 'bundle': {
      // msgpackr's bundled-strings extension (0x62): a signed 32-bit offset from the end of its data to
      // where the decoder reads two strings, raw or aimed at the start of one of the values before it
      const parts = r.strings.map((s) => encode(s))
      const strings = concat(...parts)
      const starts = parts.map((_, i) => parts.slice(0, i).reduce((n, p) => n + p.length, 0))
      const dataEnd = strings.length + 6
      const o = (r.aim ? (starts.length ? (starts[Math.abs(r.offset) % starts.length] as number) : 0) - dataEnd + 4 : r.offset) >>> 0
      return concat(strings, [0xd6, 0x62, (o >>> 24) & 0xff, (o >>> 16) & 0xff, (o >>> 8) & 0xff, o & 0xff], r.suffix)
    }
    case 'oversize': {
      const frame = new Uint8Array(r.size)
      if (r.submit) frame.set([0x93, 0xa6, ...Buffer.from('submit'), 0x01, 0xc6, ...[0, 0, 0, 0].map((_, i) => ((r.size - 14) >>> (24 - 8 * i)) & 0xff)])
      return frame
    }
    case 'message': {
      let m: ClientMessage
      const b = r.base
      switch (b.type) {
        case 'hello':
          m = decodeClientMessage(conn.hello(b.who === 'fuzzer' ? fuzzer : stranger))
          break
        case 'submit':
          m = { type: 'submit', id: b.id, envelope: (await seal(b.env)).frame }
          break
        case 'presence': {
          // Signed by the session's key (or a stranger's): a state and, maybe, its leave signed ahead.
          const secret = (b.who === 'fuzzer' ? fuzzer : stranger).secretKey
          const signed = (seq: number, state: unknown) => {
            const bytes = safeEncode(state === null ? ['stead-presence-1', b.space, seq, b.ttlMs, null, 1] : ['stead-presence-1', b.space, seq, b.ttlMs, state])
            return { bytes, sig: signSync(secret, bytes) }
          }
          m = { type: 'presence', space: b.space, signed: signed(b.seq, b.state), ...(b.leave ? { leave: signed(b.seq + 1, null) } : {}) }
          break
        }
        default:
          m = b
      }
      let frame = encodeClientMessage(m)
      if (r.struct.length) frame = safeEncode(mutateStruct(decode(frame) as unknown[], r.struct))
      return mutateBytes(frame, r.bytes)
    }
    case 'envelope': {
      const s = await seal(r.env)
      let payload = decode(s.bytes) as unknown[]
      for (const m of r.payload) payload = m.t === 'field' ? modifyAt(payload, [m.index], () => m.value) as unknown[] : mutateStruct(payload, [m])
      const bytes = safeEncode(payload)
      const sig =
        r.seal === 'resign'
          ? signSync(s.author.secretKey, bytes)
          : r.seal === 'keep'
            ? s.sig
            : r.seal === 'other-key'
              ? signSync(stranger.secretKey, bytes)
              : r.seal === 'short'
                ? signSync(s.author.secretKey, bytes).subarray(0, 63)
                : new Uint8Array(64).fill(r.id & 0xff)
      const pair = r.pair.length ? mutateStruct([bytes, sig], r.pair) : [bytes, sig]
      return mutateBytes(encodeClientMessage({ type: 'submit', id: r.id, envelope: safeEncode(pair) }), r.bytes)
    }
  }
}

// ---------------------------------------------------------------- what the relay must answer

type Expected =
  | { kind: 'error' } // undecodable, oversized or sent before hello: a typed error (id null)
  | { kind: 'hello' } // welcome, or a typed error (a bad signature then closes with 4001)
  | { kind: 'quiet' } // subscribe, unsubscribe, announce, presence, pace, applied: nothing required, typed errors allowed, commits, attestations, deltas and peers may stream
  | { kind: 'submit'; id: number } // accepted or error with this id (or a session-level error)
  | { kind: 'pong'; n: number }

/** What the protocol says the answer is, using the core's own decoder as the oracle. */
function expected(frame: Uint8Array | string, authed: boolean): Expected {
  if (typeof frame === 'string' || frame.byteLength > MAX_FRAME) return { kind: 'error' }
  let m: ClientMessage
  try {
    m = decodeClientMessage(frame)
  } catch {
    return { kind: 'error' }
  }
  if (!authed && m.type !== 'hello') return { kind: 'error' }
  switch (m.type) {
    case 'hello':
      return { kind: 'hello' }
    case 'subscribe':
    case 'unsubscribe':
    case 'announce':
    case 'presence':
    case 'pace':
    case 'applied':
      return { kind: 'quiet' }
    case 'submit':
      return { kind: 'submit', id: m.id }
    case 'ping':
      return { kind: 'pong', n: m.n }
  }
}

function show(g: Got): string {
  return 'bad' in g ? `undecodable (${g.bad}): ${hex(g.raw, 64)}` : JSON.stringify(g.m, (_k, v: unknown) => (v instanceof Uint8Array ? `<${v.length} bytes>` : typeof v === 'string' && v.length > 200 ? `${v.slice(0, 200)}…(${v.length} chars)` : v))
}

function exited(r: TestRelay): boolean {
  return !r.process || r.process.exitCode !== null || r.process.signalCode !== null
}

let barrier = 0
/** Every barrier n sent so far: a pong is a barrier's only if its n is one of these (a fuzzed ping may carry any n). */
const barriersSent = new Set<number>()
/** Relays a frame killed or left stuck, with the frame. */
const broken: string[] = []

/** Sends one frame and a barrier ping; returns what is wrong with the relay's answer (empty when nothing is). */
async function exchange(cluster: TestCluster, conn: Conn, frame: Uint8Array | string): Promise<string[]> {
  const authedBefore = conn.authed
  const start = conn.got.length
  await conn.send(frame)
  const pings = new Set<number>()
  const ping = async (): Promise<void> => {
    const n = BARRIER_BASE + barrier++
    pings.add(n)
    barriersSent.add(n)
    await conn.send(encodeClientMessage({ type: 'ping', n }))
  }
  await ping()
  const isStream = (g: Got) => 'm' in g && (g.m.type === 'commit' || g.m.type === 'commit-more' || g.m.type === 'envelope' || g.m.type === 'attest')
  const isPong = (g: Got) => 'm' in g && g.m.type === 'pong' && pings.has(g.m.n)
  /** A pong for a barrier ping of an earlier frame (sent again after a rate-limited answer). */
  const isStalePong = (g: Got) => 'm' in g && g.m.type === 'pong' && barriersSent.has(g.m.n) && !pings.has(g.m.n)
  const isRateLimited = (g: Got) => 'm' in g && g.m.type === 'error' && g.m.reason === 'rate-limited'
  const since = () => conn.got.slice(start).filter((g) => !isStream(g) && !isStalePong(g))
  const deadline = Date.now() + ANSWER_TIMEOUT_MS
  let settled = false
  let limited = 0
  while (!settled && Date.now() < deadline) {
    settled = await conn.until(() => {
      if (conn.closed || since().some(isPong)) return true
      // before hello every frame gets exactly one answer, the barrier ping included
      return !conn.authed && since().length >= 2
    }, Math.max(1, Math.min(500, deadline - Date.now())))
    const rl = since().filter(isRateLimited).length
    if (!settled && conn.authed && rl > limited) {
      // The barrier ping itself was refused as rate-limited (its session's backlog was full): there is no
      // condition to wait on from outside, so back off as any client must before asking again.
      limited = rl
      await sleep(100)
      await ping()
    }
  }

  const problems: string[] = []
  const r = cluster.relays[conn.relay] as TestRelay
  const overLimit = (typeof frame === 'string' ? Buffer.byteLength(frame) : frame.byteLength) > (authedBefore ? MAX_FRAME : PRE_AUTH_FRAME)
  const refusedAtHeader = overLimit && conn.closed !== null && HEADER_CLOSE_CODES.has(conn.closed.code)
  const dropped = conn.closed !== null && !CLOSE_CODES.has(conn.closed.code) && !refusedAtHeader
  if (!settled || dropped) {
    // Silence or a dropped connection: give a relay that is stuck a while to die, so its log tells why.
    if (!settled) problems.push(`no answer to the frame or to the barrier ping within ${ANSWER_TIMEOUT_MS} ms`)
    await until(`relay ${r.id} to exit`, () => (exited(r) ? true : undefined), settled ? 5000 : 15_000).catch(() => {
      if (!settled) {
        problems.push(`relay ${r.id} is still running but does not answer; its log ends:\n${r.log.slice(-2000)}`)
        broken.push(`${r.id} stuck after ${typeof frame === 'string' ? JSON.stringify(frame) : hex(frame)}`)
      }
    })
  }
  // The oracle runs the core's decoder, the relay's own, in this process: only once the relay has
  // shown that decoding this frame returns.
  const exp: Expected = settled && !dropped && !overLimit ? expected(frame, authedBefore) : { kind: 'quiet' }
  const all = since()
  const pongAt = all.findIndex(isPong)
  let answers: Got[]
  if (pongAt >= 0) answers = all.slice(0, pongAt)
  else if (conn.closed) answers = all
  else if (settled) {
    answers = all.slice(0, -1)
    const pingAnswer = all[all.length - 1] as Got
    if (!('m' in pingAnswer && pingAnswer.m.type === 'error' && pingAnswer.m.id === null)) problems.push(`the barrier ping before hello got ${show(pingAnswer)}`)
  } else answers = all
  // Streamed commits and envelopes are only for subscribers, so only after hello.
  if (!conn.authed && conn.got.slice(start).some(isStream)) problems.push('a commit or envelope was streamed to an unauthenticated session')

  let matched = 0
  let sessionErrors = 0
  let errors = 0
  for (const g of answers) {
    if (!('m' in g)) {
      problems.push(`the relay sent a frame the protocol cannot decode: ${show(g)}`)
      continue
    }
    const m = g.m
    switch (m.type) {
      case 'error':
        errors++
        if (!REASON_SET.has(m.reason)) problems.push(`error with an unknown reason: ${show(g)}`)
        if (m.id === null) sessionErrors++
        else if (exp.kind === 'submit' && m.id === exp.id) matched++
        else problems.push(`error for an id that was not submitted: ${show(g)}`)
        break
      case 'accepted':
        if (exp.kind === 'submit' && m.id === exp.id) matched++
        else problems.push(`accepted for an id that was not submitted: ${show(g)}`)
        break
      case 'pong':
        if (exp.kind === 'pong' && m.n === exp.n) matched++
        else problems.push(`a pong that answers no ping: ${show(g)}`)
        break
      case 'welcome':
        if (exp.kind === 'hello') matched++
        else problems.push(`a welcome for a frame that is not a hello: ${show(g)}`)
        break
      case 'want':
        // The relay asks the session that submitted an envelope for those its clock cites and no relay holds (ClockVotes).
        if (!conn.authed || m.ids.length === 0 || m.ids.length > 64) problems.push(`a want this session could not have caused: ${show(g)}`)
        break
      case 'votes':
        // The relay's own clock votes on a subscribed space's envelopes, for a session that asked for them.
        if (!conn.authed || m.votes.length === 0 || m.votes.length > 64) problems.push(`votes this session could not have asked for: ${show(g)}`)
        break
      default:
        problems.push(`unexpected ${m.type}: ${show(g)}`)
    }
  }
  if (settled) {
    if (exp.kind === 'error' && errors === 0) problems.push('no typed error for a frame the protocol refuses')
    if (exp.kind === 'hello' && matched + errors === 0) problems.push('neither welcome nor error for a hello')
    if (exp.kind === 'submit' && matched !== 1 && !(matched === 0 && sessionErrors > 0)) problems.push(`${matched} answers with id ${exp.id} to one submit`)
    if (exp.kind === 'pong' && matched !== 1 && !(matched === 0 && sessionErrors > 0)) problems.push(`${matched} pongs with n ${exp.n} to one ping`)
  }
  if (overLimit) {
    if (!refusedAtHeader) problems.push(`a frame over the limit did not close the session with 1009 (closed: ${conn.closed ? conn.closed.code : 'no'})`)
  } else if (conn.closed) {
    if (!CLOSE_CODES.has(conn.closed.code)) problems.push(`the session closed with code ${conn.closed.code} (${conn.closed.reason})`)
    if (errors === 0) problems.push(`the session closed (${conn.closed.code}) without a typed error first`)
  }

  if (exited(r)) {
    problems.push(`relay ${r.id} exited (code ${r.process?.exitCode}, signal ${r.process?.signalCode}); its log ends:\n${r.log.slice(-4000)}`)
    broken.push(`${r.id} exited after ${typeof frame === 'string' ? JSON.stringify(frame) : hex(frame)}\n${r.log.slice(-4000)}`)
  }
  return problems
}

// ---------------------------------------------------------------- the test

describe('a relay fed fuzzed client frames', () => {
  let cluster: TestCluster
  const pool = new Map<string, Conn>()

  async function connFor(relay: number, authed: boolean): Promise<Conn> {
    const key = `${relay}:${authed}`
    let c = pool.get(key)
    // Unauthenticated sessions are renewed well before the relay's 10 s challenge timeout.
    if (c && (c.closed || c.authed !== authed || (!authed && Date.now() - c.openedAt > 5000) || c.got.length > 5000)) {
      c.close()
      c = undefined
    }
    if (!c) {
      const r = cluster.relays[relay] as TestRelay
      if (SHRINK && exited(r)) {
        // shrinking replays frames: bring a relay a frame killed back
        cluster.start(relay)
        await cluster.waitHealthy(relay)
      }
      c = await Conn.open(relay, r.api, authed ? fuzzer : undefined)
      pool.set(key, c)
    }
    return c
  }

  beforeAll(async () => {
    // Listed spaces are not charged to the new-space quota, so long runs and the final check are not refused.
    cluster = await TestCluster.create(4, { openSpaces: true, spaces: Object.fromEntries([...FUZZ_SPACES, AFTER_SPACE].map((s) => [s, {}])) })
    await cluster.startAll()
  }, 60_000)

  afterAll(async () => {
    for (const c of pool.values()) c.close()
    await cluster?.stopAll()
  })

  it(
    `answers ${RUNS} fuzzed frames, before and after hello, with replies or typed errors`,
    async () => {
      const run = await fc.check(
        fc.asyncProperty(target, recipe, async (t, r) => {
          const conn = await connFor(t.relay, t.authed)
          const frame = await build(r, conn)
          const problems = await exchange(cluster, conn, frame)
          if (problems.length) {
            const shown = typeof frame === 'string' ? `text ${JSON.stringify(frame.slice(0, 300))}` : `binary ${hex(frame)}`
            throw new Error(`relay r${t.relay + 1}, ${conn.authed || t.authed ? 'after' : 'before'} hello, frame ${shown}:\n- ${problems.join('\n- ')}`)
          }
        }),
        {
          numRuns: RUNS,
          endOnFailure: !SHRINK,
          ...(SEED === undefined ? {} : { seed: SEED }),
          ...(process.env.STEAD_FUZZ_PATH ? { path: process.env.STEAD_FUZZ_PATH } : {}),
        },
      )
      if (run.failed) {
        // fast-check's own report prints the whole counterexample, megabytes for a giant string: cut it short
        const example = fc.stringify(run.counterexample)
        const cause = run.errorInstance instanceof Error ? run.errorInstance.message : String(run.errorInstance)
        throw new Error(
          `fuzzing failed after ${run.numRuns} frames (${run.numShrinks} shrinks); replay with STEAD_FUZZ_SEED=${run.seed} STEAD_FUZZ_PATH=${run.counterexamplePath}\n` +
            `${cause}\ncounterexample: ${example.length > 3000 ? `${example.slice(0, 3000)}… (${example.length} chars)` : example}`,
        )
      }
    },
    Math.max(120_000, RUNS * 40),
  )

  it('leaves every relay up and healthy, with a clean log, still committing with one stable hash', async () => {
    expect(broken).toEqual([])
    for (const r of cluster.relays) {
      expect(r.process?.exitCode, `${r.id} exited`).toBeNull()
      expect(r.process?.signalCode, `${r.id} was killed`).toBeNull()
      const res = await fetch(`http://${r.api}/health`, { signal: AbortSignal.timeout(5000) })
      expect(res.status, `${r.id} /health`).toBe(200)
    }

    // A fresh author in a fresh space: a regular deposit, then a safe withdrawal that fits.
    const author = identityOf(new Uint8Array(32).fill(77))
    const space = AFTER_SPACE
    const acct: Declaration = { type: 'counter', bounds: { min: 0 } }
    const base = { space, clock: clockInit(), deps: [] }
    const deposit = await sealEnvelope(nodeCrypto, author, { ...base, seq: 1, updates: [{ key: 'acct', decl: acct, ops: [10] }], safe: [] })
    const withdraw = await sealEnvelope(nodeCrypto, author, { ...base, seq: 2, updates: [], safe: [{ atomic: true, updates: [{ key: 'acct', decl: acct, op: -4 }] }] })
    const client = await TestClient.connect((cluster.relays[0] as TestRelay).api, author)
    try {
      client.send({ type: 'submit', id: 1, envelope: encodeEnvelope(deposit) })
      client.send({ type: 'submit', id: 2, envelope: encodeEnvelope(withdraw) })
      for (const id of [1, 2]) expect(await client.next((m) => (m.type === 'accepted' || m.type === 'error') && m.id === id)).toMatchObject({ type: 'accepted' })
      const hashes = await until(
        'all four relays to commit the update',
        async () => {
          const states = await Promise.all(cluster.relays.map((_, i) => cluster.json<{ index?: number; stateHash?: string }>(i, `/v1/spaces/${space}/stable`)))
          return states.every((s) => s.index === 2) ? states.map((s) => s.stateHash) : undefined
        },
        60_000,
      )
      expect(new Set(hashes).size).toBe(1)
    } finally {
      client.close()
    }

    for (const r of cluster.relays) {
      expect(r.log, `${r.id} logged a fatal error`).not.toMatch(/fatal|"level":60/i)
      expect(r.log, `${r.id} logged an uncaught exception`).not.toMatch(/uncaught|unhandled/i)
      expect(r.log, `${r.id} printed a stack trace`).not.toMatch(/(\n|\\n)\s*at [^\n]*:\d+:\d+/)
    }
  }, 90_000)
})
