import { Bucket, type Rate } from '../bucket.ts'

/**
 * What one peer's mesh frames may make this relay do, per peer and per
 * kind of message, enforced before the work is done. A member relay is
 * trusted with nothing but its signature: a Byzantine one may send any
 * message, as fast as its link allows. Every frame is charged at the door
 * (messages and bytes of its kind), before it is decoded or its signatures
 * checked; a request (sync, fetch, own-last-ask) also waits in a short
 * per-peer queue that consensus events overtake, is dropped if that queue
 * is full, and is checked again against the peer's serving budget (blocks
 * and bytes read from the store and sent back) when its turn comes: a
 * request past the budget is dropped, never served later.
 *
 * The numbers are well above what an honest peer needs (a relay catching
 * up pulls one answer at a time; a healthy one sends one block per round,
 * a fetch now and then, and wakes of a few envelopes), so only a peer that
 * floods meets them.
 */

/** The kinds of mesh message, grouped by what they cost us. */
export type MeshClass = 'block' | 'blocks' | 'request' | 'head-ask' | 'checkpoint' | 'wake' | 'reply'

const MIB = 1024 * 1024
const rate = (perSecond: number, bytesPerSecond: number, burstSeconds = 2): Rate => ({ perSecond, burst: perSecond * burstSeconds, bytesPerSecond, burstBytes: bytesPerSecond * burstSeconds })

/** Per peer and class: frames and their bytes, at the door. */
export const MESH_DOOR_RATES: Readonly<Record<MeshClass, Rate>> = {
  // One block per round; pushed again when stuck. Its signature is checked at the door.
  block: rate(200, 64 * MIB),
  // Answers to our fetches and syncs (signatures checked, unless we hold the block).
  blocks: rate(200, 64 * MIB),
  // sync, fetch, own-last-ask: what an answer costs is charged to the serving budget below.
  request: rate(100, 1 * MIB),
  // Each costs a store read and a signature (HeadProofs caps those in flight too).
  'head-ask': rate(500, 1 * MIB),
  // checkpoint-ask (a store read and a hash of the manifest), checkpoint-get (paced by RelayCheckpoints), statements and parts.
  checkpoint: rate(20, 64 * MIB),
  // A message here is an envelope of the wake (each a signature to check); see WAKE_MAX_ENVELOPES.
  wake: rate(256, 2 * MIB, 4),
  // own-last, head-sig, unknown, pruned: small answers.
  reply: rate(500, 4 * MIB),
}

/**
 * What a peer's requests may make this relay read and send it, per second:
 * a message here is a block (each is read from the store or memory,
 * decoded and encoded again), bytes are the blocks' bytes. A relay catching
 * up takes one answer of up to 200 blocks (SYNC_BATCH) at a time.
 */
export const MESH_SERVE_RATE: Rate = rate(2_000, 32 * MIB, 1)

/** Requests of one peer waiting for the event loop at most; past it they are dropped unread. */
export const MAX_QUEUED_REQUESTS = 8

/** An honest wake carries at most 64 envelopes (the core's WAKE_ENVELOPES); one with more is cut to this many. */
export const WAKE_MAX_ENVELOPES = 64

/** The class of a mesh message kind. */
export function classOf(kind: string): MeshClass {
  switch (kind) {
    case 'block':
      return 'block'
    case 'blocks':
      return 'blocks'
    case 'sync':
    case 'fetch':
    case 'own-last-ask':
      return 'request'
    case 'head-ask':
      return 'head-ask'
    case 'checkpoint-ask':
    case 'checkpoint-get':
    case 'checkpoint':
    case 'checkpoint-part':
      return 'checkpoint'
    case 'wake':
      return 'wake'
    default:
      return 'reply'
  }
}

/**
 * The kind of an encoded mesh message (`[kind, ...]` in msgpack) read from
 * its first bytes, without decoding the rest: what the door charges before
 * any work. Undefined if the frame does not start like a mesh message (the
 * decoder then refuses it as malformed).
 */
export function peekKind(frame: Uint8Array): string | undefined {
  const head = frame[0]
  if (head === undefined) return undefined
  let at: number
  if (head >= 0x90 && head <= 0x9f) at = 1
  else if (head === 0xdc) at = 3
  else if (head === 0xdd) at = 5
  else return undefined
  const tag = frame[at]
  if (tag === undefined) return undefined
  let len: number
  if (tag >= 0xa0 && tag <= 0xbf) {
    len = tag - 0xa0
    at += 1
  } else if (tag === 0xd9) {
    len = frame[at + 1] ?? 0
    at += 2
  } else return undefined
  if (len > 32 || at + len > frame.length) return undefined
  let kind = ''
  for (let i = at; i < at + len; i++) kind += String.fromCharCode(frame[i] as number)
  return kind
}

/** Why a frame or a request was refused (for metrics and logs). */
export interface Throttled {
  readonly peer: number
  readonly kind: string
  /** 'rate' (its class's door rate), 'queue' (too many requests waiting), 'serve' (serving budget spent). */
  readonly why: 'rate' | 'queue' | 'serve'
}

/**
 * The per-peer mesh budget: door buckets per class, the queue of requests
 * waiting for the event loop, and the serving budget. One instance per
 * relay; time is injected.
 */
export class MeshBudget<T> {
  private readonly door: Array<Map<MeshClass, Bucket>>
  private readonly serve: Bucket[]
  /** Per peer, requests waiting for the event loop (run after every other event of a drain). */
  private readonly requests: Array<Array<() => T>>
  /** Bytes of each peer's frames waiting in the event queue (see RelayNode.onFrame). */
  readonly backlog: number[]
  private next = 0
  private readonly now: () => number
  private readonly onThrottled: (t: Throttled) => void

  constructor(peers: number, now: () => number, onThrottled: (t: Throttled) => void) {
    this.now = now
    this.onThrottled = onThrottled
    this.door = Array.from({ length: peers }, () => new Map())
    this.serve = Array.from({ length: peers }, () => new Bucket(MESH_SERVE_RATE, now))
    this.requests = Array.from({ length: peers }, () => [])
    this.backlog = Array.from({ length: peers }, () => 0)
  }

  /**
   * Charges one frame of `kind` (`count` messages of its class: envelopes
   * for a wake) at the door. False, counted, if the peer is over its rate
   * for that class: drop the frame unread.
   */
  admit(peer: number, kind: string, bytes: number, count = 1): boolean {
    const cls = classOf(kind)
    const doors = this.door[peer]
    if (!doors) return false
    let bucket = doors.get(cls)
    if (!bucket) doors.set(cls, (bucket = new Bucket(MESH_DOOR_RATES[cls], this.now)))
    const ok = bucket.tryTakeMany(count, bytes)
    if (!ok) this.onThrottled({ peer, kind, why: 'rate' })
    return ok
  }

  /** Queues a request of `peer` to run after the drain's other events; false (counted) if its queue is full. */
  queueRequest(peer: number, kind: string, run: () => T): boolean {
    const q = this.requests[peer]
    if (!q || q.length >= MAX_QUEUED_REQUESTS) {
      this.onThrottled({ peer, kind, why: 'queue' })
      return false
    }
    q.push(run)
    return true
  }

  get queuedRequests(): number {
    let n = 0
    for (const q of this.requests) n += q.length
    return n
  }

  /** Runs the queued requests, one per peer in turn (starting with a different peer each time), handing each result to `each`. */
  runRequests(each: (result: T) => void): void {
    const n = this.requests.length
    for (let more = true; more; ) {
      more = false
      for (let k = 0; k < n; k++) {
        const q = this.requests[(this.next + k) % n] as Array<() => T>
        const run = q.shift()
        if (!run) continue
        each(run())
        more = true
      }
      this.next = (this.next + 1) % n
    }
  }

  /** Whether the peer's serving budget has anything left; counted if not (its request is dropped). */
  mayServe(peer: number, kind: string): boolean {
    const ok = (this.serve[peer]?.wait(0) ?? 0) === 0
    if (!ok) this.onThrottled({ peer, kind, why: 'serve' })
    return ok
  }

  /** What the peer's serving budget allows now: blocks and bytes (at least one block if anything is left). */
  allowance(peer: number): { blocks: number; bytes: number } {
    return this.serve[peer]?.available() ?? { blocks: 0, bytes: 0 }
  }

  /** Charges `blocks` blocks of `bytes` bytes read or sent for the peer; false (counted, nothing charged) if they do not fit now. */
  charge(peer: number, kind: string, blocks: number, bytes: number): boolean {
    const bucket = this.serve[peer]
    if (!bucket) return true
    if (!bucket.tryTakeMany(blocks, bytes)) {
      this.onThrottled({ peer, kind, why: 'serve' })
      return false
    }
    return true
  }
}
