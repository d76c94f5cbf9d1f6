import type { DeltaMode, HostClock, HostTimer, RelayMessage } from '@stead/core'
import type { CertifiedDelta } from '../runtime/client-reads.ts'

/** What a paced stream needs of the relay and the session around it. */
export interface PacedHost {
  readonly clock: HostClock
  /** The space's stable index here. */
  stableIndex(): number
  /**
   * The objects commits after `afterIndex` changed; undefined when the
   * relay no longer knows (its change log was dropped), or would read more
   * than `maxOps` ops to (a client that paces from far back, or over and
   * over, costs the relay no more than that per pace).
   */
  changedSince(afterIndex: number, maxOps: number): readonly string[] | undefined
  /**
   * A delta from `fromIndex` to the latest commit, with f+1 relays'
   * signatures on its attestation; `unavailable` when the relay keeps no
   * change log reaching back to `fromIndex`; undefined when the
   * signatures could not be had this time.
   */
  certifiedDelta(fromIndex: number, mode: DeltaMode): Promise<CertifiedDelta | 'unavailable' | undefined>
  send(message: RelayMessage): void
  /** Whether much is still queued towards the client (a delta then waits: the next one covers more). */
  backedUp(): boolean
  /**
   * Holds `bytes` more of the relay's memory budget for what the stream
   * tracks (negative: gives them back); false when the budget cannot
   * admit them (the stream then tracks less, and sends sooner).
   */
  hold(bytes: number): boolean
}

/** What tracking one object costs (its key, as UTF-16, and a map entry with its numbers), charged to the relay's budget. */
function trackedBytes(key: string): number {
  return 2 * key.length + 96
}

/** Objects whose first change time and μ a stream keeps: past it, it sends at once rather than track more. */
const MAX_TRACKED_OBJECTS = 1024
/** Ops of the change log a stream reads at most to find what changed (past it, the change counts as untracked: due at once). */
const MAX_OPS_READ = 4 * MAX_TRACKED_OBJECTS
/** Weight of a new sample in the moving estimate of μ (the paper's moving average over the last few). */
const MU_WEIGHT = 0.25

/**
 * A moving estimate of how long something takes: the paper's moving
 * average, plus twice the moving mean deviation (as TCP's retransmission
 * timer), so that a delivery slower than the average does not break the
 * bound.
 */
class MovingTime {
  private mean = 0
  private dev = 0
  private samples = 0

  add(ms: number): void {
    if (this.samples++ === 0) {
      this.mean = ms
      this.dev = ms / 2
      return
    }
    this.dev = this.dev * (1 - MU_WEIGHT) + Math.abs(ms - this.mean) * MU_WEIGHT
    this.mean = this.mean * (1 - MU_WEIGHT) + ms * MU_WEIGHT
  }

  get estimate(): number {
    return this.mean + 2 * this.dev
  }
}
/** Waiting for signatures that did not come (or for a client that reads): tried again after this long, then twice as long each time, up to a heartbeat. */
const RETRY_MS = 100
/** Deltas remembered until acknowledged. */
const MAX_UNACKED = 4
/** A space that does not change still gets a delta (empty) this often, so its client can tell a silent relay from a quiet space. */
export const PACED_HEARTBEAT_MS = 5_000

/**
 * BENDY's live stream for one client's paced subscription to one space.
 *
 * Instead of every envelope and commit, the client gets one delta at a
 * time, from the stable index it holds to the latest commit f+1 relays
 * attested alike, with each changed object as its ops or as its state by
 * the cost rule on the hot objects (the change log's). An object changed at
 * t_x must reach the client by t_x + δ: so a delta leaves at the earliest
 * t_x + δ − μ_x over the changed objects, μ_x being the moving estimate of
 * how long the deltas that carried x took from the moment the relay began
 * building them to the client's `applied` (the paper's coordination time:
 * propagate, then deploy). One delta is in flight at a time; the next
 * covers whatever changed meanwhile.
 */
export class PacedStream {
  readonly space: string
  readonly freshnessMs: number
  readonly mode: DeltaMode
  private readonly host: PacedHost
  /** The stable index the client holds (as of the last delta sent). */
  private sentIndex: number
  /** Changes noted up to this stable index. */
  private seenIndex: number
  /** Per object changed past sentIndex: when the relay learned of its first such change. */
  private readonly firstChange = new Map<string, number>()
  /** More objects changed than are tracked, or which is unknown: the earliest such time. */
  private untracked: number | undefined
  /** μ_x per object (least recently updated first). */
  private readonly mu = new Map<string, MovingTime>()
  /** μ over every delta: for objects without their own estimate yet. */
  private readonly muAll = new MovingTime()
  /** Deltas sent and not acknowledged yet, the newest last (a few: an acknowledgement may come after the next one left). */
  private readonly unacked: Array<{ readonly toIndex: number; readonly startedAt: number; readonly keys: readonly string[] }> = []
  /** How long the next retry waits: doubles while certifying fails, back to RETRY_MS once a delta leaves. */
  private retryMs = RETRY_MS
  private lastSentAt: number
  private timer: HostTimer | undefined
  private building = false
  private closed = false
  /** Bytes of the relay's budget held for firstChange and mu. */
  private held = 0

  constructor(space: string, fromIndex: number, freshnessMs: number, mode: DeltaMode, host: PacedHost) {
    this.space = space
    this.freshnessMs = freshnessMs
    this.mode = mode
    this.host = host
    this.sentIndex = this.seenIndex = fromIndex
    this.lastSentAt = host.clock.now()
    this.note()
    this.schedule()
  }

  /** The stable index the client stands at, as far as this stream knows (where a subscription taking over resumes). */
  get resumeIndex(): number {
    return this.sentIndex
  }

  /**
   * New commits of the space are durable here: note what changed, and when
   * it must reach the client. A commit that only parked envelopes leaves
   * the stable index as it was and changes the state all the same (the
   * envelopes it parked are part of it): it is due like a change.
   */
  committed(): void {
    if (this.closed) return
    if (!this.note()) this.untracked ??= this.host.clock.now()
    this.schedule()
  }

  /** Notes the objects commits changed since the last note; whether the stable index moved. */
  private note(): boolean {
    const index = this.host.stableIndex()
    if (index > this.seenIndex) {
      const now = this.host.clock.now()
      const keys = this.host.changedSince(this.seenIndex, MAX_OPS_READ)
      if (keys === undefined) this.untracked ??= now
      else {
        for (const key of keys) {
          if (this.firstChange.has(key)) continue
          if (this.firstChange.size >= MAX_TRACKED_OBJECTS || !this.hold(trackedBytes(key))) this.untracked ??= now
          else this.firstChange.set(key, now)
        }
      }
      this.seenIndex = index
      return true
    }
    return false
  }

  /** The client applied the delta that ended at `index`: the time it took feeds μ of the objects it carried. */
  applied(index: number): void {
    const at = this.unacked.findIndex((x) => x.toIndex === index)
    if (this.closed || at < 0) return
    const sent = this.unacked[at] as (typeof this.unacked)[number]
    // The client applies deltas in order: the ones before it were applied too (or never will be).
    this.unacked.splice(0, at + 1)
    this.learn(sent.keys, this.host.clock.now() - sent.startedAt)
    this.schedule()
  }

  /** μ_x for an object (the stream-wide estimate until the object has one). */
  muOf(key: string): number {
    return (this.mu.get(key) ?? this.muAll).estimate
  }

  close(): void {
    if (this.closed) return
    this.closed = true
    this.timer?.cancel()
    this.timer = undefined
    this.hold(-this.held)
    this.firstChange.clear()
    this.mu.clear()
  }

  /** Holds (or gives back) budget for what the stream tracks; false when it cannot. */
  private hold(bytes: number): boolean {
    if (bytes > 0 && !this.host.hold(bytes)) return false
    if (bytes < 0) this.host.hold(bytes)
    this.held += bytes
    return true
  }

  private learn(keys: readonly string[], ms: number): void {
    this.muAll.add(ms)
    for (const key of keys) {
      let m = this.mu.get(key)
      if (!m) {
        // Past the budget, an object goes by the stream's estimate.
        if (!this.hold(trackedBytes(key))) continue
        m = new MovingTime()
      }
      m.add(ms)
      this.mu.delete(key)
      this.mu.set(key, m)
    }
    for (const key of this.mu.keys()) {
      if (this.mu.size <= MAX_TRACKED_OBJECTS) break
      this.mu.delete(key)
      this.hold(-trackedBytes(key))
    }
  }

  /** When the next delta must leave: the earliest t_x + δ − μ_x, a heartbeat for a quiet space, or undefined while one is being built. */
  private deadline(): number {
    const slack = (mu: number): number => Math.max(0, this.freshnessMs - mu)
    let due = this.untracked === undefined ? Number.POSITIVE_INFINITY : this.untracked + slack(this.maxMu())
    for (const [key, at] of this.firstChange) due = Math.min(due, at + slack(this.muOf(key)))
    // A delta in flight and not applied after δ counts as lost: the next one covers it.
    const newest = this.unacked[this.unacked.length - 1]
    if (newest) due = Math.max(due, newest.startedAt + this.freshnessMs)
    return Math.min(due, this.lastSentAt + Math.max(PACED_HEARTBEAT_MS, this.freshnessMs))
  }

  private maxMu(): number {
    let max = this.muAll.estimate
    for (const m of this.mu.values()) max = Math.max(max, m.estimate)
    return max
  }

  private schedule(): void {
    if (this.closed || this.building) return
    this.timer?.cancel()
    const wait = Math.max(0, this.deadline() - this.host.clock.now())
    this.timer = this.host.clock.setTimer(wait, () => {
      this.timer = undefined
      void this.send()
    })
    this.timer.unref?.()
  }

  private retry(): void {
    const wait = this.retryMs
    this.retryMs = Math.min(2 * this.retryMs, Math.max(PACED_HEARTBEAT_MS, this.freshnessMs))
    this.timer = this.host.clock.setTimer(wait, () => {
      this.timer = undefined
      void this.send()
    })
    this.timer.unref?.()
  }

  private async send(): Promise<void> {
    if (this.closed || this.building) return
    if (this.host.backedUp()) return this.retry()
    // Nothing was ever committed (head 0 has no certificate): nothing the client misses, nothing to send until there is.
    if (this.host.stableIndex() === 0) {
      this.lastSentAt = this.host.clock.now()
      this.untracked = undefined
      for (const key of this.firstChange.keys()) this.hold(-trackedBytes(key))
      this.firstChange.clear()
      return this.schedule()
    }
    this.building = true
    const startedAt = this.host.clock.now()
    let built: CertifiedDelta | 'unavailable' | undefined
    try {
      built = await this.host.certifiedDelta(this.sentIndex, this.mode)
    } catch {
      // A store read failed: the next try may fare better, and the client keeps what it has meanwhile.
      built = undefined
    } finally {
      this.building = false
    }
    if (this.closed) return
    if (built === 'unavailable') {
      this.close()
      this.host.send({ type: 'unpaced', space: this.space, detail: `this relay cannot pace ${this.space} from stable index ${this.sentIndex}: its change log does not reach back there, or the delta would be too large; subscribe instead` })
      return
    }
    if (!built || built.toIndex < this.sentIndex) return this.retry()
    const carried = [...this.firstChange.keys()]
    this.host.send({ type: 'delta', space: this.space, delta: built.delta, attestation: built.attestation, sigs: built.sigs })
    this.unacked.push({ toIndex: built.toIndex, startedAt, keys: carried })
    if (this.unacked.length > MAX_UNACKED) this.unacked.shift()
    this.retryMs = RETRY_MS
    this.lastSentAt = startedAt
    this.sentIndex = built.toIndex
    // What changed after the delta's end still waits, with the times it was first seen.
    const after = built.toIndex >= this.seenIndex ? [] : this.host.changedSince(built.toIndex, MAX_OPS_READ)
    // Which of them changed again is unknown: the earliest of their times stands for all of them.
    if (after === undefined) for (const at of this.firstChange.values()) this.untracked = Math.min(this.untracked ?? at, at)
    const later = new Set(after ?? [])
    for (const key of carried) {
      if (later.has(key)) continue
      this.firstChange.delete(key)
      this.hold(-trackedBytes(key))
    }
    if (built.toIndex >= this.seenIndex) this.untracked = undefined
    this.seenIndex = Math.max(this.seenIndex, built.toIndex)
    this.schedule()
  }
}
