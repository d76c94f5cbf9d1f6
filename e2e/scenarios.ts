/** Steps several specs share. */
import { expect, type User } from './fixtures.ts'

/** Starts recording every value the `balance-<account>-<kind>` element shows. */
export async function recordStable(user: User, account: string, kind: 'stable' | 'prospective' = 'stable'): Promise<void> {
  await user.page.evaluate((testId) => {
    const w = window as unknown as { seenStable?: Record<string, number[]> }
    const seen: number[] = []
    w.seenStable = { ...w.seenStable, [testId]: seen }
    const el = document.querySelector(`[data-testid="${testId}"]`) as HTMLElement
    seen.push(Number(el.textContent))
    new MutationObserver(() => seen.push(Number(el.textContent))).observe(el, { childList: true, characterData: true, subtree: true })
  }, `balance-${account}-${kind}`)
}

export async function seenStable(user: User, account: string, kind: 'stable' | 'prospective' = 'stable'): Promise<number[]> {
  return user.page.evaluate((testId) => (window as unknown as { seenStable: Record<string, number[]> }).seenStable[testId] ?? [], `balance-${account}-${kind}`)
}

/**
 * Both users withdraw 30 twice from a balance of 100 at the same time:
 * 120 > 100, so exactly three withdrawals commit and one is rejected for
 * the invariant; both screens settle on 10 and no value below 0, stable or
 * prospective, is ever shown. Returns the user whose withdrawal was rejected.
 */
export async function concurrentWithdrawals(alice: User, bob: User): Promise<User> {
  await alice.deposit('main', 100)
  await alice.expectBalance('main', 100)
  await bob.expectBalance('main', 100)
  for (const user of [alice, bob]) {
    await recordStable(user, 'main')
    await recordStable(user, 'main', 'prospective')
  }

  await Promise.all([alice.withdraw('main', 30), bob.withdraw('main', 30)])
  await Promise.all([alice.withdraw('main', 30), bob.withdraw('main', 30)])

  for (const user of [alice, bob]) await expect(user.ops('pending'), `${user.name}'s safe withdrawals all resolve`).toHaveCount(0)
  const committed = (await alice.ops('committed').count()) + (await bob.ops('committed').count())
  const rejected = [...(await alice.ops('rejected').all()), ...(await bob.ops('rejected').all())]
  expect(committed, 'withdrawals committed').toBe(3)
  expect(rejected, 'withdrawals rejected').toHaveLength(1)
  await expect(rejected[0]!).toHaveAttribute('data-reason', 'invariant')
  await expect(rejected[0]!).toContainText('rejected: invariant')

  // The same stable value on both screens; prospective comes back to it (the rejected withdrawal is reversed).
  await alice.expectBalance('main', 10)
  await bob.expectBalance('main', 10)
  for (const user of [alice, bob]) {
    const seen = await seenStable(user, 'main')
    expect(Math.min(...seen), `${user.name}'s stable balance never went below 0 (saw ${seen.join(', ')})`).toBeGreaterThanOrEqual(0)
    // Withdrawals that would cross 0 where they stand are held back, never shown (issue 14).
    const prospective = await seenStable(user, 'main', 'prospective')
    expect(Math.min(...prospective), `${user.name}'s prospective balance never went below 0 (saw ${prospective.join(', ')})`).toBeGreaterThanOrEqual(0)
  }
  return (await alice.ops('rejected').count()) ? alice : bob
}
