//! Signer configuration: defaults, then a TOML file, then `SIGCAST_SIGNER__*` environment
//! variables (`__` separates levels).

use serde::{Deserialize, Serialize};
use sigcast_store::StoreConfig;
use sigcast_telemetry::{LogConfig, TracingConfig};
use std::net::SocketAddr;
use std::path::PathBuf;

pub use sigcast_runtime::{ConfigError, ServiceConfig};

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "SIGCAST_SIGNER__";
/// Environment variable holding the keystore passphrase when no file is configured.
pub const PASSPHRASE_ENV: &str = "SIGCAST_SIGNER_PASSPHRASE";

/// Everything the signer needs to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address of the internal gRPC API, or only of gRPC health when `unix_socket` is set.
    pub listen: SocketAddr,
    /// Unix socket for the signer API; callers are authenticated by their uid.
    pub unix_socket: Option<PathBuf>,
    /// Uids allowed on `unix_socket`; empty: the signer's own uid only.
    pub allowed_uids: Vec<u32>,
    /// The signer API over TCP with mutual TLS (`[tls]`), for callers on other hosts.
    pub tls: Option<TlsConfig>,
    /// The store shared with the gateway and broadcaster.
    pub store: StoreConfig,
    /// Directory of Web3 Secret Storage (v3) keystore files, one key per file.
    pub keystore_dir: PathBuf,
    /// File holding the keystores' passphrase; when absent, the `SIGCAST_SIGNER_PASSPHRASE`
    /// environment variable. Never logged.
    pub passphrase_file: Option<PathBuf>,
    /// A PKCS#11 token whose secp256k1 keys the signer also uses (`[pkcs11]`).
    pub pkcs11: Option<crate::token::Pkcs11Config>,
    /// EVM chains the signer signs for.
    pub evm_chains: Vec<EvmChainConfig>,
    /// Solana clusters the signer signs for (`[[solana_clusters]]`).
    pub solana_clusters: Vec<SolanaClusterConfig>,
    /// Timeout of one RPC request, in milliseconds.
    pub rpc_timeout_ms: u64,
    /// How deep (1 = included) another sender's transaction must be before the EVM nonce it
    /// used is skipped when allocating ours. Set it as the broadcaster's `confirmations`: a
    /// shallower one can still be reorged out and dropped, and the nonces allocated past it
    /// would wait for a transaction nobody sends.
    pub confirmations: u64,
    /// Signing policy per key (`[[policies]]`, `account = "*"` for the default); a key with no
    /// policy is limited only by the chains the signer serves.
    pub policies: Vec<sigcast_domain::policy::KeyPolicy>,
    /// The gateway's `[[callers]]` table: the caller recorded with an operation must be allowed
    /// its account, chain and intent kind, or nothing is signed. Empty: not checked.
    pub callers: Vec<sigcast_domain::callers::CallerRule>,
    /// Logging.
    pub log: LogConfig,
    /// Trace export (`[tracing]`): OTLP endpoint and sampling.
    pub tracing: TracingConfig,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); none: not served.
    pub metrics_listen: Option<SocketAddr>,
}

/// Mutual TLS for the signer API: callers must present a certificate issued by `client_ca`
/// whose identity or SHA-256 fingerprint is allowed. The files are read again when they change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Address of the mTLS API.
    pub listen: SocketAddr,
    /// The signer's certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// The CA that issues callers' certificates (PEM).
    pub client_ca: PathBuf,
    /// SHA-256 fingerprints (hex) of the client certificates allowed. A fingerprint changes at
    /// every renewal: prefer `allowed_client_identities`.
    #[serde(default)]
    pub allowed_client_fingerprints: Vec<String>,
    /// Identities (URI SAN, else DNS SAN, else CN) of the client certificates allowed. Both
    /// lists empty: any certificate the CA issued.
    #[serde(default)]
    pub allowed_client_identities: Vec<String>,
    /// How often the files are checked for a change, in seconds.
    #[serde(default = "default_reload_secs")]
    pub reload_secs: u64,
}

fn default_reload_secs() -> u64 {
    5
}

impl TlsConfig {
    /// The listener's part of it.
    pub fn files(&self) -> sigcast_runtime::tls::TlsConfig {
        sigcast_runtime::tls::TlsConfig {
            cert: self.cert.clone(),
            key: self.key.clone(),
            client_ca: self.client_ca.clone(),
            reload_secs: self.reload_secs,
        }
    }
}

/// One Solana cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolanaClusterConfig {
    /// The cluster's name, as intents and the gateway name it (e.g. "localnet").
    pub cluster: String,
    /// JSON-RPC endpoints (recent blockhashes).
    pub rpc_urls: Vec<String>,
    /// Priority fee in micro-lamports per compute unit (0: none). Each re-sign raises it: the
    /// n-th attempt pays n times this, up to `max_compute_unit_price_micro_lamports`.
    #[serde(default)]
    pub compute_unit_price_micro_lamports: u64,
    /// The most any attempt pays per compute unit (default: 10 times
    /// `compute_unit_price_micro_lamports`): a fee payer that cannot pay, or endpoints that
    /// drop sends, would otherwise make every re-sign of an hour-long outage pay more.
    #[serde(default)]
    pub max_compute_unit_price_micro_lamports: Option<u64>,
    /// The cluster's genesis hash (base58): an endpoint answering another never proves an
    /// attempt expired. Default: the known hash of mainnet-beta, devnet or testnet by name,
    /// else the one every endpoint answers alike, once they all have.
    #[serde(default)]
    pub genesis_hash: Option<String>,
}

/// One EVM chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvmChainConfig {
    /// EIP-155 chain id; checked against the endpoints at start.
    pub chain_id: u64,
    /// JSON-RPC endpoints, read with hedging (nonces, fees, gas estimates).
    pub rpc_urls: Vec<String>,
    /// Transaction type: EIP-1559 unless the chain needs legacy.
    #[serde(default)]
    pub tx_type: TxType,
    /// The most any transaction may offer per gas, in gwei (its fee cap, or its gas price):
    /// new transactions are held to it, and a fee bump or cancel it leaves short of a
    /// replacement is refused rather than signed.
    #[serde(default = "default_max_fee_per_gas_gwei")]
    pub max_fee_per_gas_gwei: u64,
}

fn default_max_fee_per_gas_gwei() -> u64 {
    1_000
}

/// EVM transaction type.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxType {
    /// Type 2.
    #[default]
    Eip1559,
    /// Type 0 with EIP-155.
    Legacy,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50052)),
            unix_socket: None,
            allowed_uids: Vec::new(),
            tls: None,
            store: StoreConfig::default(),
            keystore_dir: PathBuf::from("keys"),
            passphrase_file: None,
            pkcs11: None,
            evm_chains: vec![EvmChainConfig {
                chain_id: 31337,
                rpc_urls: vec!["http://127.0.0.1:8545".into()],
                tx_type: TxType::Eip1559,
                max_fee_per_gas_gwei: default_max_fee_per_gas_gwei(),
            }],
            solana_clusters: Vec::new(),
            rpc_timeout_ms: 10_000,
            confirmations: 1,
            policies: Vec::new(),
            callers: Vec::new(),
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
        if self
            .solana_clusters
            .iter()
            .filter_map(|c| c.genesis_hash.as_deref())
            .any(|hash| !sigcast_solana::is_genesis_hash(hash))
        {
            return Err(ConfigError::invalid(
                "solana_clusters.genesis_hash",
                "must be a base58 hash of 32 bytes, as getGenesisHash answers it",
            ));
        }
        for cluster in &self.solana_clusters {
            // A cap under the base would lower even the first attempt's fee (0: none at all),
            // where the base is what was asked for.
            if let Some(max) = cluster.max_compute_unit_price_micro_lamports
                && max < cluster.compute_unit_price_micro_lamports.max(1)
            {
                return Err(ConfigError::invalid(
                    "solana_clusters.max_compute_unit_price_micro_lamports",
                    format!(
                        "cluster {}: {max} is under compute_unit_price_micro_lamports ({}); \
                         it must be at least that, and at least 1",
                        cluster.cluster, cluster.compute_unit_price_micro_lamports
                    ),
                ));
            }
        }
        for chain in &self.evm_chains {
            if chain.rpc_urls.is_empty() {
                return Err(ConfigError::invalid(
                    "evm_chains.rpc_urls",
                    format!("chain {} needs at least one endpoint", chain.chain_id),
                ));
            }
            if chain.max_fee_per_gas_gwei == 0 {
                // A cap of 0 would sign transactions no node takes, and refuse every bump.
                return Err(ConfigError::invalid(
                    "evm_chains.max_fee_per_gas_gwei",
                    format!("chain {}: must be positive", chain.chain_id),
                ));
            }
        }
        for policy in &self.policies {
            policy
                .validate()
                .map_err(|rule| ConfigError::invalid("policies", rule))?;
        }
        for rule in &self.callers {
            rule.validate()
                .map_err(|rule| ConfigError::invalid("callers", rule))?;
        }
        if self.unix_socket.is_none() && self.tls.is_none() && !self.listen.ip().is_loopback() {
            return Err(ConfigError::invalid(
                "listen",
                "without unix_socket or [tls] the signer API is served on listen and \
                 authenticates no caller: bind it to loopback, or set unix_socket or [tls]",
            ));
        }
        if self.rpc_timeout_ms == 0 {
            return Err(ConfigError::invalid("rpc_timeout_ms", "must be positive"));
        }
        if self.confirmations == 0 {
            return Err(ConfigError::invalid("confirmations", "must be at least 1"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_that_authenticates_nobody_is_served_on_loopback_only() {
        let open = Config {
            listen: "0.0.0.0:50052".parse().unwrap(),
            ..Config::default()
        };
        let refused = open.validate().unwrap_err().to_string();
        assert!(
            refused.contains("listen") && refused.contains("unix_socket"),
            "{refused}"
        );
        Config {
            unix_socket: Some("/run/sigcast/signer.sock".into()),
            ..open.clone()
        }
        .validate()
        .expect("on a Unix socket the API authenticates by uid; listen serves health only");
        Config {
            listen: "127.0.0.1:50052".parse().unwrap(),
            ..open
        }
        .validate()
        .expect("loopback: local development");
    }

    #[test]
    fn the_defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn a_priority_fee_cap_under_the_base_is_refused_by_name() {
        let cluster = |base, max| SolanaClusterConfig {
            cluster: "devnet".into(),
            rpc_urls: vec!["http://127.0.0.1:8899".into()],
            compute_unit_price_micro_lamports: base,
            max_compute_unit_price_micro_lamports: max,
            genesis_hash: None,
        };
        let with = |cluster| Config {
            solana_clusters: vec![cluster],
            ..Config::default()
        };
        for (base, max) in [(1_000, Some(999)), (0, Some(0)), (5, Some(0))] {
            let error = with(cluster(base, max)).validate().unwrap_err().to_string();
            assert!(
                error.contains("max_compute_unit_price_micro_lamports") && error.contains("devnet"),
                "{error}"
            );
        }
        for (base, max) in [(1_000, Some(1_000)), (0, Some(1)), (1_000, None), (0, None)] {
            with(cluster(base, max)).validate().unwrap();
        }
    }

    #[test]
    fn a_fee_cap_of_zero_is_refused_by_name() {
        let mut config = Config::default();
        config.evm_chains[0].max_fee_per_gas_gwei = 0;
        let error = config.validate().unwrap_err().to_string();
        assert!(
            error.contains("evm_chains.max_fee_per_gas_gwei") && error.contains("31337"),
            "{error}"
        );
    }

    #[test]
    fn a_confirmation_depth_of_zero_is_refused_by_name() {
        let config = Config {
            confirmations: 0,
            ..Config::default()
        };
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains("confirmations"), "{error}");
    }
}
