import { useState } from 'react'
import { useSpace } from '@stead/react'
import { ACCOUNTS } from '../accounts.ts'
import { parseAmount, useDemo } from '../demo-context.ts'

/** A safe, atomic transfer: both sides apply in the stable order, or neither does. */
export function TransferForm() {
  const client = useSpace()
  const { log } = useDemo()
  const [from, setFrom] = useState<string>(ACCOUNTS[0].id)
  const [to, setTo] = useState<string>(ACCOUNTS[1].id)
  const [amountText, setAmountText] = useState('25')
  const amount = parseAmount(amountText)
  const source = ACCOUNTS.find((a) => a.id === from)
  const target = ACCOUNTS.find((a) => a.id === to)
  const valid = amount !== null && source !== undefined && target !== undefined && source !== target

  const transfer = () => {
    if (!valid) return
    void log.track(`transfer ${amount} ${source.name} → ${target.name}`, true, () =>
      client.safe((tx) => {
        tx.counter(source.key).decrement(amount)
        tx.counter(target.key).increment(amount)
      }),
    )
  }

  return (
    <div className="card transfer">
      <h3>Transfer (safe, atomic)</h3>
      <div className="row">
        <select aria-label="from account" data-testid="transfer-from" value={from} onChange={(e) => setFrom(e.target.value)}>
          {ACCOUNTS.map((a) => (
            <option key={a.id} value={a.id}>
              {a.name}
            </option>
          ))}
        </select>
        <span>→</span>
        <select aria-label="to account" data-testid="transfer-to" value={to} onChange={(e) => setTo(e.target.value)}>
          {ACCOUNTS.map((a) => (
            <option key={a.id} value={a.id}>
              {a.name}
            </option>
          ))}
        </select>
        <input aria-label="transfer amount" data-testid="transfer-amount" inputMode="numeric" value={amountText} onChange={(e) => setAmountText(e.target.value)} />
        <button className="safe" data-testid="transfer-submit" disabled={!valid} onClick={transfer}>
          Transfer
        </button>
      </div>
    </div>
  )
}
