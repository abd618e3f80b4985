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


def _canonical_decimal(text: str, unit: str, maximum: int) -> str:
    if not re.fullmatch(r"[0-9]+", text or ""):
        raise ValueError(f"amount: must be a whole number of {unit}, digits 0-9 only (got {text!r})")
    if int(text) > maximum:
        raise ValueError(f"amount: must not exceed {maximum} {unit}")
    return str(int(text))


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
    try:
        raw = base58.b58decode(text)
    except ValueError:
        raw = b""
    if not text or len(text) > 44 or len(raw) != 32:
        raise ValueError(f"{field}: must be a base58 public key of 32 bytes (got {text!r})")
    return base58.b58encode(raw).decode()


def derive_op_id(chain: str, sender: str, recipient: str, amount: str, reference: str) -> str:
    """`sc1-` and the SHA-256 of the chain (`eip155:<id>` or `solana:<cluster>`), sender,
    recipient, amount (wei or lamports, decimal) and your own reference, each normalized
    (EIP-55 addresses, canonical base58 and decimals) and length-prefixed."""
    if not reference:
        raise ValueError("reference: must not be empty: it is what tells two equal payments apart")
    kind, _, name = chain.partition(":")
    if kind == "eip155" and re.fullmatch(r"\+?[0-9]+", name) and int(name) <= _U64_MAX:
        chain = f"eip155:{int(name)}"
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
