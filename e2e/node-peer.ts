/**
 * A Node client with peer sync, as its own process, for the peer specs:
 *
 *   node --conditions=@stead/source --import tsx e2e/node-peer.ts '<options JSON>'
 *
 * Options: `relays`, `space`, `cluster` (the descriptor to pin; without it
 * the client trusts the relays on first use), `dial` (peer multiaddrs),
 * `create` (create the space, anybody may write: peers then share it with
 * whoever its policy lets read, relays or not). It prints one JSON line
 * when ready (`{ ready, addresses, userId }`) and answers one JSON line per
 * command read from stdin: `{ "op": "inc", "n": 5 }` adds to the demo's
 * main balance; `{ "op": "state" }` says the balance, stable and
 * prospective, the stable index and the links. Errors the client reports
 * are printed as `{ "error": ... }` lines.
 */
import { createInterface } from 'node:readline'
import { createClient, memoryStorage } from '@stead/client'
import { libp2pPeers } from '@stead/client/peers'

interface Options {
  readonly relays: string[]
  readonly space: string
  readonly cluster?: unknown
  readonly dial?: string[]
  readonly create?: boolean
}

const options = JSON.parse(process.argv[2] ?? '{}') as Options
const print = (line: unknown): void => void process.stdout.write(`${JSON.stringify(line)}\n`)

const peers = libp2pPeers({ dial: options.dial ?? [] })
const client = await createClient({ relays: options.relays, storage: memoryStorage(), peers, ...(options.cluster ? { cluster: options.cluster } : {}) })
client.onError((err) => print({ error: `${err.reason}: ${err.message}` }))
const space = options.create ? await client.createSpace(options.space, { everyone: 'writer' }) : await client.space(options.space)
// The demo's main account: a balance that never goes below zero.
const main = space.counter('acct:main', { min: 0 })

/** Waits until the client listens (it announces those addresses to the relays, and the spec hands them to new peers). */
async function listening(): Promise<string[]> {
  for (;;) {
    const addresses = peers.addresses()
    if (addresses.length > 0) return addresses
    await new Promise((r) => setTimeout(r, 20))
  }
}

print({ ready: true, addresses: await listening(), userId: client.userId })

for await (const line of createInterface({ input: process.stdin })) {
  let command: { op?: string; n?: number }
  try {
    command = JSON.parse(line) as typeof command
  } catch {
    print({ error: `not JSON: ${line}` })
    continue
  }
  if (command.op === 'inc') {
    try {
      await main.increment(command.n ?? 1)
      print({ ok: true })
    } catch (err) {
      print({ ok: false, failed: String(err) })
    }
  } else if (command.op === 'state') {
    print({ value: main.value, stable: main.stable, stableIndex: space.status.stableIndex, online: space.status.online, peers: client.peers?.peers ?? 0, exchanging: client.peers?.exchanging ?? 0 })
  } else if (command.op === 'close') {
    await client.close()
    print({ closed: true })
    process.exit(0)
  } else print({ error: `unknown op ${String(command.op)}` })
}
// Its driver went away (stdin closed) without saying close: nothing else would end the listeners.
await client.close().catch(() => undefined)
process.exit(0)
