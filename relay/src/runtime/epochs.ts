import { decodeEpochChange, followEpochs, type EpochCertificate, type EpochCommittee, type FollowedEpoch } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'
import { clusterInEpoch, relayCommitteeOf, type ClusterConfig } from '../process/config.ts'
import type { Kv } from '../store/kv.ts'
import { keepEpochCertificates, storedChain } from '../store/store.ts'

/** The epoch a relay's store is in, and the cluster as it stands there: what the host builds the relay for. */
export interface StoredEpoch {
  /** The file's settings with the epoch's committee (the file's own in epoch 0). */
  readonly cluster: ClusterConfig
  /** Undefined in epoch 0. */
  readonly epoch: { readonly epoch: number; readonly startRound: number; readonly stateDigest: Uint8Array } | undefined
}

/**
 * The epoch a store is in: the latest epoch certificate it keeps (the
 * relay wrote it at the end of the epoch before, see EpochHandOver), or
 * the cluster file's epoch 0. The store's own certificates are trusted
 * here: this relay checked each signature as it gathered them.
 */
export function storedEpoch(kv: Kv, file: ClusterConfig): StoredEpoch {
  const last = storedChain(kv).at(-1)
  if (!last) return { cluster: file, epoch: undefined }
  const change = decodeEpochChange(last.change)
  return { cluster: clusterInEpoch(file, change.next), epoch: { epoch: change.epoch, startRound: change.startRound, stateDigest: change.stateDigest } }
}

/**
 * Takes the certificates of a chain that lead past the epoch a store is
 * in (a relay joining the committee of a later epoch, or one that was
 * down or behind while its peers moved on), after checking each from the
 * committee of the store's epoch: signed by 2f+1 of the committee before
 * it (followEpochs). Returns the epoch the store is in then; a chain that
 * leads nowhere new changes nothing.
 *
 * @throws SteadError as followEpochs for a certificate that fails (nothing is kept then).
 */
export async function adoptEpochChain(kv: Kv, file: ClusterConfig, certs: readonly EpochCertificate[]): Promise<FollowedEpoch> {
  const from = epochCommitteeOf(storedEpoch(kv, file))
  const followed = await followEpochs(nodeCrypto, from, certs)
  await keepEpochCertificates(kv, followedCertificates(certs, from.epoch, followed.epoch))
  return followed
}

/** The epoch a store is in and its committee: what certificates of later epochs are checked from. */
export function epochCommitteeOf(stored: StoredEpoch): EpochCommittee {
  return { epoch: stored.epoch?.epoch ?? 0, committee: relayCommitteeOf(stored.cluster) }
}

/** Of a chain followEpochs went along from epoch `from` to `to`, the certificate it took for each epoch after `from`: the first one of it. */
export function followedCertificates(certs: readonly EpochCertificate[], from: number, to: number): Map<number, EpochCertificate> {
  const kept = new Map<number, EpochCertificate>()
  for (const c of certs) {
    const { epoch } = decodeEpochChange(c.change)
    if (epoch > from && epoch <= to && !kept.has(epoch)) kept.set(epoch, c)
  }
  return kept
}
