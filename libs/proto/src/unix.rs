//! The signer API on its Unix socket, where the signer authenticates callers by uid: the one
//! way the broadcaster, the operator CLI and the tests connect there.

use std::path::PathBuf;
use tonic::transport::{Channel, Endpoint, Uri};

/// A connector that dials `path` whatever URI the channel asks for.
fn connector(
    path: PathBuf,
) -> impl tower::Service<
    Uri,
    Response = hyper_util::rt::TokioIo<tokio::net::UnixStream>,
    Error = std::io::Error,
    Future = impl Future<Output = std::io::Result<hyper_util::rt::TokioIo<tokio::net::UnixStream>>>
             + Send,
> + Clone
+ Send
+ 'static {
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(path).await?;
            Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
        }
    })
}

/// The endpoint every socket channel is built on; its URI is a placeholder, the connector
/// decides where to connect.
fn endpoint() -> Endpoint {
    Endpoint::from_static("http://signer.sock")
}

/// A channel to the socket at `path`, connected now.
pub async fn unix_channel(path: impl Into<PathBuf>) -> Result<Channel, tonic::transport::Error> {
    endpoint()
        .connect_with_connector(connector(path.into()))
        .await
}

/// A channel to the socket at `path` that connects on first use (a service may start before
/// the signer), each call timing out after `timeout`.
pub fn unix_channel_lazy(path: impl Into<PathBuf>, timeout: std::time::Duration) -> Channel {
    endpoint()
        .timeout(timeout)
        .connect_with_connector_lazy(connector(path.into()))
}
