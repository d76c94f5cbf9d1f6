import { createClient, type SteadClient } from '@stead/client'
import { relayCommitteeOf, type ClientLie } from '@stead/relay'
import { BYZANTINE_STRATEGIES, type ByzantineStrategy } from '@stead/relay/consensus'
import { isSteadError, type CommitteeMember, type RelayCommittee } from '@stead/core'
import { Rng } from './rng.ts'
import { SimCluster } from './sim-cluster.ts'

/** What a seeded run of committee changes did (it throws at the first thing that went wrong). */
export interface EpochRunResult {
  readonly seed: number
  /** The changes in order, each with the faults during it: "grow (crash r2 at the boundary)". */
  readonly changes: readonly string[]
  /** Safe updates the client was told committed: all in the final state, once. */
  readonly acknowledged: number
  /** The epoch the run ended in. */
  readonly epoch: number
  /** Simulated ms the run took. */
  readonly simulatedMs: number
}

/** Safe increments of 1, one after another (`pause` between them), until `stop`: how many were acknowledged (each committed). */
export function keepWriting(counter: { increment(n: number, o: { safe: true; timeoutMs: number }): Promise<{ status: string }> }, pause: () => Promise<void> = () => Promise.resolve()) {
  const w = { acknowledged: 0, writing: true, done: Promise.resolve(), stop: () => ((w.writing = false), w.done) }
  w.done = (async () => {
    while (w.writing) {
      if ((await counter.increment(1, { safe: true, timeoutMs: Infinity })).status === 'committed') w.acknowledged++
      await pause()
    }
  })()
  return w
}

/** The epoch relay `i` runs, while it is up. */
export const epochOf = (c: SimCluster, i: number): unknown => c.relays[i]?.isUp && c.relays[i]?.node.status()['epoch']

/** The committee entry of simulated relay `i` (its API where the simulated network finds it). */
export const entryOf = (c: SimCluster, i: number): CommitteeMember => ({ id: c.relays[i]!.id, publicKey: c.relays[i]!.publicKey, api: `relay${i}.sim`, mesh: '/memory/sim' })

/** Until every relay of `members` runs epoch `epoch` and holds the same state of `space`. */
export const settledIn = (c: SimCluster, members: readonly number[], epoch: number, space = 's') =>
  c.until(`relays ${members.join(', ')} in epoch ${epoch} with one state`, () => {
    if (!members.every((i) => epochOf(c, i) === epoch)) return undefined
    const heads = members.map((i) => c.relays[i]!.node.reads.stableHead(space))
    return heads.every((h) => h.stateHash === heads[0]?.stateHash && h.index === heads[0]?.index) && heads[0]
  })

/** Relay `i` turns Byzantine towards its clients (`lie`) and the other relays (`strategy`), or honest again without them. */
async function behave(c: SimCluster, i: number, lie?: ClientLie, strategy?: ByzantineStrategy): Promise<void> {
  await c.relays[i]!.lie(...(lie ? [lie] : []))
  c.relays[i]!.misbehave(strategy)
}

/** `items` in an order drawn from `rng` (Fisher-Yates). */
function shuffled<T>(rng: Rng, items: readonly T[]): T[] {
  const out = [...items]
  for (let i = out.length - 1; i > 0; i--) {
    const j = rng.int(0, i)
    ;[out[i], out[j]] = [out[j] as T, out[i] as T]
  }
  return out
}

/** Lies a Byzantine member tells its clients during a run. */
const LIES: readonly ClientLie[] = ['forge-epoch', 'lie-attest', 'withhold-commits', 'stale-head', 'forge-envelope']

/** How long a split of the committee lasts (simulated ms, drawn from this range). */
const SPLIT_MS = [500, 6_000] as const

/**
 * One seeded run of committee changes (issue 49) on a SimCluster: real
 * relays and an SDK client writing safe updates in simulated time, through
 * `changes` committee changes drawn from the seed (replace a relay by a new
 * machine, move one's API, rotate one's key, grow 4 to 7, shrink 7 to 4),
 * each backed by the operators of 2f+1 correct current relays, with one
 * fault per change drawn too: none; a Byzantine member, which lies to its
 * clients and misbehaves towards the other relays (a strategy of
 * `--byzantine`: equivocation, withheld or forged blocks, floods...) and
 * goes on in the next epoch when it stays; a member crashed at the
 * boundary (up again once the others moved on); one cut off from the
 * others during the change; or the committee split in two sides, neither
 * with a quorum, for a while. At most f members of a committee are
 * Byzantine, crashed or cut off in one epoch (one that turned honest
 * counts until the epoch ends). Throws when correct relays end apart
 * (the Byzantine member of the moment is not held to anything), the
 * client does not follow, or an acknowledged update is missing or counted
 * twice.
 */
export async function runEpochSeed(seed: number, changes = 3): Promise<EpochRunResult> {
  const rng = new Rng(seed)
  const c = await SimCluster.start({ seed })
  const started = c.now
  let client: SteadClient | undefined
  let writes: ReturnType<typeof keepWriting> | undefined
  try {
    client = await createClient(c.clientOptions({ epochPollMs: 1_000 }))
    const space = await client.space('s')
    const counter = space.counter('n')
    // A steady load, not the most the client can do: simulated pauses cost no real time, safe updates do.
    const load = (writes = keepWriting(counter, () => new Promise((resume) => c.later(250, resume))))
    await c.until('the first safe updates', () => load.acknowledged >= 2)
    let members = [0, 1, 2, 3]
    let committee: RelayCommittee = relayCommitteeOf(c.config)
    let liar: number | undefined
    const done: string[] = []
    for (let epoch = 1; epoch <= changes; epoch++) {
      const kind = rng.pick(members.length === 4 ? (['replace', 'move', 'rotate', 'grow'] as const) : (['replace', 'move', 'rotate', 'shrink'] as const))
      const next = { f: committee.f, members: [...committee.members] }
      let nextMembers = [...members]
      const joining: number[] = []
      const at = rng.int(0, members.length - 1)
      if (kind === 'replace') {
        const r = c.addRelay()
        next.members[at] = entryOf(c, r.index)
        nextMembers[at] = r.index
        joining.push(r.index)
      } else if (kind === 'move') {
        next.members[at] = { ...next.members[at]!, api: `relay${members[at]}-moved${epoch}.sim` }
      } else if (kind === 'rotate') {
        next.members[at] = { ...next.members[at]!, publicKey: c.relays[members[at]!]!.nextKey() }
      } else if (kind === 'grow') {
        const added = [c.addRelay(), c.addRelay(), c.addRelay()]
        next.f = 2
        next.members.push(...added.map((r) => entryOf(c, r.index)))
        nextMembers.push(...added.map((r) => r.index))
        joining.push(...added.map((r) => r.index))
      } else {
        const keep = new Set(shuffled(rng, members.map((_, i) => i)).slice(0, 4))
        next.f = 1
        next.members = next.members.filter((_, i) => keep.has(i))
        nextMembers = members.filter((_, i) => keep.has(i))
      }
      // One fault during the change (with the liar, at most f at once).
      const fault = rng.pick(['none', 'liar', 'crash', 'cut', 'split'] as const)
      // With f = 1, a member Byzantine in this epoch stays its one faulty member until the epoch ends
      // (turning honest does not take back what it sent): the next fault falls on it again.
      const standing = committee.f === 1 ? liar : undefined
      const faulty = fault === 'crash' || fault === 'cut' ? (standing ?? rng.pick(members.filter((i) => i !== liar))) : undefined
      // A shrink to f = 1 that keeps both the liar and the relay crashed or cut off: the liar turns honest.
      const bothKept = kind === 'shrink' && liar !== undefined && faulty !== undefined && nextMembers.includes(liar) && nextMembers.includes(faulty)
      if (fault === 'liar' || (faulty !== undefined && faulty === standing) || bothKept) {
        if (liar !== undefined) await behave(c, liar)
        liar = undefined
      }
      let faultText = ''
      if (fault === 'liar') {
        liar = standing ?? rng.pick(members)
        const [lie, strategy] = [rng.pick(LIES), rng.pick(BYZANTINE_STRATEGIES)]
        await behave(c, liar, lie, strategy)
        faultText = `${c.relays[liar]!.id} Byzantine: ${lie} to clients, ${strategy} to relays`
      } else if (faulty !== undefined) {
        faultText = `${c.relays[faulty]!.id} ${fault === 'crash' ? 'crashed at the boundary' : 'cut off'}`
      }
      // Two sides, neither with 2f+1 of the committee (nothing is ordered until they heal).
      const side = fault === 'split' ? shuffled(rng, members).slice(0, rng.int(members.length - 2 * committee.f, 2 * committee.f)) : []
      const splitMs = rng.int(...SPLIT_MS)
      if (fault === 'split') faultText = `${side.map((i) => c.relays[i]!.id).join(' ')} split from the rest for ${splitMs} ms`
      // Operators of correct relays back the change (a Byzantine relay's own request may never be ordered).
      const backers = shuffled(rng, members.filter((i) => i !== faulty && i !== liar)).slice(0, 2 * committee.f + 1)
      const what = `${kind}${faultText ? ` (${faultText})` : ''}`
      try {
      if (fault === 'cut') c.relays[faulty!]!.cutOff()
      if (fault === 'split') {
        c.split(side)
        c.later(splitMs, () => c.heal())
      }
      // As an operator would: a relay still fetching the state its epoch started from says to try again.
      const back = (b: number) => c.until(`${c.relays[b]!.id} backs epoch ${epoch}`, () => c.relays[b]!.backCommittee(epoch, next).then(() => true, (err: unknown) => (isSteadError(err) && err.reason === 'rate-limited' ? undefined : Promise.reject(err))))
      for (const b of backers) await back(b)
      if (fault === 'crash') await c.relays[faulty!]!.down()
      const staying = nextMembers.filter((i) => members.includes(i) && i !== faulty)
      await c.until(`the relays staying in epoch ${epoch}`, () => staying.every((i) => epochOf(c, i) === epoch))
      for (const j of joining) await c.relays[j]!.up()
      if (fault === 'crash') await c.relays[faulty!]!.up()
      if (fault === 'cut') c.relays[faulty!]!.reconnect()
      for (const gone of members.filter((i) => !nextMembers.includes(i))) await c.until(`${c.relays[gone]!.id} left`, () => c.relays[gone]!.hasLeft || undefined)
      // The correct members: a Byzantine one promises nothing (one whose blocks the others refuse may never catch up).
      await settledIn(c, nextMembers.filter((i) => i !== liar), epoch)
      await c.until(`the client in epoch ${epoch}, online`, () => client!.status.epoch === epoch && client!.status.online)
      const before = load.acknowledged
      await c.until(`safe updates in epoch ${epoch}`, () => load.acknowledged >= before + 2)
      if (liar !== undefined && !nextMembers.includes(liar)) liar = undefined
      } catch (err) {
        const relays = client.status.relays.map((r) => `${r.relay ?? r.url}:${r.connected ? 'up' : (r.faulty ?? r.error ?? 'down')}`).join(' ')
        const epochs = c.relays.map((r, i) => `${r.id}=${String(epochOf(c, i))}${r.isUp ? `@${r.node.reads.stableHead('s').index}` : ''}`).join(' ')
        throw new Error(`change ${epoch}, ${what} (${[...done, what].join(', ')}): ${(err as Error).message}; client in epoch ${client.status.epoch} at index ${space.status.stableIndex} with ${space.status.pending} pending, sessions ${relays}; relays' epochs ${epochs}`)
      }
      done.push(what)
      members = nextMembers
      committee = next
    }
    await load.stop()
    const correct = members.filter((i) => i !== liar)
    await settledIn(c, correct, changes)
    for (const i of correct) {
      const value = c.relays[i]!.stableValue('s', 'n')
      if (value !== load.acknowledged) throw new Error(`${c.relays[i]!.id} holds ${String(value)}; the client was told ${load.acknowledged} safe increments committed`)
    }
    await c.until('the client holds every acknowledged update', () => counter.stable === load.acknowledged || undefined)
    return { seed, changes: done, acknowledged: load.acknowledged, epoch: changes, simulatedMs: c.now - started }
  } finally {
    if (writes) writes.writing = false
    await client?.close()
    // A run that failed leaves an update waiting: closing the client ends it with ClosedError.
    await writes?.done.catch(() => undefined)
    await c.close()
  }
}
