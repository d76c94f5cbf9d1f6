import { clockInit, sealEnvelope, type Declaration, type Envelope, type ObjectUpdate, type SafeGroup } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { Rng } from './rng.ts'

export const SPACE = 'sim'

const ACCOUNTS: Declaration = { type: 'counter', bounds: { min: 0 } }
const GUESTS: Declaration = { type: 'set', bounds: { maxSize: 8 } }
const SEATS: Declaration = { type: 'bounded-counter', params: { min: 0, initial: 20 } }

export interface Workload {
  /** Honest clients' envelopes, each list in sequence order. */
  readonly honest: readonly (readonly Envelope[])[]
  /** A Byzantine client's equivocations: two envelopes for each of its sequence numbers. */
  readonly twins: ReadonlyArray<readonly [Envelope, Envelope]>
}

async function identity(label: string) {
  const secretKey = nodeCrypto.sha256(new TextEncoder().encode(label))
  return { secretKey, publicKey: await nodeCrypto.publicKeyOf(secretKey) }
}

function randomParts(rng: Rng, user: number, seq: number): { updates: ObjectUpdate[]; safe: SafeGroup[] } {
  const acct = (i: number) => `acct:${i}`
  const updates: ObjectUpdate[] = []
  const safe: SafeGroup[] = []
  switch (rng.int(0, 4)) {
    case 0:
      updates.push({ key: acct(rng.int(0, 2)), decl: ACCOUNTS, ops: [rng.int(1, 20)] })
      break
    case 1:
      // Withdrawals race each other: the audit decides which fit.
      safe.push({ atomic: false, updates: [{ key: acct(rng.int(0, 2)), decl: ACCOUNTS, op: -rng.int(1, 15) }] })
      break
    case 2: {
      const from = rng.int(0, 2)
      const n = rng.int(1, 10)
      safe.push({ atomic: true, updates: [{ key: acct(from), decl: ACCOUNTS, op: -n }, { key: acct((from + 1) % 3), decl: ACCOUNTS, op: n }] })
      break
    }
    case 3:
      updates.push({ key: 'guests', decl: GUESTS, ops: [['a', `u${user}-${seq % 12}`]] })
      break
    default:
      safe.push({ atomic: false, updates: [{ key: 'seats', decl: SEATS, op: ['c', rng.int(1, 3)] }] })
      updates.push({ key: 'seats', decl: SEATS, ops: [['d', 1]] })
  }
  return { updates, safe }
}

/** Signs every client envelope of a run up front: the event loop itself stays synchronous. */
export async function prepareWorkload(seed: number, clients: number, perClient: number, byzantineClient: boolean): Promise<Workload> {
  const rng = new Rng(seed ^ 0x5eed)
  const honest: Envelope[][] = []
  for (let c = 0; c < clients; c++) {
    const me = await identity(`sim-client-${c}`)
    const list: Envelope[] = []
    for (let seq = 1; seq <= perClient; seq++) {
      list.push(await sealEnvelope(nodeCrypto, me, { space: SPACE, seq, clock: clockInit(), deps: [], ...randomParts(rng, c, seq) }))
    }
    honest.push(list)
  }
  const twins: Array<[Envelope, Envelope]> = []
  if (byzantineClient) {
    const evil = await identity('sim-byzantine-client')
    for (let seq = 1; seq <= Math.max(2, perClient >> 1); seq++) {
      const a = await sealEnvelope(nodeCrypto, evil, { space: SPACE, seq, clock: clockInit(), deps: [], updates: [{ key: 'acct:0', decl: ACCOUNTS, ops: [seq] }], safe: [] })
      const b = await sealEnvelope(nodeCrypto, evil, {
        space: SPACE,
        seq,
        clock: clockInit(),
        deps: [],
        updates: [],
        safe: [{ atomic: false, updates: [{ key: 'acct:1', decl: ACCOUNTS, op: -seq }] }],
      })
      twins.push([a, b])
    }
  }
  return { honest, twins }
}
