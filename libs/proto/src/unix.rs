//! The signer API on its Unix socket, where the signer authenticates callers by uid: the one
//! way the broadcaster, the operator CLI and the tests connect there. tonic dials `unix:`
//! endpoints itself.

use std::path::Path;
use tonic::transport::{Channel, Endpoint};

/// The endpoint of the socket at `path`. An absolute path goes after `unix://`, so one that
/// starts with `//` stays absolute (tonic strips `unix://` before `unix:`).
fn endpoint(path: &Path) -> Result<Endpoint, tonic::transport::Error> {
    let separator = if path.is_absolute() { "//" } else { "" };
    Endpoint::from_shared(format!("unix:{separator}{}", path.display()))
}

/// A channel to the socket at `path`, connected now.
pub async fn unix_channel(path: impl AsRef<Path>) -> Result<Channel, tonic::transport::Error> {
    endpoint(path.as_ref())?.connect().await
}

/// A channel to the socket at `path` that connects on first use (a service may start before
/// the signer), each call timing out after `timeout`.
pub fn unix_channel_lazy(
    path: impl AsRef<Path>,
    timeout: std::time::Duration,
) -> Result<Channel, tonic::transport::Error> {
    Ok(endpoint(path.as_ref())?.timeout(timeout).connect_lazy())
}
