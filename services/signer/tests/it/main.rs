//! The signer's command line as an operator uses it, and its servers in process (`serve`).

mod serve;

use std::process::Command;

fn signer() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sigcast-signer"))
}

/// A `keys` command of the signer on the keystore directory `keys`, with `passphrase`.
fn keys_command(keys: &std::path::Path, args: &[&str], passphrase: &str) -> std::process::Output {
    signer()
        .args(args)
        .env("SIGCAST_SIGNER__KEYSTORE_DIR", keys)
        .env("SIGCAST_SIGNER_PASSPHRASE", passphrase)
        .output()
        .unwrap()
}

/// A keystore directory (not made yet) and a file holding anvil's dev key #5 (a public test
/// key), in `dir`.
fn keys_and_dev_key_5(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let key_file = dir.join("key.hex");
    std::fs::write(
        &key_file,
        "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba\n",
    )
    .unwrap();
    (dir.join("keys"), key_file)
}

#[test]
fn import_dev_keys_then_list_them_and_refuse_a_wrong_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let run = |args: &[&str], passphrase: &str| keys_command(&keys, args, passphrase);
    // None at all is a valid count (the load generator's stacks hold generated keys only).
    let none = run(&["keys", "import-dev", "--count", "0"], "correct horse");
    assert!(
        none.status.success() && none.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&none.stderr)
    );
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
    let (keys, key_file) = keys_and_dev_key_5(dir.path());
    let run = |args: &[&str]| keys_command(&keys, args, "pw");
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

#[test]
fn a_keystore_another_passphrase_would_open_never_joins_the_directory() {
    // The signer opens every keystore with one passphrase and stops at the first it cannot:
    // one written with another would stop every signer of the directory at its next start.
    let dir = tempfile::tempdir().unwrap();
    let (keys, key_file) = keys_and_dev_key_5(dir.path());
    let run = |args: &[&str], passphrase: &str| keys_command(&keys, args, passphrase);
    let first = run(&["keys", "import-dev", "--count", "1"], "first");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for args in [
        &["keys", "import", "--key-file", key_file.to_str().unwrap()][..],
        &[
            "keys",
            "generate",
            "--backend",
            "keystore",
            "--algorithm",
            "ed25519",
        ][..],
        &["keys", "import-dev", "--count", "2"][..],
    ] {
        let refused = run(args, "second");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains("nothing was written"),
            "{args:?}: {stderr}"
        );
    }
    let files: Vec<_> = std::fs::read_dir(&keys).unwrap().collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let listed = run(&["keys", "list"], "first");
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    // With the directory's passphrase, a new key joins it.
    let imported = run(
        &["keys", "import", "--key-file", key_file.to_str().unwrap()],
        "first",
    );
    assert!(
        imported.status.success(),
        "{}",
        String::from_utf8_lossy(&imported.stderr)
    );
    let files: Vec<_> = std::fs::read_dir(&keys)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(files.len(), 2, "no partial file left: {files:?}");
    assert_eq!(
        String::from_utf8(run(&["keys", "list"], "first").stdout)
            .unwrap()
            .lines()
            .count(),
        2
    );
}

/// A SoftHSM2 token in `dir` (Debian softhsm2, installed by scripts/install-deps.sh); returns
/// the signer configuration that uses it.
fn softhsm_token(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let tokens = dir.join("tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    let conf = dir.join("softhsm2.conf");
    std::fs::write(
        &conf,
        format!(
            "directories.tokendir = {}\nobjectstore.backend = file\n",
            tokens.display()
        ),
    )
    .unwrap();
    let init = Command::new("softhsm2-util")
        .args([
            "--init-token",
            "--free",
            "--label",
            "sol",
            "--pin",
            "2468",
            "--so-pin",
            "1357",
        ])
        .env("SOFTHSM2_CONF", &conf)
        .output()
        .expect("softhsm2-util");
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    std::fs::write(dir.join("pin"), "2468\n").unwrap();
    let config = dir.join("signer.toml");
    std::fs::write(
        &config,
        format!(
            "keystore_dir = \"{}\"\n[pkcs11]\nmodule = \"/usr/lib/softhsm/libsofthsm2.so\"\ntoken_label = \"sol\"\npin_file = \"{}\"\n",
            dir.join("keys").display(),
            dir.join("pin").display()
        ),
    )
    .unwrap();
    (conf, config)
}

#[test]
fn a_solana_transfer_signed_inside_the_token_verifies() {
    use sigcast_domain::{Lamports, SolanaPubkey, SolanaTransfer};
    let dir = tempfile::tempdir().unwrap();
    // Sign with the key inside the token, through the signer's token module.
    let (token, accounts) = opened_token(dir.path(), &[("sol-hot", "ed25519")]);
    let from = SolanaPubkey::parse(&accounts[0]).expect("a base58 Ed25519 public key");
    let key = token
        .ed25519_keys()
        .unwrap()
        .into_iter()
        .find(|k| k.label == "sol-hot")
        .expect("the generated key");
    assert_eq!(&key.public_key, from.as_bytes());
    let transfer = SolanaTransfer {
        cluster: "localnet".into(),
        from,
        to: SolanaPubkey::from([42; 32]),
        lamports: Lamports(1_000_000),
    };
    let message = sigcast_solana::transfer_message(
        &transfer,
        &sigcast_solana::Lifetime::Blockhash([5; 32]),
        0,
    );
    let signature = key.sign(&sigcast_solana::message_bytes(&message)).unwrap();
    assert!(
        sigcast_solana::verify(&sigcast_solana::assemble(message.clone(), &[signature])),
        "the token's signature verifies"
    );
    let mut tampered = signature;
    tampered[0] ^= 1;
    assert!(!sigcast_solana::verify(&sigcast_solana::assemble(
        message,
        &[tampered]
    )));

    // softhsm_token's configuration files, as the CLI reads them.
    let listed = signer()
        .arg("--config")
        .arg(dir.path().join("signer.toml"))
        .args(["keys", "list"])
        .env("SOFTHSM2_CONF", dir.path().join("softhsm2.conf"))
        .env("SIGCAST_SIGNER_PASSPHRASE", "unused")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains(&format!("{} pkcs11 ed25519", accounts[0])),
        "{listed}"
    );
}

#[test]
fn token_keys_that_share_a_label_are_paired_by_their_id_and_each_signs_as_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (token, accounts) = opened_token(dir.path(), &[("hot", "ed25519"), ("hot", "ed25519")]);
    let (first, second) = (accounts[0].clone(), accounts[1].clone());
    assert_ne!(first, second);
    let keys = token.ed25519_keys().unwrap();
    let mut publics: Vec<String> = keys
        .iter()
        .map(|k| bs58::encode(k.public_key).into_string())
        .collect();
    publics.sort();
    let mut expected = vec![first, second];
    expected.sort();
    assert_eq!(
        publics, expected,
        "each private key with its own public key"
    );
    for key in &keys {
        let transfer = sigcast_domain::SolanaTransfer {
            cluster: "localnet".into(),
            from: sigcast_domain::SolanaPubkey::from(key.public_key),
            to: sigcast_domain::SolanaPubkey::from([42; 32]),
            lamports: sigcast_domain::Lamports(1),
        };
        let message = sigcast_solana::transfer_message(
            &transfer,
            &sigcast_solana::Lifetime::Blockhash([5; 32]),
            0,
        );
        let signature = key.sign(&sigcast_solana::message_bytes(&message)).unwrap();
        assert!(
            sigcast_solana::verify(&sigcast_solana::assemble(message, &[signature])),
            "a key signs as the account it names"
        );
    }
}

#[test]
fn ed25519_keys_live_in_encrypted_keystores_too_and_sign_solana_transfers() {
    use sigcast_domain::{Lamports, SolanaPubkey, SolanaTransfer};
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    let run = |args: &[&str]| keys_command(&keys, args, "pw");
    let generated = run(&[
        "keys",
        "generate",
        "--backend",
        "keystore",
        "--algorithm",
        "ed25519",
    ]);
    assert!(
        generated.status.success(),
        "{}",
        String::from_utf8_lossy(&generated.stderr)
    );
    let account = String::from_utf8(generated.stdout)
        .unwrap()
        .trim()
        .to_owned();
    let listed = String::from_utf8(run(&["keys", "list"]).stdout).unwrap();
    assert_eq!(listed.trim(), format!("{account} keystore ed25519"));

    let keyring = sigcast_signer::keys::Keyring::load(&keys, "pw").unwrap();
    let from = SolanaPubkey::parse(&account).unwrap();
    let key = keyring.ed25519(from.as_bytes()).expect("loaded");
    let transfer = SolanaTransfer {
        cluster: "localnet".into(),
        from,
        to: SolanaPubkey::from([1; 32]),
        lamports: Lamports(7),
    };
    let message = sigcast_solana::transfer_message(
        &transfer,
        &sigcast_solana::Lifetime::Blockhash([9; 32]),
        0,
    );
    let signature = key.sign(&sigcast_solana::message_bytes(&message)).unwrap();
    assert!(sigcast_solana::verify(&sigcast_solana::assemble(
        message,
        &[signature]
    )));
    assert!(
        sigcast_signer::keys::Keyring::load(&keys, "wrong").is_err(),
        "encrypted with the passphrase"
    );
}

/// A SoftHSM token under `dir` (PIN in `dir/pin`) with a key generated by the signer's CLI
/// for each `(label, algorithm)`, opened in this process; and the accounts the CLI printed.
fn opened_token(
    dir: &std::path::Path,
    keys: &[(&str, &str)],
) -> (sigcast_signer::token::Token, Vec<String>) {
    let (conf, config) = softhsm_token(dir);
    let mut accounts = Vec::new();
    for (label, algorithm) in keys {
        let out = signer()
            .arg("--config")
            .arg(&config)
            .args([
                "keys",
                "generate",
                "--label",
                label,
                "--algorithm",
                algorithm,
            ])
            .env("SOFTHSM2_CONF", &conf)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        accounts.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    // SAFETY: each test runs alone in its process under nextest; set before the module loads.
    unsafe { std::env::set_var("SOFTHSM2_CONF", &conf) };
    let token = sigcast_signer::token::Token::open(&sigcast_signer::token::Pkcs11Config {
        module: "/usr/lib/softhsm/libsofthsm2.so".into(),
        token_label: "sol".into(),
        pin_file: Some(dir.join("pin")),
    })
    .unwrap();
    (token, accounts)
}

#[test]
fn a_lost_token_session_is_reopened_and_the_next_signatures_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let (token, _) = opened_token(dir.path(), &[("evm", "secp256k1"), ("sol", "ed25519")]);
    let evm = token.keys().unwrap().pop().unwrap();
    let sol = token.ed25519_keys().unwrap().pop().unwrap();
    let digest = sigcast_evm::B256::repeat_byte(7);
    let recovers = |signature: sigcast_evm::Signature| {
        signature.recover_address_from_prehash(&digest).unwrap() == evm.address
    };
    assert!(recovers(evm.sign_hash(&digest).unwrap()));
    sol.sign(b"before").unwrap();

    // The login ends under the signer (a token reset, another session logging out).
    token.log_out_elsewhere().unwrap();
    assert!(
        recovers(
            evm.sign_hash(&digest)
                .expect("signing after the session was lost")
        ),
        "signs as its own account after reopening"
    );
    let signature = sol
        .sign(b"after")
        .expect("Ed25519 signing after the session was lost");
    let key = ed25519_dalek::VerifyingKey::from_bytes(&sol.public_key).unwrap();
    key.verify_strict(b"after", &ed25519_dalek::Signature::from_bytes(&signature))
        .expect("signed by its own key");
}

#[test]
fn the_token_check_opens_a_lost_session_again_and_fails_once_the_pin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (token, _) = opened_token(dir.path(), &[("evm", "secp256k1")]);
    let pin = dir.path().join("pin");
    let key = token.keys().unwrap().pop().unwrap();
    let health = key.health();
    health.check().expect("a fresh session is alive");

    // The login ends under the signer: the check logs in again, and signing goes on.
    token.log_out_elsewhere().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1_100)); // logins are paced
    health.check().expect("a lost login is opened again");
    // Logged in now: a check within the login pace has nothing to open (it would be refused).
    health
        .check()
        .expect("the session checked above is logged in");
    let digest = sigcast_evm::B256::repeat_byte(9);
    key.sign_hash(&digest).expect("signing after the check");

    // The PIN changed (rotated on the HSM, not in the signer's file): the check fails, and
    // keeps failing without trying the refused PIN again.
    std::fs::write(&pin, "000000000").unwrap();
    token.log_out_elsewhere().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1_100));
    let refused = health.check().unwrap_err();
    assert!(refused.pin_refused(), "{refused}");
    let again = health.check().unwrap_err();
    assert!(again.to_string().contains("not trying again"), "{again}");
    assert!(
        again.pin_refused(),
        "still the PIN's refusal: a liveness probe must not restart the signer into trying it"
    );
}

#[test]
fn a_command_that_reads_keys_runs_hardened_as_the_server_does() {
    // `keys list` decrypts every keystore: no core dump of it, as of the server (review,
    // fourteenth session). The passphrase file is a FIFO, so the command waits on it while
    // its limits are read.
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("passphrase");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let mut listing = signer()
        .args(["keys", "list"])
        .env("SIGCAST_SIGNER__KEYSTORE_DIR", dir.path().join("keys"))
        .env("SIGCAST_SIGNER__PASSPHRASE_FILE", &fifo)
        .env_remove("SIGCAST_SIGNER_PASSPHRASE")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Opening the FIFO to write returns once the command opened it to read its passphrase:
    // its limits then are those it decrypts keys with.
    let mut writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", listing.id())).unwrap();
    use std::io::Write;
    writer.write_all(b"correct horse\n").unwrap();
    drop(writer);
    listing.wait().unwrap();
    let core = limits
        .lines()
        .find(|l| l.starts_with("Max core file size"))
        .unwrap_or_default()
        .split_whitespace()
        .skip(4)
        .take(2)
        .collect::<Vec<_>>();
    assert_eq!(core, ["0", "0"], "{limits}");
}
