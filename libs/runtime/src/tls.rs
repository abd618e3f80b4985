//! Mutual TLS for a service's listeners: the server certificate and the client CA are read
//! from files and read again when they change (cert-manager rotates them), without a restart;
//! a connection takes the configuration current when it arrives. Handshakes run beside the
//! accept loop, so a slow client holds up nobody else.

use anyhow::Context;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::Stream;

/// `[tls]`: the gateway's certificate and the CA its callers' certificates must chain to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// Server certificate chain (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// CA certificates (PEM) that issue callers' certificates. A caller without one is refused
    /// in the handshake.
    pub client_ca: PathBuf,
    /// How often the files are checked for a change, in seconds.
    #[serde(default = "default_reload_secs")]
    pub reload_secs: u64,
}

fn default_reload_secs() -> u64 {
    5
}

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the rustls configuration from the files.
fn load(tls: &TlsConfig) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading certificate {}", tls.cert.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{}: no certificate", tls.cert.display());
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .with_context(|| format!("reading key {}", tls.key.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_file_iter(&tls.client_ca)
        .with_context(|| format!("reading client CA {}", tls.client_ca.display()))?
    {
        roots
            .add(ca.with_context(|| format!("reading client CA {}", tls.client_ca.display()))?)
            .with_context(|| format!("client CA {}", tls.client_ca.display()))?;
    }
    anyhow::ensure!(
        !roots.is_empty(),
        "{}: no CA certificate",
        tls.client_ca.display()
    );
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .context("client certificate verifier")?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .context("the certificate does not match its key")?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The current configuration, replaced when the files change.
#[derive(Clone)]
pub struct Reloading {
    current: Arc<RwLock<Arc<rustls::ServerConfig>>>,
}

impl Reloading {
    /// Loads the files (an error is fatal at start) and checks them for changes every
    /// `reload_secs` from then on. A change that does not load (a half-written file) is
    /// reported and the previous configuration kept; the next change is tried again.
    pub fn start(tls: &TlsConfig) -> anyhow::Result<Self> {
        let current = Arc::new(RwLock::new(load(tls)?));
        let watched = Arc::downgrade(&current);
        let tls = tls.clone();
        tokio::spawn(async move {
            let stamp = |tls: &TlsConfig| {
                [&tls.cert, &tls.key, &tls.client_ca].map(|p| modified(p.as_path()))
            };
            let mut seen = stamp(&tls);
            loop {
                tokio::time::sleep(Duration::from_secs(tls.reload_secs.max(1))).await;
                let Some(current) = watched.upgrade() else {
                    return;
                };
                let now = stamp(&tls);
                if now == seen {
                    continue;
                }
                match load(&tls) {
                    Ok(config) => {
                        *current.write().unwrap_or_else(|p| p.into_inner()) = config;
                        seen = now;
                        tracing::info!(cert = %tls.cert.display(), "TLS certificates reloaded");
                    }
                    Err(error) => {
                        tracing::warn!(%error, "TLS files changed but do not load; keeping the previous ones")
                    }
                }
            }
        });
        Ok(Self { current })
    }

    fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(
            self.current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        )
    }

    /// The connections of `listener` that completed a handshake with a client certificate
    /// the CA issued. The accept loop ends when the stream is dropped.
    pub fn incoming(
        self,
        listener: TcpListener,
    ) -> impl Stream<Item = Result<crate::accept::OneWrite<TlsStream<TcpStream>>, std::io::Error>>
    {
        let (sender, receiver) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            let mut backoff = crate::accept::Backoff::default();
            loop {
                let (tcp, peer) = tokio::select! {
                    accepted = crate::accept::accept(&listener, "tls", &mut backoff) => accepted,
                    () = sender.closed() => return,
                };
                // No Nagle: a response's frames would otherwise wait on the client's delayed
                // ACK.
                let _ = tcp.set_nodelay(true);
                let acceptor = self.acceptor();
                let sender = sender.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = sender.send(Ok(crate::accept::OneWrite(stream))).await;
                        }
                        Ok(Err(error)) => {
                            tracing::info!(%peer, %error, "TLS handshake refused")
                        }
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        tokio_stream::wrappers::ReceiverStream::new(receiver)
    }
}
