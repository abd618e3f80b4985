// The package against a live gateway (tests/e2e/clients.rs starts one and runs this with
// `node --test`). Environment as for the Python package's tests: SIGCAST_GATEWAY, SIGCAST_FROM,
// SIGCAST_TO, SIGCAST_CLI, SIGCAST_RUN.

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createServer } from "node:net";
import { create } from "@bufbuild/protobuf";
import {
  Code,
  ExecutionStatus,
  IntentSchema,
  OperationState,
  SigcastClient,
  SigcastError,
  deriveOpId,
  evmTransfer,
} from "@sigcast/client";

const { SIGCAST_GATEWAY: GATEWAY, SIGCAST_FROM: FROM, SIGCAST_TO: TO, SIGCAST_RUN: RUN } = process.env;
const SOL_A = "oeYf6KAJkLYhBuR8CiGc6L4D4Xtfepr85fuDgA9kq96";
const SOL_B = "AqynRZwvVqUPRwRJXvm6odUb3t93fDjnWe3p6BeuUFxD";

const cliOpId = (chain, from, to, amount, reference) =>
  execFileSync(process.env.SIGCAST_CLI, [
    "derive-op-id", "--chain", chain, "--from", from, "--to", to, "--amount", amount, "--reference", reference,
  ]).toString().trim();

async function refusal(promise) {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof SigcastError, `${error}`);
    return error;
  }
  assert.fail("the call succeeded");
}

test("deriveOpId agrees with the service for every spelling", () => {
  const cases = [
    ["eip155:1", FROM, TO, "1000000000000000000", "invoice-2026-0001"],
    ["eip155:01", FROM.toLowerCase(), "0x" + TO.slice(2).toUpperCase(), "007", "r"],
    ["eip155:31337", FROM, TO, ((1n << 256n) - 1n).toString(), "max"],
    ["solana:localnet", SOL_A, SOL_B, "0", "payout-9"],
    ["solana:devnet", SOL_B, SOL_A, "18446744073709551615", "r"],
    ["eip155:+0001", FROM, TO, "0".repeat(5000) + "7", "padded"],
  ];
  for (const c of cases) assert.equal(deriveOpId(...c), cliOpId(...c), c.join(" "));
  assert.equal(deriveOpId(...cases[0]), "sc1-0a528abe818a551b5179fb6160145bed7deabda8c3d9f1fb7fb17a822d2c0fce");
  for (const bad of [
    ["eip155:1", FROM.slice(0, -1), TO, "1", "r"],
    ["eip155:1", FROM, TO, "-1", "r"],
    ["eip155:1", FROM, TO, "1.5", "r"],
    ["eip155:1", FROM, TO, (1n << 256n).toString(), "r"],
    ["eip155:1", "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92267", TO, "1", "r"],
    ["solana:localnet", SOL_A + "1", SOL_B, "1", "r"],
    ["solana:localnet", SOL_A + " \n", SOL_B, "1", "r"],
    ["btc:1", FROM, TO, "1", "r"],
    ["eip155:1", FROM, TO, "1", ""],
  ]) {
    assert.throws(() => deriveOpId(...bad), RangeError, bad.join(" "));
  }
});

test("submit, replay, and watch to CONFIRMED", async () => {
  const client = new SigcastClient(GATEWAY);
  const opId = deriveOpId("eip155:31337", FROM, TO, "4321", `${RUN}-pay`);
  const intent = evmTransfer(31337, FROM, TO, "4321");
  assert.equal((await client.submit(opId, intent)).replayed, false);
  assert.equal((await client.submit(opId, intent)).replayed, true);
  const states = [];
  for await (const op of client.watch(opId, { timeoutMs: 120_000 })) states.push(op.state);
  assert.equal(states.at(-1), OperationState.CONFIRMED, states.join(","));
  assert.equal((await client.get(opId)).result.executionStatus, ExecutionStatus.SUCCESS);
  const listed = [];
  for await (const op of client.list({ chain: "eip155:31337", pageSize: 1 })) listed.push(op.opId);
  assert.ok(listed.includes(opId));
  client.close();
});

test("an op_id of another intent is a conflict with both fingerprints", async () => {
  const client = new SigcastClient(GATEWAY);
  const opId = `${RUN}-conflict`;
  await client.submit(opId, evmTransfer(31337, FROM, TO, "1"));
  const error = await refusal(client.submit(opId, evmTransfer(31337, FROM, TO, "2")));
  assert.equal(error.code, Code.AlreadyExists);
  assert.equal(error.reason, "OP_ID_CONFLICT");
  assert.equal(error.metadata.op_id, opId);
  assert.notEqual(error.metadata.stored_fingerprint, error.metadata.submitted_fingerprint);
  assert.ok(error.metadata.stored_fingerprint, JSON.stringify(error.metadata));
  assert.equal(error.retryable, false);
});

test("a bad field is named", async () => {
  const client = new SigcastClient(GATEWAY);
  const error = await refusal(client.submit(`${RUN}-bad`, evmTransfer(31337, FROM, "0x12", "1")));
  assert.equal(error.code, Code.InvalidArgument);
  assert.deepEqual(error.violations.map((v) => v.field), ["intent.evm_transfer.to"]);
  assert.equal((await refusal(client.get(`${RUN}-bad`))).code, Code.NotFound);
  client.close();
});

test("a co-signer the policy does not name is POLICY_DENIED", async () => {
  const client = new SigcastClient(GATEWAY);
  const intent = create(IntentSchema, {
    kind: {
      case: "solanaInstructions",
      value: {
        cluster: "localnet",
        feePayer: SOL_A,
        instructions: [
          {
            programId: "11111111111111111111111111111111",
            accounts: [{ pubkey: SOL_B, isSigner: true, isWritable: true }],
            data: new Uint8Array([2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0]),
          },
        ],
      },
    },
  });
  const error = await refusal(client.submit(`${RUN}-cosigner`, intent));
  assert.equal(error.code, Code.PermissionDenied);
  assert.equal(error.reason, "POLICY_DENIED");
  client.close();
});

test("only an unavailable service is retried", async () => {
  const down = new SigcastClient("127.0.0.1:1", {
    timeoutMs: 2000,
    retry: { attempts: 3, initialBackoffMs: 10, maxBackoffMs: 20 },
  });
  let attempts = 0;
  const get = down.client.getOperation.bind(down.client);
  down.client = { ...down.client, getOperation: (...args) => (attempts++, get(...args)) };
  assert.equal((await refusal(down.get("x"))).code, Code.Unavailable);
  assert.equal(attempts, 3);

  const live = new SigcastClient(GATEWAY);
  attempts = 0;
  const liveGet = live.client.getOperation.bind(live.client);
  live.client = { ...live.client, getOperation: (...args) => (attempts++, liveGet(...args)) };
  assert.equal((await refusal(live.get(`${RUN}-missing`))).code, Code.NotFound);
  assert.equal(attempts, 1, "a refusal is answered at once");
  down.close();
  live.close();
});

test("every call has a deadline", async () => {
  // A peer that takes the connection and never answers: only the client's own deadline can
  // end the call. (Against the gateway a near-zero deadline races the server's answer.)
  const silent = createServer(() => {});
  await new Promise((resolve) => silent.listen(0, "127.0.0.1", resolve));
  const hurried = new SigcastClient(`127.0.0.1:${silent.address().port}`, {
    timeoutMs: 500,
    retry: { attempts: 1, initialBackoffMs: 1, maxBackoffMs: 1 },
  });
  const started = Date.now();
  assert.equal((await refusal(hurried.get(`${RUN}-anything`))).code, Code.DeadlineExceeded);
  assert.ok(Date.now() - started < 5000, "ended by the 500 ms deadline");
  hurried.close();
  silent.close();
  silent.unref();
});
