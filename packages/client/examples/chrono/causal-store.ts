/**
 * A causally consistent key-value store on Stead, after Chrono §5.2
 * (COPS-style get and put with dependency checks), without a total order:
 * the replicas that serve a session may lie or lag, the session trusts
 * only the relays' keys, and nothing waits for the BFT order.
 *
 * - A **replica** is any Stead client of the space (`KvReplica`). A put is
 *   a regular register write of `kv/<key>` holding `{ v, deps }` (the value
 *   and the dependencies the writing session declared), one write of the
 *   key per envelope. The relays' validators certify its clock as soon as
 *   they see it (ceil((N+f+1)/2) clock votes, milliseconds, long before
 *   any commit).
 * - A key's **version** is such a certified write, named by its author and
 *   seq and ranked by `clockRank` (its clock's weight, then author, then
 *   seq): a total order that contains the causal one. A key holds its
 *   highest-ranked write, so replicas that hold the same writes serve the
 *   same version. This is the store's own rule: the register's value (by
 *   the writers' timestamps) and the audit play no part.
 * - A **session** (`CausalSession`) keeps a dependency clock: key → the
 *   lowest version it may see from now on (what it read or wrote, and what
 *   those depended on). Every answer is a validator certificate the
 *   session checks against the relays' keys before it believes the value
 *   and the version; the dependencies a value declares are its writer's
 *   word (checked only to rank below the write).
 * - `get` accepts a version ranked at or above the session's dependency
 *   on the key (a lagging or lying replica gets `gap`), then merges the
 *   value's dependencies in: a session that saw an effect never sees its
 *   cause missing.
 * - `put` sends the session's dependencies; the replica writes only once
 *   it holds each of them. The session checks Chrono's condition on the
 *   certificates: the new write's clock follows every dependency, because
 *   it lists the dependency's author at its seq or beyond (or is a later
 *   write of the same author), or because the dependency committed within
 *   the stable history the write's clock covers (its base; the replica
 *   then adds the commit proof of that very envelope: an author's twin
 *   may have committed). No stable index is waited for: a dependency
 *   still undecided is listed by the clock.
 *
 * Limits: the relays keep clock votes about ten minutes, so a replica
 * proves the versions it saw certified while it ran, and ones written in
 * the last ten minutes; a key written only before that and never seen
 * is `unsupported` until written again. A write the relays never certify
 * (within a minute) is left out. A Byzantine writer can declare
 * dependencies that rank below its write but are no writes of theirs;
 * sessions that read its value then get `gap` for those keys until they
 * are written again. A put that the replica wrote before it could cite a
 * dependency is written again (the earlier write is a version too, with
 * the same value and declared dependencies, so readers stay causal). A
 * dependency that committed with a clock the audit could not verify, or
 * longer ago than commit proofs are kept, proves no position once a
 * replica's clock covers it through its base: a put depending on it is
 * `unsupported` until the session reads a newer version of that key.
 */
import { SteadError, bytesEqual, clockRank, encode } from '@stead/core'
import type { ClockProof, RegisterValue, Space } from '@stead/client'
import { forgetOldest, regularWriteIn, verifyCommitted, verifyVoted, type CommittedClock, type Trust, type VotedClock } from './trust.ts'

/** A key's version: the certified write that holds it, by author and seq, with its clock's weight (what ranks it) and its envelope id. */
export interface Version {
  readonly author: string
  readonly seq: number
  readonly weight: number
  readonly id: string
}

/** A dependency clock: key → the lowest version of it a session may see. */
export type Dependencies = ReadonlyArray<readonly [key: string, version: Version]>

/** What a put answers: the validator certificate of the write, and commit proofs of the dependencies its clock covers through its base. */
export interface PutAnswer {
  readonly written: ClockProof
  readonly committed: readonly ClockProof[]
}

/** What a session asks of a replica. A replica may be anyone's: the session checks every answer. */
export interface Replica {
  /** The validator certificate of the key's highest-ranked write this replica holds; undefined if it holds none. */
  get(key: string): Promise<ClockProof | undefined>
  /** Writes `value` once this replica holds every dependency. */
  put(key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer>
}

/** At most this many keys in a session's dependency clock, and in a value's. */
export const MAX_DEPENDENCIES = 1024

export const keyOf = (key: string): string => `kv/${key}`

/** How versions rank: as `clockRank` ranks the certified clocks they name. */
export function compareVersions(a: Version, b: Version): number {
  if (a.weight !== b.weight) return a.weight - b.weight
  if (a.author !== b.author) return a.author < b.author ? -1 : 1
  return a.seq - b.seq
}

export const versionOf = (clock: VotedClock): Version => ({ author: clock.env.authorId, seq: clock.env.seq, weight: clock.weight, id: clock.env.idHex })

/**
 * Whether a certified write's clock follows `dep` (Chrono's condition): a
 * later write of its author, listed at its seq or beyond, or committed
 * (by one of `committed`, checked commit proofs of that very envelope)
 * within the stable history the write's base covers. A cause's full
 * clock is below its effect's, so a write whose weight is not above the
 * dependency's follows it in none of these ways. A commit proof must be
 * of the dependency's very envelope: an author that equivocated may have
 * had a twin committed that no quorum voted for. A listed author and seq
 * names no envelope: of such an author it may mean the committed twin
 * (readers of the write still need the dependency, which it declares).
 */
export function follows(dep: Version, write: VotedClock, committed: readonly CommittedClock[]): boolean {
  if (dep.weight >= write.weight) return false
  if (dep.author === write.env.authorId) return dep.seq < write.env.seq
  if ((write.env.clock.get(dep.author) ?? 0) >= dep.seq) return true
  return committed.some((c) => c.env.idHex === dep.id && c.index <= write.env.base)
}

/** What a put writes: the value and the declared dependencies, flat. */
type Stored = { v: RegisterValue; deps: Array<[key: string, author: string, seq: number, weight: number, id: string]> }

/** A certified write of a key this replica holds. */
interface Held {
  readonly proof: ClockProof
  readonly clock: VotedClock
}

/** What a replica holds of one key's register. */
interface Keyed {
  /** Certified writes, by envelope id: the highest-ranked MAX_KEPT. */
  readonly writes: Map<string, Held>
  /** Stable indices of its history already looked up. */
  readonly indexed: Set<number>
  /** Envelope bytes of `writes`. */
  bytes: number
}

/** Writes kept per key: the highest-ranked (what a get serves, and where a put looks for its dependencies). */
const MAX_KEPT = 64

/** Keys a replica keeps writes of; past it, or past MAX_KEPT_BYTES of envelopes, the least recently used key goes. */
const MAX_KEYS = 10_000
const MAX_KEPT_BYTES = 64 * 1024 * 1024

/** Keys a replica follows (their new writes are certified as they arrive); more are looked at only when asked. */
const MAX_WATCHED = 1024

/** Envelopes a replica remembers as no put (or never certified): the latest. */
const MAX_IGNORED = 20_000

/** Envelopes waited on for the relays' votes at once; more are looked at by later reads. */
const MAX_OPENING = 256

/** A write the relays have not certified within this long is left (refused, or an equivocation's twin). */
const GIVE_UP_MS = 60_000

/** How long a get or put waits for writes of a key that are still being certified. */
const SETTLE_MS = 1000

/** How long a put waits for the relays to certify its write. */
const CERTIFY_MS = 30_000

/** How many times a put is written before the replica gives up on following its dependencies. */
const MAX_ATTEMPTS = 3

/** A replica over one Stead client's space. */
export class KvReplica implements Replica {
  private readonly space: Space
  private readonly trust: Trust
  /** What this replica holds per key's register, least recently used first. */
  private readonly keys = new Map<string, Keyed>()
  private keptBytes = 0
  /** Envelopes being waited on for votes, by register and id. */
  private readonly opening = new Map<string, Promise<void>>()
  /** Envelopes (by register and id) that hold no put of that key, or that the relays did not certify in time. */
  private readonly ignored = new Set<string>()
  private readonly watched = new Map<string, () => void>()
  /** Puts go one at a time: each write of a key in an envelope of its own. */
  private putting: Promise<unknown> = Promise.resolve()
  private closed = false

  constructor(space: Space, trust: Trust) {
    this.space = space
    this.trust = trust
  }

  /** @throws SteadError `unsupported` when the key has a value from writes this replica cannot prove (voted on before it ran, longer ago than the relays keep votes, or still being certified); `closed`. */
  async get(key: string): Promise<ClockProof | undefined> {
    this.assertOpen()
    const still = await this.settle(key)
    const best = this.best(key)
    if (best) return best.proof
    if (still) throw new SteadError('unsupported', `the writes of ${key} this replica holds are still being certified: ask again`)
    if (this.space.register(keyOf(key)).stable !== undefined) {
      throw new SteadError('unsupported', `${key} has a value from writes this replica holds no validator certificate of (voted on before it ran, longer ago than the relays keep votes): written again, it is served`)
    }
    return undefined
  }

  /**
   * @throws SteadError `gap` while this replica does not hold a dependency, or when three writes of the put did not
   * follow one; `unsupported` for a dependency decided with no commit proof to show (committed with a clock the
   * audit could not verify, or longer ago than proofs are kept); `timeout` when the relays certify none; `closed`.
   */
  async put(key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer> {
    this.assertOpen()
    if (deps.length > MAX_DEPENDENCIES) throw new SteadError('too-large', `${deps.length} dependencies; at most ${MAX_DEPENDENCIES}`)
    const put = this.putting.then(() => this.write(key, value, deps))
    this.putting = put.catch(() => undefined)
    return put
  }

  /** Stops following keys; puts not written yet fail with `closed`. */
  close(): void {
    this.closed = true
    for (const off of this.watched.values()) off()
    this.watched.clear()
  }

  private assertOpen(): void {
    if (this.closed) throw new SteadError('closed', 'this replica was closed')
  }

  private async write(key: string, value: RegisterValue, deps: Dependencies): Promise<PutAnswer> {
    const missing = deps.filter(([k, dep]) => !this.holding(k, dep))
    await Promise.all([...new Set(missing.map(([k]) => k))].map((k) => this.settle(k)))
    const held: Array<{ key: string; dep: Version; id: string }> = []
    for (const [k, dep] of deps) {
      const id = this.holding(k, dep)
      if (!id) throw new SteadError('gap', `this replica does not hold ${k} at ${show(dep)} the session depends on: ask again later or another replica`)
      held.push({ key: k, dep, id })
    }
    const stored: Stored = { v: value, deps: flat(deps) }
    for (let attempt = 1; ; attempt++) {
      this.assertOpen()
      const r = await this.space.register<Stored>(keyOf(key)).set(stored)
      if (r.status !== 'stored' || r.update === undefined) throw new SteadError('conflict', `the put of ${key} was not sent (${r.status})`)
      const written = await this.space.clockProof(r.update, { kind: 'validators', timeoutMs: CERTIFY_MS }).catch((err: unknown) => {
        throw new SteadError('timeout', `the relays did not certify the put of ${key} within ${CERTIFY_MS} ms: ${(err as Error).message}`)
      })
      const clock = await verifyVoted(this.trust, written)
      this.keep(keyOf(key), { proof: written, clock })
      // Dependencies its clock does not list: proven by their commits, within the history its base covers.
      const committed: ClockProof[] = []
      let followsAll = true
      for (const { key: k, dep, id } of held) {
        if (follows(dep, clock, [])) continue
        const proof = await this.space.clockProof(id).catch(() => undefined)
        const certified = proof?.index !== undefined ? await verifyCommitted(this.trust, proof).catch(() => undefined) : undefined
        if (proof && certified && follows(dep, clock, [certified])) {
          committed.push(proof)
          continue
        }
        // Decided, yet no commit proof: writing again cannot help (its clock would cover it through its base just the same).
        if (!certified && !this.space.register(keyOf(k)).undecided().some((u) => u.id === id)) {
          throw new SteadError('unsupported', `${k} at ${show(dep)} the session depends on was decided and no commit proof of it is to be had (committed with a clock the audit could not verify, or longer ago than proofs are kept): read a newer version of ${k} first`)
        }
        followsAll = false
      }
      if (followsAll) return { written, committed }
      // Written before this replica could cite a dependency (it held one whose own inputs it lacked): written again, later.
      if (attempt === MAX_ATTEMPTS) throw new SteadError('gap', `${MAX_ATTEMPTS} writes of ${key} through this replica did not follow the session's dependencies: ask again later or another replica`)
      await new Promise((r) => setTimeout(r, 100 * attempt))
    }
  }

  /** The envelope id of the write of `key` this replica holds as `dep`, if any. */
  private holding(key: string, dep: Version): string | undefined {
    return this.keys.get(keyOf(key))?.writes.has(dep.id) ? dep.id : undefined
  }

  private best(key: string): Held | undefined {
    let best: Held | undefined
    for (const h of this.keys.get(keyOf(key))?.writes.values() ?? []) if (!best || clockRank(h.clock, best.clock) > 0) best = h
    return best
  }

  /** Follows `key` and waits (up to SETTLE_MS) for the certificates of its writes this replica holds; true if some are still being certified. */
  private async settle(key: string): Promise<boolean> {
    this.watch(key)
    const waits = this.collect(keyOf(key))
    if (!waits.length) return false
    let timer: ReturnType<typeof setTimeout> | undefined
    const settled = await Promise.race([Promise.all(waits).then(() => true), new Promise<false>((r) => (timer = setTimeout(() => r(false), SETTLE_MS)))])
    clearTimeout(timer)
    return !settled
  }

  private watch(key: string): void {
    if (this.closed || this.watched.has(key) || this.watched.size >= MAX_WATCHED) return
    this.watched.set(key, this.space.register(keyOf(key)).subscribe(() => void this.collect(keyOf(key))))
  }

  /** Starts certifying the writes of a register this replica holds (undecided, and committed while it ran); returns the waits of those being certified. */
  private collect(register: string): Array<Promise<void>> {
    if (this.closed) return []
    const handle = this.space.register(register)
    const waits: Array<Promise<void>> = []
    for (const u of handle.undecided()) waits.push(this.open(register, u.id, GIVE_UP_MS))
    const history = handle.history().slice(-MAX_KEPT)
    const keyed = history.length ? this.keyed(register) : undefined
    for (const h of history) {
      if (!keyed || keyed.indexed.has(h.index) || this.opening.size >= MAX_OPENING) continue
      keyed.indexed.add(h.index)
      // Committed: its votes are at the relays now, or gone (asked once, not waited for).
      waits.push(this.space.clockProof(h.index).then((p) => this.open(register, p.id, 0), () => undefined))
    }
    if (keyed) forgetOldest(keyed.indexed, 4 * MAX_KEPT)
    return waits
  }

  /** Waits (up to `waitMs`) for the relays' votes on envelope `id` and keeps the put of `register` it makes; resolves either way. */
  private open(register: string, id: string, waitMs: number): Promise<void> {
    const slot = `${register}\0${id}`
    if (this.ignored.has(slot) || this.keys.get(register)?.writes.has(id)) return Promise.resolve()
    const pending = this.opening.get(slot)
    if (pending) return pending
    if (this.opening.size >= MAX_OPENING) return Promise.resolve()
    const opened = (async () => {
      try {
        const proof = await this.space.clockProof(id, { kind: 'validators', timeoutMs: waitMs })
        const clock = await verifyVoted(this.trust, proof)
        if (parseStored(regularWriteIn(clock, register))) this.keep(register, { proof, clock })
        else this.ignore(slot)
      } catch {
        this.ignore(slot)
      } finally {
        this.opening.delete(slot)
      }
    })()
    this.opening.set(slot, opened)
    return opened
  }

  private ignore(slot: string): void {
    this.ignored.add(slot)
    forgetOldest(this.ignored, MAX_IGNORED)
  }

  /** What this replica holds of `register`, made the most recently used. */
  private keyed(register: string): Keyed {
    const keyed = this.keys.get(register) ?? { writes: new Map(), indexed: new Set(), bytes: 0 }
    this.keys.delete(register)
    this.keys.set(register, keyed)
    return keyed
  }

  /** Keeps a certified write of `register`: past MAX_KEPT, its lowest-ranked go; past the replica's budget, the least recently used keys. */
  private keep(register: string, held: Held): void {
    const keyed = this.keyed(register)
    if (keyed.writes.has(held.proof.id)) return
    keyed.writes.set(held.proof.id, held)
    this.account(keyed, held, 1)
    if (keyed.writes.size > MAX_KEPT) {
      const lowest = [...keyed.writes.values()].reduce((a, b) => (clockRank(b.clock, a.clock) < 0 ? b : a))
      keyed.writes.delete(lowest.proof.id)
      this.account(keyed, lowest, -1)
    }
    for (const [name, other] of this.keys) {
      if (this.keys.size <= MAX_KEYS && this.keptBytes <= MAX_KEPT_BYTES) break
      if (other === keyed) continue
      this.keys.delete(name)
      this.keptBytes -= other.bytes
    }
  }

  private account(keyed: Keyed, held: Held, sign: 1 | -1): void {
    const bytes = sign * held.proof.envelope.bytes.length
    keyed.bytes += bytes
    this.keptBytes += bytes
  }
}

/** One client session of the store: what it has seen, and the checks that keep it causal whatever replica answers. */
export class CausalSession {
  private readonly trust: Trust
  private readonly clock = new Map<string, Version>()
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
   * @throws SteadError `gap` for a version ranked below one this session depends on (or none where it depends on one); `untrusted` for an answer that is not a certified write of the key, or that declares dependencies its clock cannot follow; `bad-signature` and `unsupported` from the certificate's check.
   */
  async get(replica: Replica, key: string): Promise<RegisterValue | undefined> {
    const proof = await replica.get(key)
    const need = this.clock.get(key)
    if (!proof) {
      if (need) throw new SteadError('gap', `the replica holds no version of ${key}; this session depends on ${show(need)}`)
      return undefined
    }
    const { clock, stored } = await this.open(proof, key)
    const served = versionOf(clock)
    if (need && compareVersions(served, need) < 0) throw new SteadError('gap', `the replica served ${key} at ${show(served)}; this session depends on ${show(need)}`)
    // A cause's full clock is below its effect's: a declared dependency of weight at or above the write's is no cause of it.
    const beyond = stored.deps.find(([, d]) => d.weight >= served.weight)
    if (beyond) throw new SteadError('untrusted', `the value of ${key} claims to depend on ${beyond[0]} at ${show(beyond[1])}, which its clock (weight ${served.weight}) cannot follow`)
    this.depend([[key, served], ...stored.deps])
    return stored.v
  }

  /**
   * Writes `key` through `replica` with this session's dependencies; from
   * then on the session sees that write (or one ranked above it).
   *
   * @throws SteadError `gap` from a replica that does not hold this session's dependencies; `untrusted` for an answer that is not the write asked for, or whose clock does not follow every dependency.
   */
  async put(replica: Replica, key: string, value: RegisterValue): Promise<Version> {
    const deps = this.dependencies
    const answer = await replica.put(key, value, deps)
    const { clock, stored } = await this.open(answer.written, key)
    if (!bytesEqual(encode(stored.v), encode(value)) || !bytesEqual(encode(flat(stored.deps)), encode(flat(deps)))) throw new SteadError('untrusted', `the replica's proof is of another write of ${key}`)
    if (answer.committed.length > deps.length) throw new SteadError('too-large', `${answer.committed.length} commit proofs for ${deps.length} dependencies`)
    const committed = await Promise.all(answer.committed.map((p) => verifyCommitted(this.trust, p)))
    const uncovered = deps.find(([, dep]) => !follows(dep, clock, committed))
    if (uncovered) throw new SteadError('untrusted', `the write of ${key} does not follow ${uncovered[0]} at ${show(uncovered[1])}`)
    const version = versionOf(clock)
    this.depend([[key, version]])
    return version
  }

  private async open(proof: ClockProof, key: string): Promise<{ clock: VotedClock; stored: { v: RegisterValue; deps: Dependencies } }> {
    const clock = await verifyVoted(this.trust, proof)
    const stored = parseStored(regularWriteIn(clock, keyOf(key)))
    if (!stored) throw new SteadError('untrusted', `update ${clock.env.idHex} made no put of ${key}`)
    return { clock, stored: { v: stored.v, deps: stored.deps.map(([k, author, seq, weight, id]) => [k, { author, seq, weight, id }] as const) } }
  }

  private depend(deps: Dependencies): void {
    const size = this.clock.size + new Set(deps.map(([k]) => k).filter((k) => !this.clock.has(k))).size
    if (size > MAX_DEPENDENCIES) throw new SteadError('too-large', `the session would depend on ${size} keys; at most ${MAX_DEPENDENCIES}`)
    for (const [k, version] of deps) {
      const known = this.clock.get(k)
      if (!known || compareVersions(version, known) > 0) this.clock.set(k, version)
    }
  }
}

const flat = (deps: Dependencies): Stored['deps'] => deps.map(([k, d]) => [k, d.author, d.seq, d.weight, d.id])

const show = (v: Version): string => `${v.author.slice(0, 8)}:${v.seq} (weight ${v.weight})`

function parseStored(v: unknown): Stored | undefined {
  if (typeof v !== 'object' || v === null || !('v' in v) || !('deps' in v)) return undefined
  const deps = (v as { deps: unknown }).deps
  const count = (n: unknown): boolean => Number.isSafeInteger(n) && (n as number) > 0
  const isDep = (d: unknown): d is Stored['deps'][number] => Array.isArray(d) && d.length === 5 && typeof d[0] === 'string' && typeof d[1] === 'string' && count(d[2]) && count(d[3]) && typeof d[4] === 'string' && /^[0-9a-f]{64}$/.test(d[4])
  if (!Array.isArray(deps) || deps.length > MAX_DEPENDENCIES || !deps.every(isDep)) return undefined
  return { v: (v as { v: RegisterValue }).v, deps }
}
