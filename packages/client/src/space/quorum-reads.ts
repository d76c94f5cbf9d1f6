import { SteadError, type HostClock } from '@stead/core'
import { ClosedError } from '../errors.ts'
import { MAX_TIMER_MS } from '../options.ts'
import type { Upstream } from './space.ts'
import type { WaitOptions } from '../types.ts'
import { bounded } from '../wait.ts'

/** How long a quorum read waits for this replica to catch up before it takes the object's proven state from a relay. */
const QUORUM_CATCH_UP_MS = 500

/** What a quorum read needs of its space. */
export interface QuorumReadPort {
  readonly clock: HostClock
  /** Asked at each use: a tab taking over the lead replaces it, even during a read. */
  upstream(): Pick<Upstream, 'quorumIndex' | 'stableObject'>
  /** Where this replica's commit chain stands. */
  stableIndex(): number
  /** Resolves once `done()` holds, checked at each progress of the space; ClosedError when it closes. */
  until(done: () => boolean, options: WaitOptions, what: string): Promise<void>
  /** `p`, or ClosedError as soon as the space closes. */
  whileOpen<T>(p: Promise<T>): Promise<T>
}

/**
 * Linearizable reads of one space (`readStable` with `quorum`): the
 * highest head of 2f+1 relays, reached by this replica or, if it lags, by
 * one object's proven state from a relay. Reads here never go back: none
 * returns an older index than a proven state an earlier one returned.
 */
export class QuorumReads {
  /** The highest stable index a read returned a proven object state at. */
  private provenIndex = 0
  private readonly port: QuorumReadPort

  constructor(port: QuorumReadPort) {
    this.port = port
  }

  /**
   * `key`'s stable value from a proven state (`{ value }`) when the
   * replica did not catch up in time; undefined once the replica reached
   * the quorum's index (its own stable value is the answer then).
   */
  async read(key: string, options: WaitOptions): Promise<{ value: unknown } | undefined> {
    const { clock } = this.port
    const wait = { timeoutMs: options.timeoutMs ?? 10_000, ...(options.signal ? { signal: options.signal } : {}) }
    const started = clock.now()
    // Never below what an earlier read here returned from a proven state: reads do not go back.
    const target = Math.max(this.provenIndex, await bounded(clock, this.port.upstream().quorumIndex(Math.min(wait.timeoutMs, MAX_TIMER_MS)), wait, 'a quorum of relay heads'))
    const left = (): number => Math.max(0, wait.timeoutMs - (clock.now() - started))
    const reached = (): boolean => this.port.stableIndex() >= target
    // A replica a commit or two behind gets there in moments; one far behind (back from offline)
    // would replay every commit since, where one object's proven state costs a Merkle path.
    const caughtUp = await this.port.until(reached, { ...wait, timeoutMs: Math.min(left(), QUORUM_CATCH_UP_MS) }, `stable index ${target}`).then(
      () => true,
      (err: unknown) => {
        if (err instanceof SteadError && err.reason === 'timeout') return false
        throw err
      },
    )
    if (caughtUp) return undefined
    const proven = await this.port.whileOpen(bounded(clock, this.port.upstream().stableObject(key, target, Math.min(left(), MAX_TIMER_MS)), { ...wait, timeoutMs: left() }, `${key}'s proven state`)).catch((err: unknown) => {
      // No proof to be had (no fetch, no relay could give one, out of time): wait for the replica.
      if (err instanceof ClosedError || (err instanceof SteadError && err.reason === 'aborted')) throw err
      return undefined
    })
    if (proven && this.port.stableIndex() < proven.index) {
      this.provenIndex = Math.max(this.provenIndex, proven.index)
      return { value: proven.value }
    }
    await this.port.until(reached, { ...wait, timeoutMs: left() }, `stable index ${target}`)
    return undefined
  }
}
