//! `sigcast`: the operator's command line.
//!
//! `derive-op-id` computes the recommended idempotency key for a business payment, so every
//! caller (and every retry of a caller that crashed) derives the same op_id from the same facts.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use sigcast_domain::{Chain, EvmAddress, Lamports, OpId, SolanaPubkey, Wei, derive_op_id};

/// sigcast operator tools.
#[derive(Debug, Parser)]
#[command(name = "sigcast", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print the recommended op_id for a payment: `sc1-` + SHA-256 of its chain, sender,
    /// recipient, amount and your business reference (invoice, payout or order id).
    ///
    /// Addresses and amounts are normalized first, so `0xABC…` and `0xabc…`, or `0100` and
    /// `100`, give the same op_id.
    DeriveOpId {
        /// Chain, CAIP-2: `eip155:<chain id>` or `solana:<cluster>`.
        #[arg(long)]
        chain: String,
        /// Sending account.
        #[arg(long)]
        from: String,
        /// Recipient.
        #[arg(long)]
        to: String,
        /// Amount in base units (wei or lamports), decimal.
        #[arg(long)]
        amount: String,
        /// Your own unique reference for this payment.
        #[arg(long)]
        reference: String,
    },
}

fn main() -> std::process::ExitCode {
    let result = match Args::parse().command {
        Command::DeriveOpId {
            chain,
            from,
            to,
            amount,
            reference,
        } => op_id_for(&chain, &from, &to, &amount, &reference).map(|op_id| println!("{op_id}")),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Normalizes the payment's fields for its chain and derives the op_id.
fn op_id_for(chain: &str, from: &str, to: &str, amount: &str, reference: &str) -> Result<OpId> {
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
