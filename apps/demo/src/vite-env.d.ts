/// <reference types="vite/client" />

interface ImportMetaEnv {
  /** Comma-separated relay URLs (ws://host:port), set by `npm run dev`. */
  readonly VITE_STEAD_RELAYS?: string
  /** A short fingerprint of the dev cluster, so a browser never reuses data pinned to an older cluster. */
  readonly VITE_STEAD_CLUSTER_TAG?: string
}
