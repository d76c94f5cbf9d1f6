import { useEffect, useState } from 'react'
import { useStatus } from '@stead/react'
import { useDemo, useOperations } from '../demo-context.ts'
import { useRelayStatuses, type RelayPoll } from '../relay-status.ts'

function ago(iso: string | null, now: number): string {
  if (!iso) return 'never'
  const s = Math.max(0, (now - Date.parse(iso)) / 1000)
  return s < 1 ? 'just now' : s < 60 ? `${Math.round(s)} s ago` : `${Math.round(s / 60)} min ago`
}

function useNow(ms = 1000): number {
  const [now, setNow] = useState(() => Date.now())
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms)
    return () => clearInterval(t)
  }, [ms])
  return now
}

function median(xs: readonly number[]): number | null {
  if (xs.length === 0) return null
  const s = [...xs].sort((a, b) => a - b)
  const mid = Math.floor(s.length / 2)
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2
}

/** Each relay's consensus progress (its /v1/status), this client's connection to it, and recent safe-update latencies. */
export function ClusterPanel() {
  const { config, log } = useDemo()
  const status = useStatus()
  const polls = useRelayStatuses(config.relays, config.space)
  useOperations() // re-render when an operation settles
  const now = useNow()
  const latencies = log.safeLatencies()
  const med = median(latencies)

  return (
    <section className="panel cluster" data-testid="cluster">
      <h2>Cluster</h2>
      <table>
        <thead>
          <tr>
            <th>relay</th>
            <th>this client</th>
            <th>round</th>
            <th>committed</th>
            <th>last commit</th>
            <th>space index</th>
          </tr>
        </thead>
        <tbody>
          {config.relays.map((url, i) => {
            const conn = status.relays.find((r) => r.url === url) ?? status.relays[i]
            const poll: RelayPoll = polls.get(url) ?? { state: 'loading' }
            const report = poll.state === 'up' ? poll.report : null
            const connText = conn?.faulty ? `faulty: ${conn.faulty}` : conn?.connected ? 'connected' : 'disconnected'
            return (
              <tr key={url} data-testid="relay-row" data-url={url} data-connected={conn?.connected ? 'true' : 'false'} data-up={poll.state === 'up' ? 'true' : 'false'}>
                <td title={url}>
                  {conn?.relay ?? (report ? (typeof report.relay === 'number' ? `#${report.relay}` : report.relay) : url.replace(/^wss?:\/\//, ''))}
                  {report?.byzantine ? <span className="badge bad" title="mode the relay reports for itself (demo only)"> byzantine: {report.byzantine}</span> : null}
                </td>
                <td className={conn?.faulty ? 'bad' : conn?.connected ? 'good' : 'muted'}>{connText}</td>
                {report ? (
                  <>
                    <td>{report.round}</td>
                    <td>{report.committedRound}</td>
                    <td>{ago(report.lastCommitAt, now)}</td>
                    <td>{report.stableIndex ?? '–'}</td>
                  </>
                ) : (
                  <td colSpan={4} className="muted">
                    {poll.state === 'down' ? 'unreachable' : '…'}
                  </td>
                )}
              </tr>
            )
          })}
        </tbody>
      </table>
      <p className="explain" data-testid="latencies">
        Recent safe updates: {latencies.length ? latencies.map((l) => `${Math.round(l)} ms`).join(', ') : 'none yet'}
        {med !== null ? ` (median ${Math.round(med)} ms)` : ''}
      </p>
    </section>
  )
}
