import { clockInit, decode, decodeEpochChange, epochChainFromJson, epochChainToJson, followEpochs, type EpochChainJson, decodeAttestation, decodeRelayMessage, encodeAttestation, encodeEnvelope, encodeRelayMessage, freshHeadBytes, fromHex, openEnvelopeSync, sealEnvelope, toHex, type RelayMessage } from '@stead/core'
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { byzantineModes } from '../src/process/cli-options.ts'
import { ClientFacingLiar, SLOW_MS, type ClientLie } from '../src/faults/client-lies.ts'

const secretKey = new Uint8Array(32).fill(9)
const relayKey = publicKeyOfSync(secretKey)
const author = { secretKey: new Uint8Array(32).fill(5), publicKey: publicKeyOfSync(new Uint8Array(32).fill(5)) }

async function frames(): Promise<{ envelope: Uint8Array; commit: Uint8Array; attest: Uint8Array }> {
  const envelope = encodeEnvelope(await sealEnvelope(nodeCrypto, author, { space: 's', seq: 1, clock: clockInit(), deps: [], updates: [{ key: 'c', decl: { type: 'counter', bounds: {} }, ops: [1] }], safe: [] }))
  const bytes = encodeAttestation({ space: 's', round: 4, prevRound: 0, fromIndex: 0, toIndex: 1, decisions: [], stateHash: new Uint8Array(32).fill(1), batch: new Uint8Array(32).fill(2) })
  const attestation = { bytes, sig: signSync(secretKey, bytes) }
  return {
    envelope: encodeRelayMessage({ type: 'envelope', space: 's', envelope }),
    commit: encodeRelayMessage({ type: 'commit', space: 's', attestation, envelopes: [envelope] }),
    attest: encodeRelayMessage({ type: 'attest', space: 's', round: 4, sig: attestation.sig }),
  }
}

/** What the liar sends for `frame`, decoded where it decodes. */
function sent(lies: ClientLie[], frame: Uint8Array): Array<RelayMessage | 'junk'> {
  const out: Uint8Array[] = []
  const before = Uint8Array.from(frame)
  new ClientFacingLiar(lies, { secretKey }).outgoing(frame, (f) => out.push(f))
  // The relay's own bytes (a stored commit goes to every subscriber) are never changed.
  expect(toHex(frame)).toBe(toHex(before))
  return out.map((f) => {
    try {
      return decodeRelayMessage(f)
    } catch {
      return 'junk'
    }
  })
}

describe('client-facing lies', () => {
  it('pass every frame through untouched with no lie that reads them', async () => {
    const f = await frames()
    for (const frame of [f.envelope, f.commit, f.attest]) {
      const out: Uint8Array[] = []
      new ClientFacingLiar(['stale-head', 'wrong-cluster'], { secretKey }).outgoing(frame, (x) => out.push(x))
      expect(out).toEqual([frame])
    }
  })

  it('lie-attest: the commit carries another state hash under the relay\'s real signature; compact attestations are signed over other bytes', async () => {
    const f = await frames()
    const [commit] = sent(['lie-attest'], f.commit) as [Extract<RelayMessage, { type: 'commit' }>]
    const lie = decodeAttestation(commit.attestation.bytes)
    expect(toHex(lie.stateHash)).not.toBe(toHex(new Uint8Array(32).fill(1)))
    expect({ ...lie, stateHash: undefined }).toEqual({ ...decodeAttestation((decodeRelayMessage(f.commit) as typeof commit).attestation.bytes), stateHash: undefined })
    expect(verifySync(relayKey, commit.attestation.bytes, commit.attestation.sig)).toBe(true)
    const [attest] = sent(['lie-attest'], f.attest) as [Extract<RelayMessage, { type: 'attest' }>]
    expect(verifySync(relayKey, (decodeRelayMessage(f.commit) as typeof commit).attestation.bytes, attest.sig)).toBe(false)
  })

  it('withhold-commits drops commits and attestations; withhold-envelopes drops pushes and empties commits', async () => {
    const f = await frames()
    expect(sent(['withhold-commits'], f.commit)).toEqual([])
    expect(sent(['withhold-commits'], f.attest)).toEqual([])
    expect(sent(['withhold-commits'], f.envelope)).toHaveLength(1)
    expect(sent(['withhold-envelopes'], f.envelope)).toEqual([])
    expect(sent(['withhold-envelopes'], f.commit)).toMatchObject([{ type: 'commit', envelopes: [] }])
  })

  it('forge-envelope pushes a copy with a broken signature after each envelope, and breaks the first of a commit', async () => {
    const f = await frames()
    const out = sent(['forge-envelope'], f.envelope) as Array<Extract<RelayMessage, { type: 'envelope' }>>
    expect(out).toHaveLength(2)
    const open = (frame: Uint8Array) => () => openEnvelopeSync({ sha256: (b) => nodeCrypto.sha256(b), verify: verifySync }, decode(frame))
    expect(open(out[0]!.envelope)).not.toThrow()
    expect(open(out[1]!.envelope)).toThrow()
    const [commit] = sent(['forge-envelope'], f.commit) as [Extract<RelayMessage, { type: 'commit' }>]
    expect(open(commit.envelopes[0]!)).toThrow()
  })

  it('junk follows every frame with malformed ones; slow holds everything for 30 s', async () => {
    const f = await frames()
    expect(sent(['junk'], f.envelope)).toEqual([decodeRelayMessage(f.envelope), 'junk', 'junk'])
    const timers: Array<[() => void, number]> = []
    const out: Uint8Array[] = []
    new ClientFacingLiar(['slow'], { secretKey, setTimeout: (fn, ms) => timers.push([fn, ms]) }).outgoing(f.commit, (x) => out.push(x))
    expect(out).toEqual([])
    expect(timers.map(([, ms]) => ms)).toEqual([SLOW_MS])
    timers[0]![0]()
    expect(out).toEqual([f.commit])
  })

  it('heads: stale-head re-signs the first head it served over each new nonce; replay-head serves that first head as it was', () => {
    const hash = (n: number) => toHex(new Uint8Array(32).fill(n))
    const head = (index: number, h: string, nonce: Uint8Array) => ({ relay: 3, index, stateHash: h, sig: toHex(signSync(secretKey, freshHeadBytes('s', index, fromHex(h), nonce))) })
    const n1 = new Uint8Array(32).fill(1)
    const n2 = new Uint8Array(32).fill(2)
    const route = '/v1/spaces/:space/head'
    for (const lie of ['stale-head', 'replay-head'] as const) {
      const liar = new ClientFacingLiar([lie], { secretKey })
      expect(liar.answer(route, { space: 's' }, { nonce: toHex(n1) }, head(5, hash(5), n1))).toEqual(head(5, hash(5), n1))
      const later = liar.answer(route, { space: 's' }, { nonce: toHex(n2) }, head(9, hash(9), n2)) as ReturnType<typeof head>
      expect(later.index).toBe(5)
      // stale-head's answer verifies over the new nonce (a genuine, stale head); replay-head's does not.
      expect(verifySync(relayKey, freshHeadBytes('s', 5, fromHex(hash(5)), n2), fromHex(later.sig))).toBe(lie === 'stale-head')
    }
  })

  it('wrong-cluster serves other keys; status names the lies; slow delays client routes, not the operator\'s', () => {
    const cluster = { f: 1, relays: [0, 1, 2, 3].map((i) => ({ id: `r${i + 1}`, publicKey: toHex(publicKeyOfSync(new Uint8Array(32).fill(i + 1))), api: `127.0.0.1:${i}` })) }
    const served = new ClientFacingLiar(['wrong-cluster'], { secretKey }).answer('/v1/cluster', {}, {}, cluster) as typeof cluster
    expect(served.relays.map((r) => r.id)).toEqual(['r1', 'r2', 'r3', 'r4'])
    for (const [i, r] of served.relays.entries()) expect(r.publicKey).not.toBe(cluster.relays[i]!.publicKey)
    expect(new ClientFacingLiar(['slow', 'junk'], { secretKey }).answer('/v1/status', {}, {}, { round: 3, byzantine: 'equivocate' })).toEqual({ round: 3, byzantine: 'equivocate,slow,junk' })
    expect(new ClientFacingLiar(['junk'], { secretKey }).answer('/v1/status', {}, {}, { byzantine: null })).toEqual({ byzantine: 'junk' })
    const slow = new ClientFacingLiar(['slow'], { secretKey })
    expect(slow.delayOf('/v1/spaces/:space/head')).toBe(SLOW_MS)
    expect(slow.delayOf('/v1/cluster')).toBe(SLOW_MS)
    for (const route of ['/health', '/ready', '/metrics', '/v1/status']) expect(slow.delayOf(route)).toBe(0)
  })

  it('forge-epoch appends a certificate of a made-up committee that does not verify from the real one: 2f of its signatures are by no member', async () => {
    const keys = [secretKey, ...[1, 2, 3].map((i) => new Uint8Array(32).fill(40 + i))]
    const committee = { f: 1, members: keys.map((k, i) => ({ id: `r${i + 1}`, publicKey: publicKeyOfSync(k), api: `127.0.0.1:${i}`, mesh: '/memory/x' })) }
    const liar = new ClientFacingLiar(['forge-epoch'], { secretKey, relayKeys: committee.members.map((m) => m.publicKey) })
    const served = liar.answer('/v1/epochs', {}, {}, epochChainToJson([])) as EpochChainJson
    expect(served.epoch).toBe(1)
    const certs = epochChainFromJson(served)
    expect(decodeEpochChange(certs[0]!.change).next.members.map((m) => m.id)).toEqual(['forged1', 'forged2', 'forged3', 'forged4'])
    // 2f+1 entries, one of them a real signature of the liar's own.
    expect(certs[0]!.signatures).toHaveLength(3)
    await expect(followEpochs(nodeCrypto, { epoch: 0, committee }, certs)).rejects.toMatchObject({ reason: 'bad-signature' })
  })

  it('--byzantine takes one mode towards relays and any towards clients', () => {
    expect(byzantineModes('equivocate,lie-attest,slow')).toEqual({ toRelays: 'equivocate', toClients: ['lie-attest', 'slow'] })
    expect(byzantineModes('junk')).toEqual({ toClients: ['junk'] })
    expect(() => byzantineModes('equivocate,silent')).toThrow(/one mode towards relays/)
    expect(() => byzantineModes('lie-attets')).toThrow(/unknown mode lie-attets/)
  })
})
