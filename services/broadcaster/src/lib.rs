//! The sigcast broadcaster: takes recorded operations to a terminal state. It asks the signer
//! to sign RECEIVED operations, sends SIGNED ones (one endpoint per send, never hedged, never
//! batched), and settles SENT ones from chain state: CONFIRMED from a receipt, REJECTED only on
//! proof that no attempt can land, otherwise the same bytes again.
//!
//! It holds no keys and never builds a transaction: it only sends payloads the signer stored.

mod chains;
pub mod config;
mod outcomes;
mod signer;
mod worker;

pub use config::Config;
pub use worker::Worker;

use sigcast_runtime::liveness::{CHECK_EVERY, Liveness};
use sigcast_store::Store;
use std::future::Future;
use tokio::net::TcpListener;

/// How long health calls may take to finish once the broadcaster begins to shut down.
const HEALTH_DRAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// How often the dependencies' readiness is probed.
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Runs the work loop, and serves gRPC health on `listener`, until `shutdown` completes. On
/// start, every non-terminal operation resumes from its stored state.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let store = Store::open(&config.store)?;
    let group_commit = store.group_commit_check();
    let worker = Worker::new(&config, store)?;
    worker.declare_metrics();
    let prober = worker.clone();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let _group_commit_watch =
        Liveness::new(health.clone()).watch("group_commit", CHECK_EVERY, group_commit);

    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let poll = config.poll();
    let work = tokio::spawn(async move {
        let mut interval = tokio::time::interval(poll);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
            if let Err(error) = worker.pass().await {
                tracing::warn!(%error, "pass failed; retrying");
            }
        }
    });
    // Readiness per dependency, each under its own health service name (see `Worker::probe`);
    // the server's own name ("") is liveness.
    let probing = {
        let (worker, health, mut stopped) = (prober, health.clone(), stop.subscribe());
        tokio::spawn(async move {
            let mut last: std::collections::HashMap<String, bool> = Default::default();
            let mut interval = tokio::time::interval(PROBE_EVERY);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = interval.tick() => {}
                    _ = stopped.wait_for(|s| *s) => return,
                }
                for (name, answers) in worker.probe().await {
                    if last.insert(name.clone(), answers) != Some(answers) {
                        if answers {
                            tracing::info!(dependency = %name, "answers");
                        } else {
                            tracing::warn!(dependency = %name, "does not answer");
                        }
                        let status = if answers {
                            tonic_health::ServingStatus::Serving
                        } else {
                            tonic_health::ServingStatus::NotServing
                        };
                        health.set_service_status(&name, status).await;
                    }
                }
            }
        })
    };
    tracing::info!(listen = %listener.local_addr()?, "broadcaster running");
    let mut stopping = stop.subscribe();
    let health_server = tonic::transport::Server::builder()
        .add_service(health_service)
        .serve_with_incoming_shutdown(
            sigcast_runtime::accept::incoming(listener, "broadcaster health"),
            async move {
                shutdown.await;
                let _ = stop.send(true);
            },
        );
    // Its health calls end with the process: a client's Health/Watch stream is given a moment.
    let stopping = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    if let Some(served) = sigcast_runtime::drained(health_server, stopping, HEALTH_DRAIN).await {
        served?;
    }
    // A pass in progress finishes its current steps; each is a whole store transaction.
    work.await?;
    probing.abort();
    tracing::info!("broadcaster stopped");
    Ok(())
}
