import { useStatus } from '@stead/react'
import { useDemo } from '../demo-context.ts'
import { People } from './People.tsx'

/** Who and where this tab is, whether it reaches the relays, and how much is still pending. */
export function StatusBar() {
  const { config } = useDemo()
  const status = useStatus()
  const connected = status.relays.filter((r) => r.connected).length
  return (
    <header className="statusbar">
      <h1>
        Stead <span className="muted">demo</span>
      </h1>
      <span className="who">
        <b data-testid="user">{config.user}</b> in space <code data-testid="space">{config.space}</code>
      </span>
      <span className={`pill ${status.online ? 'good' : 'bad'}`} data-testid="status-online" data-online={status.online ? 'true' : 'false'}>
        {status.online ? 'online' : 'offline'} · {connected}/{status.relays.length} relays
      </span>
      <span className="pill" title="local updates not yet decided by the relays">
        pending <b data-testid="status-pending">{status.pending}</b>
      </span>
      <People />
      <span className="pill" title="position in the stable (committed) history">
        stable index <b data-testid="status-stable-index">{status.stableIndex}</b>
      </span>
      {status.problem ? (
        <p className="problem" data-testid="status-problem">
          {status.problem}
        </p>
      ) : null}
    </header>
  )
}
