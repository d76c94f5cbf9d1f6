import { asSigned, decode, encode, toHex } from '@stead/core'
import { certificateQuorum, signBlock, signVote, type Block, type Certificate, type Committee, type Message, type SyncCrypto, type Vote } from './messages.ts'
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
}

export class ByzantineBehaviour {
  /** Twin blocks of an equivocator and the votes they gathered. */
  private readonly twins = new Map<string, { block: Block; votes: Map<number, Uint8Array> }>()

  readonly strategy: ByzantineStrategy
  private readonly ctx: ByzantineContext
  constructor(
    strategy: ByzantineStrategy,
    ctx: ByzantineContext,
  ) {
    this.strategy = strategy
    this.ctx = ctx
  }

  /** Rewrites one message the honest core sends to peer `to`: none, one, or several. */
  outgoing(to: number, message: Message): Message[] {
    const { secretKey, crypto, me } = this.ctx
    switch (this.strategy) {
      case 'silent':
        return []
      case 'withhold':
        return message.kind === 'vote' || message.kind === 'cert' || (message.kind === 'block' && to % 2 === 0) ? [] : [message]
      case 'bad-signature':
        if (message.kind === 'vote') return [{ ...message, sig: flip(message.sig) }]
        if (message.kind === 'block') return [{ kind: 'block', block: { ...message.block, signed: { bytes: message.block.signed.bytes, sig: flip(message.block.signed.sig) } } }]
        return [message]
      case 'unknown-parents': {
        if (message.kind !== 'block' || message.block.header.round === 1) return [message]
        const parents = message.block.header.parents.map((p, i) => (i === 0 ? crypto.sha256(p) : p))
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...message.block.header, parents }) }]
      }
      case 'flood': {
        if (message.kind !== 'block') return [message]
        const far = [1000, 60, 3].map((ahead) => signBlock(crypto, secretKey, { round: message.block.header.round + ahead, author: me, parents: message.block.header.parents, payload: [], weak: [] }))
        return [message, ...far.map((block) => ({ kind: 'block' as const, block }))]
      }
      case 'forged-envelopes': {
        if (message.kind !== 'block') return [message]
        const extra = this.ctx.conflictingPayload(message.block.header.round) ?? forgedFrame(message.block.header.payload[0])
        if (!extra) return [message]
        return [{ kind: 'block', block: signBlock(crypto, secretKey, { ...message.block.header, payload: [...message.block.header.payload, extra] }) }]
      }
      case 'equivocate':
      case 'double-vote': {
        if (message.kind !== 'block' || message.block.header.author !== me) return [message]
        // Even peers get the real block, odd peers a twin for the same round, peer 0 both.
        if (to % 2 === 0 && to !== 0) return [message]
        const sample = this.ctx.samplePayload()
        const alt = signBlock(crypto, secretKey, { ...message.block.header, payload: message.block.header.payload.length || !sample ? [] : [sample] })
        if (!this.twins.has(alt.digestHex)) this.twins.set(alt.digestHex, { block: alt, votes: new Map([[me, signVote(crypto, secretKey, me, alt).sig]]) })
        return to === 0 ? [message, { kind: 'block', block: alt }] : [{ kind: 'block', block: alt }]
      }
    }
  }

  /**
   * Reacts to a message before the honest core sees it: a double-voter votes
   * for every block; an equivocator turns votes for its twin into a
   * certificate when it can. Returns messages to send, 'all' meaning every peer.
   */
  incoming(message: Message): Array<{ to: number | 'all'; message: Message }> {
    const { secretKey, crypto, me } = this.ctx
    if (this.strategy === 'double-vote' && message.kind === 'block' && message.block.header.author !== me) {
      return [{ to: message.block.header.author, message: signVote(crypto, secretKey, me, message.block) }]
    }
    if ((this.strategy === 'equivocate' || this.strategy === 'double-vote') && message.kind === 'vote') return this.collect(message)
    return []
  }

  private collect(vote: Vote): Array<{ to: 'all'; message: Message }> {
    const twin = this.twins.get(toHex(vote.digest))
    if (!twin) return []
    twin.votes.set(vote.voter, vote.sig)
    if (twin.votes.size !== certificateQuorum(this.ctx.committee)) return []
    const cert: Certificate = { block: twin.block, votes: [...twin.votes.entries()] }
    return [{ to: 'all', message: { kind: 'cert', cert } }]
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
