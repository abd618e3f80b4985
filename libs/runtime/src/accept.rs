//! Accepting connections without spinning. An accept that fails (out of file descriptors,
//! most often) leaves the connection in the kernel's queue, so the listener is ready again at
//! once: a loop that retries at once burns a core and starves the connections it already
//! has. tonic's own accept loop does exactly that (it skips errors), and so did ours.

use std::time::Duration;
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

/// The connections of `listener`, without Nagle (a response's frames would otherwise wait on
/// the client's delayed ACK), for `serve_with_incoming`: never an error, so the server never
/// spins on one. The accept loop ends when the stream is dropped.
pub fn incoming(
    listener: TcpListener,
    name: &'static str,
) -> impl Stream<Item = Result<TcpStream, std::io::Error>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let mut backoff = Backoff::default();
        loop {
            let (tcp, _) = tokio::select! {
                accepted = accept(&listener, name, &mut backoff) => accepted,
                () = sender.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            if sender.send(Ok(tcp)).await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

#[cfg(test)]
mod tests {
    use super::*;

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
