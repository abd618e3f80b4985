//! The Python and Node client packages (clients/), generated from proto/ by their buf
//! templates: installed from the repository, their tests and examples run against live stacks.

use sigcast_e2e::{Stack, StackOptions};
use std::path::PathBuf;
use std::process::Command;

/// The clone's root, read at run time: a test binary may be reused from a shared target dir
/// by a clone at another path.
pub(crate) fn repo() -> PathBuf {
    PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .parent()
        .unwrap()
        .to_path_buf()
}

const FROM: &str = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266";
const TO: &str = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

fn run(command: &mut Command) -> String {
    let output = command.output().expect("run the client");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{stdout}");
    stdout
}

/// The Python package's source (its generated code is committed), for PYTHONPATH.
fn python_source() -> PathBuf {
    repo().join("clients/python/src")
}

/// A Node project with the package installed from the repository (packed, then installed
/// from the npm cache install-deps filled), and `files` of clients/node copied into it.
fn node_project(files: &[&str]) -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    let packed = run(Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(project.path())
        .arg(repo().join("clients/node")));
    std::fs::write(
        project.path().join("package.json"),
        r#"{ "name": "sigcast-client-test", "private": true, "type": "module" }"#,
    )
    .unwrap();
    run(Command::new("npm")
        .args([
            "install",
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
        ])
        .arg(format!("./{}", packed.trim()))
        .current_dir(project.path()));
    for file in files {
        let name = std::path::Path::new(file).file_name().unwrap();
        std::fs::copy(
            repo().join("clients/node").join(file),
            project.path().join(name),
        )
        .unwrap();
    }
    project
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_and_node_examples_submit_replay_and_watch_to_confirmed() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let address = stack.gateway.addr.to_string();

    let python = run(Command::new("python3")
        .arg(repo().join("clients/python/example.py"))
        .args([address.as_str(), "py-example-1", FROM, TO, "1000"])
        .env("PYTHONPATH", python_source())
        .env("PYTHONDONTWRITEBYTECODE", "1"));
    assert!(python.contains("replayed: True"), "{python}");
    assert!(
        python.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{python}"
    );

    let project = node_project(&["example.mjs"]);
    let node = run(Command::new("node")
        .arg("example.mjs")
        .args([address.as_str(), "node-example-1", FROM, TO, "2000"])
        .current_dir(project.path()));
    assert!(node.contains("replayed: true"), "{node}");
    assert!(node.contains("terminal CONFIRMED"), "{node}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_python_and_node_examples_connect_with_mutual_tls_as_their_caller() {
    use crate::callers::{ALICE, callers_table, pki, tls_gateway};
    let pki_dir = pki();
    let pki = pki_dir.path();
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: callers_table(),
        ..Default::default()
    })
    .await;
    let (_gateway, address) = tls_gateway(&stack, pki, &callers_table()).await;
    let tls_env = |name: &str| {
        [
            ("SIGCAST_TLS_CA", pki.join("ca.pem")),
            ("SIGCAST_TLS_CERT", pki.join(format!("{name}.pem"))),
            ("SIGCAST_TLS_KEY", pki.join(format!("{name}.key"))),
            ("SIGCAST_TLS_SERVER_NAME", "localhost".into()),
        ]
    };

    let python = run(Command::new("python3")
        .arg(repo().join("clients/python/example.py"))
        .args([address.as_str(), "py-mtls-1", FROM, TO, "1000"])
        .env("PYTHONPATH", python_source())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .envs(tls_env("alice")));
    assert!(python.contains(&format!("caller: {ALICE}")), "{python}");
    assert!(
        python.contains("terminal OPERATION_STATE_CONFIRMED"),
        "{python}"
    );

    let project = node_project(&["example.mjs"]);
    let node = run(Command::new("node")
        .arg("example.mjs")
        .args([address.as_str(), "node-mtls-1", FROM, TO, "2000"])
        .current_dir(project.path())
        .envs(tls_env("alice")));
    assert!(node.contains(&format!("caller: {ALICE}")), "{node}");
    assert!(node.contains("terminal CONFIRMED"), "{node}");

    // A certificate of another CA: no handshake, nothing submitted.
    let refused = Command::new("node")
        .arg("example.mjs")
        .args([address.as_str(), "node-mtls-2", FROM, TO, "3000"])
        .current_dir(project.path())
        .envs(tls_env("mallory"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("unknown ca"),
        "a certificate of another CA must fail the handshake: {stderr}"
    );
}

/// The Python package installed from the repository into a fresh virtual environment (pip,
/// setuptools and the dependencies from the machine's site, no index), then its tests against
/// a live stack.
fn install_and_test_python(env: &[(&str, String)]) -> String {
    let venv = tempfile::tempdir().unwrap();
    run(Command::new("python3")
        .args(["-m", "venv", "--system-site-packages", "--without-pip"])
        .arg(venv.path()));
    let python = venv.path().join("bin/python");
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-index",
            "--no-build-isolation",
            "--disable-pip-version-check",
        ])
        .arg(repo().join("clients/python")));
    // Run from elsewhere, so the installed package is what is imported, not the source tree.
    run(Command::new(&python)
        .arg(repo().join("clients/python/tests/test_live.py"))
        .current_dir(venv.path())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str()))))
}

/// The Node package installed from the repository into a fresh project, then its tests
/// against a live stack.
fn install_and_test_node(env: &[(&str, String)]) -> String {
    let project = node_project(&["test/live.test.js"]);
    run(Command::new("node")
        .args(["--test", "live.test.js"])
        .current_dir(project.path())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str()))))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_packaged_clients_install_from_the_repository_and_pass_their_tests_live() {
    let stack = Stack::start(StackOptions {
        accounts: 1,
        ..Default::default()
    })
    .await;
    let env = |run: &str| {
        vec![
            ("SIGCAST_GATEWAY", stack.gateway.addr.to_string()),
            ("SIGCAST_FROM", FROM.to_owned()),
            ("SIGCAST_TO", TO.to_owned()),
            (
                "SIGCAST_CLI",
                sigcast_e2e::binary("sigcast").display().to_string(),
            ),
            ("SIGCAST_RUN", run.to_owned()),
        ]
    };
    let python = install_and_test_python(&env("py"));
    println!("{python}");
    let node = install_and_test_node(&env("node"));
    assert!(
        node.contains("# pass 7") && node.contains("# fail 0"),
        "{node}"
    );
}

#[test]
fn the_committed_client_code_is_what_the_buf_templates_generate() {
    let out = tempfile::tempdir().unwrap();
    run(Command::new("bash")
        .arg(repo().join("clients/generate.sh"))
        .arg(out.path()));
    for generated in ["clients/python/src/sigcast", "clients/node/src/gen"] {
        let diff = Command::new("diff")
            .args(["-r", "-x", "__pycache__"])
            .arg(repo().join(generated))
            .arg(out.path().join(generated))
            .output()
            .unwrap();
        assert!(
            diff.status.success(),
            "{generated} differs from what clients/generate.sh writes: run it and commit\n{}",
            String::from_utf8_lossy(&diff.stdout)
        );
    }
}
