import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// The workspace packages are TypeScript sources (no build step); Vite compiles them like app code.
export default defineConfig({
  plugins: [react()],
  server: { host: '127.0.0.1', port: 5173 },
  preview: { host: '127.0.0.1', port: 4173 },
  build: { target: 'es2022', sourcemap: true },
})
