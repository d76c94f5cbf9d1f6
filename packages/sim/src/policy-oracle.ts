import { POLICY_KEY, envelopeUnits, isDeletion, fromHex, redeemBytes, type CommitResult, type Declaration, type PolicyOp } from '@stead/core'
import { verifySync } from '@stead/core/node'
import { Violation } from './violation.ts'

type Role = 'admin' | 'writer' | 'reader'

/** How much older than the space's latest invitation time a redemption may be (the relay README's rule). */
const TEN_MINUTES = 10 * 60_000

/**
 * A space's policy modelled apart from the audit, fed the attested order:
 * every unit the audit committed was allowed by the policy in force at its
 * position, and every unit it rejected as `unauthorized` was not. Its rules
 * are the ones the relay README states, written again here in a few lines,
 * so a slip in the audit's policy code shows as a violation instead of
 * being agreed on by every replica alike.
 */
export class PolicyOracle {
  private readonly space: string
  private roles: Map<string, Role> | undefined
  private everyone: 'none' | 'reader' | 'writer' = 'none'
  /** Open invitations by key: role, expiry, uses left (0: any); and the latest time one was made or taken at. */
  private invitations = new Map<string, { role: Role; expires: number; left: number }>()
  private stamp = 0
  /** Devices revoked, as `user device`. */
  private revoked = new Set<string>()
  /** Whether an admin deleted the space: nothing is allowed after. */
  private deleted = false
  /** Units the audit rejected as unauthorized (`revokedDevice`: of those, a revoked device's), and units of policy changes it committed. */
  readonly seen = { unauthorized: 0, changes: 0, redeemed: 0, revokedDevice: 0, deleted: 0 }

  constructor(space: string) {
    this.space = space
  }

  check(decisions: CommitResult['decisions']): void {
    for (const d of decisions) {
      if (d.kind !== 'committed') continue
      const outcome = new Map(d.units.map((u) => [u.unit, u]))
      for (const unit of envelopeUnits(d.env)) {
        const items = unit.kind === 'op' ? [unit] : unit.items
        const verdict = outcome.get(unit.unit)
        if (verdict?.status === 'committed') {
          for (const item of items) {
            if (!this.allows(d.env, item.key, item.op as PolicyOp, item.decl)) throw new Violation(`the audit committed ${d.env.authorId}'s update of ${item.key} (envelope ${d.env.idHex.slice(0, 8)}), which the policy in force does not allow`)
            if (item.key === POLICY_KEY) this.apply(item.op as PolicyOp, d.env.userId)
            if (isDeletion(item.decl)) this.seen.deleted++
          }
        } else if (verdict?.status === 'rejected' && verdict.reason === 'unauthorized') {
          this.seen.unauthorized++
          if (this.revoked.has(`${d.env.userId} ${d.env.authorId}`)) this.seen.revokedDevice++
          // Items apply in order: a group is refused at the first item its author may not make.
          const shadow = this.copy()
          let refused = false
          for (const item of items) {
            if (!shadow.allows(d.env, item.key, item.op as PolicyOp, item.decl)) {
              refused = true
              break
            }
            if (item.key === POLICY_KEY) shadow.apply(item.op as PolicyOp, d.env.userId)
          }
          if (!refused) throw new Violation(`the audit rejected ${d.env.authorId}'s envelope ${d.env.idHex.slice(0, 8)} as unauthorized, which the policy in force allows`)
        }
      }
    }
  }

  /** Whether the policy lets `signer` (a user's own key, or a device acting for its user) make `op` on `key`. */
  private allows(signer: { readonly userId: string; readonly authorId: string }, key: string, op: PolicyOp, decl: Declaration): boolean {
    const roles = this.roles
    const author = signer.userId
    // A bounded counter's rights of another replica are retired only by an admin, or by the user of a device it revoked
    // (with no policy, by nobody): on top of the right to write the object at all.
    const retired: unknown = decl.type === 'bounded-counter' && Array.isArray(op) && op[0] === 'r' ? op[1] : undefined
    if (retired !== undefined && retired !== signer.authorId && !(roles && (roles.get(author) === 'admin' || this.revoked.has(`${author} ${String(retired)}`)))) return false
    if (!roles) return true // No policy yet: the sim's cluster file lets every signed author write.
    if (this.deleted) return false
    if (this.revoked.has(`${author} ${signer.authorId}`)) return false
    // A user's own key revokes its devices; an admin anybody's (below).
    if (key === POLICY_KEY && op[0] === 'v' && op[1] === author && signer.authorId === author) return true
    if (key === POLICY_KEY && op[0] === 'j') {
      // Anybody, with the invitation key's signature, an open invitation, in time and not backdated.
      const inv = this.invitations.get(op[1])
      if (!inv || (inv.expires !== 0 && op[2] > inv.expires) || op[2] < this.stamp - TEN_MINUTES) return false
      return verifySync(fromHex(op[1]), redeemBytes(this.space, author, op[1], op[2]), op[3])
    }
    if (key === POLICY_KEY) return roles.get(author) === 'admin' && op[0] !== 'i'
    const role = roles.get(author)
    return role === 'admin' || role === 'writer' || this.everyone === 'writer'
  }

  private apply(op: PolicyOp, author: string): void {
    this.seen.changes++
    if (op[0] === 'i') {
      this.roles = new Map(op[1])
      this.everyone = op[2]
    } else if (op[0] === 'r') {
      if (op[2] === null) this.roles?.delete(op[1])
      else this.roles?.set(op[1], op[2])
    } else if (op[0] === 'e') {
      this.everyone = op[1]
    } else if (op[0] === 'n') {
      this.invitations.set(op[1], { role: op[2], expires: op[3], left: op[4] })
      this.stamp = Math.max(this.stamp, op[5])
    } else if (op[0] === 'x') {
      this.invitations.delete(op[1])
    } else if (op[0] === 'v') {
      this.revoked.add(`${op[1]} ${op[2]}`)
    } else if (op[0] === 'd') {
      this.deleted = true
    } else if (op[0] === 'j') {
      const inv = this.invitations.get(op[1]) as { role: Role; expires: number; left: number }
      const rank = { reader: 0, writer: 1, admin: 2 }
      const had = this.roles?.get(author)
      if (had === undefined || rank[inv.role] > rank[had]) this.roles?.set(author, inv.role)
      if (inv.left === 1) this.invitations.delete(op[1])
      else if (inv.left > 1) inv.left--
      this.stamp = Math.max(this.stamp, op[2])
      this.seen.redeemed++
    }
  }

  private copy(): PolicyOracle {
    const c = new PolicyOracle(this.space)
    c.roles = this.roles && new Map(this.roles)
    c.everyone = this.everyone
    c.invitations = new Map([...this.invitations].map(([k, v]) => [k, { ...v }]))
    c.stamp = this.stamp
    c.revoked = new Set(this.revoked)
    c.deleted = this.deleted
    return c
  }
}
