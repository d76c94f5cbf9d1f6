/**
 * Peer to peer: two users' pages connect directly (WebRTC, set up through
 * the relays' peer service) and keep collaborating after every relay is
 * stopped; what they did commits once the relays are back.
 */
import { expect, freshSpace, openUser, test, useCluster, type User } from './fixtures.ts'

const cluster = useCluster({ basePort: 7731 })

/** Links to other clients this page's client holds open. */
const peerLinks = (user: User): Promise<number> => user.page.evaluate(() => (window as unknown as { stead: { peers?: { peers: number } } }).stead.peers?.peers ?? 0)

test('two users sync directly while every relay is down, and their updates commit when the relays are back', async ({ browser }, testInfo) => {
  const space = freshSpace(testInfo)
  const alice = await openUser(browser, cluster().urls, space, 'Alice', { peers: true })
  const bob = await openUser(browser, cluster().urls, space, 'Bob', { peers: true })
  try {
    await alice.deposit('main', 100)
    await bob.expectBalance('main', 100)
    // They found each other through the relays and hold a direct link (one each way when both dialled).
    await expect.poll(() => peerLinks(alice), { timeout: 30_000 }).toBeGreaterThan(0)
    await expect.poll(() => peerLinks(bob)).toBeGreaterThan(0)

    await cluster().stopRelays()
    await alice.expectOnline(false)
    await bob.expectOnline(false)

    // With no relay anywhere, each sees the other's deposit at once, peer to peer.
    await alice.deposit('travel', 20)
    await bob.deposit('equipment', 5)
    await bob.page.getByTestId('list-input').fill('Rope')
    await bob.page.getByTestId('list-add').click()
    for (const user of [alice, bob]) {
      await user.expectBalance('travel', 20, ['prospective'])
      await user.expectBalance('equipment', 5, ['prospective'])
      await user.expectBalance('travel', 0, ['stable'])
      await expect(user.page.locator('[data-testid="list-item"][data-value="Rope"]')).toBeVisible()
    }
    expect(await peerLinks(alice)).toBeGreaterThan(0)

    // The relays come back: what they did offline becomes stable for both.
    await cluster().restart()
    for (const user of [alice, bob]) {
      await user.expectOnline(true)
      await user.expectBalance('travel', 20)
      await user.expectBalance('equipment', 5)
      await user.expectBalance('main', 100)
      await expect(user.page.locator('[data-testid="list-item"][data-value="Rope"][data-stable="true"]')).toBeVisible()
    }
  } finally {
    await alice.close(testInfo)
    await bob.close(testInfo)
  }
})
