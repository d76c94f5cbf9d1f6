import { SteadError, clockInit, decode, encode, encodeEnvelope, openEnvelopeSync, sealEnvelope } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import {
  ConsensusCore,
  decodeMessage,
  encodeMessage,
  signBlock,
  signVote,
  type Block,
  type Certificate,
  type Committee,
  type Output,
  type PayloadInfo,
  type SyncCrypto,
} from '../src/consensus/index.ts'

const crypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }
const secrets = [0, 1, 2, 3].map((i) => new Uint8Array(32).fill(i + 10))
const committee: Committee = { f: 1, keys: secrets.map(publicKeyOfSync) }

function inspect(frame: Uint8Array): PayloadInfo | SteadError {
  try {
    const env = openEnvelopeSync({ sha256: crypto.sha256, verify: verifySync }, decode(frame))
    return { idHex: env.idHex, slot: `${env.space}/${env.authorId}:${env.seq}` }
  } catch (e) {
    if (e instanceof SteadError) return e
    throw e
  }
}

function core(me: number, recovered?: ConstructorParameters<typeof ConsensusCore>[1]) {
  return new ConsensusCore({ committee, me, secretKey: secrets[me]!, crypto, inspect }, recovered)
}

function votesIn(out: Output[]) {
  return out.filter((o) => o.type === 'send' && o.message.kind === 'vote')
}

describe('mesh messages', () => {
  const block = signBlock(crypto, secrets[1]!, { round: 1, author: 1, parents: [], payload: [], weak: [] })
  const votes = [0, 1, 2].map((v) => signVote(crypto, secrets[v]!, v, block))
  const cert: Certificate = { block, votes: votes.map((v) => [v.voter, v.sig] as const) }

  it('round-trip with every signature checked', () => {
    for (const m of [{ kind: 'block' as const, block }, votes[0]!, { kind: 'cert' as const, cert }, { kind: 'sync' as const, fromRound: 3 }]) {
      const back = decodeMessage(crypto, committee, encodeMessage(m))
      expect(back.kind).toBe(m.kind)
    }
  })

  it('reject forged blocks and votes, short or padded certificates, strangers', () => {
    const reason = (bytes: Uint8Array) => {
      try {
        decodeMessage(crypto, committee, bytes)
        return 'accepted'
      } catch (e) {
        expect(e).toBeInstanceOf(SteadError)
        return (e as SteadError).reason
      }
    }
    const badSig = new Uint8Array(block.signed.sig)
    badSig[3]! ^= 1
    expect(reason(encode(['block', [block.signed.bytes, badSig]]))).toBe('bad-signature')
    expect(reason(encodeMessage({ ...votes[0]!, voter: 2 }))).toBe('bad-signature')
    expect(reason(encodeMessage({ kind: 'cert', cert: { block, votes: cert.votes.slice(0, 2) } }))).toBe('bad-signature')
    expect(reason(encodeMessage({ kind: 'cert', cert: { block, votes: [cert.votes[0]!, cert.votes[0]!, cert.votes[1]!] } }))).toBe('bad-signature')
    const stranger = signBlock(crypto, secrets[0]!, { round: 1, author: 7, parents: [], payload: [], weak: [] })
    expect(reason(encodeMessage({ kind: 'block', block: stranger }))).toBe('unauthorized')
    expect(reason(encode(['nope']))).toBe('malformed')
    expect(reason(new Uint8Array([0xc1]))).toBe('malformed')
  })
})

describe('consensus core', () => {
  it('votes once per (author, round), persisting the vote before sending it', () => {
    const c = core(0)
    c.start()
    const a = signBlock(crypto, secrets[1]!, { round: 1, author: 1, parents: [], payload: [], weak: [] })
    const b = signBlock(crypto, secrets[1]!, { round: 1, author: 1, parents: [], payload: [encode('other')], weak: [] })
    const out = c.onMessage(1, { kind: 'block', block: a })
    const persistAt = out.findIndex((o) => o.type === 'persist' && o.record.kind === 'vote')
    const sendAt = out.findIndex((o) => o.type === 'send' && o.message.kind === 'vote')
    expect(persistAt).toBeGreaterThanOrEqual(0)
    expect(sendAt).toBeGreaterThan(persistAt)
    const second = c.onMessage(1, { kind: 'block', block: b })
    expect(votesIn(second)).toHaveLength(0)
    expect(second).toContainEqual(expect.objectContaining({ type: 'rejected', reason: 'conflict' }))
    // The same block again gets the same vote again (it may have been lost).
    expect(votesIn(c.onMessage(1, { kind: 'block', block: a }))).toHaveLength(1)
  })

  it('never votes for a second block of a round after a restart', () => {
    const c = core(0)
    c.start()
    const a = signBlock(crypto, secrets[1]!, { round: 1, author: 1, parents: [], payload: [], weak: [] })
    const records = c.onMessage(1, { kind: 'block', block: a }).flatMap((o) => (o.type === 'persist' ? [o.record] : []))
    const own = c.start().flatMap((o) => (o.type === 'persist' ? [o.record] : []))
    const all = [...records, ...own]
    const restarted = core(0, {
      votes: all.flatMap((r) => (r.kind === 'vote' ? [r] : [])),
      ownBlocks: all.flatMap((r) => (r.kind === 'own-block' ? [r.block] : [])),
      certs: [],
      commits: [],
    })
    restarted.start()
    const b = signBlock(crypto, secrets[1]!, { round: 1, author: 1, parents: [], payload: [encode('x')], weak: [] })
    expect(votesIn(restarted.onMessage(1, { kind: 'block', block: b }))).toHaveLength(0)
  })

  it('refuses a block carrying an invalid envelope, and one too far ahead', async () => {
    const c = core(0)
    c.start()
    const me = { secretKey: new Uint8Array(32).fill(99), publicKey: publicKeyOfSync(new Uint8Array(32).fill(99)) }
    const env = await sealEnvelope(nodeCrypto, me, { space: 's', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'k', decl: { type: 'register' }, ops: [['s', 1, 1]] }], safe: [] })
    const frame = encodeEnvelope(env)
    const forged = new Uint8Array(frame)
    forged[forged.length - 1]! ^= 1
    const bad = signBlock(crypto, secrets[2]!, { round: 1, author: 2, parents: [], payload: [forged], weak: [] })
    expect(c.onMessage(2, { kind: 'block', block: bad })).toContainEqual(expect.objectContaining({ type: 'rejected', reason: 'bad-signature' }))
    const good = signBlock(crypto, secrets[2]!, { round: 1, author: 2, parents: [], payload: [frame], weak: [] })
    expect(votesIn(c.onMessage(2, { kind: 'block', block: good }))).toHaveLength(1)
    const far: Block = signBlock(crypto, secrets[3]!, { round: 500, author: 3, parents: [], payload: [], weak: [] })
    expect(c.onMessage(3, { kind: 'block', block: far })).toContainEqual(expect.objectContaining({ type: 'rejected', reason: 'too-large' }))
  })

  it('four cores wired directly reach commits with every envelope ordered once', async () => {
    const cores = [0, 1, 2, 3].map((i) => core(i))
    const inbox: Array<{ from: number; to: number; out: Output }> = []
    const commits: string[][] = [[], [], [], []]
    const route = (from: number, outs: Output[]) => {
      for (const o of outs) inbox.push({ from, to: -1, out: o })
    }
    cores.forEach((c, i) => route(i, c.start()))
    const me = { secretKey: new Uint8Array(32).fill(77), publicKey: publicKeyOfSync(new Uint8Array(32).fill(77)) }
    for (let seq = 1; seq <= 5; seq++) {
      const env = await sealEnvelope(nodeCrypto, me, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [seq] }], safe: [] })
      const frame = encodeEnvelope(env)
      route(seq % 4, cores[seq % 4]!.submit(frame, inspect(frame) as PayloadInfo).outputs)
    }
    let steps = 0
    while (inbox.length && steps++ < 20_000) {
      const { from, out } = inbox.shift()!
      if (out.type === 'send') {
        route(out.to, cores[out.to]!.onMessage(from, decodeMessage(crypto, committee, encodeMessage(out.message))))
      } else if (out.type === 'broadcast') {
        for (let to = 0; to < 4; to++) if (to !== from) route(to, cores[to]!.onMessage(from, out.message))
      } else if (out.type === 'commit') {
        commits[from]!.push(...out.commit.payloadIds)
      } else if (out.type === 'timer' && out.name !== 'resend' && commits[from]!.length < 5) {
        // Timers fire at once until everything is committed; then the cluster goes idle.
        route(from, cores[from]!.onTimer(out.name, out.round))
      }
    }
    for (const c of commits) expect(c).toEqual(commits[0])
    expect(new Set(commits[0]).size).toBe(5)
  })
})
