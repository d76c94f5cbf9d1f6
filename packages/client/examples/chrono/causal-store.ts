/**
 * A causally consistent key-value store on Stead, after Chrono §5.2
 * (COPS-style get and put with dependency checks), where the replicas that
 * serve a session may lie or lag and the session trusts only the relays'
 * keys.
 *
 * - A **replica** is any Stead client of the space (`KvReplica`). A key is
 *   a register `kv/<key>` holding `{ v, deps }`: the value, and the
 *   dependencies the writing session declared. A key's **version** is the
 *   stable index of the update whose value it holds (last-writer-wins
 *   decides between puts of one key, by the writers' timestamps).
 * - A **session** (`CausalSession`) keeps a dependency clock: key → the
 *   lowest version it may see from now on (what it read or wrote, and what
 *   those depended on). Every answer comes with the update's clock proof,
 *   which the session checks against the relays' keys before it believes
 *   the value, the version or the dependencies.
 * - `get` accepts a version not older than the session's dependency on
 *   the key (a lagging or lying replica gets `gap`), then merges the
 *   value's dependencies in: a session that saw an effect never sees its
 *   cause missing.
 * - `put` sends the session's dependencies; the replica writes only once
 *   its stable state has reached each of them (else `gap`). The session
 *   checks Chrono's condition on the proof: the new version's clock
 *   follows the dependency clock (its base covers every dependency). That
 *   shows the write was ordered after them; it cannot show that a lying
 *   replica had applied them, and it need not: the session's later gets
 *   check versions themselves.
 * - Only writes the audit applied count: an update whose write to the key
 *   was rejected (the key holds another type, say) proves no value.
 *
 * Limits: a replica can prove only versions committed while it ran (a key
 * whose value was written before it started is served once written
 * again, or by a replica that was running). A put whose update commits
 * with a clock the audit could not verify fails with `unsupported`
 * though its write is in; putting it again is safe (the later write
 * wins). A Byzantine writer can declare a dependency on a version of a
 * key that is no write of it; sessions that read its value then get
 * `gap` for that key until it is written again.
 */
import { SteadError, encode, bytesEqual, registerWriteWins } from '@stead/core'
import type { ClockProof, RegisterValue, Space } from '@stead/client'
import { verifyCommitted, writeIn, type CommittedClock, type Trust, type Write } from './trust.ts'

/** A dependency clock: key → the lowest version (stable index) of it a session may see. */
export type Dependencies = ReadonlyArray<readonly [key: string, version: number]>

/** What a put answers: the proof of the update it wrote, and of the version that holds the key now when a concurrent put won over it. */
export interface PutAnswer {
  readonly written: ClockProof
  readonly current?: ClockProof
}

/** What a session asks of a replica. A replica may be anyone's: the session checks every answer. */
export interface Replica {
  /** The key's latest version this replica holds, with its proof; undefined if it holds none. */
  get(key: string): Promise<ClockProof | undefined>
  /** Writes `value` once this replica's stable state holds every dependency. */
  put(key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer>
}

/** At most this many keys in a session's dependency clock, and in a value's. */
export const MAX_DEPENDENCIES = 1024

export const keyOf = (key: string): string => `kv/${key}`

type Stored = { v: RegisterValue; deps: Array<[string, number]> }

/** A replica over one Stead client's space. */
export class KvReplica implements Replica {
  private readonly space: Space
  private readonly trust: Trust
  constructor(space: Space, trust: Trust) {
    this.space = space
    this.trust = trust
  }

  /** @throws SteadError `unsupported` when the key's current value was written before this replica ran (it holds no proof of it). */
  async get(key: string): Promise<ClockProof | undefined> {
    return this.current(key)
  }

  /** @throws SteadError `gap` while this replica's stable state has not reached a dependency; the write's own rejection otherwise. */
  async put(key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer> {
    if (deps.length > MAX_DEPENDENCIES) throw new SteadError('too-large', `${deps.length} dependencies; at most ${MAX_DEPENDENCIES}`)
    const reached = this.space.status.stableIndex
    const ahead = deps.find(([, version]) => version > reached)
    if (ahead) throw new SteadError('gap', `this replica's stable state is at ${reached}, the session depends on ${ahead[0]} at ${ahead[1]}: ask again later or another replica`)
    const r = await this.space.register<Stored>(keyOf(key)).set({ v: value, deps: deps.map(([k, i]) => [k, i]) }, { safe: true })
    if (r.status !== 'committed') throw new SteadError(r.reason, `the put of ${key} was rejected: ${r.detail}`)
    const written = await this.space.clockProof(r.index)
    // The write is in: a current version this replica cannot prove is left for the session's next get.
    const current = await this.current(key).catch(() => undefined)
    return current && current.index !== r.index ? { written, current } : { written }
  }

  /**
   * The proof of the write whose value the key holds. The register's stable
   * history has an entry for every committed write of the key, also those
   * that lost to a later timestamp; the winner is among the latest entries
   * that already show the current value (from its own entry on, only
   * losers, or writes of the same value, follow), so only those are ranked
   * as the register ranks them.
   */
  private async current(key: string): Promise<ClockProof | undefined> {
    const register = this.space.register<Stored>(keyOf(key))
    const value = register.stable
    if (value === undefined) return undefined
    const shown = encode(value)
    const entries = register.history()
    let from = entries.length
    while (from > 0 && entries.length - from < MAX_SEARCHED && bytesEqual(encode((entries[from - 1] as { value: unknown }).value), shown)) from--
    let best: { proof: ClockProof; write: Write } | undefined
    for (const entry of entries.slice(from)) {
      const proof = await this.space.clockProof(entry.index).catch(() => undefined)
      if (!proof) continue
      const certified = await verifyCommitted(this.trust, proof)
      const write = writeIn(certified, keyOf(key))
      if (write && (!best || registerWriteWins(write, best.write))) best = { proof, write }
    }
    if (best && bytesEqual(encode(best.write.value), shown)) return best.proof
    throw new SteadError('unsupported', `the write that gave ${key} its value is not among its latest ${MAX_SEARCHED} writes this replica holds proofs of (it ran since)`)
  }
}

/** How many of a key's latest history entries a replica searches for the write that gave the key its value. */
const MAX_SEARCHED = 64

/** One client session of the store: what it has seen, and the checks that keep it causal whatever replica answers. */
export class CausalSession {
  private readonly trust: Trust
  private readonly clock = new Map<string, number>()
  /** The write this session saw or made last per key, where it knows it: a served version must be it or win over it. */
  private readonly seenWrites = new Map<string, { index: number; write: Write }>()
  constructor(trust: Trust) {
    this.trust = trust
  }

  /** The session's dependency clock. */
  get dependencies(): Dependencies {
    return [...this.clock]
  }

  /**
   * Reads `key` from `replica`: its value, once the answer proves a version
   * this session may see.
   *
   * @throws SteadError `gap` for a version older than one this session depends on (or none where it depends on one); `untrusted` for an answer that is not a proven write of the key; `bad-signature` from the proof's check.
   */
  async get(replica: Replica, key: string): Promise<RegisterValue | undefined> {
    const proof = await replica.get(key)
    const need = this.clock.get(key) ?? 0
    if (!proof) {
      if (need > 0) throw new SteadError('gap', `the replica holds no version of ${key}; this session depends on ${need}`)
      return undefined
    }
    const { certified, stored, write } = await this.open(proof, key)
    if (certified.index < need) throw new SteadError('gap', `the replica served ${key} at ${certified.index}; this session depends on ${need}`)
    // A later write that lost to the one this session saw never was the key's value.
    const seen = this.seenWrites.get(key)
    if (seen && seen.index !== certified.index && !registerWriteWins(write, seen.write)) {
      throw new SteadError('untrusted', `the replica served a write of ${key} (at ${certified.index}) that lost to the one this session saw (at ${seen.index})`)
    }
    // Declared dependencies are versions its writer had applied: no later than the stable history its clock covers.
    const beyond = stored.deps.find(([, version]) => version > certified.env.base)
    if (beyond) throw new SteadError('untrusted', `the value of ${key} claims to depend on ${beyond[0]} at ${beyond[1]}, beyond what its writer had applied (${certified.env.base})`)
    this.depend([[key, certified.index], ...stored.deps])
    this.saw(key, certified, write)
    return stored.v
  }

  /**
   * Writes `key` through `replica` with this session's dependencies; from
   * then on the session sees that write (or one that won over it).
   *
   * @throws SteadError `gap` from a replica behind this session; `untrusted` for an answer that is not the write asked for, whose clock does not cover the dependencies, or whose "current" version did not win over it.
   */
  async put(replica: Replica, key: string, value: RegisterValue): Promise<number> {
    const deps = this.dependencies
    const answer = await replica.put(key, value, deps)
    const written = await this.open(answer.written, key)
    if (!bytesEqual(encode(written.stored.v), encode(value)) || !bytesEqual(encode(written.stored.deps), encode(deps))) {
      throw new SteadError('untrusted', `the replica's proof is of another write of ${key}`)
    }
    // The new version's clock follows every dependency: its base (the stable history its writer had applied) covers them.
    const uncovered = deps.find(([, version]) => version > written.certified.env.base)
    if (uncovered) throw new SteadError('untrusted', `the write of ${key} does not follow ${uncovered[0]} at ${uncovered[1]}`)
    let version = written.certified.index
    let saw = written
    if (answer.current) {
      // A concurrent put won: it must, by last-writer-wins (timestamp, then author), or the replica lies about it.
      const current = await this.open(answer.current, key)
      if (!registerWriteWins(current.write, written.write)) throw new SteadError('untrusted', `the replica says ${key} holds a version that did not win over this write`)
      version = current.certified.index
      saw = current
    }
    this.depend([[key, version]])
    this.saw(key, saw.certified, saw.write)
    return version
  }

  private async open(proof: ClockProof, key: string): Promise<{ certified: CommittedClock; stored: Stored; write: Write }> {
    const certified = await verifyCommitted(this.trust, proof)
    const write = writeIn(certified, keyOf(key))
    const stored = write && parseStored(write.value)
    if (!write || !stored) throw new SteadError('untrusted', `update ${certified.env.idHex} made no write of ${key} that the audit applied`)
    return { certified, stored, write }
  }

  private saw(key: string, certified: CommittedClock, write: Write): void {
    const seen = this.seenWrites.get(key)
    if (!seen || certified.index > seen.index) this.seenWrites.set(key, { index: certified.index, write })
  }

  private depend(deps: Dependencies): void {
    const size = this.clock.size + new Set(deps.map(([k]) => k).filter((k) => !this.clock.has(k))).size
    if (size > MAX_DEPENDENCIES) throw new SteadError('too-large', `the session would depend on ${size} keys; at most ${MAX_DEPENDENCIES}`)
    for (const [k, version] of deps) if (version > (this.clock.get(k) ?? 0)) this.clock.set(k, version)
  }
}

function parseStored(v: unknown): Stored | undefined {
  if (typeof v !== 'object' || v === null || !('v' in v) || !('deps' in v)) return undefined
  const deps = (v as { deps: unknown }).deps
  const isDep = (d: unknown): d is [string, number] => Array.isArray(d) && d.length === 2 && typeof d[0] === 'string' && Number.isSafeInteger(d[1]) && (d[1] as number) > 0
  if (!Array.isArray(deps) || deps.length > MAX_DEPENDENCIES || !deps.every(isDep)) return undefined
  return { v: (v as { v: RegisterValue }).v, deps }
}
