import { readdirSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

/**
 * vitest's global setup: once every test file ran, the scratch directories
 * tests made under the system's temp dir during this run (`stead-*`: relay
 * data dirs, clients' stores, a few hundred MB for a cluster) are removed.
 * Left behind, they filled the disk of a machine reused for weeks.
 */
export default function setup(): () => void {
  const started = Date.now() - 1000
  return () => {
    const root = tmpdir()
    for (const name of readdirSync(root)) {
      if (!name.startsWith('stead-')) continue
      const path = join(root, name)
      try {
        if (statSync(path).ctimeMs >= started) rmSync(path, { recursive: true, force: true })
      } catch {
        // Gone already, or not ours to remove.
      }
    }
  }
}
