import { auditStateHash, decodeAttestation, encodeAttestation, type AuditState, type WaitingEnvelope } from '@stead/core'
import { nodeCrypto } from '@stead/core/node'

/**
 * What a Byzantine relay could serve as a snapshot: the true state with one
 * more unit on its first counter, a state no correct relay attests. With
 * 'forge' the attestation is rewritten to vouch for that state (the relay
 * signs it with its own key, and only the f+1 others can contradict it);
 * with 'mismatch' the true attestation is kept, so the state fails its hash.
 */
export function forgeSnapshot<E extends WaitingEnvelope>(attestation: Uint8Array, state: AuditState<E>, how: 'forge' | 'mismatch'): { attestation: Uint8Array; state: AuditState<E> } {
  const objects = state.objects.map((o, i) => (i === 0 ? ([o[0], o[1], (o[2] as Array<[string, number, number]>).map(([r, p, n]) => [r, p + 1, n])] as const) : o))
  const forged = { ...state, objects } as AuditState<E>
  if (how === 'mismatch') return { attestation, state: forged }
  return { attestation: encodeAttestation({ ...decodeAttestation(attestation), stateHash: auditStateHash((b) => nodeCrypto.sha256(b), forged) }), state: forged }
}
