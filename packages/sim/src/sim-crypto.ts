import { toHex } from '@stead/core'
import { nodeCrypto, signSync, verifySync } from '@stead/core/node'
import type { SyncCrypto } from '@stead/relay/consensus'

/**
 * The simulated relays' crypto, which counts what it signs and verifies (a
 * run reports both), with an optional verification memo shared by every
 * relay: the verdict is a pure function of (key, message, signature), and
 * without it every relay re-verifying the same blocks dominates the run time.
 * The counts live here because this is the one place that sees every call.
 * (Arrow properties, not methods: callers may pass the functions on alone or
 * spread the object.)
 */
export class CountingCrypto implements SyncCrypto {
  readonly counts = { signs: 0, verifies: 0 }
  private readonly memo: Map<string, boolean> | undefined

  constructor(memoize: boolean) {
    this.memo = memoize ? new Map() : undefined
  }

  readonly sign = (secretKey: Uint8Array, message: Uint8Array): Uint8Array => {
    this.counts.signs++
    return signSync(secretKey, message)
  }

  readonly sha256 = (d: Uint8Array): Uint8Array => nodeCrypto.sha256(d)

  readonly verify = (pk: Uint8Array, msg: Uint8Array, sig: Uint8Array): boolean => {
    this.counts.verifies++
    const memo = this.memo
    if (!memo) return verifySync(pk, msg, sig)
    if (pk.length !== 32 || sig.length !== 64) return false
    const key = toHex(pk) + toHex(sig) + toHex(nodeCrypto.sha256(msg))
    let v = memo.get(key)
    if (v === undefined) {
      v = verifySync(pk, msg, sig)
      if (memo.size > 200_000) memo.clear()
      memo.set(key, v)
    }
    return v
  }
}
