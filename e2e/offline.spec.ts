/**
 * Local-first: edits go on while a user is offline and commit when they come
 * back; a reload restores everything from IndexedDB before any relay answers.
 */
import { User, demoPath, expect, freshSpace, openUser, test, useCluster } from './fixtures.ts'

const cluster = useCluster({ basePort: 7631 })

test('a user goes offline, keeps editing, comes back: the changes commit', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice', { controlRelayTraffic: true })
  const bob = await openUser(browser, cluster().urls, space, 'Bob')
  try {
    await alice.deposit('main', 100)
    await bob.expectBalance('main', 100)
    await alice.expectBalance('main', 100)

    await alice.setOffline(true)
    await alice.expectOnline(false)

    // Offline: a regular deposit applies at once; a safe withdrawal waits.
    await alice.deposit('travel', 20)
    await alice.withdraw('main', 60)
    await alice.page.getByTestId('list-input').fill('Pack the tent')
    await alice.page.getByTestId('list-add').click()
    await expect(alice.balance('travel', 'prospective')).toHaveText('20')
    await expect(alice.balance('main', 'prospective')).toHaveText('40')
    await expect(alice.balance('main', 'stable')).toHaveText('100')
    await expect(alice.ops('pending')).toHaveCount(1)
    await expect(alice.ops().filter({ hasText: 'deposit 20 to Travel' })).toHaveAttribute('data-state', 'stored')
    await expect(alice.page.getByTestId('status-pending')).not.toHaveText('0')

    // Nothing reaches Bob while Alice is offline: her page's routes refuse every relay (controlRelayTraffic),
    // and the counts below show her client did not even try, so there is nothing to wait for.
    await bob.expectBalance('main', 100)
    await bob.expectBalance('travel', 0)

    // While the browser says it is offline the client dials no relay: no connection errors pile up in the console.
    expect(alice.refused.sessions, 'relay sessions tried while offline').toBe(0)
    expect(alice.errors, "Alice's console while offline").toEqual([])

    await alice.setOffline(false)
    await alice.expectOnline(true)
    await expect(alice.ops('pending')).toHaveCount(0)
    await expect(alice.ops('committed').first()).toContainText('withdraw 60 from Main')
    for (const user of [alice, bob]) {
      await user.expectBalance('main', 40)
      await user.expectBalance('travel', 20)
      await expect(user.page.locator('[data-testid="list-item"][data-value="Pack the tent"][data-stable="true"]')).toBeVisible()
    }
    await expect(alice.page.getByTestId('status-pending')).toHaveText('0')
    await expect(alice.ops().filter({ hasText: 'deposit 20 to Travel' })).toHaveAttribute('data-state', 'stable')
  } finally {
    await alice.close(testInfo)
    await bob.close(testInfo)
  }
})

test('a reload restores the state from IndexedDB before any relay answers', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice', { controlRelayTraffic: true })
  try {
    await alice.deposit('main', 70)
    await alice.deposit('equipment', 5)
    await alice.page.getByTestId('vote-oaxaca').click()
    await alice.page.getByTestId('list-input').fill('Rent a van')
    await alice.page.getByTestId('list-add').click()
    await alice.expectBalance('main', 70)
    await alice.expectBalance('equipment', 5)
    await expect(alice.page.getByTestId('votes-oaxaca-stable')).toHaveText('1')
    await expect(alice.page.getByTestId('status-pending')).toHaveText('0')

    // From now on no relay answers this context: HTTP fails, WebSockets never connect.
    await alice.setRelaysReachable(false)
    await alice.page.reload()
    await expect(alice.page.getByTestId('app')).toBeVisible()
    await alice.expectBalance('main', 70)
    await alice.expectBalance('equipment', 5)
    await expect(alice.page.getByTestId('votes-oaxaca-stable')).toHaveText('1')
    await expect(alice.page.locator('[data-testid="list-item"][data-value="Rent a van"]')).toBeVisible()
    await alice.expectOnline(false)
    expect(alice.refused.sessions, 'the reloaded page did try to open relay sessions, and none answered').toBeGreaterThan(0)

    // Still usable offline after the reload, and it syncs once the relays answer again.
    await alice.deposit('main', 30)
    await expect(alice.balance('main', 'prospective')).toHaveText('100')
    await alice.setRelaysReachable(true)
    await alice.expectOnline(true)
    await alice.expectBalance('main', 100)
  } finally {
    await alice.close(testInfo)
  }
})

test('updates made offline survive a reload and commit when the relays answer again', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice', { controlRelayTraffic: true })
  const bob = await openUser(browser, cluster().urls, space, 'Bob')
  try {
    await alice.deposit('main', 100)
    await alice.expectBalance('main', 100)
    await bob.expectBalance('main', 100)

    await alice.setRelaysReachable(false)
    await alice.expectOnline(false)
    await alice.withdraw('main', 60)
    await alice.deposit('travel', 7)
    await expect(alice.balance('main', 'prospective')).toHaveText('40')
    await expect(alice.ops().filter({ hasText: 'deposit 7 to Travel' })).toHaveAttribute('data-state', 'stored')
    await alice.screenshot('offline-pending.png')

    // The tab goes away with both updates undecided; the SDK kept them in IndexedDB.
    await alice.page.reload()
    await expect(alice.page.getByTestId('app')).toBeVisible()
    await expect(alice.balance('main', 'prospective')).toHaveText('40')
    await expect(alice.balance('main', 'stable')).toHaveText('100')
    await expect(alice.balance('travel', 'prospective')).toHaveText('7')
    await expect(alice.page.getByTestId('status-pending')).not.toHaveText('0')

    await alice.setRelaysReachable(true)
    await alice.expectOnline(true)
    for (const user of [alice, bob]) {
      await user.expectBalance('main', 40)
      await user.expectBalance('travel', 7)
    }
    await expect(alice.page.getByTestId('status-pending')).toHaveText('0')
  } finally {
    await alice.close(testInfo)
    await bob.close(testInfo)
  }
})

test('tabs of one user share one client: each sees the others at once, and the updates of all survive the leading tab closing', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice')
  const tabs: User[] = []
  try {
    await alice.deposit('main', 10)
    await alice.expectBalance('main', 10)
    // Two more tabs of the same browser context and database: they follow the first.
    for (const name of ['Alice-2', 'Alice-3']) {
      const page = await alice.context.newPage()
      const tab = new User(name, alice.context, page)
      await page.goto(demoPath(cluster().urls, space, 'Alice'))
      await expect(page.getByTestId('app')).toBeVisible()
      await tab.expectBalance('main', 10)
      tabs.push(tab)
    }
    const leading = (u: User) => u.page.evaluate(() => (window as unknown as { stead: { leading: boolean } }).stead.leading)
    expect(await leading(alice)).toBe(true)
    expect(await leading(tabs[0] as User)).toBe(false)
    const [second, third] = tabs as [User, User]
    await second.deposit('main', 5)
    await alice.expectBalance('main', 15)
    await third.expectBalance('main', 15)

    // The leading tab closes while the others keep depositing.
    const writes = (async () => {
      for (let i = 0; i < 6; i++) {
        await second.deposit('travel', 1)
        await third.deposit('travel', 2)
      }
    })()
    await alice.page.close()
    await writes
    await expect.poll(async () => (await leading(second)) || (await leading(third)), { message: 'a new leading tab' }).toBe(true)
    for (const tab of tabs) {
      await tab.expectBalance('travel', 18)
      await tab.expectBalance('main', 15)
      await expect(tab.page.getByTestId('status-pending')).toHaveText('0')
    }
    expect([...second.errors, ...third.errors]).toEqual([])
  } finally {
    await alice.context.close()
  }
})
