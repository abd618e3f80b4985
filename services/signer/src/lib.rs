//! The sigcast signer: the only process that holds key material. It signs operations that are
//! recorded in the store, by op_id only, allocating each account's nonces serially inside the
//! store transaction that records the signed payload.
//!
//! It must never sign bytes a caller supplies, never print or return a key, and never give one
//! nonce two different payloads.

mod auth;
pub mod config;
mod error;
mod grpc;
pub mod keys;
pub mod nonce_accounts;
mod sign;
pub mod token;

pub use config::Config;
pub use error::{Error, Result};
pub use sign::{
    EndpointAtStart, InitialEvm, Replacement, ReplacementEvm, Signed, Signer, SolanaAttempt,
    may_sit_in_a_pool, newest_sent, priced_against, replacement_fees, sign_initial_evm,
    sign_initial_evm_together, sign_replacement_evm, sign_solana_attempt,
};

use sigcast_proto::sigcast::signer::v1::signer_service_server::SignerServiceServer;
use sigcast_runtime::liveness::{CHECK_EVERY, Liveness, WatchGuard};
use sigcast_store::Store;
use std::future::Future;
use tokio::net::TcpListener;

/// Keeps key material out of core dumps and other processes' reach: no core dumps, not
/// ptrace-attachable by same-uid processes, memory locked against swap where the OS allows.
pub fn harden_process() {
    // SAFETY: plain syscalls on this process with constant, valid arguments.
    unsafe {
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &no_core) != 0 {
            tracing::warn!("could not disable core dumps");
        }
        if libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 {
            tracing::warn!("could not mark the process non-dumpable");
        }
    }
    lock_memory();
}

/// Locks every page, present and future, against swap, where nothing can bound it: every
/// later allocation is locked too, and one that would take the process past a finite
/// RLIMIT_MEMLOCK fails, which aborts the signer. So only under no limit, or with
/// CAP_IPC_LOCK (which the limit does not bind); otherwise nothing is locked, and said so.
fn lock_memory() {
    // SAFETY: plain syscalls on this process with valid pointers and constant flags.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) != 0 {
            tracing::warn!("memory not locked: RLIMIT_MEMLOCK unreadable; keys may be swapped");
            return;
        }
        if limit.rlim_cur != limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                ..limit
            };
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &raised) == 0 {
                limit = raised;
            }
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        // A capability held in a user namespace of its own (rootless containers) is not the
        // one the memlock limit yields to.
        let user_namespace = std::fs::read_link("/proc/self/ns/user").unwrap_or_default();
        let ipc_lock =
            holds_ipc_lock(&status) && in_initial_user_namespace(&user_namespace.to_string_lossy());
        let finite = (limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur);
        if !may_lock_all_memory(finite, ipc_lock) {
            tracing::warn!(
                memlock_limit_bytes = limit.rlim_cur,
                "memory not locked: under a finite RLIMIT_MEMLOCK the signer would fail once it \
                 outgrew it; set it unlimited or grant CAP_IPC_LOCK to keep keys out of swap"
            );
            return;
        }
        if libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) != 0 {
            tracing::warn!("memory not locked (mlockall failed); keys may be swapped");
        }
    }
}

/// Whether memory may be locked now and in future (`mlockall(MCL_FUTURE)`) under a memlock
/// limit of `limit` bytes (`None`: unlimited): from then on, the kernel refuses any mapping
/// that would take the locked total past a finite limit, and an allocation refused aborts
/// the process. Only where no limit binds: none set, or CAP_IPC_LOCK held.
fn may_lock_all_memory(limit: Option<u64>, holds_ipc_lock: bool) -> bool {
    limit.is_none() || holds_ipc_lock
}

/// Whether `/proc/self/ns/user` (where its link points) is the initial user namespace, whose
/// inode number is fixed (the kernel's PROC_USER_INIT_INO). A nested namespace may map every
/// uid to itself too, so the map does not tell.
fn in_initial_user_namespace(link: &str) -> bool {
    link == "user:[4026531837]"
}

/// Whether `/proc/self/status` (its text) gives this process CAP_IPC_LOCK in effect.
fn holds_ipc_lock(status: &str) -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << CAP_IPC_LOCK) != 0)
}

/// Every key the configuration names: the keystores (decrypted with the configured passphrase,
/// which is dropped here) and the token's keys.
pub fn load_keyring(config: &Config) -> anyhow::Result<keys::Keyring> {
    let passphrase =
        keys::read_passphrase(config.passphrase_file.as_deref(), config::PASSPHRASE_ENV)?;
    let mut keyring = keys::Keyring::load(&config.keystore_dir, &passphrase)?;
    drop(passphrase);
    if let Some(pkcs11) = &config.pkcs11 {
        let token = token::Token::open(pkcs11)?;
        keyring.add_token_keys(token.keys()?);
        keyring.add_token_ed25519_keys(token.ed25519_keys()?);
    }
    Ok(keyring)
}

/// Loads the keys, opens the store, checks the chains and serves until `shutdown` completes:
/// gRPC health on `listener`; the signer API on the configured Unix socket (callers
/// authenticated by uid) and/or over mutual TLS (callers authenticated by certificate); with
/// neither configured, the API on `listener` itself, which authenticates nobody and is meant
/// for local development.
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    harden_process();
    // Checked again on the listener handed over: `serve --listen` replaces the address after
    // the configuration was validated.
    let local = listener.local_addr()?;
    anyhow::ensure!(
        config.unix_socket.is_some() || config.tls.is_some() || local.ip().is_loopback(),
        "without unix_socket or [tls] the signer API on {local} would authenticate no caller: \
         bind it to loopback, or set unix_socket or [tls]"
    );
    let keyring = load_keyring(&config)?;
    tracing::info!(accounts = ?keyring, "keys loaded");
    let token = keyring.token_health();
    let store = Store::open(&config.store)?;
    let group_commit = store.group_commit_check();
    let signer = Signer::new(&config, store, keyring)?;
    signer.check_chains().await?;
    declare_metrics();

    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<SignerServiceServer<Signer>>().await;
    let liveness = Liveness::new(health.clone());
    let _group_commit_watch = liveness.watch("group_commit", CHECK_EVERY, group_commit);
    let _token_watch = token.map(|token| {
        let check = move || token.check();
        WatchGuard::from(tokio::spawn(watch_token(
            check,
            TOKEN_CHECK_TIMEOUT,
            health.clone(),
            liveness.clone(),
        )))
    });
    let api = tower::Layer::layer(
        &sigcast_telemetry::grpc::GrpcMetricsLayer,
        SignerServiceServer::new(signer),
    );

    // Every server stops on the one shutdown signal.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|s| *s).await;
        }
    };
    // Every listener is bound before any server answers: a health check that says SERVING
    // means the API can be reached (a readiness probe, or a caller right after a restart, would
    // otherwise find the socket not there yet).
    let socket = match &config.unix_socket {
        Some(path) => Some((
            path,
            auth::bind(path).map_err(|e| {
                anyhow::anyhow!("binding the signer API socket {}: {e}", path.display())
            })?,
        )),
        None => None,
    };
    let tls = match &config.tls {
        Some(tls) => {
            let reloading = sigcast_runtime::tls::Reloading::start(&tls.files())?;
            let listener = TcpListener::bind(tls.listen).await?;
            Some((tls, reloading, listener))
        }
        None => None,
    };
    let mut servers = Vec::new();
    let authenticated = config.unix_socket.is_some() || config.tls.is_some();
    let plain = tonic::transport::Server::builder().add_service(health_service);
    if authenticated {
        tracing::info!(health = %listener.local_addr()?, "gRPC health");
    } else {
        tracing::warn!(
            listen = %listener.local_addr()?,
            "signer API on TCP authenticates no caller: for local development only; set unix_socket or [tls]"
        );
    }
    let plain = if authenticated {
        plain
    } else {
        plain.add_service(api.clone())
    };
    servers.push(tokio::spawn(plain.serve_with_incoming_shutdown(
        sigcast_runtime::accept::incoming(listener, "signer"),
        until_stopped(),
    )));
    if let Some((path, socket)) = socket {
        tracing::info!(socket = %path.display(), allowed_uids = ?config.allowed_uids, "signer API on a Unix socket");
        let incoming = auth::authenticated(socket, config.allowed_uids.clone());
        let server = tonic::transport::Server::builder().add_service(api.clone());
        servers.push(tokio::spawn(
            server.serve_with_incoming_shutdown(incoming, until_stopped()),
        ));
    }
    if let Some((tls, reloading, listener)) = tls {
        tracing::info!(
            listen = %tls.listen,
            allowed = tls.allowed_client_fingerprints.len() + tls.allowed_client_identities.len(),
            "signer API over mutual TLS"
        );
        let server = tonic::transport::Server::builder().add_service(api);
        servers.push(tokio::spawn(server.serve_with_incoming_shutdown(
            reloading.incoming(listener),
            until_stopped(),
        )));
    }
    // A server that ends on its own (a socket error) ends the signer: better down than deaf.
    let mut running: futures::stream::FuturesUnordered<_> = servers.into_iter().collect();
    tokio::select! {
        () = shutdown => {}
        Some(ended) = futures::StreamExt::next(&mut running) => {
            ended??;
            anyhow::bail!("a signer server stopped unexpectedly");
        }
    }
    let _ = stop.send(true);
    // Calls in progress finish, for at most SHUTDOWN_DRAIN.
    let servers = async {
        while let Some(ended) = futures::StreamExt::next(&mut running).await {
            ended??;
        }
        anyhow::Ok(())
    };
    if let Some(ended) = sigcast_runtime::drained(servers, async {}, SHUTDOWN_DRAIN).await {
        ended?;
    }
    tracing::info!("signer stopped");
    Ok(())
}

/// The signer's counters, each series it can count declared at 0 from the start (see
/// [`sigcast_telemetry::metrics::declare`]).
fn declare_metrics() {
    use sigcast_proto::sigcast::signer::v1::SignPurpose;
    use sigcast_telemetry::metrics::{self, declare};
    let m = metrics::metrics();
    for reason in error::REFUSAL_REASONS {
        declare(&m.signer_refusals, &[("reason", reason)]);
    }
    for purpose in [
        SignPurpose::Initial,
        SignPurpose::FeeBump,
        SignPurpose::Cancel,
        SignPurpose::Resign,
        SignPurpose::GapFill,
    ] {
        declare(&m.signatures, &[("purpose", purpose.as_str_name())]);
    }
    declare(&m.transitions, &[("state", "SIGNED")]);
}

/// How long calls in progress may take to finish once the signer begins to shut down: longer
/// than a signature takes, even a token's. One cut short is rolled back whole (its store
/// transaction never commits) and asked for again by the broadcaster.
const SHUTDOWN_DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// How long one check of the token may take before the token counts as hung.
const TOKEN_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Liveness that notices a dead HSM session: every [`CHECK_EVERY`] the token's session is
/// checked (and opened again if it was lost), and `sigcast.token` says whether the token can
/// sign. While it cannot, the signer is not alive either (the `token` part of its
/// [`Liveness`]), so the orchestrator restarts a signer whose token will not come back by
/// itself (a new process loads the module again) — except after a refused PIN: each restart
/// would try that PIN again, and enough tries lock it on the token. A check that has not
/// answered within `timeout` (an HSM that stopped answering) counts as a token that cannot
/// sign; it is waited for again at the next tick rather than started a second time.
async fn watch_token(
    check: impl Fn() -> Result<(), token::TokenError> + Clone + Send + 'static,
    timeout: std::time::Duration,
    health: tonic_health::server::HealthReporter,
    liveness: Liveness,
) {
    let mut interval = tokio::time::interval(CHECK_EVERY.min(timeout));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut pending: Option<(tokio::task::JoinHandle<_>, std::time::Instant)> = None;
    loop {
        interval.tick().await;
        let (mut running, since) = pending.take().unwrap_or_else(|| {
            (
                tokio::task::spawn_blocking(check.clone()),
                std::time::Instant::now(),
            )
        });
        let left = timeout.saturating_sub(since.elapsed());
        use tonic_health::ServingStatus::{NotServing, Serving};
        let (token_status, alive) = match tokio::time::timeout(left, &mut running).await {
            Ok(Ok(Ok(()))) => (Serving, true),
            Ok(Ok(Err(error))) if error.pin_refused() => {
                tracing::error!(%error, "PKCS#11 token refused the PIN: the signer cannot sign until the PIN is fixed and it is restarted");
                (NotServing, true)
            }
            Ok(Ok(Err(error))) => {
                tracing::error!(%error, "PKCS#11 token cannot sign: reporting not alive");
                (NotServing, false)
            }
            Ok(Err(error)) => {
                tracing::error!(%error, "checking the PKCS#11 token failed");
                (NotServing, false)
            }
            Err(_) => {
                tracing::error!(
                    waited_secs = since.elapsed().as_secs(),
                    "PKCS#11 token does not answer: reporting not alive"
                );
                pending = Some((running, since));
                (NotServing, false)
            }
        };
        health
            .set_service_status("sigcast.token", token_status)
            .await;
        liveness.report("token", alive).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn memory_is_locked_in_future_only_where_no_memlock_limit_binds() {
        // Locked "now and in future" under a finite limit, the first allocation past it fails
        // and aborts the signer: a limit of 64 MiB, a signer started at 40 MiB, a busy hour.
        assert!(!may_lock_all_memory(Some(64 << 20), false));
        assert!(may_lock_all_memory(Some(64 << 20), true));
        assert!(may_lock_all_memory(None, false));
        let status = |eff: &str| format!("Name:\tsigcast-signer\nCapPrm:\t{eff}\nCapEff:\t{eff}\n");
        assert!(holds_ipc_lock(&status("000001fffeffffff")));
        assert!(holds_ipc_lock(&status("0000000000004000")));
        assert!(!holds_ipc_lock(&status("0000000000000000")));
        assert!(!holds_ipc_lock(&status("000001fffeffbfff")));
        assert!(!holds_ipc_lock("no such line"));
        assert!(in_initial_user_namespace("user:[4026531837]"));
        assert!(!in_initial_user_namespace("user:[4026532201]"));
        assert!(!in_initial_user_namespace(""));
    }
    use std::time::Duration;
    use tonic_health::pb::health_check_response::ServingStatus as Status;
    use tonic_health::pb::health_server::Health;

    async fn status_of(health: &impl Health, service: &str) -> Status {
        let request = tonic::Request::new(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        });
        let answer = health.check(request).await.unwrap().into_inner();
        Status::try_from(answer.status).unwrap()
    }

    /// Waits until `service` reads `wanted`.
    async fn until(health: &impl Health, service: &str, wanted: Status) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while status_of(health, service).await != wanted {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{service:?} never became {wanted:?}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_token_that_stops_answering_makes_the_signer_not_alive_until_it_answers() {
        let reporter = tonic_health::server::HealthReporter::new();
        let server = tonic_health::server::HealthService::from_health_reporter(reporter.clone());
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        // A check that hangs, as a call into an HSM that stopped answering does, until let go.
        let (answer, answered) = std::sync::mpsc::channel::<()>();
        let answered = Arc::new(std::sync::Mutex::new(answered));
        let checks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = checks.clone();
        let check = move || {
            // The first check hangs; the token answers every later one.
            if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                let _ = answered
                    .lock()
                    .unwrap()
                    .recv_timeout(Duration::from_secs(10));
            }
            Ok(())
        };
        let watch = tokio::spawn(watch_token(
            check,
            Duration::from_millis(50),
            reporter.clone(),
            Liveness::new(reporter),
        ));
        until(&server, "", Status::NotServing).await;
        assert_eq!(
            status_of(&server, "sigcast.token").await,
            Status::NotServing
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            checks.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "a hung check is waited for again, not started a second time"
        );
        answer.send(()).unwrap();
        until(&server, "", Status::Serving).await;
        until(&server, "sigcast.token", Status::Serving).await;
        watch.abort();
    }
}
