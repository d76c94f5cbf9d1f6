/**
 * Polls each relay's public GET /v1/status (CORS-enabled JSON) for the
 * cluster panel. This is display only: nothing the app trusts comes from
 * here, and the SDK never reads it.
 */
import { useEffect, useState } from 'react'
import { httpBase } from './config.ts'

export interface RelayReport {
  readonly relay: number | string
  readonly round: number
  readonly committedRound: number
  readonly commits: number
  readonly lastCommitAt: string | null
  readonly peers?: { connected: number; total: number }
  readonly spaces?: Record<string, { stableIndex: number }>
  readonly byzantine?: string | null
}

export type RelayPoll = { readonly state: 'loading' } | { readonly state: 'up'; readonly report: RelayReport; readonly at: number } | { readonly state: 'down'; readonly error: string; readonly at: number }

export function useRelayStatuses(relays: readonly string[], intervalMs = 1000): ReadonlyMap<string, RelayPoll> {
  const [polls, setPolls] = useState<ReadonlyMap<string, RelayPoll>>(() => new Map(relays.map((r) => [r, { state: 'loading' }])))
  useEffect(() => {
    let stopped = false
    const pollOne = async (relay: string): Promise<RelayPoll> => {
      try {
        const res = await fetch(`${httpBase(relay)}/v1/status`, { signal: AbortSignal.timeout(Math.max(500, intervalMs - 100)), cache: 'no-store' })
        if (!res.ok) return { state: 'down', error: `HTTP ${res.status}`, at: Date.now() }
        return { state: 'up', report: (await res.json()) as RelayReport, at: Date.now() }
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
  }, [relays, intervalMs])
  return polls
}
