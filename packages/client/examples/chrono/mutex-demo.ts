/**
 * Byzantine-tolerant mutual exclusion, runnable: `npx stead-relay dev
 * --relays 4` in one terminal, `npm run example:mutex` in another. Three
 * members take turns on a printer twice each; the printer's owner lets each
 * in only on a proof it checks with the relays' keys alone. Then a member
 * tries to get in with a proof it made up, and is refused.
 */
import { isSteadError } from '@stead/core'
import { ChronoMutex, GuardedResource } from './mutex.ts'
import { clusterTrust, connect } from './connect.ts'

const clients = await connect(3)
const trust = await clusterTrust()
const rules = { resource: `printer-${Date.now().toString(36)}`, members: clients.map((c) => c.authorId) }
const spaces = await Promise.all(clients.map((c) => c.space('example-mutex')))
const members = spaces.map((s, i) => new ChronoMutex(s, rules, rules.members[i] as string, trust))
const printer = new GuardedResource(trust, rules)
const name = (author: string): string => `member ${rules.members.indexOf(author) + 1}`
console.log(`${members.length} members share ${rules.resource}; the owner trusts only the ${trust.cluster.relayKeys.length} relays' keys (f = ${trust.cluster.f})\n`)

const started = Date.now()
const ms = (): string => `${String(Date.now() - started).padStart(5)} ms`
await Promise.all(
  members.map(async (m, i) => {
    for (let turn = 1; turn <= 2; turn++) {
      const proof = await m.acquire({ timeoutMs: 30_000 })
      const who = await printer.enter(proof)
      console.log(`${ms()}  ${name(who.author)} prints (request at stable index ${who.index}; proof: its request, ${proof.replies.length} replies, ${proof.releases.length} releases, each with ${proof.request.certificate.signatures.length} relay signatures)`)
      await new Promise((r) => setTimeout(r, 50))
      printer.exit(who)
      await m.release()
      console.log(`${ms()}  member ${i + 1} released`)
    }
  }),
)

// A member that makes a proof up: its request, and no one else's reply.
const cheat = members[0] as ChronoMutex
const proof = await cheat.acquire({ timeoutMs: 30_000 })
await cheat.release()
try {
  await printer.enter({ ...proof, replies: [], releases: [] })
  console.log('\na made-up proof got in: this is a bug')
  process.exitCode = 1
} catch (err) {
  if (!isSteadError(err)) throw err
  console.log(`\na made-up proof is refused: ${err.message}`)
}
for (const m of members) m.close()
await Promise.all(clients.map((c) => c.close()))
