//! The broadcaster's start-up as an operator meets it.

use std::process::Command;

#[test]
fn a_bad_configuration_is_refused_naming_the_setting() {
    let output = Command::new(env!("CARGO_BIN_EXE_sigcast-broadcaster"))
        .env("SIGCAST_BROADCASTER__CONFIRMATIONS", "0")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("confirmations"), "{stderr}");

    let help = Command::new(env!("CARGO_BIN_EXE_sigcast-broadcaster"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(String::from_utf8_lossy(&help.stdout).contains("--config"));
}
