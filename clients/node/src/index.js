// sigcast's Node.js client. Every call has a deadline, and only calls that are safe to repeat
// are retried: a submit is retried with the same op_id (the service answers a replay, never a
// second effect); nothing here ever makes up an op_id. Refusals throw SigcastError with the
// gRPC code and the decoded google.rpc details: the ErrorInfo reason (OP_ID_CONFLICT,
// POLICY_DENIED, ...) and BadRequest's field violations.

import { readFileSync } from "node:fs";
import { createHash } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { bytesToHex } from "@noble/hashes/utils.js";
import bs58 from "bs58";
import { BadRequestSchema, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import {
  IntentSchema,
  OperationService,
  OperationState,
} from "./gen/sigcast/v1/operation_pb.js";

export * from "./gen/sigcast/v1/operation_pb.js";
export { Code } from "@connectrpc/connect";

/** The states after which nothing changes. */
export const TERMINAL_STATES = new Set([
  OperationState.CONFIRMED,
  OperationState.REJECTED,
  OperationState.CANCELLED,
]);

/** A call the service refused or could not answer. */
export class SigcastError extends Error {
  constructor(code, message, reason, metadata, violations) {
    super(`${Code[code] ?? code}: ${message}`);
    this.name = "SigcastError";
    /** The gRPC status code (Code.AlreadyExists, ...; numerically gRPC's). */
    this.code = code;
    this.rawMessage = message;
    /** ErrorInfo's reason (OP_ID_CONFLICT, POLICY_DENIED, CALLER_NOT_ALLOWED, CALLER_UNIDENTIFIED, STORE_FULL). */
    this.reason = reason;
    /** ErrorInfo's metadata (e.g. both intent fingerprints of a conflict). */
    this.metadata = metadata;
    /** BadRequest's violations: [{ field, description }], each field by its path. */
    this.violations = violations;
  }

  /** Whether the same call may succeed later: the service was unavailable or too slow. */
  get retryable() {
    return this.code === Code.Unavailable || this.code === Code.DeadlineExceeded;
  }
}

function toSigcastError(error) {
  const connect = ConnectError.from(error);
  const [info] = connect.findDetails(ErrorInfoSchema);
  const [badRequest] = connect.findDetails(BadRequestSchema);
  return new SigcastError(
    connect.code,
    connect.rawMessage,
    info?.reason,
    info ? { ...info.metadata } : {},
    (badRequest?.fieldViolations ?? []).map((v) => ({ field: v.field, description: v.description })),
  );
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Default retry policy: 5 attempts, waits doubling from 100 ms to 2 s, with jitter. */
export const DEFAULT_RETRY = Object.freeze({ attempts: 5, initialBackoffMs: 100, maxBackoffMs: 2000 });

function* delays(retry) {
  let delay = retry.initialBackoffMs;
  for (let i = 1; i < retry.attempts; i++) {
    yield Math.random() * delay;
    delay = Math.min(delay * 2, retry.maxBackoffMs);
  }
}

export class SigcastClient {
  /**
   * A client of the gateway at `address` (host:port). Without `tls` the channel is plaintext
   * (a development gateway on loopback); with it, `tls.ca` (PEM file of the CA the gateway's
   * certificate chains to), `tls.cert` and `tls.key` (this caller's, for mutual TLS) and
   * `tls.serverName` when the address is not a name in the gateway's certificate.
   */
  constructor(address, { tls, timeoutMs = 10_000, retry = DEFAULT_RETRY } = {}) {
    const nodeOptions = tls
      ? {
          ca: readFileSync(tls.ca),
          cert: tls.cert ? readFileSync(tls.cert) : undefined,
          key: tls.key ? readFileSync(tls.key) : undefined,
          servername: tls.serverName,
        }
      : {};
    const baseUrl = `${tls ? "https" : "http"}://${address}`;
    // Our own session manager, so close() can end the HTTP/2 connection (an open one keeps
    // the process alive).
    // HTTP/2 pings every 30 s while a call is open: a connection that died without a word (a
    // watch waiting on a half-open one) fails within 40 s, and the watch opens it again.
    this.sessions = new Http2SessionManager(
      baseUrl,
      { pingIntervalMs: 30_000, pingTimeoutMs: 10_000 },
      nodeOptions,
    );
    this.transport = createGrpcTransport({ baseUrl, sessionManager: this.sessions });
    this.client = createClient(OperationService, this.transport);
    this.timeoutMs = timeoutMs;
    this.retry = retry;
  }

  /** Closes the connection; calls made afterwards open a new one. */
  close() {
    this.sessions.abort();
  }

  /** Runs `call` with the deadline, again while the service is unavailable (see retry). */
  async #call(call) {
    const waits = delays(this.retry);
    for (;;) {
      try {
        return await call({ timeoutMs: this.timeoutMs });
      } catch (raw) {
        const error = toSigcastError(raw);
        const wait = error.retryable ? waits.next() : { done: true };
        if (wait.done) throw error;
        await sleep(wait.value);
      }
    }
  }

  /**
   * Records `intent` under `opId`; the same op_id and intent again answers the stored
   * operation with `replayed` set. A different intent under the op_id throws SigcastError
   * with code AlreadyExists and reason OP_ID_CONFLICT, changing nothing.
   */
  async submit(opId, intent) {
    const answer = await this.#call((options) =>
      this.client.submitOperation({ opId, intent }, options),
    );
    return { operation: answer.operation, replayed: answer.replayed };
  }

  /** The stored operation; NotFound if there is none (or it is another caller's). */
  async get(opId) {
    return (await this.#call((options) => this.client.getOperation({ opId }, options))).operation;
  }

  /** Cancels an unsigned operation, or asks for an on-chain cancel of a signed one. */
  async cancel(opId) {
    return (await this.#call((options) => this.client.cancelOperation({ opId }, options)))
      .operation;
  }

  /** Every operation matching the filters, page by page. */
  async *list({ chain = "", state = OperationState.UNSPECIFIED, pageSize = 100 } = {}) {
    let pageToken = "";
    do {
      const page = await this.#call((options) =>
        this.client.listOperations({ chain, state, pageSize, pageToken }, options),
      );
      yield* page.operations;
      pageToken = page.nextPageToken;
    } while (pageToken);
  }

  /**
   * The operation now and after each change, until it is terminal. A stream the service
   * drops is opened again: it starts from the current state, and a revision already seen is
   * not yielded twice; the retry budget starts again after each change. `timeoutMs` bounds
   * the watch.
   */
  async *watch(opId, { timeoutMs } = {}) {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    let waits = delays(this.retry);
    let seen = -1n;
    for (;;) {
      // Our own timer for the watch's deadline, cleared when the watch ends (connect's
      // timeoutMs timer outlives a stream ended early and keeps the process alive).
      const abort = new AbortController();
      const timer =
        deadline === undefined
          ? undefined
          : setTimeout(() => abort.abort(), Math.max(deadline - Date.now(), 1));
      try {
        for await (const update of this.client.watchOperation({ opId }, { signal: abort.signal })) {
          const operation = update.operation;
          if (operation.revision <= seen) continue;
          seen = operation.revision;
          waits = delays(this.retry);
          yield operation;
          if (TERMINAL_STATES.has(operation.state)) return;
        }
        return;
      } catch (raw) {
        const expired = deadline !== undefined && Date.now() >= deadline;
        const error = expired
          ? new SigcastError(Code.DeadlineExceeded, "the watch's deadline passed", undefined, {}, [])
          : toSigcastError(raw);
        const wait = !expired && error.retryable ? waits.next() : { done: true };
        if (wait.done) throw error;
        await sleep(wait.value);
      } finally {
        clearTimeout(timer);
      }
    }
  }
}

/** A native-currency transfer on an EVM chain (amounts as decimal strings: they exceed 2^53). */
export function evmTransfer(chainId, from, to, valueWei) {
  return create(IntentSchema, {
    kind: { case: "evmTransfer", value: { chainId: BigInt(chainId), from, to, valueWei: String(valueWei) } },
  });
}

/** A SOL transfer on a configured cluster ("localnet", "devnet", ...). */
export function solanaTransfer(cluster, from, to, lamports) {
  return create(IntentSchema, {
    kind: { case: "solanaTransfer", value: { cluster, from, to, lamports: String(lamports) } },
  });
}

const U64_MAX = (1n << 64n) - 1n;
const U256_MAX = (1n << 256n) - 1n;

function canonicalDecimal(text, unit, max) {
  if (!/^[0-9]+$/.test(text ?? "")) {
    throw new RangeError(`amount: must be a whole number of ${unit}, digits 0-9 only (got ${JSON.stringify(text)})`);
  }
  const value = BigInt(text);
  if (value > max) throw new RangeError(`amount: must not exceed ${max} ${unit}`);
  return value.toString();
}

function evmAddress(text, field) {
  if (!/^0x[0-9a-fA-F]{40}$/.test(text ?? "")) {
    throw new RangeError(`${field}: must be 0x followed by 40 hex digits (got ${JSON.stringify(text)})`);
  }
  const lower = text.slice(2).toLowerCase();
  const hash = bytesToHex(keccak_256(new TextEncoder().encode(lower)));
  const checksummed =
    "0x" +
    [...lower].map((c, i) => (/[a-f]/.test(c) && parseInt(hash[i], 16) >= 8 ? c.toUpperCase() : c)).join("");
  const digits = text.slice(2);
  if (digits !== digits.toLowerCase() && digits !== digits.toUpperCase() && text !== checksummed) {
    throw new RangeError(`${field}: has an invalid EIP-55 checksum (check the letter case)`);
  }
  return checksummed;
}

function solanaPubkey(text, field) {
  let raw;
  try {
    raw = bs58.decode(text);
  } catch {
    raw = new Uint8Array();
  }
  if (!text || text.length > 44 || raw.length !== 32) {
    throw new RangeError(`${field}: must be a base58 public key of 32 bytes (got ${JSON.stringify(text)})`);
  }
  return bs58.encode(raw);
}

/**
 * The recommended op_id for a business payment, as `sigcast derive-op-id` computes it: `sc1-`
 * and the SHA-256 of the chain (`eip155:<id>` or `solana:<cluster>`), sender, recipient,
 * amount (wei or lamports, decimal) and your own reference, each normalized and
 * length-prefixed. The same payment, however spelled, gives one op_id, so a caller that
 * crashes and retries lands on the same operation instead of paying twice.
 */
export function deriveOpId(chain, sender, recipient, amount, reference) {
  if (!reference) {
    throw new RangeError("reference: must not be empty: it is what tells two equal payments apart");
  }
  const colon = chain.indexOf(":");
  const [kind, name] = colon < 0 ? [chain, ""] : [chain.slice(0, colon), chain.slice(colon + 1)];
  if (kind === "eip155" && /^\+?[0-9]+$/.test(name) && BigInt(name) <= U64_MAX) {
    chain = `eip155:${BigInt(name)}`;
    sender = evmAddress(sender, "sender");
    recipient = evmAddress(recipient, "recipient");
    amount = canonicalDecimal(amount, "wei", U256_MAX);
  } else if (kind === "solana" && name) {
    sender = solanaPubkey(sender, "sender");
    recipient = solanaPubkey(recipient, "recipient");
    amount = canonicalDecimal(amount, "lamports", U64_MAX);
  } else {
    throw new RangeError(`chain: must be eip155:<chain id> or solana:<cluster> (got ${JSON.stringify(chain)})`);
  }
  const hash = createHash("sha256").update("sigcast.op_id.v1");
  for (const part of [chain, sender, recipient, amount, reference]) {
    const bytes = Buffer.from(part, "utf8");
    const length = Buffer.alloc(8);
    length.writeBigUInt64BE(BigInt(bytes.length));
    hash.update(length).update(bytes);
  }
  return `sc1-${hash.digest("hex")}`;
}
