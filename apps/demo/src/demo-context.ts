import { createContext, useContext, useSyncExternalStore } from 'react'
import type { SteadClient } from '@stead/client'
import type { DemoConfig } from './config.ts'
import type { Operation, OperationLog } from './operations.ts'

export interface Demo {
  readonly config: DemoConfig
  readonly log: OperationLog
  /** This page's client: for spaces besides the demo's own (the team page). */
  readonly client: SteadClient
}

export const DemoContext = createContext<Demo | null>(null)

export function useDemo(): Demo {
  const demo = useContext(DemoContext)
  if (!demo) throw new Error('useDemo outside <DemoContext.Provider>')
  return demo
}

/** This tab's operations, newest first. */
export function useOperations(): readonly Operation[] {
  const { log } = useDemo()
  return useSyncExternalStore(log.subscribe, () => log.list)
}

/** Parses a positive whole amount, or returns null. */
export function parseAmount(text: string): number | null {
  if (!/^\s*\d+\s*$/.test(text)) return null
  const n = Number(text)
  return Number.isSafeInteger(n) && n > 0 ? n : null
}
