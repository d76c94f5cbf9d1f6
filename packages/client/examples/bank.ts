/**
 * A Node client against a local cluster: run `npx stead-relay dev --relays 4`
 * in one terminal, then `npm run example:bank` in another
 * (RELAYS=ws://host:port,... to point it elsewhere). It deposits, withdraws
 * safely (one withdrawal too many, to show a rejection) and prints the
 * prospective and stable balance as they change, and what the prospective
 * balance holds back because it would go below zero.
 */
import { createClient, memoryStorage } from '@stead/client'

const relays = (process.env.RELAYS ?? 'ws://127.0.0.1:7401,ws://127.0.0.1:7402,ws://127.0.0.1:7403,ws://127.0.0.1:7404').split(',')
const client = await createClient({ relays, storage: memoryStorage() })
const bank = await client.space('example-bank')
const account = bank.counter(`acct:${client.authorId}`, { min: 0 })
const show = (what: string): void => {
  const held = account.pending.map((p) => (p.amount < 0 ? `withdrawal of ${-p.amount}` : `deposit of ${p.amount}`)).join(', ')
  console.log(`${what.padEnd(34)} prospective ${String(account.value).padStart(4)}   stable ${String(account.stable).padStart(4)}${held ? `   held back: ${held}` : ''}`)
}

let lastProblem: string | undefined
client.onStatus((s) => {
  if (s.problem && s.problem !== lastProblem && s.problem !== 'closed') console.error(`status: ${s.problem}`)
  lastProblem = s.problem
})
process.stdout.write('connecting')
const started = Date.now()
while (!client.status.online) {
  if (Date.now() - started > 20_000) {
    console.error(`\nno quorum of relays reachable at ${relays.join(', ')}; is \`npx stead-relay dev --relays 4\` running?`)
    process.exit(1)
  }
  process.stdout.write('.')
  await new Promise((r) => setTimeout(r, 250))
}
console.log(` online: ${client.status.relays.filter((r) => r.connected).length} relays\n`)

await account.increment(100)
show('deposit 100 (regular)')
await bank.flush()
while (account.stable !== 100) await new Promise((r) => setTimeout(r, 10))
show('...committed')

const first = account.decrement(70, { safe: true })
const second = account.decrement(50, { safe: true })
show('withdraw 70 and 50 (safe)')
for (const [what, p] of [['withdraw 70', first], ['withdraw 50', second]] as const) {
  const r = await p
  show(`${what}: ${r.status === 'committed' ? `committed at ${r.index}` : `rejected (${r.reason})`}`)
}
console.log('\nstable history:', account.history().map((h) => `${h.index}→${String(h.value)}`).join('  '))
console.log('quorum read:', await bank.readStable(account.key, { quorum: true }))
await client.close()
