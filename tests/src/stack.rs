//! A whole sigcast deployment on the embedded store: anvil, signer, broadcaster and gateway as
//! separate processes sharing one SQLite file, each on its own ports.

use crate::{Service, free_addr};
use sigcast_proto::sigcast::v1::operation_service_client::OperationServiceClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The anvil binary: `SIGCAST_ANVIL` (set by scripts/install-deps.sh --env), else `anvil` on PATH.
fn anvil_binary() -> PathBuf {
    std::env::var_os("SIGCAST_ANVIL").filter(|p| !p.is_empty()).map(PathBuf::from).unwrap_or_else(|| "anvil".into())
}

/// A real anvil node (npm `@foundry-rs/anvil`'s platform binary), killed by pid on drop.
pub struct Anvil {
    /// Its JSON-RPC URL.
    pub url: String,
    child: Child,
}

impl Anvil {
    /// Starts anvil on a free port; `block_time` in seconds, or automine when `None`.
    pub fn start(block_time: Option<u64>, log_dir: &Path) -> Self {
        let addr = free_addr();
        let mut command = Command::new(anvil_binary());
        command.args(["--port", &addr.port().to_string(), "--chain-id", "31337", "--host", "127.0.0.1"]);
        if let Some(seconds) = block_time {
            command.args(["--block-time", &seconds.to_string()]);
        }
        let log = std::fs::File::create(log_dir.join("anvil.log")).expect("anvil log");
        let child = command
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting anvil ({}): {e}; run scripts/install-deps.sh", anvil_binary().display()));
        let anvil = Self { url: format!("http://{addr}"), child };
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
}

impl Default for StackOptions {
    fn default() -> Self {
        Self { accounts: 4, block_time: Some(1) }
    }
}

/// anvil + signer + broadcaster + gateway on one SQLite store.
pub struct Stack {
    /// The node.
    pub anvil: Anvil,
    /// The signer process.
    pub signer: Service,
    /// The broadcaster process.
    pub broadcaster: Service,
    /// The gateway process.
    pub gateway: Service,
    /// Shared directory: store, keys, configs, logs.
    pub dir: tempfile::TempDir,
}

impl Stack {
    /// Starts everything and waits until each service is serving.
    pub async fn start(options: StackOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path();
        let anvil = Anvil::start(options.block_time, path);
        let store = format!("[store]\npath = \"{}\"\n", path.join("sigcast.db").display());
        let chain = format!("[[evm_chains]]\nchain_id = 31337\nrpc_urls = [\"{}\"]\n", anvil.url);
        std::fs::write(path.join("passphrase"), "e2e passphrase\n").unwrap();

        let (signer_addr, broadcaster_addr, gateway_addr) = (free_addr(), free_addr(), free_addr());
        let signer_toml = format!(
            "listen = \"{signer_addr}\"\nkeystore_dir = \"{}\"\npassphrase_file = \"{}\"\n{store}{chain}",
            path.join("keys").display(),
            path.join("passphrase").display()
        );
        std::fs::write(path.join("sigcast-signer.toml"), &signer_toml).unwrap();
        let import = Command::new(crate::binary("sigcast-signer"))
            .args(["--config"])
            .arg(path.join("sigcast-signer.toml"))
            .args(["keys", "import-dev", "--count", &options.accounts.to_string()])
            .output()
            .expect("run sigcast-signer keys import-dev");
        assert!(import.status.success(), "{}", String::from_utf8_lossy(&import.stderr));
        let signer = Service::start("sigcast-signer", path, signer_addr, &signer_toml).await;

        let broadcaster_toml = format!(
            "listen = \"{broadcaster_addr}\"\nsigner_url = \"http://{signer_addr}\"\npoll_ms = 100\n\
             rpc_timeout_ms = 2000\nrebroadcast_ms = 3000\n{store}{chain}"
        );
        let broadcaster = Service::start("sigcast-broadcaster", path, broadcaster_addr, &broadcaster_toml).await;
        let gateway_toml = format!("listen = \"{gateway_addr}\"\nwatch_poll_ms = 50\n{store}");
        let gateway = Service::start("sigcast-gateway", path, gateway_addr, &gateway_toml).await;
        Self { anvil, signer, broadcaster, gateway, dir }
    }

    /// A client of the gateway.
    pub async fn client(&self) -> OperationServiceClient<Channel> {
        OperationServiceClient::connect(format!("http://{}", self.gateway.addr)).await.expect("connect gateway")
    }

    /// Every service's log, for a failure message.
    pub fn logs(&self) -> String {
        format!(
            "--- signer\n{}\n--- broadcaster\n{}\n--- gateway\n{}",
            tail(&self.signer.log()),
            tail(&self.broadcaster.log()),
            tail(&self.gateway.log())
        )
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
