//! What a caller wants done on chain, after parsing: every address and amount is valid and in
//! canonical form, so equal intents are equal values.

use crate::address::{EvmAddress, SolanaPubkey};
use crate::amount::{Lamports, Wei};
use crate::error::Rule;
use std::collections::BTreeSet;

/// Most instructions in one Solana intent.
pub const MAX_SOLANA_INSTRUCTIONS: usize = 64;
/// Most account metas in one Solana instruction.
pub const MAX_SOLANA_ACCOUNTS: usize = 64;
/// Most data bytes in one Solana instruction: a whole transaction must fit a 1,232-byte packet.
pub const MAX_SOLANA_INSTRUCTION_DATA: usize = 1232;

/// A chain, named as CAIP-2 names it: `eip155:<chain id>` or `solana:<cluster>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Chain {
    /// An EVM chain by EIP-155 chain id.
    Evm {
        /// EIP-155 chain id.
        chain_id: u64,
    },
    /// A Solana cluster by its configured name.
    Solana {
        /// Cluster name, e.g. "localnet".
        cluster: String,
    },
}

impl Chain {
    /// Parses the CAIP-2 form printed by `Display`.
    pub fn parse(text: &str) -> Result<Self, Rule> {
        match text.split_once(':') {
            Some(("eip155", id)) => id
                .parse()
                .map(|chain_id| Chain::Evm { chain_id })
                .map_err(|_| Rule::new(format!("eip155 chain id must be a number (got {id:?})"))),
            Some(("solana", cluster)) if !cluster.is_empty() => Ok(Chain::Solana {
                cluster: cluster.to_owned(),
            }),
            _ => Err(Rule::new(format!(
                "must be \"eip155:<chain id>\" or \"solana:<cluster>\" (got {text:?})"
            ))),
        }
    }
}

impl std::fmt::Display for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Chain::Evm { chain_id } => write!(f, "eip155:{chain_id}"),
            Chain::Solana { cluster } => write!(f, "solana:{cluster}"),
        }
    }
}

/// A native-currency transfer on an EVM chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmTransfer {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// Sender.
    pub from: EvmAddress,
    /// Recipient.
    pub to: EvmAddress,
    /// Amount.
    pub value: Wei,
}

/// A contract call on an EVM chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvmContractCall {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// Sender.
    pub from: EvmAddress,
    /// Contract.
    pub to: EvmAddress,
    /// Call data.
    pub data: Vec<u8>,
    /// Value sent with the call.
    pub value: Wei,
    /// Gas limit, or `None` to estimate.
    pub gas_limit: Option<u64>,
}

/// A SOL transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaTransfer {
    /// Cluster name.
    pub cluster: String,
    /// Sender and fee payer.
    pub from: SolanaPubkey,
    /// Recipient.
    pub to: SolanaPubkey,
    /// Amount.
    pub lamports: Lamports,
}

/// An account referenced by a Solana instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaAccountMeta {
    /// Account address.
    pub pubkey: SolanaPubkey,
    /// Must sign.
    pub is_signer: bool,
    /// May be written.
    pub is_writable: bool,
}

/// One Solana instruction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaInstruction {
    /// Program invoked.
    pub program_id: SolanaPubkey,
    /// Accounts, in the program's order.
    pub accounts: Vec<SolanaAccountMeta>,
    /// Instruction data.
    pub data: Vec<u8>,
}

/// Solana instructions executed in one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolanaInstructions {
    /// Cluster name.
    pub cluster: String,
    /// Fee payer and signer.
    pub fee_payer: SolanaPubkey,
    /// The instructions, in order.
    pub instructions: Vec<SolanaInstruction>,
}

/// A parsed, valid intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// EVM native transfer.
    EvmTransfer(EvmTransfer),
    /// EVM contract call.
    EvmContractCall(EvmContractCall),
    /// Solana SOL transfer.
    SolanaTransfer(SolanaTransfer),
    /// Solana instruction list.
    SolanaInstructions(SolanaInstructions),
}

impl Intent {
    /// The chain the intent writes to.
    pub fn chain(&self) -> Chain {
        match self {
            Intent::EvmTransfer(t) => Chain::Evm {
                chain_id: t.chain_id,
            },
            Intent::EvmContractCall(c) => Chain::Evm {
                chain_id: c.chain_id,
            },
            Intent::SolanaTransfer(t) => Chain::Solana {
                cluster: t.cluster.clone(),
            },
            Intent::SolanaInstructions(i) => Chain::Solana {
                cluster: i.cluster.clone(),
            },
        }
    }

    /// The account whose key signs, in canonical text form.
    pub fn account(&self) -> String {
        match self {
            Intent::EvmTransfer(t) => t.from.to_string(),
            Intent::EvmContractCall(c) => c.from.to_string(),
            Intent::SolanaTransfer(t) => t.from.to_string(),
            Intent::SolanaInstructions(i) => i.fee_payer.to_string(),
        }
    }
}

/// What a deployment accepts: its chains and size limits. Comes from configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntentRules {
    /// EIP-155 chain ids served.
    pub evm_chain_ids: BTreeSet<u64>,
    /// Solana cluster names served.
    pub solana_clusters: BTreeSet<String>,
    /// Largest EVM call data accepted, in bytes.
    pub max_evm_call_data: usize,
}

impl Default for IntentRules {
    /// A local anvil (31337) and a local Solana validator; call data up to 128 KiB, the
    /// transaction size geth's pool accepts.
    fn default() -> Self {
        Self {
            evm_chain_ids: BTreeSet::from([31337]),
            solana_clusters: BTreeSet::from(["localnet".to_owned()]),
            max_evm_call_data: 128 * 1024,
        }
    }
}

impl IntentRules {
    /// Checks that an EVM chain id is served here.
    pub fn check_evm_chain(&self, chain_id: u64) -> Result<(), Rule> {
        if self.evm_chain_ids.contains(&chain_id) {
            return Ok(());
        }
        Err(Rule::new(format!(
            "unknown chain {chain_id}: this service is configured for EVM chain ids {:?}",
            self.evm_chain_ids
        )))
    }

    /// Checks that a Solana cluster is served here.
    pub fn check_solana_cluster(&self, cluster: &str) -> Result<(), Rule> {
        if self.solana_clusters.contains(cluster) {
            return Ok(());
        }
        Err(Rule::new(format!(
            "unknown cluster {cluster:?}: this service is configured for Solana clusters {:?}",
            self.solana_clusters
        )))
    }

    /// Checks EVM call data size.
    pub fn check_evm_call_data(&self, data: &[u8]) -> Result<(), Rule> {
        if data.len() <= self.max_evm_call_data {
            return Ok(());
        }
        Err(Rule::new(format!(
            "must be at most {} bytes (got {})",
            self.max_evm_call_data,
            data.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_caip2_round_trip() {
        for text in ["eip155:1", "eip155:31337", "solana:localnet"] {
            assert_eq!(Chain::parse(text).unwrap().to_string(), text);
        }
        for bad in ["", "eip155:", "eip155:x", "solana:", "btc:1", "31337"] {
            assert!(Chain::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rules_name_the_known_chains() {
        let rules = IntentRules::default();
        assert!(rules.check_evm_chain(31337).is_ok());
        let rule = rules.check_evm_chain(5).unwrap_err();
        assert!(
            rule.0.contains("unknown chain 5") && rule.0.contains("31337"),
            "{rule}"
        );
        assert!(rules.check_solana_cluster("devnet").is_err());
        assert!(rules.check_evm_call_data(&vec![0; 128 * 1024]).is_ok());
        assert!(rules.check_evm_call_data(&vec![0; 128 * 1024 + 1]).is_err());
    }
}
