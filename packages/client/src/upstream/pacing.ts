import {
  decodeAttestation,
  decodeStateDelta,
  type Attestation,
  type Crypto,
  type DeltaMode,
  type ReliableReplica,
  type RelayMessage,
  type VerifiedDelta,
} from '@stead/core'
import type { ClusterDescriptor } from '../transport/cluster.ts'
import { openTrusted } from './trusted.ts'

/** How a space follows its relays: every envelope and commit, or deltas at a freshness bound (BENDY's live stream). */
export interface Freshness {
  /** How late, at most, a committed update of another client may reach this one, in ms. */
  readonly ms: number
  /** How changed objects travel: ops, state, or each the cheaper way (default). */
  readonly mode?: DeltaMode
}

/** A relay sends a paced space a delta at least this often (an empty one when nothing changed): relay/src/api/paced-stream.ts. */
const RELAY_HEARTBEAT_MS = 5_000
/**
 * A paced delta moves the stable state without a commit to store: the
 * space's checkpoint (its whole state) is written at most this often
 * then, not with every delta; a restart in between catches up from the
 * relays, and a commit or a close writes it at once.
 */
const SAVE_EVERY_MS = 10_000
/** After a relay could not pace the space (`unpaced`), or a delta would have decided one of this client's own envelopes, it follows commits this long before pacing again. */
const COOLDOWN_MS = 30_000

/**
 * When a space is paced. A client paces only while it reads: with
 * updates of its own undecided (their outcomes come with the commits),
 * with tabs following it (they replay every commit), while it starts from
 * a snapshot or catches up, and for a while after the relay could not
 * pace it, it follows every envelope and commit.
 */
export class Pacing {
  private wanted: Freshness | undefined
  private cooldownUntil = 0
  /** Whether the space's subscriptions are paced now. */
  on = false
  /** When the source last sent a delta (or the space began pacing). */
  private heardAt = 0
  /** The stable index the source was last asked to pace from. */
  pacedFrom: number | undefined
  /** Deltas are checked and applied one at a time, in the order they came. */
  private turn: Promise<void> = Promise.resolve()

  /** When the space's checkpoint was last written, and whether a delta moved the state since (see SAVE_EVERY_MS). */
  private savedAt = Number.NEGATIVE_INFINITY
  unsaved = false

  /** Whether a delta applied at `now` should write the checkpoint. */
  saveDue(now: number): boolean {
    return now - this.savedAt >= SAVE_EVERY_MS
  }

  /** The checkpoint was written at `now` (or is stale from now on: `saved` false). */
  stored(saved: boolean, now: number): void {
    if (saved) this.savedAt = now
    this.unsaved = !saved
  }

  /** Runs `step` after every step queued before it. */
  inTurn(step: () => Promise<void>): Promise<void> {
    this.turn = this.turn.then(step, step)
    return this.turn
  }

  get freshness(): Freshness | undefined {
    return this.wanted
  }

  set(freshness: Freshness | undefined): void {
    this.wanted = freshness
  }

  /** Whether the space should be paced now, given whether it is `busy` (see the class comment). */
  due(now: number, busy: boolean): boolean {
    return this.wanted !== undefined && !busy && now >= this.cooldownUntil
  }

  /** Pacing starts or stops: a paced source owes a delta from now. */
  switched(on: boolean, now: number): void {
    this.on = on
    this.heardAt = this.checkedAt = now
    this.reported = undefined
  }

  /** Follows commits for a while (see COOLDOWN_MS). */
  coolDown(now: number): void {
    this.cooldownUntil = now + COOLDOWN_MS
  }

  heard(now: number): void {
    this.heardAt = now
  }

  /** Whether the paced source has sent nothing for three of its heartbeats: it is passed over. */
  silent(now: number, graceMs: number): boolean {
    return this.on && now - this.heardAt > 3 * this.beat() + graceMs
  }

  /**
   * A source can also keep sending genuine but old certificates (a quiet
   * space's heartbeat) while the space moves on. So every three heartbeats
   * the client asks the relays how far the space is (a head f+1 relays
   * signed): `due` says when, `check` what the last answer was. A source
   * that has not brought the client to the head f+1 relays reported one
   * check earlier (more than 3δ ago) is passed over.
   */
  progressCheckDue(now: number): boolean {
    if (!this.on || now - this.checkedAt < 3 * this.beat()) return false
    this.checkedAt = now
    return true
  }

  /** The head f+1 relays reported at the last check, if the client was behind it then. */
  reported: number | undefined
  private checkedAt = 0

  private beat(): number {
    return Math.max(RELAY_HEARTBEAT_MS, this.wanted?.ms ?? 0)
  }
}

/** A paced delta the client may apply: its attestation (f+1 relays signed its bytes) and the delta checked against its state hash. */
export interface CertifiedCatchUp {
  readonly attestation: Attestation
  readonly delta: VerifiedDelta
  readonly bytes: number
}

/**
 * Checks a `delta` message against nothing but the cluster: f+1 distinct
 * relays of the cluster signed its attestation's bytes (so at least one
 * correct relay attested that commit), the attestation is of this space
 * and ends where the delta ends, and applying the delta to `replica`
 * leads to the attested state hash. `stale` when the delta starts
 * elsewhere than the replica stands (it was sent before the replica moved
 * by other means); a reason when the relay that sent it lied.
 */
export async function certifyDelta(
  crypto: Crypto,
  cluster: ClusterDescriptor,
  replica: ReliableReplica,
  m: Extract<RelayMessage, { type: 'delta' }>,
): Promise<CertifiedCatchUp | 'stale' | { faulty: string }> {
  const signers = new Set<number>()
  for (const [relay, sig] of m.sigs) {
    const key = cluster.relays[relay]?.publicKey
    if (!key || signers.has(relay)) continue
    if (!(await crypto.verify(key, m.attestation, sig))) return { faulty: `sent a delta with relay ${relay}'s signature over an attestation it did not sign` }
    signers.add(relay)
  }
  if (signers.size < cluster.f + 1) return { faulty: `sent a delta whose attestation ${signers.size} relays signed, fewer than f+1 = ${cluster.f + 1}` }
  let attestation: Attestation
  try {
    attestation = decodeAttestation(m.attestation)
  } catch (err) {
    return { faulty: `sent a delta with a malformed attestation: ${(err as Error).message}` }
  }
  if (attestation.space !== replica.space) return { faulty: `sent a delta attested for space ${attestation.space}` }
  let delta
  try {
    delta = decodeStateDelta(m.delta, (signed) => openTrusted(crypto, signed))
  } catch (err) {
    return { faulty: `sent a malformed delta: ${(err as Error).message}` }
  }
  if (delta.space !== replica.space || delta.toIndex !== attestation.toIndex) return { faulty: `sent a delta of ${delta.space} to ${delta.toIndex} under an attestation to ${attestation.toIndex}` }
  if (delta.fromIndex !== replica.stableIndex) return 'stale'
  const verified = replica.verifyDelta((b) => crypto.sha256(b), delta, attestation.stateHash)
  if ('problem' in verified) return { faulty: `sent a delta that does not lead to the attested state: ${verified.problem}` }
  return { attestation, delta: verified, bytes: m.delta.length + m.attestation.length }
}
