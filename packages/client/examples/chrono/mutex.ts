/**
 * Byzantine-tolerant mutual exclusion on Stead, after Chrono §5.1 (itself
 * after Lamport's algorithm), without a total order: members of a space
 * take turns on a shared resource, and whoever takes it hands the
 * resource's owner an acquisition proof the owner checks with the relays'
 * keys alone, trusting neither the member nor any single relay.
 *
 * Messages are regular register writes, one register per member
 * (`mutex/<resource>/<author id>`) and one message per envelope, so each
 * is signed by its author and carries a clock the relays' validators
 * certify as soon as they see it (ceil((N+f+1)/2) clock votes, long before
 * any commit): nothing here waits for the BFT order.
 *
 * - REQUEST: a member asks for the resource (one outstanding at a time),
 *   naming it with a fresh random nonce.
 * - REPLY: every other member answers each request it sees, naming it by
 *   author and nonce (so it was written after the request existed, and its
 *   clock follows it), listing its own outstanding request if that one is
 *   ordered before.
 * - RELEASE: the member is done with its request (named by its nonce).
 *
 * The total order ≺ on messages is `clockRank`: by the certified clock's
 * weight (the sum of its full clock, which grows along every causal
 * chain), then author, then seq. It contains the causal order of
 * certified clocks, which is what Chrono asks of ≺.
 *
 * A member holds the resource when, for every other member, it has a REPLY
 * to its request whose listed request was released since, or a RELEASE
 * ordered after its request. The proof is those messages' validator
 * certificates; `verifyAcquisition` checks exactly that. Mutual exclusion
 * holds among correct members whatever the others do: of two correct
 * members' outstanding requests, the later (by ≺) cannot be proven until
 * the earlier one's author released, because that author's reply lists
 * it, or was written before it (then the later request follows the reply
 * causally, so follows by ≺ the request it answered).
 *
 * Anyone who reads the space can assemble a member's proof, so the owner
 * also has the presenter sign its challenge with the request's author key
 * (`GuardedResource.challenge`, `ChronoMutex.present`).
 *
 * Limits: a Byzantine member can stall the others (it can refuse to reply,
 * as in the paper); it cannot let two correct members in at once. The
 * relays keep clock votes about ten minutes: a member ranks a request by
 * its votes, so one that started after a request's votes were dropped
 * answers it only while it has no request of its own outstanding. The
 * owner keeps the last request it let in in memory: a real one persists
 * it.
 */
import { SteadError, clockRank, encode, toHex } from '@stead/core'
import type { ClockProof, RegisterHandle, Space } from '@stead/client'
import { forgetOldest, regularWriteIn, verifyVoted, type Trust, type VotedClock } from './trust.ts'

export type { Trust } from './trust.ts'

/** One member's request, named by its author and the nonce it drew. */
export type RequestRef = {
  readonly author: string
  readonly nonce: string
}

/** What a member writes to its register. */
export type MutexMessage =
  | { readonly kind: 'request'; readonly nonce: string }
  | { readonly kind: 'reply'; readonly to: RequestRef; readonly before: RequestRef[]; readonly pending: RequestRef | null }
  | { readonly kind: 'release'; readonly of: string }

/** Whom a valid proof entitles: the request's author (id and public key), its nonce, envelope id and certified clock. */
export type Holder = RequestRef & { readonly key: Uint8Array; readonly id: string; readonly clock: VotedClock }

/** What `acquire` returns and the resource's owner checks: the validator certificates of the messages that entitle the holder. */
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

/** A message with its certified clock and proof. */
interface Logged {
  readonly author: string
  readonly message: MutexMessage
  readonly proof: ClockProof
  readonly clock: VotedClock
}

/** At most this many members: each request costs every other member a reply. */
export const MAX_MEMBERS = 64

/** Messages (and answered requests) a member keeps in memory: the latest (a turn of 64 members is about 4,200). */
const MAX_LOGGED = 20_000

/** Envelopes a member waits on the relays to certify at once; more are looked at by later reads. */
const MAX_UNPROVEN = 256

/** How many times a member writes a message the relays do not certify before it gives up. */
const MAX_ATTEMPTS = 3

/** How long a member waits for the relays to certify one of its own messages. */
const CERTIFY_MS = 30_000

/** How often a member looks again without a change (a reply that failed, a request it could not rank yet). */
const RETRY_MS = 1000

/** A message the relays have not certified (yet) is waited for this long after it was first seen, then left. */
const GIVE_UP_MS = 60_000

const isNonce = (x: unknown): x is string => typeof x === 'string' && /^[0-9a-f]{32}$/.test(x)
const isRef = (x: unknown): x is RequestRef => typeof x === 'object' && x !== null && typeof (x as RequestRef).author === 'string' && isNonce((x as RequestRef).nonce)
const sameRef = (a: RequestRef, b: RequestRef): boolean => a.author === b.author && a.nonce === b.nonce

export function registerKey(resource: string, author: string): string {
  return `mutex/${resource}/${author}`
}

/** The request a member's message says is outstanding: null for none, undefined when it is not a message of the protocol. */
function pendingOf(author: string, value: unknown): RequestRef | null | undefined {
  const m = parseMessage(value)
  if (!m) return undefined
  if (m.kind === 'request') return { author, nonce: m.nonce }
  if (m.kind === 'release') return null
  return m.pending && m.pending.author === author ? m.pending : null
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
  /** Certified messages by envelope id (the latest MAX_LOGGED). */
  private readonly log = new Map<string, Logged>()
  /** Envelopes of members' registers being waited for: the relays have not certified them yet. */
  private readonly unproven = new Set<string>()
  /** Certified envelopes that hold no message of their author (a write to another member's register, say). */
  private readonly ignored = new Set<string>()
  /** Stable indices of members' registers already looked up. */
  private readonly indexed = new Set<number>()
  /** Requests this member answered, as `author/nonce` (the latest MAX_LOGGED). */
  private readonly replied = new Set<string>()
  /** This member's outstanding request, once certified; cleared when its release is. */
  private mine: Logged | undefined
  /** This member's writes made and not certified (or failed) yet. */
  private writing = 0
  /** Set from the moment `acquire` writes a request until it is certified: one request at a time. */
  private requesting = false
  /** The latest request phase of `acquire` (settled once the request is certified or failed). */
  private requested: Promise<unknown> = Promise.resolve()
  private readonly signer: (bytes: Uint8Array) => Promise<Uint8Array>
  private readonly timer: ReturnType<typeof setInterval>
  /** This member's writes go one at a time, each once the previous one is certified: one message per envelope. */
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
    // Also now and then: a reply that failed, or a register the relays could not serve yet, is retried without waiting for a change.
    this.timer = setInterval(() => this.read(), RETRY_MS)
    this.timer.unref?.()
    this.read()
  }

  /** This member's request that is outstanding, once the relays certified it. */
  get request(): (RequestRef & { readonly id: string }) | undefined {
    const mine = this.mine
    return mine?.message.kind === 'request' ? { author: this.me, nonce: mine.message.nonce, id: mine.proof.id } : undefined
  }

  /**
   * Requests the resource and resolves once this member holds it, with the
   * proof to show its owner.
   *
   * @throws SteadError `conflict` while a request of this member is outstanding; `timeout` if the relays certify none of three writes of the request (30 s each), or as `options` say (the request stays: `release()` ends it); `aborted`.
   */
  async acquire(options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<AcquisitionProof> {
    if (this.requesting) throw new SteadError('conflict', 'this member is requesting already')
    this.requesting = true
    const requested = this.writeRequest()
    this.requested = requested.catch(() => undefined)
    const request = await requested
    let proof: AcquisitionProof | undefined
    await this.until(() => {
      // Released meanwhile (release() was called): this request entitles nobody any more.
      if (this.mine?.proof.id !== request.proof.id) throw new SteadError('aborted', `the request ${request.proof.id} was released while waiting for ${this.rules.resource}`)
      return (proof = this.proofFor(request)) !== undefined
    }, options)
    return proof as AcquisitionProof
  }

  /** Writes this member's request; resolves with it once certified. */
  private async writeRequest(): Promise<Logged> {
    try {
      await this.reading
      if (this.mine) throw new SteadError('conflict', `a request of this member (${this.mine.proof.id}) is outstanding: release it first`)
      // Known before any reply this member writes next: its replies must list it (see `reply`). A fresh nonce for each write.
      return await this.write(() => ({ kind: 'request', nonce: toHex(globalThis.crypto.getRandomValues(new Uint8Array(16))) }), (logged) => (this.mine = logged))
    } finally {
      this.requesting = false
    }
  }

  /** Ends this member's outstanding request (held or not); resolves once the relays certified the release. */
  async release(): Promise<void> {
    // A request still being written is released too, once it is certified.
    await this.requested
    await this.reading
    const mine = this.mine
    if (mine?.message.kind !== 'request') return
    await this.write(
      () => ({ kind: 'release', of: (mine.message as { nonce: string }).nonce }),
      () => (this.mine = undefined),
    )
  }

  /** Signs an owner's challenge for this member's outstanding request (see `GuardedResource.challenge`). */
  async present(nonce: Uint8Array): Promise<Uint8Array> {
    const mine = this.mine
    if (!mine) throw new SteadError('conflict', 'this member has no outstanding request to present')
    return this.signer(challengeBytes(this.rules.resource, nonce, mine.proof.id))
  }

  /** Stops answering requests. */
  close(): void {
    this.closed = true
    clearInterval(this.timer)
    for (const off of this.unsubscribe) off()
    for (const w of [...this.waiters]) w()
  }

  /**
   * Writes one message once the previous one is certified (made then, so it
   * says what holds then), in an envelope of its own; resolves once the
   * relays certified it.
   */
  private write(make: () => MutexMessage, certified?: (logged: Logged) => void): Promise<Logged> {
    const key = registerKey(this.rules.resource, this.me)
    this.writing++
    const done = this.writes.then(async () => {
      for (let attempt = 1; ; attempt++) {
        const message = make()
        const r = await this.space.register<MutexMessage>(key).set(message)
        if (r.status !== 'stored' || r.update === undefined) throw new SteadError('conflict', `the ${message.kind} was not sent (${r.status})`)
        const logged = await this.open(r.update, CERTIFY_MS)
        if (logged) {
          // Before the next write is made: what it says may depend on this one.
          certified?.(logged)
          this.wake()
          return logged
        }
        // Never certified (it committed before enough relays voted, say): nobody can prove anything with it, so it is written again.
        if (attempt === MAX_ATTEMPTS) throw new SteadError('timeout', `the relays certified none of ${MAX_ATTEMPTS} writes of this member's ${message.kind} within ${CERTIFY_MS} ms each`)
      }
    })
    this.writes = done.catch(() => undefined).finally(() => this.writing--)
    return done
  }

  /**
   * The certified message in envelope `id`, read from its signed envelope
   * (not from a register's value, which any writer of the space may
   * overwrite), logged; null for a certified envelope that holds none,
   * undefined for one not certified (yet).
   */
  private async open(id: string, waitMs: number): Promise<Logged | null | undefined> {
    const known = this.log.get(id)
    if (known) return known
    if (this.ignored.has(id)) return null
    let proof: ClockProof
    let clock: VotedClock
    try {
      proof = await this.space.clockProof(id, { kind: 'validators', timeoutMs: waitMs })
      clock = await verifyVoted(this.trust, proof)
    } catch {
      return undefined
    }
    const author = clock.env.authorId
    const message = messageIn(this.rules.resource, clock, author)
    if (!message || !this.rules.members.includes(author)) {
      this.ignored.add(id)
      forgetOldest(this.ignored, MAX_LOGGED)
      return null
    }
    const logged: Logged = { author, message, proof, clock }
    this.log.set(id, logged)
    forgetOldest(this.log, MAX_LOGGED)
    return logged
  }

  private wake(): void {
    for (const w of [...this.waiters]) w()
  }

  /** Takes in the messages the members' registers got (certified ones into the log), and replies to the requests outstanding. */
  private read(): void {
    // One read waiting behind the running one covers every change meanwhile.
    if (this.readQueued) return
    this.readQueued = true
    this.reading = this.reading.then(async () => {
      this.readQueued = false
      if (this.closed) return
      await this.collect()
      this.learnMine()
      for (const { author, handle } of this.registers) {
        if (author === this.me) continue
        // What its latest certified message says, and what its register shows (certified or not yet; any writer may
        // overwrite the value, which costs at most a useless reply). A reply that does not follow its request is made again.
        for (const pending of [this.latestPending(author), pendingOf(author, handle.value)]) {
          if (!pending) continue
          if (this.replied.has(`${pending.author}/${pending.nonce}`) && this.writing === 0 && this.replyFellShort(pending, handle)) this.replied.delete(`${pending.author}/${pending.nonce}`)
          if (!this.replied.has(`${pending.author}/${pending.nonce}`)) this.reply(pending)
        }
      }
      this.wake()
    }).catch(() => undefined) // a read that failed is made again at the next change or tick
  }

  /** Certifies what the members' registers hold: undecided envelopes, and the stable history's (by the commits this client applied). */
  private async collect(): Promise<void> {
    const ids = new Set<string>()
    for (const { author, handle } of this.registers) {
      for (const u of handle.undecided()) if (u.author === author) ids.add(u.id)
      for (const h of handle.history()) {
        if (this.indexed.has(h.index)) continue
        this.indexed.add(h.index)
        forgetOldest(this.indexed, MAX_LOGGED)
        // A commit this client applied names its envelope; one it started after does not (its value still says whom to answer).
        const id = await this.space.clockProof(h.index).then((p) => p.id, () => undefined)
        if (id) ids.add(id)
      }
    }
    for (const id of ids) {
      if (this.log.has(id) || this.ignored.has(id) || this.unproven.has(id)) continue
      if (this.unproven.size >= MAX_UNPROVEN) break
      // Waited for apart: the relays certify it within milliseconds, or never (refused, or an equivocation's twin).
      this.unproven.add(id)
      void this.open(id, GIVE_UP_MS).then((logged) => {
        this.unproven.delete(id)
        if (logged) this.read()
      })
    }
  }

  /**
   * What this member has outstanding, as its latest certified message
   * says, while none of its writes is in flight (they set it themselves):
   * after a restart, a request it made before is still its own to release.
   */
  private learnMine(): void {
    if (this.writing > 0 || this.requesting) return
    const latest = this.latestOf(this.me)
    if (!latest || (this.mine && this.mine.clock.env.seq >= latest.clock.env.seq)) return
    const pending = pendingOf(this.me, latest.message)
    this.mine = pending ? [...this.log.values()].find((m) => m.author === this.me && m.message.kind === 'request' && m.message.nonce === pending.nonce) : undefined
  }

  /** A member's latest certified message (its highest seq). */
  private latestOf(author: string): Logged | undefined {
    let latest: Logged | undefined
    for (const m of this.log.values()) if (m.author === author && (!latest || m.clock.env.seq > latest.clock.env.seq)) latest = m
    return latest
  }

  /** The request a member's latest certified message says is outstanding; undefined when none of its messages is certified here. */
  private latestPending(author: string): RequestRef | null | undefined {
    const latest = this.latestOf(author)
    return latest && pendingOf(author, latest.message)
  }

  /**
   * Answers a request, after this member saw it (so its reply's clock
   * follows it), listing its own outstanding request if that one is
   * ordered before: a correct member's own listing is what keeps a later
   * request from a proof until it released. With a request of its own
   * outstanding, it answers only requests it can rank (certified here).
   */
  private reply(to: RequestRef): void {
    const mine = this.mine
    const target = this.requestOf(to)
    if (mine && !target) return // not ranked yet: asked again at a later read
    this.replied.add(`${to.author}/${to.nonce}`)
    forgetOldest(this.replied, MAX_LOGGED)
    const made = this.write(() => {
      const now = this.mine
      const ref = now?.message.kind === 'request' ? { author: this.me, nonce: now.message.nonce } : null
      // Ranked at write time: `mine` may have changed since this reply was decided on.
      if (now && !target) throw new SteadError('conflict', 'a request of this member came first: the reply waits until it can rank the other')
      const before = ref && now && target && clockRank(now.clock, target.clock) < 0 ? [ref] : []
      return { kind: 'reply', to, before, pending: ref }
    })
    // A reply that failed is made again at a later read.
    void made.catch(() => this.replied.delete(`${to.author}/${to.nonce}`))
  }

  /**
   * Whether this member's certified replies to a request all rank before
   * it (the request was not citable yet when the reply was made, so the
   * reply does not follow it) while the request is in the stable history
   * by now: a reply made now follows it, so it is made again.
   */
  private replyFellShort(to: RequestRef, handle: RegisterHandle<MutexMessage>): boolean {
    const target = this.requestOf(to)
    if (!target || handle.undecided().some((u) => u.id === target.proof.id)) return false
    const mine = [...this.log.values()].filter((m) => m.author === this.me && m.message.kind === 'reply' && sameRef(m.message.to, to))
    return mine.length > 0 && mine.every((m) => clockRank(m.clock, target.clock) <= 0)
  }

  /** A request, certified here. */
  private requestOf(r: RequestRef): Logged | undefined {
    for (const m of this.log.values()) if (m.author === r.author && m.message.kind === 'request' && m.message.nonce === r.nonce) return m
    return undefined
  }

  /** The proof for this member's request, if the log holds one yet. */
  private proofFor(request: Logged): AcquisitionProof | undefined {
    if (request.message.kind !== 'request') return undefined
    const mine: RequestRef = { author: this.me, nonce: request.message.nonce }
    const logged = [...this.log.values()]
    const replies: ClockProof[] = []
    const releases: ClockProof[] = []
    const releaseOf = (r: RequestRef): ClockProof | undefined => logged.find((m) => m.author === r.author && m.message.kind === 'release' && m.message.of === r.nonce)?.proof
    for (const member of this.rules.members) {
      if (member === this.me) continue
      // A reply that follows the request (ranked after it), whose listed request was released since.
      let answered = false
      for (const reply of logged) {
        if (reply.author !== member || reply.message.kind !== 'reply' || !sameRef(reply.message.to, mine) || clockRank(reply.clock, request.clock) <= 0) continue
        const listed = reply.message.before.map(releaseOf)
        if (listed.some((r) => r === undefined)) continue
        replies.push(reply.proof)
        releases.push(...(listed as ClockProof[]))
        answered = true
        break
      }
      if (answered) continue
      const released = logged.find((m) => m.author === member && m.message.kind === 'release' && clockRank(m.clock, request.clock) > 0)?.proof
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
 * @throws SteadError `bad-signature` for a certificate or envelope that does not verify; `unsupported` for a commit's proof (no weight to rank by); `unauthorized` for a proof that does not entitle its holder (a member without a reply or a later release, a listed request not released); `malformed` for messages that are not the protocol's.
 */
export async function verifyAcquisition(trust: Trust, rules: MutexRules, proof: AcquisitionProof): Promise<Holder> {
  // Each member replies once to a request; releases: one per other member and one per request a reply lists (one per member at most).
  const others = rules.members.length - 1
  if (proof.replies.length > others || proof.releases.length > 2 * others) {
    throw new SteadError('too-large', `a proof for ${rules.members.length} members holds at most ${others} replies and ${2 * others} releases`)
  }
  const open = async (p: ClockProof): Promise<{ clock: VotedClock; message: MutexMessage }> => {
    const clock = await verifyVoted(trust, p)
    const author = clock.env.authorId
    if (!rules.members.includes(author)) throw new SteadError('unauthorized', `${author} is not a member of ${rules.resource}`)
    const message = messageIn(rules.resource, clock, author)
    if (!message) throw new SteadError('malformed', `update ${clock.env.idHex} holds no ${rules.resource} message of its author`)
    return { clock, message }
  }
  const request = await open(proof.request)
  const holder = request.clock.env.authorId
  if (request.message.kind !== 'request') throw new SteadError('malformed', `the proof's request is a ${request.message.kind}`)
  const ref: RequestRef = { author: holder, nonce: request.message.nonce }
  const replies = await Promise.all(proof.replies.map(open))
  const releases = await Promise.all(proof.releases.map(open))
  // Opening verified each envelope, and so named it by the hash of its bytes.
  const ids = [request, ...replies, ...releases].map((o) => o.clock.env.idHex)
  if (new Set(ids).size !== ids.length) throw new SteadError('malformed', 'the proof holds one update twice')
  if (releases.some((r) => r.message.kind !== 'release')) throw new SteadError('malformed', 'a release of the proof is not one')
  const released = (r: RequestRef): boolean => releases.some((x) => x.clock.env.authorId === r.author && x.message.kind === 'release' && x.message.of === r.nonce)
  for (const member of rules.members) {
    if (member === holder) continue
    // A reply names the request by its nonce, which nobody knew before the request existed: it was written after it.
    // And it ranks after the request: a reply made before its author's replica held the request (it could not cite it yet) does not follow it.
    const reply = replies.find((r) => r.clock.env.authorId === member && r.message.kind === 'reply' && sameRef(r.message.to, ref) && clockRank(r.clock, request.clock) > 0)
    if (reply?.message.kind === 'reply') {
      const pending = reply.message.before.find((r) => !released(r))
      if (pending) throw new SteadError('unauthorized', `${member} had ${pending.author}'s request ${pending.nonce} outstanding before this one, and the proof holds no release of it`)
    } else if (!releases.some((r) => r.clock.env.authorId === member && clockRank(r.clock, request.clock) > 0)) {
      throw new SteadError('unauthorized', `the proof holds neither a reply of ${member} to the request nor a release of ${member} ordered after it`)
    }
  }
  return { ...ref, key: request.clock.env.author, id: request.clock.env.idHex, clock: request.clock }
}

/** What the presenter of a proof signs for an owner: the resource, the owner's nonce and the request's envelope id. */
export function challengeBytes(resource: string, nonce: Uint8Array, requestId: string): Uint8Array {
  return encode(['stead/mutex/enter/v1', resource, nonce, requestId])
}

/**
 * The resource's owner: lets in one holder at a time, each with a proof
 * that verifies, presented by the request's author (it signs the owner's
 * fresh challenge), in the order ≺ of their requests (a proof for a
 * request not after the last one let in is a replay).
 */
export class GuardedResource {
  private holder: Holder | undefined
  private last: VotedClock | undefined
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
    if (this.holder) throw new SteadError('conflict', `${this.holder.author} holds ${this.rules.resource} (request ${this.holder.id})`)
    if (this.last && clockRank(who.clock, this.last) <= 0) throw new SteadError('conflict', `request ${who.id} is not ordered after the last one let in (${this.last.env.idHex}): a replayed proof`)
    this.holder = who
    this.last = who.clock
    return who
  }

  /** The holder leaves (before it releases its request). */
  exit(who: RequestRef): void {
    if (this.holder && sameRef(this.holder, who)) this.holder = undefined
  }
}

/**
 * The one protocol message `author` wrote in a certified update: a regular
 * write to its own register, and nothing else to it. Anything else (no
 * write, several, a value that is not a message) is none.
 */
export function messageIn(resource: string, clock: VotedClock, author: string): MutexMessage | undefined {
  if (clock.env.authorId !== author) return undefined
  return parseMessage(regularWriteIn(clock, registerKey(resource, author)))
}

function parseMessage(v: unknown): MutexMessage | undefined {
  if (typeof v !== 'object' || v === null) return undefined
  const m = v as Record<string, unknown>
  if (m.kind === 'request' && isNonce(m.nonce)) return { kind: 'request', nonce: m.nonce }
  if (m.kind === 'release' && isNonce(m.of)) return { kind: 'release', of: m.of }
  if (m.kind === 'reply' && isRef(m.to) && Array.isArray(m.before) && m.before.length <= MAX_MEMBERS && m.before.every(isRef) && (m.pending === null || isRef(m.pending))) {
    return { kind: 'reply', to: m.to, before: m.before, pending: m.pending }
  }
  return undefined
}
