import { parseArgs } from 'node:util'
import { loadCluster, loadIdentity } from '@stead/relay'
import { PlainRelay } from './server.ts'

/** `plain-relay --config cluster.json --id r1 --key key.json`: one plain baseline relay process. */
const { values } = parseArgs({ options: { config: { type: 'string' }, id: { type: 'string' }, key: { type: 'string' } } })
if (!values.config || !values.id || !values.key) {
  console.error('plain-relay needs --config, --id and --key')
  process.exit(2)
}
const cluster = loadCluster(values.config)
const me = cluster.relays.findIndex((r) => r.id === values.id)
if (me < 0) {
  console.error(`relay ${values.id} is not in ${values.config}`)
  process.exit(2)
}
const relay = new PlainRelay({ me, secretKey: loadIdentity(values.key).secretKey, relays: cluster.relays, f: cluster.f })
await relay.start()
console.log(JSON.stringify({ msg: 'plain relay ready', relay: values.id }))
const shutdown = () => void relay.stop().then(() => process.exit(0))
process.once('SIGINT', shutdown)
process.once('SIGTERM', shutdown)
if (process.channel) process.once('disconnect', shutdown)
