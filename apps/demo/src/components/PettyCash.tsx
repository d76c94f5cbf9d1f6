import { useState } from 'react'
import { usePresence, useBoundedCounter } from '@stead/react'
import { POOL } from '@stead/client'
import { CASH, CASH_KEY } from '../accounts.ts'
import { parseAmount, useDemo } from '../demo-context.ts'
import { Value } from './Value.tsx'

/**
 * Petty cash: a Bounded Counter kept between 0 and 500. Each user spends and
 * tops up from rights it holds, with no round trip; rights move between users
 * in the background (asks and grants, no consensus), and the table shows who
 * holds how many.
 */
export function PettyCash() {
  const { value, stable, rightsToDecrement, rightsToIncrement, handle } = useBoundedCounter(CASH_KEY, CASH)
  const { log, client } = useDemo()
  const { others } = usePresence()
  const [amountText, setAmountText] = useState('5')
  const amount = parseAmount(amountText)
  const nameOf = (author: string): string => {
    if (author === client.authorId) return 'you'
    if (author === POOL) return 'pool (unclaimed)'
    const state = others.find((p) => p.author === author)?.state as { name?: unknown } | undefined
    return typeof state?.name === 'string' ? state.name : `${author.slice(0, 8)}…`
  }
  const spend = () => {
    if (amount !== null) void log.track(`spend ${amount} of petty cash`, false, () => handle.decrement(amount))
  }
  const topUp = () => {
    if (amount !== null) void log.track(`top up petty cash by ${amount}`, false, () => handle.increment(amount))
  }
  return (
    <article className="card cash" data-testid="petty-cash">
      <header>
        <h3>Petty cash (0 to 500)</h3>
        <span className="hint">a Bounded Counter: rights, not consensus</span>
      </header>
      <div className="values">
        <Value label="prospective" kind="prospective" value={value} testId="cash-prospective" />
        <Value label="stable" kind="stable" value={stable} testId="cash-stable" />
      </div>
      <p className="hint" data-testid="cash-rights">
        you may spend {rightsToDecrement} and top up {rightsToIncrement} without asking anyone
      </p>
      <table className="rights" data-testid="cash-holders">
        <thead>
          <tr>
            <th>holds rights</th>
            <th>to spend</th>
            <th>to top up</th>
          </tr>
        </thead>
        <tbody>
          {handle.holders().map((h) => (
            <tr key={h.author} data-testid="cash-holder">
              <td>{nameOf(h.author)}</td>
              <td>{h.toDecrement}</td>
              <td>{h.toIncrement}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <div className="row">
        <input aria-label="amount of petty cash" data-testid="cash-amount" inputMode="numeric" value={amountText} onChange={(e) => setAmountText(e.target.value)} />
        <button data-testid="cash-spend" disabled={amount === null} onClick={spend} title="within your rights: local, no round trip; beyond them: rights are claimed or asked for first">
          Spend
        </button>
        <button data-testid="cash-top-up" disabled={amount === null} onClick={topUp} title="spends rights to top up (the distance to 500), and gives you as many rights to spend">
          Top up
        </button>
      </div>
    </article>
  )
}
