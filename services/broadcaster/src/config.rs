//! Broadcaster configuration: defaults, then a TOML file, then `SIGCAST_BROADCASTER__*`
//! environment variables (`__` separates levels).

use serde::{Deserialize, Serialize};
use sigcast_store::StoreConfig;
use sigcast_telemetry::{LogConfig, TracingConfig};
use std::net::SocketAddr;
use std::time::Duration;

pub use sigcast_runtime::{ConfigError, ServiceConfig};

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "SIGCAST_BROADCASTER__";

/// Everything the broadcaster needs to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the health endpoint (gRPC health).
    pub listen: SocketAddr,
    /// The store shared with the gateway and signer.
    pub store: StoreConfig,
    /// The signer's address: `unix:/path/to/signer.sock` (authenticated by uid) or, for
    /// local development, `http://host:port`.
    pub signer_url: String,
    /// Client certificate for a signer over mutual TLS (`signer_url = "https://…"`).
    pub signer_tls: Option<SignerTlsConfig>,
    /// EVM chains served.
    pub evm_chains: Vec<EvmChainConfig>,
    /// Solana clusters served (`[[solana_clusters]]`).
    pub solana_clusters: Vec<SolanaClusterConfig>,
    /// Commitment at which a Solana operation is CONFIRMED: "confirmed" or "finalized".
    pub solana_commitment: String,
    /// How often the store is scanned for work, in milliseconds.
    pub poll_ms: u64,
    /// Blocks a receipt must be under (1 = included) before the operation is CONFIRMED.
    pub confirmations: u64,
    /// How long after a send without inclusion the same bytes are sent again, in milliseconds.
    pub rebroadcast_ms: u64,
    /// An operation just sent (or just answered) is checked against the chain again only
    /// after this long, in milliseconds: no block can hold it sooner, and every check is a
    /// read on the node that also takes the sends.
    pub check_after_ms: u64,
    /// How long an attempt may wait for inclusion before a replacement with higher fees is
    /// signed at the same nonce, in milliseconds (after `rebroadcast_ms` when the head's base
    /// fee is above the attempt's fee cap); 0 turns both off (a send the node refuses as
    /// underpriced is still bumped).
    pub fee_bump_after_ms: u64,
    /// Most fee bumps of one operation (the signer also caps the fees of each).
    pub max_fee_bumps: u32,
    /// Timeout of one RPC request, in milliseconds; a send that times out is an unknown outcome.
    pub rpc_timeout_ms: u64,
    /// Operations worked on at once, per stage (signing, sending, checking).
    pub concurrency: usize,
    /// Logging.
    pub log: LogConfig,
    /// Trace export (`[tracing]`): OTLP endpoint and sampling.
    pub tracing: TracingConfig,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); none: not served.
    pub metrics_listen: Option<SocketAddr>,
}

/// The broadcaster's side of mutual TLS with the signer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignerTlsConfig {
    /// The CA that issued the signer's certificate (PEM).
    pub ca: std::path::PathBuf,
    /// This broadcaster's client certificate (PEM).
    pub cert: std::path::PathBuf,
    /// Its private key (PEM).
    pub key: std::path::PathBuf,
    /// The name the signer's certificate is checked against; the URL's host by default.
    pub domain: Option<String>,
}

/// One Solana cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolanaClusterConfig {
    /// The cluster's name, as intents name it (e.g. "localnet").
    pub cluster: String,
    /// JSON-RPC endpoints: reads hedged across them, each send to one.
    pub rpc_urls: Vec<String>,
    /// The cluster's genesis hash (base58): an endpoint answering another is never
    /// evidence. Default: the known hash of mainnet-beta, devnet or testnet by name, else the
    /// first one an endpoint answers.
    #[serde(default)]
    pub genesis_hash: Option<String>,
}

/// One EVM chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvmChainConfig {
    /// EIP-155 chain id.
    pub chain_id: u64,
    /// JSON-RPC endpoints: reads are hedged across them, each send goes to one.
    pub rpc_urls: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50053)),
            store: StoreConfig::default(),
            signer_url: "http://127.0.0.1:50052".into(),
            signer_tls: None,
            evm_chains: vec![EvmChainConfig {
                chain_id: 31337,
                rpc_urls: vec!["http://127.0.0.1:8545".into()],
            }],
            solana_clusters: Vec::new(),
            solana_commitment: "confirmed".into(),
            poll_ms: 200,
            confirmations: 1,
            rebroadcast_ms: 6_000,
            check_after_ms: 500,
            fee_bump_after_ms: 60_000,
            max_fee_bumps: 5,
            rpc_timeout_ms: 5_000,
            concurrency: 64,
            log: LogConfig::default(),
            tracing: TracingConfig::default(),
            metrics_listen: None,
        }
    }
}

impl ServiceConfig for Config {
    const ENV_PREFIX: &'static str = ENV_PREFIX;

    fn validate(&self) -> Result<(), ConfigError> {
        self.tracing.validate().map_err(|rule| {
            ConfigError::invalid("tracing.sample_ratio / tracing.otlp_endpoint", rule)
        })?;
        let invalid = |field, rule: &str| Err(ConfigError::invalid(field, rule));
        if self
            .solana_clusters
            .iter()
            .filter_map(|c| c.genesis_hash.as_deref())
            .any(|hash| !sigcast_solana::is_genesis_hash(hash))
        {
            return invalid(
                "solana_clusters.genesis_hash",
                "must be a base58 hash of 32 bytes, as getGenesisHash answers it",
            );
        }
        if self.evm_chains.iter().any(|c| c.rpc_urls.is_empty()) {
            return invalid(
                "evm_chains.rpc_urls",
                "every chain needs at least one endpoint",
            );
        }
        if !matches!(self.solana_commitment.as_str(), "confirmed" | "finalized") {
            return invalid(
                "solana_commitment",
                "must be \"confirmed\" or \"finalized\"",
            );
        }
        if self.solana_clusters.iter().any(|c| c.rpc_urls.is_empty()) {
            return invalid(
                "solana_clusters.rpc_urls",
                "every cluster needs at least one endpoint",
            );
        }
        if self.confirmations == 0 {
            return invalid("confirmations", "must be at least 1");
        }
        if self.poll_ms == 0 || self.rpc_timeout_ms == 0 || self.concurrency == 0 {
            return invalid("poll_ms / rpc_timeout_ms / concurrency", "must be positive");
        }
        if self.rebroadcast_ms < self.rpc_timeout_ms {
            return invalid("rebroadcast_ms", "must be at least rpc_timeout_ms");
        }
        Ok(())
    }
}

impl Config {
    /// The decisions' settings.
    pub fn rules(&self) -> sigcast_protocol::Rules {
        sigcast_protocol::Rules {
            confirmations: self.confirmations,
            solana_commitment: sigcast_protocol::Commitment::parse(&self.solana_commitment),
            check_after: Duration::from_millis(self.check_after_ms),
            rebroadcast_after: Duration::from_millis(self.rebroadcast_ms),
            fee_bump_after: (self.fee_bump_after_ms > 0)
                .then(|| Duration::from_millis(self.fee_bump_after_ms)),
            max_fee_bumps: self.max_fee_bumps,
        }
    }

    /// Poll interval.
    pub fn poll(&self) -> Duration {
        Duration::from_millis(self.poll_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn a_genesis_hash_that_is_not_one_is_refused_at_start() {
        let with = |hash: &str| Config {
            solana_clusters: vec![SolanaClusterConfig {
                cluster: "localnet".into(),
                rpc_urls: vec!["http://127.0.0.1:8899".into()],
                genesis_hash: Some(hash.into()),
            }],
            ..Config::default()
        };
        with("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG")
            .validate()
            .unwrap();
        let error = with("EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZB ")
            .validate()
            .unwrap_err();
        assert!(
            error.to_string().contains("solana_clusters.genesis_hash"),
            "{error}"
        );
    }
}
