/**
 * Relay faults the users should not notice: with N = 4 relays (f = 1), one
 * relay crashing, or one relay running a Byzantine strategy.
 */
import { expect, freshSpace, openUser, test, useCluster, type User } from './fixtures.ts'
import { concurrentWithdrawals } from './scenarios.ts'

test.describe('one relay killed during the session', () => {
  const cluster = useCluster({ basePort: 7651 })

  test('the app keeps working and keeps committing', async ({ browser }, testInfo) => {
    const space = freshSpace(testInfo)
    const alice = await openUser(browser, cluster().urls, space, 'Alice')
    const bob = await openUser(browser, cluster().urls, space, 'Bob')
    try {
      await alice.deposit('main', 100)
      await bob.expectBalance('main', 100)
      await expect(alice.page.locator('[data-testid="relay-row"][data-up="true"]')).toHaveCount(4)

      // r1, the first relay every client dials, crashes.
      cluster().killRelay(0)
      const r1 = alice.page.locator(`[data-testid="relay-row"][data-url="${cluster().urls[0]}"]`)
      await expect(r1).toHaveAttribute('data-up', 'false')
      await expect(r1).toHaveAttribute('data-connected', 'false')
      await alice.expectOnline(true)

      await alice.withdraw('main', 30)
      await bob.deposit('travel', 15)
      await expect(alice.ops('committed').first()).toContainText('withdraw 30 from Main')
      for (const user of [alice, bob]) {
        await user.expectBalance('main', 70)
        await user.expectBalance('travel', 15)
      }
      await alice.screenshot('relay-killed.png')

      // Safe updates that conflict still resolve with three relays.
      await Promise.all([alice.withdraw('main', 50), bob.withdraw('main', 50)])
      for (const user of [alice, bob]) await expect(user.ops('pending')).toHaveCount(0)
      expect((await alice.ops('rejected').count()) + (await bob.ops('rejected').count()), 'one of the two conflicting withdrawals is rejected').toBe(1)
      await alice.expectBalance('main', 20)
      await bob.expectBalance('main', 20)
    } finally {
      await alice.close(testInfo)
      await bob.close(testInfo)
    }
  })
})

for (const [mode, basePort] of [
  ['equivocate', 7671],
  ['forged-envelopes', 7691],
  ['lie-attest', 7711],
] as const) {
  test.describe(`a relay in Byzantine mode ${mode}`, () => {
    const cluster = useCluster({ basePort, byzantine: mode })

    test('changes nothing the users see as stable', async ({ browser }, testInfo) => {
      const space = freshSpace(testInfo)
      const alice = await openUser(browser, cluster().urls, space, 'Alice')
      const bob = await openUser(browser, cluster().urls, space, 'Bob')
      try {
        await expect(alice.page.locator('[data-testid="relay-row"]').last()).toContainText(`byzantine: ${mode}`)
        await bob.deposit('travel', 15)
        await concurrentWithdrawals(alice, bob)
        await alice.page.getByTestId('transfer-from').selectOption('travel')
        await alice.page.getByTestId('transfer-to').selectOption('equipment')
        await alice.page.getByTestId('transfer-amount').fill('5')
        await alice.page.getByTestId('transfer-submit').click()
        await expect(alice.ops('committed').first()).toContainText('transfer 5 Travel → Equipment')

        const expected = { main: 10, travel: 10, equipment: 5 } as const
        for (const user of [alice, bob] as User[]) {
          for (const [account, value] of Object.entries(expected)) await user.expectBalance(account as keyof typeof expected, value)
        }
        // The correct relays agree on this space's stable index with the clients.
        const index = Number(await alice.page.getByTestId('status-stable-index').textContent())
        await expect(bob.page.getByTestId('status-stable-index')).toHaveText(String(index))
        await expect
          .poll(async () => await Promise.all([0, 1, 2].map((i) => cluster().stableIndex(i, space))), { timeout: 20_000 })
          .toEqual([index, index, index])
        if (mode === 'equivocate') await alice.screenshot('byzantine-relay.png')
        // A lie told to clients that they can prove: the panel shows the relay as faulty.
        if (mode === 'lie-attest') {
          await expect(alice.page.locator('[data-testid="relay-row"]').last()).toContainText('faulty')
          await alice.screenshot('lying-relay.png')
        }
      } finally {
        await alice.close(testInfo)
        await bob.close(testInfo)
      }
    })
  })
}
