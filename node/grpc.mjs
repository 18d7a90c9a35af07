// ESM entry of liblb/grpc: `import { register } from 'liblb/grpc'`. The same module instance as
// `require('liblb/grpc')`.
import { createRequire } from 'node:module'

const require = createRequire(import.meta.url)
const grpc = require('./grpc.js')

export const { register, balancer, loadOf, outcomeOf, TYPE_NAME } = grpc
export default grpc
