import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FileJournal, MemoryJournal } from '../src/journal.ts'

const path = (): string => join(mkdtempSync(join(tmpdir(), 'stead-journal-')), 'blocks.journal')
const bytes = (n: number, fill: number): Uint8Array => new Uint8Array(n).fill(fill)
const list = (records: Uint8Array[]): number[][] => records.map((r) => [r.length, r[0] as number])
/** A journal at a new path holding three records of 100 bytes, filled with 1, 2 and 3. */
const threeRecords = (): { p: string; j: FileJournal } => {
  const p = path()
  const j = new FileJournal(p, 64 * 1024)
  for (const fill of [1, 2, 3]) j.append(bytes(100, fill))
  return { p, j }
}

describe('the file journal', () => {
  it('gives back, after a reopen, what was appended, in order; a new file is filled to its capacity', async () => {
    const p = path()
    const j = new FileJournal(p, 64 * 1024)
    expect(statSync(p).size).toBe(64 * 1024)
    expect(j.recovered()).toEqual([])
    // Opened in this boot of the machine: nothing lost to a restart of it.
    expect(j.rebooted).toBe(false)
    j.append(bytes(10, 1))
    j.append(bytes(3000, 2))
    j.append(bytes(1, 3))
    await j.close()
    const again = new FileJournal(p, 64 * 1024)
    expect(list(again.recovered())).toEqual([[10, 1], [3000, 2], [1, 3]])
    // Appends go on after what it found.
    expect(again.rebooted).toBe(false)
    again.append(bytes(5, 4))
    await again.close()
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[10, 1], [3000, 2], [1, 3], [5, 4]])
  })

  it('after a drop, gives back only what was appended since, also when older and longer records are left behind it', async () => {
    const { p, j } = threeRecords()
    j.drop()
    j.append(bytes(50, 4))
    await j.close()
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[50, 4]])
    const k = new FileJournal(p, 64 * 1024)
    k.drop()
    await k.close()
    expect(new FileJournal(p, 64 * 1024).recovered()).toEqual([])
  })

  it('stops at a torn record, and at one whose bytes changed', async () => {
    const { p, j } = threeRecords()
    await j.close()
    const file = readFileSync(p)
    // The third record's body half written (a crash in the middle of the write).
    const torn = Buffer.from(file)
    torn.fill(0, 2 * 112 + 12 + 50, 3 * 112)
    writeFileSync(p, torn)
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[100, 1], [100, 2]])
    // The first record's body changed: nothing after it is trusted either.
    const flipped = Buffer.from(file)
    flipped[12 + 7] = 9
    writeFileSync(p, flipped)
    expect(new FileJournal(p, 64 * 1024).recovered()).toEqual([])
  })

  it('grows past its capacity rather than losing a record', async () => {
    const p = path()
    const j = new FileJournal(p, 1024)
    j.append(bytes(3000, 7))
    await j.close()
    expect(list(new FileJournal(p, 1024).recovered())).toEqual([[3000, 7]])
  })
})

describe('the memory journal', () => {
  it('keeps what its process appended, and through a power loss only what it found when opened', () => {
    const j = new MemoryJournal([bytes(1, 1)])
    j.append(bytes(1, 2))
    j.append(bytes(1, 3))
    expect(list(j.survivors())).toEqual([[1, 1], [1, 2], [1, 3]])
    j.powerLoss()
    const after = new MemoryJournal(j.survivors(), true)
    expect(list(after.recovered())).toEqual([[1, 1]])
    expect(after.rebooted).toBe(true)
  })
})

describe('a file journal after a restart of the machine', () => {
  it('says so when the boot it was last opened in is not this one', async () => {
    const p = path()
    await new FileJournal(p, 4096).close()
    writeFileSync(`${p}.boot`, 'another boot')
    const j = new FileJournal(p, 4096)
    expect(j.rebooted).toBe(true)
    await j.close()
    // Recorded: the next open is in the same boot.
    expect(new FileJournal(p, 4096).rebooted).toBe(false)
  })
})

