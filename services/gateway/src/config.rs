//! Gateway configuration: defaults, then a TOML file, then `SIGCAST_GATEWAY__*` environment
//! variables (`__` separates levels: `SIGCAST_GATEWAY__STORE__PATH=/data/sigcast.db`).

use serde::{Deserialize, Serialize};
use sigcast_domain::IntentRules;
use sigcast_store::StoreConfig;
use sigcast_telemetry::{LogConfig, TracingConfig};
use std::net::SocketAddr;
use std::time::Duration;

pub use sigcast_runtime::{ConfigError, ServiceConfig};

/// Prefix of the environment variables that override the file.
pub const ENV_PREFIX: &str = "SIGCAST_GATEWAY__";

/// Everything the gateway needs to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the gRPC server listens on.
    pub listen: SocketAddr,
    /// The store shared with the signer and broadcaster.
    pub store: StoreConfig,
    /// Chains this deployment accepts operations for.
    pub chains: ChainsConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// The signer's key policies (`[[policies]]`, the same table the signer reads): a submit
    /// the signer would refuse is PERMISSION_DENIED at once. The signer still enforces them.
    pub policies: Vec<sigcast_domain::policy::KeyPolicy>,
    /// How often a WatchOperation stream re-reads its operation, in milliseconds.
    pub watch_poll_ms: u64,
    /// Logging.
    pub log: LogConfig,
    /// Trace export (`[tracing]`): OTLP endpoint and sampling.
    pub tracing: TracingConfig,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); none: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// A plaintext listener serving only `grpc.health.v1` (for probes that speak no TLS);
    /// none: not served.
    pub health_listen: Option<SocketAddr>,
    /// Mutual TLS (`[tls]`): every caller presents a certificate the client CA issued, and its
    /// identity (URI SAN, else DNS SAN, else CN) is what `[[callers]]` names.
    pub tls: Option<sigcast_runtime::tls::TlsConfig>,
    /// Serve plaintext on an address other than loopback. Only for a service mesh whose sidecar
    /// terminates mTLS in front of the gateway (`[mesh]` then tells who called); without it a
    /// non-loopback plaintext listener is refused at start.
    pub allow_plaintext: bool,
    /// The mesh sidecar that forwards the caller's certificate identity (`[mesh]`).
    pub mesh: Option<crate::identity::MeshConfig>,
    /// Who may submit from which accounts, on which chains, which intent kinds, and cancel
    /// (`[[callers]]`, the same table the signer reads). Empty: every caller may do everything
    /// (development).
    pub callers: Vec<sigcast_domain::callers::CallerRule>,
    /// Identities the operator API (`sigcast.operator.v1`, the audit trail of any operation)
    /// answers. Empty: nobody once callers are authenticated ([tls] or [mesh]); anyone on a
    /// development gateway that authenticates nobody.
    pub operators: Vec<String>,
    /// Serve the operator API on this address only (with the same TLS), instead of beside
    /// the public API; none: beside it.
    pub operator_listen: Option<SocketAddr>,
}

/// Chains accepted at submit; anything else is INVALID_ARGUMENT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ChainsConfig {
    /// EIP-155 chain ids.
    pub evm_chain_ids: Vec<u64>,
    /// Solana cluster names.
    pub solana_clusters: Vec<String>,
}

/// Size limits on what callers send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest gRPC request message accepted, in bytes; larger ones get OUT_OF_RANGE.
    pub max_request_bytes: usize,
    /// Largest EVM call data accepted, in bytes.
    pub max_evm_call_data_bytes: usize,
    /// Calls in progress at once on one connection; more wait.
    pub max_calls_per_connection: usize,
    /// HTTP/2 streams one connection may open at once (each watch holds one).
    pub max_concurrent_streams: u32,
    /// How long a unary call may take, in milliseconds (a watch stream is not cut).
    pub request_timeout_ms: u64,
    /// Watches one caller may hold open; one more is RESOURCE_EXHAUSTED.
    pub max_watches_per_caller: usize,
    /// Watches open on this gateway in all.
    pub max_watches: usize,
    /// Largest ListOperations response, in bytes of operations: a page of large records ends
    /// early, with a token to the rest.
    pub max_list_response_bytes: usize,
    /// Memory for finished operations, in bytes of their records: a caller's replay of its
    /// own operation read here finished before is answered without the store (a terminal
    /// record never changes). About 0.9 KB each for an EVM transfer; 0 keeps none.
    pub finished_operations_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 50051)),
            store: StoreConfig::default(),
            chains: ChainsConfig::default(),
            limits: LimitsConfig::default(),
            policies: Vec::new(),
            watch_poll_ms: 200,
            log: LogConfig::default(),
            tracing: TracingConfig::default(),
            metrics_listen: None,
            health_listen: None,
            tls: None,
            allow_plaintext: false,
            mesh: None,
            callers: Vec::new(),
            operators: Vec::new(),
            operator_listen: None,
        }
    }
}

impl Default for ChainsConfig {
    fn default() -> Self {
        let rules = IntentRules::default();
        Self {
            evm_chain_ids: rules.evm_chain_ids.into_iter().collect(),
            solana_clusters: rules.solana_clusters.into_iter().collect(),
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: 1024 * 1024,
            max_evm_call_data_bytes: IntentRules::default().max_evm_call_data,
            max_calls_per_connection: 256,
            max_concurrent_streams: 2048,
            request_timeout_ms: 30_000,
            max_watches_per_caller: 1_000,
            max_watches: 10_000,
            // Under the 4 MiB that gRPC clients accept by default, with room for the token.
            max_list_response_bytes: 3_584 * 1024,
            finished_operations_bytes: 32 * 1024 * 1024,
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
        if self.chains.evm_chain_ids.is_empty() && self.chains.solana_clusters.is_empty() {
            return invalid(
                "chains",
                "at least one EVM chain id or Solana cluster is required",
            );
        }
        if self.limits.max_request_bytes < 4096 {
            return invalid("limits.max_request_bytes", "must be at least 4096");
        }
        if self.limits.max_evm_call_data_bytes >= self.limits.max_request_bytes {
            return invalid(
                "limits.max_evm_call_data_bytes",
                "must be below limits.max_request_bytes",
            );
        }
        let limits = &self.limits;
        if limits.max_calls_per_connection == 0
            || limits.max_concurrent_streams == 0
            || limits.request_timeout_ms == 0
            || limits.max_watches_per_caller == 0
            || limits.max_watches == 0
        {
            return invalid(
                "limits",
                "max_calls_per_connection, max_concurrent_streams, request_timeout_ms, \
                 max_watches_per_caller and max_watches must be positive",
            );
        }
        if limits.max_list_response_bytes < 65_536 {
            return invalid("limits.max_list_response_bytes", "must be at least 65536");
        }
        if !(10..=60_000).contains(&self.watch_poll_ms) {
            return invalid("watch_poll_ms", "must be 10 to 60000");
        }
        for policy in &self.policies {
            policy
                .validate()
                .map_err(|rule| ConfigError::invalid("policies", rule))?;
        }
        if self.store.max_concurrency == 0 {
            return invalid("store.max_concurrency", "must be at least 1");
        }
        for rule in &self.callers {
            rule.validate()
                .map_err(|rule| ConfigError::invalid("callers", rule))?;
        }
        if self.tls.is_none() && !self.listen.ip().is_loopback() && !self.allow_plaintext {
            return invalid(
                "listen",
                "a plaintext listener on an address other than loopback authenticates nobody: \
                 configure [tls], or set allow_plaintext behind a mesh that terminates mTLS",
            );
        }
        if let Some(addr) = self.operator_listen
            && self.tls.is_none()
            && !addr.ip().is_loopback()
            && !self.allow_plaintext
        {
            return invalid(
                "operator_listen",
                "a plaintext listener on an address other than loopback authenticates nobody: \
                 configure [tls], or set allow_plaintext behind a mesh that terminates mTLS",
            );
        }
        let off_loopback = !self.listen.ip().is_loopback()
            || self.operator_listen.is_some_and(|a| !a.ip().is_loopback());
        if self.allow_plaintext && self.tls.is_none() && self.mesh.is_none() && off_loopback {
            return invalid(
                "allow_plaintext",
                "behind a sidecar, callers are told apart only by the certificate it forwards: \
                 configure [mesh] (its addresses and header), or every caller is the same \
                 unauthenticated one",
            );
        }
        if self.mesh.is_some() && self.tls.is_some() {
            return invalid(
                "mesh",
                "with [tls] the gateway reads callers' certificates itself; [mesh] is for plaintext behind a sidecar",
            );
        }
        Ok(())
    }
}

impl Config {
    /// The intent rules this configuration implies.
    pub fn intent_rules(&self) -> IntentRules {
        IntentRules {
            evm_chain_ids: self.chains.evm_chain_ids.iter().copied().collect(),
            solana_clusters: self.chains.solana_clusters.iter().cloned().collect(),
            max_evm_call_data: self.limits.max_evm_call_data_bytes,
        }
    }

    /// The watch poll interval.
    pub fn watch_poll(&self) -> Duration {
        Duration::from_millis(self.watch_poll_ms)
    }
}

#[cfg(test)]
// figment's Jail fixes the closures' error type to its own (large) figment::Error.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn plaintext_off_loopback_needs_to_be_asked_for() {
        let open = Config {
            listen: "0.0.0.0:50051".parse().unwrap(),
            ..Config::default()
        };
        let error = open.validate().unwrap_err().to_string();
        assert!(
            error.contains("listen") && error.contains("[tls]"),
            "{error}"
        );
        // Behind a sidecar, callers are told apart only by its forwarded certificate:
        // without [mesh] every caller would be the same unauthenticated one.
        let unknown = Config {
            allow_plaintext: true,
            ..open.clone()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            unknown.contains("allow_plaintext") && unknown.contains("[mesh]"),
            "{unknown}"
        );
        Config {
            allow_plaintext: true,
            mesh: Some(crate::identity::MeshConfig {
                sidecars: vec!["127.0.0.1".parse().unwrap()],
                header: "x-forwarded-client-cert".into(),
            }),
            ..open.clone()
        }
        .validate()
        .unwrap();
        Config {
            allow_plaintext: true,
            ..Config::default()
        }
        .validate()
        .expect("on loopback, plaintext needs nothing");
        Config {
            tls: Some(sigcast_runtime::tls::TlsConfig {
                cert: "c".into(),
                key: "k".into(),
                client_ca: "ca".into(),
                reload_secs: 5,
            }),
            ..open
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn file_then_env_override_defaults() {
        figment::Jail::expect_with(|jail| {
            jail.create_file(
                "gateway.toml",
                r#"
                    listen = "127.0.0.1:6000"
                    [store]
                    backend = "sqlite"
                    path = "/tmp/x.db"
                    [chains]
                    evm_chain_ids = [1, 31337]
                "#,
            )?;
            jail.set_env("SIGCAST_GATEWAY__LISTEN", "127.0.0.1:7000");
            jail.set_env("SIGCAST_GATEWAY__LIMITS__MAX_EVM_CALL_DATA_BYTES", "1000");
            let config = Config::load(Some(Path::new("gateway.toml"))).unwrap();
            assert_eq!(config.listen, "127.0.0.1:7000".parse().unwrap());
            assert_eq!(config.chains.evm_chain_ids, [1, 31337]);
            assert_eq!(config.limits.max_evm_call_data_bytes, 1000);
            assert_eq!(config.store, StoreConfig::sqlite("/tmp/x.db"));
            Ok(())
        });
    }

    #[test]
    fn bad_values_are_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("bad.toml", "watch_poll_ms = 1")?;
            let err = Config::load(Some(Path::new("bad.toml"))).unwrap_err();
            assert!(err.to_string().contains("watch_poll_ms"), "{err}");
            jail.create_file("typo.toml", "listne = \"127.0.0.1:1\"")?;
            let err = Config::load(Some(Path::new("typo.toml"))).unwrap_err();
            assert!(err.to_string().contains("listne"), "{err}");
            assert!(Config::load(Some(Path::new("missing.toml"))).is_err());
            Ok(())
        });
    }
}
