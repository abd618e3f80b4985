//! Sending straight to the node, as a service without sigcast would: the test's own signer
//! (anvil dev keys) for outside senders and for the naive retrier of the first seed article.

use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use sigcast_domain::{EvmAddress, EvmTransfer, Intent, Wei};
use sigcast_evm::{EvmRpc, Fees, TxParams, build_transaction};
use std::time::Duration;

/// anvil dev key #0 (public test key).
pub(crate) const DEV0_KEY: &str =
    "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

/// Signs a transfer from dev account #0 at `nonce`.
pub(crate) fn sign_transfer(to: &str, value: u64, nonce: u64) -> Vec<u8> {
    sign_transfer_paying(to, value, nonce, 20_000_000_000, 1_000_000_000)
}

/// Signs a transfer from dev account #0 at `nonce` with the given EIP-1559 fees (wei per gas).
pub(crate) fn sign_transfer_paying(
    to: &str,
    value: u64,
    nonce: u64,
    max_fee_per_gas: u128,
    max_priority_fee_per_gas: u128,
) -> Vec<u8> {
    let key: PrivateKeySigner = DEV0_KEY.parse().unwrap();
    let intent = Intent::EvmTransfer(EvmTransfer {
        chain_id: 31337,
        from: EvmAddress::from(key.address().0.0),
        to: EvmAddress::parse(to).unwrap(),
        value: Wei::parse(&value.to_string()).unwrap(),
    });
    let params = TxParams {
        nonce,
        gas_limit: 21_000,
        fees: Fees::Eip1559 {
            max_fee_per_gas,
            max_priority_fee_per_gas,
        },
    };
    let unsigned = build_transaction(&intent, params).unwrap();
    let signature = key.sign_hash_sync(&unsigned.signature_hash()).unwrap();
    unsigned.into_signed(signature).raw
}

/// The naive retrier: on any failure of a send, read the pending nonce, sign again, send again
/// — until one send gets a reply. Returns how many sends it made.
pub(crate) async fn naive_transfer(via: &EvmRpc, to: &str, value: u64) -> usize {
    let from = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    let mut sends = 0;
    loop {
        let Ok(nonce) = via
            .read(
                "eth_getTransactionCount",
                serde_json::json!([from, "pending"]),
            )
            .await
        else {
            continue;
        };
        let nonce =
            u64::from_str_radix(nonce.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
        sends += 1;
        if via
            .send_raw(&sign_transfer(to, value, nonce), 0)
            .await
            .result
            .is_ok()
        {
            return sends;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
