import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { FileJournal, MemoryJournal } from '../src/store/journal.ts'

const path = (): string => join(mkdtempSync(join(tmpdir(), 'stead-journal-')), 'blocks.journal')
const bytes = (n: number, fill: number): Uint8Array => new Uint8Array(n).fill(fill)
const list = (records: Uint8Array[]): number[][] => records.map((r) => [r.length, r[0] as number])
/** A journal at a new path holding three records of 100 bytes, filled with 1, 2 and 3. */
const threeRecords = async (): Promise<{ p: string; j: FileJournal }> => {
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
    j.append(bytes(10, 1))
    j.append(bytes(3000, 2))
    j.append(bytes(1, 3))
    // Each record: 12 bytes of header and its body.
    expect(j.size).toBe(3 * 12 + 3011)
    await j.close()
    const again = new FileJournal(p, 64 * 1024)
    expect(list(again.recovered())).toEqual([[10, 1], [3000, 2], [1, 3]])
    expect(again.size).toBe(3 * 12 + 3011)
    // Appends go on after what it found.
    again.append(bytes(5, 4))
    await again.close()
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[10, 1], [3000, 2], [1, 3], [5, 4]])
  })

  it('after a drop, gives back only what was appended since, also across reopens with nothing appended, and when older records are left behind', async () => {
    const { p, j } = await threeRecords()
    j.drop()
    expect(j.size).toBe(0)
    j.append(bytes(50, 4))
    expect(j.size).toBe(62)
    await j.close()
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[50, 4]])
    const k = new FileJournal(p, 64 * 1024)
    k.drop()
    await k.close()
    // Reopened twice with nothing new: the numbers go on from the drop, so no older record of the
    // same shape can pass for the next one.
    expect(new FileJournal(p, 64 * 1024).recovered()).toEqual([])
    const l = new FileJournal(p, 64 * 1024)
    l.append(bytes(100, 5))
    await l.close()
    expect(list(new FileJournal(p, 64 * 1024).recovered())).toEqual([[100, 5]])
  })

  it('stops at a torn record, and at one whose bytes changed', async () => {
    const { p, j } = await threeRecords()
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
  it('gives a restarted process what the one before appended and did not drop', () => {
    const j = new MemoryJournal([bytes(1, 1)])
    j.append(bytes(1, 2))
    expect(list(new MemoryJournal(j.survivors()).recovered())).toEqual([[1, 1], [1, 2]])
    j.drop()
    j.append(bytes(1, 3))
    expect(list(new MemoryJournal(j.survivors()).recovered())).toEqual([[1, 3]])
  })
})
