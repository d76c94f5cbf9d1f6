import { SteadError } from '../errors.ts'
import { OK, invalid, violates, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

/** The key of a space's policy object: who administers, writes and reads the space. */
export const POLICY_KEY = '$policy'

/** What a member may do: admins change the policy and write, writers write, readers read (everyone with a role reads). */
export type Role = 'admin' | 'writer' | 'reader'

/** What anybody may do in a space, member or not. */
export type Everyone = 'none' | 'reader' | 'writer'

const ROLES: readonly Role[] = ['admin', 'writer', 'reader']
const EVERYONE: readonly Everyone[] = ['none', 'reader', 'writer']

/** Members one policy names at most: every replica keeps them all in memory. */
export const MAX_MEMBERS = 10_000
/** A user id's length at most (an author id is 16 characters). */
const MAX_USER_CHARS = 64

/**
 * A policy operation, always a safe update (the stable order decides):
 * - `['i', [[user, role], ...], everyone]` creates the policy of a space
 *   that has none (at least one admin);
 * - `['r', user, role | null]` gives a user a role, or takes it away;
 * - `['e', everyone]` sets what anybody may do;
 * - `['u']` withdraws the op made under the same context (only `inverse` makes it).
 * Users are author ids (see Envelope.authorId).
 */
export type PolicyOp =
  | readonly ['i', ReadonlyArray<readonly [string, Role]>, Everyone]
  | readonly ['r', string, Role | null]
  | readonly ['e', Everyone]
  | readonly ['u']

/** A space's policy as plain data. */
export interface PolicyValue {
  /** Each member's role, by user id. */
  readonly members: Readonly<Record<string, Role>>
  /** What anybody may do. */
  readonly everyone: Everyone
}

function userProblem(u: unknown): string | null {
  return typeof u === 'string' && u.length >= 1 && u.length <= MAX_USER_CHARS ? null : `a user id is a string of 1 to ${MAX_USER_CHARS} characters`
}

/** What is wrong with a policy op from the wire, or null. */
export function validatePolicyOp(op: unknown): string | null {
  if (!Array.isArray(op)) return 'policy op must be an array'
  switch (op[0]) {
    case 'i': {
      if (op.length !== 3 || !Array.isArray(op[1])) return "policy init is ['i', [[user, role], ...], everyone]"
      if (op[1].length > MAX_MEMBERS) return `a policy names at most ${MAX_MEMBERS} members`
      const seen = new Set<string>()
      for (const m of op[1] as unknown[]) {
        if (!Array.isArray(m) || m.length !== 2) return 'a policy member is [user, role]'
        const p = userProblem(m[0]) ?? (ROLES.includes(m[1] as Role) ? null : `role must be one of ${ROLES.join(', ')}`)
        if (p) return p
        if (seen.has(m[0] as string)) return `user ${String(m[0])} is named twice`
        seen.add(m[0] as string)
      }
      return EVERYONE.includes(op[2] as Everyone) ? null : `everyone must be one of ${EVERYONE.join(', ')}`
    }
    case 'r':
      if (op.length !== 3) return "policy role op is ['r', user, role | null]"
      return userProblem(op[1]) ?? (op[2] === null || ROLES.includes(op[2] as Role) ? null : `role must be one of ${ROLES.join(', ')} or null`)
    case 'e':
      return op.length === 2 && EVERYONE.includes(op[1] as Everyone) ? null : `policy everyone op is ['e', one of ${EVERYONE.join(', ')}]`
    default:
      return "policy op must be ['i', ...], ['r', user, role] or ['e', everyone]"
  }
}

/**
 * A space's policy. Its ops do not commute (a revocation after a grant is
 * not a grant after a revocation), so it is an ordered object: its stable
 * state is its ops applied in the stable order, and a replica rebuilds
 * its prospective copy from the stable one whenever the order decides one
 * of its ops (ObjectType.ordered) instead of inverting. Every correct
 * replica holds the same policy at the same stable position, which is what
 * the audit checks each update against.
 */
export class SpacePolicy implements Crdt<PolicyOp, PolicyValue> {
  readonly type = 'policy' as const
  private members = new Map<string, Role>()
  private everyoneMay: Everyone = 'none'
  /** Ops applied: what merge compares (stable states are prefixes of one order). */
  private version = 0
  /** State before each op applied with `apply`, by tag, so that its `['u']` can restore it. */
  private readonly before = new Map<string, { members: Map<string, Role>; everyone: Everyone }>()

  /** Whether the policy exists (an init committed). */
  get created(): boolean {
    return this.members.size > 0
  }

  value(): PolicyValue {
    return { members: Object.fromEntries([...this.members].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))), everyone: this.everyoneMay }
  }

  /** A user's role, if it has one. */
  roleOf(user: string): Role | undefined {
    return this.members.get(user)
  }

  /** What anybody may do. */
  get everyone(): Everyone {
    return this.everyoneMay
  }

  /** Whether `user` may write objects of the space (not the policy: see mayAdminister). */
  mayWrite(user: string): boolean {
    const role = this.members.get(user)
    return role === 'admin' || role === 'writer' || this.everyoneMay === 'writer'
  }

  /** Whether `user` may read the space. */
  mayRead(user: string | undefined): boolean {
    return this.everyoneMay !== 'none' || (user !== undefined && this.members.has(user))
  }

  /** Whether `user` may change the policy. */
  mayAdminister(user: string): boolean {
    return this.members.get(user) === 'admin'
  }

  tryApply(op: PolicyOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'u') {
      this.apply(op, ctx)
      return OK
    }
    const problem = validatePolicyOp(op)
    if (problem) return invalid(problem)
    if (op[0] === 'i' && this.created) return invalid('the space has a policy already')
    if (op[0] !== 'i' && !this.created) return invalid('the space has no policy yet')
    if (op[0] === 'i' && !op[1].some(([, role]) => role === 'admin')) return violates('a policy needs an admin')
    if (op[0] === 'r' && this.members.get(op[1]) === 'admin' && op[2] !== 'admin' && this.admins() === 1) return violates(`${op[1]} is the last admin`)
    if (op[0] === 'r' && op[2] !== null && !this.members.has(op[1]) && this.members.size >= MAX_MEMBERS) return violates(`a policy names at most ${MAX_MEMBERS} members`)
    this.change(op)
    return OK
  }

  apply(op: PolicyOp, ctx: OpContext): void {
    if (op[0] === 'u') {
      const saved = this.before.get(ctx.tag)
      if (!saved) return
      this.before.delete(ctx.tag)
      this.members = saved.members
      this.everyoneMay = saved.everyone
      this.version++
      return
    }
    this.before.set(ctx.tag, { members: new Map(this.members), everyone: this.everyoneMay })
    this.change(op)
  }

  /** Exact only right after `op` (see the class comment: replicas rebuild ordered objects instead). */
  inverse(): PolicyOp {
    return ['u']
  }

  merge(other: SpacePolicy): void {
    if (other.version <= this.version) return
    this.members = new Map(other.members)
    this.everyoneMay = other.everyoneMay
    this.version = other.version
  }

  clone(): this {
    const copy = new SpacePolicy()
    copy.members = new Map(this.members)
    copy.everyoneMay = this.everyoneMay
    copy.version = this.version
    return copy as this
  }

  /** `[version, everyone, [[user, role], ...]]`, members sorted by user id. */
  snapshot(): [number, Everyone, Array<[string, Role]>] {
    return [this.version, this.everyoneMay, [...this.members].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))]
  }

  /** Rebuilds a policy from its `snapshot()` (trusted input). */
  static fromSnapshot(snap: [number, Everyone, Array<[string, Role]>]): SpacePolicy {
    const p = new SpacePolicy()
    p.version = snap[0]
    p.everyoneMay = snap[1]
    p.members = new Map(snap[2])
    return p
  }

  invariantsHold(): boolean {
    return !this.created || this.admins() > 0
  }

  private admins(): number {
    let n = 0
    for (const role of this.members.values()) if (role === 'admin') n++
    return n
  }

  private change(op: Exclude<PolicyOp, readonly ['u']>): void {
    this.version++
    if (op[0] === 'i') {
      this.members = new Map(op[1])
      this.everyoneMay = op[2]
    } else if (op[0] === 'r') {
      if (op[2] === null) this.members.delete(op[1])
      else this.members.set(op[1], op[2])
    } else {
      this.everyoneMay = op[1]
    }
  }
}

/** A space policy's declaration: it has no parameters, and lives only at {@link POLICY_KEY}. */
export interface PolicyDeclaration {
  /** A space's policy. */
  readonly type: 'policy'
}

/** The policy in the registry; wire form `['p']`. */
export const policyType: ObjectType<PolicyDeclaration, SpacePolicy> = {
  name: 'policy',
  code: 'p',
  encode: () => ['p'],
  decode(enc) {
    if (enc.length !== 1) throw new SteadError('malformed', 'policy declaration is [p]')
    return { type: 'policy' }
  },
  validateOp: validatePolicyOp,
  create: () => new SpacePolicy(),
  restore: (_d, snap) => SpacePolicy.fromSnapshot(snap as [number, Everyone, Array<[string, Role]>]),
  hasInvariants: () => false,
  ordered: true,
  onlyAt: POLICY_KEY,
  mustBeSafe: () => true,
}
