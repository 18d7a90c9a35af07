// ESM entry of liblb/undici: `import { interceptor } from 'liblb/undici'`. The same module
// instance as `require('liblb/undici')`.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const undici = require('./undici.js')

export const { interceptor, loadReport, outcome, retryAfterMs } = undici
export default undici
