//! EVM JSON-RPC: the shared pool with the methods sigcast reads and the one it writes.

use alloy_primitives::{Address, B256};
use serde_json::{Value, json};
use sigcast_jsonrpc::Result;
use sigcast_jsonrpc::{RpcError, RpcPool, SendAttempt, quantity, quantity_u128};
use std::time::Duration;

/// A transaction receipt, as far as sigcast needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Transaction hash.
    pub tx_hash: B256,
    /// Block it was included in.
    pub block_number: u64,
    /// That block's hash.
    pub block_hash: B256,
    /// Execution succeeded (status 1) or reverted (status 0).
    pub success: bool,
}

/// The endpoints of one EVM chain.
#[derive(Debug)]
pub struct EvmRpc(RpcPool);

impl std::ops::Deref for EvmRpc {
    type Target = RpcPool;
    fn deref(&self) -> &RpcPool {
        &self.0
    }
}

impl EvmRpc {
    /// A pool over `urls`; each request times out after `timeout`.
    pub fn new(urls: &[String], timeout: Duration) -> Result<Self> {
        Ok(Self(RpcPool::new(urls, timeout)?))
    }

    /// Sends a signed transaction to one endpoint, once: the best for its first send, the
    /// next in rank for each next (`turn`: earlier sends of the same bytes).
    pub async fn send_raw(&self, raw: &[u8], turn: u32) -> SendAttempt<B256> {
        let sent = self
            .0
            .send(
                "eth_sendRawTransaction",
                json!([alloy_primitives::hex::encode_prefixed(raw)]),
                turn,
            )
            .await;
        let endpoint = sent.endpoint;
        let result = sent.result.and_then(|value| {
            parse_b256(&value).ok_or_else(|| RpcError::Malformed {
                endpoint: endpoint.clone(),
                message: format!(
                    "not a transaction hash: {}",
                    sigcast_jsonrpc::quoted(&value.to_string())
                ),
            })
        });
        SendAttempt { endpoint, result }
    }

    /// `eth_chainId`.
    pub async fn chain_id(&self) -> Result<u64> {
        self.read_as("eth_chainId", json!([]), as_u64).await
    }

    /// `eth_chainId` as one endpoint answers it.
    pub async fn chain_id_from(&self, url: &str) -> std::result::Result<u64, RpcError> {
        let value = self.read_from(url, "eth_chainId", json!([])).await?;
        quantity(&value).ok_or_else(|| RpcError::Malformed {
            endpoint: sigcast_jsonrpc::endpoint_label(url),
            message: format!(
                "eth_chainId answered {}",
                sigcast_jsonrpc::quoted(&value.to_string())
            ),
        })
    }

    /// `eth_blockNumber`.
    pub async fn block_number(&self) -> Result<u64> {
        self.read_as("eth_blockNumber", json!([]), as_u64).await
    }

    /// The account's nonce at the latest block: how many of its transactions are included.
    pub async fn nonce(&self, address: Address) -> Result<u64> {
        self.read_as(
            "eth_getTransactionCount",
            json!([address.to_string(), "latest"]),
            as_u64,
        )
        .await
    }

    /// The receipt of `hash`, if the answering endpoint has one.
    pub async fn receipt(&self, hash: B256) -> Result<Option<Receipt>> {
        let value = self
            .read("eth_getTransactionReceipt", json!([hash.to_string()]))
            .await?;
        Ok(parse_receipt(&value))
    }

    /// Balance in wei, as a decimal string.
    pub async fn balance(&self, address: Address) -> Result<alloy_primitives::U256> {
        self.read_as(
            "eth_getBalance",
            json!([address.to_string(), "latest"]),
            |value| {
                value
                    .as_str()
                    .and_then(|s| {
                        alloy_primitives::U256::from_str_radix(s.strip_prefix("0x")?, 16).ok()
                    })
                    .ok_or(value)
            },
        )
        .await
    }

    /// Current EIP-1559 fees: twice the latest base fee plus the node's suggested tip, so the
    /// transaction stays includable through several blocks of rising base fee.
    pub async fn eip1559_fees(&self) -> Result<crate::Fees> {
        let block = self
            .read("eth_getBlockByNumber", json!(["latest", false]))
            .await?;
        let base = base_fee(&block).unwrap_or(0);
        let tip = match self.read("eth_maxPriorityFeePerGas", json!([])).await {
            Ok(value) => quantity_u128(&value).unwrap_or(1_000_000_000),
            Err(_) => 1_000_000_000,
        };
        Ok(eip1559_fees_from(base, tip))
    }

    /// `eth_gasPrice`, for legacy transactions.
    pub async fn gas_price(&self) -> Result<u128> {
        self.read_as("eth_gasPrice", json!([]), |v| quantity_u128(&v).ok_or(v))
            .await
    }

    /// `eth_estimateGas` for a call.
    pub async fn estimate_gas(
        &self,
        from: Address,
        to: Address,
        value_wei: &str,
        data: &[u8],
    ) -> Result<u64> {
        let value = alloy_primitives::U256::from_str_radix(value_wei, 10).unwrap_or_default();
        let call = json!({
            "from": from.to_string(), "to": to.to_string(),
            "value": format!("0x{value:x}"), "data": alloy_primitives::hex::encode_prefixed(data),
        });
        self.read_as("eth_estimateGas", json!([call]), as_u64).await
    }
}

/// A quantity answer as u64; anything else is the endpoint's fault (see `RpcPool::read_as`).
fn as_u64(value: Value) -> std::result::Result<u64, Value> {
    quantity(&value).ok_or(value)
}

fn parse_b256(value: &Value) -> Option<B256> {
    value.as_str()?.parse().ok()
}

/// Parses a receipt object. `None` for JSON null (no receipt), for a pending one (no block
/// yet), for one without an EIP-658 status, and for one that does not parse (logged): none of
/// them is evidence of anything.
pub(crate) fn parse_receipt(value: &Value) -> Option<Receipt> {
    if value.is_null() {
        return None;
    }
    let receipt = match <crate::wire::Receipt as serde::Deserialize>::deserialize(value) {
        Ok(receipt) => receipt,
        Err(error) => {
            tracing::warn!(%error, "a receipt that does not parse: not evidence");
            return None;
        }
    };
    Some(Receipt {
        tx_hash: receipt.transaction_hash,
        block_number: receipt.block_number?,
        block_hash: receipt.block_hash?,
        success: match receipt.status? {
            0 => false,
            1 => true,
            _ => return None,
        },
    })
}

/// A block's base fee per gas (`baseFeePerGas`), in wei; `None` where the header carries none
/// (a chain before EIP-1559) or a malformed one.
pub fn base_fee(block: &Value) -> Option<u128> {
    block.get("baseFeePerGas").and_then(quantity_u128)
}

/// Fees for a new EIP-1559 transaction from a node's base fee and tip: room for the base fee
/// to double, plus the tip. Saturating: the numbers come from a node, and a wrapped sum would
/// sign a transaction far below what was asked (the signer caps it in any case).
pub fn eip1559_fees_from(base: u128, tip: u128) -> crate::Fees {
    crate::Fees::Eip1559 {
        max_fee_per_gas: base.saturating_mul(2).saturating_add(tip),
        max_priority_fee_per_gas: tip,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn fees_from_a_node_never_wrap() {
        assert_eq!(
            super::eip1559_fees_from(u128::MAX / 2 + 1, 5),
            crate::Fees::Eip1559 {
                max_fee_per_gas: u128::MAX,
                max_priority_fee_per_gas: 5,
            }
        );
        assert_eq!(
            super::eip1559_fees_from(7, 1),
            crate::Fees::Eip1559 {
                max_fee_per_gas: 15,
                max_priority_fee_per_gas: 1,
            }
        );
    }
    use super::*;

    /// A receipt as anvil serves it (a reverted EIP-1559 transfer).
    fn reverted_receipt() -> Value {
        json!({
            "type": "0x2", "status": "0x0", "cumulativeGasUsed": "0x5208", "logs": [],
            "logsBloom": format!("0x{}", "0".repeat(512)),
            "transactionHash": "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",
            "transactionIndex": "0x0",
            "blockHash": "0xaf1ee3eb2d7fd4c6d6d2c3a4fb0e2d41d0a6a1f7b3a6ce54dbd4d8bb36f5c0e1",
            "blockNumber": "0x1b4", "gasUsed": "0x5208", "effectiveGasPrice": "0x3b9aca00",
            "from": "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266",
            "to": "0x70997970c51812dc3a010c7d01b50e0d17dc79c8", "contractAddress": null
        })
    }

    #[test]
    fn receipts_parse_and_null_pending_or_malformed_is_none() {
        let parsed = parse_receipt(&reverted_receipt()).unwrap();
        assert_eq!((parsed.block_number, parsed.success), (436, false));
        assert_eq!(
            parsed.block_hash.to_string(),
            "0xaf1ee3eb2d7fd4c6d6d2c3a4fb0e2d41d0a6a1f7b3a6ce54dbd4d8bb36f5c0e1"
        );
        assert_eq!(parse_receipt(&Value::Null), None);
        let mut pending = reverted_receipt();
        pending["blockNumber"] = Value::Null;
        pending["blockHash"] = Value::Null;
        assert_eq!(
            parse_receipt(&pending),
            None,
            "a pending receipt proves nothing"
        );
        let mut short = reverted_receipt();
        short["blockHash"] = json!("0xabc");
        assert_eq!(parse_receipt(&short), None, "a block hash must be 32 bytes");
        let mut succeeded = reverted_receipt();
        succeeded["status"] = json!("0x1");
        assert!(parse_receipt(&succeeded).unwrap().success);
    }

    #[test]
    fn a_receipt_without_an_eip658_status_says_nothing_of_the_outcome() {
        let mut before_byzantium = reverted_receipt();
        before_byzantium
            .as_object_mut()
            .unwrap()
            .remove("status")
            .unwrap();
        before_byzantium["root"] = json!(format!("0x{}", "ab".repeat(32)));
        assert_eq!(parse_receipt(&before_byzantium), None);
        let mut null_status = reverted_receipt();
        null_status["status"] = Value::Null;
        assert_eq!(parse_receipt(&null_status), None);
        let mut other = reverted_receipt();
        other["status"] = json!("0x2");
        assert_eq!(parse_receipt(&other), None);
        let mut decimal = reverted_receipt();
        decimal["blockNumber"] = json!("436");
        assert_eq!(parse_receipt(&decimal), None, "a quantity is 0x hex");
    }

    #[test]
    fn a_receipt_with_only_the_fields_read_still_reads() {
        let minimal = json!({
            "transactionHash": "0x88df016429689c079f3b2f6ad39fa052532c56795b733da78a91ebe6a713944b",
            "blockNumber": "0x1b4",
            "blockHash": "0xaf1ee3eb2d7fd4c6d6d2c3a4fb0e2d41d0a6a1f7b3a6ce54dbd4d8bb36f5c0e1",
            "status": "0x1"
        });
        assert!(parse_receipt(&minimal).unwrap().success);
    }

    #[test]
    fn a_receipt_of_any_transaction_type_reads() {
        // An OP Stack deposit transaction's receipt (type 0x7e, with its extra fields).
        let mut deposit = reverted_receipt();
        deposit["type"] = json!("0x7e");
        deposit["status"] = json!("0x1");
        deposit["depositNonce"] = json!("0x1");
        let parsed = parse_receipt(&deposit).unwrap();
        assert!(parsed.success);
    }
}
