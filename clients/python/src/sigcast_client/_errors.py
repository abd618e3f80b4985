"""Refusals of the service, with the google.rpc details its error contract carries."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


class SigcastError(Exception):
    """A call the service refused or could not answer.

    `code` is the gRPC status code, `message` the service's message, `reason` and `metadata`
    the ErrorInfo detail (e.g. OP_ID_CONFLICT with both intent fingerprints), `violations`
    BadRequest's (field path, description) pairs.
    """

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        reason: Optional[str] = None,
        metadata: Optional[Dict[str, str]] = None,
        violations: Optional[List[Tuple[str, str]]] = None,
    ):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        self.reason = reason
        self.metadata = metadata or {}
        self.violations = violations or []

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed later (the service was unavailable)."""
        return self.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)


class InvalidArgument(SigcastError):
    """A field breaks its rule; `violations` names each by its path."""


class OpIdConflict(SigcastError):
    """The op_id names another intent (ALREADY_EXISTS, OP_ID_CONFLICT): nothing was changed."""


class PolicyDenied(SigcastError):
    """The key's policy forbids the intent (PERMISSION_DENIED, POLICY_DENIED)."""


class CallerNotAllowed(SigcastError):
    """This caller may not use the key (PERMISSION_DENIED, CALLER_NOT_ALLOWED)."""


class CallerUnidentified(SigcastError):
    """The call named no caller where the gateway authenticates callers (UNAUTHENTICATED,
    CALLER_UNIDENTIFIED): present a client certificate, or come through the mesh's sidecar."""


class NotFound(SigcastError):
    """No such operation (or another caller's)."""


class StoreFull(SigcastError):
    """The service's store is out of space (UNAVAILABLE, STORE_FULL): retry later."""


_BY_REASON = {
    "OP_ID_CONFLICT": OpIdConflict,
    "POLICY_DENIED": PolicyDenied,
    "CALLER_NOT_ALLOWED": CallerNotAllowed,
    "CALLER_UNIDENTIFIED": CallerUnidentified,
    "STORE_FULL": StoreFull,
}
_BY_CODE = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: OpIdConflict,
}


def from_rpc_error(error: grpc.RpcError) -> SigcastError:
    """The SigcastError of a failed call, its details decoded."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = error.details() if hasattr(error, "details") else str(error)
    reason, metadata, violations = None, {}, []
    try:
        status = rpc_status.from_call(error) if hasattr(error, "trailing_metadata") else None
    except ValueError:
        # Details whose status disagrees with the call's (a proxy rewrote the message):
        # the code and message stand alone.
        status = None
    for detail in status.details if status is not None else []:
        info = error_details_pb2.ErrorInfo()
        bad_request = error_details_pb2.BadRequest()
        if detail.Unpack(info):
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Unpack(bad_request):
            violations = [(v.field, v.description) for v in bad_request.field_violations]
    kind = _BY_REASON.get(reason) or _BY_CODE.get(code) or SigcastError
    return kind(code, message or "", reason, metadata, violations)
