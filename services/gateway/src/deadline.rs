//! The gateway's own deadline for a call's answer. tonic's `Server::timeout` answers
//! CANCELLED "Timeout expired": to a caller that reads as if it had cancelled, and gRPC retry
//! policies do not retry it. The time runs out here when the store is held (another process's
//! write lock, a FoundationDB cluster recovering) or overloaded, which a retry with the same
//! op_id is made for: UNAVAILABLE says so. A watch stream is not cut: the deadline covers the
//! call until its response starts, as tonic's does.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::codegen::http;

/// A layer that answers UNAVAILABLE to a call with no response within `after`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DeadlineLayer {
    pub(crate) after: Duration,
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Deadline<S> {
        Deadline {
            inner,
            after: self.after,
        }
    }
}

/// The service [`DeadlineLayer`] makes: the wrapped gRPC service, under its own name.
impl<S: tonic::server::NamedService> tonic::server::NamedService for Deadline<S> {
    const NAME: &'static str = S::NAME;
}

/// The service [`DeadlineLayer`] makes.
#[derive(Debug, Clone)]
pub(crate) struct Deadline<S> {
    inner: S,
    after: Duration,
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for Deadline<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    ResBody: Default,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let after = self.after;
        let method = request.uri().path().to_owned();
        let answer = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(after, answer).await {
                Ok(answered) => answered,
                Err(_) => {
                    tracing::warn!(%method, after_ms = after.as_millis(), "call over the request timeout");
                    Ok(tonic::Status::unavailable(format!(
                        "no answer within the gateway's request timeout ({} ms): the store or \
                         the gateway is overloaded or unreachable. The call may still complete; \
                         retry with the same op_id, which never applies an operation twice",
                        after.as_millis()
                    ))
                    .into_http())
                }
            }
        })
    }
}
