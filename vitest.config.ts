import { defaultClientConditions, defaultServerConditions } from 'vite'
import { defineConfig } from 'vitest/config'

/** The workspace packages resolve to their TypeScript sources (package.json "@stead/source"), not to a dist/ that may be stale or missing. */
const SOURCE = '@stead/source'

/** Tests that start real relay processes: each runs alone, so their timings (and the flood test's latency bound) do not depend on what else runs on a 2-core machine. */
const processes = ['relay/test/integration.test.ts', 'relay/test/hardening.test.ts', 'relay/test/fuzz.test.ts', 'relay/test/datadir.test.ts', 'relay/test/cli.test.ts', 'relay/test/cli-errors.test.ts', 'relay/test/byzantine-member.test.ts', 'relay/test/attack-reads.test.ts', 'relay/test/attack-slots.test.ts', 'relay/test/attack-shares.test.ts', 'relay/test/policy.test.ts', 'relay/test/upgrade.test.ts', 'packages/client/test/relays.test.ts', 'packages/client/test/members-relays.test.ts', 'packages/client/test/documents-relays.test.ts', 'packages/client/test/liars.test.ts', 'packages/client/test/peers-libp2p.test.ts', 'packages/client/test/chrono-examples.test.ts', 'packages/client/test/clock-validator.test.ts', 'packages/client/test/epochs-relays.test.ts', 'relay/test/epoch-process.test.ts', 'scripts/docs/snippets.test.ts']

export default defineConfig({
  resolve: { conditions: [SOURCE, ...defaultClientConditions] },
  ssr: { resolve: { conditions: [SOURCE, ...defaultServerConditions], externalConditions: [SOURCE] } },
  test: {
    testTimeout: 30_000,
    globalSetup: ['scripts/test-tmp.ts'],
    projects: [
      // Two at a time: vitest's default is one fewer than the cores, one worker on a 2-core machine (the unit files took 644 s).
      { extends: true, test: { name: 'unit', include: ['packages/*/test/**/*.test.ts', 'relay/test/**/*.test.ts'], exclude: processes, maxWorkers: 2, sequence: { groupOrder: 0 } } },
      { extends: true, test: { name: 'processes', include: processes, fileParallelism: false, sequence: { groupOrder: 1 } } },
    ],
  },
})
