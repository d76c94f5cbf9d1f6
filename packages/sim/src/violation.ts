/** A checker found a broken guarantee: the run fails with its step and message. */
export class Violation extends Error {}
