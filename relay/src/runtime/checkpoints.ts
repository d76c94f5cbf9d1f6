import { auditStateHash, compareKeys, decodeAuditState, encodeAuditState, toHex, type AuditState, type Envelope, type Signed } from '@stead/core'
import type { Logger } from 'pino'
import {
  CheckpointFetch,
  decodeManifest,
  encodeManifest,
  isCheckpointCommit,
  signStatement,
  type CertifiedCheckpoint,
  type CommitRecord,
  type Committee,
  type FetchedCheckpoint,
  type Message,
  type PartRequest,
  type SyncCrypto,
} from '../consensus/index.ts'
import type { HostClock, HostTimer } from '@stead/core'
import type { CheckpointWrite, RelayStore } from '../store/store.ts'

/** Bytes of space states per checkpoint part: a mesh frame holds 64 MiB at most. */
const PART_BYTES = 8 * 1024 * 1024
/** A fetch that made no progress this long asks every peer for statements again. */
const FETCH_RETRY_MS = 5_000
/**
 * A peer gets at most one part (up to PART_BYTES read from the store and
 * sent) per this interval: a liar asking over and over would otherwise
 * make us read and send 8 MiB per 20-byte request. An honest fetcher asks
 * for the next part when the last one came, so it is slowed at most to
 * 80 MiB a second.
 */
const SERVE_INTERVAL_MS = 100

/** A checkpoint fetched from peers, each space's state decoded and checked. */
export type FetchedRelayCheckpoint = FetchedCheckpoint<{ readonly state: AuditState<Envelope>; readonly bytes: Uint8Array }>

/** What the checkpoints need of the relay around them. */
export interface CheckpointHost {
  /** Every space's state hash, latest attestation's round and starter (see SpaceQuota), as the audit leaves them after the commit just made. */
  spaces(): Array<{ readonly space: string; readonly stateHash: Uint8Array; readonly lastAttested: number; readonly starter?: string }>
  /** A space's audit state as the audit leaves it after the commit just made. */
  auditState(space: string): AuditState<Envelope>
  send(to: number, message: Message): void
  broadcast(message: Message): void
  /** Opens a parked envelope's signed bytes from a peer's checkpoint (throws SteadError on bytes that are not one). */
  openEnvelope(signed: Signed): Envelope
  /** A checkpoint was fetched and checked: start the relay over from it. */
  install(checkpoint: FetchedRelayCheckpoint): void
}

export interface CheckpointOptions {
  readonly committee: Committee
  readonly me: number
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  /** The cluster's checkpointRounds. */
  readonly every: number
  readonly gcDepth: number
  readonly log: Logger
  readonly clock: HostClock
  readonly host: CheckpointHost
}

/**
 * A relay's checkpoints (see consensus/checkpoint.ts): takes one at every
 * checkpoint commit, serves the latest to peers that ask, and, when this
 * relay fell behind past its peers' retention, fetches one they vouch for
 * and hands it to the relay to start over from.
 */
export class RelayCheckpoints {
  private readonly o: CheckpointOptions
  private store!: RelayStore
  /** The commit records of the last GC window, oldest first: what a checkpoint carries for the core. */
  private recent: CommitRecord[] = []
  private lastAnchor = 0
  /** See heldRound. */
  private held = -1
  /** Each space's state hash (hex) in the latest checkpoint: a space still there keeps its stored state. */
  private readonly stored = new Map<string, string>()
  /** The latest checkpoint's manifest, decoded once for serving its parts. */
  private served: { readonly anchorRound: number; readonly spaces: readonly string[] } | undefined
  /** When each peer was last served a part, and the one request of its that waits for SERVE_INTERVAL_MS to pass. */
  private readonly servedAt = new Map<number, number>()
  private readonly waiting = new Map<number, { anchorRound: number; from: number; timer: HostTimer }>()
  private fetching: { readonly fetch: CheckpointFetch<{ state: AuditState<Envelope>; bytes: Uint8Array }>; timer: HostTimer; progress: number } | undefined

  constructor(options: CheckpointOptions) {
    this.o = options
  }

  /** The round of the latest checkpoint this relay took or installed (-1: none). */
  get heldRound(): number {
    return this.held
  }

  /** (Re)starts from what the store holds: its latest checkpoint and the recovered commit records. */
  load(store: RelayStore, committedRound: number, commits: readonly CommitRecord[]): void {
    this.store = store
    this.lastAnchor = committedRound
    this.recent = commits.filter((c) => c.anchorRound > committedRound - this.o.gcDepth)
    this.stored.clear()
    this.served = undefined
    const head = store.checkpoint()
    this.held = head?.anchorRound ?? -1
    if (head) for (const s of decodeManifest(head.manifest).spaces) this.stored.set(s.space, toHex(s.stateHash))
  }

  stop(): void {
    if (this.fetching) this.fetching.timer.cancel()
    this.fetching = undefined
    for (const w of this.waiting.values()) w.timer.cancel()
    this.waiting.clear()
  }

  /** A commit record the core persisted (before the commit it records is audited). */
  recorded(record: CommitRecord): void {
    this.recent.push(record)
    const from = record.anchorRound - this.o.gcDepth
    while ((this.recent[0]?.anchorRound ?? Infinity) <= from) this.recent.shift()
  }

  /**
   * After auditing the commit at `anchorRound`: the checkpoint to write if
   * this commit is a checkpoint commit, merged into `pending` (an earlier
   * checkpoint of the same write, whose states it must keep).
   */
  afterCommit(anchorRound: number, pending: CheckpointWrite | undefined, epochEnds = false): CheckpointWrite | undefined {
    const previous = this.lastAnchor
    this.lastAnchor = anchorRound
    // An epoch's last commit is always a checkpoint: the state the next epoch starts from, which its certificate names.
    if (!epochEnds && !isCheckpointCommit(previous, anchorRound, this.o.every)) return pending
    const sha256 = (b: Uint8Array) => this.o.crypto.sha256(b)
    const spaces = this.o.host.spaces().sort((a, b) => compareKeys(a.space, b.space))
    const states = new Map((pending?.states ?? []).map((s) => [s.space, s.bytes]))
    for (const s of spaces) {
      const hex = toHex(s.stateHash)
      if (this.stored.get(s.space) === hex) continue
      this.stored.set(s.space, hex)
      states.set(s.space, encodeAuditState(this.o.host.auditState(s.space)))
    }
    const manifest = encodeManifest({ anchorRound, commits: this.recent, spaces })
    const statement = signStatement(this.o.crypto, this.o.secretKey, this.o.me, anchorRound, sha256(manifest))
    this.served = undefined
    this.held = anchorRound
    return { anchorRound, statement: statement.signed, manifest, states: [...states].map(([space, bytes]) => ({ space, bytes })) }
  }

  /** Handles the checkpoint messages of the mesh; false for every other message. */
  onMessage(from: number, m: Message): boolean {
    switch (m.kind) {
      case 'checkpoint-ask': {
        const head = this.store.checkpoint()
        if (!head) return true
        // Signed now, as this epoch's relay `me`: the stored statement may be of an epoch before, under another index or key.
        const statement = signStatement(this.o.crypto, this.o.secretKey, this.o.me, head.anchorRound, this.o.crypto.sha256(head.manifest))
        this.o.host.send(from, { kind: 'checkpoint', statement })
        return true
      }
      case 'checkpoint-get':
        this.serveSoon(from, m.anchorRound, m.from)
        return true
      case 'checkpoint': {
        const request = this.fetching?.fetch.statement(m.statement)
        if (request) this.request(request)
        return true
      }
      case 'checkpoint-part': {
        if (!this.fetching) return true
        const faults = this.fetching.fetch.faults.length
        const outcome = this.fetching.fetch.part(from, m.part)
        for (const f of this.fetching.fetch.faults.slice(faults)) this.o.log.warn({ peer: f.relay, reason: f.reason }, 'a peer served a checkpoint that f+1 relays do not vouch for')
        if (outcome.done) {
          const fetched = outcome.done
          this.stop()
          const vouched = fetched.statements.length > this.o.committee.f ? 'f+1 relays vouch for' : 'the epoch certificate names'
          this.o.log.info({ round: fetched.manifest.anchorRound, spaces: fetched.spaces.length, vouchers: fetched.statements.map((s) => s.author) }, `fetched a checkpoint ${vouched}`)
          this.o.host.install(fetched)
        } else if (outcome.request) this.request(outcome.request)
        else if (outcome.askAgain) this.o.host.broadcast({ kind: 'checkpoint-ask' })
        return true
      }
      default:
        return false
    }
  }

  /**
   * Peers no longer keep the blocks this relay needs: fetch a checkpoint
   * newer than `committedRound`. Asks every peer for its statement, and
   * again while no part comes for a while.
   */
  behind(committedRound: number): void {
    if (this.fetching) return
    this.o.log.warn({ committedRound }, 'peers no longer keep the blocks this relay needs: fetching a checkpoint they vouch for')
    this.fetch(committedRound)
  }

  /**
   * This relay is in an epoch whose starting state it does not hold (it
   * joined the committee, or it was behind when the epoch before ended):
   * fetch the checkpoint the epoch's certificate names (`digest`: from any
   * peer that holds it), or a later one f+1 of the committee vouch for.
   */
  joining(startRound: number, digest: Uint8Array | undefined): void {
    if (this.fetching) return
    this.o.log.info({ startRound }, 'fetching the state this epoch started from: the checkpoint its certificate names, or a later one f+1 of the committee vouch for')
    this.fetch(startRound - 1, digest && { anchorRound: startRound, digest })
  }

  private fetch(committedRound: number, certified?: CertifiedCheckpoint): void {
    const open = (bytes: Uint8Array) => {
      const state = decodeAuditState(bytes, (signed) => this.o.host.openEnvelope(signed))
      return { state: { state, bytes }, space: state.space, hash: auditStateHash((b) => this.o.crypto.sha256(b), state) }
    }
    const fetch = new CheckpointFetch(this.o.committee, (b) => this.o.crypto.sha256(b), committedRound, open, certified)
    const retry = (): void => {
      if (!this.fetching) return
      if (this.fetching.progress === 0) {
        fetch.restart()
        this.o.host.broadcast({ kind: 'checkpoint-ask' })
      }
      this.fetching.progress = 0
      this.fetching.timer = this.o.clock.setTimer(FETCH_RETRY_MS, retry)
    }
    this.fetching = { fetch, timer: this.o.clock.setTimer(FETCH_RETRY_MS, retry), progress: 0 }
    this.o.host.broadcast({ kind: 'checkpoint-ask' })
  }

  private request(r: PartRequest): void {
    if (this.fetching) this.fetching.progress++
    this.o.host.send(r.to, { kind: 'checkpoint-get', anchorRound: r.anchorRound, from: r.from })
  }

  /**
   * Serves a part now, or once SERVE_INTERVAL_MS has passed since the last
   * one this peer got. A peer asking faster replaces its waiting request:
   * it is served as many parts as an honest fetcher, however much it asks.
   */
  private serveSoon(to: number, anchorRound: number, from: number): void {
    const now = this.o.clock.now()
    const wait = (this.servedAt.get(to) ?? -Infinity) + SERVE_INTERVAL_MS - now
    const pending = this.waiting.get(to)
    if (wait <= 0 && !pending) {
      this.servedAt.set(to, now)
      this.serve(to, anchorRound, from)
      return
    }
    if (pending) {
      pending.anchorRound = anchorRound
      pending.from = from
      return
    }
    const timer = this.o.clock.setTimer(wait, () => {
      const w = this.waiting.get(to)
      this.waiting.delete(to)
      if (!w) return
      this.servedAt.set(to, this.o.clock.now())
      this.serve(to, w.anchorRound, w.from)
    })
    this.waiting.set(to, { anchorRound, from, timer })
  }

  private serve(to: number, anchorRound: number, from: number): void {
    const head = this.store.checkpoint()
    if (head && this.served?.anchorRound !== head.anchorRound) this.served = { anchorRound: head.anchorRound, spaces: decodeManifest(head.manifest).spaces.map((s) => s.space) }
    const states = head && this.served ? this.store.checkpointPart(anchorRound, this.served.spaces.slice(from), PART_BYTES) : undefined
    if (!head || !states) {
      this.o.host.send(to, { kind: 'checkpoint-part', part: { anchorRound, from, held: false, manifest: null, states: [] } })
      return
    }
    this.o.host.send(to, { kind: 'checkpoint-part', part: { anchorRound, from, held: true, manifest: from === 0 ? head.manifest : null, states } })
  }
}
