/**
 * A healthy session prints nothing in red or yellow: a new user opening a
 * new space on a healthy cluster sees expected states (no commit yet, a
 * relay still connecting), not errors. Anything printed here is either a
 * bug or a state the SDK reports wrongly.
 */
import { expect, freshSpace, openUser, test, useCluster } from './fixtures.ts'

const cluster = useCluster({ basePort: 7801 })

test('a first load of a new space and a normal session print no error and no warning', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice')
  const bob = await openUser(browser, cluster().urls, space, 'Bob')
  try {
    await alice.deposit('main', 100)
    await bob.expectBalance('main', 100)
    await bob.withdraw('main', 30)
    await alice.page.getByTestId('list-input').fill('Book the venue')
    await alice.page.getByTestId('list-add').click()
    for (const user of [alice, bob]) {
      await user.expectBalance('main', 70)
      await expect(user.page.locator('[data-testid="list-item"][data-value="Book the venue"][data-stable="true"]')).toBeVisible()
    }
    // A reload starts from IndexedDB and catches up: still nothing to report.
    await alice.page.reload()
    await alice.expectOnline()
    await alice.expectBalance('main', 70)
    for (const user of [alice, bob]) expect([...user.errors, ...user.warnings], `${user.name}'s console`).toEqual([])
  } finally {
    await alice.close(testInfo)
    await bob.close(testInfo)
  }
})
