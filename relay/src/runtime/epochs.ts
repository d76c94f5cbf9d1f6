import { decodeEpochChange } from '@stead/core'
import { clusterInEpoch, type ClusterConfig } from '../process/config.ts'
import type { Kv } from '../store/kv.ts'
import { RelayStore } from '../store/store.ts'

/** The epoch a relay's store is in, and the cluster as it stands there: what the host builds the relay for. */
export interface StoredEpoch {
  /** The file's settings with the epoch's committee (the file's own in epoch 0). */
  readonly cluster: ClusterConfig
  /** Undefined in epoch 0. */
  readonly epoch: { readonly epoch: number; readonly startRound: number } | undefined
}

/**
 * The epoch a store is in: the latest epoch certificate it keeps (the
 * relay wrote it at the end of the epoch before, see EpochHandOver), or
 * the cluster file's epoch 0. The store's own certificates are trusted
 * here: this relay checked each signature as it gathered them.
 */
export function storedEpoch(kv: Kv, file: ClusterConfig): StoredEpoch {
  const last = RelayStore.epochChain(kv).at(-1)
  if (!last) return { cluster: file, epoch: undefined }
  const change = decodeEpochChange(last.change)
  return { cluster: clusterInEpoch(file, change.next), epoch: { epoch: change.epoch, startRound: change.startRound } }
}
