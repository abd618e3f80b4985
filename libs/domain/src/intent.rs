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

/// The most bytes a Solana transaction takes on the wire: one packet.
pub const SOLANA_PACKET_BYTES: usize = 1232;

impl SolanaInstructions {
    /// The bytes of the smallest transaction carrying these instructions: a legacy message
    /// with a recent blockhash, each key once, a signature per signing key, and nothing the
    /// signer adds (a priority fee, a durable nonce's advance). Past [`SOLANA_PACKET_BYTES`],
    /// no transaction of them fits a packet: signed, it would be refused at every send.
    pub fn least_transaction_bytes(&self) -> usize {
        fn compact(n: usize) -> usize {
            match n {
                0..0x80 => 1,
                0x80..0x4000 => 2,
                _ => 3,
            }
        }
        let mut keys = BTreeSet::from([self.fee_payer.as_bytes()]);
        let mut signers = BTreeSet::from([self.fee_payer.as_bytes()]);
        let mut instructions = 0;
        for ix in &self.instructions {
            keys.insert(ix.program_id.as_bytes());
            for meta in &ix.accounts {
                keys.insert(meta.pubkey.as_bytes());
                if meta.is_signer {
                    signers.insert(meta.pubkey.as_bytes());
                }
            }
            instructions += 1
                + compact(ix.accounts.len())
                + ix.accounts.len()
                + compact(ix.data.len())
                + ix.data.len();
        }
        let signatures = compact(signers.len()) + 64 * signers.len();
        // Header (3 bytes), the keys, the blockhash, the instructions.
        signatures
            + 3
            + compact(keys.len())
            + 32 * keys.len()
            + 32
            + compact(self.instructions.len())
            + instructions
    }
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

    /// Sizes counted by hand from the wire format (compact-u16 lengths, 64-byte signatures,
    /// 32-byte keys, each key once); `sigcast-solana` checks them against the message it
    /// builds.
    #[test]
    fn the_least_transaction_bytes_count_each_key_once_and_every_length() {
        let key = |n: u8| crate::SolanaPubkey::from([n; 32]);
        let meta = |n, is_signer| crate::SolanaAccountMeta {
            pubkey: key(n),
            is_signer,
            is_writable: true,
        };
        let list = |instructions| SolanaInstructions {
            cluster: "localnet".into(),
            fee_payer: key(1),
            instructions,
        };
        // 65 signature, 3 header, 65 keys, 32 blockhash, 1 count, 1 + 1 + 2 + 1,100.
        let one = list(vec![SolanaInstruction {
            program_id: key(9),
            accounts: Vec::new(),
            data: vec![0; 1100],
        }]);
        assert_eq!(one.least_transaction_bytes(), 1270);
        // Two signers (129), four keys (129), 32, 1, then 1 + 1 + 3 + 2 + 200 and 1 + 1 + 1 +
        // 1 + 5.
        let two = list(vec![
            SolanaInstruction {
                program_id: key(9),
                accounts: vec![meta(1, true), meta(2, true), meta(3, false)],
                data: vec![0; 200],
            },
            SolanaInstruction {
                program_id: key(9),
                accounts: vec![meta(3, false)],
                data: vec![0; 5],
            },
        ]);
        assert_eq!(two.least_transaction_bytes(), 510);
        // 128 instructions: a two-byte count.
        let many = list(vec![
            SolanaInstruction {
                program_id: key(9),
                accounts: Vec::new(),
                data: Vec::new(),
            };
            128
        ]);
        assert_eq!(
            many.least_transaction_bytes(),
            65 + 3 + 65 + 32 + 2 + 128 * 3
        );
    }

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
