/**
 * The Mysticeti commit rule (relay/src/consensus/committer.ts) on hand-built
 * DAGs: the scenarios of the Mysticeti artifact's and Sui's committer tests
 * (numbered and tagged [MA], [SUI], [Q] as in docs/design/consensus-research.md),
 * ported to our schedule (pipelined, wave length 3, one leader per round: slot r is
 * voted at r+1, decided at r+2, and indirectly through an anchor at ≥ r+3).
 *
 * n = 4 relays A, B, C, D (authors 0..3), f = 1, Q = 3. With round-robin
 * leaders (r mod 4) the leaders of rounds 3, 6, 9, 12 are D, C, B, A, the
 * same as in the artifact's non-pipelined scenarios; the other rounds are leader
 * rounds too, so the expected sequences list them as well.
 *
 * Every test block is signed and then opened with `openBlock`, so it passes
 * the door checks (own previous block first, one ancestor per author, 2f+1
 * ancestors at round - 1): the source scenarios are restated with valid blocks.
 */
import { nodeCrypto, publicKeyOfSync, signSync, verifySync } from '@stead/core/node'
import { describe, expect, it } from 'vitest'
import { decideDirect, decideLeaders, roundRobin, type CommitRule, type LeaderStatus } from '../src/consensus/committer.ts'
import { ConsensusInvariantError, Dag, type DagBlock } from '../src/consensus/dag.ts'
import { GENESIS_DIGEST, openBlock, signBlock, type BlockRef, type Committee, type SyncCrypto } from '../src/consensus/messages.ts'

const crypto: SyncCrypto = { sign: signSync, verify: verifySync, sha256: (d) => nodeCrypto.sha256(d) }
const N = 4
const Q = 3
const secrets = [0, 1, 2, 3].map((i) => new Uint8Array(32).fill(i + 10))
const committee: Committee = { f: 1, keys: secrets.map(publicKeyOfSync) }
const LETTERS = 'ABCD'
const [A, B, C, D] = [0, 1, 2, 3]

function rule(leaderOf: (round: number) => number = roundRobin(N), directQuorum = Q): CommitRule {
  return { quorum: Q, directQuorum, leaderOf }
}

/** A schedule given as a table round → leader; other rounds fall back to round robin. */
function schedule(table: Record<number, number>): (round: number) => number {
  return (round) => table[round] ?? roundRobin(N)(round)
}

/** "B4" → author 1, round 4; a suffix marks a twin: "B4'", "C13.1". "A0".."D0" are the genesis blocks. */
function parseName(name: string): { author: number; round: number; twin: boolean } {
  const m = /^([A-D])(\d+)(.*)$/.exec(name)
  if (!m) throw new Error(`bad block name ${name}`)
  return { author: LETTERS.indexOf(m[1]!), round: Number(m[2]), twin: m[3] !== '' }
}

/**
 * A DAG built block by block from names. Each block carries its own name as
 * payload, so twins with the same ancestors still differ.
 */
class TestDag {
  readonly dag = new Dag(Q, N)
  private readonly byName = new Map<string, DagBlock>()
  private readonly names = new Map<string, string>()

  /** Signs the block, opens its bytes (door checks) and accepts it into the DAG. */
  add(name: string, ancestors: readonly string[]): DagBlock {
    const { author, round } = parseName(name)
    if (this.byName.has(name)) throw new Error(`block ${name} built twice`)
    const refs = ancestors.map((a): BlockRef => {
      const p = parseName(a)
      if (p.round === 0) return { round: 0, author: p.author, digest: GENESIS_DIGEST }
      const block = this.get(a)
      return { round: block.round, author: block.author, digest: block.block.digest }
    })
    const signed = signBlock(crypto, secrets[author]!, { round, author, ancestors: refs, payload: [new TextEncoder().encode(name)] })
    const node = this.dag.accept(openBlock(crypto, committee, signed.signed))
    this.byName.set(name, node)
    this.names.set(node.digestHex, name)
    return node
  }

  /** Adds the given blocks in order: `{ A4: ['A3', 'B3', 'C3'], "B4'": [...] }`. */
  blocks(spec: Record<string, readonly string[]>): this {
    for (const [name, ancestors] of Object.entries(spec)) this.add(name, ancestors)
    return this
  }

  /**
   * Fully connected rounds: each author of `authors` makes a block that
   * lists its own latest block first, then every (non-twin) block of the
   * round before.
   */
  full(from: number, to = from, authors = LETTERS): this {
    for (let r = from; r <= to; r++) {
      for (const x of authors) {
        const own = this.latest(x, r - 1)
        const others = [...LETTERS].filter((y) => y !== x && (r === 1 || this.byName.has(`${y}${r - 1}`))).map((y) => `${y}${r - 1}`)
        this.add(`${x}${r}`, [own, ...others])
      }
    }
    return this
  }

  get(name: string): DagBlock {
    const block = this.byName.get(name)
    if (!block) throw new Error(`no block ${name}`)
    return block
  }

  /** The name of a status's slot and, for a commit, of the committed block: "commit D3", "skip C6 (indirect)". */
  describe(s: LeaderStatus): string {
    const slot = `${LETTERS[s.author]}${s.round}`
    if (s.kind === 'undecided') return `undecided ${slot}`
    const what = s.kind === 'commit' ? `commit ${this.names.get(s.block.digestHex)}` : `skip ${slot}`
    if (s.kind === 'commit') expect([s.block.round, s.block.author]).toEqual([s.round, s.author])
    return s.direct ? what : `${what} (indirect)`
  }

  decide(r: CommitRule, lastDecidedRound = 0): string[] {
    return decideLeaders(this.dag, r, lastDecidedRound).map((s) => this.describe(s))
  }

  direct(r: CommitRule, round: number, author: number): string {
    return this.describe(decideDirect(this.dag, r, round, author))
  }

  private latest(author: string, below: number): string {
    for (let r = below; r > 0; r--) if (this.byName.has(`${author}${r}`)) return `${author}${r}`
    return `${author}0`
  }
}

describe('test DAG builder', () => {
  it('rejects blocks that break the door rules, so the scenarios below are valid', () => {
    const t = new TestDag().full(1, 3)
    // Own previous block not first.
    expect(() => t.add('A4', ['B3', 'A3', 'C3'])).toThrow(/own previous block/)
    // Only 2 ancestors at round 3.
    expect(() => t.add('A4', ['A3', 'B3', 'C2'])).toThrow(/needs 3 ancestors/)
    // Round 1 must reference genesis refs of 3 authors, its own first.
    expect(() => new TestDag().add('A1', ['A0', 'B0'])).toThrow(/needs 3 ancestors/)
    expect(t.get('D3').ancestors.map((a) => a.round)).toEqual([2, 2, 2, 2])
  })
})

describe('the DAG store', () => {
  it("latestPerAuthor: each author's block of its highest round below the given one, of twins the highest digest, nothing at or below the GC round", () => {
    // D goes quiet after round 1; B equivocates at round 4; A and C are a round ahead at 6.
    const t = new TestDag().full(1, 1).full(2, 3, 'ABC').blocks({ A4: ['A3', 'B3', 'C3'], B4: ['B3', 'A3', 'C3'], "B4'": ['B3', 'C3', 'A3'], C4: ['C3', 'A3', 'B3'] })
    t.full(5, 5, 'AC').blocks({ B5: ['B4', 'A4', 'C4'] }).full(6, 6, 'AC')
    const names = (round: number) => [...t.dag.latestPerAuthor(round)].sort(([a], [b]) => a - b).map(([, block]) => `${'ABCD'[block.author]}${block.round}`)
    const twin = [t.get('B4'), t.get("B4'")].reduce((a, b) => (b.digestHex > a.digestHex ? b : a))
    expect(names(5)).toEqual(['A4', 'B4', 'C4', 'D1'])
    expect(t.dag.latestPerAuthor(5).get(B)).toBe(twin)
    expect(names(6)).toEqual(['A5', 'B5', 'C5', 'D1'])
    expect(names(100)).toEqual(['A6', 'B5', 'C6', 'D1'])
    expect(names(1)).toEqual([])
    t.dag.collect(1)
    expect(names(5)).toEqual(['A4', 'B4', 'C4'])
    // A block at or below the GC round (the core refuses such peers' blocks; the DAG must not offer one either).
    t.add("D1'", ['D0', 'A0', 'B0', 'C0'])
    expect(names(5)).toEqual(['A4', 'B4', 'C4'])
    // The twins' order of arrival does not decide the pick: above the higher twin came second, here first.
    const u = new TestDag().full(1, 3).blocks({ "B4'": ['B3', 'C3', 'A3'], B4: ['B3', 'A3', 'C3'] })
    expect(t.get('B4')).not.toBe(twin)
    expect(u.get("B4'").digestHex > u.get('B4').digestHex).toBe(true)
    expect(u.dag.latestPerAuthor(5).get(B)).toBe(u.get("B4'"))
  })
})

describe('direct decisions', () => {
  // [MA] base 1 `direct_commit`, [SUI] universal 19 `direct_commit`, pipelined 27 (full to round 3 → the round-1 leader).
  it('direct commit: a fully connected DAG commits every leader up to highest round - 2', () => {
    const t = new TestDag().full(1, 2)
    expect(t.decide(rule())).toEqual([])
    t.full(3)
    expect(t.decide(rule())).toEqual(['commit B1'])
    t.full(4, 5)
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'commit D3'])
    // Round 4's leader has its votes (round 5) but no decision round yet.
    expect(t.direct(rule(), 4, A)).toBe('undecided A4')
  })

  // [SUI] declarative 11 `direct_commit`: only A4, B4, C4 vote (D makes no round-4 block; under the door
  // rules D4 could not omit D3 anyway, its own previous block), and A5, B5, C5 each hold those 3 votes.
  it('direct commit with exactly Q votes and Q certificates', () => {
    const t = new TestDag().full(1, 3).full(4, 4, 'ABC').full(5, 5, 'ABC')
    expect(t.direct(rule(), 3, D)).toBe('commit D3')
    // With one certificate fewer the slot is not committed.
    const short = new TestDag().full(1, 3).full(4, 4, 'ABC').full(5, 5, 'AB')
    expect(short.direct(rule(), 3, D)).toBe('undecided D3')
  })

  // [MA] base 2 `idempotence`, [SUI] universal 20.
  it('idempotence: the same call gives the same result; a later call returns only the new slots', () => {
    const t = new TestDag().full(1, 5)
    const first = t.decide(rule())
    expect(first).toEqual(['commit B1', 'commit C2', 'commit D3'])
    expect(t.decide(rule())).toEqual(first)
    t.full(6, 8)
    expect(t.decide(rule(), 3)).toEqual(['commit A4', 'commit B5', 'commit C6'])
    // Recomputing from the start gives the longer sequence with the same prefix.
    expect(t.decide(rule())).toEqual([...first, 'commit A4', 'commit B5', 'commit C6'])
  })

  // [MA] base 3 `multiple_direct_commit`, 4 `direct_commit_late_call`, 5 `no_genesis_commit`.
  it('growing round by round decides one new leader per round; a late call decides them all in order', () => {
    const t = new TestDag()
    let last = 0
    const all: string[] = []
    for (let h = 1; h <= 14; h++) {
      t.full(h)
      const fresh = t.decide(rule(), last)
      if (h <= 2) {
        expect(fresh).toEqual([]) // no genesis commit: round 0 is never a slot
        continue
      }
      const leader = `${LETTERS[(h - 2) % N]}${h - 2}`
      expect(fresh).toEqual([`commit ${leader}`])
      last = h - 2
      all.push(...fresh)
    }
    expect(t.decide(rule(), 0)).toEqual(all)
    expect(all).toHaveLength(12)
  })

  // [MA] base 6 `no_leader`, [SUI] universal 22 `direct_skip_missing_leader_block`, pipelined 27 `no_leader`.
  it('no leader block: the slot is skipped directly', () => {
    // Pipelined: B never makes a round-1 block; B2 lists its genesis block as its own previous block.
    const p = new TestDag().full(1, 1, 'ACD').full(2, 3)
    expect(p.get('B2').ancestors[0]).toMatchObject({ round: 0, author: B })
    expect(p.decide(rule())).toEqual(['skip B1'])
    // The source's form: D makes no round-3 block; D4 lists D2 as its own previous block, so only A4, B4, C4 blame.
    const t = new TestDag().full(1, 2).full(3, 3, 'ABC').full(4, 5)
    expect(t.get('D4').ancestors[0]).toMatchObject({ round: 2, author: D })
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'skip D3'])
  })

  // [MA] base 7 `direct_skip`, [SUI] universal 21 `direct_skip_no_leader_votes`.
  it('direct skip: Q blamers at round + 1 skip the slot without waiting for round + 2', () => {
    // D4 must list D3 (its own previous block); A4, B4, C4 omit it.
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
    })
    expect(t.direct(rule(), 3, D)).toBe('skip D3')
    t.full(5)
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'skip D3'])
    // A block that references an older block of the leader's author is no blame: with C4 listing D2, only 2 blamers.
    const older = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3', 'D2'],
    })
    expect(older.direct(rule(), 3, D)).toBe('undecided D3')
  })

  // [SUI] declarative 13 `direct_undecided` (restated: D4 votes for its own D3, so A4 + D4 vote and B4, C4 blame).
  it('undecided: 2 votes and 2 blames, round 5 fully connected', () => {
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
    })
    t.full(5)
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2'])
  })

  // [MA] base 10 `undecided` (1 vote, 2 blames, the 4th author absent) and §5: the prefix stops at the first undecided slot.
  it('decideLeaders stops at the first undecided slot, even when later slots are directly decided', () => {
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3'],
    })
    t.full(5, 6)
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    expect(t.direct(rule(), 4, A)).toBe('commit A4')
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2'])
    expect(t.decide(rule(), 2)).toEqual([])
    // Once D3 is decided (here: indirectly skipped through the anchor C6), the rest follows.
    t.full(7, 8)
    expect(t.decide(rule(), 2)).toEqual(['skip D3 (indirect)', 'commit A4', 'commit B5', 'commit C6'])
  })

  // A leader twin that is not certified does not stop its certified sibling from committing (§1.5 "leader slots with twins").
  it('leader twins: the certified twin is committed', () => {
    const t = new TestDag().full(1, 2).full(3).blocks({
      "D3'": ['D2', 'A2', 'B2', 'C2'],
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3', 'D3'],
      C4: ['C3', 'A3', 'B3', "D3'"],
      D4: ['D3', 'A3', 'B3', 'C3'],
    })
    t.full(5)
    expect(t.direct(rule(), 3, D)).toBe('commit D3')
    // Swap the roles: now D3' is the one with 3 votes.
    const u = new TestDag().full(1, 3).blocks({
      "D3'": ['D2', 'A2', 'B2', 'C2'],
      A4: ['A3', 'B3', 'C3', "D3'"],
      B4: ['B3', 'A3', 'C3', "D3'"],
      C4: ['C3', 'A3', 'B3', 'D3'],
      D4: ["D3'", 'A3', 'B3', 'C3'],
    })
    u.full(5)
    expect(u.direct(rule(), 3, D)).toBe("commit D3'")
  })

  // §3.2: two twins of one slot both qualifying means more than f faulty relays (here B and D equivocate): fatal.
  it('two leader twins that both qualify for a direct commit stop the relay', () => {
    const t = new TestDag().full(1, 3).blocks({
      "D3'": ['D2', 'A2', 'B2', 'C2'],
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3', 'D3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
      C4: ['C3', 'A3', 'B3', "D3'"],
      "B4'": ['B3', 'A3', 'C3', "D3'"],
      "D4'": ["D3'", 'A3', 'B3', 'C3'],
      // Certificates for D3 by A, B, D; for D3' by C, D, B.
      A5: ['A4', 'B4', 'D4'],
      B5: ['B4', 'A4', 'D4'],
      "D5'": ['D4', 'A4', 'B4'],
      C5: ['C4', "B4'", "D4'"],
      D5: ["D4'", 'C4', "B4'"],
      "B5'": ["B4'", 'C4', "D4'"],
    })
    expect(() => decideDirect(t.dag, rule(), 3, D)).toThrow(ConsensusInvariantError)
  })
})

describe('indirect decisions', () => {
  // [SUI] universal 23 `indirect_commit`, [MA] base 8, pipelined 27 (Q votes, only V = f+1 certificates).
  it('indirect commit: Q votes but only 2 certificates, committed through the next anchor', () => {
    const build = () =>
      new TestDag().full(1, 3).blocks({
        A4: ['A3', 'B3', 'C3'], // omits D3
        B4: ['B3', 'A3', 'C3', 'D3'],
        C4: ['C3', 'A3', 'B3', 'D3'],
        D4: ['D3', 'A3', 'B3', 'C3'],
        A5: ['A4', 'B4', 'C4', 'D4'], // certificate (B4, C4, D4)
        B5: ['B4', 'A4', 'C4', 'D4'], // certificate
        C5: ['C4', 'A4', 'B4'], // 2 votes only
        D5: ['D4', 'A4', 'B4'], // 2 votes only
      })
    const t = build()
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    t.full(6, 7)
    // Slot 6 (the first anchor candidate for D3) is not decided yet: D3 stays undecided and stops the prefix.
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2'])
    t.full(8)
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'commit D3 (indirect)', 'commit A4', 'commit B5', 'commit C6'])

    // §4 step 1: skipped slots are passed over. C makes no round-6 block, slot 6 is skipped,
    // and D7 is the anchor that commits D3.
    const s = build().full(6, 6, 'ABD').full(7, 9)
    expect(s.decide(rule())).toEqual(['commit B1', 'commit C2', 'commit D3 (indirect)', 'commit A4', 'commit B5', 'skip C6', 'commit D7'])
  })

  // [SUI] declarative 14 `indirect_commit`: one certificate (A5), and it counts only when it is in the anchor's history.
  it.each([
    { c6: ['C5', 'A5', 'B5'], expected: 'commit D3 (indirect)' },
    { c6: ['C5', 'B5', 'D5'], expected: 'skip D3 (indirect)' },
  ])('indirect decision follows the anchor C6’s history: C6 ← $c6 → $expected', ({ c6, expected }) => {
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3', 'D3'],
      C4: ['C3', 'A3', 'B3'], // blames D3
      D4: ['D3', 'A3', 'B3', 'C3'],
      A5: ['A4', 'B4', 'D4'], // the only certificate for D3
      B5: ['B4', 'C4', 'D4'],
      C5: ['C4', 'A4', 'B4'],
      D5: ['D4', 'A4', 'C4'],
    })
    t.full(6, 6, 'ABD')
    t.add('C6', c6)
    t.full(7, 8)
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    expect(t.direct(rule(), 6, C)).toBe('commit C6')
    // A6, B6, D6 all reach A5: the rule must look at the anchor's history, not at the whole round.
    expect(t.dag.reachableAt(t.get('A6'), 5).map((b) => b.author)).toContain(A)
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', expected, 'commit A4', 'commit B5', 'commit C6'])
  })

  // §4 step 2 ("reachable through ancestor links"): the anchor A7 reaches the only certificate A5 through its own
  // previous block, a link that skips round 6 (A makes no round-6 block and B6, C6, D6 do not list A5).
  it('indirect commit through an ancestor link that skips a round', () => {
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3', 'D3'],
      C4: ['C3', 'A3', 'B3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
      A5: ['A4', 'B4', 'D4'], // the only certificate for D3
      B5: ['B4', 'C4', 'D4'],
      C5: ['C4', 'A4', 'B4'],
      D5: ['D4', 'A4', 'C4'],
      B6: ['B5', 'C5', 'D5'],
      C6: ['C5', 'B5', 'D5'],
      D6: ['D5', 'B5', 'C5'],
      A7: ['A5', 'B6', 'C6', 'D6'],
    })
    t.full(7, 7, 'BCD').full(8, 9)
    // A leads rounds 6 (no block: skipped) and 7 (committed, the anchor of D3).
    const r = rule(schedule({ 6: A, 7: A }))
    expect(t.dag.reachableAt(t.get('A7'), 5).map((b) => b.digestHex)).toContain(t.get('A5').digestHex)
    // A4 has 3 votes but no certificate (round 6 never lists A5), and A7's history at round 6 holds none: skipped.
    expect(t.decide(r)).toEqual(['commit B1', 'commit C2', 'commit D3 (indirect)', 'skip A4 (indirect)', 'commit B5', 'skip A6', 'commit A7'])
  })

  // [MA] base 9 `indirect_skip`, [SUI] declarative 15 (C7 votes for its own C6, so A7 and C7 vote, B7 and D7 blame).
  it('indirect skip: no certified link from the anchor B9', () => {
    const t = new TestDag().full(1, 6).blocks({
      A7: ['A6', 'B6', 'C6', 'D6'],
      B7: ['B6', 'A6', 'D6'],
      C7: ['C6', 'A6', 'B6', 'D6'],
      D7: ['D6', 'A6', 'B6'],
    })
    t.full(8, 11)
    expect(t.direct(rule(), 6, C)).toBe('undecided C6')
    expect(t.direct(rule(), 9, B)).toBe('commit B9')
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'commit D3', 'commit A4', 'commit B5', 'skip C6 (indirect)', 'commit D7', 'commit A8', 'commit B9'])
  })

  // §4 step 1: an undecided slot at r+3 stops the anchor search, even if a later slot commits.
  it('an undecided first anchor candidate leaves the slot undecided', () => {
    // Slot 3 (D3) and slot 6 (C6) both undecided: 2 votes / 2 blames each, with at most 2 votes in every certificate candidate.
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
    })
    t.full(5, 6).blocks({
      A7: ['A6', 'B6', 'C6', 'D6'],
      B7: ['B6', 'A6', 'D6'],
      C7: ['C6', 'A6', 'B6', 'D6'],
      D7: ['D6', 'A6', 'B6'],
    })
    t.full(8, 9)
    // With leader A at round 7 (schedule table), slot 7 commits directly, but slot 6 comes first for D3.
    const r = rule(schedule({ 7: A }))
    expect(t.direct(r, 6, C)).toBe('undecided C6')
    expect(t.direct(r, 7, A)).toBe('commit A7')
    expect(t.decide(r)).toEqual(['commit B1', 'commit C2'])
    // Control: with D as the round-6 leader, slot 6 commits directly and is the anchor; D3 (no certificate anywhere) is skipped.
    const s = rule(schedule({ 6: D, 7: A }))
    expect(t.decide(s)).toEqual(['commit B1', 'commit C2', 'skip D3 (indirect)', 'commit A4', 'commit B5', 'commit D6', 'commit A7'])
  })
})

describe('equivocation', () => {
  /** Rounds 1-3 full; round 4: A4, B4 blame D3, C4 and D4 vote. */
  const start = () =>
    new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3'],
      B4: ['B3', 'A3', 'C3'],
      C4: ['C3', 'A3', 'B3', 'D3'],
      D4: ['D3', 'A3', 'B3', 'C3'],
    })

  // [SUI] declarative 16 `test_equivocating_direct_commit`.
  it('a twin’s vote counts toward a commit when the certificates reference that twin', () => {
    const plain = start().full(5)
    expect(plain.direct(rule(), 3, D)).toBe('undecided D3')

    const t = start().blocks({
      "B4'": ['B3', 'A3', 'C3', 'D3'],
      A5: ['A4', 'B4', 'C4', 'D4'], // 2 votes: no certificate
      B5: ["B4'", 'A4', 'C4', 'D4'],
      C5: ['C4', 'A4', "B4'", 'D4'],
      D5: ['D4', 'A4', "B4'", 'C4'],
    })
    expect(t.direct(rule(), 3, D)).toBe('commit D3')
  })

  // [SUI] declarative 17 `test_equivocating_direct_skip`: blames count every stored block of round 4, referenced or not.
  it('a twin’s blame counts toward a skip, although the author’s other block votes', () => {
    const t = start().blocks({ "C4'": ['C3', 'A3', 'B3'] })
    expect(t.direct(rule(), 3, D)).toBe('skip D3')
    // The round-5 blocks reference C4, the voting twin, and never C4': still a skip.
    t.full(5)
    expect(t.direct(rule(), 3, D)).toBe('skip D3')
    expect(t.decide(rule())).toEqual(['commit B1', 'commit C2', 'skip D3'])
  })

  // §1.5 "counted per author, never per block", on the certificate side: three certifying twins of A5 are one certificate.
  it('three certifying twins of one author count as one certificate', () => {
    const t = new TestDag().full(1, 3).blocks({
      A4: ['A3', 'B3', 'C3', 'D3'],
      B4: ['B3', 'A3', 'C3', 'D3'],
      C4: ['C3', 'A3', 'B3'], // blames D3
      D4: ['D3', 'A3', 'B3', 'C3'],
      A5: ['A4', 'B4', 'D4'],
      "A5'": ['A4', 'D4', 'B4'],
      "A5''": ['A4', 'B4', 'C4', 'D4'],
      B5: ['B4', 'C4', 'D4'], // 2 votes
      C5: ['C4', 'A4', 'B4'], // 2 votes
      D5: ['D4', 'A4', 'C4'], // 2 votes
    })
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    // Once B5 is joined by a twin that certifies, two authors certify: still short of Q.
    t.add("B5'", ['B4', 'A4', 'D4'])
    expect(t.direct(rule(), 3, D)).toBe('undecided D3')
    // A third author makes it a commit.
    t.add("C5'", ['C4', 'A4', 'B4', 'D4'])
    expect(t.direct(rule(), 3, D)).toBe('commit D3')
  })

  // [SUI] 18 `test_byzantine_direct_commit`: C's three blaming twins at round 13 count as one blamer.
  it('three blaming twins of one author do not prevent a commit', () => {
    const t = new TestDag().full(1, 13).blocks({
      'C13.1': ['C12', 'B12', 'D12'],
      'C13.2': ['C12', 'B12', 'D12'],
      'C13.3': ['C12', 'B12', 'D12'],
      A14: ['A13', 'B13', 'C13', 'D13'],
      B14: ['B13', 'A13', 'C13.1', 'D13'],
      C14: ['C13.2', 'A13', 'B13', 'D13'],
      D14: ['D13', 'A13', 'B13', 'C13.3'],
    })
    expect(t.direct(rule(), 12, A)).toBe('commit A12')
    const sequence = t.decide(rule())
    expect(sequence).toHaveLength(12)
    expect(sequence.every((s) => /^commit [A-D]\d+$/.test(s))).toBe(true)
    expect(sequence.filter((_, i) => (i + 1) % 3 === 0)).toEqual(['commit D3', 'commit C6', 'commit B9', 'commit A12'])
    // Guard on the test data: the twins are blames (C is one blamer, enough for a skip only with a direct quorum of 1).
    expect(decideDirect(t.dag, rule(roundRobin(N), 1), 12, A).kind).toBe('skip')
  })
})

describe('the paper DAG (informalsystems/mysticeti-spec, mysticeti_paper_test.qnt)', () => {
  /**
   * Authors A..D are the Quint nodes 0..3; ranks a < b < c < d per round:
   *   R1: A a, B b, C c, D d      R2: B a, C b, D c, A d      R3: C a (no block), D b, A c, B d
   *   R4: B a, C b, D c, A d      R5: C a, D b, A c, B d      R6: D a (no block), A b, B c, C d
   * C4 also lists C2, its own previous block (door rule).
   */
  const rank: Record<number, readonly number[]> = {
    1: [A, B, C, D],
    2: [B, C, D, A],
    3: [C, D, A, B],
    4: [B, C, D, A],
    5: [C, D, A, B],
    6: [D, A, B, C],
  }
  const paper = () =>
    new TestDag().full(1).blocks({
      A2: ['A1', 'B1', 'C1'],
      B2: ['B1', 'A1', 'D1'],
      C2: ['C1', 'A1', 'D1'],
      D2: ['D1', 'A1', 'C1'],
      A3: ['A2', 'B2', 'C2'],
      B3: ['B2', 'A2', 'D2'],
      D3: ['D2', 'A2', 'B2', 'C2'],
      A4: ['A3', 'B3', 'D3'],
      B4: ['B3', 'A3', 'D3'],
      C4: ['C2', 'A3', 'B3', 'D3'],
      D4: ['D3', 'A3', 'B3'],
      A5: ['A4', 'C4', 'D4'],
      B5: ['B4', 'A4', 'C4', 'D4'],
      C5: ['C4', 'A4', 'D4'],
      D5: ['D4', 'A4', 'C4'],
      A6: ['A5', 'B5', 'C5', 'D5'],
      B6: ['B5', 'C5', 'D5'],
      C6: ['C5', 'B5', 'D5'],
    })

  it('direct statuses of every ranked slot', () => {
    const t = paper()
    const direct = (round: number, r: string) => t.direct(rule(), round, rank[round]!['abcd'.indexOf(r)]!).split(' ')[0]
    // 1a direct commit; 1b, 1c, 1d need the indirect rule.
    expect(['a', 'b', 'c', 'd'].map((r) => direct(1, r))).toEqual(['commit', 'undecided', 'undecided', 'undecided'])
    expect(['a', 'b', 'c', 'd'].map((r) => direct(2, r))).toEqual(['commit', 'undecided', 'undecided', 'commit'])
    // 3a (C) has no block; A4, B4, D4 list nothing of C (C4 lists C2, so it is no blame): direct skip.
    expect(['a', 'b', 'c', 'd'].map((r) => direct(3, r))).toEqual(['skip', 'commit', 'commit', 'commit'])
    expect(['a', 'b', 'c', 'd'].map((r) => direct(4, r))).toEqual(['skip', 'commit', 'commit', 'commit'])
    expect(['a', 'b', 'c', 'd'].map((r) => direct(5, r))).toEqual(['undecided', 'undecided', 'undecided', 'undecided'])
  })

  // L = 1 here: one ranked author per round. Rounds 2-4 use 2a, 3b, 4b (all direct commits), so the anchor of round 1 is 4b = C4.
  it.each([
    { round1: 'a', expected: 'commit A1' },
    { round1: 'b', expected: 'skip B1 (indirect)' },
    { round1: 'c', expected: 'commit C1 (indirect)' },
    { round1: 'd', expected: 'commit D1 (indirect)' },
  ])('slot 1$round1 with anchor 4b: $expected', ({ round1, expected }) => {
    const t = paper()
    const r = rule(schedule({ 1: rank[1]!['abcd'.indexOf(round1)]!, 2: B, 3: D, 4: C }))
    expect(t.decide(r)).toEqual([expected, 'commit B2', 'commit D3', 'commit C4'])
  })

  it('2b and 2c stay undecided (no decided anchor at round ≥ 5) and stop the sequence', () => {
    const t = paper()
    for (const leader2 of [C, D]) {
      expect(t.decide(rule(schedule({ 1: A, 2: leader2, 3: D, 4: C })))).toEqual(['commit A1'])
    }
    // With 4a (direct skip) as the round-4 slot, round 1's next anchor candidate is at round 5, undecided: 1c stays undecided.
    expect(t.decide(rule(schedule({ 1: C, 2: B, 3: D, 4: B })))).toEqual([])
  })
})
