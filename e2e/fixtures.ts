/**
 * Shared pieces of the e2e specs: a relay cluster per spec file, and a
 * "user": one browser context (its own IndexedDB, its own identity) with the
 * demo open on a given cluster and space.
 */
import { expect, test, type Browser, type BrowserContext, type Locator, type Page, type TestInfo, type WebSocketRoute } from '@playwright/test'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { Cluster, type ClusterOptions } from './cluster.ts'

export { expect, test }

export const ARTIFACTS = join(import.meta.dirname, 'artifacts')

/** Starts a cluster before the file's tests and stops it after them. */
export function useCluster(options: ClusterOptions): () => Cluster {
  let cluster: Cluster | undefined
  test.beforeAll(async () => {
    cluster = await Cluster.start(options)
  })
  test.afterAll(async () => {
    await cluster?.stop()
  })
  test.afterEach(async () => {
    const testInfo = test.info()
    if (cluster && testInfo.status !== testInfo.expectedStatus) {
      await testInfo.attach('relay-log', { body: cluster.tail(200), contentType: 'text/plain' })
    }
  })
  return () => {
    if (!cluster) throw new Error('the cluster did not start')
    return cluster
  }
}

/** A space no other test has used. */
export function freshSpace(testInfo: TestInfo): string {
  const slug = testInfo.title.toLowerCase().replace(/[^a-z0-9]+/g, '-').slice(0, 40)
  return `e2e-${slug}-${Date.now().toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`
}

export function demoPath(relays: readonly string[], space: string, user: string, extra: Record<string, string> = {}): string {
  return `/?${new URLSearchParams({ relays: relays.join(','), space, user, ...extra }).toString()}`
}

export type Account = 'main' | 'travel' | 'equipment'

export class User {
  /** What the page printed in red (console errors, failed requests, uncaught exceptions). */
  readonly errors: string[] = []
  /** What it printed in yellow. */
  readonly warnings: string[] = []
  /** Relay connections of this context, when its network is controlled (see `openUser`). */
  private readonly sockets = new Set<WebSocketRoute>()
  private relaysReachable = true
  /** Relay HTTP requests and WebSocket sessions refused while the relays were unreachable. */
  readonly refused = { http: 0, sessions: 0 }

  readonly name: string
  readonly context: BrowserContext
  readonly page: Page
  constructor(
    name: string,
    context: BrowserContext,
    page: Page,
  ) {
    this.name = name
    this.context = context
    this.page = page
    page.on('pageerror', (err) => this.errors.push(`pageerror: ${err.message}`))
    page.on('console', (msg) => {
      if (msg.type() === 'error') this.errors.push(`console: ${msg.text()}`)
      if (msg.type() === 'warning') this.warnings.push(`console: ${msg.text()}`)
    })
  }

  /**
   * Routes this context's relay traffic (HTTP and WebSocket, to `relays`)
   * through Playwright, so a test can cut it: `setRelaysReachable(false)`
   * closes the open sessions and refuses new ones, as if the relays were gone.
   */
  async controlRelayTraffic(relays: readonly string[]): Promise<void> {
    const hosts = relays.map((r) => new URL(r.replace(/^ws/, 'http')).host)
    const matches = (url: URL) => hosts.includes(url.host)
    await this.context.route(matches, (route) => {
      if (this.relaysReachable) return route.continue()
      this.refused.http++
      return route.abort('connectionrefused')
    })
    await this.context.routeWebSocket(matches, (ws) => {
      if (!this.relaysReachable) {
        this.refused.sessions++
        return ws.close({ code: 1011, reason: 'e2e: relays unreachable' })
      }
      this.sockets.add(ws)
      ws.onClose(() => this.sockets.delete(ws))
      ws.connectToServer()
    })
  }

  async setRelaysReachable(reachable: boolean): Promise<void> {
    this.relaysReachable = reachable
    if (!reachable) {
      for (const ws of [...this.sockets]) await ws.close({ code: 1011, reason: 'e2e: relays unreachable' }).catch(() => {})
      this.sockets.clear()
    }
  }

  /**
   * Offline as a browser sees it: navigator.onLine is false, requests fail,
   * and the relay sessions drop (Chromium's offline emulation alone leaves
   * open WebSockets up, so they are cut here too).
   */
  async setOffline(offline: boolean): Promise<void> {
    await this.context.setOffline(offline)
    await this.setRelaysReachable(!offline)
  }

  balance(account: Account, kind: 'prospective' | 'stable'): Locator {
    return this.page.getByTestId(`balance-${account}-${kind}`)
  }

  async number(locator: Locator): Promise<number> {
    return Number(await locator.textContent())
  }

  async deposit(account: Account, amount: number): Promise<void> {
    await this.page.getByTestId(`amount-${account}`).fill(String(amount))
    await this.page.getByTestId(`deposit-${account}`).click()
  }

  async withdraw(account: Account, amount: number): Promise<void> {
    await this.page.getByTestId(`amount-${account}`).fill(String(amount))
    await this.page.getByTestId(`withdraw-${account}`).click()
  }

  /** This user's operation log entries (newest first). */
  ops(state?: string): Locator {
    const all = this.page.getByTestId('op')
    return state ? all.and(this.page.locator(`[data-state="${state}"]`)) : all
  }

  async expectOnline(online = true): Promise<void> {
    await expect(this.page.getByTestId('status-online')).toHaveAttribute('data-online', String(online))
  }

  async expectBalance(account: Account, value: number, kinds: Array<'prospective' | 'stable'> = ['prospective', 'stable']): Promise<void> {
    for (const kind of kinds) await expect(this.balance(account, kind), `${this.name}'s ${kind} ${account} balance`).toHaveText(String(value))
  }

  async screenshot(name: string): Promise<string> {
    mkdirSync(ARTIFACTS, { recursive: true })
    const path = join(ARTIFACTS, name)
    await this.page.screenshot({ path, fullPage: true })
    return path
  }

  async close(testInfo?: TestInfo): Promise<void> {
    if (testInfo && this.errors.length + this.warnings.length) await testInfo.attach(`${this.name}-browser-errors`, { body: [...this.errors, ...this.warnings].join('\n'), contentType: 'text/plain' })
    await this.context.close()
  }
}

/** Opens the demo as `name` in a new browser context (its own storage and identity). */
export async function openUser(browser: Browser, relays: readonly string[], space: string, name: string, options: { waitOnline?: boolean; controlRelayTraffic?: boolean; peers?: boolean; params?: Record<string, string> } = {}): Promise<User> {
  const context = await browser.newContext()
  const page = await context.newPage()
  const user = new User(name, context, page)
  if (options.controlRelayTraffic) await user.controlRelayTraffic(relays)
  await page.goto(demoPath(relays, space, name, { ...(options.peers ? { peers: '1' } : {}), ...options.params }))
  await expect(page.getByTestId('app')).toBeVisible()
  if (options.waitOnline ?? true) await user.expectOnline()
  return user
}

/**
 * Alice and Bob, each in a browser context of their own on a fresh space of
 * `cluster`, opened before each test of the enclosing describe block
 * (`then` runs next, say to open a page) and closed after it.
 */
export function twoUsers(cluster: () => Cluster, then?: (users: { alice: User; bob: User }) => Promise<void>): () => { alice: User; bob: User } {
  let users: { alice: User; bob: User } | undefined
  test.beforeEach(async ({ browser }, testInfo) => {
    const space = freshSpace(testInfo)
    users = { alice: await openUser(browser, cluster().urls, space, 'Alice'), bob: await openUser(browser, cluster().urls, space, 'Bob') }
    await then?.(users)
  })
  test.afterEach(async () => {
    await users?.alice.close(test.info())
    await users?.bob.close(test.info())
    users = undefined
  })
  return () => {
    if (!users) throw new Error('the users are not open')
    return users
  }
}
