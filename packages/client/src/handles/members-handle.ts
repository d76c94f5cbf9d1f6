import { MAX_MEMBERS, SteadError, validatePolicyOp, type Everyone, type PolicyOp, type PolicyValue, type Role, type SpacePolicy } from '@stead/core'
import { Handle, guarded } from './handles.ts'
import type { SafeResult, WaitOptions } from '../types.ts'

export type { Everyone, PolicyValue, Role } from '@stead/core'

const ROLES: readonly Role[] = ['admin', 'writer', 'reader']
const EVERYONE: readonly Everyone[] = ['none', 'reader', 'writer']

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
    return this.roleOf(this.host.authorId())
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

  /** @internal Creates the policy (see `client.createSpace`). */
  create(op: PolicyOp, options?: WaitOptions): Promise<SafeResult> {
    return this.change(op, options)
  }

  private change(op: PolicyOp, options?: WaitOptions): Promise<SafeResult> {
    return this.send(op, { ...options, safe: true }) as Promise<SafeResult>
  }
}

function valueOf(policy: SpacePolicy | undefined): PolicyValue | undefined {
  return policy?.created ? policy.value() : undefined
}
