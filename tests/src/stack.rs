//! A whole sigcast deployment on the embedded store: anvil, signer, broadcaster and gateway as
//! separate processes sharing one SQLite file, each on its own ports.

use crate::{Service, free_addr};
use sigcast_broadcaster as broadcaster;
use sigcast_gateway as gateway;
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use sigcast_signer as signer;
pub use softhsm::SoftHsm;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The anvil binary: `SIGCAST_ANVIL` (set by scripts/install-deps.sh --env), else `anvil` on PATH.
fn anvil_binary() -> PathBuf {
    std::env::var_os("SIGCAST_ANVIL")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| "anvil".into())
}

/// A real anvil node (npm `@foundry-rs/anvil`'s platform binary), killed by pid on drop.
pub struct Anvil {
    /// Its JSON-RPC URL.
    pub url: String,
    /// Its address.
    pub addr: std::net::SocketAddr,
    child: Child,
}

impl Anvil {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts anvil on a free port; `block_time` in seconds, or automine when `None`.
    pub fn start(block_time: Option<u64>, log_dir: &Path) -> Self {
        Self::start_with(block_time, log_dir, &[])
    }

    /// Starts anvil as [`Anvil::start`] does, with more of its arguments.
    pub fn start_with(block_time: Option<u64>, log_dir: &Path, args: &[&str]) -> Self {
        let addr = free_addr();
        let mut command = Command::new(anvil_binary());
        command.args([
            "--port",
            &addr.port().to_string(),
            "--chain-id",
            "31337",
            "--host",
            "127.0.0.1",
        ]);
        if let Some(seconds) = block_time {
            command.args(["--block-time", &seconds.to_string()]);
        }
        command.args(args);
        let log = std::fs::File::create(log_dir.join("anvil.log")).expect("anvil log");
        let child = command
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "starting anvil ({}): {e}; run scripts/install-deps.sh",
                    anvil_binary().display()
                )
            });
        let anvil = Self {
            url: format!("http://{addr}"),
            addr,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "anvil did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(50));
        }
        anvil
    }
}

impl Drop for Anvil {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Options of a stack.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Dev accounts whose keys the signer holds.
    pub accounts: usize,
    /// anvil block time; `None` for automine.
    pub block_time: Option<u64>,
    /// More of anvil's arguments (e.g. `--base-fee 0`).
    pub anvil_args: Vec<String>,
    /// Put a fault proxy between the broadcaster and anvil: (share of sends faulted, seed).
    pub faults: Option<(f64, u64)>,
    /// Signer and broadcaster processes of each kind (all on the one store).
    pub replicas: usize,
    /// The broadcaster's `fee_bump_after_ms`.
    pub fee_bump_after_ms: u64,
    /// The broadcaster's `confirmations`.
    pub confirmations: u64,
    /// Sign legacy (type 0) transactions instead of EIP-1559.
    pub legacy: bool,
    /// Extra top-level settings of the signer (`key = value` lines).
    pub signer_settings: String,
    /// Extra tables of the signer's config (e.g. `[[policies]]`).
    pub signer_tables: String,
    /// Extra environment of the signer processes.
    pub signer_env: Vec<(String, String)>,
    /// How the broadcaster reaches the signer, instead of its Unix socket.
    pub broadcaster_signer_url: Option<String>,
    /// Extra tables of the broadcaster's config (e.g. `[signer_tls]`).
    pub broadcaster_tables: String,
    /// Extra environment of the broadcaster processes.
    pub broadcaster_env: Vec<(String, String)>,
    /// Extra environment of the gateway (e.g. `SIGCAST_GATEWAY__LIMITS__REQUEST_TIMEOUT_MS`).
    pub gateway_env: Vec<(String, String)>,
    /// A Solana node's JSON-RPC URL: serve cluster "localnet" there.
    pub solana_rpc: Option<String>,
    /// Ed25519 keys the signer holds for Solana (generated into its keystore).
    pub solana_accounts: usize,
    /// Where the broadcaster reaches the Solana node, when not `solana_rpc` (a proxy).
    pub solana_broadcaster_rpc: Option<String>,
    /// The signer's Solana priority fee, micro-lamports per compute unit.
    pub solana_compute_unit_price: u64,
    /// An OTLP/gRPC receiver every service exports its spans to.
    pub otlp_endpoint: Option<String>,
    /// secp256k1 keys generated into the signer's keystore (beyond the dev accounts); the
    /// caller funds them (`anvil_setBalance`).
    pub generated_evm_keys: usize,
    /// The signer's fee cap for the chain, in gwei (`max_fee_per_gas_gwei`); `None`: its default.
    pub max_fee_per_gas_gwei: Option<u64>,
    /// Put a proxy (`Stack::signer_proxy`) between the signers and anvil, e.g. to inflate the
    /// fees anvil quotes.
    pub signer_proxy: bool,
    /// The signer proxy answers every request this late.
    pub signer_proxy_lag: Option<Duration>,
    /// Endpoints of the signers' chain before the stack's own (anvil, or the signer proxy).
    pub signer_rpc_first: Vec<String>,
    /// A second endpoint of the broadcasters to anvil, after the first (`Stack::second_proxy`),
    /// answering every request this late.
    pub second_endpoint_lag: Option<Duration>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            accounts: 4,
            block_time: Some(1),
            anvil_args: Vec::new(),
            faults: None,
            replicas: 1,
            fee_bump_after_ms: 60_000,
            confirmations: 1,
            legacy: false,
            signer_settings: String::new(),
            signer_tables: String::new(),
            signer_env: Vec::new(),
            broadcaster_signer_url: None,
            broadcaster_tables: String::new(),
            broadcaster_env: Vec::new(),
            gateway_env: Vec::new(),
            solana_rpc: None,
            solana_accounts: 0,
            solana_broadcaster_rpc: None,
            solana_compute_unit_price: 0,
            otlp_endpoint: None,
            generated_evm_keys: 0,
            max_fee_per_gas_gwei: None,
            signer_proxy: false,
            second_endpoint_lag: None,
            signer_proxy_lag: None,
            signer_rpc_first: Vec::new(),
        }
    }
}

/// A client of a signer's Unix socket (as the broadcaster connects).
pub async fn signer_client(
    socket: &Path,
) -> Result<
    sigcast_proto::sigcast::signer::v1::signer_service_client::SignerServiceClient<Channel>,
    tonic::transport::Error,
> {
    let channel = sigcast_proto::unix_channel(socket).await?;
    Ok(
        sigcast_proto::sigcast::signer::v1::signer_service_client::SignerServiceClient::new(
            channel,
        ),
    )
}

/// anvil + signer + broadcaster + gateway on one SQLite store.
pub struct Stack {
    /// The node.
    pub anvil: Anvil,
    /// The fault proxy between the broadcasters and anvil, if asked for.
    pub proxy: Option<crate::FaultProxy>,
    /// The proxy between the signers and anvil, if asked for.
    pub signer_proxy: Option<crate::FaultProxy>,
    /// The broadcasters' second endpoint to anvil, if asked for (`second_endpoint_lag`).
    pub second_proxy: Option<crate::FaultProxy>,
    /// The signer processes.
    pub signers: Vec<Service>,
    /// The broadcaster processes (the i-th uses the i-th signer).
    pub broadcasters: Vec<Service>,
    /// The gateway process.
    pub gateway: Service,
    /// Shared directory: store, keys, configs, logs.
    pub dir: tempfile::TempDir,
    /// The Solana accounts (base58) whose Ed25519 keys the signer holds.
    pub solana_accounts: Vec<String>,
    /// Each process's metrics address: "gateway", "signer-0", "broadcaster-0", …
    pub metrics: Vec<(String, std::net::SocketAddr)>,
    /// The addresses of the generated secp256k1 keys (`generated_evm_keys`).
    pub evm_accounts: Vec<String>,
}

impl Stack {
    /// Starts everything and waits until each service is serving.
    pub async fn start(options: StackOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path();
        let anvil_args: Vec<&str> = options.anvil_args.iter().map(String::as_str).collect();
        let anvil = Anvil::start_with(options.block_time, path, &anvil_args);
        let store = sigcast_store::StoreConfig {
            path: path.join("sigcast.db"),
            ..Default::default()
        };
        let signer_proxy = match (options.signer_proxy, options.signer_proxy_lag) {
            (true, Some(lag)) => Some(crate::FaultProxy::slow(anvil.addr, lag).await),
            (true, None) => {
                Some(crate::FaultProxy::start(anvil.addr, 0.0, 0, Duration::ZERO).await)
            }
            (false, _) => None,
        };
        let mut chain = signer::Config::default().evm_chains.remove(0);
        chain.rpc_urls = options.signer_rpc_first.clone();
        chain
            .rpc_urls
            .push(signer_proxy.as_ref().map_or(&anvil.url, |p| &p.url).clone());
        if options.legacy {
            chain.tx_type = signer::config::TxType::Legacy;
        }
        if let Some(cap) = options.max_fee_per_gas_gwei {
            chain.max_fee_per_gas_gwei = cap;
        }
        std::fs::write(path.join("passphrase"), "e2e passphrase\n").unwrap();

        let proxy = match options.faults {
            // Past the broadcaster's 2 s RPC timeout: a delayed reply is a timed-out send.
            Some((rate, seed)) => Some(
                crate::FaultProxy::start(anvil.addr, rate, seed, Duration::from_millis(2_500))
                    .await,
            ),
            None => None,
        };
        let send_url = proxy.as_ref().map_or(anvil.url.clone(), |p| p.url.clone());
        let second_proxy = match options.second_endpoint_lag {
            Some(lag) => Some(crate::FaultProxy::slow(anvil.addr, lag).await),
            None => None,
        };
        let broadcaster_urls: Vec<String> = std::iter::once(send_url.clone())
            .chain(second_proxy.iter().map(|p| p.url.clone()))
            .collect();
        let keys = signer::Config {
            keystore_dir: path.join("keys"),
            passphrase_file: Some(path.join("passphrase")),
            store: store.clone(),
            evm_chains: vec![chain],
            ..Default::default()
        };
        std::fs::write(path.join("keys.toml"), config_toml(&keys)).unwrap();
        let import = Command::new(crate::binary("sigcast-signer"))
            .args(["--config"])
            .arg(path.join("keys.toml"))
            .args([
                "keys",
                "import-dev",
                "--count",
                &options.accounts.to_string(),
            ])
            .output()
            .expect("run sigcast-signer keys import-dev");
        let generate = |algorithm: &str| {
            let generated = Command::new(crate::binary("sigcast-signer"))
                .args(["--config"])
                .arg(path.join("keys.toml"))
                .args([
                    "keys",
                    "generate",
                    "--backend",
                    "keystore",
                    "--algorithm",
                    algorithm,
                ])
                .output()
                .expect("run sigcast-signer keys generate");
            assert!(
                generated.status.success(),
                "{}",
                String::from_utf8_lossy(&generated.stderr)
            );
            String::from_utf8(generated.stdout)
                .unwrap()
                .trim()
                .to_owned()
        };
        let evm_accounts: Vec<String> = (0..options.generated_evm_keys)
            .map(|_| generate("secp256k1"))
            .collect();
        let mut solana_accounts = Vec::new();
        for _ in 0..options.solana_accounts {
            solana_accounts.push(generate("ed25519"));
        }
        let signer_clusters: Vec<_> = options
            .solana_rpc
            .iter()
            .map(|url| signer::config::SolanaClusterConfig {
                cluster: "localnet".into(),
                rpc_urls: vec![url.clone()],
                compute_unit_price_micro_lamports: options.solana_compute_unit_price,
                max_compute_unit_price_micro_lamports: None,
                genesis_hash: None,
            })
            .collect();
        let broadcaster_clusters: Vec<_> = options
            .solana_broadcaster_rpc
            .as_ref()
            .or(options.solana_rpc.as_ref())
            .map(|url| broadcaster::config::SolanaClusterConfig {
                cluster: "localnet".into(),
                rpc_urls: vec![url.clone()],
                genesis_hash: None,
            })
            .into_iter()
            .collect();
        assert!(
            import.status.success(),
            "{}",
            String::from_utf8_lossy(&import.stderr)
        );

        // Spans exported quickly (100 ms batches) to the test's receiver, if any.
        let tracing = sigcast_telemetry::TracingConfig {
            otlp_endpoint: options.otlp_endpoint.clone().unwrap_or_default(),
            ..Default::default()
        };
        let telemetry_env: Vec<(String, String)> = if options.otlp_endpoint.is_some() {
            vec![("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into())]
        } else {
            Vec::new()
        };
        let mut metrics = Vec::new();
        let mut metrics_addr = |name: String| {
            let addr = free_addr();
            metrics.push((name, addr));
            Some(addr)
        };
        let mut signers = Vec::new();
        let mut broadcasters = Vec::new();
        for replica in 0..options.replicas.max(1) {
            let replica_dir = path.join(format!("replica-{replica}"));
            std::fs::create_dir_all(&replica_dir).unwrap();
            let signer_addr = free_addr();
            // The signer API on a Unix socket, callers checked by uid; TCP serves health only.
            let socket = replica_dir.join("signer.sock");
            let signer_config = signer::Config {
                listen: signer_addr,
                unix_socket: Some(socket.clone()),
                metrics_listen: metrics_addr(format!("signer-{replica}")),
                solana_clusters: signer_clusters.clone(),
                tracing: tracing.clone(),
                // As a deployment sets it: the broadcaster's depth.
                confirmations: options.confirmations,
                ..keys.clone()
            };
            let signer_toml = config_toml(&with_settings(
                &signer_config,
                &format!("{}{}", options.signer_settings, options.signer_tables),
            ));
            let mut signer_env = options.signer_env.clone();
            signer_env.extend(telemetry_env.clone());
            signers.push(
                Service::start_with_env(
                    "sigcast-signer",
                    &replica_dir,
                    signer_addr,
                    &signer_toml,
                    signer_env,
                )
                .await,
            );
            let broadcaster_addr = free_addr();
            let broadcaster_config = broadcaster::Config {
                listen: broadcaster_addr,
                metrics_listen: metrics_addr(format!("broadcaster-{replica}")),
                signer_url: options
                    .broadcaster_signer_url
                    .clone()
                    .unwrap_or_else(|| format!("unix:{}", socket.display())),
                poll_ms: 100,
                rpc_timeout_ms: 2_000,
                rebroadcast_ms: 3_000,
                fee_bump_after_ms: options.fee_bump_after_ms,
                confirmations: options.confirmations,
                store: store.clone(),
                evm_chains: vec![broadcaster::config::EvmChainConfig {
                    chain_id: keys.evm_chains[0].chain_id,
                    rpc_urls: broadcaster_urls.clone(),
                }],
                solana_clusters: broadcaster_clusters.clone(),
                tracing: tracing.clone(),
                ..Default::default()
            };
            let broadcaster_toml = config_toml(&with_settings(
                &broadcaster_config,
                &options.broadcaster_tables,
            ));
            let mut broadcaster_env = options.broadcaster_env.clone();
            broadcaster_env.extend(telemetry_env.clone());
            broadcasters.push(
                Service::start_with_env(
                    "sigcast-broadcaster",
                    &replica_dir,
                    broadcaster_addr,
                    &broadcaster_toml,
                    broadcaster_env,
                )
                .await,
            );
        }
        let gateway_addr = free_addr();
        let gateway_config = gateway::Config {
            listen: gateway_addr,
            watch_poll_ms: 50,
            metrics_listen: metrics_addr("gateway".into()),
            store,
            tracing,
            ..Default::default()
        };
        let mut gateway_env = options.gateway_env.clone();
        gateway_env.extend(telemetry_env);
        let gateway = Service::start_with_env(
            "sigcast-gateway",
            path,
            gateway_addr,
            &config_toml(&gateway_config),
            gateway_env,
        )
        .await;
        Self {
            anvil,
            proxy,
            signer_proxy,
            second_proxy,
            signers,
            broadcasters,
            gateway,
            dir,
            solana_accounts,
            metrics,
            evm_accounts,
        }
    }

    /// The Unix socket of the i-th signer.
    pub fn signer_socket(&self, replica: usize) -> PathBuf {
        self.dir
            .path()
            .join(format!("replica-{replica}"))
            .join("signer.sock")
    }

    /// Lays `settings` (TOML text) over the i-th signer's configuration file, as
    /// [`with_settings`] does; they take effect at its next start.
    pub fn add_signer_settings(&self, replica: usize, settings: &str) {
        let file = self
            .dir
            .path()
            .join(format!("replica-{replica}"))
            .join("sigcast-signer.toml");
        let config: signer::Config =
            toml::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        std::fs::write(&file, config_toml(&with_settings(&config, settings))).unwrap();
    }

    /// The metrics address of a process ("gateway", "signer-0", "broadcaster-0").
    pub fn metrics_addr(&self, name: &str) -> std::net::SocketAddr {
        self.metrics
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, addr)| *addr)
            .unwrap_or_else(|| panic!("no process {name}"))
    }

    /// A client of the gateway.
    pub async fn client(&self) -> OperationServiceClient<Channel> {
        OperationServiceClient::connect(format!("http://{}", self.gateway.addr))
            .await
            .expect("connect gateway")
    }

    /// Every service's log, for a failure message.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for service in self
            .signers
            .iter()
            .chain(&self.broadcasters)
            .chain([&self.gateway])
        {
            out.push_str(&format!(
                "--- {}\n{}\n",
                service.binary,
                tail(&service.log())
            ));
        }
        out
    }
}

/// A service's configuration file, written from its own `Config` type: a setting the stack
/// misnames does not compile.
fn config_toml(config: &impl serde::Serialize) -> String {
    toml::to_string(config).expect("a service configuration is TOML")
}

/// `config` with `settings` laid over it: TOML text as an operator writes it (a test's
/// `[[policies]]`, `[tls]`, …), its tables merged, its arrays of tables appended, its other
/// values replacing. Read back into the service's own type, so a misspelt setting fails here,
/// before any process starts.
fn with_settings<C: serde::Serialize + serde::de::DeserializeOwned>(
    config: &C,
    settings: &str,
) -> C {
    fn lay(base: &mut toml::Table, over: toml::Table) {
        for (key, value) in over {
            match (base.get_mut(&key), value) {
                (Some(toml::Value::Table(base)), toml::Value::Table(over)) => lay(base, over),
                (Some(toml::Value::Array(base)), toml::Value::Array(over))
                    if !over.is_empty() && over.iter().all(toml::Value::is_table) =>
                {
                    base.extend(over)
                }
                (_, value) => {
                    base.insert(key, value);
                }
            }
        }
    }
    let toml::Value::Table(mut merged) =
        toml::Value::try_from(config).expect("a service configuration is TOML")
    else {
        panic!("a service configuration is a table");
    };
    let over: toml::Table = settings
        .parse()
        .unwrap_or_else(|e| panic!("settings {settings:?}: {e}"));
    lay(&mut merged, over);
    toml::Value::Table(merged)
        .try_into()
        .unwrap_or_else(|e| panic!("settings {settings:?}: {e}"))
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

mod softhsm {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    /// The PKCS#11 module of Debian's softhsm2 (installed by scripts/install-deps.sh).
    pub(super) const MODULE: &str = "/usr/lib/softhsm/libsofthsm2.so";

    /// A SoftHSM2 token in its own directory: SOFTHSM2_CONF points there.
    pub struct SoftHsm {
        /// softhsm2.conf.
        pub conf: PathBuf,
        /// The token's label.
        pub label: String,
        /// File with the user PIN.
        pub pin_file: PathBuf,
    }

    impl SoftHsm {
        /// Initialises a fresh token under `dir`.
        pub fn init(dir: &Path, label: &str) -> Self {
            let tokens = dir.join("tokens");
            std::fs::create_dir_all(&tokens).unwrap();
            let conf = dir.join("softhsm2.conf");
            std::fs::write(
                &conf,
                format!(
                    "directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n",
                    tokens.display()
                ),
            )
            .unwrap();
            let pin_file = dir.join("pin");
            std::fs::write(&pin_file, "4242\n").unwrap();
            let init = Command::new("softhsm2-util")
                .args([
                    "--init-token",
                    "--free",
                    "--label",
                    label,
                    "--pin",
                    "4242",
                    "--so-pin",
                    "8484",
                ])
                .env("SOFTHSM2_CONF", &conf)
                .output()
                .expect("softhsm2-util (Debian softhsm2, installed by scripts/install-deps.sh)");
            assert!(
                init.status.success(),
                "{}",
                String::from_utf8_lossy(&init.stderr)
            );
            Self {
                conf,
                label: label.into(),
                pin_file,
            }
        }

        /// The signer's `[pkcs11]` table for this token.
        pub fn signer_table(&self) -> String {
            format!(
                "[pkcs11]\nmodule = \"{MODULE}\"\ntoken_label = \"{}\"\npin_file = \"{}\"\n",
                self.label,
                self.pin_file.display()
            )
        }

        /// The environment a process using the token needs.
        pub fn env(&self) -> Vec<(String, String)> {
            vec![("SOFTHSM2_CONF".into(), self.conf.display().to_string())]
        }
    }
}
