import { EVERYONE, MAX_INVITATION_USES, MAX_MEMBERS, ROLES, SteadError, redeemBytes, toHex, validatePolicyOp, type Everyone, type PolicyOp, type PolicyValue, type Role, type SpacePolicy } from '@stead/core'
import { Handle, guarded } from './handles.ts'
import { INVITATION_PREFIX, decodeInvitation, encodeInvitation } from './invitation-token.ts'
import type { SafeResult, WaitOptions } from '../types.ts'

export type { Everyone, PolicyValue, Retention, Role } from '@stead/core'


/** An author id: 12 bytes of SHA-256 in base64url (see `SteadClient.userId`). */
const USER_ID = /^[A-Za-z0-9_-]{16}$/

/** What `client.createSpace(name, policy)` takes: user ids by role, and what anybody else may do. */
export interface SpacePolicyInit {
  /** Users who change the policy, write and read (the creator is always one). */
  readonly admins?: readonly string[]
  /** Users who write and read. */
  readonly writers?: readonly string[]
  /** Users who read. */
  readonly readers?: readonly string[]
  /** What anybody else may do: `'none'` (the default), `'reader'` or `'writer'`. */
  readonly everyone?: Everyone
}

/** How long an invitation stays open by default: 7 days. */
const DEFAULT_INVITATION_MS = 7 * 24 * 3_600_000

/** What `space.members.invite` takes, besides the wait's `timeoutMs` and `signal`. */
export interface InviteOptions extends WaitOptions {
  /**
   * How long the invitation may be redeemed, in ms from now (the relays'
   * time, as this client measures it): a positive whole number, or
   * `Infinity` for an invitation that never expires. Default 7 days.
   */
  readonly expiresInMs?: number
  /** How many users may redeem it: 1 (the default) to 10,000, or 0 for any number. */
  readonly uses?: number
}

/** An open invitation of a space, as `space.members.invitations` lists it. */
export interface OpenInvitation {
  /** The invitation's public key (64 hex characters): what `closeInvitation` takes, besides the token. */
  readonly key: string
  /** The role it gives. */
  readonly role: Role
  /** Until when it may be redeemed (ms since the epoch, the relays' time); 0: no end. */
  readonly expires: number
  /** Redemptions left; 0: any number. */
  readonly left: number
}

/** Refuses what is not a user id (an author id), naming the call; a public key is the common mistake. */
export function checkUserId(user: unknown, what: string): string {
  if (typeof user === 'string' && USER_ID.test(user)) return user
  const hint = typeof user === 'string' && /^[0-9a-f]{64}$/i.test(user) ? ' (that looks like a public key: pass the client\'s userId, not its publicKey)' : ''
  throw new SteadError('malformed', `${what}: a user id is a client's userId (16 characters of base64url), got ${JSON.stringify(user)}${hint}`)
}

function checkRole(role: unknown, what: string): Role {
  if (ROLES.includes(role as Role)) return role as Role
  throw new SteadError('malformed', `${what}: a role is one of ${ROLES.join(', ')}, got ${JSON.stringify(role)}`)
}

function checkEveryone(e: unknown, what: string): Everyone {
  if (EVERYONE.includes(e as Everyone)) return e as Everyone
  throw new SteadError('malformed', `${what}: everyone is one of ${EVERYONE.join(', ')}, got ${JSON.stringify(e)}`)
}

/**
 * The op that creates a space's policy from `createSpace`'s argument, or a
 * typed error: the creator is an admin, every user id is well formed and
 * named once, roles and `everyone` are known.
 */
export function initOp(creator: string, given: SpacePolicyInit | undefined): PolicyOp {
  const what = 'createSpace'
  if (given !== undefined && (typeof given !== 'object' || given === null || Array.isArray(given))) {
    throw new SteadError('malformed', `${what}: the policy is an object { admins, writers, readers, everyone }, got ${given === null ? 'null' : Array.isArray(given) ? 'an array' : typeof given}`)
  }
  const policy = given ?? {}
  for (const name of Object.keys(policy)) {
    if (!['admins', 'writers', 'readers', 'everyone'].includes(name)) throw new SteadError('malformed', `${what}: the policy has no field ${name}; it takes admins, writers, readers and everyone`)
  }
  const members = new Map<string, Role>([[creator, 'admin']])
  const lists: Array<[keyof SpacePolicyInit, Role]> = [['admins', 'admin'], ['writers', 'writer'], ['readers', 'reader']]
  for (const [field, role] of lists) {
    const users = policy[field]
    if (users === undefined) continue
    if (!Array.isArray(users)) throw new SteadError('malformed', `${what}: ${field} is an array of user ids, got ${typeof users}`)
    for (const user of users as unknown[]) {
      const id = checkUserId(user, `${what}: ${field}`)
      if (id === creator) {
        // The creator may list itself among the admins; as anything else it would lose the space it creates.
        if (role === 'admin') continue
        throw new SteadError('malformed', `${what}: ${id} is this client, always an admin of the space it creates; do not list it among the ${field}`)
      }
      const had = members.get(id)
      if (had !== undefined) throw new SteadError('malformed', `${what}: ${id} is named twice (as ${had} and as ${role}); give each user one role`)
      members.set(id, role)
    }
  }
  if (members.size > MAX_MEMBERS) throw new SteadError('malformed', `${what}: a policy names at most ${MAX_MEMBERS} members, got ${members.size}`)
  const op: PolicyOp = ['i', [...members], checkEveryone(policy.everyone ?? 'none', what)]
  const problem = validatePolicyOp(op)
  if (problem) throw new SteadError('malformed', `${what}: ${problem}`)
  return op
}

/**
 * A space's members and what they may do: the handle over its policy, the
 * system object at key `$policy` (`space.members`). A policy names users by
 * user id (`client.userId`) with a role, `admin` (changes the policy,
 * writes, reads), `writer` (writes, reads) or `reader` (reads), and says
 * what anybody else may do (`everyone`). A space has none until
 * `client.createSpace` makes one; then every update is checked against the
 * policy in force at its place in the stable order, on every replica.
 *
 * Changes are safe updates (only the stable order may decide them): they
 * show in `value` at once and resolve once decided, `committed`, or
 * `rejected` (`unauthorized` when this client is not an admin in the
 * stable policy by then; `invariant` when the change would leave the space
 * without an admin).
 *
 * Admins also open invitations (`invite`, a token whoever holds may redeem
 * with `client.join`), list them (`invitations`) and close them
 * (`closeInvitation`).
 */
export class MembersHandle extends Handle {
  /**
   * The prospective policy: the stable one with the changes not decided
   * yet on top (this client's at once). Undefined while the space has none.
   */
  get value(): PolicyValue | undefined {
    return valueOf(this.host.prospective(this.key) as SpacePolicy | undefined)
  }

  /** The stable policy: the one in force at the latest stable index, what the audit checks updates against. Undefined while the space has none. */
  get stable(): PolicyValue | undefined {
    return valueOf(this.host.stable(this.key) as SpacePolicy | undefined)
  }

  /** `user`'s role in the prospective policy, if it names the user (see `value.everyone` for what anybody else may do). */
  roleOf(user: string): Role | undefined {
    const p = this.host.prospective(this.key) as SpacePolicy | undefined
    return p?.created ? p.roleOf(user) : undefined
  }

  /** This client's role in the prospective policy (see `roleOf`). */
  get myRole(): Role | undefined {
    return this.roleOf(this.host.userId())
  }

  /**
   * Gives `user` a role, or changes it. A safe update: resolves once the
   * stable order decided it (`rejected` with `unauthorized` if this client
   * is not an admin then, `invariant` if it takes the last admin's role).
   *
   * @param user The user's id (its client's `userId`).
   * @throws SteadError `malformed` (the promise rejects) for a bad user id or role, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  grant(user: string, role: Role, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => this.change(['r', checkUserId(user, 'grant'), checkRole(role, 'grant')], options))
  }

  /**
   * Revokes a device of a user in this space (its `authorId`: a client that
   * acts for the user through `options.deviceCertificate`), e.g. a lost
   * phone: its updates ordered after the revocation are rejected
   * (`unauthorized`) on every replica, whatever its certificate says, and
   * relays stop serving it the space; those ordered before stand. The
   * user's other devices keep their rights. A user revokes its own devices
   * from a client holding its user key (not from a device, which may be the
   * lost one); an admin may revoke anybody's. A safe update, as `grant`.
   *
   * @param device The device's author id (16 characters).
   * @param user Whose device it is; default this client's user.
   * @throws SteadError `malformed` (the promise rejects) for a bad id, or the user's own id as a device; `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  revokeDevice(device: string, user?: string, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => {
      const op: PolicyOp = ['v', checkUserId(user ?? this.host.userId(), 'revokeDevice'), checkUserId(device, 'revokeDevice')]
      const problem = validatePolicyOp(op)
      if (problem) throw new SteadError('malformed', `revokeDevice: ${problem}`)
      return this.change(op, options)
    })
  }

  /**
   * Takes `user`'s role away. Updates the user makes after the revocation
   * in the stable order are rejected (`unauthorized`) on every replica;
   * those ordered before it stand. A safe update, as `grant`.
   *
   * @throws SteadError `malformed` (the promise rejects) for a bad user id, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  revoke(user: string, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => {
      const op: PolicyOp = ['r', user, null]
      // Any id a policy may name can be revoked (one made elsewhere may not be an author id).
      const problem = validatePolicyOp(op)
      if (problem) throw new SteadError('malformed', `revoke: ${problem}`)
      return this.change(op, options)
    })
  }

  /**
   * Sets what anybody may do, member or not: `'none'`, `'reader'` or
   * `'writer'`. A safe update, as `grant`.
   *
   * @throws SteadError `malformed` (the promise rejects) for another value, `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  setEveryone(everyone: Everyone, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => this.change(['e', checkEveryone(everyone, 'setEveryone')], options))
  }

  /**
   * Sets how much stable history the relays keep of this space's objects
   * (what `history` pages read): the entries of the last `entries` stable
   * indexes, and those of the last `days` days; 0 (the default of each) is
   * no limit of that kind, and with both 0 they keep everything. Older
   * entries go when a relay next compacts the space, except each object's
   * value in force at the limit; a deleted object's history goes whole once
   * its deletion is past the limit. Admins only; a safe update, as `grant`.
   *
   * @param retention `{ entries, days }`: whole numbers from 0 to 1,000,000,000 and to 36,500.
   * @throws SteadError `malformed` (the promise rejects) for another value; `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  setRetention(retention: { readonly entries?: number; readonly days?: number }, options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => {
      if (typeof retention !== 'object' || retention === null || Array.isArray(retention)) throw new SteadError('malformed', `setRetention: the retention is an object { entries, days }, got ${retention === null ? 'null' : Array.isArray(retention) ? 'an array' : typeof retention}`)
      for (const name of Object.keys(retention)) {
        if (name !== 'entries' && name !== 'days') throw new SteadError('malformed', `setRetention: no field ${name}; it takes entries and days`)
      }
      const { entries = 0, days = 0 } = retention
      const op: PolicyOp = ['k', entries, days]
      const problem = validatePolicyOp(op)
      if (problem) throw new SteadError('malformed', `setRetention: ${problem}, got ${JSON.stringify({ entries, days })}`)
      return this.change(op, options)
    })
  }

  /**
   * Deletes the space, for good. Where the stable order puts the deletion,
   * every object's state goes (on every replica, this client's too) and
   * from there on every update of the space is refused (`unauthorized`),
   * a new policy included: the name stays taken, so a device that was
   * offline meanwhile cannot bring the old data back. Members may still
   * open it and see that it was deleted (`value.deleted`). Relays drop its
   * histories and stored commits when they next compact it. Admins only;
   * a safe update, as `grant`.
   *
   * @throws SteadError `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  deleteSpace(options?: WaitOptions): Promise<SafeResult> {
    return guarded(() => this.change(['d'], options))
  }

  /**
   * The open invitations of the prospective policy, by key (empty while
   * the space has none). An invitation leaves the list once used up or
   * closed; an expired one stays until closed, but is refused.
   */
  get invitations(): OpenInvitation[] {
    const p = this.host.prospective(this.key) as SpacePolicy | undefined
    if (!p?.created) return []
    return [...p.openInvitations()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([key, i]) => ({ key, role: i.role, expires: i.expires, left: i.left }))
  }

  /**
   * Opens an invitation to this space and resolves with its token, once
   * the stable order committed it: whoever holds the token may become a
   * member with `role` (`client.join(token)`), until it expires or is used
   * up. The token is a secret, like a password: it holds the space's name
   * and the invitation's Ed25519 secret key (`stead-invite:` and base64url
   * of the msgpack `[space, secret]`); the policy holds only the public
   * key. Only admins may invite (a safe update, as `grant`).
   *
   * @param role The role a redeemer gets (a redemption never lowers a role a member has).
   * @param options `expiresInMs` (default 7 days; `Infinity`: never), `uses` (default 1; 0: any number; at most 10,000), and the wait's `timeoutMs` and `signal`.
   * @throws SteadError `malformed` up front for a bad role or option (nothing is sent); if the stable order rejects it, a SteadError with its reason (`unauthorized` when this client is not an admin then, `malformed` when the space has no policy); `timeout` or `aborted` as `options` say (the invitation may still open); {@link ClosedError} after the space closed.
   */
  invite(role: Role, options: InviteOptions = {}): Promise<string> {
    return guarded(async () => {
      checkRole(role, 'invite')
      const { expiresInMs, uses } = checkInviteOptions(options)
      const crypto = this.host.crypto()
      const secret = crypto.generateSecretKey()
      const key = toHex(await crypto.publicKeyOf(secret))
      const t = Math.round(this.host.now())
      const op: PolicyOp = ['n', key, role, expiresInMs === Number.POSITIVE_INFINITY ? 0 : t + expiresInMs, uses, t]
      const problem = validatePolicyOp(op)
      if (problem) throw new SteadError('malformed', `invite: ${problem}`)
      const r = await this.change(op, waitOf(options))
      if (r.status === 'rejected') throw new SteadError(r.reason, `invite: the invitation to space ${this.host.space()} was rejected: ${r.detail}`)
      return encodeInvitation(this.host.space(), secret)
    })
  }

  /**
   * Closes an invitation: nobody may redeem it from its place in the stable
   * order on; those who did before stay members (revoke them). A safe
   * update, as `grant` (`rejected` with `malformed` when no such invitation
   * is open).
   *
   * @param tokenOrKey The invitation's token, or its key (see `invitations`).
   * @throws SteadError `malformed` (the promise rejects) for neither, or a token of another space; `timeout` or `aborted` as `options` say; {@link ClosedError} after the space closed.
   */
  closeInvitation(tokenOrKey: string, options?: WaitOptions): Promise<SafeResult> {
    return guarded(async () => this.change(['x', await this.invitationKey(tokenOrKey)], options))
  }

  /**
   * @internal Redeems the invitation of `secret` (see `client.join`): signed
   * by its key for this client and the relays' time as measured now.
   */
  async redeem(secret: Uint8Array, options?: WaitOptions): Promise<SafeResult> {
    const crypto = this.host.crypto()
    const key = toHex(await crypto.publicKeyOf(secret))
    const t = Math.round(this.host.now())
    const sig = await crypto.sign(secret, redeemBytes(this.host.space(), this.host.userId(), key, t))
    return this.change(['j', key, t, sig], options)
  }

  private async invitationKey(tokenOrKey: string): Promise<string> {
    if (typeof tokenOrKey === 'string' && /^[0-9a-f]{64}$/.test(tokenOrKey)) return tokenOrKey
    if (typeof tokenOrKey !== 'string' || !tokenOrKey.trim().startsWith(INVITATION_PREFIX)) {
      throw new SteadError('malformed', `closeInvitation: give an invitation's token (${INVITATION_PREFIX}…) or its key (64 lowercase hex characters), got ${JSON.stringify(tokenOrKey)}`)
    }
    const { space, secret } = decodeInvitation(tokenOrKey)
    if (space !== this.host.space()) throw new SteadError('malformed', `closeInvitation: that token is an invitation to space ${JSON.stringify(space)}, not ${JSON.stringify(this.host.space())}`)
    return toHex(await this.host.crypto().publicKeyOf(secret))
  }

  /** @internal Creates the policy (see `client.createSpace`). */
  create(op: PolicyOp, options?: WaitOptions): Promise<SafeResult> {
    return this.change(op, options)
  }

  private change(op: PolicyOp, options?: WaitOptions): Promise<SafeResult> {
    return this.send(op, { ...options, safe: true }) as Promise<SafeResult>
  }
}

/** `invite`'s options checked: a typed error names what is wrong. */
function checkInviteOptions(options: unknown): { expiresInMs: number; uses: number } {
  if (typeof options !== 'object' || options === null || Array.isArray(options)) throw new SteadError('malformed', `invite: options are an object { expiresInMs, uses, timeoutMs, signal }, got ${options === null ? 'null' : Array.isArray(options) ? 'an array' : typeof options}`)
  for (const name of Object.keys(options)) {
    if (!['expiresInMs', 'uses', 'timeoutMs', 'signal'].includes(name)) throw new SteadError('malformed', `invite: no option ${name}; it takes expiresInMs, uses, timeoutMs and signal`)
  }
  const { expiresInMs = DEFAULT_INVITATION_MS, uses = 1 } = options as InviteOptions
  if (expiresInMs !== Number.POSITIVE_INFINITY && !(Number.isSafeInteger(expiresInMs) && expiresInMs > 0)) {
    throw new SteadError('malformed', `invite: expiresInMs is a positive whole number of ms, or Infinity for no end, got ${String(expiresInMs)}`)
  }
  if (!Number.isSafeInteger(uses) || uses < 0 || uses > MAX_INVITATION_USES) throw new SteadError('malformed', `invite: uses is a whole number from 1 to ${MAX_INVITATION_USES}, or 0 for any number, got ${String(uses)}`)
  return { expiresInMs, uses }
}

/** The wait's own options out of `invite`'s. */
function waitOf(options: WaitOptions): WaitOptions {
  return { ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}), ...(options.signal !== undefined ? { signal: options.signal } : {}) }
}

function valueOf(policy: SpacePolicy | undefined): PolicyValue | undefined {
  return policy?.created ? policy.value() : undefined
}
