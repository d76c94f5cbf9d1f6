/**
 * Byzantine-tolerant mutual exclusion on Stead, after Chrono §5.1 (itself
 * after Lamport's algorithm): members of a space take turns on a shared
 * resource, and whoever takes it hands the resource's owner an
 * acquisition proof the owner checks with the relays' keys alone, trusting
 * neither the member nor any single relay.
 *
 * Messages are safe register writes, one register per member
 * (`mutex/<resource>/<author id>`), so each is signed by its author,
 * ordered by the relays and carries a clock their certificate vouches for:
 *
 * - REQUEST: a member asks for the resource (one outstanding at a time).
 * - REPLY: every other member answers each request it sees, after it saw
 *   it (its clock follows the request's), listing the requests it holds
 *   outstanding that are ordered before that one.
 * - RELEASE: the holder is done; every request of its author ends.
 *
 * The total order ≺ on requests is the stable index their clock
 * certificate states: it contains the causal order of verified clocks (an
 * update a clock says its author saw committed earlier), which is what
 * Chrono asks of ≺. Chrono's QUERY/ACK is not needed: every member sees
 * the same stable order, so a member's REPLY can be written as soon as it
 * sees the request.
 *
 * A member holds the resource when, for every other member, it has a REPLY
 * to its request or a RELEASE ordered after it, and every request those
 * replies list was released since. The proof is those messages' clock
 * proofs; `verifyAcquisition` checks exactly that. Mutual exclusion and
 * ordered access hold among correct members whatever the others do,
 * because a correct member's own REPLY lists its own earlier request: no
 * proof exists for a later one until it released. A message counts only
 * if its author signed it and the audit applied it (a write the audit
 * rejected, or one made to another member's register, is none).
 *
 * Anyone who reads the space can assemble a member's proof, so the owner
 * also has the presenter sign its challenge with the request's author key
 * (`GuardedResource.challenge`, `ChronoMutex.present`).
 *
 * Limits: a Byzantine member can stall the others (it can refuse to reply,
 * as in the paper, or write made-up messages into other members'
 * registers, which members that started late read to learn whom to
 * answer); it cannot let two correct members in at once. The owner keeps
 * the last request it let in in memory: a real one persists it.
 */
import { SteadError, causalOrder, encode, toHex } from '@stead/core'
import type { ClockProof, RegisterHandle, Space } from '@stead/client'
import { verifyCommitted, writeIn, type CommittedClock, type Trust } from './trust.ts'

export type { Trust } from './trust.ts'

/** One member's request, named by its author and the stable index it took (unique, and certified by the relays). */
export type RequestRef = {
  readonly author: string
  readonly index: number
}

/** What a member writes to its register. */
export type MutexMessage =
  | { readonly kind: 'request' }
  | { readonly kind: 'reply'; readonly to: RequestRef; readonly before: RequestRef[]; readonly pending: RequestRef | null }
  | { readonly kind: 'release'; readonly of: number }

/** Whom a valid proof entitles: the request's author (id and public key), the request's stable index and envelope id. */
export type Holder = RequestRef & { readonly key: Uint8Array; readonly id: string }

/** What `acquire` returns and the resource's owner checks: clock proofs of the messages that entitle the holder. */
export interface AcquisitionProof {
  readonly request: ClockProof
  /** Other members' replies to the request. */
  readonly replies: readonly ClockProof[]
  /** Releases: of members that did not reply, and of the requests the replies list. */
  readonly releases: readonly ClockProof[]
}

/** Who takes part, and in what. */
export interface MutexRules {
  /** The resource's name: it names the members' registers. */
  readonly resource: string
  /** The author ids of the members (`client.authorId`), the holder included. */
  readonly members: readonly string[]
}

/** A message as the stable order holds it: who wrote it, where it stands, and its proof. */
interface Logged {
  readonly author: string
  readonly index: number
  readonly message: MutexMessage
  readonly proof: ClockProof
  readonly certified: CommittedClock
}

/** At most this many members: each request costs every other member a reply. */
export const MAX_MEMBERS = 64

/** Messages (and answered requests) a member keeps in memory: the latest. */
const MAX_LOGGED = 4096

/** How many times a member writes a request or a release whose clock did not verify before it gives up. */
const MAX_ATTEMPTS = 3

/** How often a member looks again without a change (a failed reply, a member the relays could not name yet). */
const RETRY_MS = 1000

/** One entry of a register's stable history. */
interface Entry {
  readonly index: number
  readonly value: unknown
}

/** The request a member's latest message says is outstanding: null for none, undefined when it says nothing (no message, or not one of the protocol). */
function pendingOf(author: string, latest: Entry | null | undefined): RequestRef | null | undefined {
  if (latest === null) return null
  const m = latest === undefined ? undefined : parseMessage(latest.value)
  if (!m || !latest) return undefined
  if (m.kind === 'request') return { author, index: latest.index }
  if (m.kind === 'release') return null
  return m.pending && m.pending.author === author ? m.pending : null
}

/** Keeps the latest `max` of a map or set (both keep insertion order). */
function forgetOldest<K>(m: Map<K, unknown> | Set<K>, max = MAX_LOGGED): void {
  for (const k of m.keys()) {
    if (m.size <= max) return
    m.delete(k)
  }
}

export function registerKey(resource: string, author: string): string {
  return `mutex/${resource}/${author}`
}

/**
 * One member's side of the protocol, over a space every member has open.
 * It answers the other members' requests for as long as it runs, so every
 * member must run one (not only those that want the resource).
 */
export class ChronoMutex {
  private readonly space: Space
  private readonly rules: MutexRules
  private readonly me: string
  private readonly trust: Trust
  private readonly registers: Array<{ author: string; handle: RegisterHandle<MutexMessage> }>
  /** Proven messages of the stable order, by index, as far as `seen` (the latest MAX_LOGGED). */
  private readonly log = new Map<number, Logged>()
  private seen = 0
  /** Each member's latest stable message, for members whose register this client's memory holds no history of (from the relays), and when a member had none. */
  private readonly latestFetched = new Map<string, Entry>()
  private readonly noneSince = new Map<string, number>()
  /** Requests this member answered, as `author@index` (the latest MAX_LOGGED). */
  private readonly replied = new Set<string>()
  /** This member's outstanding request: set when its request commits, cleared when its release does. */
  private mine: RequestRef | undefined
  private learnedMine = false
  /** Set from the moment `acquire` writes a request until it is known: one request at a time. */
  private requesting = false
  /** The latest request phase of `acquire` (settled once the request is known or failed). */
  private requested: Promise<unknown> = Promise.resolve()
  private readonly signer: (bytes: Uint8Array) => Promise<Uint8Array>
  private readonly timer: ReturnType<typeof setInterval>
  /** This member's writes go one at a time, each after the previous one committed: one message per envelope. */
  private writes: Promise<unknown> = Promise.resolve()
  private reading: Promise<void> = Promise.resolve()
  private readQueued = false
  private readonly waiters = new Set<() => void>()
  private readonly unsubscribe: Array<() => void>
  private closed = false

  /**
   * `me` is this client's author id and `secretKey` its Ed25519 seed (the
   * client's `identity` option), to answer owners' challenges; `trust`
   * checks every message this member relies on, as the owner will.
   */
  constructor(space: Space, rules: MutexRules, me: { authorId: string; secretKey: Uint8Array }, trust: Trust) {
    if (!rules.members.includes(me.authorId)) throw new SteadError('malformed', `${me.authorId} is not a member of ${rules.resource}`)
    if (rules.members.length > MAX_MEMBERS) throw new SteadError('too-large', `${rules.members.length} members; at most ${MAX_MEMBERS}`)
    this.space = space
    this.rules = rules
    this.me = me.authorId
    this.signer = (bytes) => trust.crypto.sign(me.secretKey, bytes)
    this.trust = trust
    this.registers = rules.members.map((author) => ({ author, handle: space.register<MutexMessage>(registerKey(rules.resource, author)) }))
    this.unsubscribe = this.registers.map((r) => r.handle.subscribe(() => this.read()))
    // Also now and then: a reply that failed, or a member the relays could not name yet, is retried without waiting for a change.
    this.timer = setInterval(() => this.read(), RETRY_MS)
    this.timer.unref?.()
    this.read()
  }

  /** This member's request that is still outstanding, if any. */
  get request(): RequestRef | undefined {
    return this.mine
  }

  /**
   * Requests the resource and resolves once this member holds it, with the
   * proof to show its owner.
   *
   * @throws SteadError `conflict` while a request of this member is outstanding; `timeout`/`aborted` as the options say (the request stays: `release()` ends it).
   */
  async acquire(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<AcquisitionProof> {
    if (this.requesting) throw new SteadError('conflict', 'this member is requesting already')
    this.requesting = true
    const requested = this.writeRequest()
    this.requested = requested.catch(() => undefined)
    const index = await requested
    let proof: AcquisitionProof | undefined
    await this.until(() => (proof = this.proofFor(index)) !== undefined, options)
    return proof as AcquisitionProof
  }

  /** Writes this member's request (again, while its clock does not verify); resolves with its stable index. */
  private async writeRequest(): Promise<number> {
    let index: number
    try {
      await this.reading
      if (this.mine) throw new SteadError('conflict', `a request of this member (at ${this.mine.index}) is outstanding: release it first`)
      // A request committed with a clock the audit could not verify proves nothing: release it and ask again.
      for (let attempt = 1; ; attempt++) {
        // Known before any reply this member writes next: its replies must list it (see `reply`).
        index = await this.write(
          () => ({ kind: 'request' }),
          (at) => (this.mine = { author: this.me, index: at }),
        )
        if (await this.proven(index)) break
        await this.write(
          () => ({ kind: 'release', of: index }),
          () => (this.mine = undefined),
        )
        if (attempt === MAX_ATTEMPTS) throw new SteadError('unsupported', `${MAX_ATTEMPTS} requests committed with clocks the relays could not verify`)
      }
    } finally {
      this.requesting = false
    }
    return index
  }

  /** Ends this member's outstanding request (held or not); resolves once the release is in the stable order. */
  async release(): Promise<void> {
    // A request still being written is released too, once it is known.
    await this.requested
    await this.reading
    const mine = this.mine
    if (!mine) return
    for (let attempt = 1; attempt <= MAX_ATTEMPTS; attempt++) {
      const at = await this.write(
        () => ({ kind: 'release', of: mine.index }),
        () => (this.mine = undefined),
      )
      if (await this.proven(at)) break
    }
  }

  /** Signs an owner's challenge for this member's outstanding request (see `GuardedResource.challenge`). */
  async present(nonce: Uint8Array): Promise<Uint8Array> {
    const mine = this.mine
    if (!mine) throw new SteadError('conflict', 'this member has no outstanding request to present')
    const id = this.log.get(mine.index)?.proof.id ?? (await this.space.clockProof(mine.index)).id
    return this.signer(challengeBytes(this.rules.resource, nonce, id))
  }

  /** Stops answering requests. */
  close(): void {
    this.closed = true
    clearInterval(this.timer)
    for (const off of this.unsubscribe) off()
    for (const w of [...this.waiters]) w()
  }

  /** Writes one message after the previous one committed (made then, so it says what holds then); resolves with its stable index. */
  private write(make: () => MutexMessage, committed?: (index: number) => void): Promise<number> {
    const key = registerKey(this.rules.resource, this.me)
    const done = this.writes.then(async () => {
      const message = make()
      const r = await this.space.register<MutexMessage>(key).set(message, { safe: true })
      if (r.status !== 'committed') throw new SteadError(r.reason, `the ${message.kind} was rejected: ${r.detail}`)
      // Before the next write is made: what it says may depend on this one.
      committed?.(r.index)
      return r.index
    })
    this.writes = done.catch(() => undefined)
    return done
  }

  /** Takes in what the members' registers' stable histories added: proven messages into the log, and replies to the requests outstanding. */
  private read(): void {
    // One read waiting behind the running one covers every change meanwhile.
    if (this.readQueued) return
    this.readQueued = true
    this.reading = this.reading.then(async () => {
      this.readQueued = false
      if (this.closed) return
      const fresh = this.registers
        .flatMap(({ author, handle }) => handle.history().map((h) => ({ author, index: h.index })))
        .filter((h) => h.index > this.seen)
        .sort((a, b) => a.index - b.index)
      for (const { author, index } of fresh) {
        this.seen = index
        const logged = await this.open(author, index)
        if (logged) this.log.set(index, logged)
      }
      forgetOldest(this.log)
      // This member's own register first: after a restart, its replies must list its own outstanding request.
      const ordered = [...this.registers].sort((x, y) => Number(y.author === this.me) - Number(x.author === this.me))
      for (const { author, handle } of ordered) {
        const pending = this.provenPending(author) ?? pendingOf(author, await this.latest(author, handle))
        if (author === this.me) {
          // Once, after a restart: a request this member made before is still its own to release.
          if (!this.learnedMine && pending !== undefined) {
            if (!this.requesting) this.mine ??= pending ?? undefined
            this.learnedMine = true
          }
        } else if (pending && !this.replied.has(`${pending.author}@${pending.index}`)) this.reply(pending)
      }
      for (const w of [...this.waiters]) w()
    })
  }

  /**
   * A member's latest stable message, as its register's value says (not
   * proven: it only decides whom this member answers). Memory holds it
   * unless the replica started from a snapshot after it; then the relays
   * are asked (until they name one).
   */
  private async latest(author: string, handle: RegisterHandle<MutexMessage>): Promise<Entry | null | undefined> {
    const held = handle.history().at(-1)
    if (held) return held
    const fetched = this.latestFetched.get(author)
    if (fetched) return fetched
    // A member with no message yet is asked about again only now and then (it may be one the replica has not caught up on).
    const none = this.noneSince.get(author)
    if (none !== undefined && Date.now() - none < RETRY_MS * 5) return null
    try {
      const entry = (await handle.historyPage({ limit: 1, timeoutMs: 10_000 })).at(-1)
      if (entry) this.latestFetched.set(author, entry)
      else this.noneSince.set(author, Date.now())
      return entry ?? null
    } catch {
      return undefined // no relay answers yet: asked again at the next read
    }
  }

  /**
   * Answers a request, after this member saw it committed (so its reply's
   * clock follows it), listing its own outstanding request if that one is
   * ordered before: a correct member's own listing is what keeps a later
   * request from a proof until it released (Chrono's reply lists every
   * earlier request it knows; the others add nothing the verifier relies on).
   */
  private reply(to: RequestRef): void {
    this.replied.add(`${to.author}@${to.index}`)
    forgetOldest(this.replied)
    const made = this.write(() => {
      const mine = this.mine
      return { kind: 'reply', to, before: mine && mine.index < to.index ? [mine] : [], pending: mine ?? null }
    })
    // A reply that failed, or committed with a clock nobody can prove, is made again at a later read.
    void made.then((index) => this.proven(index)).then(
      (ok) => ok || this.replied.delete(`${to.author}@${to.index}`),
      () => this.replied.delete(`${to.author}@${to.index}`),
    )
  }

  /** Whether this client holds a clock proof of its update at `index` (its clock verified). */
  private async proven(index: number): Promise<boolean> {
    return this.space.clockProof(index).then(
      () => true,
      () => false,
    )
  }

  /** The request a member's latest proven message says is outstanding (see `pendingOf`); undefined when none of its messages is proven here. */
  private provenPending(author: string): RequestRef | null | undefined {
    let latest: Logged | undefined
    for (const m of this.log.values()) if (m.author === author && (!latest || m.index > latest.index)) latest = m
    if (!latest) return undefined
    return pendingOf(author, { index: latest.index, value: latest.message })
  }

  /** The message at `index`, read from its proven envelope (not from the register's value, which any writer of the space may overwrite). */
  private async open(author: string, index: number): Promise<Logged | undefined> {
    try {
      const proof = await this.space.clockProof(index)
      const certified = await verifyCommitted(this.trust, proof)
      const message = messageIn(this.rules.resource, certified, author)
      return message && { author, index, message, proof, certified }
    } catch {
      // Committed before this client ran, or with a clock the audit could not verify: nobody can prove anything with it.
      return undefined
    }
  }

  /** The proof for this member's request at `index`, if the log holds one yet. */
  private proofFor(index: number): AcquisitionProof | undefined {
    const logged = [...this.log.values()]
    const request = this.log.get(index)
    if (!request) return undefined
    const replies: ClockProof[] = []
    const releases: ClockProof[] = []
    const releaseAfter = (author: string, after: number): ClockProof | undefined =>
      logged.find((m) => m.author === author && m.message.kind === 'release' && m.index > after)?.proof
    for (const member of this.rules.members) {
      if (member === this.me) continue
      // As the owner checks it: a reply to this request, written after its author saw it (a reply made up in advance does not count).
      const reply = logged.find(
        (m) => m.author === member && m.message.kind === 'reply' && m.message.to.author === this.me && m.message.to.index === index && causalOrder(request.certified, m.certified) === 'before',
      )
      if (reply?.message.kind === 'reply') {
        replies.push(reply.proof)
        for (const r of reply.message.before) {
          const released = releaseAfter(r.author, r.index)
          if (!released) return undefined
          releases.push(released)
        }
        continue
      }
      const released = releaseAfter(member, index)
      if (!released) return undefined
      releases.push(released)
    }
    return { request: request.proof, replies, releases: [...new Set(releases)] }
  }

  private async until(done: () => boolean, options: { timeoutMs?: number; signal?: AbortSignal }): Promise<void> {
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs
    while (!done()) {
      if (this.closed) throw new SteadError('closed', `the mutex on ${this.rules.resource} was closed`)
      if (options.signal?.aborted) throw new SteadError('aborted', `waiting for ${this.rules.resource} was aborted`)
      if (deadline !== undefined && Date.now() >= deadline) throw new SteadError('timeout', `${this.rules.resource} not acquired within ${options.timeoutMs} ms`)
      await new Promise<void>((wake) => {
        const done = (): void => {
          clearTimeout(timer)
          options.signal?.removeEventListener('abort', done)
          this.waiters.delete(done)
          wake()
        }
        const timer = deadline === undefined ? undefined : setTimeout(done, deadline - Date.now())
        options.signal?.addEventListener('abort', done, { once: true })
        this.waiters.add(done)
      })
    }
  }
}

/**
 * Checks an acquisition proof with the relays' keys alone and says who
 * holds the resource by it, and by which request.
 *
 * @throws SteadError `bad-signature` for a certificate or envelope that does not verify; `unauthorized` for a proof that does not entitle its holder (a member without a reply or a later release, an earlier request not released); `malformed` for messages that are not the protocol's.
 */
export async function verifyAcquisition({ crypto, cluster }: Trust, rules: MutexRules, proof: AcquisitionProof): Promise<Holder> {
  // Each member replies once to a request; releases: one per other member and one per request a reply lists (one per member at most).
  const others = rules.members.length - 1
  if (proof.replies.length > others || proof.releases.length > 2 * others) {
    throw new SteadError('too-large', `a proof for ${rules.members.length} members holds at most ${others} replies and ${2 * others} releases`)
  }
  const open = async (p: ClockProof): Promise<{ certified: CommittedClock; message: MutexMessage }> => {
    const certified = await verifyCommitted({ crypto, cluster }, p)
    const author = certified.env.authorId
    if (!rules.members.includes(author)) throw new SteadError('unauthorized', `${author} is not a member of ${rules.resource}`)
    const message = messageIn(rules.resource, certified, author)
    if (!message) throw new SteadError('malformed', `update ${certified.env.idHex} holds no ${rules.resource} message of its author`)
    return { certified, message }
  }
  const request = await open(proof.request)
  const holder = request.certified.env.authorId
  if (request.message.kind !== 'request') throw new SteadError('malformed', `the proof's request is a ${request.message.kind}`)
  const replies = await Promise.all(proof.replies.map(open))
  const releases = await Promise.all(proof.releases.map(open))
  // Opening verified each envelope, and so named it by the hash of its bytes.
  const ids = [request, ...replies, ...releases].map((o) => o.certified.env.idHex)
  if (new Set(ids).size !== ids.length) throw new SteadError('malformed', 'the proof holds one update twice')
  if (releases.some((r) => r.message.kind !== 'release')) throw new SteadError('malformed', 'a release of the proof is not one')
  const releasedAfter = (author: string, index: number): boolean => releases.some((r) => r.certified.env.authorId === author && r.certified.index > index)
  for (const member of rules.members) {
    if (member === holder) continue
    const reply = replies.find(
      (r) =>
        r.certified.env.authorId === member &&
        r.message.kind === 'reply' &&
        r.message.to.author === holder &&
        r.message.to.index === request.certified.index &&
        // The reply was written after its author saw the request: Chrono's clock comparison, on certified clocks.
        causalOrder(request.certified, r.certified) === 'before',
    )
    if (reply?.message.kind === 'reply') {
      const pending = reply.message.before.find((r) => !releasedAfter(r.author, r.index))
      if (pending) throw new SteadError('unauthorized', `${member} saw ${pending.author}'s request at ${pending.index} before this one, and the proof holds no release of it`)
    } else if (!releasedAfter(member, request.certified.index)) {
      throw new SteadError('unauthorized', `the proof holds neither a reply of ${member} to the request nor a release of ${member} after it`)
    }
  }
  return { author: holder, index: request.certified.index, key: request.certified.env.author, id: request.certified.env.idHex }
}

/** What the presenter of a proof signs for an owner: the resource, the owner's nonce and the request's envelope id. */
export function challengeBytes(resource: string, nonce: Uint8Array, requestId: string): Uint8Array {
  return encode(['stead/mutex/enter/v1', resource, nonce, requestId])
}

/**
 * The resource's owner: lets in one holder at a time, each with a proof
 * that verifies, presented by the request's author (it signs the owner's
 * fresh challenge), in the order of their requests (a proof for a request
 * not after the last one let in is a replay).
 */
export class GuardedResource {
  private holder: Holder | undefined
  private last = 0
  private readonly nonces = new Set<string>()
  private readonly trust: Trust
  private readonly rules: MutexRules
  constructor(trust: Trust, rules: MutexRules) {
    this.trust = trust
    this.rules = rules
  }

  /** Who is in, if anyone. */
  get current(): Holder | undefined {
    return this.holder
  }

  /** A fresh nonce for one `enter`: the presenter signs it with `ChronoMutex.present`. At most 1,024 are open. */
  challenge(): Uint8Array {
    const nonce = globalThis.crypto.getRandomValues(new Uint8Array(16))
    this.nonces.add(toHex(nonce))
    forgetOldest(this.nonces, 1024)
    return nonce
  }

  /** @throws SteadError as `verifyAcquisition`; `unauthenticated` for a nonce not issued here (or used) or a signature not by the request's author; `conflict` while another holder is in or for a request not after the last one let in. */
  async enter(proof: AcquisitionProof, nonce: Uint8Array, sig: Uint8Array): Promise<Holder> {
    if (!this.nonces.delete(toHex(nonce))) throw new SteadError('unauthenticated', 'a nonce this owner did not issue, or used already')
    const who = await verifyAcquisition(this.trust, this.rules, proof)
    if (!(await this.trust.crypto.verify(who.key, challengeBytes(this.rules.resource, nonce, who.id), sig))) {
      throw new SteadError('unauthenticated', `the presenter is not ${who.author}, whose request the proof is for`)
    }
    if (this.holder) throw new SteadError('conflict', `${this.holder.author} holds ${this.rules.resource} (request ${this.holder.index})`)
    if (who.index <= this.last) throw new SteadError('conflict', `request ${who.index} is not after the last one let in (${this.last}): a replayed proof`)
    this.holder = who
    this.last = who.index
    return who
  }

  /** The holder leaves (before it releases its request). */
  exit(who: RequestRef): void {
    if (this.holder?.author === who.author && this.holder.index === who.index) this.holder = undefined
  }
}

/**
 * The one protocol message `author` wrote in a certified update: a write
 * to its own register, in a safe group the audit applied. Anything else
 * (no write, several, a rejected one, a value that is not a message) is none.
 */
export function messageIn(resource: string, certified: CommittedClock, author: string): MutexMessage | undefined {
  if (certified.env.authorId !== author) return undefined
  const write = writeIn(certified, registerKey(resource, author))
  return write && parseMessage(write.value)
}

function parseMessage(v: unknown): MutexMessage | undefined {
  if (typeof v !== 'object' || v === null) return undefined
  const m = v as Record<string, unknown>
  if (m.kind === 'request') return { kind: 'request' }
  if (m.kind === 'release' && isIndex(m.of)) return { kind: 'release', of: m.of }
  if (m.kind === 'reply' && isRef(m.to) && Array.isArray(m.before) && m.before.length <= MAX_MEMBERS && m.before.every(isRef) && (m.pending === null || isRef(m.pending))) {
    return { kind: 'reply', to: m.to, before: m.before, pending: m.pending }
  }
  return undefined
}

const isIndex = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) > 0
const isRef = (x: unknown): x is RequestRef => typeof x === 'object' && x !== null && typeof (x as RequestRef).author === 'string' && isIndex((x as RequestRef).index)
