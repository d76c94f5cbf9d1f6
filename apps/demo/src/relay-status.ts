/**
 * Polls each relay's public GET /v1/status and the space's signed head (CORS-enabled JSON) for the
 * cluster panel. This is display only: nothing the app trusts comes from
 * here, and the SDK never reads it.
 */
import { useEffect, useState } from 'react'
import { httpBase } from './config.ts'

export interface RelayReport {
  /** The relay's name in the cluster file, e.g. "r1" (older relays: its index). */
  readonly relay: number | string
  readonly round: number
  readonly committedRound: number
  readonly commits: number
  readonly lastCommitAt: string | null
  /** The peers it is connected to, by name. */
  readonly peers?: { connected: readonly string[]; total: number }
  /** The demo space's stable index at this relay (its signed head). */
  readonly stableIndex?: number
  readonly byzantine?: string | null
}

export type RelayPoll = { readonly state: 'loading' } | { readonly state: 'up'; readonly report: RelayReport; readonly at: number } | { readonly state: 'down'; readonly error: string; readonly at: number }

export function useRelayStatuses(relays: readonly string[], space: string, intervalMs = 1000): ReadonlyMap<string, RelayPoll> {
  const [polls, setPolls] = useState<ReadonlyMap<string, RelayPoll>>(() => new Map(relays.map((r) => [r, { state: 'loading' }])))
  useEffect(() => {
    let stopped = false
    const pollOne = async (relay: string): Promise<RelayPoll> => {
      try {
        const get = (path: string) => fetch(`${httpBase(relay)}${path}`, { signal: AbortSignal.timeout(Math.max(500, intervalMs - 100)), cache: 'no-store' })
        const [res, head] = await Promise.all([get('/v1/status'), get(`/v1/spaces/${encodeURIComponent(space)}/head`)])
        if (!res.ok) return { state: 'down', error: `HTTP ${res.status}`, at: Date.now() }
        const report = (await res.json()) as RelayReport
        const stableIndex = head.ok ? ((await head.json()) as { index?: number }).index : undefined
        return { state: 'up', report: stableIndex === undefined ? report : { ...report, stableIndex }, at: Date.now() }
      } catch (err) {
        return { state: 'down', error: err instanceof Error ? err.name : 'error', at: Date.now() }
      }
    }
    const tick = async () => {
      const results = await Promise.all(relays.map(async (r) => [r, await pollOne(r)] as const))
      if (!stopped) setPolls(new Map(results))
    }
    void tick()
    const timer = setInterval(() => void tick(), intervalMs)
    return () => {
      stopped = true
      clearInterval(timer)
    }
  }, [relays, space, intervalMs])
  return polls
}
