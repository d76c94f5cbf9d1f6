import { describe, expect, it } from 'vitest'
import { clockInit } from '../src/clock.ts'
import { CollabText, type Declaration, type TextOp } from '../src/crdt/index.ts'
import { nodeCrypto } from '../src/crypto/node.ts'
import { openEnvelopeSync, sealEnvelope, type Envelope, type EnvelopeDraft, type ObjectUpdate } from '../src/envelope.ts'
import { applyValuePatch } from '../src/crdt/value-patch.ts'
import { ReliableReplica, StableAudit } from '../src/replica.ts'
import { ChangeLog, decodeStateDelta, encodeStateDelta } from '../src/delta.ts'

const crypto = nodeCrypto
const SPACE = 'marks'
const sha = (b: Uint8Array): Uint8Array => crypto.sha256(b)
const open = (signed: { bytes: Uint8Array; sig: Uint8Array }): Envelope => openEnvelopeSync({ sha256: sha, verify: () => true }, [signed.bytes, signed.sig])
const DOC: Declaration = { type: 'text', bounds: {} }

const users = await Promise.all(
  [0, 1].map(async (n) => {
    const secretKey = new Uint8Array(32).fill(n + 7)
    return { secretKey, publicKey: await crypto.publicKeyOf(secretKey) }
  }),
)

function seal(user: number, seq: number, ops: TextOp[]): Promise<Envelope> {
  const updates: ObjectUpdate[] = [{ key: 'doc', decl: DOC, ops }]
  const draft: EnvelopeDraft = { space: SPACE, seq, clock: clockInit(), deps: [], updates, safe: [] }
  return sealEnvelope(crypto, users[user]!, draft)
}

/** A view of the text that makes ops as a client would: against what it has seen, named `^n` within the envelope being made. */
function view(r: ReliableReplica): CollabText {
  return ((r.prospective('doc') as CollabText | undefined) ?? new CollabText()).clone()
}

describe('marks through the audit, the state hash, deltas and history', () => {
  it('commits marks into the stable text, keeps spans in its history as patches, and hashes texts that differ only in marks apart', async () => {
    const r = new ReliableReplica({ space: SPACE, historyPatches: true })
    const first = await seal(0, 1, [['i', '', 1, '', 'The Peritext editor']])
    const h1 = r.commit([first], 1).history
    const v = view(r)
    const bold = v.markOp(4, 12, 'bold', true)
    const second = await seal(0, 2, [bold])
    r.receive(second)
    expect((r.prospective('doc') as CollabText).spans()).toEqual([{ text: 'The ', marks: {} }, { text: 'Peritext', marks: { bold: true } }, { text: ' editor', marks: {} }])
    const h2 = r.commit([second], 2).history
    const stable = r.stable('doc') as CollabText
    expect(stable.spans()).toEqual((r.prospective('doc') as CollabText).spans())
    // History: the string, then spans (kept whole: no patch from a string to spans), then patches of spans.
    expect(h1[0]?.value).toBe('The Peritext editor')
    expect(h2[0]?.value).toEqual(stable.spans())
    expect(h2[0]?.patch).toBeUndefined()
    const v3 = view(r)
    const third = await seal(0, 3, [v3.insertOp(12, '!'), v3.markOp(0, 3, 'italic', true)])
    const h3 = r.commit([third], 3).history
    expect(h3[0]?.patch?.base).toBe(2)
    expect(applyValuePatch(h2[0]?.value, h3[0]!.patch!.patch)).toEqual((r.stable('doc') as CollabText).spans())
    expect((r.stable('doc') as CollabText).spans()).toEqual([
      { text: 'The', marks: { italic: true } },
      { text: ' ', marks: {} },
      { text: 'Peritext!', marks: { bold: true } },
      { text: ' editor', marks: {} },
    ])
    expect(r.history('doc').map((e) => e.index)).toEqual([1, 2, 3])

    // Another replica with the same characters and another mark value hashes differently.
    const other = new ReliableReplica({ space: SPACE })
    if (bold[0] !== 'm') throw new Error('a mark op')
    const heavy = await seal(1, 1, [['m', 'bold', 'heavy', bold[3], bold[4], bold[5], 0]])
    other.commit([first], 1)
    const same = new ReliableReplica({ space: SPACE })
    same.commit([first], 1)
    same.commit([second], 2)
    other.commit([heavy], 2)
    expect((other.stable('doc') as CollabText).value()).toBe((same.stable('doc') as CollabText).value())
    expect(other.stableHash(sha)).not.toEqual(same.stableHash(sha))
  })

  it('refuses a mark stamped too far ahead (clock-ahead) in the stable order, and undoes it prospectively', async () => {
    const r = new ReliableReplica({ space: SPACE })
    const first = await seal(0, 1, [['i', '', 1, '', 'hello']])
    r.commit([first], 1)
    const m = view(r).markOp(0, 2, 'bold', true)
    if (m[0] !== 'm') throw new Error('a mark op')
    const ahead = await seal(1, 1, [['m', m[1], m[2], m[3], m[4], 5_000_000, m[6]]])
    r.receive(ahead)
    expect((r.prospective('doc') as CollabText).spans()[0]?.marks).toEqual({ bold: true })
    const { decisions } = r.commit([ahead], 2)
    expect(decisions[0]).toMatchObject({ kind: 'committed', units: [{ status: 'rejected', reason: 'clock-ahead' }] })
    expect((r.prospective('doc') as CollabText).spans()).toEqual([{ text: 'hello', marks: {} }])
    expect((r.stable('doc') as CollabText).hasMarks).toBe(false)
  })

  it('carries marks in catch-up deltas, as ops and as state, to the same state hash', async () => {
    for (const mode of ['ops', 'state'] as const) {
      const relay = new StableAudit({ space: SPACE })
      const r = new ReliableReplica({ space: SPACE })
      const log = new ChangeLog()
      const first = await seal(0, 1, [['i', '', 1, '', 'The Peritext editor']])
      for (const x of [relay, r]) x.commit([first], 1)
      const v = view(r)
      const later = [
        await seal(0, 2, [v.markOp(4, 12, 'link', { href: 'https://inkandswitch.com' })]),
        await seal(1, 1, [v.markOp(0, 19, 'comment', { id: 'c1' }, { multiple: true, expand: 'none' }), v.deleteOp(0, 4) as TextOp]),
      ]
      log.record(1, relay.commit(later, 2))
      const delta = log.delta(relay, 1, mode)!
      const ok = r.verifyDelta(sha, decodeStateDelta(encodeStateDelta(delta), open), relay.stableHash(sha))
      if ('problem' in ok) throw new Error(ok.problem)
      r.applyDelta(sha, ok, 2)
      expect(r.stableHash(sha)).toEqual(relay.stableHash(sha))
      expect((r.stable('doc') as CollabText).spans()).toEqual((relay.stable('doc') as CollabText).spans())
      expect((r.stable('doc') as CollabText).spans()).toEqual([
        { text: 'Peritext', marks: { comment: [{ id: 'c1' }], link: { href: 'https://inkandswitch.com' } } },
        { text: ' editor', marks: { comment: [{ id: 'c1' }] } },
      ])
    }
  })
})
