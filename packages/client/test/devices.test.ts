/**
 * A user's devices: a client holding the user's key certifies another
 * client's key; that device then acts for the user in every space (its
 * role, its reads), until the user revokes it in a space. Real relays in
 * simulated time.
 */
import type { ErrorReason } from '@stead/core'
import { describe, expect, it } from 'vitest'
import { failure, people } from './helpers/people.ts'

const { cluster, person } = people()
const rejected = (reason: ErrorReason) => ({ status: 'rejected', reason, detail: expect.any(String) })

describe('devices', () => {
  it("a certified phone writes and reads as its user; revoked, its next write is refused everywhere, its earlier one stands, and the user's laptop goes on", async () => {
    const c = await cluster()
    const alice = await person(c, 1)
    const laptop = await person(c, 2)
    // The phone starts as a user of its own; the laptop (holding the user's key) certifies it, and the phone starts again with the certificate.
    const fresh = await person(c, 3)
    const token = await laptop.certifyDevice(fresh.publicKey)
    expect(token).toMatch(/^stead-device:/)
    await fresh.close()
    const phone = await person(c, 3, { deviceCertificate: token })
    expect(phone.userId).toBe(laptop.userId)
    expect(phone.authorId).not.toBe(laptop.authorId)

    const team = await alice.createSpace('team', { writers: [laptop.userId] })
    await c.until('team created', () => team.members.stable !== undefined || undefined)
    const onPhone = await phone.space('team')
    await c.until('the phone reads the team space', () => onPhone.members.stable !== undefined || undefined)
    expect(onPhone.members.myRole).toBe('writer')
    expect((await onPhone.counter('n').increment(1, { safe: true })).status).toBe('committed')

    // A device may not revoke devices (it may be the lost one); the user's key may.
    expect(await onPhone.members.revokeDevice(phone.authorId)).toEqual(rejected('unauthorized'))
    const onLaptop = await laptop.space('team')
    await c.until('the laptop reads the team space', () => onLaptop.members.stable !== undefined || undefined)
    expect((await onLaptop.members.revokeDevice(phone.authorId)).status).toBe('committed')
    const onAlice = await alice.space('team')
    await c.until('alice sees the revocation', () => onAlice.members.stable?.revokedDevices[laptop.userId]?.includes(phone.authorId) || undefined)

    // The relays no longer serve the space to the phone, and say why.
    await c.until('the phone is told it may not read', () => onPhone.status.problem?.includes('may not read') || undefined)
    expect(await onPhone.counter('n').increment(10, { safe: true })).toEqual(rejected('unauthorized'))
    expect((await onLaptop.counter('n').increment(100, { safe: true })).status).toBe('committed')
    await c.until('alice has it all', () => onAlice.counter('n').stable === 101 || undefined)
  })

  it('refuses a certificate of another key, a device certifying, and a malformed token, with reasons', async () => {
    const c = await cluster()
    const laptop = await person(c, 2)
    const other = await person(c, 4)
    const token = await laptop.certifyDevice(other.publicKey)
    const wrong = await failure(person(c, 5, { deviceCertificate: token }))
    expect(wrong.reason).toBe('unauthorized')
    expect(wrong.message).toMatch(/certifies key .* not this client's/)
    expect((await failure(person(c, 6, { deviceCertificate: 'stead-device:AAAA' }))).reason).toBe('malformed')
    await other.close()
    const device = await person(c, 4, { deviceCertificate: token })
    const third = await person(c, 7)
    expect((await failure(device.certifyDevice(third.publicKey))).reason).toBe('unsupported')
    expect((await failure(laptop.certifyDevice(laptop.publicKey))).reason).toBe('malformed')
    expect((await failure(laptop.certifyDevice('not a key'))).reason).toBe('malformed')
  })
})
