import { Bucket, type Rate } from '../runtime/bucket.ts'

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
export type MeshClass = 'block' | 'blocks' | 'request' | 'headAsk' | 'checkpoint' | 'wake' | 'reply' | 'clockVotes' | 'voteFrames'

const MIB = 1024 * 1024
const rate = (perSecond: number, bytesPerSecond: number, burstSeconds = 2): Rate => ({ perSecond, burst: perSecond * burstSeconds, bytesPerSecond, burstBytes: bytesPerSecond * burstSeconds })

/**
 * The numbers of the mesh budget, per peer. Settable with
 * `stead-relay start --limit mesh.<name>=<value>` (a rate's fields as
 * `mesh.blocks.perSecond`); see the README's security model.
 */
export interface MeshLimits {
  /** Pushed blocks (one per round; pushed again when stuck). Each signature is checked at the door. */
  readonly block: Rate
  /** `blocks` messages (answers to our fetches and syncs), per message and bytes; their blocks are charged below too. */
  readonly blocks: Rate
  /**
   * Blocks in `blocks` messages beyond what this relay asked the peer for
   * (each is a signature to check): per block. Answers to our own sync and
   * fetch requests are charged against what was asked instead.
   */
  readonly unrequestedBlocks: Rate
  /** sync, fetch, own-last-ask: what an answer costs is charged to the serving budget below. */
  readonly request: Rate
  /** head-ask: each costs a signature once the head is attested (HeadProofs caps those in flight too); queued and served like requests. */
  readonly headAsk: Rate
  /** checkpoint-ask (a store read and a hash of the manifest; queued and served like requests), checkpoint-get (paced by RelayCheckpoints), statements and parts. */
  readonly checkpoint: Rate
  /** A message here is an envelope of the wake (each a signature to check); see wakeMaxEnvelopes. */
  readonly wake: Rate
  /** own-last, head-sig, unknown, pruned: small answers. */
  readonly reply: Rate
  /**
   * clock-votes (up to 512 votes each). A vote costs a signature check only
   * for an envelope this relay holds, once per relay and envelope; votes for
   * unknown envelopes are kept unchecked, 10,000 at most (ClockVotes).
   */
  readonly clockVotes: Rate
  /** A message here is a client envelope sent along with clock votes (each a signature to check); at most 64 per message are opened. */
  readonly voteFrames: Rate
  /**
   * What a peer's requests may make this relay read and send it, per
   * second: a message here is a block (each is read from the store or
   * memory, decoded and encoded again) or an answered ask, bytes are the
   * blocks' bytes. A relay catching up takes one answer of up to 200 blocks
   * (SYNC_BATCH) at a time.
   */
  readonly serve: Rate
  /** sync, fetch and own-last-ask of one peer waiting for the event loop at most; past it they are dropped unread. */
  readonly maxQueuedRequests: number
  /** head-ask and checkpoint-ask of one peer waiting for the event loop at most (HeadProofs asks up to 64 at once). */
  readonly maxQueuedAsks: number
  /** An honest wake carries at most 64 envelopes (the core's WAKE_ENVELOPES); one with more is cut to this many. */
  readonly wakeMaxEnvelopes: number
  /** Blocks a peer may still send in answer to what this relay asked of it, at most (asked and not yet answered): this many fetched digests, and this many blocks of pulls. */
  readonly maxAnswerCredit: number
}

export const DEFAULT_MESH_LIMITS: MeshLimits = {
  block: rate(200, 64 * MIB),
  blocks: rate(200, 64 * MIB),
  // A small burst: the blocks of one message are verified in one turn of the event loop (50 signatures, not 400).
  unrequestedBlocks: rate(200, 64 * MIB, 0.25),
  request: rate(100, 1 * MIB),
  headAsk: rate(500, 1 * MIB),
  checkpoint: rate(20, 64 * MIB),
  wake: rate(256, 2 * MIB, 4),
  reply: rate(500, 4 * MIB),
  clockVotes: rate(1_000, 16 * MIB),
  voteFrames: rate(1_024, 8 * MIB),
  serve: rate(2_000, 32 * MIB, 1),
  maxQueuedRequests: 8,
  maxQueuedAsks: 64,
  wakeMaxEnvelopes: 64,
  maxAnswerCredit: 4_000,
}

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
      return 'headAsk'
    case 'checkpoint-ask':
    case 'checkpoint-get':
    case 'checkpoint':
    case 'checkpoint-part':
      return 'checkpoint'
    case 'wake':
      return 'wake'
    case 'clock-votes':
      return 'clockVotes'
    case 'vote-frames':
      return 'voteFrames'
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
  const kind = peekHead(frame)?.kind
  // Only the protocol's kinds: whatever else a peer writes there must not become a metrics label.
  return kind !== undefined && MESH_KINDS.has(kind) ? kind : undefined
}

/** The mesh message kinds (relay/src/consensus/messages.ts). */
const MESH_KINDS: ReadonlySet<string> = new Set(['block', 'blocks', 'sync', 'fetch', 'own-last-ask', 'own-last', 'head-ask', 'head-sig', 'checkpoint-ask', 'checkpoint-get', 'checkpoint', 'checkpoint-part', 'wake', 'pruned', 'unknown', 'clock-votes', 'epoch-vote'])

/**
 * How many blocks a `blocks` message (`['blocks', [[bytes, sig], ...]]`)
 * declares, read from its array header without decoding them: what the door
 * charges per block before any signature is checked. Undefined if the frame
 * is not a `blocks` message shaped so (the decoder then refuses it).
 */
export function peekBlockCount(frame: Uint8Array): number | undefined {
  const head = peekHead(frame)
  if (head?.kind !== 'blocks') return undefined
  const at = head.end
  const tag = frame[at]
  if (tag === undefined) return undefined
  if (tag >= 0x90 && tag <= 0x9f) return tag - 0x90
  if (tag === 0xdc && at + 3 <= frame.length) return ((frame[at + 1] as number) << 8) | (frame[at + 2] as number)
  if (tag === 0xdd && at + 5 <= frame.length) return ((frame[at + 1] as number) * 2 ** 24) + (((frame[at + 2] as number) << 16) | ((frame[at + 3] as number) << 8) | (frame[at + 4] as number))
  return undefined
}

/** The kind of an encoded mesh message and where the element after it starts. */
function peekHead(frame: Uint8Array): { kind: string; end: number } | undefined {
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
  return { kind, end: at + len }
}

/** Why a frame or a request was refused (for metrics and logs). */
export interface Throttled {
  readonly peer: number
  readonly kind: string
  /** 'rate' (its class's door rate), 'queue' (too many requests waiting), 'serve' (serving budget spent). */
  readonly why: 'rate' | 'queue' | 'serve'
}

/**
 * The per-peer mesh budget: door buckets per class, blocks asked of each
 * peer and not yet answered, the queue of requests waiting for the event
 * loop, the serving budget, and the bytes of each peer's frames waiting in
 * the event queue. One instance per relay; time is injected.
 */
export class MeshBudget<T> {
  private readonly limits: MeshLimits
  private readonly door: Array<Map<MeshClass, Bucket>>
  private readonly unrequested: Bucket[]
  /**
   * Per peer, the digests this relay fetched from it and it has not sent
   * yet (oldest first): a block answers a fetch only by its digest. Counted
   * by the number of blocks asked, a peer's own blocks naming made-up
   * ancestors earned it a fetch, and so more blocks to verify, for each.
   */
  private readonly fetched: Array<Set<string>>
  /** Per peer, blocks of the rounds this relay pulled from it (sync) that it has not sent yet. */
  private readonly pulled: number[]
  private readonly serve: Bucket[]
  /** Per peer, requests and asks waiting for the event loop (run after every other event of a drain). */
  private readonly requests: Array<Array<{ readonly asks: boolean; readonly run: () => T }>>
  /** Per peer, bytes of its frames waiting in the event queue (see RelayNode.onFrame). */
  private readonly backlog: number[]
  private next = 0
  private readonly now: () => number
  private readonly onThrottled: (t: Throttled) => void

  constructor(peers: number, now: () => number, onThrottled: (t: Throttled) => void, limits: Partial<MeshLimits> = {}) {
    this.limits = { ...DEFAULT_MESH_LIMITS, ...limits }
    this.now = now
    this.onThrottled = onThrottled
    this.door = Array.from({ length: peers }, () => new Map())
    this.unrequested = Array.from({ length: peers }, () => new Bucket(this.limits.unrequestedBlocks, now))
    this.fetched = Array.from({ length: peers }, () => new Set())
    this.pulled = Array.from({ length: peers }, () => 0)
    this.serve = Array.from({ length: peers }, () => new Bucket(this.limits.serve, now))
    this.requests = Array.from({ length: peers }, () => [])
    this.backlog = Array.from({ length: peers }, () => 0)
  }

  /** At most this many envelopes of a wake are looked at. */
  get wakeMaxEnvelopes(): number {
    return this.limits.wakeMaxEnvelopes
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
    if (!bucket) doors.set(cls, (bucket = new Bucket(this.limits[cls], this.now)))
    const ok = bucket.tryTakeMany(count, bytes)
    if (!ok) this.onThrottled({ peer, kind, why: 'rate' })
    return ok
  }

  /** This relay fetched the blocks of these digests from `peer`: each may come back once. */
  fetchedFrom(peer: number, digestsHex: readonly string[]): void {
    const set = this.fetched[peer]
    if (!set) return
    for (const d of digestsHex) {
      set.delete(d)
      set.add(d)
    }
    // The oldest asks go first: an answer that never came is asked again, of someone, at a later tick.
    for (const d of set) {
      if (set.size <= this.limits.maxAnswerCredit) break
      set.delete(d)
    }
  }

  /** This relay pulled rounds from `peer` (a sync): up to `blocks` of its next blocks are answers. */
  pulledFrom(peer: number, blocks: number): void {
    if (this.pulled[peer] === undefined) return
    this.pulled[peer] = Math.min(this.limits.maxAnswerCredit, (this.pulled[peer] as number) + blocks)
  }

  /**
   * Whether a peer's `blocks` message of `count` blocks may have any opened:
   * false (counted) when nothing was asked of it and its unrequested-block
   * budget is spent, and the message is dropped unread. An empty one passes:
   * it is the answer that ends a pull.
   */
  mayOpenBlocks(peer: number, count: number): boolean {
    const bucket = this.unrequested[peer]
    if (!bucket) return false
    if (count === 0 || (this.fetched[peer]?.size ?? 0) > 0 || (this.pulled[peer] ?? 0) > 0 || bucket.available().blocks > 0) return true
    this.onThrottled({ peer, kind: 'blocks', why: 'rate' })
    return false
  }

  /**
   * Whether to open (decode, verify) one block of a peer's `blocks` message,
   * by its digest: an answer to a fetch of that digest, else one of the
   * blocks of a pull, else one of its unrequested-block budget. The rest are
   * dropped unread (counted once per message): consensus tolerates loss,
   * sync fetches what is missing. Returns the test for one message.
   */
  blockGate(peer: number): (digestHex: string) => boolean {
    let throttled = false
    return (digestHex) => {
      const fetched = this.fetched[peer]
      const bucket = this.unrequested[peer]
      if (!fetched || !bucket) return false
      if (fetched.delete(digestHex)) return true
      if ((this.pulled[peer] as number) > 0) {
        this.pulled[peer] = (this.pulled[peer] as number) - 1
        return true
      }
      if (bucket.tryTakeMany(1, 0)) return true
      if (!throttled) this.onThrottled({ peer, kind: 'blocks', why: 'rate' })
      throttled = true
      return false
    }
  }

  /** Whether `bytes` more of the peer's frames may wait in the event queue (at most `limit` in all). */
  holdBacklog(peer: number, bytes: number, limit: number): boolean {
    const waiting = this.backlog[peer]
    if (waiting === undefined || waiting + bytes > limit) return false
    this.backlog[peer] = waiting + bytes
    return true
  }

  /** Bytes of a peer's frame that left the event queue. */
  releaseBacklog(peer: number, bytes: number): void {
    if (this.backlog[peer] !== undefined) this.backlog[peer] = Math.max(0, (this.backlog[peer] as number) - bytes)
  }

  /** Bytes of one peer's frames waiting in the event queue, or of all peers' (no peer given). */
  backlogBytes(peer?: number): number {
    if (peer !== undefined) return this.backlog[peer] ?? 0
    let n = 0
    for (const b of this.backlog) n += b
    return n
  }

  /**
   * Queues a request (sync, fetch, own-last-ask) or an ask (head-ask,
   * checkpoint-ask) of `peer` to run after the drain's other events; false
   * (counted) if its queue for that kind is full.
   */
  queueRequest(peer: number, kind: string, run: () => T): boolean {
    const q = this.requests[peer]
    const asks = classOf(kind) !== 'request'
    const limit = asks ? this.limits.maxQueuedAsks : this.limits.maxQueuedRequests
    if (!q || q.reduce((n, r) => n + (r.asks === asks ? 1 : 0), 0) >= limit) {
      this.onThrottled({ peer, kind, why: 'queue' })
      return false
    }
    q.push({ asks, run })
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
        const q = this.requests[(this.next + k) % n] as Array<{ run: () => T }>
        const r = q.shift()
        if (!r) continue
        each(r.run())
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
