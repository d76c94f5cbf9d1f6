import { useState } from 'react'
import { useCounter } from '@stead/react'
import { BALANCE } from '../accounts.ts'
import { parseAmount, useDemo } from '../demo-context.ts'
import { Value } from './Value.tsx'

/** One account: its prospective and stable balance, a regular deposit and a safe withdrawal. */
export function AccountCard({ account }: { account: { id: string; key: string; name: string } }) {
  const { value, stable, pending, handle } = useCounter(account.key, BALANCE)
  const { log } = useDemo()
  const [amountText, setAmountText] = useState('10')
  const amount = parseAmount(amountText)
  const settling = value !== stable || pending.length > 0

  const deposit = () => {
    if (amount !== null) void log.track(`deposit ${amount} to ${account.name}`, false, () => handle.increment(amount))
  }
  const withdraw = () => {
    if (amount !== null) void log.track(`withdraw ${amount} from ${account.name}`, true, () => handle.decrement(amount, { safe: true }))
  }

  return (
    <article className={`card account${settling ? ' settling' : ''}`} data-testid={`account-${account.id}`}>
      <header>
        <h3>{account.name}</h3>
        <span className="hint" data-testid={`settling-${account.id}`}>
          {settling ? 'settling…' : 'settled'}
        </span>
      </header>
      <div className="values">
        <Value label="prospective" kind="prospective" value={value} testId={`balance-${account.id}-prospective`} />
        <Value label="stable" kind="stable" value={stable} testId={`balance-${account.id}-stable`} />
      </div>
      {pending.length > 0 ? (
        <p className="hint" data-testid={`held-${account.id}`} title="withdrawals that would take the balance below 0 where they stand: the relays' order decides them">
          held back: {pending.map((p) => `${p.amount < 0 ? `withdrawal of ${-p.amount}` : `deposit of ${p.amount}`}${p.own ? '' : ' (another user)'}`).join(', ')}
        </p>
      ) : null}
      <div className="row">
        <input
          aria-label={`amount for ${account.name}`}
          data-testid={`amount-${account.id}`}
          inputMode="numeric"
          value={amountText}
          onChange={(e) => setAmountText(e.target.value)}
        />
        <button data-testid={`deposit-${account.id}`} disabled={amount === null} onClick={deposit} title="regular update: applies at once, never needs coordination">
          Deposit
        </button>
        <button data-testid={`withdraw-${account.id}`} disabled={amount === null} onClick={withdraw} className="safe" title="safe update: resolves once the relays ordered it; rejected if the balance would go below 0">
          Withdraw (safe)
        </button>
      </div>
    </article>
  )
}
