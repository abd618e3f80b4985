//! What sigcast reads of a node's JSON objects, as serde types: only the fields evidence
//! rests on, each strictly typed (32-byte hashes, `0x` quantities), so that a field of another
//! shape is no evidence instead of a misreading, and a field sigcast does not read (a
//! receipt's logs, an L2's extra transaction fields) never makes an object unreadable.

use alloy_primitives::{Address, B256};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A JSON-RPC quantity: `0x`-prefixed hex, nothing else (not a decimal string, not a number).
fn quantity<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = Value::deserialize(deserializer)?;
    sigcast_jsonrpc::quantity(&value)
        .ok_or_else(|| serde::de::Error::custom(format!("not a quantity: {value}")))
}

/// A quantity, or null.
fn optional_quantity<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value => sigcast_jsonrpc::quantity(&value)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom(format!("not a quantity: {value}"))),
    }
}

/// A transaction receipt.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Receipt {
    pub(crate) transaction_hash: B256,
    /// Null while pending.
    #[serde(default, deserialize_with = "optional_quantity")]
    pub(crate) block_number: Option<u64>,
    /// Null while pending.
    #[serde(default)]
    pub(crate) block_hash: Option<B256>,
    /// EIP-658 status: 1 succeeded, 0 reverted. Absent from receipts of chains before
    /// Byzantium (which carry a state `root` instead): such a receipt says nothing of the
    /// outcome, and is read as none.
    #[serde(default, deserialize_with = "optional_quantity")]
    pub(crate) status: Option<u64>,
}

/// A block's header, as far as evidence needs it (its transactions, if listed, not copied).
#[derive(Debug, Deserialize)]
pub(crate) struct BlockHeader {
    #[serde(deserialize_with = "quantity")]
    pub(crate) number: u64,
    pub(crate) hash: B256,
}

/// A block's header with its parent: the line of blocks a head descends from.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LinkedHeader {
    #[serde(deserialize_with = "quantity")]
    pub(crate) number: u64,
    pub(crate) hash: B256,
    pub(crate) parent_hash: B256,
}

/// A block with its transactions.
#[derive(Debug, Deserialize)]
pub(crate) struct Block {
    #[serde(deserialize_with = "quantity")]
    pub(crate) number: u64,
    pub(crate) hash: B256,
    /// Hashes, or whole transactions when asked for: each read alone (see [`Tx`]).
    #[serde(default)]
    pub(crate) transactions: Option<Vec<Value>>,
}

/// A transaction asked for by hash (`eth_getTransactionByHash`); its block is null while it
/// is pending.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IncludedTx {
    pub(crate) hash: B256,
    pub(crate) from: Address,
    #[serde(deserialize_with = "quantity")]
    pub(crate) nonce: u64,
    #[serde(default, deserialize_with = "optional_quantity")]
    pub(crate) block_number: Option<u64>,
    #[serde(default)]
    pub(crate) block_hash: Option<B256>,
}

/// A transaction of a block, as far as finding who used a nonce needs.
#[derive(Debug, Deserialize)]
pub(crate) struct Tx {
    pub(crate) hash: B256,
    pub(crate) from: Address,
    #[serde(deserialize_with = "quantity")]
    pub(crate) nonce: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_block_reads_strictly_and_its_transactions_one_by_one() {
        let hash = format!("0x{}", "cd".repeat(32));
        let block = json!({
            "number": "0x10", "hash": hash, "transactions": [
                {"hash": hash, "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266", "nonce": "0x7"},
                {"hash": hash, "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266", "nonce": "7"},
                {"type": "0x7e", "sourceHash": hash}
            ]
        });
        let read = Block::deserialize(&block).unwrap();
        assert_eq!(read.number, 16);
        let txs: Vec<Option<Tx>> = read
            .transactions
            .unwrap()
            .iter()
            .map(|tx| Tx::deserialize(tx).ok())
            .collect();
        assert_eq!(txs[0].as_ref().map(|tx| tx.nonce), Some(7));
        assert!(txs[1].is_none(), "a decimal nonce is not a quantity");
        assert!(
            txs[2].is_none(),
            "a deposit without from or nonce is skipped"
        );
        for transactions in [Value::Null, json!([])] {
            let read = Block::deserialize(&json!({
                "number": "0x10", "hash": hash, "transactions": transactions
            }))
            .unwrap();
            assert!(read.transactions.unwrap_or_default().is_empty());
        }
        let decimal = json!({"number": "16", "hash": hash});
        assert!(Block::deserialize(&decimal).is_err());
        let short = json!({"number": "0x10", "hash": "0xb5"});
        assert!(Block::deserialize(&short).is_err());
    }
}
