/**
 * The live spaces each user started, counted by the cluster: a space is
 * charged to the user of the first envelope the committed order puts in it
 * (its starter), moves to whoever else creates its policy, and is freed
 * when its policy deletes it. The count changes
 * only with the audit, so every correct relay holds the same count at the
 * same commit and makes the same choice (`admits`), however many relays a
 * user's devices submit to, and whatever a Byzantine relay's blocks carry.
 *
 * The starters of live spaces travel with the state that rebuilds the
 * count: each space's snapshot record and each checkpoint's manifest.
 * Spaces the cluster file lists, and those its spaceCreators start (keys
 * the operator trusts), are charged to nobody.
 */
export class SpaceQuota {
  /** Live spaces a user may hold: the cluster's spacesPerUser. */
  readonly perUser: number
  /** Space → the user it is charged to, for live spaces only. */
  private readonly starters = new Map<string, string>()
  /** User → live spaces charged to them (never 0: a user at 0 is not listed). */
  private readonly live = new Map<string, number>()

  constructor(perUser: number) {
    if (!Number.isSafeInteger(perUser) || perUser < 1) throw new RangeError(`spacesPerUser must be a whole number of at least 1, not ${perUser}`)
    this.perUser = perUser
  }

  /** Live spaces charged to `user`. */
  held(user: string): number {
    return this.live.get(user) ?? 0
  }

  /** Whether `user` may start one more space. */
  admits(user: string): boolean {
    return this.held(user) < this.perUser
  }

  /** The user `space` is charged to, undefined for a deleted space or one charged to nobody. */
  starterOf(space: string): string | undefined {
    return this.starters.get(space)
  }

  /** `space` starts, charged to `user` (who must be admitted). */
  start(space: string, user: string): void {
    if (this.starters.has(space)) throw new Error(`space ${space} was started twice`)
    const held = this.held(user)
    if (held >= this.perUser) throw new Error(`user ${user} holds ${held} spaces, the most a user may`)
    this.starters.set(space, user)
    this.live.set(user, held + 1)
  }

  /** `space` was deleted (or handed to a user charged nothing): its starter may start another. */
  free(space: string): void {
    const user = this.starters.get(space)
    if (user === undefined) return
    this.starters.delete(space)
    this.uncharge(user, space)
  }

  /**
   * Another user than its starter created `space`'s policy (an open space
   * without one lets anybody): the space is charged to them from now on,
   * even past their quota (they start no more then), since its starter
   * could never delete it. Each live space stays charged to exactly one
   * user, so two keys cannot make spaces charged to nobody.
   */
  transfer(space: string, user: string): void {
    const from = this.starters.get(space)
    if (from === undefined || from === user) return
    this.uncharge(from, space)
    this.starters.set(space, user)
    this.live.set(user, this.held(user) + 1)
  }

  private uncharge(user: string, space: string): void {
    const held = this.held(user) - 1
    if (held < 0) throw new Error(`user ${user} held no space, yet ${space} was charged to them`)
    if (held === 0) this.live.delete(user)
    else this.live.set(user, held)
  }

  /** A live space as a snapshot record or a checkpoint's manifest holds it (it was admitted when it started). */
  restore(space: string, user: string): void {
    if (this.starters.has(space)) throw new Error(`space ${space} was restored twice`)
    this.starters.set(space, user)
    this.live.set(user, this.held(user) + 1)
  }

  /** Forgets every count (the relay starts over from a checkpoint). */
  clear(): void {
    this.starters.clear()
    this.live.clear()
  }
}
