/**
 * Measures what @stead/client costs a browser app: bundles the package's
 * browser entry with Vite (production, minified, every dependency inlined,
 * no Node polyfills) and reports raw and gzipped sizes.
 *
 *   npm run bench:bundle -w @stead/client
 */
import { gzipSync } from 'node:zlib'
import { fileURLToPath } from 'node:url'
import { build } from 'vite'

const entry = fileURLToPath(new URL('../src/index.ts', import.meta.url))
const result = await build({
  logLevel: 'silent',
  configFile: false,
  resolve: { conditions: ['@stead/source', 'browser', 'import', 'default'] },
  build: {
    write: false,
    minify: true,
    target: 'es2022',
    lib: { entry, formats: ['es'], fileName: 'stead-client' },
    rollupOptions: {
      // A browser build must not reach for Node: fail loudly if anything does.
      onwarn(warning, warn) {
        if (/externalized for browser compatibility|node:/.test(warning.message)) throw new Error(`browser build pulls in Node: ${warning.message}`)
        warn(warning)
      },
    },
  },
})
const outputs = (Array.isArray(result) ? result : [result]).flatMap((r) => ('output' in r ? r.output : []))
let raw = 0
let gzip = 0
for (const o of outputs) {
  if (o.type !== 'chunk') continue
  if (/from\s*["']node:/.test(o.code) || /require\(["']node:/.test(o.code)) throw new Error(`${o.fileName} imports a Node built-in`)
  raw += o.code.length
  gzip += gzipSync(o.code, { level: 9 }).length
}
console.log(JSON.stringify({ bundle: '@stead/client (browser entry)', minifiedBytes: raw, gzippedBytes: gzip, gzippedKiB: +(gzip / 1024).toFixed(1) }))
