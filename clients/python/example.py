"""sigcast from Python: submit a transfer, submit it again (a replay), watch it to the end.

Stubs are generated from the project's proto/ (the one definition of every message):

    python -m grpc_tools.protoc -I proto --python_out=OUT --grpc_python_out=OUT \
        proto/sigcast/v1/operation.proto

Usage: example.py GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI  (generated stubs on PYTHONPATH)
"""

import sys

import grpc
from sigcast.v1 import operation_pb2 as pb
from sigcast.v1 import operation_pb2_grpc as rpc

TERMINAL = {pb.OPERATION_STATE_CONFIRMED, pb.OPERATION_STATE_REJECTED, pb.OPERATION_STATE_CANCELLED}


def main(address, op_id, sender, recipient, value_wei):
    with grpc.insecure_channel(address) as channel:
        operations = rpc.OperationServiceStub(channel)
        request = pb.SubmitOperationRequest(
            op_id=op_id,
            intent=pb.Intent(
                evm_transfer=pb.EvmTransfer(chain_id=31337, to=recipient, value_wei=value_wei, **{"from": sender})
            ),
        )
        first = operations.SubmitOperation(request)
        print("submitted", first.operation.op_id, pb.OperationState.Name(first.operation.state), "replayed:", first.replayed)
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
