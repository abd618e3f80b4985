//! What every sigcast service shares to be observed: log lines (human by default, JSON by
//! setting), traces exported over OTLP in which one operation is one trace — its trace id
//! derived from its op_id, in every service, attempt and restart — and Prometheus metrics.
//!
//! Nothing here may ever record key material, passphrases or signed payloads: services log and
//! trace identifiers (op_id, tx hash, account), never secrets; RPC endpoints are labelled by
//! host only, since their URLs often carry API keys.

pub mod grpc;
pub mod metrics;
mod process;
pub mod trace;

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OTLP exporter could not be built.
    #[error("OTLP exporter for {endpoint}: {source}")]
    Exporter {
        /// The configured endpoint.
        endpoint: String,
        /// What failed.
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The metrics address could not be bound.
    #[error("metrics endpoint {addr}: {source}")]
    Metrics {
        /// The configured address.
        addr: std::net::SocketAddr,
        /// What failed.
        source: std::io::Error,
    },
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Human,
    /// One JSON object per event, for log shippers.
    Json,
}

/// Logging settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Line format.
    pub format: LogFormat,
    /// Filter in `RUST_LOG` syntax; `RUST_LOG` wins when set.
    pub filter: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Human,
            filter: "info".to_owned(),
        }
    }
}

/// Trace export settings (`[tracing]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// OTLP/gRPC endpoint of a collector (e.g. `http://otel-collector:4317`); empty: traces
    /// are not exported.
    pub otlp_endpoint: String,
    /// Share of operations traced, 0 to 1. The decision follows from the op_id, so every
    /// service traces the same operations.
    pub sample_ratio: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        Self {
            otlp_endpoint: String::new(),
            sample_ratio: 1.0,
        }
    }
}

impl TracingConfig {
    /// Whether the values can work.
    pub fn validate(&self) -> Result<(), String> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(format!("must be within 0..=1, not {}", self.sample_ratio));
        }
        let endpoint = &self.otlp_endpoint;
        let is_url = endpoint.starts_with("http://") || endpoint.starts_with("https://");
        if !endpoint.is_empty() && !is_url {
            return Err(format!(
                "otlp_endpoint must be an http:// or https:// URL, not {:?}",
                self.otlp_endpoint
            ));
        }
        Ok(())
    }
}

/// Running telemetry; [`Telemetry::shutdown`] flushes the spans not yet exported.
#[must_use = "dropping it without shutdown loses the last spans"]
pub struct Telemetry {
    provider: Option<opentelemetry_sdk::trace::SdkTracerProvider>,
}

impl Telemetry {
    /// Exports what is buffered and stops the exporter.
    pub async fn shutdown(self) {
        if let Some(provider) = self.provider {
            // The batch processor's shutdown blocks until the last export is done.
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
    }
}

/// Whether `meta` is the span of one gRPC or JSON-RPC call ([`trace::grpc_span`],
/// [`trace::jsonrpc_span`]). Those exist for traces; log lines leave them out. Their dozen
/// attributes by OpenTelemetry's conventions would repeat, before every line inside a call, what
/// the line and its operation's span already say, and formatting them for each call was a third
/// of the gateway's replay handler (16 µs called in-process, 10 without them). Without an OTLP
/// endpoint no layer wants them, and they are not made at all.
fn is_call_span(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_span() && matches!(meta.name(), "rpc" | "jsonrpc")
}

/// Installs the process-wide subscriber for `service` (its OTLP `service.name`): log lines to
/// stderr, and spans to the OTLP endpoint when one is configured. Must run inside the tokio
/// runtime. Calling it twice keeps the first subscriber.
pub fn init(
    service: &'static str,
    log: &LogConfig,
    tracing: &TracingConfig,
) -> Result<Telemetry, Error> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::FilterExt;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(&log.filter));
    // The filter only ever refuses: its hint is TRACE, so that the pair keeps the level
    // filter's hint (without one the process's maximum level would be TRACE, and every
    // disabled `debug!` in h2 or hyper would ask the subscriber).
    let calls = tracing_subscriber::filter::filter_fn(|meta| !is_call_span(meta))
        .with_max_level_hint(tracing::level_filters::LevelFilter::TRACE);
    let filter = filter.and(calls);
    let logs = match log.format {
        // Colours only on a terminal: in a file, a pipe or a container's log they are escape
        // codes between every field name and its value, which no grep or log search matches.
        LogFormat::Human => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed(),
    };
    metrics::set_build_info(service);
    let provider = trace::provider(service, tracing)?;
    // Spans are exported whatever the log filter says: the sampler decides.
    let otel = provider.as_ref().map(|provider| {
        use opentelemetry::trace::TracerProvider;
        // Attributes by the conventions only: no busy/idle counters or tracing target outside
        // any namespace, and no source location (ours would name the span helper).
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("sigcast"))
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_location(false)
    });
    let _ = tracing_subscriber::registry()
        .with(logs)
        .with(otel)
        .try_init();
    Ok(Telemetry { provider })
}
