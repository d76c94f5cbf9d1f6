import { decode, encode, expect, toHex } from '@stead/core'

/** Bytes of history one read takes at most. */
export const MAX_HISTORY_BYTES = 64 * 1024 * 1024

/** A history page's entries as relays sign them: [index, value] pairs, newest first. */
export function decodePage(entries: Uint8Array): Array<[number, unknown]> {
  return expect.array(decode(entries, MAX_HISTORY_BYTES), 'history', 1000) as Array<[number, unknown]>
}

/**
 * The longest run of newest entries that `quorum` relays' pages share
 * (each relay counted once), with no next page; undefined when not even
 * the newest entry is shared by that many. Relays prune a space's old
 * history as its retention says, each when it compacts, so their pages
 * may end at different places: every entry of the run is vouched for by
 * `quorum` relays (at least one correct when `quorum` is f+1), and the
 * history past it is gone from some of them.
 */
export function sharedNewest(answers: ReadonlyArray<{ readonly relay: number; readonly entries: Uint8Array }>, quorum: number): { pairs: Array<[number, unknown]>; bytes: number; more: false } | undefined {
  const pages = new Map<number, Uint8Array[]>()
  for (const a of answers) {
    if (pages.has(a.relay)) continue
    try {
      pages.set(a.relay, decodePage(a.entries).map((pair) => encode(pair)))
    } catch {
      // A page that does not decode vouches for nothing.
    }
  }
  let candidates = [...pages.values()]
  let shared = 0
  for (;;) {
    const next = new Map<string, Uint8Array[][]>()
    for (const page of candidates) {
      const entry = page[shared]
      if (!entry) continue
      const id = toHex(entry)
      next.set(id, [...(next.get(id) ?? []), page])
    }
    const agreed = [...next.values()].find((group) => group.length >= quorum)
    if (!agreed) break
    candidates = agreed
    shared++
  }
  if (shared === 0) return undefined
  const run = (candidates[0] as Uint8Array[]).slice(0, shared)
  return { pairs: run.map((bytes) => decode(bytes) as [number, unknown]), bytes: run.reduce((n, b) => n + b.length, 0), more: false }
}
