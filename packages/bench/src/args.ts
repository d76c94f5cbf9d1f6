import { parseArgs, type ParseArgsConfig } from 'node:util'

type Options = NonNullable<ParseArgsConfig['options']>

/**
 * A report script's options: `--help` prints its usage; a misspelt option
 * or a missing value prints one line and the usage (exit 2), never a stack.
 */
export function reportArgs<O extends Options>(usage: string, options: O): ReturnType<typeof parseArgs<{ options: O }>>['values'] {
  const help = process.argv.includes('--help') || process.argv.includes('-h')
  if (help) {
    console.log(usage)
    process.exit(0)
  }
  try {
    return parseArgs({ options }).values
  } catch (err) {
    console.error(`${(err as Error).message}\n\n${usage}`)
    process.exit(2)
  }
}
