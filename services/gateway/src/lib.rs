//! The sigcast gateway: the public gRPC API. It validates every request, records operations
//! idempotently by op_id in the store, and answers reads, watches, lists and cancels from it.
//!
//! It never holds key material and never talks to a chain: the signer and the broadcaster do
//! that, reading the operations this service records.

pub mod config;
mod deadline;
mod error;
mod finished;
mod grpc;
pub mod identity;
mod operator;

pub use config::Config;
pub use error::{Error, Result};
pub use grpc::Gateway;

use sigcast_proto::sigcast::operator::v1::operator_service_server::OperatorServiceServer;
use sigcast_proto::sigcast::v1::operation_service_server::OperationServiceServer;
use sigcast_runtime::liveness::{CHECK_EVERY, Liveness};
use sigcast_store::Store;
use std::future::Future;
use tokio::net::TcpListener;

const OPERATION_SERVICE: &str = sigcast_proto::sigcast::v1::operation_service_server::SERVICE_NAME;
const OPERATOR_SERVICE: &str =
    sigcast_proto::sigcast::operator::v1::operator_service_server::SERVICE_NAME;

/// Server reflection over our API, health, and the `google.rpc` error details, so grpcurl
/// needs no proto files and prints BadRequest / ErrorInfo details decoded. Both protocol
/// versions are served: grpcurl 1.8 speaks v1alpha, newer clients v1. Only `served` (and
/// health and reflection) are listed: the descriptor set also holds the signer's API, and the
/// operator API may have a listener of its own.
fn reflection(served: &[&'static str]) -> tonic_reflection::server::Builder<'static> {
    use tonic_reflection::pb::{v1, v1alpha};
    let always = [
        tonic_health::pb::health_server::SERVICE_NAME,
        v1::server_reflection_server::SERVICE_NAME,
        v1alpha::server_reflection_server::SERVICE_NAME,
    ];
    served.iter().chain(&always).copied().fold(
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(sigcast_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET),
        |builder, service| builder.with_service_name(service),
    )
}

/// Serves the gateway on `listener` until `shutdown` completes, then stops accepting calls,
/// ends open watch streams and waits for in-flight calls to finish.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = Store::open(&config.store)?;
    let group_commit = store.group_commit_check();
    declare_metrics();
    let (stop_watches, watches_stopped) = tokio::sync::watch::channel(false);
    let gateway = Gateway::new(
        store,
        config.intent_rules(),
        config.watch_poll(),
        watches_stopped,
    )
    .with_policies(config.policies.clone())
    .with_callers(config.callers.clone(), config.mesh.clone())
    .with_limits(&config.limits);

    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<OperationServiceServer<Gateway>>()
        .await;
    health
        .set_service_status(grpc::STORE_HEALTH, tonic_health::ServingStatus::Serving)
        .await;
    let gateway = gateway.with_store_health(health.clone());
    let _group_commit_watch =
        Liveness::new(health.clone()).watch("group_commit", CHECK_EVERY, group_commit);
    let authenticated = config.tls.is_some() || config.mesh.is_some();
    let open = !authenticated && !config.allow_plaintext;
    let gateway = gateway.with_operators(config.operators.clone(), authenticated, open);
    let deadline = deadline::DeadlineLayer {
        after: std::time::Duration::from_millis(config.limits.request_timeout_ms),
    };
    use sigcast_telemetry::grpc::GrpcMetricsLayer;
    use tower::Layer;
    let operator =
        GrpcMetricsLayer.layer(deadline.layer(OperatorServiceServer::new(gateway.clone())));
    let operations = GrpcMetricsLayer.layer(
        deadline.layer(
            OperationServiceServer::new(gateway)
                .max_decoding_message_size(config.limits.max_request_bytes),
        ),
    );

    let local = listener.local_addr()?;
    // Checked again here: a caller of `run` may hand over any listener.
    anyhow::ensure!(
        config.tls.is_some() || local.ip().is_loopback() || config.allow_plaintext,
        "a plaintext listener on {local} authenticates nobody: configure [tls], or set \
         allow_plaintext behind a mesh that terminates mTLS"
    );
    let tls = config
        .tls
        .as_ref()
        .map(sigcast_runtime::tls::Reloading::start)
        .transpose()?;
    tracing::info!(listen = %local, mtls = tls.is_some(), callers = config.callers.len(), "gateway serving");
    let stopped = |stop: &tokio::sync::watch::Sender<bool>| {
        let mut stop = stop.subscribe();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    };
    // At shutdown, calls in progress may finish for as long as one may take.
    let drain = std::time::Duration::from_millis(config.limits.request_timeout_ms);
    // Health alone, in plaintext, for probes that speak no TLS (Kubernetes' gRPC probes).
    if let Some(addr) = config.health_listen {
        let health_listener = TcpListener::bind(addr).await?;
        tracing::info!(listen = %addr, "health served in plaintext");
        let health_only = limited(&config.limits).add_service(health_service.clone());
        tokio::spawn(serve_or_log(
            "health",
            health_only,
            health_listener,
            None,
            stopped(&stop_watches),
            drain,
        ));
    }
    // The operator API on its own listener, or beside the public one.
    let operator = match config.operator_listen {
        Some(addr) => {
            let operator_listener = TcpListener::bind(addr).await?;
            tracing::info!(listen = %addr, operators = config.operators.len(), "operator API served");
            let served = [OPERATOR_SERVICE];
            let router = limited(&config.limits)
                .add_service(health_service.clone())
                .add_service(reflection(&served).build_v1()?)
                .add_service(reflection(&served).build_v1alpha()?)
                .add_service(operator);
            tokio::spawn(serve_or_log(
                "operator",
                router,
                operator_listener,
                tls.clone(),
                stopped(&stop_watches),
                drain,
            ));
            None
        }
        None => Some(operator),
    };
    let health_on_stop = health.clone();
    let shutdown = async move {
        shutdown.await;
        tracing::info!("shutting down: refusing new calls, ending watches");
        health_on_stop
            .set_not_serving::<OperationServiceServer<Gateway>>()
            .await;
        let _ = stop_watches.send(true);
    };
    let limits = &config.limits;
    let served: &[&'static str] = match operator {
        Some(_) => &[OPERATION_SERVICE, OPERATOR_SERVICE],
        None => &[OPERATION_SERVICE],
    };
    let router = limited(limits)
        .add_service(health_service)
        .add_service(reflection(served).build_v1()?)
        .add_service(reflection(served).build_v1alpha()?)
        .add_optional_service(operator)
        .add_service(operations);
    serve(router, listener, tls, shutdown, drain).await?;
    tracing::info!("gateway stopped");
    Ok(())
}

/// Serves `router` on `listener`, with mutual TLS when `tls` is given, until `stop`; then
/// lets calls in progress finish for at most `drain` (see [`sigcast_runtime::drained`]).
async fn serve(
    router: tonic::transport::server::Router,
    listener: TcpListener,
    tls: Option<sigcast_runtime::tls::Reloading>,
    stop: impl Future<Output = ()>,
    drain: std::time::Duration,
) -> anyhow::Result<()> {
    let (stopping, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = async move {
        stop.await;
        let _ = stopping.send(());
    };
    let serving = async move {
        match tls {
            Some(tls) => {
                router
                    .serve_with_incoming_shutdown(tls.incoming(listener), stop)
                    .await
            }
            // No Nagle: a response's frames would otherwise wait on the client's delayed ACK
            // (~40 ms per replayed submit, measured by sigcast-bench).
            None => {
                router
                    .serve_with_incoming_shutdown(
                        sigcast_runtime::accept::incoming(listener, "gateway"),
                        stop,
                    )
                    .await
            }
        }
    };
    // A server that ended before any stop (its sender dropped) says why itself.
    let stopping = async move {
        if stopped.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    if let Some(served) = sigcast_runtime::drained(serving, stopping, drain).await {
        served?;
    }
    Ok(())
}

/// `serve`, for a listener beside the public one: a failure is logged.
async fn serve_or_log(
    name: &'static str,
    router: tonic::transport::server::Router,
    listener: TcpListener,
    tls: Option<sigcast_runtime::tls::Reloading>,
    stop: impl Future<Output = ()>,
    drain: std::time::Duration,
) {
    if let Err(error) = serve(router, listener, tls, stop, drain).await {
        tracing::error!(listener = name, %error, "listener failed");
    }
}

/// The gateway's counters, each series it can count declared at 0 from the start (see
/// [`sigcast_telemetry::metrics::declare`]).
fn declare_metrics() {
    use sigcast_telemetry::metrics::{self, declare};
    let m = metrics::metrics();
    for result in grpc::SUBMIT_RESULTS {
        declare(&m.submits, &[("result", result)]);
    }
    for state in ["RECEIVED", "CANCELLED"] {
        declare(&m.transitions, &[("state", state)]);
    }
    for from in grpc::READ_FROM {
        declare(&m.operation_reads, &[("from", from)]);
    }
}

/// A gRPC server held to the configured limits per connection: every listener's, the
/// plaintext health one and the operator one too (a client of either otherwise opens as many
/// streams as it likes).
fn limited(limits: &config::LimitsConfig) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .concurrency_limit_per_connection(limits.max_calls_per_connection)
        .max_concurrent_streams(Some(limits.max_concurrent_streams))
}
