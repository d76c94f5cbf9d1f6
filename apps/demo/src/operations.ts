/**
 * This tab's own operations and what became of them. A regular update is
 * `pending` until the SDK stored it locally (`held` when an invariant keeps
 * it out of the value for now), then `stable` once the client has no
 * undecided update left (so this one is in the stable order too; a held
 * one the order rejected shows as a client error). A
 * safe update is `pending` until the relays committed or rejected it.
 */
import type { UpdateResult } from '@stead/client'

export type OperationState = 'pending' | 'stored' | 'held' | 'stable' | 'committed' | 'rejected' | 'failed'

export interface Operation {
  readonly id: number
  readonly label: string
  readonly safe: boolean
  readonly state: OperationState
  readonly startedAt: number
  /** Milliseconds from the call to its resolution. */
  readonly latency?: number
  /** Stable index of a committed safe update. */
  readonly index?: number
  /** Why a safe update was rejected (`invariant`, ...) or why the call failed. */
  readonly reason?: string
  readonly detail?: string
}

const MAX_KEPT = 50

/** The part of the client the log follows. */
export interface PendingSource {
  readonly status: { readonly pending: number }
  onStatus(listener: () => void): () => void
  /** Problems no promise reports, e.g. regular updates the audit refused. */
  onError(listener: (error: { readonly reason: string; readonly message: string }) => void): () => void
}

export class OperationLog {
  private ops: readonly Operation[] = []
  private nextId = 1
  private readonly listeners = new Set<() => void>()
  private client: PendingSource | null = null

  /** Follows the client's count of undecided updates, to tell when stored regular updates became stable. */
  follow(client: PendingSource): () => void {
    this.client = client
    this.markStable()
    const offStatus = client.onStatus(() => this.markStable())
    const offError = client.onError((err) => {
      this.put({ id: this.nextId++, label: 'client error', safe: false, state: 'failed', startedAt: performance.now(), reason: err.reason, detail: err.message })
    })
    return () => {
      offStatus()
      offError()
    }
  }

  private markStable(): void {
    if (!this.client || this.client.status.pending !== 0) return
    const stored = this.ops.filter((o) => o.state === 'stored' || o.state === 'held')
    for (const op of stored) this.put({ ...op, state: 'stable' })
  }

  /** Newest first. */
  get list(): readonly Operation[] {
    return this.ops
  }

  /** Latencies (ms) of the most recent settled safe updates, newest first. */
  safeLatencies(limit = 8): number[] {
    return this.ops.filter((o) => o.safe && o.latency !== undefined && (o.state === 'committed' || o.state === 'rejected')).slice(0, limit).map((o) => o.latency as number)
  }

  subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener)
    return () => this.listeners.delete(listener)
  }

  /** Records `run()`'s operation and follows its promise to the end. */
  track(label: string, safe: boolean, run: () => Promise<UpdateResult>): Promise<Operation> {
    const id = this.nextId++
    const startedAt = performance.now()
    this.put({ id, label, safe, state: 'pending', startedAt })
    let promise: Promise<UpdateResult>
    try {
      promise = run()
    } catch (err) {
      promise = Promise.reject(err)
    }
    return promise.then(
      (result) => {
        const op = this.settle(id, outcome(result, performance.now() - startedAt))
        this.markStable()
        return op
      },
      (err: unknown) => this.settle(id, { state: 'failed', reason: 'error', detail: messageOf(err) }),
    )
  }

  private settle(id: number, patch: Partial<Operation>): Operation {
    const op = this.ops.find((o) => o.id === id)
    const next = { ...(op as Operation), ...patch }
    this.put(next)
    return next
  }

  private put(op: Operation): void {
    const rest = this.ops.filter((o) => o.id !== op.id)
    this.ops = [op, ...rest].sort((a, b) => b.id - a.id).slice(0, MAX_KEPT)
    for (const l of this.listeners) l()
  }
}

/** What an error says, for a person: its message. */
export function messageOf(err: unknown): string {
  return err instanceof Error ? err.message : String(err)
}

function outcome(result: UpdateResult, latency: number): Partial<Operation> {
  switch (result.status) {
    case 'stored':
      return { state: 'stored', latency }
    case 'held':
      return { state: 'held', latency, reason: result.reason, detail: result.detail }
    case 'committed':
      return { state: 'committed', latency, index: result.index }
    case 'rejected':
      return { state: 'rejected', latency, reason: result.reason, ...(result.detail !== undefined ? { detail: String(result.detail) } : {}) }
    default:
      return { state: 'failed', reason: 'unknown-result', detail: JSON.stringify(result) }
  }
}
