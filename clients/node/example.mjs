// sigcast from Node.js with the @sigcast/client package: submit a transfer, submit it again
// (a replay), watch it to the end.
//
// Usage: node example.mjs GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI   (the package installed)
//
// Against a gateway with mutual TLS, name the PEM files in the environment: SIGCAST_TLS_CA (the
// CA the gateway's certificate chains to), SIGCAST_TLS_CERT and SIGCAST_TLS_KEY (this caller's
// certificate and key), and SIGCAST_TLS_SERVER_NAME when the address is not a name in the
// gateway's certificate. Without them the channel is plaintext (a development gateway on
// loopback).

import { Code, OperationState, SigcastClient, TERMINAL_STATES, evmTransfer } from "@sigcast/client";

const [address, opId, from, to, valueWei] = process.argv.slice(2);
const { SIGCAST_TLS_CA, SIGCAST_TLS_CERT, SIGCAST_TLS_KEY, SIGCAST_TLS_SERVER_NAME } = process.env;
const tls = SIGCAST_TLS_CA
  ? { ca: SIGCAST_TLS_CA, cert: SIGCAST_TLS_CERT, key: SIGCAST_TLS_KEY, serverName: SIGCAST_TLS_SERVER_NAME }
  : undefined;
const client = new SigcastClient(address, { tls });
try {
  const intent = evmTransfer(31337, from, to, valueWei);
  const first = await client.submit(opId, intent);
  console.log("submitted", first.operation.opId, OperationState[first.operation.state], "replayed:", first.replayed);
  console.log("caller:", first.operation.caller || "(none)");
  console.log("submitted again, replayed:", (await client.submit(opId, intent)).replayed);
  for await (const operation of client.watch(opId, { timeoutMs: 120_000 })) {
    console.log("state", OperationState[operation.state]);
    if (TERMINAL_STATES.has(operation.state)) {
      const { txId, blockNumber } = operation.result;
      console.log("terminal", OperationState[operation.state], "tx", txId, "block", String(blockNumber));
    }
  }
} catch (error) {
  console.error(Code[error.code] ?? "", error.message);
  process.exitCode = 1;
} finally {
  client.close();
}
