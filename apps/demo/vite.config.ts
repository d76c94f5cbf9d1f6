import { defaultClientConditions, defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// The workspace packages resolve to their TypeScript sources (the "@stead/source"
// export condition), which Vite compiles like app code: no build step in the repository.
export default defineConfig({
  plugins: [react()],
  resolve: { conditions: ['@stead/source', ...defaultClientConditions] },
  server: { host: '127.0.0.1', port: 5173 },
  preview: { host: '127.0.0.1', port: 4173 },
  build: { target: 'es2022', sourcemap: true },
})
