//! Accepting connections without spinning. An accept that fails (out of file descriptors,
//! most often) leaves the connection in the kernel's queue, so the listener is ready again at
//! once: a loop that retries at once burns a core and starves the connections it already
//! has. tonic's own accept loop does exactly that (it skips errors), and so did ours.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::Stream;

/// The first pause after a failed accept; each failure in a row doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause: how late a listener may notice that descriptors are free again.
const LONGEST_PAUSE: Duration = Duration::from_secs(1);

/// Pauses between failed accepts: doubling while they fail, reset by a success.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: u32,
}

impl Backoff {
    /// Logs `error` (the first of a run, then every hundredth) and sleeps.
    pub async fn failed(&mut self, listener: &str, error: &std::io::Error) {
        if self.failures.is_multiple_of(100) {
            tracing::warn!(
                listener, %error, failures = self.failures + 1,
                "accept failed; backing off (out of file descriptors? raise the limit)"
            );
        }
        let pause = self.next_pause();
        self.failures = self.failures.saturating_add(1);
        tokio::time::sleep(pause).await;
    }

    /// The pause after one more failure.
    fn next_pause(&self) -> Duration {
        FIRST_PAUSE
            .saturating_mul(1 << self.failures.min(16))
            .min(LONGEST_PAUSE)
    }

    /// An accept succeeded.
    pub fn succeeded(&mut self) {
        self.failures = 0;
    }
}

/// The next connection of `listener`, however many accepts fail first.
pub async fn accept(
    listener: &TcpListener,
    name: &str,
    backoff: &mut Backoff,
) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok(accepted) => {
                backoff.succeeded();
                return accepted;
            }
            Err(error) => backoff.failed(name, &error).await,
        }
    }
}

/// A served connection whose small responses leave in one write.
///
/// A unary gRPC response is three HTTP/2 frames: headers, the message's DATA, trailers. On a
/// connection that takes vectored writes, h2 writes a DATA frame of 256 bytes or more from the
/// message's own buffer and can queue nothing behind it until that write is done: an operation
/// (about 300 bytes) left in one write and its trailers in a second, and the caller woke twice
/// to read its answer. Told that this connection takes no vectored writes, h2 copies DATA under
/// 1 KiB into its buffer beside the trailers and writes once. A replayed submit went from 1.33
/// to 1.30 times a health check's latency (sigcast-bench, four interleaved pairs). The price
/// is on larger messages (lists, signed batches over TCP): each DATA frame of 1 KiB or more
/// (at most 16 KiB) goes out in two writes, its first KiB and then the rest, where a
/// vectored connection wrote it in one.
#[derive(Debug)]
pub struct OneWrite<T>(pub T);

impl<T: AsyncRead + Unpin> AsyncRead for OneWrite<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for OneWrite<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }

    /// No: see the type's documentation.
    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// Who is on the other end, as the wrapped connection says (peer address, TLS certificates).
impl<T: tonic::transport::server::Connected> tonic::transport::server::Connected for OneWrite<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.connect_info()
    }
}

/// The connections of `listener`, without Nagle (a response's frames would otherwise wait on
/// the client's delayed ACK), each response in one write ([`OneWrite`]), for
/// `serve_with_incoming`: never an error, so the server never spins on one. The accept loop
/// ends when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    name: &'static str,
) -> impl Stream<Item = Result<OneWrite<TcpStream>, std::io::Error>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut backoff = Backoff::default();
        loop {
            let (tcp, _) = tokio::select! {
                accepted = accept(&listener, name, &mut backoff) => accepted,
                () = sender.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            if sender.send(Ok(OneWrite(tcp))).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tonic::codegen::http;

    /// A TCP connection that counts the writes that sent something, as the kernel sees them.
    struct CountedWrites {
        tcp: TcpStream,
        writes: Arc<AtomicUsize>,
    }

    impl CountedWrites {
        fn count(&self, written: &Poll<std::io::Result<usize>>) {
            if let Poll::Ready(Ok(n)) = written
                && *n > 0
            {
                self.writes.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    impl AsyncRead for CountedWrites {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.tcp).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for CountedWrites {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let written = Pin::new(&mut self.tcp).poll_write(cx, buf);
            self.count(&written);
            written
        }

        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> Poll<std::io::Result<usize>> {
            let written = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
            self.count(&written);
            written
        }

        fn is_write_vectored(&self) -> bool {
            self.tcp.is_write_vectored()
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.tcp).poll_flush(cx)
        }

        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.tcp).poll_shutdown(cx)
        }
    }

    impl tonic::transport::server::Connected for CountedWrites {
        type ConnectInfo = ();

        fn connect_info(&self) {}
    }

    /// A gRPC service that answers every unary call with the message it was sent.
    #[derive(Clone)]
    struct Echo;

    impl tonic::server::NamedService for Echo {
        const NAME: &'static str = "test.Echo";
    }

    impl tonic::server::UnaryService<prost_types::Any> for Echo {
        type Response = prost_types::Any;
        type Future = std::future::Ready<Result<tonic::Response<prost_types::Any>, tonic::Status>>;

        fn call(&mut self, request: tonic::Request<prost_types::Any>) -> Self::Future {
            std::future::ready(Ok(tonic::Response::new(request.into_inner())))
        }
    }

    impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Echo {
        type Response = http::Response<tonic::body::Body>;
        type Error = std::convert::Infallible;
        type Future =
            std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
            Box::pin(async move {
                let codec =
                    tonic_prost::ProstCodec::<prost_types::Any, prost_types::Any>::default();
                Ok(tonic::server::Grpc::new(codec).unary(Echo, request).await)
            })
        }
    }

    /// The server's writes for each of ten unary calls of a 300-byte message, on a connection
    /// served through `OneWrite` or without it.
    async fn writes_per_call(one_write: bool) -> Vec<usize> {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let writes = Arc::new(AtomicUsize::new(0));
        let counted = writes.clone();
        tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            tcp.set_nodelay(true).unwrap();
            let tcp = CountedWrites {
                tcp,
                writes: counted,
            };
            let router = tonic::transport::Server::builder().add_service(Echo);
            if one_write {
                let incoming = tokio_stream::iter([Ok::<_, std::io::Error>(OneWrite(tcp))]);
                router.serve_with_incoming(incoming).await
            } else {
                let incoming = tokio_stream::iter([Ok::<_, std::io::Error>(tcp)]);
                router.serve_with_incoming(incoming).await
            }
        });
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut client = tonic::client::Grpc::new(channel);
        let message = prost_types::Any {
            type_url: "test".into(),
            value: vec![7; 300],
        };
        let mut call = async || {
            client.ready().await.unwrap();
            let codec = tonic_prost::ProstCodec::<prost_types::Any, prost_types::Any>::default();
            let path = http::uri::PathAndQuery::from_static("/test.Echo/Call");
            let answer = client
                .unary(tonic::Request::new(message.clone()), path, codec)
                .await
                .unwrap();
            assert_eq!(answer.into_inner(), message);
        };
        // The connection's own frames (settings and their acknowledgements) first.
        call().await;
        let mut per_call = Vec::new();
        for _ in 0..10 {
            let before = writes.load(Ordering::SeqCst);
            call().await;
            per_call.push(writes.load(Ordering::SeqCst) - before);
        }
        per_call
    }

    #[tokio::test]
    async fn a_unary_response_of_a_few_hundred_bytes_leaves_in_one_write() {
        assert_eq!(writes_per_call(true).await, [1; 10]);
        // Why OneWrite exists: without it, the message and its trailers go in two writes
        // (h2 0.4's batching; an h2 that changes it changes this line).
        assert_eq!(writes_per_call(false).await, [2; 10]);
    }

    #[test]
    fn pauses_double_up_to_a_second_and_a_success_resets_them() {
        let mut backoff = Backoff::default();
        let mut pauses = Vec::new();
        for _ in 0..40 {
            pauses.push(backoff.next_pause().as_millis());
            backoff.failures += 1;
        }
        assert_eq!(pauses[..9], [10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(pauses[39], 1000);
        backoff.succeeded();
        assert_eq!(backoff.next_pause().as_millis(), 10);
    }
}
