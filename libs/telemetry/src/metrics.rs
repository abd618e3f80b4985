//! Prometheus metrics: one registry per process holding every family sigcast defines, served
//! as text at `GET /metrics`. A service increments the families of what it does; the others
//! stay empty.
//!
//! Labels never carry secrets: endpoints appear as scheme://host:port (their paths often hold
//! API keys), accounts as public addresses.

use http_body_util::Full;
use hyper::body::Bytes;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::LazyLock;
use tokio::net::TcpListener;

/// A label set: (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// Every metric family of sigcast.
pub struct Metrics {
    registry: Registry,
    /// Submits by result: created, replayed, conflict, invalid, denied.
    pub submits: Family<Labels, Counter>,
    /// The gateway's reads of one operation (a submit's lookup, Get, a watch's poll), by
    /// where they were answered: its memory of finished operations, or the store.
    pub operation_reads: Family<Labels, Counter>,
    /// Operations entering a state (recorded by the service that moves them).
    pub transitions: Family<Labels, Counter>,
    /// Operations in flight by state (RECEIVED, SIGNED, SENT), as the broadcaster last saw them
    /// (at most one work batch each).
    pub in_flight: Family<Labels, Gauge>,
    /// Sends by chain and outcome: accepted, rejected, unknown.
    pub attempts: Family<Labels, Counter>,
    /// Operations that had an unknown send outcome, by how chain state settled them.
    pub unknown_resolved: Family<Labels, Counter>,
    /// Byte-identical resends of a stored transaction.
    pub resends: Family<Labels, Counter>,
    /// Checks of an operation in flight that read every endpoint and still lacked the
    /// evidence to act, by chain and reason: what an operation that stays SENT waits for.
    pub checks_undecided: Family<Labels, Counter>,
    /// JSON-RPC requests by endpoint, method and result (ok, node_error, failed).
    pub rpc_requests: Family<Labels, Counter>,
    /// JSON-RPC latency by endpoint and method.
    pub rpc_duration: Histograms,
    /// Reads hedged to a further endpoint, by that endpoint.
    pub hedges_fired: Family<Labels, Counter>,
    /// Hedged reads answered first by the hedge, by its endpoint (as fired).
    pub hedges_won: Family<Labels, Counter>,
    /// Nonces in flight per account: the nonce just signed minus the chain's count.
    pub nonce_lag: Family<Labels, Gauge>,
    /// Each endpoint's head (block number or height), by chain and endpoint.
    pub chain_head: Family<Labels, Gauge>,
    /// How far each endpoint's head is behind the highest of its chain's endpoints.
    pub chain_head_lag: Family<Labels, Gauge>,
    /// Signatures made, by purpose.
    pub signatures: Family<Labels, Counter>,
    /// Signer refusals, by reason.
    pub signer_refusals: Family<Labels, Counter>,
    /// The running build, by service and version: always 1 (joins other series to a version
    /// in queries, and tells what runs where).
    pub build_info: Family<Labels, Gauge>,
    /// gRPC calls served, by service, method and the status code the response started with.
    pub grpc_requests: Family<Labels, Counter>,
    /// gRPC call latency until the response starts, by service and method.
    pub grpc_duration: Histograms,
    /// How long each stage of a broadcaster pass took (sign, send, check), and the pass.
    pub pass_stage_duration: Histograms,
    /// How long each stage of a signer's SignOperations batch of first signatures took: the
    /// records' read; the checks and chain reads (prepare, with any Solana signature, each
    /// committed alone); the EVM signatures' transactions (commit: one for keys in the
    /// process, one each for a token's).
    pub signer_stage_duration: Histograms,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

impl Metrics {
    fn new() -> Self {
        // Ours under `sigcast_`; the process's own under the standard `process_` names.
        let mut root = Registry::default();
        root.register_collector(Box::new(crate::process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("sigcast");
        let metrics = Self {
            registry: Registry::default(),
            submits: Family::default(),
            operation_reads: Family::default(),
            transitions: Family::default(),
            in_flight: Family::default(),
            attempts: Family::default(),
            unknown_resolved: Family::default(),
            resends: Family::default(),
            checks_undecided: Family::default(),
            rpc_requests: Family::default(),
            rpc_duration: Family::new_with_constructor(latency_histogram),
            hedges_fired: Family::default(),
            hedges_won: Family::default(),
            chain_head: Family::default(),
            chain_head_lag: Family::default(),
            nonce_lag: Family::default(),
            signatures: Family::default(),
            signer_refusals: Family::default(),
            build_info: Family::default(),
            grpc_requests: Family::default(),
            grpc_duration: Family::new_with_constructor(latency_histogram),
            pass_stage_duration: Family::new_with_constructor(latency_histogram),
            signer_stage_duration: Family::new_with_constructor(latency_histogram),
        };
        let m = &metrics;
        registry.register(
            "grpc_server_requests",
            "gRPC calls served by service, method and status code",
            m.grpc_requests.clone(),
        );
        registry.register(
            "grpc_server_duration_seconds",
            "gRPC call latency until the response starts, by service and method",
            m.grpc_duration.clone(),
        );
        registry.register(
            "build_info",
            "The running build: service and version (always 1)",
            m.build_info.clone(),
        );
        registry.register(
            "submits",
            "SubmitOperation calls by result",
            m.submits.clone(),
        );
        registry.register(
            "operation_reads",
            "Reads of one operation by the gateway, by where they were answered",
            m.operation_reads.clone(),
        );
        registry.register(
            "operation_transitions",
            "Operations entering a state",
            m.transitions.clone(),
        );
        registry.register(
            "operations_in_flight",
            "Operations a broadcaster pass found in each state not yet terminal",
            m.in_flight.clone(),
        );
        registry.register(
            "attempts",
            "Transaction sends by chain and outcome",
            m.attempts.clone(),
        );
        registry.register(
            "unknown_outcomes_resolved",
            "Operations with an unknown send outcome, by how chain state settled them",
            m.unknown_resolved.clone(),
        );
        registry.register(
            "resends",
            "Byte-identical resends of a stored transaction",
            m.resends.clone(),
        );
        registry.register(
            "checks_undecided",
            "Checks that read every endpoint and still lacked the evidence to act, by chain and reason",
            m.checks_undecided.clone(),
        );
        registry.register(
            "rpc_requests",
            "JSON-RPC requests by endpoint, method and result",
            m.rpc_requests.clone(),
        );
        registry.register(
            "rpc_duration_seconds",
            "JSON-RPC latency by endpoint and method",
            m.rpc_duration.clone(),
        );
        registry.register(
            "rpc_hedges_fired",
            "Reads hedged to a further endpoint",
            m.hedges_fired.clone(),
        );
        registry.register(
            "rpc_hedges_won",
            "Hedged reads answered first by the hedge",
            m.hedges_won.clone(),
        );
        registry.register(
            "chain_head",
            "Each endpoint's head (block number, or block height on Solana)",
            m.chain_head.clone(),
        );
        registry.register(
            "chain_head_lag",
            "Blocks each endpoint's head is behind the highest of its chain's endpoints",
            m.chain_head_lag.clone(),
        );
        registry.register(
            "nonce_lag",
            "Nonces in flight per account",
            m.nonce_lag.clone(),
        );
        registry.register(
            "signatures",
            "Signatures made, by purpose",
            m.signatures.clone(),
        );
        registry.register(
            "broadcaster_pass_seconds",
            "How long each stage of a broadcaster pass took (sign, send, check), and the whole pass",
            m.pass_stage_duration.clone(),
        );
        registry.register(
            "signer_batch_seconds",
            "How long each stage of a SignOperations batch of first signatures took (read, prepare, commit)",
            m.signer_stage_duration.clone(),
        );
        registry.register(
            "signer_refusals",
            "Signer refusals, by reason",
            m.signer_refusals.clone(),
        );
        Self {
            registry: root,
            ..metrics
        }
    }

    /// The registry in the text exposition format.
    pub fn render(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

/// Records the running build of `service` in `build_info`.
pub fn set_build_info(service: &str) {
    metrics()
        .build_info
        .get_or_create(&vec![
            ("service", service.to_owned()),
            ("version", env!("CARGO_PKG_VERSION").to_owned()),
        ])
        .set(1);
}

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

/// Adds one to `family` at `labels`.
pub fn inc(family: &Family<Labels, Counter>, labels: &[(&'static str, &str)]) {
    family.get_or_create(&owned(labels)).inc();
}

/// Declares a counter's series at 0 before anything happens. A family is exported only once it
/// has a series, and `increase()` over a series born at 1 misses that first event: an alert on
/// the first refusal would never fire, and a dashboard would show nothing rather than 0.
pub fn declare(family: &Family<Labels, Counter>, labels: &[(&'static str, &str)]) {
    let _ = family.get_or_create(&owned(labels));
}

/// The label set of `labels`.
pub fn owned(labels: &[(&'static str, &str)]) -> Labels {
    labels.iter().map(|(k, v)| (*k, (*v).to_owned())).collect()
}

/// An endpoint as a label: scheme, host and port only; the path and query (where providers put
/// API keys) and any user info are dropped.
pub fn endpoint_label(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit('@').next().unwrap_or_default();
    if scheme.is_empty() {
        host.to_owned()
    } else {
        format!("{scheme}://{host}")
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, shutdown: impl Future<Output = ()>) {
    use hyper::service::service_fn;
    use hyper::{Method, Request, Response, StatusCode};
    let accept = async {
        let mut backoff = sigcast_runtime::accept::Backoff::default();
        loop {
            let (stream, _) =
                sigcast_runtime::accept::accept(&listener, "metrics", &mut backoff).await;
            tokio::spawn(async move {
                let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                    let response =
                        if request.method() == Method::GET && request.uri().path() == "/metrics" {
                            Response::builder()
                                .header(
                                    hyper::header::CONTENT_TYPE,
                                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                                )
                                .body(Full::new(Bytes::from(metrics().render())))
                        } else {
                            Response::builder()
                                .status(StatusCode::NOT_FOUND)
                                .body(Full::new(Bytes::from_static(b"metrics are at /metrics\n")))
                        };
                    Ok::<_, hyper::http::Error>(response.expect("static response parts"))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    };
    tokio::select! {
        () = accept => {}
        () = shutdown => {}
    }
}

/// Serves the metrics at `addr`, if one is configured, for the life of the process.
pub async fn spawn(addr: Option<std::net::SocketAddr>) -> Result<(), crate::Error> {
    let Some(addr) = addr else { return Ok(()) };
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|source| crate::Error::Metrics { addr, source })?;
    tracing::info!(%addr, "metrics at /metrics");
    tokio::spawn(serve(listener, std::future::pending()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_is_exported_with_its_service_and_version() {
        set_build_info("sigcast-test");
        let text = metrics().render();
        let line = format!(
            "sigcast_build_info{{service=\"sigcast-test\",version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }

    #[test]
    fn endpoint_labels_keep_no_path_query_or_credentials() {
        assert_eq!(
            endpoint_label("https://eth-mainnet.g.alchemy.com/v2/SECRETKEY"),
            "https://eth-mainnet.g.alchemy.com"
        );
        assert_eq!(
            endpoint_label("http://user:pw@127.0.0.1:8545/?key=x"),
            "http://127.0.0.1:8545"
        );
        assert_eq!(endpoint_label("127.0.0.1:8545"), "127.0.0.1:8545");
    }

    #[test]
    fn the_registry_renders_what_was_counted() {
        inc(&metrics().submits, &[("result", "replayed")]);
        let text = metrics().render();
        assert!(text.contains("# TYPE sigcast_submits counter"), "{text}");
        assert!(
            text.contains("sigcast_submits_total{result=\"replayed\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
