//! Liveness: whether the process's own machinery still works, as the gRPC health name `""`
//! (what a liveness probe asks) reports it. Liveness is not readiness: a dependency that is
//! down (a store out of space, an RPC endpoint) is reported under its own name and makes no
//! process restart, since a restart would not bring it back; a part of the process that cannot
//! recover by itself (a stalled group commit, an HSM session that will not reopen) does; and
//! so does a store whose data format a newer build raised, which the restart turns into a
//! refusal at start, loudly.
//!
//! Each part reports itself under its own name; `""` is SERVING while every part is alive.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::sync::Arc;
use std::time::Duration;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

/// How often a watched part is checked.
pub const CHECK_EVERY: Duration = Duration::from_secs(10);

/// The parts of one process and whether each is alive; cheap to clone.
#[derive(Clone)]
pub struct Liveness {
    reporter: HealthReporter,
    /// Held while `""` is set, so that two parts reporting at once cannot leave it stale.
    state: Arc<tokio::sync::Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// The parts that reported themselves not alive.
    failing: BTreeSet<&'static str>,
    /// What `""` was last set to by a report: set again only when it changes, so that a
    /// Health/Watch client hears changes, not every check.
    reported: Option<ServingStatus>,
}

/// A watch started by [`Liveness::watch`]; dropping it stops the watch (on every way out of
/// a service's `run`, errors included).
#[must_use = "dropping the guard stops the watch"]
pub struct WatchGuard(tokio::task::JoinHandle<()>);

impl From<tokio::task::JoinHandle<()>> for WatchGuard {
    /// Any task of the process's own that watches a part.
    fn from(task: tokio::task::JoinHandle<()>) -> Self {
        Self(task)
    }
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Liveness {
    /// Reports through `reporter`; `""` is left as it is until a part reports.
    pub fn new(reporter: HealthReporter) -> Self {
        Self {
            reporter,
            state: Arc::default(),
        }
    }

    /// Records whether `part` is alive, and sets `""` from every part's last report.
    pub async fn report(&self, part: &'static str, alive: bool) {
        let mut state = self.state.lock().await;
        if alive {
            state.failing.remove(part);
        } else {
            state.failing.insert(part);
        }
        let status = if state.failing.is_empty() {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        if state.reported != Some(status) {
            self.reporter.set_service_status("", status).await;
            state.reported = Some(status);
        }
    }

    /// Checks `part` every `every` and reports it, logging each change, until the returned
    /// guard is dropped. The check must not block: it runs on the async runtime.
    pub fn watch<E: Display>(
        &self,
        part: &'static str,
        every: Duration,
        check: impl Fn() -> Result<(), E> + Send + 'static,
    ) -> WatchGuard {
        let liveness = self.clone();
        WatchGuard(tokio::spawn(async move {
            let mut interval = tokio::time::interval(every);
            interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut was_alive = true;
            loop {
                interval.tick().await;
                let alive = match check() {
                    Err(error) => {
                        if was_alive {
                            tracing::error!(part, %error, "not alive: a liveness probe will restart this process");
                        }
                        false
                    }
                    Ok(()) => {
                        if !was_alive {
                            tracing::info!(part, "alive again");
                        }
                        true
                    }
                };
                was_alive = alive;
                liveness.report(part, was_alive).await;
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use tonic_health::pb::health_server::Health;
    use tonic_health::pb::{HealthCheckRequest, health_check_response};

    /// A health reporter and the service answering from it.
    fn health() -> (HealthReporter, tonic_health::server::HealthService) {
        let reporter = HealthReporter::new();
        let server = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
        (reporter, server)
    }

    async fn status(health: &impl Health) -> health_check_response::ServingStatus {
        let request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        let answer = health.check(request).await.unwrap().into_inner();
        health_check_response::ServingStatus::try_from(answer.status).unwrap()
    }

    #[tokio::test]
    async fn the_process_is_alive_only_while_every_part_is() {
        use health_check_response::ServingStatus::{NotServing, Serving};
        let (reporter, server) = health();
        reporter
            .set_service_status("", ServingStatus::Serving)
            .await;
        let liveness = Liveness::new(reporter);
        liveness.report("token", false).await;
        assert_eq!(status(&server).await, NotServing);
        liveness.report("group_commit", false).await;
        liveness.report("token", true).await;
        assert_eq!(
            status(&server).await,
            NotServing,
            "one part recovering does not hide another that did not"
        );
        liveness.report("group_commit", true).await;
        assert_eq!(status(&server).await, Serving);
    }

    #[tokio::test]
    async fn a_health_watch_hears_changes_not_every_check() {
        use health_check_response::ServingStatus::{NotServing, Serving};
        use tokio_stream::StreamExt;
        let (reporter, server) = health();
        let liveness = Liveness::new(reporter);
        liveness.report("group_commit", true).await;
        let request = tonic::Request::new(HealthCheckRequest {
            service: String::new(),
        });
        let mut watch = server.watch(request).await.unwrap().into_inner();
        let mut next = async || {
            let answer = tokio::time::timeout(Duration::from_secs(5), watch.next())
                .await
                .expect("an answer")
                .unwrap()
                .unwrap();
            health_check_response::ServingStatus::try_from(answer.status).unwrap()
        };
        assert_eq!(next().await, Serving);
        liveness.report("group_commit", true).await;
        liveness.report("group_commit", true).await;
        liveness.report("group_commit", false).await;
        assert_eq!(next().await, NotServing, "no repeated SERVING in between");
    }

    /// Waits until `""` reads `wanted` (the watch checks every few milliseconds here).
    async fn until(health: &impl Health, wanted: health_check_response::ServingStatus) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while status(health).await != wanted {
            assert!(
                tokio::time::Instant::now() < deadline,
                "\"\" never became {wanted:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_watched_part_is_reported_as_its_check_goes() {
        use health_check_response::ServingStatus::{NotServing, Serving};
        let (reporter, server) = health();
        reporter
            .set_service_status("", ServingStatus::Serving)
            .await;
        let healthy = Arc::new(AtomicBool::new(true));
        let flag = healthy.clone();
        let watch =
            Liveness::new(reporter).watch("group_commit", Duration::from_millis(5), move || {
                if flag.load(Ordering::SeqCst) {
                    Ok(())
                } else {
                    Err("stalled")
                }
            });
        healthy.store(false, Ordering::SeqCst);
        until(&server, NotServing).await;
        healthy.store(true, Ordering::SeqCst);
        until(&server, Serving).await;
        drop(watch);
    }
}
