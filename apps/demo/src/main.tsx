import { StrictMode, Suspense, use } from 'react'
import { createRoot } from 'react-dom/client'
import { createClient, type Space, type SteadClient } from '@stead/client'
import { SteadProvider } from '@stead/react'
import { App } from './App.tsx'
import { BootError } from './components/BootError.tsx'
import { readConfig } from './config.ts'
import { DemoContext, type Demo } from './demo-context.ts'
import { OperationLog } from './operations.ts'
import './styles.css'

const config = readConfig()
const log = new OperationLog()

// One client per page, created outside React (StrictMode renders twice). Pages of
// this origin with the same database share it: one leads, the others follow it.
// It opens the space's local replica without waiting for any relay.
// With ?peers=1 pages also sync directly (libp2p, loaded only then).
const peersPromise = config.peers ? import('@stead/client/peers').then((m) => m.libp2pPeers({ dial: config.dial })) : Promise.resolve(undefined)
const clientPromise: Promise<SteadClient> = peersPromise.then((peers) =>
  createClient({
    relays: [...config.relays],
    database: config.database,
    ...(config.cluster ? { cluster: config.cluster } : {}),
    ...(peers ? { peers } : {}),
  }),
)
const spacePromise: Promise<Space> = clientPromise.then((client) => {
  // Handy in the console, and for the e2e tests' diagnostics.
  Object.assign(window, { stead: client })
  return client.space(config.space)
})
void spacePromise.then((space) => log.follow(space))
const demoPromise: Promise<Demo> = clientPromise.then((client) => ({ config, log, client }))

function Ready() {
  const space = use(spacePromise)
  const demo = use(demoPromise)
  return (
    <SteadProvider space={space}>
      <DemoContext.Provider value={demo}>
        <App />
      </DemoContext.Provider>
    </SteadProvider>
  )
}

createRoot(document.getElementById('root') as HTMLElement).render(
  <StrictMode>
    <BootError>
      <Suspense fallback={<div className="boot" data-testid="booting">Opening the local replica…</div>}>
        <Ready />
      </Suspense>
    </BootError>
  </StrictMode>,
)
