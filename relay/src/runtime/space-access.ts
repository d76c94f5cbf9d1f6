import { POLICY_KEY, SteadError, authorIdOf, deviceCertificateHolds, isFiller, policyProblem, userIdOf, type Authorize, type DeviceCertificate, type Envelope, type HostClock, type SpacePolicy, type StableAudit } from '@stead/core'
import { nodeCrypto, verifySync } from '@stead/core/node'
import type { ClusterConfig } from '../process/config.ts'
import { COMMITTEE_SPACE, committeeWriteProblem } from './committee-proposals.ts'

const HOUR_MS = 3_600_000
/** Keys, addresses and spaces being started that the quota remembers at most. */
const MAX_REMEMBERED = 100_000

/** The updates an envelope carries, regular (one op each stands for the object's) and safe. */
function itemsOf(env: Envelope): Array<{ key: string; decl: Envelope['updates'][number]['decl']; op: unknown }> {
  return [...env.updates.map((u) => ({ key: u.key, decl: u.decl, op: u.ops[0] })), ...env.safe.flatMap((g) => g.updates)]
}

/** Who a session or a signed HTTP request proved to be: its key's author id, and the user it acts for (the same, or a device's user). */
export interface Reader {
  readonly authorId: string
  readonly userId: string
}

/**
 * Who a key proved to be, with the device certificate it showed (if any).
 *
 * @throws SteadError `bad-signature` for a certificate that does not certify `key`.
 */
export function readerOf(key: Uint8Array, device: DeviceCertificate | undefined): Reader {
  const authorId = authorIdOf(nodeCrypto, key)
  if (device && !deviceCertificateHolds(verifySync, key, device)) throw new SteadError('bad-signature', `the device certificate shown for key ${authorId} does not verify: its user key did not certify this key`)
  return { authorId, userId: userIdOf(nodeCrypto, key, device) }
}

/** Whether the envelope creates a space's policy (an init of $policy). */
export function createsPolicy(env: Envelope): boolean {
  return env.safe.some((g) => g.updates.some((u) => u.key === POLICY_KEY && Array.isArray(u.op) && u.op[0] === 'i'))
}

/**
 * Who may write and read which space, and the quotas on starting spaces
 * (each space costs every relay a replica): one user may hold
 * `spacesPerUser` live spaces (counted by the cluster, see SpaceQuota: the
 * door refuses early what the audit would skip), and at each relay's door
 * one key may start `newSpacesPerKeyPerHour` an hour, one address ten
 * times that.
 *
 * A space with a policy of its own (its `$policy` object, ordered and
 * audited like any update) follows it alone. Before it has one, the
 * cluster file decides: a space it lists follows its writers and readers,
 * and its `admins` may create its policy; an unlisted space exists only in
 * an open cluster (anyone writes) or once one of the file's
 * `spaceCreators` created its policy. Every correct relay applies the same
 * rules; the audit applies them again in the stable order (`authorizeFor`
 * and the policy itself), since a Byzantine relay's blocks skip the door.
 */
export class SpaceAccess {
  private readonly cluster: ClusterConfig
  private readonly clock: HostClock
  private readonly creators: ReadonlySet<string>
  /** Live spaces the cluster charged to a user so far (SpaceQuota.held). */
  private readonly held: (user: string) => number
  /** Spaces queued for creation and not committed yet, with when and by which user: a space is charged to the first that starts it. */
  private readonly creating = new Map<string, { readonly at: number; readonly user: string }>()
  /** User → spaces in `creating` they start. */
  private readonly creatingBy = new Map<string, number>()
  /** Space → author ids the file lets write, read or create its policy; built on first use. */
  private readonly fileIds = new Map<string, { writers?: ReadonlySet<string>; readers?: ReadonlySet<string>; admins: ReadonlySet<string> }>()
  /** Key or address → times it started a new space within the last hour. */
  private readonly starts = new Map<string, number[]>()
  /** Author ids of the committee's relays: who writes `$committee` (see committee-proposals.ts). */
  private readonly relayIds: ReadonlySet<string>

  constructor(cluster: ClusterConfig, clock: HostClock, held: (user: string) => number) {
    this.cluster = cluster
    this.clock = clock
    this.held = held
    this.creators = ids(cluster.spaceCreators)
    this.relayIds = ids(cluster.relays.map((r) => r.publicKey))
  }

  /**
   * Throws SteadError 'unauthorized' unless `env`'s author may make every
   * update it carries, as far as this relay can tell from `replica` (the
   * space's, if it holds one). A space's own policy is applied only where
   * this relay's stable history holds what the author had seen (its base):
   * a grant the author saw is then here too, so only an author that is
   * really refused is turned away; otherwise the audit decides. A peer's
   * wake (`fromPeer`) skips the space's own policy.
   */
  checkWriter(env: Envelope, replica: StableAudit | undefined, fromPeer = false): void {
    const policy = replica?.policy()
    const who = env.userId
    if (policy) {
      // A peer let it in when its author could write (see Admission.door): the audit decides.
      if (fromPeer) return
      // A filler changes nothing: its sequence number must be taken, or the author's later envelopes wait behind it.
      if (env.base > (replica as StableAudit).stableIndex || isFiller(env)) return
      for (const { key, op } of itemsOf(env)) {
        // Anybody may redeem an invitation (its signature: see checkRedemptionsAtDoor).
        const problem = policyProblem(policy, env, env.space, key, op)
        if (problem) throw new SteadError('unauthorized', problem)
      }
      return
    }
    if (replica === undefined && !this.serves(env.space, env)) {
      throw new SteadError('unauthorized', `unknown space ${env.space}: this cluster serves the spaces in its config${this.creators.size ? ' and those its space creators create' : ''}`)
    }
    const authorize = this.authorizeFor(env.space)
    if (!authorize || isFiller(env)) return
    for (const u of itemsOf(env)) {
      const verdict = authorize(who, u.key, u.decl, u.op as never)
      if (!verdict.ok) throw new SteadError('unauthorized', verdict.detail)
    }
  }

  /**
   * The file's rules as the audit's validator while a space has no policy
   * of its own (StableAudit applies it only then): a Byzantine relay can
   * put anything in its blocks, so the check the door makes must hold in
   * the stable order too. Every relay must run the same cluster file, or
   * their audits differ. Undefined: every signed author may write.
   */
  authorizeFor(space: string): Authorize | undefined {
    if (space === COMMITTEE_SPACE) return (author, key, decl, op) => committeeWriteProblem(this.relayIds, author, key, decl, op)
    const file = this.fileRules(space)
    if (file) {
      return (author, key) => {
        if (key === POLICY_KEY) return file.admins.has(author) ? { ok: true } : { ok: false, reason: 'unauthorized', detail: `${author} may not create the policy of ${space}: the cluster file does not list it among the space's admins` }
        return !file.writers || file.writers.has(author) ? { ok: true } : { ok: false, reason: 'unauthorized', detail: `${author} may not write to ${space}` }
      }
    }
    if (this.cluster.openSpaces) return undefined
    // Created at runtime in a closed cluster: nothing but its policy until it has one.
    return (author, key) => {
      if (key !== POLICY_KEY) return { ok: false, reason: 'unauthorized', detail: `space ${space} has no policy yet: it takes no writes until one of the cluster's space creators creates it` }
      return this.creators.has(author) ? { ok: true } : { ok: false, reason: 'unauthorized', detail: `${author} may not create space ${space}: the cluster file does not list it among its space creators` }
    }
  }

  /**
   * Whether the cluster serves `space`, for a relay that holds no replica
   * of it yet: a space its file lists, any in an open cluster, or one that
   * `env` creates (its policy, by one of the file's space creators).
   */
  serves(space: string, env?: Envelope): boolean {
    if (space === COMMITTEE_SPACE || this.cluster.openSpaces || this.cluster.spaces.has(space)) return true
    return env !== undefined && this.creators.has(env.userId) && createsPolicy(env)
  }

  /**
   * Whether a space `user` starts is charged to them (see SpaceQuota): not
   * in a cluster that does not count, not for a space the file lists, not
   * for the file's space creators (keys the operator trusts: a closed
   * cluster's spaces are all theirs).
   */
  charges(space: string, user: string): boolean {
    return this.cluster.spacesPerUser !== undefined && space !== COMMITTEE_SPACE && !this.cluster.spaces.has(space) && !this.creators.has(user)
  }

  /**
   * Whether a session that proved `key` (undefined: none, e.g. plain HTTP)
   * may read `space` (`policy`: the space's own, if it has one): as its policy
   * says once it has one; before, those the file lists as readers and
   * writers, or anyone when it lists no readers.
   */
  canRead(space: string, reader: Reader | undefined, policy: SpacePolicy | undefined): boolean {
    if (policy) return policy.mayReadAs(reader)
    const readers = this.fileRules(space)?.readers
    if (!readers) return true
    return reader !== undefined && readers.has(reader.userId)
  }

  private fileRules(space: string): { writers?: ReadonlySet<string>; readers?: ReadonlySet<string>; admins: ReadonlySet<string> } | undefined {
    const file = this.cluster.spaces.get(space)
    if (!file) return undefined
    let rules = this.fileIds.get(space)
    if (!rules) {
      rules = {
        ...(file.writers ? { writers: ids(file.writers) } : {}),
        // Writers read too.
        ...(file.readers ? { readers: ids([...file.readers, ...(file.writers ?? [])]) } : {}),
        admins: ids(file.admins ?? []),
      }
      this.fileIds.set(space, rules)
    }
    return rules
  }

  /**
   * The quota an envelope of `env`'s author (from `origin`) pays if it
   * starts `space` (`exists`: the relay holds it already), as a function
   * to call once the envelope is queued (a refused submit costs nothing),
   * or undefined when it starts nothing.
   *
   * @throws SteadError `quota` when its user holds (or is starting) as many
   * live spaces as the cluster allows; `rate-limited` past the hourly quota
   * of its key or `origin`.
   */
  startCharge(space: string, exists: boolean, env: Pick<Envelope, 'authorId' | 'userId'>, origin: string): (() => void) | undefined {
    if (space === COMMITTEE_SPACE || this.cluster.spaces.has(space) || exists || this.creating.has(space)) return undefined
    const { authorId, userId } = env
    const now = this.clock.now()
    this.forgetStarts(now)
    const held = this.held(userId)
    const starting = this.creatingBy.get(userId) ?? 0
    const most = this.cluster.spacesPerUser ?? Infinity
    if (this.charges(space, userId) && held + starting >= most) {
      throw new SteadError('quota', `cannot start space ${space}: user ${userId} holds ${held} live spaces${starting ? ` and is starting ${starting} more` : ''}, the most this cluster lets one user hold (spacesPerUser ${most}); delete one of them, or ask the operator for more`)
    }
    const quota = this.cluster.newSpacesPerKeyPerHour
    const over: string[] = []
    const keys: Array<[string, number]> = [
      [`key:${authorId}`, quota],
      [`address:${origin}`, quota * 10],
    ]
    for (const [who, limit] of keys) {
      const recent = (this.starts.get(who) ?? []).filter((t) => now - t < HOUR_MS)
      this.starts.set(who, recent)
      if (recent.length >= limit) over.push(who.startsWith('key') ? `key ${authorId} started ${recent.length} spaces` : `address ${origin} started ${recent.length} spaces`)
    }
    if (over.length) throw new SteadError('rate-limited', `cannot start space ${space}: ${over.join(' and ')} in the last hour (quota ${quota} per key, ${quota * 10} per address)`)
    return () => {
      for (const [who] of keys) this.starts.get(who)?.push(now)
      if (this.creating.has(space)) return
      this.creating.set(space, { at: now, user: userId })
      this.creatingBy.set(userId, (this.creatingBy.get(userId) ?? 0) + 1)
      this.forgetStarts(now)
    }
  }

  /** Bounded: forgets the oldest keys, and spaces being started that never committed within the hour. */
  private forgetStarts(now: number): void {
    while (this.starts.size > MAX_REMEMBERED) this.starts.delete(this.starts.keys().next().value as string)
    for (const [name, { at }] of this.creating) {
      if (now - at < HOUR_MS && this.creating.size <= MAX_REMEMBERED) break
      this.started(name)
    }
  }

  /** The audit decided a space's first envelope (it started the space, or was skipped): it is no longer being started. */
  started(space: string): void {
    const starting = this.creating.get(space)
    if (!starting) return
    this.creating.delete(space)
    const n = (this.creatingBy.get(starting.user) ?? 1) - 1
    if (n > 0) this.creatingBy.set(starting.user, n)
    else this.creatingBy.delete(starting.user)
  }

  /** Forgets what it derived (the relay starts over from a checkpoint). */
  clear(): void {
    this.creating.clear()
    this.creatingBy.clear()
  }
}

function ids(keys: readonly Uint8Array[]): ReadonlySet<string> {
  return new Set(keys.map((k) => authorIdOf(nodeCrypto, k)))
}
