// sigcast from Node.js: submit a transfer, submit it again (a replay), watch it to the end.
// The client is generated at run time from the project's proto/ by @grpc/proto-loader.
//
// Usage: node example.js GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.join(__dirname, '..', '..', 'proto');
const TERMINAL = new Set(['OPERATION_STATE_CONFIRMED', 'OPERATION_STATE_REJECTED', 'OPERATION_STATE_CANCELLED']);

function call(client, method, request) {
  return new Promise((resolve, reject) =>
    client[method](request, (error, response) => (error ? reject(error) : resolve(response))));
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
  const client = new sigcast.v1.OperationService(address, grpc.credentials.createInsecure());
  const request = { op_id: opId, intent: { evm_transfer: { chain_id: 31337, from, to, value_wei: valueWei } } };

  const first = await call(client, 'SubmitOperation', request);
  console.log('submitted', first.operation.op_id, first.operation.state, 'replayed:', first.replayed);
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
