//! The sigcast signer: the only process that holds key material. It signs operations that are
//! recorded in the store, by op_id only, allocating each account's nonces serially inside the
//! store transaction that records the signed payload.
//!
//! It must never sign bytes a caller supplies, never print or return a key, and never give one
//! nonce two different payloads.

pub mod config;
mod error;
mod grpc;
pub mod keys;
mod sign;

pub use config::Config;
pub use error::{Error, Result};
pub use sign::{Replacement, Signed, Signer};

use sigcast_proto::sigcast::signer::v1::signer_service_server::SignerServiceServer;
use sigcast_store::Store;
use std::future::Future;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;

/// Loads the keys, opens the store, checks the chains and serves the signer API on `listener`
/// until `shutdown` completes.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let passphrase =
        keys::read_passphrase(config.passphrase_file.as_deref(), config::PASSPHRASE_ENV)?;
    let keyring = keys::Keyring::load(&config.keystore_dir, &passphrase)?;
    drop(passphrase);
    tracing::info!(accounts = ?keyring, "keys loaded");
    let store = Store::open(&config.store)?;
    let signer = Signer::new(&config, store, keyring)?;
    signer.check_chains().await?;

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SignerServiceServer<Signer>>().await;
    tracing::info!(listen = %listener.local_addr()?, "signer serving");
    tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(SignerServiceServer::new(signer))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await?;
    tracing::info!("signer stopped");
    Ok(())
}
