import { asSigned, decode, encode, encodeClockVote, toHex } from '@stead/core'
import type { Mesh } from '../mesh/types.ts'
import { decodeMessage, encodeMessage, signBlock, type Block, type BlockRef, type Committee, type Message, type SyncCrypto } from '../consensus/messages.ts'
import type { ByzantineStrategy } from './strategies.ts'

export { BYZANTINE_STRATEGIES, type ByzantineStrategy } from './strategies.ts'

export interface ByzantineContext {
  readonly me: number
  readonly committee: Committee
  readonly secretKey: Uint8Array
  readonly crypto: SyncCrypto
  /** A valid client envelope frame to put in an equivocating twin block. */
  readonly samplePayload: () => Uint8Array | undefined
  /** An envelope frame that conflicts with one some client sent elsewhere (same author and seq). */
  readonly conflictingPayload: (round: number) => Uint8Array | undefined
  /** Both envelope frames of one (author, seq) slot that a client filled twice, if there is such a pair. */
  readonly twinPair?: (round: number) => readonly Uint8Array[]
  /** A block of (round, author) this relay received, if it did (recent rounds only). */
  readonly received?: (round: number, author: number) => Block | undefined
}

/** split-refusal: the round of its bad block, the rounds it waits before building on it, and the rounds after which it goes silent. */
const SPLIT_ROUND = 6
const SPLIT_HOLD = 30
const SPLIT_SILENT_AFTER = 12

/** Requests of its kind a flooding strategy sends with each of its blocks. */
const FLOOD_REQUESTS = 20
/** Tiny blocks in each flood-blocks message (sent with each of its own blocks). */
const FLOOD_BLOCKS = 64

/**
 * A decorator on what an honest core sends: it rewrites each outgoing
 * message into none, one or several. The relay and the simulator put it
 * between the core and the network; the core itself never misbehaves.
 */
export class ByzantineBehaviour {
  readonly strategy: ByzantineStrategy
  private readonly ctx: ByzantineContext
  /** Twin of each own block, made once, so every odd peer gets the same one. */
  private readonly twins = new Map<string, Block>()
  /** split-refusal: its bad block, and the chain built on it (real own block digest → the block sent instead). */
  private bad: Block | null = null
  private readonly shadows = new Map<string, Block>()
  private lastShadow: Block | null = null

  constructor(strategy: ByzantineStrategy, ctx: ByzantineContext) {
    this.strategy = strategy
    this.ctx = ctx
  }

  /**
   * The twin of one of our blocks: other payload, and built on the twin of
   * our previous block, so the twins form a second chain that peers who
   * only see twins keep supporting (the strongest form of equivocation).
   */
  private twinOf(own: Block): Block {
    const made = this.twins.get(own.digestHex)
    if (made) return made
    const { secretKey, crypto } = this.ctx
    const sample = this.ctx.samplePayload()
    const [previous, ...others] = own.header.ancestors
    const shadow = previous && this.twins.get(toHex(previous.digest))
    const ancestors = shadow && previous ? [{ ...previous, digest: shadow.digest }, ...others] : own.header.ancestors
    const twin = signBlock(crypto, secretKey, { ...own.header, ancestors, payload: own.header.payload.length || !sample ? [] : [sample] })
    this.twins.set(own.digestHex, twin)
    if (this.twins.size > 64) this.twins.delete(this.twins.keys().next().value as string)
    return twin
  }

  /** Rewrites one message the honest core sends to peer `to`: none, one, or several. */
  outgoing(to: number, message: Message): Message[] {
    const { secretKey, crypto, me, committee } = this.ctx
    const own = message.kind === 'block' && message.block.header.author === me ? message.block : null
    switch (this.strategy) {
      case 'silent':
        return []
      case 'withhold-block': {
        // Its blocks reach only f+1 peers (and never through fetches): its leader slots stay
        // undecided until the indirect rule settles them.
        if (message.kind === 'blocks' || message.kind === 'wake') return []
        const reached = Array.from({ length: committee.keys.length }, (_, i) => i).filter((i) => i !== me).slice(0, committee.f + 1)
        return own && !reached.includes(to) ? [] : [message]
      }
      case 'blame-leader': {
        // Never references the previous round's leader, so its blocks blame every leader.
        if (!own || own.header.round === 1) return [message]
        const leader = (own.header.round - 1) % committee.keys.length
        if (leader === me) return [message]
        const ancestors = own.header.ancestors.filter((a) => a.author !== leader)
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...own.header, ancestors }) }]
      }
      case 'bad-signature':
        if (message.kind === 'block') return [{ kind: 'block', block: { ...message.block, signed: { bytes: message.block.signed.bytes, sig: flip(message.block.signed.sig) } } }]
        return [message]
      case 'unknown-ancestors': {
        if (!own) return [message]
        const ancestors = own.header.ancestors.map((a, i) => (i === 1 ? { ...a, digest: crypto.sha256(a.digest) } : a))
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...own.header, ancestors }) }]
      }
      case 'invalid-ancestors': {
        // Its own previous block last instead of first: every correct relay refuses it at the door.
        if (!own) return [message]
        const ancestors = [...own.header.ancestors.slice(1), own.header.ancestors[0] as Block['header']['ancestors'][number]]
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...own.header, ancestors }) }]
      }
      case 'flood': {
        if (!own) return [message]
        const far = [1000, 60, 3].map((ahead) => signBlock(crypto, secretKey, { ...own.header, round: own.header.round + ahead, payload: [] }))
        return [message, ...far.map((block) => ({ kind: 'block' as const, block }))]
      }
      case 'flood-sync':
      case 'flood-fetch':
      case 'flood-asks':
      case 'flood-wake': {
        // With each of its blocks, a burst of requests of one kind: what the peer's mesh budget must
        // absorb without serving it at the expense of consensus (issue 51).
        if (!own) return [message]
        const burst: Message[] =
          this.strategy === 'flood-sync'
            ? [{ kind: 'sync', fromRound: 0 }]
            : this.strategy === 'flood-fetch'
              ? [{ kind: 'fetch', digests: Array.from({ length: 16 }, (_, i) => new Uint8Array(32).fill(i + 1)) }]
              : this.strategy === 'flood-asks'
                ? [{ kind: 'own-last-ask' }, { kind: 'head-ask', space: 'sim', fromIndex: 0, round: 0 }]
                : own.header.payload.length
                  ? [{ kind: 'wake', payload: own.header.payload.slice(0, 64) }]
                  : []
        return [message, ...Array.from({ length: FLOOD_REQUESTS }, () => burst).flat()]
      }
      case 'flood-blocks': {
        // With each of its blocks, a message of tiny blocks of its own for the next rounds, whose
        // ancestors nobody holds, the last with a bad signature: blocks are charged one by one
        // before any signature is checked, and what nobody asked for is opened at a bounded rate.
        if (!own) return [message]
        const round = own.header.round
        const blocks = Array.from({ length: FLOOD_BLOCKS }, (_, i) => {
          const r = round + 1 + (i % 8)
          const ancestors = committee.keys.map((_k, author) => ({ round: r - 1, author, digest: crypto.sha256(Uint8Array.of(me, i, r & 0xff, (r >> 8) & 0xff)) }))
          // Its own previous block first, as a correct block lists it.
          ancestors.unshift(...ancestors.splice(me, 1))
          return signBlock(crypto, secretKey, { ...(committee.epoch ? { epoch: committee.epoch } : {}), round: r, author: me, ancestors, payload: [] })
        })
        const last = blocks[blocks.length - 1] as Block
        blocks[blocks.length - 1] = { ...last, signed: { bytes: last.signed.bytes, sig: flip(last.signed.sig) } }
        return [message, { kind: 'blocks', blocks }]
      }
      case 'forged-envelopes': {
        if (!own) return [message]
        const extra = this.ctx.conflictingPayload(own.header.round) ?? forgedFrame(own.header.payload[0])
        if (!extra) return [message]
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...own.header, payload: [...own.header.payload, extra] }) }]
      }
      case 'split-refusal':
        return this.splitRefusal(to, message, own)
      case 'vote-anything':
        return this.voteAnything(to, message, own)
      case 'equivocate': {
        if (!own) return [message]
        // Even peers get the real block, odd peers a twin for the same round, peer 0 both.
        if (to % 2 === 0 && to !== 0) return [message]
        const twin = this.twinOf(own)
        return to === 0 ? [message, { kind: 'block', block: twin }] : [{ kind: 'block', block: twin }]
      }
    }
  }
  /**
   * vote-anything: signs clock votes no validator would. With each of its
   * blocks it votes for both envelopes of a slot a client filled twice (one
   * author and seq), and every vote its honest core sends goes to odd peers
   * with another weight. A certificate takes ceil((N+f+1)/2) votes for one
   * weight: the correct relays' single vote per slot and their one weight
   * must keep either from becoming two.
   */
  private voteAnything(to: number, message: Message, own: Block | null): Message[] {
    const { secretKey, crypto } = this.ctx
    const sign = (space: string, id: Uint8Array, weight: number): readonly [string, Uint8Array, number, Uint8Array] => [space, id, weight, crypto.sign(secretKey, encodeClockVote(space, id, weight))]
    if (message.kind === 'clock-votes') return to % 2 === 0 ? [message] : [{ kind: 'clock-votes', votes: message.votes.map(([space, id, weight]) => sign(space, id, weight + 1)) }]
    if (!own) return [message]
    const votes = (this.ctx.twinPair?.(own.header.round) ?? []).flatMap((frame) => {
      try {
        const signed = asSigned(decode(frame))
        const [, space] = decode(signed.bytes) as [unknown, unknown]
        return typeof space === 'string' ? [sign(space, crypto.sha256(signed.bytes), own.header.round)] : []
      } catch {
        return []
      }
    })
    return votes.length ? [message, { kind: 'clock-votes', votes }] : [message]
  }

  /**
   * split-refusal: a block every correct relay refuses once it checks it
   * (two copies of one envelope, so one (author, seq) slot twice; without an
   * envelope at hand, two ancestors' digests swapped), sent with its real
   * block of round SPLIT_ROUND to the first f relays only; the others never
   * get it. SPLIT_HOLD rounds later (past the others' GC round) its blocks
   * build on it: a chain whose first block names the bad one as its own
   * previous block, sent instead of its real blocks. Relays that refused the
   * bad block refuse the chain and what cites it; relays whose GC round
   * passed the bad block never check it and accept the chain, and their
   * blocks cite it. SPLIT_SILENT_AFTER rounds later it says nothing more.
   */
  private splitRefusal(to: number, message: Message, own: Block | null): Message[] {
    const { secretKey, crypto, me, committee } = this.ctx
    // The first f relays other than itself get the bad block at once.
    const early = (peer: number): boolean => peer !== me && peer < committee.f + (me < committee.f ? 1 : 0)
    const bad = this.bad
    if (bad && (this.lastShadow?.header.round ?? 0) >= bad.header.round + SPLIT_HOLD + SPLIT_SILENT_AFTER) return []
    if (message.kind === 'blocks') {
      // Answers carry the chain, never the real blocks it replaced.
      return [{ ...message, blocks: message.blocks.map((b) => this.shadows.get(b.digestHex) ?? b) }]
    }
    if (message.kind === 'unknown') {
      // The core does not hold the chain it never made: hand it over instead (the bad block to early relays only).
      const held = message.digests.map((d) => {
        const hex = toHex(d)
        return [...this.shadows.values()].find((b) => b.digestHex === hex) ?? (bad && hex === bad.digestHex && early(to) ? bad : undefined)
      })
      const blocks = held.filter((b): b is Block => b !== undefined)
      const rest = message.digests.filter((_d, i) => held[i] === undefined)
      return [...(blocks.length ? [{ kind: 'blocks' as const, blocks }] : []), ...(rest.length ? [{ ...message, digests: rest }] : [])]
    }
    if (!own) return [message]
    const { round } = own.header
    if (!bad) {
      if (round < SPLIT_ROUND) return [message]
      const sample = this.ctx.samplePayload()
      let header: Block['header'] = { ...own.header, payload: sample ? [...own.header.payload, sample, sample] : own.header.payload }
      if (!sample) {
        // Two non-own ancestors of the previous round swap digests: each reference names the wrong slot.
        const ancestors = [...own.header.ancestors]
        const [i, j] = ancestors.flatMap((a, k) => (k > 0 && a.round === round - 1 ? [k] : []))
        if (i === undefined || j === undefined) return [message]
        const a = ancestors[i] as BlockRef
        const b = ancestors[j] as BlockRef
        ancestors[i] = { ...a, digest: b.digest }
        ancestors[j] = { ...b, digest: a.digest }
        header = { ...header, ancestors }
      }
      this.bad = signBlock(crypto, secretKey, header)
    }
    const made = this.bad as Block
    if (round === made.header.round) return early(to) ? [message, { kind: 'block', block: made }] : [message]
    if (round < made.header.round + SPLIT_HOLD) return [message]
    let shadow = this.shadows.get(own.digestHex)
    if (!shadow) {
      const previous = this.lastShadow ?? made
      let others = own.header.ancestors.slice(1)
      if (!this.lastShadow) {
        // The bad block is far below: a quorum of round - 1 must come from the others alone.
        others = []
        for (let a = 0; a < committee.keys.length; a++) {
          if (a === me) continue
          const listed = own.header.ancestors.find((x) => x.author === a && x.round === round - 1)
          const seen = listed ? undefined : this.ctx.received?.(round - 1, a)
          const ref = listed ?? (seen && { round: seen.header.round, author: a, digest: seen.digest }) ?? own.header.ancestors.find((x) => x.author === a)
          if (ref) others.push(ref)
        }
        if (others.filter((x) => x.round === round - 1).length < committee.keys.length - committee.f) return [message]
      }
      const ancestors = [{ round: previous.header.round, author: me, digest: previous.digest }, ...others]
      shadow = signBlock(crypto, secretKey, { ...own.header, ancestors })
      this.shadows.set(own.digestHex, shadow)
      this.lastShadow = shadow
    }
    return [{ kind: 'block', block: shadow }]
  }
}

/**
 * A mesh that misbehaves: every frame the relay sends goes through the
 * behaviour, which may drop, change or multiply it. This is how
 * `stead-relay --byzantine` works: the relay itself stays honest and never
 * knows. (Test tooling; frames are decoded again here, which a real relay
 * would never spend time on.)
 */
export function byzantineMesh(
  inner: Mesh,
  strategy: ByzantineStrategy,
  ctx: Pick<ByzantineContext, 'me' | 'committee' | 'secretKey' | 'crypto'> & Partial<Pick<ByzantineContext, 'conflictingPayload' | 'twinPair'>>,
): Mesh {
  /** A client envelope to put in twin blocks: the first one seen in a block either way. */
  let sample: Uint8Array | undefined
  /** Peers' blocks received, by slot, for split-refusal (recent rounds only). */
  const received = new Map<string, Block>()
  const behaviour = new ByzantineBehaviour(strategy, {
    ...ctx,
    conflictingPayload: ctx.conflictingPayload ?? (() => undefined),
    samplePayload: () => sample,
    received: (round, author) => received.get(`${round}:${author}`),
  })
  const notice = (frame: Uint8Array): Message | undefined => {
    try {
      const message = decodeMessage(ctx.crypto, ctx.committee, frame)
      if (message.kind === 'block') sample ??= message.block.header.payload[0]
      return message
    } catch {
      return undefined
    }
  }
  const send = (to: number, frame: Uint8Array): void => {
    const message = notice(frame)
    if (!message) return inner.send(to, frame)
    for (const m of behaviour.outgoing(to, message)) inner.send(to, encodeMessage(m))
  }
  return {
    start: () => inner.start(),
    send,
    broadcast(frame) {
      for (let to = 0; to < ctx.committee.keys.length; to++) if (to !== ctx.me) send(to, frame)
    },
    onFrame(handler) {
      inner.onFrame((from, frame) => {
        if (sample === undefined || strategy === 'split-refusal') {
          const message = notice(frame)
          for (const b of message?.kind === 'block' ? [message.block] : message?.kind === 'blocks' ? message.blocks : []) {
            received.set(`${b.header.round}:${b.header.author}`, b)
            if (received.size > 2000) received.delete(received.keys().next().value as string)
          }
        }
        handler(from, frame)
      })
    },
    onPeerConnected: (h) => inner.onPeerConnected(h),
    connectedPeers: () => inner.connectedPeers(),
    queuedBytes: () => inner.queuedBytes(),
    stop: () => inner.stop(),
  }
}

function flip(sig: Uint8Array): Uint8Array {
  const out = new Uint8Array(sig)
  out[0] = (out[0] as number) ^ 0xff
  return out
}

/** An envelope frame whose signature does not verify. */
function forgedFrame(template: Uint8Array | undefined): Uint8Array | undefined {
  if (!template) return undefined
  const signed = asSigned(decode(template))
  return encode([signed.bytes, flip(signed.sig)])
}
