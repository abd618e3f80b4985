import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OperationState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_STATE_UNSPECIFIED: _ClassVar[OperationState]
    OPERATION_STATE_RECEIVED: _ClassVar[OperationState]
    OPERATION_STATE_SIGNED: _ClassVar[OperationState]
    OPERATION_STATE_SENT: _ClassVar[OperationState]
    OPERATION_STATE_CONFIRMED: _ClassVar[OperationState]
    OPERATION_STATE_REJECTED: _ClassVar[OperationState]
    OPERATION_STATE_CANCELLED: _ClassVar[OperationState]

class AttemptOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_OUTCOME_UNSPECIFIED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_PENDING: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_ACCEPTED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_REJECTED: _ClassVar[AttemptOutcome]
    ATTEMPT_OUTCOME_UNKNOWN: _ClassVar[AttemptOutcome]

class ExecutionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_STATUS_UNSPECIFIED: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_SUCCESS: _ClassVar[ExecutionStatus]
    EXECUTION_STATUS_FAILED: _ClassVar[ExecutionStatus]
OPERATION_STATE_UNSPECIFIED: OperationState
OPERATION_STATE_RECEIVED: OperationState
OPERATION_STATE_SIGNED: OperationState
OPERATION_STATE_SENT: OperationState
OPERATION_STATE_CONFIRMED: OperationState
OPERATION_STATE_REJECTED: OperationState
OPERATION_STATE_CANCELLED: OperationState
ATTEMPT_OUTCOME_UNSPECIFIED: AttemptOutcome
ATTEMPT_OUTCOME_PENDING: AttemptOutcome
ATTEMPT_OUTCOME_ACCEPTED: AttemptOutcome
ATTEMPT_OUTCOME_REJECTED: AttemptOutcome
ATTEMPT_OUTCOME_UNKNOWN: AttemptOutcome
EXECUTION_STATUS_UNSPECIFIED: ExecutionStatus
EXECUTION_STATUS_SUCCESS: ExecutionStatus
EXECUTION_STATUS_FAILED: ExecutionStatus

class Intent(_message.Message):
    __slots__ = ("evm_transfer", "evm_contract_call", "solana_transfer", "solana_instructions")
    EVM_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    EVM_CONTRACT_CALL_FIELD_NUMBER: _ClassVar[int]
    SOLANA_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    SOLANA_INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    evm_transfer: EvmTransfer
    evm_contract_call: EvmContractCall
    solana_transfer: SolanaTransfer
    solana_instructions: SolanaInstructions
    def __init__(self, evm_transfer: _Optional[_Union[EvmTransfer, _Mapping]] = ..., evm_contract_call: _Optional[_Union[EvmContractCall, _Mapping]] = ..., solana_transfer: _Optional[_Union[SolanaTransfer, _Mapping]] = ..., solana_instructions: _Optional[_Union[SolanaInstructions, _Mapping]] = ...) -> None: ...

class EvmTransfer(_message.Message):
    __slots__ = ("chain_id", "to", "value_wei")
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    VALUE_WEI_FIELD_NUMBER: _ClassVar[int]
    chain_id: int
    to: str
    value_wei: str
    def __init__(self, chain_id: _Optional[int] = ..., to: _Optional[str] = ..., value_wei: _Optional[str] = ..., **kwargs) -> None: ...

class EvmContractCall(_message.Message):
    __slots__ = ("chain_id", "to", "data", "value_wei", "gas_limit")
    CHAIN_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    VALUE_WEI_FIELD_NUMBER: _ClassVar[int]
    GAS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    chain_id: int
    to: str
    data: bytes
    value_wei: str
    gas_limit: int
    def __init__(self, chain_id: _Optional[int] = ..., to: _Optional[str] = ..., data: _Optional[bytes] = ..., value_wei: _Optional[str] = ..., gas_limit: _Optional[int] = ..., **kwargs) -> None: ...

class SolanaTransfer(_message.Message):
    __slots__ = ("cluster", "to", "lamports")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FROM_FIELD_NUMBER: _ClassVar[int]
    TO_FIELD_NUMBER: _ClassVar[int]
    LAMPORTS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    to: str
    lamports: str
    def __init__(self, cluster: _Optional[str] = ..., to: _Optional[str] = ..., lamports: _Optional[str] = ..., **kwargs) -> None: ...

class SolanaInstructions(_message.Message):
    __slots__ = ("cluster", "fee_payer", "instructions")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FEE_PAYER_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    fee_payer: str
    instructions: _containers.RepeatedCompositeFieldContainer[SolanaInstruction]
    def __init__(self, cluster: _Optional[str] = ..., fee_payer: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[SolanaInstruction, _Mapping]]] = ...) -> None: ...

class SolanaInstruction(_message.Message):
    __slots__ = ("program_id", "accounts", "data")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    ACCOUNTS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    accounts: _containers.RepeatedCompositeFieldContainer[SolanaAccountMeta]
    data: bytes
    def __init__(self, program_id: _Optional[str] = ..., accounts: _Optional[_Iterable[_Union[SolanaAccountMeta, _Mapping]]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SolanaAccountMeta(_message.Message):
    __slots__ = ("pubkey", "is_signer", "is_writable")
    PUBKEY_FIELD_NUMBER: _ClassVar[int]
    IS_SIGNER_FIELD_NUMBER: _ClassVar[int]
    IS_WRITABLE_FIELD_NUMBER: _ClassVar[int]
    pubkey: str
    is_signer: bool
    is_writable: bool
    def __init__(self, pubkey: _Optional[str] = ..., is_signer: _Optional[bool] = ..., is_writable: _Optional[bool] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "tx_id", "endpoint", "outcome", "send_time", "outcome_time", "reason", "sends", "last_send_time", "may_land", "fee_cap_time", "max_fee_per_gas")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TX_ID_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_TIME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SENDS_FIELD_NUMBER: _ClassVar[int]
    LAST_SEND_TIME_FIELD_NUMBER: _ClassVar[int]
    MAY_LAND_FIELD_NUMBER: _ClassVar[int]
    FEE_CAP_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_FEE_PER_GAS_FIELD_NUMBER: _ClassVar[int]
    number: int
    tx_id: str
    endpoint: str
    outcome: AttemptOutcome
    send_time: _timestamp_pb2.Timestamp
    outcome_time: _timestamp_pb2.Timestamp
    reason: str
    sends: int
    last_send_time: _timestamp_pb2.Timestamp
    may_land: bool
    fee_cap_time: _timestamp_pb2.Timestamp
    max_fee_per_gas: str
    def __init__(self, number: _Optional[int] = ..., tx_id: _Optional[str] = ..., endpoint: _Optional[str] = ..., outcome: _Optional[_Union[AttemptOutcome, str]] = ..., send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., outcome_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., reason: _Optional[str] = ..., sends: _Optional[int] = ..., last_send_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., may_land: _Optional[bool] = ..., fee_cap_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_fee_per_gas: _Optional[str] = ...) -> None: ...

class EvmSigning(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: int
    def __init__(self, nonce: _Optional[int] = ...) -> None: ...

class SolanaSigning(_message.Message):
    __slots__ = ("blockhash", "last_valid_block_height", "nonce_account", "signing_slot")
    BLOCKHASH_FIELD_NUMBER: _ClassVar[int]
    LAST_VALID_BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    NONCE_ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    SIGNING_SLOT_FIELD_NUMBER: _ClassVar[int]
    blockhash: str
    last_valid_block_height: int
    nonce_account: str
    signing_slot: int
    def __init__(self, blockhash: _Optional[str] = ..., last_valid_block_height: _Optional[int] = ..., nonce_account: _Optional[str] = ..., signing_slot: _Optional[int] = ...) -> None: ...

class TerminalResult(_message.Message):
    __slots__ = ("tx_id", "block_number", "block_hash", "execution_status")
    TX_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    EXECUTION_STATUS_FIELD_NUMBER: _ClassVar[int]
    tx_id: str
    block_number: int
    block_hash: str
    execution_status: ExecutionStatus
    def __init__(self, tx_id: _Optional[str] = ..., block_number: _Optional[int] = ..., block_hash: _Optional[str] = ..., execution_status: _Optional[_Union[ExecutionStatus, str]] = ...) -> None: ...

class Evidence(_message.Message):
    __slots__ = ("endpoint", "read_time", "head", "tx_id", "block_number", "block_hash", "last_valid_block_height", "first_available_slot", "signing_slot", "nonce_value", "commitment", "nonce_slot", "height_slot", "statuses_slot")
    ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    READ_TIME_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    TX_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    LAST_VALID_BLOCK_HEIGHT_FIELD_NUMBER: _ClassVar[int]
    FIRST_AVAILABLE_SLOT_FIELD_NUMBER: _ClassVar[int]
    SIGNING_SLOT_FIELD_NUMBER: _ClassVar[int]
    NONCE_VALUE_FIELD_NUMBER: _ClassVar[int]
    COMMITMENT_FIELD_NUMBER: _ClassVar[int]
    NONCE_SLOT_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_SLOT_FIELD_NUMBER: _ClassVar[int]
    STATUSES_SLOT_FIELD_NUMBER: _ClassVar[int]
    endpoint: str
    read_time: _timestamp_pb2.Timestamp
    head: int
    tx_id: str
    block_number: int
    block_hash: str
    last_valid_block_height: int
    first_available_slot: int
    signing_slot: int
    nonce_value: str
    commitment: str
    nonce_slot: int
    height_slot: int
    statuses_slot: int
    def __init__(self, endpoint: _Optional[str] = ..., read_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., head: _Optional[int] = ..., tx_id: _Optional[str] = ..., block_number: _Optional[int] = ..., block_hash: _Optional[str] = ..., last_valid_block_height: _Optional[int] = ..., first_available_slot: _Optional[int] = ..., signing_slot: _Optional[int] = ..., nonce_value: _Optional[str] = ..., commitment: _Optional[str] = ..., nonce_slot: _Optional[int] = ..., height_slot: _Optional[int] = ..., statuses_slot: _Optional[int] = ...) -> None: ...

class OperationError(_message.Message):
    __slots__ = ("reason", "message")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reason: str
    message: str
    def __init__(self, reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Operation(_message.Message):
    __slots__ = ("op_id", "intent", "intent_fingerprint", "state", "chain", "account", "create_time", "update_time", "evm", "solana", "attempts", "result", "error", "cancel_requested", "revision", "evidence", "caller")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    INTENT_FINGERPRINT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EVM_FIELD_NUMBER: _ClassVar[int]
    SOLANA_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    CALLER_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    intent: Intent
    intent_fingerprint: str
    state: OperationState
    chain: str
    account: str
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    evm: EvmSigning
    solana: SolanaSigning
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    result: TerminalResult
    error: OperationError
    cancel_requested: bool
    revision: int
    evidence: Evidence
    caller: str
    def __init__(self, op_id: _Optional[str] = ..., intent: _Optional[_Union[Intent, _Mapping]] = ..., intent_fingerprint: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., chain: _Optional[str] = ..., account: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., evm: _Optional[_Union[EvmSigning, _Mapping]] = ..., solana: _Optional[_Union[SolanaSigning, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., result: _Optional[_Union[TerminalResult, _Mapping]] = ..., error: _Optional[_Union[OperationError, _Mapping]] = ..., cancel_requested: _Optional[bool] = ..., revision: _Optional[int] = ..., evidence: _Optional[_Union[Evidence, _Mapping]] = ..., caller: _Optional[str] = ...) -> None: ...

class SubmitOperationRequest(_message.Message):
    __slots__ = ("op_id", "intent")
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    INTENT_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    intent: Intent
    def __init__(self, op_id: _Optional[str] = ..., intent: _Optional[_Union[Intent, _Mapping]] = ...) -> None: ...

class SubmitOperationResponse(_message.Message):
    __slots__ = ("operation", "replayed")
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    replayed: bool
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ..., replayed: _Optional[bool] = ...) -> None: ...

class GetOperationRequest(_message.Message):
    __slots__ = ("op_id",)
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    def __init__(self, op_id: _Optional[str] = ...) -> None: ...

class GetOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class WatchOperationRequest(_message.Message):
    __slots__ = ("op_id",)
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    def __init__(self, op_id: _Optional[str] = ...) -> None: ...

class WatchOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...

class ListOperationsRequest(_message.Message):
    __slots__ = ("chain", "account", "state", "page_size", "page_token")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    ACCOUNT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    chain: str
    account: str
    state: OperationState
    page_size: int
    page_token: str
    def __init__(self, chain: _Optional[str] = ..., account: _Optional[str] = ..., state: _Optional[_Union[OperationState, str]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListOperationsResponse(_message.Message):
    __slots__ = ("operations", "next_page_token")
    OPERATIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    operations: _containers.RepeatedCompositeFieldContainer[Operation]
    next_page_token: str
    def __init__(self, operations: _Optional[_Iterable[_Union[Operation, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelOperationRequest(_message.Message):
    __slots__ = ("op_id",)
    OP_ID_FIELD_NUMBER: _ClassVar[int]
    op_id: str
    def __init__(self, op_id: _Optional[str] = ...) -> None: ...

class CancelOperationResponse(_message.Message):
    __slots__ = ("operation",)
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    operation: Operation
    def __init__(self, operation: _Optional[_Union[Operation, _Mapping]] = ...) -> None: ...
