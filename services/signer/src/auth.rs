//! Who may call the signer. On a Unix socket, the kernel tells the peer's uid (SO_PEERCRED);
//! a connection from a uid not on the allow-list is refused and logged before any request is
//! read. Accepted connections carry the uid into every request, for the audit trail.

use std::io;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::Stream;

/// The uid of an authenticated Unix-socket caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PeerUid(pub u32);

/// A Unix-socket connection whose peer passed the uid check.
#[derive(Debug)]
pub(crate) struct AuthedStream {
    inner: UnixStream,
    uid: u32,
}

impl tonic::transport::server::Connected for AuthedStream {
    type ConnectInfo = PeerUid;

    fn connect_info(&self) -> PeerUid {
        PeerUid(self.uid)
    }
}

impl AsyncRead for AuthedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for AuthedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Binds `path` (replacing a stale socket file) with owner and group access only.
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    if path.exists() {
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))?;
    Ok(listener)
}

/// The accepted connections of `listener` whose peer uid is in `allowed` (this process's own
/// uid when `allowed` is empty). Refused peers are logged and disconnected.
pub(crate) fn authenticated(
    listener: UnixListener,
    allowed: Vec<u32>,
) -> impl Stream<Item = io::Result<AuthedStream>> {
    let allowed = if allowed.is_empty() {
        vec![current_uid()]
    } else {
        allowed
    };
    async_stream(listener, allowed)
}

fn current_uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn async_stream(
    listener: UnixListener,
    allowed: Vec<u32>,
) -> impl Stream<Item = io::Result<AuthedStream>> {
    let backoff = sigcast_runtime::accept::Backoff::default();
    futures::stream::unfold(
        (listener, allowed, backoff),
        |(listener, allowed, mut backoff)| async move {
            loop {
                // Never an error to tonic, whose accept loop would retry it at once (see
                // `sigcast_runtime::accept`).
                let stream = match listener.accept().await {
                    Ok((stream, _)) => {
                        backoff.succeeded();
                        stream
                    }
                    Err(error) => {
                        backoff.failed("signer unix socket", &error).await;
                        continue;
                    }
                };
                let uid = match stream.peer_cred() {
                    Ok(cred) => cred.uid(),
                    Err(error) => {
                        tracing::warn!(%error, "refused a caller whose credentials could not be read");
                        continue;
                    }
                };
                if allowed.contains(&uid) {
                    return Some((
                        Ok(AuthedStream { inner: stream, uid }),
                        (listener, allowed, backoff),
                    ));
                }
                tracing::warn!(uid, allowed = ?allowed, "refused a caller: uid not allowed");
            }
        },
    )
}

/// The SHA-256 fingerprint (lowercase hex) of a DER certificate: the identity the allow-list
/// names.
pub(crate) fn fingerprint(der: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(der))
}
