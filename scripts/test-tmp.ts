import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/** A run's scratch root left behind this long ago (the run was killed) is removed by the next run. */
const STALE_MS = 24 * 60 * 60 * 1000

/**
 * vitest's global setup: every run gets a scratch root of its own under the
 * system's temp dir (`stead-run-*`), made the temp dir (TMPDIR) of the test
 * workers and of the relays and clients they start, and removed with all in
 * it once every test file ran. Relay data dirs and clients' stores take a
 * few hundred MB per cluster: left behind, they filled the disk of a
 * machine reused for weeks. Removing only this run's root matters as much:
 * a run that swept every recent `stead-*` dir deleted the data dirs of
 * another run going on at the same time (a CI run beside a developer's).
 */
export default function setup(): () => void {
  const system = tmpdir()
  for (const name of readdirSync(system)) {
    if (!name.startsWith('stead-run-')) continue
    const path = join(system, name)
    try {
      if (Date.now() - statSync(path).mtimeMs > STALE_MS) rmSync(path, { recursive: true, force: true })
    } catch {
      // Gone already, or not ours to remove.
    }
  }
  const root = mkdtempSync(join(system, 'stead-run-'))
  const previous = process.env.TMPDIR
  process.env.TMPDIR = root
  return () => {
    if (previous === undefined) delete process.env.TMPDIR
    else process.env.TMPDIR = previous
    rmSync(root, { recursive: true, force: true })
  }
}
