import { POLICY_KEY, SteadError, asSigned, decode, fromHex, isRedemption, redeemBytes, judgeClock, latestRegisterStamp, openEnvelopeSync, toHex, type ApplicationValidator, type Authorize, type ClockInputs, type Validation, type Envelope, type HostClock, type Signed, type SpacePolicy, type StableAudit } from '@stead/core'
import type { MemoryBudget } from './budget.ts'
import type { ClusterConfig } from '../process/config.ts'
import { payloadInfoOf, type PayloadInfo, type SyncCrypto } from '../consensus/index.ts'
import { SpaceAccess, type Reader } from './space-access.ts'
import { VerdictCache } from './verdict-cache.ts'

/**
 * Default of RelayNodeOptions.maxClockAheadMs: five minutes. Offline time
 * needs no room here (what a client wrote offline is stamped in the past
 * when it reaches a relay); this only has to cover clock error: relays'
 * NTP-kept clocks, and a client that wrote before it could measure its
 * offset from the relays. Beyond it, one write would beat every concurrent
 * write for that long.
 */
export const MAX_CLOCK_AHEAD_MS = 5 * 60_000

/** Envelope verdicts kept (see openSigned): about ten seconds of envelopes at a busy relay's pace. */
const MAX_VERDICTS = 20_000
/** What a cached verdict holds beyond its frame: the decoded envelope's objects and the cache key. */
const VERDICT_BYTES = 2048

/** What admission needs of the relay around it. */
export interface AdmissionHost {
  readonly cluster: ClusterConfig
  readonly crypto: SyncCrypto
  readonly clock: HostClock
  readonly budget: MemoryBudget
  readonly maxClockAheadMs: number
  /** The space's replica, if this relay holds one: what an envelope is judged against at the door. */
  replicaOf(space: string): StableAudit | undefined
  /** The space's policy without loading its replica (see SpaceTable.policyOf). */
  policyOf(space: string): SpacePolicy | null | undefined
  /** Live spaces the cluster charged to `user` so far (see SpaceQuota). */
  spacesHeld(user: string): number
}

/** What the door says of an envelope: see Admission.door. */
export interface DoorVerdict {
  readonly env: Envelope
  readonly decided: 'duplicate' | 'conflict' | undefined
  readonly charge: (() => void) | undefined
}

/**
 * Whether an envelope frame may come in, whoever brings it: its verdict
 * (decoded and signature-checked once per content, cached), the space's
 * policy (writers, readers, the new-space quota), and the door's checks
 * of its clock and register stamps. Every correct relay applies the same
 * rules; the audit enforces the policy again in the stable order
 * (authorizeFor), since a Byzantine relay's blocks skip this door.
 */
export class Admission {
  private readonly host: AdmissionHost
  /** Verdicts on envelope frames by content id: a pure function of the bytes. */
  private readonly verified = new VerdictCache<Envelope | SteadError>(MAX_VERDICTS)
  readonly access: SpaceAccess
  /** Above 0 while signatures already checked are read back (see trustingSignatures). */
  private trusting = 0

  constructor(host: AdmissionHost) {
    this.host = host
    this.access = new SpaceAccess(host.cluster, host.clock, (user) => host.spacesHeld(user))
    host.budget.track('verify-cache', () => this.verified.bytes, (bytes) => this.verified.evict(bytes))
  }

  /**
   * Runs `read` with envelope signatures taken as valid: for blocks a relay
   * recovers from its own store, whose signatures it checked before it
   * stored them. Verdicts cached meanwhile are kept; a wrong signature
   * cannot be among them, the store's own checksum having passed.
   */
  trustingSignatures<T>(read: () => T): T {
    this.trusting++
    try {
      return read()
    } finally {
      this.trusting--
    }
  }

  /**
   * The checks a client envelope passes before the core sees it, whoever
   * brings it (a client's submit, a peer's wake): the memory budget, the
   * signature, the space's policy and, unless the audit decided its slot
   * already (`decided`: the caller's call), its clock and its register
   * stamps. `charge` (for an envelope that starts a space) takes the
   * new-space quotas of the author's user, key and `origin`; the caller calls
   * it once the envelope is queued. A peer's wake (`fromPeer`) is not held
   * to the space's own policy (the cluster file's rules still apply): the peer let the envelope in when its
   * author could write, a revocation committed since must not leave it
   * waiting for ever in the peer's queue (the audit rejects what the
   * policy in force at its position refuses). Throws SteadError.
   */
  door(frame: Uint8Array, origin: string, fromPeer = false): DoorVerdict {
    const { budget, clock } = this.host
    if (!budget.admits(frame.length)) throw new SteadError('rate-limited', `this relay holds ${budget.used()} of its ${budget.totalBytes} bytes for clients; retry later`)
    const env = this.open(frame)
    if (env instanceof SteadError) throw env
    const replica = this.host.replicaOf(env.space)
    this.access.checkWriter(env, replica, fromPeer)
    const decided = replica?.decided(env)
    if (decided === 'duplicate' || decided === 'conflict') return { env, decided, charge: undefined }
    checkClockAtDoor(replica, env)
    checkStampsAtDoor(env, clock.now(), this.host.maxClockAheadMs)
    checkRedemptionsAtDoor(env, clock.now(), this.host.maxClockAheadMs, this.host.crypto)
    return { env, decided: undefined, charge: this.access.startCharge(env.space, replica !== undefined, env, origin) }
  }

  /**
   * Chrono's application validator for a clock vote: the space's write
   * permission as its stable policy says now, and the operators' rule for
   * the space (`rule`, RelayNodeOptions.clockValidator). Why not, or undefined.
   */
  application(env: Envelope, rule?: (space: string) => ApplicationValidator<Envelope> | undefined): SteadError | undefined {
    try {
      this.access.checkWriter(env, this.host.replicaOf(env.space), false)
    } catch (err) {
      if (err instanceof SteadError) return err
      throw err
    }
    const validator = rule?.(env.space)
    if (!validator) return undefined
    // The operators' code: whatever it does, it refuses a vote at worst, never stops the relay.
    let verdict: unknown
    try {
      verdict = validator(env.authorId, env.clock, env)
    } catch (err) {
      return new SteadError('unauthorized', `the clock validator of ${env.space} threw: ${(err as Error)?.message ?? String(err)}`)
    }
    if (!verdict || typeof verdict !== 'object' || typeof (verdict as { ok?: unknown }).ok !== 'boolean') return new SteadError('unauthorized', `the clock validator of ${env.space} gave no verdict ({ ok: boolean }); a validator is synchronous`)
    const v = verdict as Validation
    return v.ok ? undefined : new SteadError(v.reason ?? 'unauthorized', String(v.detail ?? 'refused by the clock validator'))
  }

  /** The cluster file's rules as the audit's validator while `space` has no policy of its own (see SpaceAccess.authorizeFor). */
  authorizeFor(space: string): Authorize | undefined {
    return this.access.authorizeFor(space)
  }

  /** Whether a session that proved to be `reader` (undefined: nobody) may read `space` now (see SpaceAccess.canRead). */
  canRead(space: string, reader: Reader | undefined): boolean {
    return this.access.canRead(space, reader, this.host.policyOf(space) ?? undefined)
  }

  /** The consensus core's view of a payload frame: its envelope's slot and size, or why it is refused. */
  inspect(frame: Uint8Array): PayloadInfo | SteadError {
    const env = this.open(frame)
    return env instanceof SteadError ? env : payloadInfoOf(env)
  }

  /** An envelope frame's verdict: the envelope, or why it is refused. */
  open(frame: Uint8Array): Envelope | SteadError {
    let signed: Signed
    try {
      signed = asSigned(decode(frame))
    } catch (err) {
      return err instanceof SteadError ? err : new SteadError('malformed', String(err))
    }
    return this.openSigned(signed, frame.length)
  }

  /** A parked envelope from a snapshot or a checkpoint: the envelope, or its verdict thrown (a SteadError). */
  openOrThrow(signed: Signed): Envelope {
    const env = this.openSigned(signed)
    if (env instanceof SteadError) throw env
    return env
  }

  /** An envelope's verdict from its signed bytes (`frameBytes`: the size of the frame they came in), cached. */
  private openSigned(signed: Signed, frameBytes = signed.bytes.length + signed.sig.length): Envelope | SteadError {
    const { crypto, budget } = this.host
    const key = toHex(crypto.sha256(signed.bytes)) + toHex(signed.sig)
    const cached = this.verified.get(key)
    if (cached) return cached
    // Kept in exact-size copies: the bytes may be a view into a whole socket read, which the
    // cache would otherwise keep alive while charging only the envelope's size.
    signed = { bytes: exact(signed.bytes), sig: exact(signed.sig) }
    let v: Envelope | SteadError
    try {
      v = openEnvelopeSync({ sha256: (d) => crypto.sha256(d), verify: this.trusting > 0 ? () => true : (pk, message, sig) => crypto.verify(pk, message, sig) }, signed)
    } catch (err) {
      v = err instanceof SteadError ? err : new SteadError('malformed', String(err))
    }
    // Bounded in entries and in bytes, a quarter of the memory budget at most: an opened
    // envelope holds its frame and its decoded objects (about VERDICT_BYTES more). Only a
    // short window matters (an envelope is seen at submit, in blocks and at commit within
    // seconds); the verdict depends only on the bytes, so an evicted one is computed again.
    const bytes = v instanceof SteadError ? VERDICT_BYTES : 2 * frameBytes + VERDICT_BYTES
    this.verified.set(key, v, bytes, budget.totalBytes / 4)
    return v
  }
}

/** `bytes` itself when it owns its whole buffer, else a copy that does: what is kept is charged at its size. */
export function exact(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength ? bytes : new Uint8Array(bytes)
}

const NO_HISTORY: ClockInputs = { stableIndex: 0, prev: undefined, dep: () => undefined, committedAt: () => ({ lo: 0, hi: 0 }) }

/**
 * Chrono's update validator at the door: an envelope whose clock its
 * inputs contradict is refused with `bad-clock`. Judged only where this
 * relay's stable history already holds what the audit will judge it
 * against (its author's previous envelope and its base); otherwise the
 * audit judges it when it executes.
 *
 * @throws SteadError `bad-clock`.
 */
function checkClockAtDoor(replica: StableAudit | undefined, env: Envelope): void {
  const next = replica ? replica.nextSeq(env.authorId) : 1
  if (env.seq !== next || env.base > (replica?.stableIndex ?? 0)) return
  const verdict = replica ? replica.judgeClock(env) : judgeClock(env, NO_HISTORY)
  if (!verdict.ok) throw new SteadError('bad-clock', `${env.authorId}:${env.seq}: ${verdict.detail}`)
}

/**
 * An invitation's redemption at the door: signed by the invitation's key
 * for this author (`bad-signature` otherwise), and stamped within
 * `windowMs` of this relay's clock either way. Its time is what the
 * invitation's expiry is judged against in the audit, so an honest relay
 * lets in no redemption that claims another time than now; the audit
 * bounds what a Byzantine relay's blocks can claim (no earlier than the
 * space's latest invitation time).
 */
function checkRedemptionsAtDoor(env: Envelope, now: number, windowMs: number, crypto: SyncCrypto): void {
  for (const g of env.safe) {
    for (const u of g.updates) {
      if (u.key !== POLICY_KEY || !isRedemption(u.op)) continue
      const [, key, t, sig] = u.op
      if (!crypto.verify(fromHex(key), redeemBytes(env.space, env.userId, key, t), sig)) throw new SteadError('bad-signature', `${env.authorId}:${env.seq} redeems invitation ${key.slice(0, 8)} without its key's signature`)
      if (Math.abs(t - now) > windowMs) throw new SteadError(t > now ? 'clock-ahead' : 'unauthorized', `${env.authorId}:${env.seq} redeems an invitation at ${t}, ${Math.round(Math.abs(t - now) / 1000)} s from this relay's clock (${now}); the limit is ${Math.round(windowMs / 1000)} s either way`)
    }
  }
}

/**
 * Refuses an envelope whose register writes are stamped more than
 * `maxAheadMs` ahead of this relay's clock: last-writer-wins orders by
 * those stamps, so a device clock running fast would win every concurrent
 * write until real time caught up. Here at the door, where wall time is
 * injected: the audit behind it stays deterministic.
 */
function checkStampsAtDoor(env: Envelope, now: number, maxAheadMs: number): void {
  const stamp = latestRegisterStamp(env)
  if (stamp === undefined || stamp - now <= maxAheadMs) return
  throw new SteadError(
    'clock-ahead',
    `${env.authorId}:${env.seq} writes a register at timestamp ${stamp}, ${Math.round((stamp - now) / 1000)} s ahead of this relay's clock (${now}); the limit is ${Math.round(maxAheadMs / 1000)} s: the author's device clock runs fast`,
  )
}
