"""sigcast from Python: submit a transfer, submit it again (a replay), watch it to the end.

Stubs are generated from the project's proto/ (the one definition of every message):

    python -m grpc_tools.protoc -I proto --python_out=OUT --grpc_python_out=OUT \
        proto/sigcast/v1/operation.proto

Usage: example.py GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI  (generated stubs on PYTHONPATH)

Against a gateway with mutual TLS, name the PEM files in the environment: SIGCAST_TLS_CA (the CA
the gateway's certificate chains to), SIGCAST_TLS_CERT and SIGCAST_TLS_KEY (this caller's
certificate and key), and SIGCAST_TLS_SERVER_NAME when the address is not a name in the
gateway's certificate. Without them the channel is plaintext (a development gateway on
loopback).
"""

import os
import sys

import grpc
from sigcast.v1 import operation_pb2 as pb
from sigcast.v1 import operation_pb2_grpc as rpc

TERMINAL = {pb.OPERATION_STATE_CONFIRMED, pb.OPERATION_STATE_REJECTED, pb.OPERATION_STATE_CANCELLED}


def channel_to(address):
    ca = os.environ.get("SIGCAST_TLS_CA")
    if not ca:
        return grpc.insecure_channel(address)

    def read(variable):
        with open(os.environ[variable], "rb") as f:
            return f.read()

    credentials = grpc.ssl_channel_credentials(
        root_certificates=read("SIGCAST_TLS_CA"),
        private_key=read("SIGCAST_TLS_KEY"),
        certificate_chain=read("SIGCAST_TLS_CERT"),
    )
    options = []
    if os.environ.get("SIGCAST_TLS_SERVER_NAME"):
        options.append(("grpc.ssl_target_name_override", os.environ["SIGCAST_TLS_SERVER_NAME"]))
    return grpc.secure_channel(address, credentials, options=options)


def main(address, op_id, sender, recipient, value_wei):
    with channel_to(address) as channel:
        operations = rpc.OperationServiceStub(channel)
        request = pb.SubmitOperationRequest(
            op_id=op_id,
            intent=pb.Intent(
                evm_transfer=pb.EvmTransfer(chain_id=31337, to=recipient, value_wei=value_wei, **{"from": sender})
            ),
        )
        first = operations.SubmitOperation(request)
        print("submitted", first.operation.op_id, pb.OperationState.Name(first.operation.state), "replayed:", first.replayed)
        print("caller:", first.operation.caller or "(none)")
        again = operations.SubmitOperation(request)
        print("submitted again, replayed:", again.replayed)
        for update in operations.WatchOperation(pb.WatchOperationRequest(op_id=op_id), timeout=120):
            state = update.operation.state
            print("state", pb.OperationState.Name(state))
            if state in TERMINAL:
                result = update.operation.result
                print("terminal", pb.OperationState.Name(state), "tx", result.tx_id, "block", result.block_number)
                return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
