import { authorIdOf, clockFrom, clockInit, composeClock, sealEnvelope, type Declaration, type Envelope, type ObjectUpdate, type SafeGroup } from '@stead/core'
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
  const ids = await Promise.all(Array.from({ length: clients }, (_, c) => identity(`sim-client-${c}`)))
  for (let c = 0; c < clients; c++) honest.push([])
  // Round by round, each client's envelope follows the previous client's last one (it heard it):
  // deps and clocks as the SDK makes them, from a stable base of 0. The relays order them in
  // whatever order the run gives, so the audit meets deps it already holds and deps it does not.
  for (let seq = 1; seq <= perClient; seq++) {
    for (let c = 0; c < clients; c++) {
      const me = ids[c] as Awaited<ReturnType<typeof identity>>
      const mine = honest[c] as Envelope[]
      const heard = clients > 1 ? (honest[(c + clients - 1) % clients] as Envelope[]).at(-1) : undefined
      const prev = mine.at(-1)
      const { base, clock } = composeClock(authorIdOf(nodeCrypto, me.publicKey), prev, heard ? [heard] : [], 0, () => 0)
      mine.push(await sealEnvelope(nodeCrypto, me, { space: SPACE, seq, base, clock, deps: heard ? [heard.id] : [], ...randomParts(rng, c, seq) }))
    }
  }
  const twins: Array<[Envelope, Envelope]> = []
  if (byzantineClient) {
    const evil = await identity('sim-byzantine-client')
    for (let seq = 1; seq <= Math.max(2, perClient >> 1); seq++) {
      const a = await sealEnvelope(nodeCrypto, evil, { space: SPACE, seq, clock: clockInit(), deps: [], updates: [{ key: 'acct:0', decl: ACCOUNTS, ops: [seq] }], safe: [] })
      // Every other twin also forges its clock: an entry no input gives (bad-clock wherever it is judged).
      const forged = seq % 2 === 1 && ids[0] ? clockFrom([[authorIdOf(nodeCrypto, ids[0].publicKey), 999]]) : clockInit()
      const b = await sealEnvelope(nodeCrypto, evil, {
        space: SPACE,
        seq,
        clock: forged,
        deps: [],
        updates: [],
        safe: [{ atomic: false, updates: [{ key: 'acct:1', decl: ACCOUNTS, op: -seq }] }],
      })
      twins.push([a, b])
    }
  }
  return { honest, twins }
}
