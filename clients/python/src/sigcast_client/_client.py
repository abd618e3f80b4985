"""The client: deadlines on every call, retries only where repeating a call is safe."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Optional, TypeVar

import grpc
from sigcast.v1 import operation_pb2 as pb
from sigcast.v1 import operation_pb2_grpc as rpc

from ._errors import SigcastError, from_rpc_error

T = TypeVar("T")

_TERMINAL = {pb.OPERATION_STATE_CONFIRMED, pb.OPERATION_STATE_REJECTED, pb.OPERATION_STATE_CANCELLED}

# HTTP/2 pings while a call is open: a connection that died without a word (a watch waiting on
# a half-open one) fails within 40 s, and the watch opens it again.
_KEEPALIVE = (("grpc.keepalive_time_ms", 30_000), ("grpc.keepalive_timeout_ms", 10_000))


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for TLS to the gateway: the CA its certificate chains to, and for mutual TLS
    this caller's certificate and key. `server_name` when the address is not a name in the
    gateway's certificate."""

    ca: str
    cert: Optional[str] = None
    key: Optional[str] = None
    server_name: Optional[str] = None


@dataclass(frozen=True)
class RetryPolicy:
    """How often a call the service could not answer is tried again: `attempts` in all, waits
    doubling from `initial_backoff` to `max_backoff` (seconds), with jitter.

    Only UNAVAILABLE and DEADLINE_EXCEEDED are retried, and only because every call here is
    safe to repeat: a submit carries the caller's op_id, so a repeat is answered as a replay
    (never a second effect); get, watch and list read; a cancel is a replay once done. A
    refusal (INVALID_ARGUMENT, ALREADY_EXISTS, PERMISSION_DENIED, ...) is never retried."""

    attempts: int = 5
    initial_backoff: float = 0.1
    max_backoff: float = 2.0

    def delays(self) -> Iterator[float]:
        delay = self.initial_backoff
        for _ in range(self.attempts - 1):
            yield random.uniform(0, delay)
            delay = min(delay * 2, self.max_backoff)


@dataclass(frozen=True)
class Submitted:
    """What a submit answered: the stored operation, and whether it was already there."""

    operation: pb.Operation
    replayed: bool


class Client:
    """A client of a sigcast gateway at `target` (host:port). Without `tls` the channel is
    plaintext (a development gateway on loopback). `timeout` (seconds) is each call's
    deadline."""

    def __init__(
        self,
        target: str,
        *,
        tls: Optional[TlsFiles] = None,
        timeout: float = 10.0,
        retry: RetryPolicy = RetryPolicy(),
    ):
        if tls is None:
            self._channel = grpc.insecure_channel(target, options=list(_KEEPALIVE))
        else:
            def read(path: Optional[str]) -> Optional[bytes]:
                if path is None:
                    return None
                with open(path, "rb") as f:
                    return f.read()

            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(tls.ca),
                private_key=read(tls.key),
                certificate_chain=read(tls.cert),
            )
            options = list(_KEEPALIVE)
            if tls.server_name:
                options.append(("grpc.ssl_target_name_override", tls.server_name))
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = rpc.OperationServiceStub(self._channel)
        self.timeout = timeout
        self.retry = retry

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _call(self, call: Callable[[], T]) -> T:
        delays = self.retry.delays()
        while True:
            try:
                return call()
            except grpc.RpcError as raw:
                error = from_rpc_error(raw)
                delay = next(delays, None) if error.retryable else None
                if delay is None:
                    raise error from None
                time.sleep(delay)

    def submit(self, op_id: str, intent: pb.Intent) -> Submitted:
        """Records `intent` under `op_id`; the same op_id and intent again answers the stored
        operation with `replayed` set. Raises OpIdConflict if op_id names another intent."""
        request = pb.SubmitOperationRequest(op_id=op_id, intent=intent)
        answer = self._call(lambda: self._stub.SubmitOperation(request, timeout=self.timeout))
        return Submitted(answer.operation, answer.replayed)

    def get(self, op_id: str) -> pb.Operation:
        """The stored operation; NotFound if there is none (or it is another caller's)."""
        request = pb.GetOperationRequest(op_id=op_id)
        return self._call(lambda: self._stub.GetOperation(request, timeout=self.timeout)).operation

    def cancel(self, op_id: str) -> pb.Operation:
        """Cancels an unsigned operation, or asks for an on-chain cancel of a signed one."""
        request = pb.CancelOperationRequest(op_id=op_id)
        return self._call(lambda: self._stub.CancelOperation(request, timeout=self.timeout)).operation

    def list(self, chain: str = "", state: int = 0, page_size: int = 100) -> Iterator[pb.Operation]:
        """Every operation matching the filters, page by page."""
        token = ""
        while True:
            request = pb.ListOperationsRequest(
                chain=chain, state=state, page_size=page_size, page_token=token
            )
            page = self._call(lambda: self._stub.ListOperations(request, timeout=self.timeout))
            yield from page.operations
            token = page.next_page_token
            if not token:
                return

    def watch(self, op_id: str, timeout: Optional[float] = None) -> Iterator[pb.Operation]:
        """The operation now and after each change, until it is terminal. A stream the service
        drops is opened again: it starts from the current state, and a revision already seen is
        not yielded twice; the retry budget starts again after each change. `timeout` bounds
        the whole watch."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delays = self.retry.delays()
        request = pb.WatchOperationRequest(op_id=op_id)
        seen = -1
        while True:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.001)
            try:
                for update in self._stub.WatchOperation(request, timeout=left):
                    operation = update.operation
                    if operation.revision <= seen:
                        continue
                    seen = operation.revision
                    delays = self.retry.delays()
                    yield operation
                    if operation.state in _TERMINAL:
                        return
                return
            except grpc.RpcError as raw:
                error = from_rpc_error(raw)
                expired = deadline is not None and time.monotonic() >= deadline
                delay = None if expired or not error.retryable else next(delays, None)
                if delay is None:
                    raise error from None
                time.sleep(delay)


__all__ = ["Client", "RetryPolicy", "SigcastError", "Submitted", "TlsFiles"]
