/**
 * Misbehaviours a relay can be made to show, for the simulator and for
 * `stead-relay --byzantine`: the honest core runs underneath and these
 * rewrite what it sends. They exist to prove the protocol tolerates them.
 * (A module of its own so the CLI can list them without loading the protocol.)
 */
export const BYZANTINE_STRATEGIES = ['equivocate', 'withhold-block', 'blame-leader', 'bad-signature', 'unknown-ancestors', 'invalid-ancestors', 'flood', 'forged-envelopes', 'silent', 'flood-sync', 'flood-fetch', 'flood-asks', 'flood-wake', 'flood-blocks', 'split-refusal', 'vote-anything'] as const
export type ByzantineStrategy = (typeof BYZANTINE_STRATEGIES)[number]
