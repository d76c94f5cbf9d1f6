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

/** Longest pause between polls of a relay that does not answer: each failed request is a red line in the console. */
const MAX_DOWN_INTERVAL_MS = 15_000

export function useRelayStatuses(relays: readonly string[], space: string, intervalMs = 1000): ReadonlyMap<string, RelayPoll> {
  const [polls, setPolls] = useState<ReadonlyMap<string, RelayPoll>>(() => new Map(relays.map((r) => [r, { state: 'loading' }])))
  useEffect(() => {
    let stopped = false
    const latest = new Map<string, RelayPoll>(relays.map((r) => [r, { state: 'loading' }]))
    // A relay that is down is asked again after a pause that doubles with each failure.
    const backoff = new Map<string, { failures: number; nextAt: number }>()
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
    const pollDue = async (relay: string): Promise<void> => {
      const now = Date.now()
      // With no network the browser would fail every request (and print each): say so instead of asking.
      if (!navigator.onLine) {
        latest.set(relay, { state: 'down', error: 'offline', at: now })
        return
      }
      const b = backoff.get(relay)
      if (b && now < b.nextAt) return
      const poll = await pollOne(relay)
      latest.set(relay, poll)
      if (poll.state === 'up') backoff.delete(relay)
      else {
        const failures = (b?.failures ?? 0) + 1
        backoff.set(relay, { failures, nextAt: Date.now() + Math.min(MAX_DOWN_INTERVAL_MS, intervalMs * 2 ** failures) })
      }
    }
    const tick = async () => {
      await Promise.all(relays.map(pollDue))
      if (!stopped) setPolls(new Map(latest))
    }
    // Back online: ask every relay at once.
    const online = () => {
      backoff.clear()
      void tick()
    }
    window.addEventListener('online', online)
    void tick()
    const timer = setInterval(() => void tick(), intervalMs)
    return () => {
      stopped = true
      clearInterval(timer)
      window.removeEventListener('online', online)
    }
  }, [relays, space, intervalMs])
  return polls
}
