import { assert, type Dag, type DagBlock } from './dag.ts'

/**
 * Mysticeti's commit rule over an uncertified DAG, pipelined with waves of
 * three rounds: every round r has one leader slot (r, leaderOf(r)), voted
 * for at r+1 and decided at r+2. The rules are written down in
 * relay/src/consensus/README.md; pure functions of the DAG.
 */

export type LeaderStatus =
  | { readonly kind: 'commit'; readonly round: number; readonly author: number; readonly block: DagBlock; readonly direct: boolean }
  | { readonly kind: 'skip'; readonly round: number; readonly author: number; readonly direct: boolean }
  | { readonly kind: 'undecided'; readonly round: number; readonly author: number }

export interface CommitRule {
  /** Distinct authors that make a quorum: 2f+1. */
  readonly quorum: number
  /** Blamers or certificates the direct rule needs: the quorum, except in a deliberately weakened simulator run. */
  readonly directQuorum: number
  readonly leaderOf: (round: number) => number
}

/** Round-robin leaders: every relay leads every n-th round. */
export function roundRobin(n: number): (round: number) => number {
  return (round) => round % n
}

/** Whether `voter` votes for leader block `leader`: the first block of the leader's slot in its history is that block. */
function isVote(dag: Dag, voter: DagBlock, leader: DagBlock): boolean {
  return dag.supported(voter, leader.round, leader.author) === leader.digestHex
}

/** Whether `block` is a certificate for `leader`: among its direct ancestors, a quorum of authors vote for it. */
function isCertificate(dag: Dag, block: DagBlock, leader: DagBlock, quorum: number): boolean {
  const voters = new Set<number>()
  for (const a of block.ancestors) {
    if (a.round <= leader.round) continue
    const voter = dag.get(a.digestHex)
    if (voter && isVote(dag, voter, leader)) voters.add(voter.author)
  }
  return voters.size >= quorum
}

/** Direct rule for slot (round, author): skip on a quorum of blamers at round+1, commit on a quorum of certificates at round+2. */
export function decideDirect(dag: Dag, rule: CommitRule, round: number, author: number): LeaderStatus {
  // A blamer references no block at all of the leader's author; every block of the round counts, twins included.
  const blamers = new Set<number>()
  for (const b of dag.atRound(round + 1)) if (!b.ancestors.some((a) => a.author === author)) blamers.add(b.author)
  if (blamers.size >= rule.directQuorum) return { kind: 'skip', round, author, direct: true }

  const deciders = dag.atRound(round + 2)
  const committed: DagBlock[] = []
  if (new Set(deciders.map((b) => b.author)).size >= rule.directQuorum) {
    for (const leader of dag.atSlot(round, author)) {
      const certifiers = new Set<number>()
      for (const d of deciders) if (isCertificate(dag, d, leader, rule.directQuorum)) certifiers.add(d.author)
      if (certifiers.size >= rule.directQuorum) committed.push(leader)
    }
  }
  assert(committed.length <= 1, `two blocks of relay ${author} round ${round} both qualify for a direct commit`)
  const [block] = committed
  return block ? { kind: 'commit', round, author, block, direct: true } : { kind: 'undecided', round, author }
}

/**
 * Indirect rule: the first decided-or-undecided slot at round+3 or later
 * (skips are passed over) is the anchor. If it is committed, the slot
 * commits the block that some block of round+2 in the anchor's history
 * certifies, and is skipped when there is none.
 */
function decideIndirect(dag: Dag, rule: CommitRule, round: number, author: number, later: readonly LeaderStatus[]): LeaderStatus {
  const anchor = later.find((s) => s.round >= round + 3 && s.kind !== 'skip')
  if (!anchor || anchor.kind !== 'commit') return { kind: 'undecided', round, author }
  const deciders = dag.reachableAt(anchor.block, round + 2)
  const linked = dag.atSlot(round, author).filter((leader) => deciders.some((d) => isCertificate(dag, d, leader, rule.quorum)))
  assert(linked.length <= 1, `two blocks of relay ${author} round ${round} both have a certified link from the anchor of round ${anchor.round}`)
  const [block] = linked
  return block ? { kind: 'commit', round, author, block, direct: false } : { kind: 'skip', round, author, direct: false }
}

/**
 * The leader slots after `lastDecidedRound` that can be decided now, in
 * round order, stopping before the first undecided one. Idempotent: it
 * recomputes from the DAG every time.
 */
export function decideLeaders(dag: Dag, rule: CommitRule, lastDecidedRound: number): LeaderStatus[] {
  const statuses: LeaderStatus[] = []
  for (let round = dag.highestRound - 2; round > lastDecidedRound && round > dag.gcRound; round--) {
    const author = rule.leaderOf(round)
    let status = decideDirect(dag, rule, round, author)
    if (status.kind === 'undecided') status = decideIndirect(dag, rule, round, author, statuses)
    statuses.unshift(status)
  }
  const firstUndecided = statuses.findIndex((s) => s.kind === 'undecided')
  return firstUndecided === -1 ? statuses : statuses.slice(0, firstUndecided)
}
