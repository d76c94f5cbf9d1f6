import { ChangeLog, decodeStateDelta, encodeStateDelta, type DeltaMode } from '../src/delta.ts'
import type { Envelope } from '../src/envelope.ts'
import { ReliableReplica, StableAudit } from '../src/replica.ts'

/**
 * Replicas that committed `envs` up to `half` and caught up with the rest
 * by a delta a relay built, one per delta mode that served one (a mode may
 * decline: the log does not reach back). Throws if a delta fails to verify
 * against the relay's state hash.
 */
export function caughtUpByDelta(space: string, envs: readonly Envelope[], half: number, sha: (b: Uint8Array) => Uint8Array, open: (signed: { bytes: Uint8Array; sig: Uint8Array }) => Envelope): Array<{ mode: DeltaMode; replica: ReliableReplica }> {
  const out: Array<{ mode: DeltaMode; replica: ReliableReplica }> = []
  for (const mode of ['ops', 'state', 'adaptive'] as const) {
    const relay = new StableAudit({ space })
    relay.commit(envs.slice(0, half), 1)
    const behind = new ReliableReplica({ space })
    behind.commit(envs.slice(0, half), 1)
    const log = new ChangeLog()
    log.record(relay.stableIndex, relay.commit(envs.slice(half), 2))
    const delta = log.delta(relay, behind.stableIndex, mode)
    if (!delta) continue
    const ok = behind.verifyDelta(sha, decodeStateDelta(encodeStateDelta(delta), open), relay.stableHash(sha))
    if ('problem' in ok) throw new Error(`${mode}: ${ok.problem}`)
    behind.applyDelta(sha, ok, 2)
    out.push({ mode, replica: behind })
  }
  return out
}
