import { useOperations } from '../demo-context.ts'
import type { Operation } from '../operations.ts'

const STATE_TEXT: Record<Operation['state'], string> = {
  pending: 'pending',
  stored: 'stored locally',
  held: 'held back',
  stable: 'stable',
  committed: 'committed',
  rejected: 'rejected',
  failed: 'failed',
}

/** What became of each of this tab's operations: pending → stored → stable, or pending → committed / rejected (reason). */
export function OperationsLog() {
  const ops = useOperations()
  return (
    <section className="panel operations" data-testid="operations">
      <h2>Your operations</h2>
      {ops.length === 0 ? <p className="explain">Nothing yet. Deposit, withdraw or transfer above.</p> : null}
      <ol className="ops">
        {ops.map((op) => (
          <li key={op.id} className={`op op-${op.state}`} data-testid="op" data-state={op.state} data-reason={op.reason ?? ''} data-label={op.label}>
            <span className="op-kind">{op.safe ? 'safe' : 'regular'}</span>
            <span className="op-label">{op.label}</span>
            <span className="op-state" data-testid="op-state">
              {STATE_TEXT[op.state]}
              {op.state === 'rejected' || op.state === 'failed' || op.state === 'held' ? `: ${op.reason ?? '?'}` : ''}
              {op.state === 'committed' && op.index !== undefined ? ` @${op.index}` : ''}
            </span>
            <span className="op-latency" title={op.safe ? 'from the call to the relays\' decision' : 'from the call to stored on this device'}>
              {op.latency !== undefined ? `${op.safe ? 'decided' : 'stored'} in ${Math.round(op.latency)} ms` : ''}
            </span>
            {op.detail ? <span className="op-detail">{op.detail}</span> : null}
          </li>
        ))}
      </ol>
    </section>
  )
}
