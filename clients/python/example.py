"""sigcast from Python with the sigcast-client package: submit a transfer, submit it again (a
replay), watch it to the end.

Usage: example.py GATEWAY_ADDRESS OP_ID FROM TO VALUE_WEI   (the package installed, or
clients/python/src on PYTHONPATH)

Against a gateway with mutual TLS, name the PEM files in the environment: SIGCAST_TLS_CA (the CA
the gateway's certificate chains to), SIGCAST_TLS_CERT and SIGCAST_TLS_KEY (this caller's
certificate and key), and SIGCAST_TLS_SERVER_NAME when the address is not a name in the
gateway's certificate. Without them the channel is plaintext (a development gateway on
loopback).
"""

import os
import sys

import sigcast_client as sc
from sigcast_client import pb


def main(address, op_id, sender, recipient, value_wei):
    tls = None
    if os.environ.get("SIGCAST_TLS_CA"):
        tls = sc.TlsFiles(
            ca=os.environ["SIGCAST_TLS_CA"],
            cert=os.environ.get("SIGCAST_TLS_CERT"),
            key=os.environ.get("SIGCAST_TLS_KEY"),
            server_name=os.environ.get("SIGCAST_TLS_SERVER_NAME"),
        )
    with sc.Client(address, tls=tls) as client:
        intent = sc.evm_transfer(31337, sender, recipient, value_wei)
        first = client.submit(op_id, intent)
        state = pb.OperationState.Name(first.operation.state)
        print("submitted", first.operation.op_id, state, "replayed:", first.replayed)
        print("caller:", first.operation.caller or "(none)")
        print("submitted again, replayed:", client.submit(op_id, intent).replayed)
        for operation in client.watch(op_id, timeout=120):
            print("state", pb.OperationState.Name(operation.state))
            if operation.state in sc.TERMINAL_STATES:
                result = operation.result
                print("terminal", pb.OperationState.Name(operation.state), "tx", result.tx_id,
                      "block", result.block_number)
                return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:6]))
