// Types of sigcast's Node.js client (src/index.js); the messages' types are generated.
import type { Code } from "@connectrpc/connect";
import type { Transport } from "@connectrpc/connect";
import type { Intent, Operation, OperationState } from "./gen/sigcast/v1/operation_pb.js";

export * from "./gen/sigcast/v1/operation_pb.js";
export { Code } from "@connectrpc/connect";

export declare const TERMINAL_STATES: ReadonlySet<OperationState>;

export declare class SigcastError extends Error {
  /** The gRPC status code (Code.AlreadyExists, ...; numerically gRPC's). */
  readonly code: Code;
  readonly rawMessage: string;
  /** ErrorInfo's reason (OP_ID_CONFLICT, POLICY_DENIED, CALLER_NOT_ALLOWED, CALLER_UNIDENTIFIED, STORE_FULL). */
  readonly reason: string | undefined;
  /** ErrorInfo's metadata (e.g. both intent fingerprints of a conflict). */
  readonly metadata: Record<string, string>;
  /** BadRequest's violations, each field by its path. */
  readonly violations: { field: string; description: string }[];
  /** Whether the same call may succeed later: the service was unavailable or too slow. */
  readonly retryable: boolean;
}

export interface RetryPolicy {
  attempts: number;
  initialBackoffMs: number;
  maxBackoffMs: number;
}

export declare const DEFAULT_RETRY: Readonly<RetryPolicy>;

export interface TlsFiles {
  /** PEM file of the CA the gateway's certificate chains to. */
  ca: string;
  /** This caller's certificate and key, for mutual TLS. */
  cert?: string;
  key?: string;
  /** When the address is not a name in the gateway's certificate. */
  serverName?: string;
}

export interface ClientOptions {
  tls?: TlsFiles;
  /** Each call's deadline. */
  timeoutMs?: number;
  retry?: RetryPolicy;
}

export declare class SigcastClient {
  constructor(address: string, options?: ClientOptions);
  readonly transport: Transport;
  timeoutMs: number;
  retry: RetryPolicy;
  submit(opId: string, intent: Intent): Promise<{ operation: Operation; replayed: boolean }>;
  get(opId: string): Promise<Operation>;
  cancel(opId: string): Promise<Operation>;
  list(filter?: { chain?: string; state?: OperationState; pageSize?: number }): AsyncGenerator<Operation>;
  watch(opId: string, options?: { timeoutMs?: number }): AsyncGenerator<Operation>;
  /** Closes the connection (an open one keeps the process alive). */
  close(): void;
}

export declare function evmTransfer(
  chainId: number | bigint,
  from: string,
  to: string,
  valueWei: string | bigint,
): Intent;

export declare function solanaTransfer(
  cluster: string,
  from: string,
  to: string,
  lamports: string | bigint,
): Intent;

export declare function deriveOpId(
  chain: string,
  sender: string,
  recipient: string,
  amount: string,
  reference: string,
): string;
