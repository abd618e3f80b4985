//! gRPC server metrics: calls by method and status code, and their latency, for every service
//! the layer wraps. The code is the one the response starts with: every unary failure (tonic
//! answers it trailers-only) and a stream refused at once; a stream that fails later counts
//! as OK here, its failure being in its trailers.

use crate::metrics::{self, metrics};
use hyper::http;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// Counts and times the calls of the service it wraps.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcMetricsLayer;

impl<S> tower::Layer<S> for GrpcMetricsLayer {
    type Service = GrpcMetrics<S>;

    fn layer(&self, inner: S) -> GrpcMetrics<S> {
        GrpcMetrics { inner }
    }
}

/// The service [`GrpcMetricsLayer`] makes.
#[derive(Debug, Clone)]
pub struct GrpcMetrics<S> {
    inner: S,
}

/// The wrapped gRPC service, under its own name.
impl<S: tonic::server::NamedService> tonic::server::NamedService for GrpcMetrics<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, ResBody> tower::Service<http::Request<B>> for GrpcMetrics<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // "/sigcast.v1.OperationService/SubmitOperation": any method name under a served
        // service reaches here; an unknown one is answered UNIMPLEMENTED and labelled so.
        let path = request.uri().path().trim_start_matches('/');
        let (service, method) = path.split_once('/').unwrap_or((path, ""));
        let (service, method) = (service.to_owned(), method.to_owned());
        let started = Instant::now();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answered = answer.await;
            let code = match &answered {
                Ok(response) => code_name(response.headers().get("grpc-status")),
                Err(_) => "UNKNOWN",
            };
            // A method the service does not have is the caller's choice of name: one label
            // for all of them, or a caller could make series without end.
            let method = if code == "UNIMPLEMENTED" {
                "unimplemented".to_owned()
            } else {
                method
            };
            let m = metrics();
            metrics::inc(
                &m.grpc_requests,
                &[("service", &service), ("method", &method), ("code", code)],
            );
            m.grpc_duration
                .get_or_create(&metrics::owned(&[
                    ("service", &service),
                    ("method", &method),
                ]))
                .observe(started.elapsed().as_secs_f64());
            answered
        })
    }
}

/// The name of a `grpc-status` header's code; OK when the response starts without one.
fn code_name(status: Option<&http::HeaderValue>) -> &'static str {
    let Some(status) = status else { return "OK" };
    match status.to_str().ok().and_then(|s| s.parse::<i32>().ok()) {
        Some(0) => "OK",
        Some(1) => "CANCELLED",
        Some(2) => "UNKNOWN",
        Some(3) => "INVALID_ARGUMENT",
        Some(4) => "DEADLINE_EXCEEDED",
        Some(5) => "NOT_FOUND",
        Some(6) => "ALREADY_EXISTS",
        Some(7) => "PERMISSION_DENIED",
        Some(8) => "RESOURCE_EXHAUSTED",
        Some(9) => "FAILED_PRECONDITION",
        Some(10) => "ABORTED",
        Some(11) => "OUT_OF_RANGE",
        Some(12) => "UNIMPLEMENTED",
        Some(13) => "INTERNAL",
        Some(14) => "UNAVAILABLE",
        Some(15) => "DATA_LOSS",
        Some(16) => "UNAUTHENTICATED",
        _ => "UNKNOWN",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::{Layer, Service, ServiceExt};

    #[tokio::test]
    async fn calls_are_counted_by_method_and_the_code_they_start_with() {
        let inner = tower::service_fn(|request: http::Request<()>| async move {
            let mut response = http::Response::new(());
            if request.uri().path().ends_with("GetOperation") {
                response
                    .headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static("5"));
            }
            if request.uri().path().contains("Nonsense") {
                response
                    .headers_mut()
                    .insert("grpc-status", http::HeaderValue::from_static("12"));
            }
            Ok::<_, std::convert::Infallible>(response)
        });
        let mut service = GrpcMetricsLayer.layer(inner);
        for path in [
            "/sigcast.test.Svc/GetOperation",
            "/sigcast.test.Svc/GetOperation",
            "/sigcast.test.Svc/SubmitOperation",
            "/sigcast.test.Svc/Nonsense1",
            "/sigcast.test.Svc/Nonsense2",
        ] {
            let request = http::Request::builder().uri(path).body(()).unwrap();
            service.ready().await.unwrap().call(request).await.unwrap();
        }
        let text = metrics().render();
        for line in [
            r#"sigcast_grpc_server_requests_total{service="sigcast.test.Svc",method="GetOperation",code="NOT_FOUND"} 2"#,
            r#"sigcast_grpc_server_requests_total{service="sigcast.test.Svc",method="SubmitOperation",code="OK"} 1"#,
            // Names a caller made up share one label.
            r#"sigcast_grpc_server_requests_total{service="sigcast.test.Svc",method="unimplemented",code="UNIMPLEMENTED"} 2"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
        assert!(text.contains(
            r#"sigcast_grpc_server_duration_seconds_count{service="sigcast.test.Svc",method="GetOperation"} 2"#
        ));
    }
}
