import { SteadError } from '@stead/core'
import type { RelayLink } from '../transport/transport.ts'
import type { SpacePort } from '../space/space-port.ts'

/**
 * The relays that said this client may not read the space (`unreadable`),
 * with what they said, until they serve it again. Not faulty: a correct
 * relay says it when the policy at its stable position does not name this
 * client, and a lagging one may say it of a grant it has not applied yet.
 * Once f+1 distinct relays said it (one of them is correct), the app hears
 * it once: an `unauthorized` error through the space's onError, and the
 * space's status shows the problem until fewer say it.
 */
export class UnreadableRelays {
  private readonly said = new Map<RelayLink, string>()
  /** The problem shown (and the error sent once) since f+1 relays said it; undefined otherwise. */
  private refused: string | undefined
  private readonly space: SpacePort
  private readonly f: () => number

  constructor(space: SpacePort, f: () => number) {
    this.space = space
    this.f = f
  }

  has(link: RelayLink): boolean {
    return this.said.has(link)
  }

  /** `link`'s relay says the space is unreadable. */
  add(link: RelayLink, detail: string): void {
    this.said.set(link, detail)
    this.judge()
  }

  /** `link`'s relay serves the space again: the policy lets this client read it now. */
  remove(link: RelayLink): void {
    if (this.said.delete(link)) this.judge()
  }

  /** The committee changed: what its relays say is asked again on each new session. */
  forgetAll(): void {
    this.said.clear()
    this.judge()
  }

  private judge(): void {
    const relays = new Set<number>()
    for (const link of this.said.keys()) if (!link.faulty && link.provenRelay !== undefined) relays.add(link.provenRelay)
    const { space } = this
    if (relays.size > this.f()) {
      if (this.refused !== undefined) return
      const said = [...new Set(this.said.values())][0] ?? ''
      this.refused = `this client may not read space ${space.space}: ${relays.size} relays say its policy does not let user ${space.authorId} read it${said ? ` (${said})` : ''}; an admin of the space can grant a role (space.members.grant) or invite this user (space.members.invite, then client.join)`
      space.setProblem(this.refused)
      space.emitError(new SteadError('unauthorized', this.refused))
    } else if (this.refused !== undefined) {
      if (space.status.problem === this.refused) space.setProblem(undefined)
      this.refused = undefined
    }
  }
}
