/**
 * Imported first by the mesh: libp2p 3 calls `Promise.withResolvers`, which
 * Node 20 lacks, so it is added before any libp2p module loads.
 */
import { installPromiseWithResolvers } from '@stead/core/node'

installPromiseWithResolvers()
