//! `scripts/run.sh` as a newcomer runs it (on its own ports and data directory, with the
//! binaries this test run built), then the README's Solana walkthrough, as written.

use crate::runbook::readme_commands;
use sigcast_e2e::free_addr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `scripts/run.sh`, in a process group of its own: stopped with SIGTERM (its own Ctrl-C
/// path) when dropped, and killed with its whole group if that does not end it.
struct RunScript {
    child: Child,
    output: std::path::PathBuf,
}

impl RunScript {
    fn output(&self) -> String {
        std::fs::read_to_string(&self.output).unwrap_or_default()
    }
}

impl Drop for RunScript {
    fn drop(&mut self) {
        let group = format!("-{}", self.child.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_sh_then_the_solana_walkthrough_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let (gateway, signer, broadcaster) = (free_addr(), free_addr(), free_addr());
    let (anvil_port, solana_port) = (free_addr().port(), free_addr().port());
    let output = dir.path().join("run.out");
    let log = std::fs::File::create(&output).unwrap();
    let child = Command::new("bash")
        .arg(crate::clients::repo().join("scripts/run.sh"))
        .env("SIGCAST_DATA", dir.path().join("data"))
        .env("SIGCAST_BIN_DIR", sigcast_e2e::bin_dir())
        .env("SIGCAST_LISTEN", gateway.to_string())
        .env("SIGCAST_SIGNER_LISTEN", signer.to_string())
        .env("SIGCAST_BROADCASTER_LISTEN", broadcaster.to_string())
        .env("ANVIL_PORT", anvil_port.to_string())
        .env("SOLANA_PORT", solana_port.to_string())
        // What would point run.sh at an existing node and its keys instead.
        .env_remove("SIGCAST_EVM_RPC")
        .env_remove("SIGCAST_KEYSTORE_DIR")
        .env_remove("SIGCAST_SIGNER_PASSPHRASE")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .process_group(0)
        .spawn()
        .expect("run scripts/run.sh");
    let mut script = RunScript { child, output };

    // Ready when it says where the gateway is (it has waited for the port).
    let deadline = Instant::now() + Duration::from_secs(120);
    while !script.output().contains("gateway:     ") {
        if let Ok(Some(status)) = script.child.try_wait() {
            panic!("run.sh ended ({status}):\n{}", script.output());
        }
        assert!(
            Instant::now() < deadline,
            "run.sh not ready:\n{}",
            script.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let commands = readme_commands("## Walkthrough on Solana");
    assert_eq!(
        commands.len(),
        5,
        "the walkthrough's commands: {commands:?}"
    );
    let mut watched = Vec::new();
    let mut balance = String::new();
    for command in commands {
        let command = command
            .replace("127.0.0.1:50051", &gateway.to_string())
            .replace("127.0.0.1:8899", &format!("127.0.0.1:{solana_port}"));
        // Bounded: a watch that never ends must fail the test, not hang it.
        let out = Command::new("timeout")
            .args(["120", "bash", "-c"])
            .arg(&command)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        println!("$ {command}{stdout}{stderr}");
        assert!(
            out.status.success(),
            "{command}\n{stderr}\nrun.sh:\n{}",
            script.output()
        );
        if command.contains("WatchOperation") {
            watched.push(stdout);
        } else if command.contains("getBalance") {
            balance = stdout;
        }
    }
    assert_eq!(watched.len(), 2);
    for stream in &watched {
        assert!(
            stream.contains("OPERATION_STATE_CONFIRMED")
                && stream.contains("EXECUTION_STATUS_SUCCESS"),
            "watched to a successful end: {stream}"
        );
    }
    assert!(
        watched[0].contains("\"blockhash\""),
        "account 0 signs with a recent blockhash: {}",
        watched[0]
    );
    assert!(
        watched[1].contains("\"nonceAccount\""),
        "account 1 signs with a durable nonce: {}",
        watched[1]
    );
    assert!(
        balance.contains("\"value\":1500000000"),
        "both transfers arrived, once each: {balance}"
    );
}
