import { clockInit, decode, decodeClock, encode, encodeClock, expect, type Clock } from '@stead/core'
import type { ClientStorage, StorageChange, StorageKey } from '../storage/types.ts'
import type { ChainPosition } from './quorum.ts'
import type { DraftPlaces } from '../space/draft-ids.ts'
import { decodeRelaySignatures, encodeRelaySignatures, type Certified } from '../peers/peer-messages.ts'

/** An attested commit as the client keeps it: enough to replay it exactly. */
export interface CommitRecord {
  readonly round: number
  readonly attestation: Uint8Array
  readonly frames: readonly Uint8Array[]
}

export interface AuthorState {
  /** Last sequence number this client signed in the space. */
  readonly seq: number
  /** That envelope's clock base and listed entries: the next one's clock follows from them. */
  readonly base: number
  readonly clock: Clock
  /** Whose sequence it is: a storage reused with another identity starts that identity's own. */
  readonly authorId?: string
}

/** Everything a client reloads on start. */
export interface Restored {
  readonly author: AuthorState
  readonly position: ChainPosition
  /** The replica's checkpoint (ReliableReplica.checkpoint()), if one was written. */
  readonly checkpoint: unknown
  /** Attested commits after the checkpoint, in the order applied. */
  readonly commits: CommitRecord[]
  /** Own envelopes not yet decided, in sequence order. */
  readonly outbox: Uint8Array[]
  /** Envelopes received from relays and not yet decided. */
  readonly inbox: Uint8Array[]
  /** What the drafts of the last signed envelopes were named once signed, oldest first (see ClientRecords.names). */
  readonly names: Array<{ readonly prefix: string; readonly places: DraftPlaces }>
  /** The certificate of the commit the stable state is at, if it had one (what peers that are behind are handed with the state). */
  readonly certified: Certified | undefined
}

/** Updates another tab forwarded into an envelope: its request id, and which of the envelope's safe groups are its. */
export interface ForwardedRequest {
  readonly id: string
  readonly safe: readonly number[]
}

/** A forwarded request as the leader stored it: the envelope that carried it. */
export interface StoredRequest extends ForwardedRequest {
  readonly seq: number
  readonly envelope: string
}

/** Forwarded requests remembered after their envelope is decided, so one sent again after a change of leader is not applied twice. */
const REQUESTS_KEPT = 1000
/** Own envelopes whose drafts' names are remembered (see ClientRecords.names): about as many keystrokes, each typed into its own envelope. */
const NAMES_KEPT = 1000

// Sequence numbers and commit counters are zero-padded so string order is numeric order.
const pad = (n: number): string => n.toString().padStart(16, '0')

/**
 * The client's records in a ClientStorage, under the space's prefix:
 *
 *   [space, 'meta', 'author' | 'position' | 'checkpoint' | 'certified']
 *   [space, 'commit', n]      attested commits applied since the checkpoint, in order
 *   [space, 'outbox', seq, id] own envelopes not yet decided (the id keeps apart envelopes of
 *                             identities that used this storage one after another, whose sequences overlap)
 *   [space, 'request', id]    an update another tab forwarded: the envelope that carried it (see tabs.ts)
 *   [space, 'inbox', idHex]   received envelopes not yet decided
 *   [space, 'names', seq]     what the drafts of own envelope seq were named once signed (see `names`)
 *
 * Values are msgpack (envelopes and attestations as the exact bytes that
 * were signed). Writes are batches the caller makes atomic.
 */
export class ClientRecords {
  private nextCommit = 0
  /** Stored forwarded requests by id, oldest first. */
  private readonly requests = new Map<string, StoredRequest>()
  /** Commit records stored since the last checkpoint: the next checkpoint deletes them. */
  private stored: number[] = []
  /** Envelopes in those records: what opening would replay. */
  private storedEnvelopes = 0
  /** Keys (padded sequence numbers) of the stored draft names, oldest first. */
  private readonly named = new Set<string>()

  readonly storage: ClientStorage
  private readonly space: string
  constructor(
    storage: ClientStorage,
    space: string,
  ) {
    this.storage = storage
    this.space = space
  }

  async restore(): Promise<Restored> {
    const s = this.space
    const [author, position, checkpoint, commits, outbox, requests, inbox, names, certified] = await Promise.all([
      this.storage.load([s, 'meta', 'author']),
      this.storage.load([s, 'meta', 'position']),
      this.storage.load([s, 'meta', 'checkpoint']),
      this.storage.loadRange([s, 'commit']),
      this.storage.loadRange([s, 'outbox']),
      this.storage.loadRange([s, 'request']),
      this.storage.loadRange([s, 'inbox']),
      this.storage.loadRange([s, 'names']),
      this.storage.load([s, 'meta', 'certified']),
    ])
    for (const e of names) this.named.add(e.key[2] as string)
    for (const r of requests.map((e) => decodeRequest(e.key[2] as string, e.value)).sort((a, b) => a.seq - b.seq)) this.requests.set(r.id, r)
    this.stored = commits.map((e) => Number(e.key[2]))
    this.nextCommit = (this.stored[this.stored.length - 1] ?? -1) + 1
    return {
      author: author ? decodeAuthor(author) : { seq: 0, base: 0, clock: clockInit() },
      position: position ? decodePosition(position) : { stableIndex: 0, lastRound: 0 },
      checkpoint: checkpoint && decode(checkpoint, 1024 * 1024 * 1024),
      commits: commits.map((e) => {
        const c = decodeCommit(e.value)
        this.storedEnvelopes += c.frames.length
        return c
      }),
      outbox: outbox.map((e) => e.value),
      inbox: inbox.map((e) => e.value),
      names: names.flatMap((e) => decodeNames(e.value) ?? []),
      certified: certified && decodeCertified(certified),
    }
  }

  /** The certificate of the commit the stable state is now at (undefined: it has none, after a jump by an unsigned delta). */
  certified(c: Certified | undefined): StorageChange {
    return { key: [this.space, 'meta', 'certified'], value: c && encode([c.attestation, encodeRelaySignatures(c.signatures)]) }
  }

  author(a: AuthorState): StorageChange {
    return { key: [this.space, 'meta', 'author'], value: encode([a.seq, encodeClock(a.clock), a.authorId ?? null, a.base]) }
  }

  /** A commit and the position it leads to: always written together. */
  commit(record: CommitRecord, position: ChainPosition): StorageChange[] {
    const n = this.nextCommit++
    this.stored.push(n)
    this.storedEnvelopes += record.frames.length
    return [
      { key: [this.space, 'commit', pad(n)], value: encode([record.round, record.attestation, record.frames]) },
      { key: [this.space, 'meta', 'position'], value: encode([position.stableIndex, position.lastRound]) },
    ]
  }

  /** Commits and envelopes stored since the last checkpoint. */
  get sinceCheckpoint(): { commits: number; envelopes: number } {
    return { commits: this.stored.length, envelopes: this.storedEnvelopes }
  }

  /** Replaces every stored commit with the replica's checkpoint at `position` (in the same atomic write as the last commit, or alone). */
  checkpoint(checkpoint: unknown, position: ChainPosition): StorageChange[] {
    const deletes = this.stored.map((n): StorageChange => ({ key: [this.space, 'commit', pad(n)], value: undefined }))
    this.stored = []
    this.storedEnvelopes = 0
    return [
      ...deletes,
      { key: [this.space, 'meta', 'checkpoint'], value: encode(checkpoint) },
      { key: [this.space, 'meta', 'position'], value: encode([position.stableIndex, position.lastRound]) },
    ]
  }

  /** A signed envelope, and the forwarded requests it carries (the oldest remembered ones are forgotten). */
  outboxPut(seq: number, frame: Uint8Array, envelope: string, requests: readonly ForwardedRequest[]): StorageChange[] {
    const put: StorageChange[] = [{ key: this.outboxKey(seq, envelope), value: frame }]
    for (const r of requests) {
      put.push({ key: [this.space, 'request', r.id], value: encode([seq, envelope, r.safe]) })
      this.requests.set(r.id, { ...r, seq, envelope })
    }
    for (const id of this.requests.keys()) {
      if (this.requests.size <= REQUESTS_KEPT) break
      this.requests.delete(id)
      put.push({ key: [this.space, 'request', id], value: undefined })
    }
    return put
  }

  /** The forwarded requests (of the last 1,000) an envelope carries: what its replacement carries on (see Outbox.replace). */
  requestsOf(envelope: string): ForwardedRequest[] {
    return [...this.requests.values()].filter((r) => r.envelope === envelope).map((r) => ({ id: r.id, safe: r.safe }))
  }

  /** The stored envelope a forwarded request went into, if it is one of the last 1,000. */
  request(id: string): StoredRequest | undefined {
    return this.requests.get(id)
  }

  /**
   * What the drafts of own envelope `seq` were named once signed (tags
   * `${prefix}:${n}`, see DraftIds.signedAs), kept for the last 1,000
   * envelopes that had drafts. An app may keep an anchor taken while the
   * element it names was an unsigned draft (an editor takes one after
   * every keystroke, and the draft is signed milliseconds later); the draft
   * id means nothing to anyone else, and nothing in the signed envelope
   * says which draft it was. With this record DraftIds still knows what
   * the draft became after a restart, so such an anchor resolves exactly;
   * one older than that falls back to its index (see anchors.ts).
   */
  names(seq: number, prefix: string, places: DraftPlaces): StorageChange[] {
    if (places.size === 0) return []
    const at = pad(seq)
    const put: StorageChange[] = [{ key: [this.space, 'names', at], value: encode([prefix, [...places].map(([draft, p]) => [draft, p.n, p.shift])]) }]
    this.named.delete(at)
    this.named.add(at)
    for (const old of this.named) {
      if (this.named.size <= NAMES_KEPT) break
      this.named.delete(old)
      put.push({ key: [this.space, 'names', old], value: undefined })
    }
    return put
  }

  outboxDelete(seq: number, envelope: string): StorageChange {
    return { key: this.outboxKey(seq, envelope), value: undefined }
  }

  inboxPut(idHex: string, frame: Uint8Array): StorageChange {
    return { key: [this.space, 'inbox', idHex], value: frame }
  }

  inboxDelete(idHex: string): StorageChange {
    return { key: [this.space, 'inbox', idHex], value: undefined }
  }

  private outboxKey(seq: number, envelope: string): StorageKey {
    return [this.space, 'outbox', pad(seq), envelope]
  }
}

function decodeAuthor(bytes: Uint8Array): AuthorState {
  // Records written before clocks had a base have three fields.
  const [seq, clock, authorId, base] = expect.array(decode(bytes), 'author', 4)
  return { seq: expect.uint(seq, 'author.seq'), base: base === undefined ? 0 : expect.uint(base, 'author.base'), clock: decodeClock(clock, 1_000_000), ...(typeof authorId === 'string' ? { authorId } : {}) }
}

function decodeRequest(id: string, bytes: Uint8Array): StoredRequest {
  const [seq, envelope, safe] = expect.array(decode(bytes), 'request', 3)
  return { id, seq: expect.uint(seq, 'request.seq'), envelope: expect.string(envelope, 'request.envelope', 64), safe: expect.array(safe, 'request.safe', 100_000).map((g) => expect.uint(g, 'request.safe[]')) }
}

/** A names record (see ClientRecords.names), or undefined if it is not one: they only help anchors, so a bad one is skipped, never fatal. */
function decodeNames(bytes: Uint8Array): { prefix: string; places: DraftPlaces } | undefined {
  try {
    const [prefix, entries] = expect.array(decode(bytes), 'names', 2)
    const places = new Map<string, { n: number; shift: number }>()
    for (const e of expect.array(entries, 'names.places', 1_000_000)) {
      const [draft, n, shift] = expect.array(e, 'names.place', 3)
      places.set(expect.string(draft, 'names.draft', 256), { n: expect.uint(n, 'names.n'), shift: expect.uint(shift, 'names.shift') })
    }
    return { prefix: expect.string(prefix, 'names.prefix', 64), places }
  } catch {
    return undefined
  }
}

function decodePosition(bytes: Uint8Array): ChainPosition {
  const [stableIndex, lastRound] = expect.array(decode(bytes), 'position', 2)
  return { stableIndex: expect.uint(stableIndex, 'stableIndex'), lastRound: expect.uint(lastRound, 'lastRound') }
}

function decodeCertified(bytes: Uint8Array): Certified {
  const [attestation, signatures] = expect.array(decode(bytes), 'certified', 2)
  return { attestation: expect.bytes(attestation, 'certified.attestation'), signatures: decodeRelaySignatures(signatures) }
}

function decodeCommit(bytes: Uint8Array): CommitRecord {
  const [round, attestation, frames] = expect.array(decode(bytes, 64 * 1024 * 1024), 'commit', 3)
  return {
    round: expect.uint(round, 'commit.round'),
    attestation: expect.bytes(attestation, 'commit.attestation'),
    frames: expect.array(frames, 'commit.frames', 1_000_000).map((f, i) => expect.bytes(f, `commit.frames[${i}]`)),
  }
}
