//! The `sigcast` binary as an operator runs it (integration tests that need a running stack are
//! in the workspace's e2e suite; this binary target also makes `cargo test` build `sigcast`).

use std::process::Command;

fn sigcast(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sigcast"))
        .args(args)
        .output()
        .expect("run sigcast")
}

#[test]
fn help_lists_every_command() {
    let output = sigcast(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for command in ["op", "audit", "reconcile", "keys", "derive-op-id"] {
        assert!(help.contains(command), "{command} in:\n{help}");
    }
    let op_help = String::from_utf8_lossy(&sigcast(&["op", "--help"]).stdout).into_owned();
    for command in ["get", "watch", "list", "cancel", "attempts"] {
        assert!(op_help.contains(command), "{command} in:\n{op_help}");
    }
}

#[test]
fn an_unreachable_gateway_is_one_clear_line_and_exit_4() {
    let output = sigcast(&["--gateway", "http://127.0.0.1:1", "op", "get", "x"]);
    assert_eq!(output.status.code(), Some(4), "4: unavailable, retry later");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with("error: connecting to the gateway at http://127.0.0.1:1"),
        "{stderr}"
    );
}

#[test]
fn derive_op_id_prints_the_key() {
    let output = sigcast(&[
        "derive-op-id",
        "--chain",
        "eip155:1",
        "--from",
        "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
        "--to",
        "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        "--amount",
        "100",
        "--reference",
        "inv-1",
    ]);
    assert!(output.status.success());
    let id = String::from_utf8(output.stdout).unwrap();
    assert!(id.starts_with("sc1-") && id.trim().len() == 68, "{id}");
}

#[test]
fn tls_options_for_a_plaintext_gateway_are_refused_not_ignored() {
    let output = sigcast(&[
        "--gateway",
        "http://127.0.0.1:1",
        "--ca",
        "/nonexistent/ca.pem",
        "op",
        "get",
        "x",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("need an https:// gateway"), "{stderr}");
}

#[test]
fn signer_tls_options_are_all_or_none_and_only_for_an_https_signer() {
    for args in [
        // Partial: the call would go unauthenticated, or fail obscurely.
        &[
            "--signer",
            "https://127.0.0.1:1",
            "--signer-ca",
            "/nonexistent/ca.pem",
        ][..],
        // For a plaintext or local signer: ignored, never presented.
        &[
            "--signer",
            "http://127.0.0.1:1",
            "--signer-ca",
            "/nonexistent/ca.pem",
            "--signer-cert",
            "/nonexistent/cert.pem",
            "--signer-key",
            "/nonexistent/key.pem",
        ][..],
        // An https signer authenticates callers by certificate.
        &["--signer", "https://127.0.0.1:1"][..],
    ] {
        let mut command = vec!["keys", "list"];
        command.extend_from_slice(args);
        let output = sigcast(&command);
        assert_eq!(output.status.code(), Some(1), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains("go together"), "{args:?}: {stderr}");
    }
}
