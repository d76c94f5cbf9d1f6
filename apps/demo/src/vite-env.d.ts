/// <reference types="vite/client" />

interface ImportMetaEnv {
  /** Comma-separated relay URLs (ws://host:port), set by `npm run dev`. */
  readonly VITE_STEAD_RELAYS?: string
  /** The cluster descriptor to pin (JSON: { f, relays: [{ id, publicKey }] }), set by `npm run dev`; without it the client trusts the relays on first use. */
  readonly VITE_STEAD_CLUSTER?: string
  /** A short fingerprint of the dev cluster, so a browser never reuses data pinned to an older cluster. */
  readonly VITE_STEAD_CLUSTER_TAG?: string
}
