// ESM entry: `import { Balancer } from 'liblb'`. The native addon is loaded once, through the
// generated CommonJS loader (index.js), so `require` and `import` share one module instance.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const binding = require('./index.js')

export const {
  AdaptiveThrottle,
  Balancer,
  Hedging,
  Lease,
  Request,
  RetryBudget,
  RetryThrottle,
  ServerLoad,
  ServerRequest,
  MAX_BATCH,
  MAX_BATCH_KEY_BYTES,
  algorithms,
  failureKinds,
  hashAlgorithms,
  keyedAlgorithms,
  noop,
  optionNames,
  parseOrca,
  stopReasons,
} = binding
export default binding
