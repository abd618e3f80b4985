//! One operation, one trace: the trace id of every span about an operation is derived from its
//! op_id, so the gateway, the signer, the broadcaster — every attempt, every restart — add to
//! the same trace without having to pass anything along. The W3C `traceparent` still travels
//! in gRPC metadata between services, so a signer span hangs under the broadcaster span that
//! asked for it.

use crate::{Error, TracingConfig};
use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::OnceLock;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Domain separation of the op_id → trace id derivation; changing it splits every trace.
const TRACE_ID_PREFIX: &[u8] = b"sigcast/trace/v1\0";

/// The configured sampling ratio, once telemetry is initialised.
static SAMPLE_RATIO: OnceLock<f64> = OnceLock::new();

fn digest(op_id: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(TRACE_ID_PREFIX);
    hasher.update(op_id.as_bytes());
    hasher.finalize().into()
}

/// The trace id of an operation: the first 16 bytes of SHA-256(prefix ‖ op_id).
pub fn op_trace_id(op_id: &str) -> TraceId {
    let bytes: [u8; 16] = digest(op_id)[..16].try_into().expect("16 of 32 bytes");
    TraceId::from_bytes(bytes)
}

/// Whether an operation is traced: a ratio test on its trace id, the same in every service.
fn sampled(trace_id: TraceId, ratio: f64) -> bool {
    if ratio >= 1.0 {
        return true;
    }
    let low = u64::from_be_bytes(trace_id.to_bytes()[8..].try_into().expect("8 bytes"));
    (low >> 1) < (ratio.max(0.0) * (1u64 << 63) as f64) as u64
}

/// The operation's root: a remote parent with the derived trace id and a derived span id.
fn op_root(op_id: &str) -> SpanContext {
    let hash = digest(op_id);
    let trace_id = op_trace_id(op_id);
    let mut span_id: [u8; 8] = hash[16..24].try_into().expect("8 bytes");
    if span_id == [0; 8] {
        span_id[7] = 1; // an all-zero span id is invalid
    }
    let ratio = SAMPLE_RATIO.get().copied().unwrap_or(1.0);
    let flags = if sampled(trace_id, ratio) {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(
        trace_id,
        SpanId::from_bytes(span_id),
        flags,
        true,
        TraceState::default(),
    )
}

/// A span about one operation, named `name` in the trace, in the operation's trace: work
/// inside one service (kind INTERNAL). Its `sigcast.chain`, `sigcast.account`, `sigcast.nonce`,
/// `sigcast.attempt`, `sigcast.endpoint` and `sigcast.outcome` are recorded as they become
/// known (`span.record(..)`); log lines inside it carry its `sigcast.op_id`.
pub fn op_span(name: &'static str, op_id: &str) -> tracing::Span {
    let span = tracing::info_span!(
        "op",
        otel.name = name,
        otel.kind = "internal",
        sigcast.op_id = %op_id,
        sigcast.chain = tracing::field::Empty,
        sigcast.account = tracing::field::Empty,
        sigcast.nonce = tracing::field::Empty,
        sigcast.attempt = tracing::field::Empty,
        sigcast.endpoint = tracing::field::Empty,
        sigcast.outcome = tracing::field::Empty,
    );
    attach_op(&span, op_id);
    span
}

/// A span of one operation's work inside the span of the call that asked for it (kind
/// INTERNAL, named `name`). Calls' spans are left out of log lines (see [`crate::init`]):
/// lines made inside this one still carry its `sigcast.op_id`, as G7 asks, however deep in a
/// library they are made (a node read that failed; a token session reopened inside a store
/// transaction's body, which the store runs in its caller's span).
pub fn work_span(call: &tracing::Span, name: &'static str, op_id: &str) -> tracing::Span {
    tracing::info_span!(
        parent: call,
        "op",
        otel.name = name,
        otel.kind = "internal",
        sigcast.op_id = %op_id,
    )
}

/// Which end of a gRPC call a span is: it decides which status codes are errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcSide {
    /// The server handling the call.
    Server,
    /// The client making it.
    Client,
}

/// The span of a gRPC call about one operation, by OpenTelemetry's RPC conventions: named
/// `service/method`, kind SERVER or CLIENT, `rpc.system` "grpc", `rpc.service`, `rpc.method`,
/// and `rpc.grpc.status_code` with the error status once [`traced`] has run it. A client span
/// names its peer in `server.address` (host, or a Unix socket's path) and `server.port`.
/// Not yet in any trace: call [`attach_op`] or [`attach_remote`] next.
pub fn grpc_span(
    side: RpcSide,
    service: &'static str,
    method: &'static str,
    op_id: &str,
    server: Option<(&str, Option<u16>)>,
) -> tracing::Span {
    let kind = match side {
        RpcSide::Server => "server",
        RpcSide::Client => "client",
    };
    let span = tracing::info_span!(
        "rpc",
        // Formatted only when the span is made (not at all without an OTLP endpoint).
        otel.name = %format_args!("{service}/{method}"),
        otel.kind = kind,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        rpc.system = "grpc",
        rpc.service = service,
        rpc.method = method,
        rpc.grpc.status_code = tracing::field::Empty,
        server.address = tracing::field::Empty,
        server.port = tracing::field::Empty,
        sigcast.op_id = %op_id,
        sigcast.purpose = tracing::field::Empty,
        sigcast.attempt = tracing::field::Empty,
    );
    if let Some((address, port)) = server {
        span.record("server.address", address);
        if let Some(port) = port {
            span.record("server.port", i64::from(port));
        }
    }
    span
}

/// Runs a gRPC call's `work` inside its `span` (from [`grpc_span`]) and records how it ended:
/// `rpc.grpc.status_code`, and the error status with the status message where the conventions
/// call the code an error (every failure for a client; for a server only the codes that mean
/// the server failed, not the caller).
pub async fn traced<T>(
    span: tracing::Span,
    side: RpcSide,
    work: impl std::future::Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    use tonic::Code;
    use tracing::Instrument;
    let result = work.instrument(span.clone()).await;
    let (code, message) = match &result {
        Ok(_) => (Code::Ok, ""),
        Err(status) => (status.code(), status.message()),
    };
    span.record("rpc.grpc.status_code", code as i64);
    let error = match side {
        RpcSide::Client => code != Code::Ok,
        RpcSide::Server => matches!(
            code,
            Code::Unknown
                | Code::DeadlineExceeded
                | Code::Unimplemented
                | Code::Internal
                | Code::Unavailable
                | Code::DataLoss
        ),
    };
    if error {
        span.record("otel.status_code", "error");
        span.record("otel.status_description", clip(message, 256));
    }
    result
}

/// The span of one JSON-RPC call to a node, by OpenTelemetry's RPC conventions: named by its
/// method, kind CLIENT, `rpc.system` "jsonrpc", `rpc.method`, the endpoint's host and port as
/// `server.address` and `server.port` (never its path, where providers put keys); a failure
/// is recorded by [`record_failure`]. Made only inside a span (an operation's work), so calls
/// outside any operation start no trace of their own: elsewhere it is a disabled span.
pub fn jsonrpc_span(method: &str, endpoint_label: &str) -> tracing::Span {
    if tracing::Span::current().is_none() {
        return tracing::Span::none();
    }
    let authority = endpoint_label
        .split_once("://")
        .map_or(endpoint_label, |(_, rest)| rest);
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, port.parse::<u16>().ok())
        }
        _ => (authority, None),
    };
    let span = tracing::info_span!(
        "jsonrpc",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        rpc.system = "jsonrpc",
        rpc.jsonrpc.version = "2.0",
        rpc.method = method,
        rpc.jsonrpc.error_code = tracing::field::Empty,
        server.address = host.trim_start_matches('[').trim_end_matches(']'),
        server.port = tracing::field::Empty,
    );
    if let Some(port) = port {
        span.record("server.port", i64::from(port));
    }
    span
}

/// Records on a span from [`jsonrpc_span`] that its call failed: the node's JSON-RPC error
/// code, if it answered one, and the error status.
pub fn record_failure(span: &tracing::Span, node_code: Option<i64>, description: &str) {
    if let Some(code) = node_code {
        span.record("rpc.jsonrpc.error_code", code);
    }
    span.record("otel.status_code", "error");
    span.record("otel.status_description", clip(description, 256));
}

/// At most `max` bytes of `text`, cut at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Puts `span` into its operation's trace. Call it right after creating a span about one
/// operation, before entering it.
pub fn attach_op(span: &tracing::Span, op_id: &str) {
    let _ = span.set_parent(Context::new().with_remote_span_context(op_root(op_id)));
}

/// Puts `span` under the caller's span named by a W3C `traceparent`, when that caller traced
/// the same operation; otherwise into the operation's trace as [`attach_op`] does.
pub fn attach_remote(span: &tracing::Span, op_id: &str, traceparent: Option<&str>) {
    let parent = traceparent.and_then(|value| {
        let carrier = HashMap::from([("traceparent".to_owned(), value.to_owned())]);
        let context = TraceContextPropagator::new().extract(&Carrier(carrier));
        let remote = context.span().span_context().clone();
        (remote.is_valid() && remote.trace_id() == op_trace_id(op_id)).then_some(context)
    });
    match parent {
        Some(context) => {
            let _ = span.set_parent(context);
        }
        None => attach_op(span, op_id),
    }
}

/// The W3C `traceparent` naming `span`, for the next service to continue its trace; `None`
/// when spans are not exported.
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = Carrier(HashMap::new());
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.0.remove("traceparent")
}

struct Carrier(HashMap<String, String>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), value);
    }
}

impl Extractor for Carrier {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The resource spans are exported with: what `detected` holds (the standard
/// `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` among it) wins; else `service` as the
/// name, this build's version, and an instance id unique to this process start (a process
/// id alone is 1 in every container).
fn resource(
    service: &'static str,
    detected: opentelemetry_sdk::Resource,
    service_name_env: Option<String>,
) -> opentelemetry_sdk::Resource {
    use opentelemetry::{Key, KeyValue};
    let has = |key: &'static str| detected.get(&Key::from_static_str(key)).is_some();
    let mut ours = Vec::new();
    // OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES (the
    // specification's order; the SDK's detectors apply them the other way round); the SDK
    // fills in "unknown_service" when neither names the service.
    match service_name_env.filter(|n| !n.is_empty()) {
        Some(name) => ours.push(KeyValue::new("service.name", name)),
        None => {
            let named = detected
                .get(&Key::from_static_str("service.name"))
                .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
            if !named {
                ours.push(KeyValue::new("service.name", service));
            }
        }
    }
    if !has("service.version") {
        ours.push(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    }
    if !has("service.instance.id") {
        ours.push(KeyValue::new("service.instance.id", instance_id()));
    }
    opentelemetry_sdk::Resource::builder_empty()
        .with_attributes(
            detected
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .with_attributes(ours)
        .build()
}

/// A random UUID (version 4), as OpenTelemetry's conventions suggest for an instance id.
fn instance_id() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The tracer provider exporting over OTLP/gRPC, or `None` when no endpoint is configured.
/// Only operations' spans are exported: a span with no operation above it is not sampled.
pub(crate) fn provider(
    service: &'static str,
    config: &TracingConfig,
) -> Result<Option<opentelemetry_sdk::trace::SdkTracerProvider>, Error> {
    let _ = SAMPLE_RATIO.set(config.sample_ratio);
    if config.otlp_endpoint.is_empty() {
        return Ok(None);
    }
    use opentelemetry_otlp::WithExportConfig;
    use opentelemetry_sdk::trace::{
        Sampler, span_processor_with_async_runtime::BatchSpanProcessor,
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(&config.otlp_endpoint)
        .build()
        .map_err(|source| Error::Exporter {
            endpoint: config.otlp_endpoint.clone(),
            source,
        })?;
    // The tonic exporter needs the tokio runtime: the batch processor runs on it.
    let processor =
        BatchSpanProcessor::builder(exporter, opentelemetry_sdk::runtime::Tokio).build();
    let resource = resource(
        service,
        opentelemetry_sdk::Resource::builder().build(),
        std::env::var("OTEL_SERVICE_NAME").ok(),
    );
    Ok(Some(
        opentelemetry_sdk::trace::SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOff)))
            .with_resource(resource)
            .build(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute(resource: &opentelemetry_sdk::Resource, key: &'static str) -> Option<String> {
        resource
            .get(&opentelemetry::Key::from_static_str(key))
            .map(|v| v.as_str().into_owned())
    }

    #[test]
    fn each_process_start_is_an_instance_of_its_own_with_this_build_s_version() {
        let empty = opentelemetry_sdk::Resource::builder_empty().build();
        let (a, b) = (
            resource("sigcast-gateway", empty.clone(), None),
            resource("sigcast-gateway", empty, None),
        );
        assert_eq!(
            attribute(&a, "service.name").as_deref(),
            Some("sigcast-gateway")
        );
        assert_eq!(
            attribute(&a, "service.version").as_deref(),
            Some(env!("CARGO_PKG_VERSION"))
        );
        let id = attribute(&a, "service.instance.id").unwrap();
        assert_eq!(id.len(), 36, "{id}");
        assert_ne!(Some(id), attribute(&b, "service.instance.id"));
    }

    #[test]
    fn what_the_environment_sets_is_kept() {
        // OTEL_RESOURCE_ATTRIBUTES as the SDK's detector reads it.
        let detected = opentelemetry_sdk::Resource::builder_empty()
            .with_attributes([
                opentelemetry::KeyValue::new("service.instance.id", "pod-7"),
                opentelemetry::KeyValue::new("service.name", "payments-signer"),
                opentelemetry::KeyValue::new("deployment.environment.name", "prod"),
            ])
            .build();
        let resource = resource("sigcast-signer", detected.clone(), None);
        assert_eq!(
            attribute(&resource, "service.instance.id").as_deref(),
            Some("pod-7")
        );
        assert_eq!(
            attribute(&resource, "service.name").as_deref(),
            Some("payments-signer")
        );
        assert_eq!(
            attribute(&resource, "deployment.environment.name").as_deref(),
            Some("prod")
        );
        assert!(attribute(&resource, "service.version").is_some());
        // OTEL_SERVICE_NAME wins over OTEL_RESOURCE_ATTRIBUTES' service.name; empty is unset.
        let named = super::resource("sigcast-signer", detected.clone(), Some("signer-eu".into()));
        assert_eq!(
            attribute(&named, "service.name").as_deref(),
            Some("signer-eu")
        );
        let empty = super::resource("sigcast-signer", detected, Some(String::new()));
        assert_eq!(
            attribute(&empty, "service.name").as_deref(),
            Some("payments-signer")
        );
    }

    /// Pinned across versions: an operation's spans from before and after an upgrade (a retry
    /// that outlives a deploy) must join one trace. Computed by an independent implementation
    /// (Python's hashlib: SHA-256 of the prefix and the op_id, first 16 bytes).
    #[test]
    fn the_trace_id_of_an_op_id_is_pinned() {
        assert_eq!(
            op_trace_id("payout-2026-0001").to_string(),
            "cbe9109537aa9e2c7915ad5be2be4105"
        );
    }

    #[test]
    fn the_trace_id_follows_from_the_op_id_alone() {
        assert_eq!(op_trace_id("op-1"), op_trace_id("op-1"));
        assert_ne!(op_trace_id("op-1"), op_trace_id("op-2"));
        assert_ne!(op_trace_id("op-1"), TraceId::INVALID);
        let expected: [u8; 16] = {
            let mut hasher = Sha256::new();
            hasher.update(b"sigcast/trace/v1\0op-1");
            hasher.finalize()[..16].try_into().unwrap()
        };
        assert_eq!(op_trace_id("op-1").to_bytes(), expected);
    }

    #[test]
    fn sampling_is_a_stable_share_of_operations() {
        let traced = (0..10_000)
            .filter(|i| sampled(op_trace_id(&format!("op-{i}")), 0.25))
            .count();
        assert!((2_200..2_800).contains(&traced), "{traced}");
        assert!((0..100).all(|i| sampled(op_trace_id(&format!("op-{i}")), 1.0)));
        assert!((0..100).all(|i| !sampled(op_trace_id(&format!("op-{i}")), 0.0)));
    }
}
