/**
 * Members at runtime (issue 46), as users meet them in the demo's Team page:
 * a user creates a space, invites another by a link, the guest writes, is
 * taken out, and is told why its next write is refused.
 */
import { demoPath, expect, freshSpace, openUser, test, useCluster } from './fixtures.ts'

const cluster = useCluster({ basePort: 7821 })

test('a team space: created, joined from an invitation link, written to, and the guest taken out', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice')
  const bob = await openUser(browser, cluster().urls, space, 'Bob')
  try {
    await alice.page.getByTestId('page-team').click()
    await alice.page.getByTestId('team-create').click()
    await expect(alice.page.getByTestId('team-role')).toHaveText('admin')
    await alice.page.getByTestId('team-invite').click()
    const link = await alice.page.getByTestId('team-link').inputValue()
    const join = new URL(link).hash
    expect(join).toMatch(/^#join=/)

    // Bob opens the link in his own page (his relays and name, the invitation from the link).
    await bob.page.goto(demoPath(cluster().urls, space, 'Bob') + join)
    await expect(bob.page.getByTestId('team-role')).toHaveText('writer', { timeout: 30_000 })
    await expect(alice.page.getByTestId('team-member')).toHaveCount(2)

    await bob.page.getByTestId('team-input').fill('hello from Bob')
    await bob.page.getByTestId('team-add').click()
    await expect(alice.page.getByTestId('team-item').filter({ hasText: 'hello from Bob' })).toBeVisible()

    // Alice takes Bob out; his next write is refused by every relay, and his page says why.
    await alice.page.getByTestId('team-revoke').click()
    await expect(alice.page.getByTestId('team-member')).toHaveCount(1)
    await bob.page.getByTestId('team-input').fill('one more')
    await bob.page.getByTestId('team-add').click()
    await expect(bob.page.getByTestId('team-problem')).toContainText(/unauthorized|may not/, { timeout: 30_000 })
    // Refused for good, so it never reaches the order: Alice's board keeps Bob's first item only.
    await expect(alice.page.getByTestId('team-item')).toHaveCount(1)
    // The link was for one use: a third user cannot join with it.
    const carol = await openUser(browser, cluster().urls, space, 'Carol')
    try {
      await carol.page.goto(demoPath(cluster().urls, space, 'Carol') + join)
      await expect(carol.page.getByTestId('team-problem')).toContainText(/could not join/, { timeout: 60_000 })
    } finally {
      await carol.close(testInfo)
    }
  } finally {
    await alice.close(testInfo)
    await bob.close(testInfo)
  }
})

test('a team space deleted by its admin: its board empties and it takes no more writes, also after a reload', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice')
  try {
    await alice.page.getByTestId('page-team').click()
    await alice.page.getByTestId('team-create').click()
    await expect(alice.page.getByTestId('team-role')).toHaveText('admin')
    await alice.page.getByTestId('team-input').fill('short-lived')
    await alice.page.getByTestId('team-add').click()
    await expect(alice.page.getByTestId('team-item')).toHaveCount(1)

    alice.page.once('dialog', (d) => void d.accept())
    await alice.page.getByTestId('team-delete').click()
    await expect(alice.page.getByTestId('team-deleted')).toBeVisible({ timeout: 30_000 })
    await expect(alice.page.getByTestId('team-item')).toHaveCount(0)
    await expect(alice.page.getByTestId('team-delete')).toHaveCount(0)
    // A write after it is refused, and the page says why.
    await alice.page.getByTestId('team-input').fill('too late')
    await alice.page.getByTestId('team-add').click()
    await expect(alice.page.getByTestId('team-problem')).toContainText(/was deleted/, { timeout: 30_000 })
    await expect(alice.page.getByTestId('team-item')).toHaveCount(0)
    // Still deleted after a reload (the page opens the space it remembers).
    await alice.page.reload()
    await alice.page.getByTestId('page-team').click()
    await expect(alice.page.getByTestId('team-deleted')).toBeVisible({ timeout: 30_000 })
  } finally {
    await alice.close(testInfo)
  }
})
