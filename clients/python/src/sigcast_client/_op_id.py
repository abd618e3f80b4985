"""The recommended op_id for a business payment, as `sigcast derive-op-id` and
`sigcast_domain::derive_op_id` compute it: the same payment, however spelled, gives one op_id,
so a caller that crashes and retries lands on the same operation instead of paying twice."""

from __future__ import annotations

import hashlib
import re

import base58
from Crypto.Hash import keccak

_U256_MAX = 2**256 - 1
_U64_MAX = 2**64 - 1


def _canonical_digits(text: str, maximum: int) -> "str | None":
    """`text` (ASCII digits only) without its leading zeros, or None if over `maximum`.
    Compared by length first: int() refuses strings of thousands of digits."""
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(maximum)) or int(digits) > maximum:
        return None
    return digits


def _canonical_decimal(text: str, unit: str, maximum: int) -> str:
    if not re.fullmatch(r"[0-9]+", text or ""):
        raise ValueError(f"amount: must be a whole number of {unit}, digits 0-9 only (got {text!r})")
    digits = _canonical_digits(text, maximum)
    if digits is None:
        raise ValueError(f"amount: must not exceed {maximum} {unit}")
    return digits


def _evm_address(text: str, field: str) -> str:
    if not re.fullmatch(r"0x[0-9a-fA-F]{40}", text or ""):
        raise ValueError(f"{field}: must be 0x followed by 40 hex digits (got {text!r})")
    lower = text[2:].lower()
    digest = keccak.new(digest_bits=256, data=lower.encode()).hexdigest()
    checksummed = "0x" + "".join(
        c.upper() if c.isalpha() and int(digest[i], 16) >= 8 else c for i, c in enumerate(lower)
    )
    digits = text[2:]
    if digits != digits.lower() and digits != digits.upper() and text != checksummed:
        raise ValueError(f"{field}: has an invalid EIP-55 checksum (check the letter case)")
    return checksummed


def _solana_pubkey(text: str, field: str) -> str:
    # The alphabet checked first: the decoder forgives surrounding whitespace, the service
    # does not.
    raw = b""
    if re.fullmatch(r"[1-9A-HJ-NP-Za-km-z]{1,44}", text or ""):
        raw = base58.b58decode(text)
    if len(raw) != 32:
        raise ValueError(f"{field}: must be a base58 public key of 32 bytes (got {text!r})")
    return base58.b58encode(raw).decode()


def derive_op_id(chain: str, sender: str, recipient: str, amount: str, reference: str) -> str:
    """`sc1-` and the SHA-256 of the chain (`eip155:<id>` or `solana:<cluster>`), sender,
    recipient, amount (wei or lamports, decimal) and your own reference, each normalized
    (EIP-55 addresses, canonical base58 and decimals) and length-prefixed."""
    if not reference:
        raise ValueError("reference: must not be empty: it is what tells two equal payments apart")
    kind, _, name = chain.partition(":")
    chain_id = _canonical_digits(name.removeprefix("+"), _U64_MAX) if re.fullmatch(r"\+?[0-9]+", name) else None
    if kind == "eip155" and chain_id is not None:
        chain = f"eip155:{chain_id}"
        sender, recipient = _evm_address(sender, "sender"), _evm_address(recipient, "recipient")
        amount = _canonical_decimal(amount, "wei", _U256_MAX)
    elif kind == "solana" and name:
        sender, recipient = _solana_pubkey(sender, "sender"), _solana_pubkey(recipient, "recipient")
        amount = _canonical_decimal(amount, "lamports", _U64_MAX)
    else:
        raise ValueError(f"chain: must be eip155:<chain id> or solana:<cluster> (got {chain!r})")
    digest = hashlib.sha256(b"sigcast.op_id.v1")
    for part in (chain, sender, recipient, amount, reference):
        encoded = part.encode()
        digest.update(len(encoded).to_bytes(8, "big"))
        digest.update(encoded)
    return "sc1-" + digest.hexdigest()
