/** The shared treasury's accounts and the poll's options: fixed for the demo. */
export const ACCOUNTS = [
  { id: 'main', key: 'acct:main', name: 'Main' },
  { id: 'travel', key: 'acct:travel', name: 'Travel' },
  { id: 'equipment', key: 'acct:equipment', name: 'Equipment' },
] as const

export type AccountId = (typeof ACCOUNTS)[number]['id']

/** Petty cash: a Bounded Counter between 0 and 500, spent from rights each user holds. */
export const CASH_KEY = 'cash:petty'
export const CASH = { min: 0, max: 500, initial: 200 } as const

/** Every balance is a PN-Counter that the audit never lets go below zero. */
export const BALANCE = { min: 0 } as const

export const POLL = {
  question: 'Where should the team offsite be?',
  options: [
    { id: 'lisbon', label: 'Lisbon' },
    { id: 'kyoto', label: 'Kyoto' },
    { id: 'oaxaca', label: 'Oaxaca' },
  ],
} as const

export const pollKey = (option: string) => `poll:${option}`

export const LIST_KEY = 'list:todo'
