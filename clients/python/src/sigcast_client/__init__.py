"""sigcast's Python client.

    from sigcast_client import Client, derive_op_id, evm_transfer

    with Client("127.0.0.1:50051") as sigcast:
        op_id = derive_op_id("eip155:1", sender, recipient, "1000", reference="invoice-42")
        submitted = sigcast.submit(op_id, evm_transfer(1, sender, recipient, "1000"))
        for operation in sigcast.watch(op_id):
            ...

Every call has a deadline, and only calls that are safe to repeat are retried: a submit is
retried with the same op_id (the service answers a replay, never a second effect); nothing here
ever makes up an op_id. Refusals raise `SigcastError` (or a subclass) with the status code and
the decoded `google.rpc` details: the ErrorInfo reason (OP_ID_CONFLICT, POLICY_DENIED, ...) and
BadRequest's field violations.
"""

from sigcast.v1 import operation_pb2 as pb

from ._client import Client, RetryPolicy, Submitted, TlsFiles
from ._errors import (
    CallerNotAllowed,
    CallerUnidentified,
    InvalidArgument,
    NotFound,
    OpIdConflict,
    PolicyDenied,
    SigcastError,
    StoreFull,
)
from ._intents import evm_transfer, solana_transfer
from ._op_id import derive_op_id

TERMINAL_STATES = frozenset(
    {pb.OPERATION_STATE_CONFIRMED, pb.OPERATION_STATE_REJECTED, pb.OPERATION_STATE_CANCELLED}
)

__all__ = [
    "CallerNotAllowed",
    "CallerUnidentified",
    "Client",
    "InvalidArgument",
    "NotFound",
    "OpIdConflict",
    "PolicyDenied",
    "RetryPolicy",
    "SigcastError",
    "StoreFull",
    "Submitted",
    "TERMINAL_STATES",
    "TlsFiles",
    "derive_op_id",
    "evm_transfer",
    "pb",
    "solana_transfer",
]
