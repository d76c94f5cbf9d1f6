#!/usr/bin/env node
// A Stead relay (`stead-relay start ...`) with a V8 CPU profiler the benchmark switches on and
// off over the IPC channel, so the profile covers the measurement window and nothing else.
// Messages: {prof: 'start'}; {prof: 'stop', file: '/path/x.cpuprofile'} (answered with {prof: 'written'}).
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'
import process from 'node:process'

const session = new Session()
session.connect()
const post = (method, params = {}) => new Promise((ok, fail) => session.post(method, params, (err, res) => (err ? fail(err) : ok(res))))
process.on('message', async (m) => {
  if (m?.prof === 'start') {
    await post('Profiler.enable')
    await post('Profiler.setSamplingInterval', { interval: 500 })
    await post('Profiler.start')
  } else if (m?.prof === 'stop') {
    const { profile } = await post('Profiler.stop')
    writeFileSync(m.file, JSON.stringify(profile))
    process.send?.({ prof: 'written' })
  }
})
await import('../../../relay/bin/source.mjs')
await import('../../../relay/src/process/cli.ts')
