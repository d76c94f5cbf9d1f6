import js from '@eslint/js'
import tseslint from 'typescript-eslint'

export default tseslint.config(
  { ignores: ['**/node_modules/**', '**/dist/**', '**/.stead/**', '**/.cache/**', '**/*.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-restricted-syntax': [
        'error',
        { selector: "CallExpression[callee.object.name='test'][callee.property.name='only']", message: 'no .only in committed tests' },
        { selector: "CallExpression[callee.object.name='it'][callee.property.name='only']", message: 'no .only in committed tests' },
        { selector: "CallExpression[callee.object.name='describe'][callee.property.name='only']", message: 'no .only in committed tests' },
      ],
    },
  },
  {
    // Cores are deterministic: time and randomness are injected, never read.
    files: ['packages/core/src/**/*.ts', 'relay/src/consensus/**/*.ts', 'packages/sim/src/simulation.ts', 'packages/sim/src/rng.ts', 'packages/sim/src/queue.ts'],
    // The platform's randomness and clock live here, for hosts to inject into the cores.
    ignores: ['packages/core/src/crypto/**', 'packages/core/src/time.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'inject time into core modules' },
        { object: 'Math', property: 'random', message: 'inject randomness into core modules' },
        { object: 'performance', property: 'now', message: 'inject time into core modules' },
      ],
    },
  },
)
