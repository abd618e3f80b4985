// sigcast from Node.js: submit a transfer, submit it again (a replay), watch it to the end.
// The client is generated at run time from the project's proto/ by @grpc/proto-loader.
//
// Usage: node example.js GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI
//
// Against a gateway with mutual TLS, name the PEM files in the environment: SIGCAST_TLS_CA (the
// CA the gateway's certificate chains to), SIGCAST_TLS_CERT and SIGCAST_TLS_KEY (this caller's
// certificate and key), and SIGCAST_TLS_SERVER_NAME when the address is not a name in the
// gateway's certificate. Without them the channel is plaintext (a development gateway on
// loopback).
'use strict';

const fs = require('node:fs');
const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.join(__dirname, '..', '..', 'proto');
const TERMINAL = new Set(['OPERATION_STATE_CONFIRMED', 'OPERATION_STATE_REJECTED', 'OPERATION_STATE_CANCELLED']);

function call(client, method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, (error, response) => (error ? reject(error) : resolve(response))));
}

function credentials() {
  const { SIGCAST_TLS_CA, SIGCAST_TLS_CERT, SIGCAST_TLS_KEY, SIGCAST_TLS_SERVER_NAME } = process.env;
  if (!SIGCAST_TLS_CA) {
    return { creds: grpc.credentials.createInsecure(), options: {} };
  }
  const creds = grpc.credentials.createSsl(
    fs.readFileSync(SIGCAST_TLS_CA),
    fs.readFileSync(SIGCAST_TLS_KEY),
    fs.readFileSync(SIGCAST_TLS_CERT),
  );
  const options = SIGCAST_TLS_SERVER_NAME
    ? { 'grpc.ssl_target_name_override': SIGCAST_TLS_SERVER_NAME, 'grpc.default_authority': SIGCAST_TLS_SERVER_NAME }
    : {};
  return { creds, options };
}

async function main([address, opId, from, to, valueWei]) {
  const definition = protoLoader.loadSync(path.join(PROTO_ROOT, 'sigcast/v1/operation.proto'), {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
  });
  const { sigcast } = grpc.loadPackageDefinition(definition);
  const { creds, options } = credentials();
  const client = new sigcast.v1.OperationService(address, creds, options);
  const request = { op_id: opId, intent: { evm_transfer: { chain_id: 31337, from, to, value_wei: valueWei } } };

  const first = await call(client, 'SubmitOperation', request);
  console.log('submitted', first.operation.op_id, first.operation.state, 'replayed:', first.replayed);
  console.log('caller:', first.operation.caller || '(none)');
  const again = await call(client, 'SubmitOperation', request);
  console.log('submitted again, replayed:', again.replayed);

  const deadline = new Date(Date.now() + 120000);
  const stream = client.WatchOperation({ op_id: opId }, { deadline });
  return new Promise((resolve, reject) => {
    stream.on('data', ({ operation }) => {
      console.log('state', operation.state);
      if (TERMINAL.has(operation.state)) {
        console.log('terminal', operation.state, 'tx', operation.result.tx_id, 'block', operation.result.block_number);
        stream.cancel();
        resolve(0);
      }
    });
    stream.on('error', (error) => (error.code === grpc.status.CANCELLED ? resolve(0) : reject(error)));
    stream.on('end', () => resolve(1));
  });
}

main(process.argv.slice(2)).then((code) => process.exit(code), (error) => {
  console.error(error.message);
  process.exit(1);
});
