/**
 * Finds the system Chromium for Playwright (its own browser download does
 * not work everywhere). If none is installed and we are root, installs it
 * with apt-get and says so on stderr; otherwise fails with the command.
 */
import { execSync } from 'node:child_process'
import { existsSync } from 'node:fs'

const CANDIDATES = ['/usr/bin/chromium', '/usr/bin/chromium-browser']
export const INSTALL_COMMAND = 'apt-get update && apt-get install -y chromium'

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]

function found(): string | undefined {
  const fromEnv = process.env.STEAD_CHROMIUM
  if (fromEnv && existsSync(fromEnv)) return fromEnv
  return CANDIDATES.find((p) => existsSync(p))
}

export function ensureChromium(): string {
  const path = found()
  if (path) return path
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0
  const hasApt = existsSync('/usr/bin/apt-get')
  if (!isRoot || !hasApt) {
    throw new Error(`e2e: no Chromium found at ${CANDIDATES.join(' or ')}. Install it as root with:\n\n  ${INSTALL_COMMAND}\n\n(or set STEAD_CHROMIUM to a Chromium binary)`)
  }
  process.stderr.write(`e2e: no Chromium found; installing it with: ${INSTALL_COMMAND}\n`)
  execSync(INSTALL_COMMAND, { stdio: ['ignore', process.stderr, process.stderr], env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } })
  const installed = found()
  if (!installed) throw new Error(`e2e: '${INSTALL_COMMAND}' finished but no Chromium is at ${CANDIDATES.join(' or ')}`)
  process.stderr.write(`e2e: installed ${installed}\n`)
  return installed
}
