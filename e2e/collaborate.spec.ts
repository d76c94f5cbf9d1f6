/**
 * Two users (two browser contexts, each with its own IndexedDB and key) on
 * one space of a real 4-relay cluster.
 */
import { expect, freshSpace, openUser, test, useCluster, type User } from './fixtures.ts'
import { concurrentWithdrawals } from './scenarios.ts'

const cluster = useCluster({ basePort: 7611 })

test.describe('two users', () => {
  let alice: User
  let bob: User
  let space: string

  test.beforeEach(async ({ browser }, testInfo) => {
    space = freshSpace(testInfo)
    alice = await openUser(browser, cluster().urls, space, 'Alice')
    bob = await openUser(browser, cluster().urls, space, 'Bob')
  })

  test.afterEach(async () => {
    await alice?.close(test.info())
    await bob?.close(test.info())
  })

  test('see each other\'s deposits, votes and list items', async () => {
    await alice.deposit('main', 100)
    // Prospective at once on Alice's screen, stable once the relays ordered it.
    await expect(alice.balance('main', 'prospective')).toHaveText('100')
    await bob.expectBalance('main', 100)
    await alice.expectBalance('main', 100)
    // Regular updates go pending → stored locally → stable.
    await expect(alice.ops('stable').last()).toContainText('deposit 100 to Main')

    await bob.deposit('travel', 40)
    await alice.expectBalance('travel', 40)

    await bob.page.getByTestId('vote-kyoto').click()
    await alice.page.getByTestId('vote-kyoto').click()
    await alice.page.getByTestId('list-input').fill('Book the venue')
    await alice.page.getByTestId('list-add').click()
    await expect(bob.page.getByTestId('votes-kyoto-stable')).toHaveText('2')
    await expect(alice.page.getByTestId('votes-kyoto-stable')).toHaveText('2')
    await expect(bob.page.locator('[data-testid="list-item"][data-value="Book the venue"][data-stable="true"]')).toBeVisible()

    // A safe transfer, so the screen shows a committed safe update and its latency.
    await alice.page.getByTestId('transfer-from').selectOption('main')
    await alice.page.getByTestId('transfer-to').selectOption('equipment')
    await alice.page.getByTestId('transfer-amount').fill('25')
    await alice.page.getByTestId('transfer-submit').click()
    await expect(alice.ops('committed').first()).toContainText('transfer 25 Main → Equipment')
    await bob.expectBalance('main', 75)
    await bob.expectBalance('equipment', 25)
    await alice.expectBalance('main', 75)
    await expect(alice.page.getByTestId('latencies')).toContainText(' ms')

    // One more deposit, so the main screen shows a prospective value ahead of the stable one if we catch it.
    await alice.deposit('travel', 10)
    await alice.screenshot('main-screen.png')
    await alice.expectBalance('travel', 50)
    await bob.expectBalance('travel', 50)
  })

  test('petty cash: a spend claims rights from the pool, a spend within them stays local, and both pages see who holds them', async () => {
    const cash = (u: User) => u.page.getByTestId('petty-cash')
    await expect(cash(alice).getByTestId('cash-holders')).toContainText('pool (unclaimed)200300')
    await cash(alice).getByTestId('cash-amount').fill('5')
    await cash(alice).getByTestId('cash-spend').click()
    await expect(cash(bob).getByTestId('cash-stable')).toHaveText('195')
    // Alice claimed rights beyond the 5 she spent and shows in Bob's table by her name; the pool holds the rest.
    await expect(cash(bob).getByTestId('cash-holders')).toContainText('Alice')
    const spendable = Number((await cash(alice).getByTestId('cash-rights').textContent())?.match(/spend (\d+)/)?.[1])
    expect(spendable).toBeGreaterThan(0)
    // Within her rights: stored locally at once, no round trip.
    await cash(alice).getByTestId('cash-amount').fill('1')
    await cash(alice).getByTestId('cash-spend').click()
    await expect(alice.ops('stable').first()).toContainText('spend 1 of petty cash')
    await expect(cash(bob).getByTestId('cash-stable')).toHaveText('194')
  })

  test('a page that reads at a freshness bound gets certified deltas (checked with WebCrypto) and shows every deposit within the bound', async () => {
    const paced = async (): Promise<number> => {
      let sent = 0
      for (let i = 0; i < cluster().urls.length; i++) {
        const text = await (await fetch(`${cluster().httpUrl(i)}/metrics`)).text()
        sent += Number(/stead_paced_deltas_total\{result="sent"\} (\d+)/.exec(text)?.[1] ?? 0)
      }
      return sent
    }
    const before = await paced()
    await bob.page.evaluate(async (name) => {
      const client = (window as unknown as { stead: { space(name: string): Promise<{ setFreshness(ms: number): void }> } }).stead
      ;(await client.space(name)).setFreshness(500)
    }, space)
    for (const n of [10, 20, 30]) await alice.deposit('main', n)
    await alice.expectBalance('main', 60)
    await bob.expectBalance('main', 60)
    expect(await paced()).toBeGreaterThan(before)
  })

  test('concurrent withdrawals beyond the balance: only what fits commits, the rest is rejected (invariant)', async () => {
    const loser = await concurrentWithdrawals(alice, bob)
    await loser.page.getByTestId('operations').scrollIntoViewIfNeeded()
    await loser.screenshot('rejected-withdrawal.png')
  })
})
