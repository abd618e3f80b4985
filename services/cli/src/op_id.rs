//! `sigcast derive-op-id`: the recommended idempotency key for a business payment.

use anyhow::{Context, Result};
use sigcast_domain::{Chain, EvmAddress, Lamports, OpId, SolanaPubkey, Wei, derive_op_id};

/// Normalizes the payment's fields for its chain and derives the op_id.
pub(crate) fn op_id_for(
    chain: &str,
    from: &str,
    to: &str,
    amount: &str,
    reference: &str,
) -> Result<OpId> {
    let chain = Chain::parse(chain)
        .map_err(anyhow::Error::msg)
        .context("--chain")?;
    if reference.is_empty() {
        anyhow::bail!("--reference: must not be empty: it is what tells two equal payments apart");
    }
    let (from, to, amount) = match &chain {
        Chain::Evm { .. } => (
            EvmAddress::parse(from)
                .map_err(anyhow::Error::msg)
                .context("--from")?
                .to_string(),
            EvmAddress::parse(to)
                .map_err(anyhow::Error::msg)
                .context("--to")?
                .to_string(),
            Wei::parse(amount)
                .map_err(anyhow::Error::msg)
                .context("--amount")?
                .to_string(),
        ),
        Chain::Solana { .. } => (
            SolanaPubkey::parse(from)
                .map_err(anyhow::Error::msg)
                .context("--from")?
                .to_string(),
            SolanaPubkey::parse(to)
                .map_err(anyhow::Error::msg)
                .context("--to")?
                .to_string(),
            Lamports::parse(amount)
                .map_err(anyhow::Error::msg)
                .context("--amount")?
                .to_string(),
        ),
    };
    Ok(derive_op_id(&chain, &from, &to, &amount, reference))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
    const B: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

    #[test]
    fn spelling_does_not_change_the_op_id() {
        let id = op_id_for("eip155:1", A, B, "100", "inv-7").unwrap();
        assert_eq!(
            op_id_for("eip155:1", &A.to_lowercase(), B, "0100", "inv-7").unwrap(),
            id
        );
        assert_ne!(op_id_for("eip155:1", A, B, "100", "inv-8").unwrap(), id);
        assert_ne!(op_id_for("eip155:10", A, B, "100", "inv-7").unwrap(), id);
    }

    #[test]
    fn bad_input_names_the_flag() {
        let err = op_id_for("eip155:1", "0x12", B, "1", "r").unwrap_err();
        assert!(format!("{err:#}").starts_with("--from"), "{err:#}");
        let err = op_id_for(
            "solana:localnet",
            "11111111111111111111111111111111",
            "11111111111111111111111111111111",
            "-1",
            "r",
        )
        .unwrap_err();
        assert!(format!("{err:#}").starts_with("--amount"), "{err:#}");
        assert!(op_id_for("btc:1", A, B, "1", "r").is_err());
        assert!(op_id_for("eip155:1", A, B, "1", "").is_err());
    }
}
