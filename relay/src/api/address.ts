/**
 * Who a connection counts as for per-address limits: the IPv4 address, or
 * the /64 an IPv6 address is in (one host usually holds a whole /64).
 */
export function addressKey(remote: string | undefined): string {
  if (!remote) return 'unknown'
  const v4 = /^(?:::ffff:)?(\d+\.\d+\.\d+\.\d+)$/i.exec(remote)
  if (v4) return v4[1] as string
  if (!remote.includes(':')) return remote
  // Expand '::' to find the first four groups.
  const [head = '', tail = ''] = remote.split('::')
  const left = head ? head.split(':') : []
  const right = tail ? tail.split(':') : []
  const groups = remote.includes('::') ? [...left, ...Array(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right] : left
  return `${groups.slice(0, 4).map((g) => g.toLowerCase().replace(/^0+(?=.)/, '')).join(':')}::/64`
}
