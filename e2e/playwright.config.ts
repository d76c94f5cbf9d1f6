import { defineConfig } from '@playwright/test'
import { CHROMIUM_ARGS, ensureChromium } from './chromium.ts'

/** The demo is built once and served by `vite preview` on this port. */
export const DEMO_PORT = 4199

export default defineConfig({
  testDir: '.',
  testMatch: '*.spec.ts',
  outputDir: './artifacts/results',
  // Each spec file runs its own relay cluster; two cores fit one at a time.
  workers: 1,
  fullyParallel: false,
  forbidOnly: true,
  retries: 0,
  timeout: 90_000,
  expect: { timeout: 20_000 },
  reporter: [['list'], ['./summary-reporter.ts']],
  use: {
    baseURL: `http://127.0.0.1:${DEMO_PORT}`,
    browserName: 'chromium',
    launchOptions: { executablePath: ensureChromium(), args: CHROMIUM_ARGS },
    viewport: { width: 1360, height: 900 },
    // No screencast: its frames cost the browser more CPU than the pages (a 600-key typing test ran 5x slower on one core with it).
    trace: { mode: 'retain-on-failure', screenshots: false, snapshots: true },
    screenshot: 'only-on-failure',
  },
  webServer: {
    command: `npm run build -w @stead/demo && npm run preview -w @stead/demo -- --port ${DEMO_PORT} --strictPort`,
    cwd: '..',
    url: `http://127.0.0.1:${DEMO_PORT}/`,
    reuseExistingServer: false,
    timeout: 120_000,
    stdout: 'ignore',
    stderr: 'pipe',
  },
})
