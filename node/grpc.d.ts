// liblb/grpc: the `liblb` load-balancing policy for @grpc/grpc-js 1.14 (docs/grpc.md).
import type { Metadata } from '@grpc/grpc-js'
import type { Balancer, Outcome } from './index'

/** The policy's name in a service config: `loadBalancingConfig: [{ liblb: { ... } }]`. */
export declare const TYPE_NAME: 'liblb'

/** The `liblb` object of a service config's `loadBalancingConfig` entry. */
export interface LiblbLoadBalancingConfig {
  /** The liblb algorithm (default 'round_robin'). */
  algorithm?: string
  /** Balancer options by name, as `new Balancer(algorithm, nodes, options)` takes them. */
  options?: Record<string, number | string | boolean>
  /** The metadata entry whose first value keys each call, for the keyed algorithms. */
  keyMetadata?: string
  /** A name to find the channel's balancer by (`balancer(name)`). */
  name?: string
}

/** Registers the `liblb` policy with grpc-js (idempotent). */
export declare function register(): void

/** The balancer of the channel whose config has `name` (the latest made), if any. */
export declare function balancer(name: string): Balancer | undefined

/**
 * What a call's status means for its node: a lease outcome, or null for CANCELLED (nothing to
 * count).
 */
export declare function outcomeOf(code: number, metadata?: Metadata): Outcome | null

/**
 * The ORCA load report in a call's trailing metadata, as `parseOrca` takes it: the value of
 * `endpoint-load-metrics-bin` (gRFC A51, the serialized report) if present, else of
 * `endpoint-load-metrics` (Envoy's `BIN `/`JSON `/`TEXT ` header value); undefined if neither.
 * The policy hands it to each call's lease; one that does not parse is dropped.
 */
export declare function loadOf(metadata?: Metadata): string | Buffer | undefined
