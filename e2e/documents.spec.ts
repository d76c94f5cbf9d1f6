/**
 * Two users type into one shared text (the demo's notes, a Stead text) in
 * two browser contexts on a real 4-relay cluster.
 */
import { expect, test, twoUsers, useCluster } from './fixtures.ts'

const cluster = useCluster({ basePort: 7751 })

test.describe('a shared text', () => {
  const users = twoUsers(cluster)

  test('two pages typing into one text at once end with the same text, both words whole', async () => {
    const { alice, bob } = users()
    const a = alice.page.getByTestId('notes-text')
    const b = bob.page.getByTestId('notes-text')
    await a.click()
    await alice.page.keyboard.type('Hello world')
    await expect(a).toHaveValue('Hello world')
    await expect(b).toHaveValue('Hello world')
    // Alice types at the end while Bob types at the start, key by key, at the same time.
    await b.click()
    await bob.page.keyboard.press('Control+Home')
    await a.click()
    await alice.page.keyboard.press('Control+End')
    await Promise.all([alice.page.keyboard.type(' and all', { delay: 15 }), bob.page.keyboard.type('Oh, ', { delay: 15 })])
    await expect(a).toHaveValue('Oh, Hello world and all')
    await expect(b).toHaveValue('Oh, Hello world and all')
    // Typed at one place by both: their words stay whole (never interleaved letter by letter).
    await bob.page.keyboard.press('Control+End')
    await alice.page.keyboard.press('Control+End')
    await Promise.all([alice.page.keyboard.type(' AAAA', { delay: 20 }), bob.page.keyboard.type(' bbbb', { delay: 20 })])
    await expect(a).toHaveValue(/ AAAA bbbb$| bbbb AAAA$/)
    await expect(b).toHaveValue(await a.inputValue())
    await expect(alice.page.getByTestId('notes-stable')).toHaveAttribute('data-synced', 'true')
    await expect(bob.page.getByTestId('notes-stable')).toHaveAttribute('data-synced', 'true')
    await alice.screenshot('notes.png')
  })

  test('each page lists who else is here, and a page that closes leaves the other\'s list at once', async () => {
    const { alice, bob } = users()
    await expect(alice.page.getByTestId('person')).toHaveText(['● Bob'])
    await expect(bob.page.getByTestId('person')).toHaveText(['● Alice'])
    await bob.close(test.info())
    // Its relays send the leave the page signed ahead when its sessions close: no wait for the 30 s ttl.
    await expect(alice.page.getByTestId('people')).toHaveAttribute('data-count', '0', { timeout: 10_000 })
  })
})
