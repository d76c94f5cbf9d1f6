import { useCounter, type CounterHandle, type CounterState } from '@stead/react'
import { POLL, pollKey } from '../accounts.ts'
import { useDemo } from '../demo-context.ts'

interface Tally {
  readonly option: { readonly id: string; readonly label: string }
  readonly counter: CounterState<CounterHandle>
}

function PollOption({ option, counter, total }: Tally & { total: number }) {
  const { log } = useDemo()
  const share = total > 0 ? Math.round((counter.stable / total) * 100) : 0
  return (
    <li className="poll-option" data-testid={`poll-${option.id}`}>
      <button data-testid={`vote-${option.id}`} onClick={() => void log.track(`vote ${option.label}`, false, () => counter.handle.increment(1))}>
        Vote
      </button>
      <span className="poll-label">{option.label}</span>
      <span className="bar" title={`${share}% of the stable tally`}>
        <span className="bar-fill" style={{ width: `${share}%` }} />
      </span>
      <span className="poll-count" title="stable tally">
        <b data-testid={`votes-${option.id}-stable`}>{counter.stable}</b>
      </span>
      <span className="hint" title="prospective, including votes not yet stable">
        prospective <span data-testid={`votes-${option.id}-prospective`}>{counter.value}</span>
      </span>
    </li>
  )
}

/** A poll whose votes are counters; the tally and the leader come from the stable values. */
export function Poll() {
  // POLL.options is a constant list, so these hooks always run in the same order.
  const tallies: Tally[] = POLL.options.map((option) => ({ option, counter: useCounter(pollKey(option.id)) }))
  const total = tallies.reduce((s, t) => s + t.counter.stable, 0)
  const best = Math.max(0, ...tallies.map((t) => t.counter.stable))
  const leaders = tallies.filter((t) => best > 0 && t.counter.stable === best).map((t) => t.option.label)
  return (
    <section className="panel poll" data-testid="poll">
      <h2>Poll</h2>
      <p className="question">{POLL.question}</p>
      <ol className="poll-options">
        {tallies.map((t) => (
          <PollOption key={t.option.id} {...t} total={total} />
        ))}
      </ol>
      <p className="explain" data-testid="poll-leader">
        Stable tally: {total} vote{total === 1 ? '' : 's'}
        {leaders.length ? `; leading: ${leaders.join(' and ')}` : ''}
      </p>
    </section>
  )
}
