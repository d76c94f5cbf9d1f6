import type { FastifyReply, FastifyRequest } from 'fastify'
import type { MemoryBudget } from '../runtime/budget.ts'

/** Limits of the HTTP reads (see relay/README.md, "Security model"); part of the client API's limits. */
export interface ReadLimits {
  /** Bytes of stored values one history page carries at most (at least one entry): past it the page stops and names the next. */
  readonly historyPageBytes: number
  /** The largest answer one read may build (snapshots, stable states, deltas, object proofs): past it, 413 `too-large`. */
  readonly maxReadBytes: number
  /** Heavy reads (history, snapshot, stable, delta, objects) being built or written at once, per remote address and in all. */
  readonly maxReadsPerAddress: number
  readonly maxReads: number
  /** Reads that wait on the cluster (a proven head, an attestation) at once, per remote address and in all. */
  readonly maxWaitsPerAddress: number
  readonly maxWaits: number
  /** A read's answer must be written out within this long; a client that does not read it is cut off, and its memory let go. */
  readonly readDeadlineMs: number
}

export const DEFAULT_READ_LIMITS: ReadLimits = {
  historyPageBytes: 4 * 1024 * 1024,
  maxReadBytes: 128 * 1024 * 1024,
  maxReadsPerAddress: 8,
  maxReads: 64,
  maxWaitsPerAddress: 64,
  maxWaits: 4096,
  readDeadlineMs: 60_000,
}

/** Serialized answers kept for the next reader of the same commit (snapshots, stable states, deltas), in bytes. */
const CACHE_BYTES = 64 * 1024 * 1024

/** A read's answer: a JSON value, or bytes already serialized (a cached answer). */
export type Answer = { readonly status?: number; readonly body: unknown } | { readonly status?: number; readonly bytes: Buffer }

/** Concurrent reads, per address and in all. */
class Slots {
  private readonly perAddress = new Map<string, number>()
  running = 0
  private readonly perAddressMax: number
  private readonly max: number
  constructor(perAddressMax: number, max: number) {
    this.perAddressMax = perAddressMax
    this.max = max
  }

  /** Takes a slot for `who` and returns its release, or says which cap refused it. */
  take(who: string): (() => void) | 'address' | 'relay' {
    const n = this.perAddress.get(who) ?? 0
    if (n >= this.perAddressMax) return 'address'
    if (this.running >= this.max) return 'relay'
    this.perAddress.set(who, n + 1)
    this.running++
    let released = false
    return () => {
      if (released) return
      released = true
      this.running--
      const left = (this.perAddress.get(who) ?? 1) - 1
      if (left <= 0) this.perAddress.delete(who)
      else this.perAddress.set(who, left)
    }
  }
}

/**
 * The HTTP reads of a relay within their budgets: how many run at once
 * (per address and in all: 429 or 503 with `retry-after` past them), what
 * their answers hold in memory until written out (counted in the relay's
 * memory budget as `http-reads`, each buffer once however many responses
 * share it: 503 when it does not fit), and how long an answer may take to
 * be read (past `readDeadlineMs` the connection is cut, so an answer a
 * client never reads does not stay in memory for good).
 */
export class Reads {
  readonly limits: ReadLimits
  private readonly heavy: Slots
  private readonly waits: Slots
  private readonly budget: MemoryBudget
  /** Buffers being written, with the responses writing them; cached ones stay counted in `cache`. */
  private readonly writing = new Map<Buffer, number>()
  private writingBytes = 0
  /** Serialized answers by what they answer (a space and its commit), oldest first. */
  private readonly cache = new Map<string, Buffer>()
  private cacheBytes = 0
  private readonly refused: (reason: string) => void

  constructor(budget: MemoryBudget, limits: ReadLimits, refused: (reason: string) => void) {
    this.budget = budget
    this.limits = limits
    this.refused = refused
    this.heavy = new Slots(limits.maxReadsPerAddress, limits.maxReads)
    this.waits = new Slots(limits.maxWaitsPerAddress, limits.maxWaits)
    budget.track('http-reads', () => this.held(), (bytes) => this.evict(bytes))
  }

  /** Bytes held: answers being written, and cached ones not being written. */
  held(): number {
    let n = this.writingBytes
    for (const b of this.cache.values()) if (!this.writing.has(b)) n += b.length
    return n
  }

  /** A cached answer for `key`, if one is kept. */
  cached(key: string): Buffer | undefined {
    return this.cache.get(key)
  }

  /** Keeps `bytes` as the answer for `key` (not past CACHE_BYTES: the oldest go first). */
  remember(key: string, bytes: Buffer): void {
    // Kept only if the memory budget admits it: serve skips its own check for cached answers.
    if (bytes.length > CACHE_BYTES || !this.budget.admits(bytes.length)) return
    const had = this.cache.get(key)
    if (had) this.cacheBytes -= had.length
    this.cache.delete(key)
    this.cache.set(key, bytes)
    this.cacheBytes += bytes.length
    while (this.cacheBytes > CACHE_BYTES) this.dropOldest()
  }

  private dropOldest(): boolean {
    const first = this.cache.entries().next()
    if (first.done) return false
    this.cache.delete(first.value[0])
    this.cacheBytes -= first.value[1].length
    return true
  }

  private evict(bytes: number): void {
    const goal = this.held() - bytes
    while (this.held() > goal && this.dropOldest());
  }

  /**
   * Serves a heavy read (`kind` 'heavy') or one that waits on the cluster
   * ('wait'): takes a slot for the caller's address, checks that `estimate`
   * bytes fit the memory budget, builds the answer, and writes it within
   * the deadline, holding its bytes in the budget until it is written or
   * the connection closes.
   */
  async serve(req: FastifyRequest, reply: FastifyReply, who: string, kind: 'heavy' | 'wait', estimate: number, build: () => Answer | Promise<Answer>, finish: (body: unknown) => unknown = (b) => b): Promise<FastifyReply> {
    const slot = (kind === 'heavy' ? this.heavy : this.waits).take(who)
    if (slot === 'address') {
      this.refused('rate-limited')
      return reply.code(429).header('retry-after', '1').send({ error: 'rate-limited', detail: `too many reads at once from ${who}; read the answers you asked for, then retry` })
    }
    if (slot === 'relay') return this.busy(reply, 'this relay is serving as many reads as it takes at once; retry shortly or ask another relay')
    if (estimate > 0 && !this.budget.admits(estimate)) {
      slot()
      return this.busy(reply, `this relay holds ${this.budget.used()} of its ${this.budget.totalBytes} bytes of memory; retry shortly or ask another relay`)
    }
    let answer: Answer
    try {
      answer = await build()
    } catch (err) {
      slot()
      throw err
    }
    // Let go once the answer is written out or the connection is gone. Not before the build ends: a
    // caller that hangs up must not get its slot back while its read still runs (a head or attestation
    // wait goes on for seconds), or reconnecting would run any number of reads at once.
    reply.raw.once('close', slot)
    if (req.socket.destroyed) {
      slot()
      return reply
    }
    const bytes = 'bytes' in answer ? answer.bytes : Buffer.from(JSON.stringify(await finish(answer.body)))
    if (bytes.length > this.limits.maxReadBytes) {
      this.refused('too-large')
      return reply.code(413).send({ error: 'too-large', detail: `the answer is ${bytes.length} bytes, over this relay's ${this.limits.maxReadBytes}; ask for less or another way` })
    }
    if (!this.writing.has(bytes) && !this.cache.has(keyOf(this.cache, bytes)) && !this.budget.admits(bytes.length)) {
      return this.busy(reply, `this relay holds ${this.budget.used()} of its ${this.budget.totalBytes} bytes of memory; retry shortly or ask another relay`)
    }
    this.hold(bytes)
    const deadline = setTimeout(() => {
      // Not read in time: cut the connection, and the socket gives its buffer back.
      if (!reply.raw.writableFinished) {
        this.refused('slow-consumer')
        req.socket.destroy()
      }
    }, this.limits.readDeadlineMs)
    deadline.unref()
    reply.raw.once('close', () => {
      clearTimeout(deadline)
      this.release(bytes)
    })
    return reply
      .code(answer.status ?? 200)
      .header('content-type', 'application/json; charset=utf-8')
      .send(bytes)
  }

  private busy(reply: FastifyReply, detail: string): FastifyReply {
    this.refused('unavailable')
    return reply.code(503).header('retry-after', '1').send({ error: 'unavailable', detail })
  }

  private hold(bytes: Buffer): void {
    const n = this.writing.get(bytes) ?? 0
    this.writing.set(bytes, n + 1)
    if (n === 0) this.writingBytes += bytes.length
  }

  private release(bytes: Buffer): void {
    const n = (this.writing.get(bytes) ?? 1) - 1
    if (n > 0) return void this.writing.set(bytes, n)
    if (this.writing.delete(bytes)) this.writingBytes -= bytes.length
  }
}

/** The key under which `bytes` is cached, or '' (an identity look-up: cached answers are few). */
function keyOf(cache: Map<string, Buffer>, bytes: Buffer): string {
  for (const [k, b] of cache) if (b === bytes) return k
  return ''
}

/** Bytes turned into base64url per step (a multiple of 3, so the pieces join): small strings, collected young. */
const BASE64_STEP = 3 * 16 * 1024

/**
 * `fields` as a JSON object with one more field, `name`: `bytes` as
 * base64url, written straight into the answer's buffer a piece at a time,
 * so a large answer costs its buffer and not two more copies as strings.
 */
export function jsonWithBytes(fields: Record<string, unknown>, name: string, bytes: Uint8Array): Buffer {
  const head = JSON.stringify(fields)
  const open = `${head.length > 2 ? `${head.slice(0, -1)},` : '{'}${JSON.stringify(name)}:"`
  const size = Buffer.byteLength(open) + Math.ceil((bytes.length * 4) / 3) + 2
  const out = Buffer.allocUnsafe(size)
  let at = out.write(open)
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length)
  for (let i = 0; i < view.length; i += BASE64_STEP) at += out.write(view.subarray(i, i + BASE64_STEP).toString('base64url'), at, 'latin1')
  at += out.write('"}', at)
  return out.subarray(0, at)
}
