import { clockInit, encodeEnvelope, fromHex, sealEnvelope, toHex } from '@stead/core'
import { nodeCrypto, publicKeyOfSync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { EarlyFrames } from '../src/transport/early-frames.ts'

const author = { secretKey: new Uint8Array(32).fill(9), publicKey: publicKeyOfSync(new Uint8Array(32).fill(9)) }
const envelope = (seq: number) => sealEnvelope(nodeCrypto, author, { space: 's', seq, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [seq] }], safe: [] })

describe('early frames', () => {
  it('put back what a relay sent early and names by id, once; whole frames pass; an unknown id is refused', async () => {
    const early = new EarlyFrames((b) => nodeCrypto.sha256(b))
    const [a, b] = [await envelope(1), await envelope(2)]
    early.keep(encodeEnvelope(a))
    const whole = encodeEnvelope(b)
    expect(early.resolve([fromHex(a.idHex), whole]).map(toHex)).toEqual([encodeEnvelope(a), whole].map(toHex))
    // Named once: the relay forgets it too, and names it again only after sending it again.
    expect(() => early.resolve([fromHex(a.idHex)])).toThrow(/without having sent it/)
    early.keep(encodeEnvelope(a))
    expect(early.resolve([fromHex(a.idHex)]).map(toHex)).toEqual([toHex(encodeEnvelope(a))])
  })

  it('keep the latest 512 frames (more than a relay names), and nothing past clear', async () => {
    const early = new EarlyFrames((b) => nodeCrypto.sha256(b))
    const envs = await Promise.all(Array.from({ length: 513 }, (_, i) => envelope(i + 1)))
    for (const e of envs) early.keep(encodeEnvelope(e))
    expect(() => early.resolve([fromHex(envs[0]!.idHex)])).toThrow(/without having sent it/)
    expect(early.resolve([fromHex(envs[1]!.idHex), fromHex(envs[512]!.idHex)])).toHaveLength(2)
    early.clear()
    expect(() => early.resolve([fromHex(envs[2]!.idHex)])).toThrow(/without having sent it/)
  })
})
