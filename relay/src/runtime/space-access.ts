import { SteadError, toHex, type Envelope, type HostClock } from '@stead/core'
import type { ClusterConfig } from '../process/config.ts'

const HOUR_MS = 3_600_000
/** Keys, addresses and spaces being started that the quota remembers at most. */
const MAX_REMEMBERED = 100_000

/**
 * Who may write and read which space, as the cluster file says, and the
 * quota on starting spaces of an open cluster (each space costs every
 * relay a replica): one key may start `newSpacesPerKeyPerHour` an hour,
 * one address ten times that. Every correct relay applies the same rules.
 */
export class SpaceAccess {
  private readonly cluster: ClusterConfig
  private readonly clock: HostClock
  /** Spaces queued for creation and not committed yet, with when: a space is charged to the first key that starts it. */
  private readonly creating = new Map<string, number>()
  /** Space → hex keys that may read it (readers and writers), for spaces with readers; built on first use. */
  private readonly readerKeys = new Map<string, ReadonlySet<string>>()
  /** Key or address → times it started a new space within the last hour. */
  private readonly starts = new Map<string, number[]>()

  constructor(cluster: ClusterConfig, clock: HostClock) {
    this.cluster = cluster
    this.clock = clock
  }

  /** Throws SteadError 'unauthorized' unless `env`'s author may write to its space. */
  checkWriter(env: Envelope): void {
    const policy = this.cluster.spaces.get(env.space)
    if (!policy && !this.cluster.openSpaces) throw new SteadError('unauthorized', `unknown space ${env.space}: this cluster only serves the spaces in its config`)
    if (policy?.writers && !policy.writers.some((w) => toHex(w) === toHex(env.author))) {
      throw new SteadError('unauthorized', `author ${env.authorId} may not write to space ${env.space}`)
    }
  }

  /** Whether a session that proved `key` (undefined: none, e.g. plain HTTP) may read `space`: those listed as readers and the writers, or anyone when it lists no readers. */
  canRead(space: string, key: Uint8Array | undefined): boolean {
    const policy = this.cluster.spaces.get(space)
    if (!policy?.readers) return true
    if (!key) return false
    let allowed = this.readerKeys.get(space)
    if (!allowed) this.readerKeys.set(space, (allowed = new Set([...policy.readers, ...(policy.writers ?? [])].map(toHex))))
    return allowed.has(toHex(key))
  }

  /**
   * The quota an envelope of `authorId` (from `origin`) pays if it starts
   * `space` (`exists`: the relay holds it already), as a function to call
   * once the envelope is queued (a refused submit costs nothing), or
   * undefined when it starts nothing. Throws 'rate-limited' past the quota.
   */
  startCharge(space: string, exists: boolean, authorId: string, origin: string): (() => void) | undefined {
    if (this.cluster.spaces.has(space) || exists || this.creating.has(space)) return undefined
    const quota = this.cluster.newSpacesPerKeyPerHour
    const now = this.clock.now()
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
      this.creating.set(space, now)
      // Bounded: forget the oldest keys and spaces that never committed.
      while (this.starts.size > MAX_REMEMBERED) this.starts.delete(this.starts.keys().next().value as string)
      for (const [name, t] of this.creating) {
        if (now - t < HOUR_MS && this.creating.size <= MAX_REMEMBERED) break
        this.creating.delete(name)
      }
    }
  }

  /** A space's first commit: it is no longer being started. */
  started(space: string): void {
    this.creating.delete(space)
  }

  /** Forgets what it derived (the relay starts over from a checkpoint). */
  clear(): void {
    this.creating.clear()
    this.readerKeys.clear()
  }
}
