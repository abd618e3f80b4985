//! The signer over mutual TLS: only certificates from the client CA, and of those only the
//! allowed ones, get an answer; the broadcaster works through it.

use crate::evm::{assert_exactly_once, submit_transfers};
use sigcast_e2e::{Stack, StackOptions, free_addr};
use sigcast_proto::sigcast::signer::v1::ListKeysRequest;
use sigcast_proto::sigcast::signer::v1::signer_service_client::SignerServiceClient;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a certificate it issues for `name` with `usage` (serverAuth / clientAuth), and its key.
fn issue(dir: &Path, ca: &str, name: &str, usage: &str) {
    issue_with_san(dir, ca, name, usage, "DNS:localhost,IP:127.0.0.1");
}

/// As `issue`, with the subject alternative names `san` (e.g. `URI:spiffe://corp/a`).
pub(crate) fn issue_with_san(dir: &Path, ca: &str, name: &str, usage: &str, san: &str) {
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!("subjectAltName={san}\nextendedKeyUsage={usage}\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.pem"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "1",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

pub(crate) fn new_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "1",
            "-subj",
            &format!("/CN={name}"),
        ],
    );
}

fn fingerprint(dir: &Path, name: &str) -> String {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args([
            "x509",
            "-in",
            &format!("{name}.pem"),
            "-noout",
            "-fingerprint",
            "-sha256",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_lowercase()
}

async fn client(
    addr: &str,
    dir: &Path,
    identity: Option<&str>,
) -> Result<SignerServiceClient<tonic::transport::Channel>, tonic::transport::Error> {
    let read = |p: PathBuf| std::fs::read(p).unwrap();
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(dir.join("ca.pem"))))
        .domain_name("localhost");
    if let Some(name) = identity {
        tls = tls.identity(Identity::from_pem(
            read(dir.join(format!("{name}.pem"))),
            read(dir.join(format!("{name}.key"))),
        ));
    }
    let channel = Endpoint::from_shared(format!("https://{addr}"))?
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(SignerServiceClient::new(channel))
}

/// The SHA-256 fingerprint (hex) of the certificate the server at `addr` presents, read with
/// `openssl s_client` as the broadcaster.
fn served_fingerprint(dir: &Path, addr: &str) -> String {
    let handshake = Command::new("openssl")
        .current_dir(dir)
        .args([
            "s_client",
            "-connect",
            addr,
            "-CAfile",
            "ca.pem",
            "-cert",
            "broadcaster.pem",
            "-key",
            "broadcaster.key",
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let mut x509 = Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut x509.stdin.take().unwrap(), &handshake.stdout).unwrap();
    let text = String::from_utf8(x509.wait_with_output().unwrap().stdout).unwrap();
    text.trim()
        .rsplit('=')
        .next()
        .unwrap()
        .replace(':', "")
        .to_lowercase()
}

async fn list_keys(addr: &str, dir: &Path, identity: Option<&str>) -> Result<usize, String> {
    let mut signer = client(addr, dir, identity)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let keys = signer
        .list_keys(ListKeysRequest {})
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?;
    Ok(keys.into_inner().keys.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_allowed_client_certificates_reach_the_signer_and_the_broadcaster_works_over_mtls() {
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    new_ca(dir, "ca");
    issue(dir, "ca", "signer", "serverAuth");
    issue(dir, "ca", "broadcaster", "clientAuth");
    issue(dir, "ca", "intruder", "clientAuth"); // issued by the right CA, not allowed
    new_ca(dir, "other-ca");
    issue(dir, "other-ca", "stranger", "clientAuth"); // unknown CA
    let tls_addr = free_addr().to_string();
    let p = |name: &str| dir.join(name).display().to_string();
    let signer_tls = format!(
        "[tls]\nlisten = \"{tls_addr}\"\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\nallowed_client_fingerprints = [\"{}\"]\n",
        p("signer.pem"),
        p("signer.key"),
        p("ca.pem"),
        fingerprint(dir, "broadcaster")
    );
    let broadcaster_tls = format!(
        "[signer_tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\ndomain = \"localhost\"\n",
        p("ca.pem"),
        p("broadcaster.pem"),
        p("broadcaster.key")
    );
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: signer_tls,
        broadcaster_signer_url: Some(format!("https://{tls_addr}")),
        broadcaster_tables: broadcaster_tls,
        ..Default::default()
    })
    .await;

    assert_eq!(
        list_keys(&tls_addr, dir, Some("broadcaster")).await,
        Ok(2),
        "the allowed certificate is answered"
    );
    let refused = list_keys(&tls_addr, dir, Some("intruder"))
        .await
        .unwrap_err();
    assert!(refused.starts_with("PermissionDenied"), "{refused}");
    assert!(
        stack.signers[0]
            .log()
            .contains("client certificate not allowed"),
        "refusal logged"
    );
    assert!(
        list_keys(&tls_addr, dir, Some("stranger")).await.is_err(),
        "a certificate from another CA is refused"
    );
    assert!(
        list_keys(&tls_addr, dir, None).await.is_err(),
        "no certificate, no answer"
    );

    // The broadcaster signs through mTLS: operations confirm.
    let planned = submit_transfers(&stack, "mtls", 6, 2).await;
    assert_exactly_once(&stack, &planned, 2, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_signer_allows_certificates_by_identity_through_a_renewal_without_a_restart() {
    const BROADCASTER: &str = "spiffe://corp.example/ns/sigcast/sa/broadcaster";
    let pki = tempfile::tempdir().unwrap();
    let dir = pki.path();
    new_ca(dir, "ca");
    issue(dir, "ca", "signer", "serverAuth");
    issue_with_san(
        dir,
        "ca",
        "broadcaster",
        "clientAuth",
        &format!("URI:{BROADCASTER}"),
    );
    issue_with_san(
        dir,
        "ca",
        "intruder",
        "clientAuth",
        "URI:spiffe://corp.example/ns/other/sa/intruder",
    );
    let tls_addr = free_addr().to_string();
    let p = |name: &str| dir.join(name).display().to_string();
    let signer_tls = format!(
        "[tls]\nlisten = \"{tls_addr}\"\ncert = \"{}\"\nkey = \"{}\"\nclient_ca = \"{}\"\n\
         allowed_client_identities = [\"{BROADCASTER}\"]\nreload_secs = 1\n",
        p("signer.pem"),
        p("signer.key"),
        p("ca.pem"),
    );
    let broadcaster_tls = format!(
        "[signer_tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\ndomain = \"localhost\"\n",
        p("ca.pem"),
        p("broadcaster.pem"),
        p("broadcaster.key")
    );
    let stack = Stack::start(StackOptions {
        accounts: 2,
        signer_tables: signer_tls,
        broadcaster_signer_url: Some(format!("https://{tls_addr}")),
        broadcaster_tables: broadcaster_tls,
        ..Default::default()
    })
    .await;
    assert_eq!(list_keys(&tls_addr, dir, Some("broadcaster")).await, Ok(2));
    let refused = list_keys(&tls_addr, dir, Some("intruder"))
        .await
        .unwrap_err();
    assert!(refused.starts_with("PermissionDenied"), "{refused}");
    assert!(
        refused.contains("intruder"),
        "the identity is named: {refused}"
    );

    // Renewal: a new key and certificate for the same identity (a new fingerprint) is still
    // the broadcaster; and a renewed server certificate is served by the same process.
    let old = std::fs::read(dir.join("broadcaster.pem")).unwrap();
    issue_with_san(
        dir,
        "ca",
        "broadcaster",
        "clientAuth",
        &format!("URI:{BROADCASTER}"),
    );
    assert_ne!(std::fs::read(dir.join("broadcaster.pem")).unwrap(), old);
    assert_eq!(list_keys(&tls_addr, dir, Some("broadcaster")).await, Ok(2));
    let pid = stack.signers[0].pid();
    issue(dir, "ca", "signer", "serverAuth");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !stack.signers[0].log().contains("TLS certificates reloaded") {
        assert!(
            std::time::Instant::now() < deadline,
            "the renewed certificate was not taken up"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(list_keys(&tls_addr, dir, Some("broadcaster")).await, Ok(2));
    assert_eq!(stack.signers[0].pid(), pid, "no restart");
    assert_eq!(
        served_fingerprint(dir, &tls_addr),
        fingerprint(dir, "signer"),
        "the renewed certificate is the one served"
    );

    // The broadcaster signs through it: operations confirm.
    let planned = submit_transfers(&stack, "mtls-id", 6, 2).await;
    assert_exactly_once(&stack, &planned, 2, Duration::from_secs(60)).await;
}
