//! The signer's command line as an operator uses it.

use std::process::Command;

fn signer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sigcast-signer"))
}

#[test]
fn import_dev_keys_then_list_them_and_refuse_a_wrong_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let run = |args: &[&str], passphrase: &str| {
        signer()
            .args(args)
            .env("SIGCAST_SIGNER__KEYSTORE_DIR", &keys)
            .env("SIGCAST_SIGNER_PASSPHRASE", passphrase)
            .output()
            .unwrap()
    };
    let imported = run(&["keys", "import-dev", "--count", "3"], "correct horse");
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let listed = run(&["keys", "list"], "correct horse");
    let stdout = String::from_utf8(listed.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 3, "{stdout}");
    assert!(stdout.contains("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"));

    let wrong = run(&["keys", "list"], "wrong");
    assert!(!wrong.status.success());
    let stderr = String::from_utf8_lossy(&wrong.stderr);
    assert!(stderr.contains("keystore file"), "{stderr}");
    assert!(
        !stderr.contains("ac0974bec39a17e36ba4a6b4d238ff944bacb478"),
        "no key material in errors"
    );

    let missing = signer()
        .args(["keys", "list"])
        .env("SIGCAST_SIGNER__KEYSTORE_DIR", &keys)
        .env_remove("SIGCAST_SIGNER_PASSPHRASE")
        .output()
        .unwrap();
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("SIGCAST_SIGNER_PASSPHRASE"));
}

#[test]
fn an_existing_key_is_imported_into_an_encrypted_keystore() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let key_file = dir.path().join("key.hex");
    // anvil dev key #5 (public test key).
    std::fs::write(
        &key_file,
        "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        signer()
            .args(args)
            .env("SIGCAST_SIGNER__KEYSTORE_DIR", &keys)
            .env("SIGCAST_SIGNER_PASSPHRASE", "pw")
            .output()
            .unwrap()
    };
    let imported = run(&["keys", "import", "--key-file", key_file.to_str().unwrap()]);
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let account = String::from_utf8(imported.stdout)
        .unwrap()
        .trim()
        .to_owned();
    assert_eq!(account, "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc");
    let listed = String::from_utf8(run(&["keys", "list"]).stdout).unwrap();
    assert_eq!(listed.trim(), format!("{account} keystore"));
    let keystore = std::fs::read_to_string(keys.join(format!("{account}.json"))).unwrap();
    assert!(
        !keystore.contains("8b3a350cf5c34c9194ca85829a2df0ec"),
        "encrypted, not copied"
    );

    let again = run(&["keys", "import", "--key-file", key_file.to_str().unwrap()]);
    assert!(
        !again.status.success(),
        "an existing keystore is not overwritten"
    );
    std::fs::write(&key_file, "not a key").unwrap();
    let bad = run(&["keys", "import", "--key-file", key_file.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && stderr.contains("key.hex") && stderr.contains("hex"),
        "{stderr}"
    );
}
