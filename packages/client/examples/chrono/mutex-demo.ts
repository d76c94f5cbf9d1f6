/**
 * Byzantine-tolerant mutual exclusion, runnable: `npx stead-relay dev
 * --relays 4` in one terminal, `npm run example:mutex` in another. Three
 * members take turns on a printer twice each; the printer's owner lets each
 * in only on a proof it checks with the relays' keys alone: the relays'
 * clock votes on each message, with no wait for the BFT order. Then a
 * member tries to get in with a proof it made up, and is refused.
 */
import { isSteadError } from '@stead/core'
import { ChronoMutex, GuardedResource } from './mutex.ts'
import { clusterTrust, connect } from './connect.ts'

const clients = await connect(3)
const trust = await clusterTrust()
const rules = { resource: `printer-${Date.now().toString(36)}`, members: clients.map((c) => c.authorId) }
const spaces = await Promise.all(clients.map((c) => c.space('example-mutex')))
const members = spaces.map((s, i) => new ChronoMutex(s, rules, clients[i] as { authorId: string; secretKey: Uint8Array }, trust))
const printer = new GuardedResource(trust, rules)
const name = (author: string): string => `member ${rules.members.indexOf(author) + 1}`
console.log(`${members.length} members share ${rules.resource}; the owner trusts only the ${trust.cluster.relayKeys.length} relays' keys (f = ${trust.cluster.f}; here taken from the first relay on first use)\n`)

const started = Date.now()
const ms = (): string => `${String(Date.now() - started).padStart(5)} ms`
await Promise.all(
  members.map(async (m, i) => {
    for (let turn = 1; turn <= 2; turn++) {
      const proof = await m.acquire({ timeoutMs: 30_000 })
      // The owner checks the proof, and that the member presenting it wrote the request: it signs a fresh challenge.
      const nonce = printer.challenge()
      const who = await printer.enter(proof, nonce, await m.present(nonce))
      console.log(
        `${ms()}  ${name(who.author)} prints (request ${who.id.slice(0, 8)}, clock weight ${who.clock.weight}; proof: its request, ${proof.replies.length} replies, ${proof.releases.length} releases, each with ${proof.request.certificate.signatures.length} relay votes)`,
      )
      await new Promise((r) => setTimeout(r, 50))
      // The printer is free from here. The next member gets in once the relays certified the release,
      // which may be before this member hears back, so that line can follow the next print.
      printer.exit(who)
      console.log(`${ms()}  ${name(who.author)} done printing`)
      await m.release()
      console.log(`${ms()}  member ${i + 1}'s release is certified`)
    }
  }),
)

// A member that makes a proof up (its request, and no one else's reply), and one that presents another's proof.
const [cheat, thief] = members as [ChronoMutex, ChronoMutex]
const proof = await cheat.acquire({ timeoutMs: 30_000 })
const attempts: Array<[string, () => Promise<unknown>]> = [
  ['a made-up proof', async () => {
    const nonce = printer.challenge()
    return printer.enter({ ...proof, replies: [], releases: [] }, nonce, await cheat.present(nonce))
  }],
  ["another member's proof", async () => {
    // The thief asks too (and gives up waiting at once), so it has a request of its own to sign for.
    await thief.acquire({ timeoutMs: 0 }).catch(() => undefined)
    const nonce = printer.challenge()
    return printer.enter(proof, nonce, await thief.present(nonce))
  }],
]
console.log('')
for (const [what, attempt] of attempts) {
  try {
    await attempt()
    console.log(`${what} got in: this is a bug`)
    process.exitCode = 1
  } catch (err) {
    if (!isSteadError(err)) throw err
    console.log(`${what} is refused: ${err.message}`)
  }
}
await cheat.release()
await thief.release()
for (const m of members) m.close()
await Promise.all(clients.map((c) => c.close()))
