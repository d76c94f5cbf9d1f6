/**
 * Waits until `check` holds (polled every few milliseconds), or fails the
 * test naming `what` after `ms`: tests wait on conditions, never on sleeps.
 */
export async function until(what: string, check: () => boolean | Promise<boolean>, ms = 20_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 2))
  }
}
