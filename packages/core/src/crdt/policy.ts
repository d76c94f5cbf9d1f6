import { encode } from '../codec.ts'
import { SteadError } from '../errors.ts'
import { OK, invalid, isSafeInt, violates, type ApplyResult, type Crdt, type ObjectType, type OpContext } from './types.ts'

/** The key of a space's policy object: who administers, writes and reads the space. */
export const POLICY_KEY = '$policy'

/** What a member may do: admins change the policy and write, writers write, readers read (everyone with a role reads). */
export type Role = 'admin' | 'writer' | 'reader'

/** What anybody may do in a space, member or not. */
export type Everyone = 'none' | 'reader' | 'writer'

/** Every role, strongest first. */
export const ROLES: readonly Role[] = ['admin', 'writer', 'reader']
/** What anybody may be let do, least first. */
export const EVERYONE: readonly Everyone[] = ['none', 'reader', 'writer']

/** Members one policy names at most: every replica keeps them all in memory. */
export const MAX_MEMBERS = 10_000
/** Open invitations one policy holds at most. */
export const MAX_INVITATIONS = 1_000
/** Uses one invitation may allow at most (0 is unlimited). */
export const MAX_INVITATION_USES = 10_000
/** Revoked devices a policy holds at most. */
export const MAX_REVOKED_DEVICES = 10_000

/** The most history entries a retention may name (about a billion): past it, keep everything (0). */
export const MAX_RETENTION_ENTRIES = 1_000_000_000
/** The most days a retention may name (about a hundred years): past it, keep everything (0). */
export const MAX_RETENTION_DAYS = 36_500

/** A user id's length at most (an author id is 16 characters). */
const MAX_USER_CHARS = 64

/**
 * A policy operation, always a safe update (the stable order decides):
 * - `['i', [[user, role], ...], everyone]` creates the policy of a space
 *   that has none (at least one admin);
 * - `['r', user, role | null]` gives a user a role, or takes it away;
 * - `['e', everyone]` sets what anybody may do;
 * - `['n', key, role, expires, uses, t]` opens an invitation: whoever holds
 *   the secret key of `key` (an Ed25519 public key, hex) may take `role`,
 *   until `expires` (ms since the epoch, 0: never), `uses` times (0: any
 *   number); `t` is when the admin made it (its clock, ms);
 * - `['x', key]` closes an invitation;
 * - `['j', key, t, sig]` redeems an invitation (anybody): `sig` is the
 *   invitation key's signature over {@link redeemBytes} for the redeeming
 *   user and `t`, its clock when it redeemed (ms); the role goes to the
 *   user (a device's user: see DeviceCertificate);
 * - `['v', user, device]` revokes a device of a user (its author id): its
 *   envelopes are refused from here on, whatever their certificate says
 *   (the user itself, or an admin, may);
 * - `['k', entries, days]` sets how much stable history relays keep of the
 *   space's objects (see Retention; 0 and 0: all of it);
 * - `['d']` deletes the space: every object's state goes where the stable
 *   order puts it, and every later update of the space is refused; its name
 *   stays taken (a device offline meanwhile cannot bring the old data back
 *   under a new space), and relays drop its histories and commits when
 *   they next compact it;
 * - `['u']` withdraws the op made under the same context (only `inverse` makes it).
 * Users are author ids (see Envelope.userId: a device acts for its user).
 */
export type PolicyOp =
  | readonly ['i', ReadonlyArray<readonly [string, Role]>, Everyone]
  | readonly ['r', string, Role | null]
  | readonly ['e', Everyone]
  | readonly ['n', string, Role, number, number, number]
  | readonly ['x', string]
  | RedeemOp
  | readonly ['v', string, string]
  | readonly ['k', number, number]
  | readonly ['d']
  | readonly ['u']

/** An open invitation, as a policy holds it. */
export interface Invitation {
  /** The role it gives. */
  readonly role: Role
  /** Until when it may be redeemed (ms since the epoch; 0: no end). */
  readonly expires: number
  /** Uses left (0: any number). */
  readonly left: number
}

/**
 * What a redemption's signature covers: the space, the redeeming author
 * (so nobody who sees the redemption can take it for themselves), the
 * invitation's key and the redeemer's time.
 */
export function redeemBytes(space: string, author: string, key: string, t: number): Uint8Array {
  return encode(['stead/redeem/v1', space, author, key, t])
}

/** A redemption op (see PolicyOp). */
export type RedeemOp = readonly ['j', string, number, Uint8Array]

/** Whether a (valid) policy op is a redemption, which anybody may make. */
export function isRedemption(op: unknown): op is RedeemOp {
  return Array.isArray(op) && op[0] === 'j'
}

/**
 * How far a redemption's time may lie before the space's latest invitation
 * time and still count. Redeemers' clocks differ (relays admit a time
 * within their clock window, 5 minutes either way by default), and the
 * order follows arrival, not signing: two people joining at once must not
 * turn each other away. Past it, a redemption is backdated.
 */
export const REDEEM_SLACK_MS = 10 * 60_000

/** The roles from weakest to strongest: a redemption never lowers one. */
const RANK: Record<Role, number> = { reader: 0, writer: 1, admin: 2 }

/**
 * How much stable history relays keep of a space's objects (older entries
 * go when a relay next compacts the space; an object's value in force at
 * the limit stays, unless the object was deleted). Both limits apply; 0
 * means no limit of that kind.
 */
export interface Retention {
  /** Entries of the space's stable history kept: those of its last `entries` stable indexes. */
  readonly entries: number
  /** Days of stable history kept, by the relays' clocks (to within an hour). */
  readonly days: number
}

/** A space's policy as plain data. */
export interface PolicyValue {
  /** Each member's role, by user id. */
  readonly members: Readonly<Record<string, Role>>
  /** What anybody may do. */
  readonly everyone: Everyone
  /** Devices revoked, by user id: their author ids. */
  readonly revokedDevices: Readonly<Record<string, readonly string[]>>
  /** How much stable history relays keep (0 and 0: all of it). */
  readonly retention: Retention
  /** Whether an admin deleted the space: it holds nothing and takes no more updates. */
  readonly deleted: boolean
}

function userProblem(u: unknown): string | null {
  return typeof u === 'string' && u.length >= 1 && u.length <= MAX_USER_CHARS ? null : `a user id is a string of 1 to ${MAX_USER_CHARS} characters`
}

function keyProblem(k: unknown): string | null {
  return typeof k === 'string' && /^[0-9a-f]{64}$/.test(k) ? null : 'an invitation key is 64 lowercase hex characters (an Ed25519 public key)'
}

function timeProblem(t: unknown, what: string): string | null {
  return isSafeInt(t) && t >= 0 ? null : `${what} must be a whole number of ms since the epoch`
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
    case 'n':
      if (op.length !== 6) return "policy invitation is ['n', key, role, expires, uses, t]"
      return keyProblem(op[1]) ?? (ROLES.includes(op[2] as Role) ? null : `role must be one of ${ROLES.join(', ')}`) ?? timeProblem(op[3], 'expires') ?? (isSafeInt(op[4]) && op[4] >= 0 && op[4] <= MAX_INVITATION_USES ? null : `uses must be a whole number from 0 (any) to ${MAX_INVITATION_USES}`) ?? timeProblem(op[5], 't')
    case 'x':
      return op.length === 2 ? keyProblem(op[1]) : "policy invitation close is ['x', key]"
    case 'j':
      if (op.length !== 4) return "policy redemption is ['j', key, t, signature]"
      return keyProblem(op[1]) ?? timeProblem(op[2], 't') ?? (op[3] instanceof Uint8Array && op[3].length === 64 ? null : 'a redemption signature is 64 bytes')
    case 'v':
      if (op.length !== 3) return "policy device revocation is ['v', user, device]"
      return userProblem(op[1]) ?? userProblem(op[2]) ?? (op[1] === op[2] ? 'a user is not a device of its own: revoke a device key, not the user key' : null)
    case 'k':
      if (op.length !== 3) return "policy retention is ['k', entries, days]"
      if (!isSafeInt(op[1]) || op[1] < 0 || op[1] > MAX_RETENTION_ENTRIES) return `retention entries is a whole number from 0 (no limit) to ${MAX_RETENTION_ENTRIES}`
      return isSafeInt(op[2]) && op[2] >= 0 && op[2] <= MAX_RETENTION_DAYS ? null : `retention days is a whole number from 0 (no limit) to ${MAX_RETENTION_DAYS}`
    case 'd':
      return op.length === 1 ? null : "policy space deletion is ['d']"
    default:
      return "policy op must be ['i', ...], ['r', user, role], ['e', everyone], ['n', ...], ['x', key], ['j', ...], ['v', user, device], ['k', entries, days] or ['d']"
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
  private invitations = new Map<string, Invitation>()
  /** Revoked devices, as revocationKey(user, device). */
  private revoked = new Set<string>()
  private keep: Retention = NO_RETENTION
  private gone = false
  /**
   * The latest time an admin opened an invitation or a redemption was
   * taken at: a redemption may not be older by more than REDEEM_SLACK_MS
   * (a redeemer cannot backdate its time far past what the space has
   * seen, to use an expired invitation).
   */
  private stamp = 0
  /** Ops applied: what merge compares (stable states are prefixes of one order). */
  private version = 0
  /** State before each op applied with `apply`, by tag, so that its `['u']` can restore it. */
  private readonly before = new Map<string, State>()

  /** Whether the policy exists (an init committed). */
  get created(): boolean {
    return this.members.size > 0
  }

  value(): PolicyValue {
    const revokedDevices: Record<string, string[]> = {}
    for (const [user, device] of [...this.revoked].sort().map(revocationOf)) (revokedDevices[user] ??= []).push(device)
    return { members: Object.fromEntries([...this.members].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))), everyone: this.everyoneMay, revokedDevices, retention: this.keep, deleted: this.gone }
  }

  /** Whether an admin deleted the space (see PolicyOp `['d']`). */
  get deleted(): boolean {
    return this.gone
  }

  /** How much stable history relays keep. */
  get retention(): Retention {
    return this.keep
  }

  /** Whether `device` (an author id) was revoked as a device of `user`. */
  isRevoked(user: string, device: string): boolean {
    return user !== device && this.revoked.has(revocationKey(user, device))
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

  /** Whether a key that proved to be `reader` (its author id and the user it acts for; undefined: nobody) may read the space: not a revoked device. */
  mayReadAs(reader: { readonly userId: string; readonly authorId: string } | undefined): boolean {
    if (reader && this.isRevoked(reader.userId, reader.authorId)) return false
    return this.mayRead(reader?.userId)
  }

  /** Whether `user` may change the policy. */
  mayAdminister(user: string): boolean {
    return this.members.get(user) === 'admin'
  }

  /** The open invitations by key. */
  openInvitations(): ReadonlyMap<string, Invitation> {
    return this.invitations
  }

  /** Why a redemption at time `t` of invitation `key` is refused here, or null (its signature is the audit's to check). */
  private redemptionProblem(key: string, t: number): string | null {
    const inv = this.invitations.get(key)
    if (!inv) return `no open invitation ${key.slice(0, 8)}: never made, closed, or used up`
    if (inv.expires !== 0 && t > inv.expires) return `invitation ${key.slice(0, 8)} expired at ${inv.expires}, redeemed at ${t}`
    if (t < this.stamp - REDEEM_SLACK_MS) return `redeemed at ${t}, more than ${REDEEM_SLACK_MS / 60_000} minutes before the space's latest invitation time ${this.stamp}`
    return null
  }

  tryApply(op: PolicyOp, ctx: OpContext): ApplyResult {
    if (op[0] === 'u') {
      this.apply(op, ctx)
      return OK
    }
    const problem = validatePolicyOp(op)
    if (problem) return invalid(problem)
    if (this.gone) return { ok: false, reason: 'unauthorized', detail: 'the space was deleted' }
    if (op[0] === 'i' && this.created) return invalid('the space has a policy already')
    if (op[0] !== 'i' && !this.created) return invalid('the space has no policy yet')
    if (op[0] === 'i' && !op[1].some(([, role]) => role === 'admin')) return violates('a policy needs an admin')
    if (op[0] === 'r' && this.members.get(op[1]) === 'admin' && op[2] !== 'admin' && this.admins() === 1) return violates(`${op[1]} is the last admin`)
    if (op[0] === 'r' && op[2] !== null && !this.members.has(op[1]) && this.members.size >= MAX_MEMBERS) return violates(`a policy names at most ${MAX_MEMBERS} members`)
    if (op[0] === 'n' && !this.invitations.has(op[1]) && this.invitations.size >= MAX_INVITATIONS) return violates(`a policy holds at most ${MAX_INVITATIONS} open invitations`)
    if (op[0] === 'x' && !this.invitations.has(op[1])) return invalid(`no open invitation ${op[1].slice(0, 8)}`)
    if (op[0] === 'v' && !this.revoked.has(revocationKey(op[1], op[2])) && this.revoked.size >= MAX_REVOKED_DEVICES) return violates(`a policy holds at most ${MAX_REVOKED_DEVICES} revoked devices`)
    if (op[0] === 'j') {
      const problem = this.redemptionProblem(op[1], op[2])
      if (problem) return { ok: false, reason: 'unauthorized', detail: problem }
      if (!this.members.has(userOf(ctx)) && this.members.size >= MAX_MEMBERS) return violates(`a policy names at most ${MAX_MEMBERS} members`)
    }
    this.change(op, userOf(ctx))
    return OK
  }

  apply(op: PolicyOp, ctx: OpContext): void {
    if (op[0] === 'u') {
      const saved = this.before.get(ctx.tag)
      if (!saved) return
      this.before.delete(ctx.tag)
      this.restoreState(saved)
      this.version++
      return
    }
    this.before.set(ctx.tag, this.state())
    this.change(op, userOf(ctx))
  }

  /** Exact only right after `op` (see the class comment: replicas rebuild ordered objects instead). */
  inverse(): PolicyOp {
    return ['u']
  }

  merge(other: SpacePolicy): void {
    if (other.version <= this.version) return
    this.restoreState(other.state())
    this.version = other.version
  }

  clone(): this {
    const copy = new SpacePolicy()
    copy.restoreState(this.state())
    copy.version = this.version
    return copy as this
  }

  /** `[version, everyone, [[user, role], ...], [[key, role, expires, left], ...], stamp, [[user, device], ...], [entries, days, deleted]]`, each list sorted, the last two only when not empty and not the default. */
  snapshot(): PolicySnapshot {
    const byId = <T>(a: [string, T], b: [string, T]): number => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)
    const members = [...this.members].sort(byId)
    const invitations = [...this.invitations].sort(byId).map(([k, i]): [string, Role, number, number] => [k, i.role, i.expires, i.left])
    // Without revocations, retention or deletion, the form snapshots had before them (so a state hash is what it was).
    const revoked = [...this.revoked].sort().map(revocationOf)
    const plain = this.keep === NO_RETENTION && !this.gone
    if (plain && revoked.length === 0) return [this.version, this.everyoneMay, members, invitations, this.stamp]
    if (plain) return [this.version, this.everyoneMay, members, invitations, this.stamp, revoked]
    return [this.version, this.everyoneMay, members, invitations, this.stamp, revoked, [this.keep.entries, this.keep.days, this.gone ? 1 : 0]]
  }

  /** Rebuilds a policy from its `snapshot()` (trusted input). */
  static fromSnapshot(snap: PolicySnapshot): SpacePolicy {
    const p = new SpacePolicy()
    p.version = snap[0]
    const [entries, days, deleted] = snap[6] ?? [0, 0, 0]
    p.restoreState({ members: new Map(snap[2]), everyone: snap[1], invitations: new Map(snap[3].map(([k, role, expires, left]) => [k, { role, expires, left }])), stamp: snap[4], revoked: new Set((snap[5] ?? []).map(([u, d]) => revocationKey(u, d))), keep: retentionOf(entries, days), gone: deleted === 1 })
    return p
  }

  private state(): State {
    return { members: new Map(this.members), everyone: this.everyoneMay, invitations: new Map(this.invitations), stamp: this.stamp, revoked: new Set(this.revoked), keep: this.keep, gone: this.gone }
  }

  private restoreState(s: State): void {
    this.members = new Map(s.members)
    this.everyoneMay = s.everyone
    this.invitations = new Map(s.invitations)
    this.stamp = s.stamp
    this.revoked = new Set(s.revoked)
    this.keep = s.keep
    this.gone = s.gone
  }

  invariantsHold(): boolean {
    return !this.created || this.admins() > 0
  }

  private admins(): number {
    let n = 0
    for (const role of this.members.values()) if (role === 'admin') n++
    return n
  }

  private change(op: Exclude<PolicyOp, readonly ['u']>, author: string): void {
    this.version++
    switch (op[0]) {
      case 'i':
        this.members = new Map(op[1])
        this.everyoneMay = op[2]
        return
      case 'r':
        if (op[2] === null) this.members.delete(op[1])
        else this.members.set(op[1], op[2])
        return
      case 'e':
        this.everyoneMay = op[1]
        return
      case 'n':
        this.invitations.set(op[1], { role: op[2], expires: op[3], left: op[4] })
        this.stamp = Math.max(this.stamp, op[5])
        return
      case 'x':
        this.invitations.delete(op[1])
        return
      case 'j': {
        const inv = this.invitations.get(op[1])
        if (!inv) return // prospectively: an invitation this replica has not seen yet
        const had = this.members.get(author)
        if (had === undefined || RANK[inv.role] > RANK[had]) this.members.set(author, inv.role)
        if (inv.left === 1) this.invitations.delete(op[1])
        else if (inv.left > 1) this.invitations.set(op[1], { ...inv, left: inv.left - 1 })
        this.stamp = Math.max(this.stamp, op[2])
        return
      }
      case 'v':
        this.revoked.add(revocationKey(op[1], op[2]))
        return
      case 'k':
        this.keep = retentionOf(op[1], op[2])
        return
      case 'd':
        this.gone = true
        return
    }
  }
}

/** Whom an op is made for: the user of the envelope's author (see OpContext.user). */
function userOf(ctx: OpContext): string {
  return ctx.user ?? ctx.replica
}

function revocationKey(user: string, device: string): string {
  return `${user}\u0000${device}`
}

function revocationOf(key: string): [string, string] {
  const at = key.indexOf('\u0000')
  return [key.slice(0, at), key.slice(at + 1)]
}

/** Keep all history: the default, one object so that `snapshot` can tell it by identity. */
const NO_RETENTION: Retention = Object.freeze({ entries: 0, days: 0 })

function retentionOf(entries: number, days: number): Retention {
  return entries === 0 && days === 0 ? NO_RETENTION : Object.freeze({ entries, days })
}

/** Whether an op (a valid policy op) deletes its space. */
export function isSpaceDeletion(op: unknown): boolean {
  return Array.isArray(op) && op.length === 1 && op[0] === 'd'
}

type State = { members: Map<string, Role>; everyone: Everyone; invitations: Map<string, Invitation>; stamp: number; revoked: Set<string>; keep: Retention; gone: boolean }

/** A policy's snapshot (see SpacePolicy.snapshot). */
export type PolicySnapshot = [number, Everyone, Array<[string, Role]>, Array<[string, Role, number, number]>, number, Array<[string, string]>?, [number, number, number]?]

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
  restore: (_d, snap) => SpacePolicy.fromSnapshot(snap as PolicySnapshot),
  hasInvariants: () => false,
  ordered: true,
  onlyAt: POLICY_KEY,
  mustBeSafe: () => true,
}

/**
 * Why `policy` refuses an update of object `key` (op `op`) of `space`
 * signed by `signer` (an envelope: its user and its author, the device),
 * or undefined when it allows it. Anybody may redeem an invitation: its
 * signature is the caller's to check (see redeemBytes).
 */
export function policyProblem(policy: SpacePolicy, signer: { readonly userId: string; readonly authorId: string }, space: string, key: string, op: unknown): string | undefined {
  const { userId: user, authorId: device } = signer
  if (policy.deleted) return `space ${space} was deleted by an admin`
  if (policy.isRevoked(user, device)) return `device ${device} of ${user} was revoked in space ${space}`
  if (key !== POLICY_KEY) return policy.mayWrite(user) ? undefined : `${user} may not write to space ${space}`
  if (isRedemption(op) || policy.mayAdminister(user)) return undefined
  // A user revokes its own devices with its user key, not from a device (which may be the one lost).
  if (Array.isArray(op) && op[0] === 'v' && op[1] === user) return device === user ? undefined : `device ${device} may not revoke devices of ${user}: only its user key (or an admin) may`
  return `${user} may not change the policy of space ${space}`
}
