//! The sigcast signer: the only process that holds key material. It signs operations that are
//! recorded in the store, by op_id only, allocating each account's nonces serially inside the
//! store transaction that records the signed payload.
//!
//! It must never sign bytes a caller supplies, never print or return a key, and never give one
//! nonce two different payloads.

mod auth;
pub mod config;
mod error;
mod grpc;
pub mod keys;
pub mod policy;
mod sign;
pub mod token;

pub use config::Config;
pub use error::{Error, Result};
pub use sign::{Replacement, Signed, Signer};

use sigcast_proto::sigcast::signer::v1::signer_service_server::SignerServiceServer;
use sigcast_store::Store;
use std::future::Future;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Keeps key material out of core dumps and other processes' reach: no core dumps, not
/// ptrace-attachable by same-uid processes, memory locked against swap where the OS allows.
pub fn harden_process() {
    // SAFETY: plain syscalls on this process with constant, valid arguments.
    unsafe {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0 {
            tracing::warn!("could not disable core dumps");
        }
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            tracing::warn!("could not mark the process non-dumpable");
        }
        if libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) != 0 {
            tracing::info!("memory not locked (RLIMIT_MEMLOCK); keys may be swapped");
        }
    }
}

/// Loads the keys, opens the store, checks the chains and serves the signer API until
/// `shutdown` completes: on the configured Unix socket (callers authenticated by uid), with
/// gRPC health on `listener`; or, with no socket configured, on `listener` itself, which
/// authenticates nobody and is meant for local development.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    harden_process();
    let passphrase =
        keys::read_passphrase(config.passphrase_file.as_deref(), config::PASSPHRASE_ENV)?;
    let mut keyring = keys::Keyring::load(&config.keystore_dir, &passphrase)?;
    drop(passphrase);
    if let Some(pkcs11) = &config.pkcs11 {
        keyring.add_token_keys(token::Token::open(pkcs11)?.keys()?);
    }
    tracing::info!(accounts = ?keyring, "keys loaded");
    let store = Store::open(&config.store)?;
    let signer = Signer::new(&config, store, keyring)?;
    signer.check_chains().await?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SignerServiceServer<Signer>>().await;
    let api = SignerServiceServer::new(signer);
    match &config.unix_socket {
        Some(path) => {
            let socket = auth::bind(path)?;
            tracing::info!(socket = %path.display(), allowed_uids = ?config.allowed_uids, health = %listener.local_addr()?, "signer serving");
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let mut stopped_api = stopped.clone();
            let api_server = tonic::transport::Server::builder()
                .add_service(api)
                .serve_with_incoming_shutdown(
                    auth::authenticated(socket, config.allowed_uids.clone()),
                    async move {
                        let _ = stopped_api.wait_for(|s| *s).await;
                    },
                );
            let mut stopped_health = stopped;
            let health_server = tonic::transport::Server::builder()
                .add_service(health_service)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                    let _ = stopped_health.wait_for(|s| *s).await;
                });
            let trigger = async move {
                shutdown.await;
                let _ = stop.send(true);
            };
            let (api_result, health_result, ()) = tokio::join!(api_server, health_server, trigger);
            api_result?;
            health_result?;
        }
        None => {
            tracing::warn!(
                listen = %listener.local_addr()?,
                "signer API on TCP authenticates no caller: for local development only; set unix_socket"
            );
            tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(api)
                .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
                .await?;
        }
    }
    tracing::info!("signer stopped");
    Ok(())
}
