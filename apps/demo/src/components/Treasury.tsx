import { ACCOUNTS } from '../accounts.ts'
import { AccountCard } from './AccountCard.tsx'
import { PettyCash } from './PettyCash.tsx'
import { TransferForm } from './TransferForm.tsx'

/** The shared team treasury: balances that never go below zero in the stable state. */
export function Treasury() {
  return (
    <section className="panel treasury" data-testid="treasury">
      <h2>Team treasury</h2>
      <p className="explain">
        <b>Prospective</b> includes your updates at once; <b>stable</b> is what every correct replica agrees on. Deposits are regular updates;
        withdrawals and transfers are <b>safe</b>: they resolve only when the relays have ordered them, and are rejected if a balance would go below 0.
      </p>
      <div className="accounts">
        {ACCOUNTS.map((a) => (
          <AccountCard key={a.id} account={a} />
        ))}
        <PettyCash />
      </div>
      <TransferForm />
    </section>
  )
}
