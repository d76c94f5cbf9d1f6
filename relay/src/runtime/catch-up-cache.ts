import { ChangeLog, encodeAuditState, encodeStateDelta, type CommitResult, type DeltaMode, type Signed, type StableAudit } from '@stead/core'

/** Bytes of served audit states kept encoded (see snapshot), oldest dropped first. */
const SERVED_STATES_BYTES = 32 * 1024 * 1024
/** How many bytes of recent commits each space's change log keeps for catch-up deltas (see ChangeLog's charge). */
const CHANGE_LOG_BYTES = 2 * 1024 * 1024
/** A change log holding less than this leaves memory with its space's replica. */
const SHORT_CHANGE_LOG_BYTES = 64 * 1024
/** What a change log costs besides the commits it holds: its Space-Saving tracker and arrays (measured: about 1.9 KiB). */
const CHANGE_LOG_OVERHEAD_BYTES = 2 * 1024
/** Spaces whose last paced delta stays built (each at most what a delta of its change log weighs). */
const PACED_DELTAS_KEPT = 64
/** The change logs of all spaces together: past it, those of the spaces quiet longest are dropped (their clients follow commits). */
const CHANGE_LOGS_BYTES = 64 * 1024 * 1024

/** The commit a space's replica stands at: what what is served is the state after, signed by this relay. */
export interface AttestedPoint {
  readonly round: number
  readonly index: number
  readonly attestation: Signed
}

/**
 * What a relay serves clients that start or come back: a space's audit
 * state (a bootstrap snapshot) and catch-up deltas from its recent commits
 * (BENDY: each object as ops or as state), each built once per commit for
 * all the clients that ask, within byte budgets for the whole relay.
 */
export class CatchUpCache {
  /** The audit states served last, by space, with the round they are the state after (most recently served last). */
  private readonly states = new Map<string, { readonly round: number; readonly state: Uint8Array }>()
  /** Each space's recent commits as what they changed (least recently fed first). */
  private readonly logs = new Map<string, ChangeLog>()
  private logBytes = 0
  /** The delta served last per space, by (from, mode, round); undefined when the commits were the cheaper catch-up. */
  private readonly deltas = new Map<string, { readonly key: string; readonly found: { attestation: Signed; delta: Uint8Array } | undefined }>()
  /** The paced delta built last per space (least recently built first). */
  private readonly paced = new Map<string, { readonly key: string; readonly bytes: Uint8Array }>()

  /** A space's audit state at `at` (its replica's), encoded once per commit. */
  snapshot(space: string, replica: StableAudit, at: AttestedPoint): { attestation: Signed; state: Uint8Array } {
    const cached = this.states.get(space)
    if (cached?.round === at.round) return { attestation: at.attestation, state: cached.state }
    const state = encodeAuditState(replica.auditState())
    this.states.delete(space)
    this.states.set(space, { round: at.round, state })
    let bytes = 0
    for (const x of this.states.values()) bytes += x.state.length
    for (const [name, x] of this.states) {
      if (bytes <= SERVED_STATES_BYTES) break
      this.states.delete(name)
      bytes -= x.state.length
    }
    return { attestation: at.attestation, state }
  }

  /**
   * What changed from stable index `fromIndex` to `at` (the replica's
   * position), or undefined when the change log does not reach back that far,
   * or replaying the commits costs less (BENDY's rule on the whole range; a
   * forced mode is served as asked).
   */
  delta(space: string, replica: StableAudit, at: AttestedPoint, fromIndex: number, mode: DeltaMode): { attestation: Signed; delta: Uint8Array } | undefined {
    const log = this.logs.get(space)
    if (!log || at.index !== replica.stableIndex) return undefined
    // Clients that come back together ask for the same delta: built once per commit.
    const key = `${fromIndex}:${mode}:${at.round}`
    const cached = this.deltas.get(space)
    if (cached?.key === key) return cached.found
    const delta = log.delta(replica, fromIndex, mode)
    const bytes = delta && encodeStateDelta(delta)
    const pays = mode !== 'adaptive' || (bytes !== undefined && bytes.length <= log.replayBytes(fromIndex))
    const found = bytes && pays ? { attestation: at.attestation, delta: bytes } : undefined
    this.deltas.set(space, { key, found })
    return found
  }

  /**
   * What changed from stable index `fromIndex` to the replica's position,
   * in `mode`, for a paced subscription (built once per position for all
   * the paced clients that stand at the same index); undefined when the
   * change log does not reach back that far.
   */
  pacedDelta(space: string, replica: StableAudit, fromIndex: number, mode: DeltaMode): Uint8Array | undefined {
    const log = this.logs.get(space)
    if (!log) return undefined
    const key = `paced:${fromIndex}:${mode}:${replica.stableIndex}`
    const cached = this.paced.get(space)
    if (cached?.key === key) return cached.bytes
    const delta = log.delta(replica, fromIndex, mode)
    const bytes = delta && encodeStateDelta(delta)
    this.paced.delete(space)
    if (bytes) this.paced.set(space, { key, bytes })
    for (const [name] of this.paced) {
      if (this.paced.size <= PACED_DELTAS_KEPT) break
      this.paced.delete(name)
    }
    return bytes
  }

  /** The objects a space's commits after `afterIndex` changed, or undefined when its change log does not reach back there (or that would read more than `maxOps` ops). */
  changedKeys(space: string, afterIndex: number, maxOps: number): string[] | undefined {
    return this.logs.get(space)?.changedKeys(afterIndex, maxOps)
  }

  /** Feeds a space's change log one commit, within the relay-wide budget: the logs of the spaces that went longest without a commit go first. */
  record(space: string, fromIndex: number, result: CommitResult): void {
    const log = this.logs.get(space) ?? new ChangeLog({ maxBytes: CHANGE_LOG_BYTES })
    this.drop(space)
    log.record(fromIndex, result)
    this.logs.set(space, log)
    this.logBytes += cost(log)
    for (const [name] of this.logs) {
      if (this.logBytes <= CHANGE_LOGS_BYTES || name === space) break
      this.drop(name)
    }
  }

  /** The space's replica left memory: its served state goes, and a short log (which saves a client little over replaying commits) with it. */
  evicted(space: string): void {
    this.states.delete(space)
    if ((this.logs.get(space)?.bytes ?? 0) < SHORT_CHANGE_LOG_BYTES) this.drop(space)
  }

  /** The relay started over (a checkpoint): nothing served before holds. */
  clear(): void {
    this.states.clear()
    this.logs.clear()
    this.deltas.clear()
    this.paced.clear()
    this.logBytes = 0
  }

  private drop(space: string): void {
    const log = this.logs.get(space)
    this.deltas.delete(space)
    this.paced.delete(space)
    if (!log) return
    this.logs.delete(space)
    this.logBytes -= cost(log)
  }
}

function cost(log: ChangeLog): number {
  return log.bytes + CHANGE_LOG_OVERHEAD_BYTES
}
