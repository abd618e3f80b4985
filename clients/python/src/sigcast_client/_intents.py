"""Intents, built from plain values (amounts as decimal strings: they exceed 2^64)."""

from sigcast.v1 import operation_pb2 as pb


def evm_transfer(chain_id: int, sender: str, recipient: str, value_wei: str) -> pb.Intent:
    """A native-currency transfer on an EVM chain."""
    return pb.Intent(
        evm_transfer=pb.EvmTransfer(
            chain_id=chain_id, to=recipient, value_wei=str(value_wei), **{"from": sender}
        )
    )


def solana_transfer(cluster: str, sender: str, recipient: str, lamports: str) -> pb.Intent:
    """A SOL transfer on a configured cluster ("localnet", "devnet", ...)."""
    return pb.Intent(
        solana_transfer=pb.SolanaTransfer(
            cluster=cluster, to=recipient, lamports=str(lamports), **{"from": sender}
        )
    )
