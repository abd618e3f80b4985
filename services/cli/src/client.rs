//! gRPC clients: the gateway (operations, audit trail) and the signer (its keys).

use anyhow::{Context, Result, anyhow, bail};
use sigcast_proto::pb;
use sigcast_proto::pb::operation_service_client::OperationServiceClient;
use sigcast_proto::sigcast::operator::v1 as operator;
use sigcast_proto::sigcast::operator::v1::operator_service_client::OperatorServiceClient;
use sigcast_proto::sigcast::signer::v1 as signer;
use std::io::IsTerminal;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// How a command ended, for its exit status: scripts branch on these without parsing text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No such operation (NOT_FOUND): exit 3.
    NotFound,
    /// The gateway could not be reached or answered UNAVAILABLE / DEADLINE_EXCEEDED, or the
    /// command's `--timeout` passed: exit 4. Retrying later may succeed.
    Unavailable,
    /// The request was refused (INVALID_ARGUMENT, PERMISSION_DENIED, ALREADY_EXISTS,
    /// FAILED_PRECONDITION, UNAUTHENTICATED, OUT_OF_RANGE): exit 5. Retrying will not help.
    Refused,
    /// A watch ended (its `--timeout`, or the stream) before the operation was terminal:
    /// exit 6.
    NotTerminal,
}

impl Outcome {
    /// The process exit status.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Outcome::NotFound => 3,
            Outcome::Unavailable => 4,
            Outcome::Refused => 5,
            Outcome::NotTerminal => 6,
        }
    }
}

/// An error that says how the command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub(crate) outcome: Outcome,
    message: String,
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Ended {}

fn ended(outcome: Outcome, message: String) -> anyhow::Error {
    anyhow::Error::new(Ended { outcome, message })
}

/// A gRPC error as the operator reads it: the code's name and the server's message.
fn status(what: &str, status: tonic::Status) -> anyhow::Error {
    use tonic::Code;
    let mut message = format!("{what}: {:?}: {}", status.code(), status.message());
    let outcome = match status.code() {
        // The connection failed under the call (tonic reports it as UNKNOWN with its cause):
        // over TLS most often a handshake the gateway refused.
        Code::Unknown if std::error::Error::source(&status).is_some() => {
            message.push_str(match what {
                "ListKeys" => {
                    " (the connection failed; over TLS, did the signer refuse the client \
                     certificate? check --signer-cert and --signer-key)"
                }
                _ => {
                    " (the connection failed; over TLS, did the gateway refuse the client \
                     certificate? check --cert and --key)"
                }
            });
            Outcome::Unavailable
        }
        Code::NotFound => {
            if matches!(what, "GetOperation" | "WatchOperation") {
                message.push_str(
                    " (a gateway that authenticates callers shows each only its own operations; \
                     an identity in its `operators` sees any)",
                );
            }
            Outcome::NotFound
        }
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::ResourceExhausted
        | Code::Aborted => Outcome::Unavailable,
        Code::InvalidArgument
        | Code::PermissionDenied
        | Code::AlreadyExists
        | Code::FailedPrecondition
        | Code::Unauthenticated
        | Code::OutOfRange => Outcome::Refused,
        _ => return anyhow!(message),
    };
    ended(outcome, message)
}

/// How the CLI reaches the gateway: `--timeout`, and TLS (`--ca`, `--cert`, `--key`,
/// `--server-name`).
#[derive(Debug, Clone, Default)]
pub(crate) struct Connection {
    /// Each call's deadline; a watch's too when given.
    pub(crate) timeout: Option<Duration>,
    /// CA of the gateway's certificate (PEM): TLS when set.
    pub(crate) ca: Option<std::path::PathBuf>,
    /// Client certificate and key (PEM), for a gateway that authenticates callers.
    pub(crate) cert: Option<std::path::PathBuf>,
    /// Its key.
    pub(crate) key: Option<std::path::PathBuf>,
    /// The name the gateway's certificate must carry, when not the address's host.
    pub(crate) server_name: Option<String>,
}

/// Calls without `--timeout` wait this long.
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// The gateway's APIs.
pub(crate) struct Gateway {
    operations: OperationServiceClient<Channel>,
    operator: OperatorServiceClient<Channel>,
}

impl Gateway {
    pub(crate) async fn connect(url: &str, how: &Connection) -> Result<Self> {
        let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
            .with_context(|| format!("gateway address {url:?}"))?
            .connect_timeout(Duration::from_secs(5))
            .timeout(how.timeout.unwrap_or(DEFAULT_CALL_TIMEOUT));
        let tls_options = how.ca.is_some() || how.cert.is_some() || how.key.is_some();
        if tls_options && !url.starts_with("https://") {
            // tonic speaks TLS only to an https:// address: the options would be ignored and
            // the certificate never presented.
            bail!(
                "TLS options (--ca, --cert, --key or SIGCAST_TLS_*) need an https:// gateway, not {url}"
            );
        }
        if url.starts_with("https://") {
            // No system trust store is built in: a deployment's gateway certificate comes
            // from its own CA.
            let Some(ca) = &how.ca else {
                bail!("an https gateway needs --ca (the CA that issued its certificate)");
            };
            let identity = match (&how.cert, &how.key) {
                (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
                (None, None) => None,
                _ => bail!("--cert and --key go together"),
            };
            let mut tls = client_tls(ca, identity)?;
            if let Some(name) = &how.server_name {
                tls = tls.domain_name(name.clone());
            }
            endpoint = endpoint.tls_config(tls).context("TLS settings")?;
        }
        let channel = endpoint.connect().await.map_err(|error| {
            // The error and its causes on one line, as anyhow's `{:#}` prints them.
            let mut text = error.to_string();
            let mut source = std::error::Error::source(&error);
            while let Some(cause) = source {
                text.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            ended(
                Outcome::Unavailable,
                format!("connecting to the gateway at {url}: {text}"),
            )
        })?;
        Ok(Self {
            operations: OperationServiceClient::new(channel.clone()),
            operator: OperatorServiceClient::new(channel),
        })
    }

    pub(crate) async fn get(&mut self, op_id: &str) -> Result<pb::Operation> {
        self.operations
            .get_operation(pb::GetOperationRequest {
                op_id: op_id.to_owned(),
            })
            .await
            .map_err(|s| status("GetOperation", s))?
            .into_inner()
            .operation
            .context("GetOperation answered without an operation")
    }

    pub(crate) async fn cancel(&mut self, op_id: &str) -> Result<pb::Operation> {
        self.operations
            .cancel_operation(pb::CancelOperationRequest {
                op_id: op_id.to_owned(),
            })
            .await
            .map_err(|s| status("CancelOperation", s))?
            .into_inner()
            .operation
            .context("CancelOperation answered without an operation")
    }

    pub(crate) async fn audit(&mut self, op_id: &str) -> Result<Vec<signer::AuditRecord>> {
        Ok(self
            .operator
            .get_audit_trail(operator::GetAuditTrailRequest {
                op_id: op_id.to_owned(),
            })
            .await
            .map_err(|s| status("GetAuditTrail", s))?
            .into_inner()
            .records)
    }

    /// Up to `limit` operations, following pages.
    pub(crate) async fn list(
        &mut self,
        chain: Option<String>,
        account: Option<String>,
        state: Option<String>,
        limit: usize,
    ) -> Result<Vec<pb::Operation>> {
        let state = match state {
            None => pb::OperationState::Unspecified,
            Some(name) => {
                let upper = name.to_ascii_uppercase();
                let full = if upper.starts_with("OPERATION_STATE_") {
                    upper
                } else {
                    format!("OPERATION_STATE_{upper}")
                };
                pb::OperationState::from_str_name(&full)
                    .filter(|s| *s != pb::OperationState::Unspecified)
                    .with_context(|| {
                        format!("--state {name:?}: one of RECEIVED, SIGNED, SENT, CONFIRMED, REJECTED, CANCELLED")
                    })?
            }
        };
        let mut operations = Vec::new();
        let mut page_token = String::new();
        while operations.len() < limit {
            let page = self
                .operations
                .list_operations(pb::ListOperationsRequest {
                    chain: chain.clone().unwrap_or_default(),
                    account: account.clone().unwrap_or_default(),
                    state: state.into(),
                    page_size: u32::try_from((limit - operations.len()).min(1000)).unwrap_or(1000),
                    page_token,
                })
                .await
                .map_err(|s| status("ListOperations", s))?
                .into_inner();
            operations.extend(page.operations);
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        operations.truncate(limit);
        Ok(operations)
    }

    /// Prints each revision until the operation is terminal; on a terminal, a line on stderr
    /// says how long it has been waiting meanwhile.
    pub(crate) async fn watch(
        &mut self,
        op_id: &str,
        out: &crate::output::Output,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        let until = async move {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(until);
        let mut stream = self
            .operations
            .watch_operation(pb::WatchOperationRequest {
                op_id: op_id.to_owned(),
            })
            .await
            .map_err(|s| status("WatchOperation", s))?
            .into_inner();
        let started = Instant::now();
        let progress = std::io::stderr().is_terminal();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last: Option<pb::Operation> = None;
        loop {
            tokio::select! {
                // The stream first: a terminal revision that arrives with the deadline wins.
                biased;
                message = stream.message() => {
                    match message.map_err(|s| status("WatchOperation", s))? {
                        Some(response) => {
                            let op = response.operation.context("a watch message without its operation")?;
                            if progress {
                                eprint!("\r\x1b[K");
                            }
                            out.watch_line(&op, started.elapsed())?;
                            let terminal = crate::output::is_terminal(&op);
                            last = Some(op);
                            if terminal {
                                break;
                            }
                        }
                        None => break,
                    }
                }
                () = &mut until => {
                    if progress {
                        eprint!("\r\x1b[K");
                    }
                    let state = last.as_ref().map_or("not seen", |op| crate::output::state(op));
                    return Err(ended(
                        Outcome::NotTerminal,
                        format!("--timeout passed with {op_id} still {state}"),
                    ));
                }
                _ = tick.tick(), if progress => {
                    let state = last.as_ref().map_or("?", |op| crate::output::state(op));
                    eprint!("\r\x1b[Kwaiting {}s · {state}", started.elapsed().as_secs());
                }
            }
        }
        if progress {
            eprint!("\r\x1b[K");
        }
        match last {
            Some(op) if crate::output::is_terminal(&op) => Ok(()),
            Some(op) => Err(ended(
                Outcome::NotTerminal,
                format!(
                    "the stream ended with {op_id} still {}",
                    crate::output::state(&op)
                ),
            )),
            None => bail!("the stream ended before any revision of {op_id}"),
        }
    }
}

/// TLS to a server whose certificate `ca` (PEM) issued, presenting `identity` (certificate
/// and key, PEM) if given.
fn client_tls(
    ca: &std::path::Path,
    identity: Option<(&std::path::Path, &std::path::Path)>,
) -> Result<tonic::transport::ClientTlsConfig> {
    let read =
        |p: &std::path::Path| std::fs::read(p).with_context(|| format!("reading {}", p.display()));
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
    Ok(match identity {
        Some((cert, key)) => tls.identity(tonic::transport::Identity::from_pem(
            read(cert)?,
            read(key)?,
        )),
        None => tls,
    })
}

/// The signer's keys, over its Unix socket or mutual TLS, within `timeout` (default 30 s).
pub(crate) async fn signer_keys(
    url: &str,
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
    timeout: Option<Duration>,
) -> Result<Vec<signer::SignerKey>> {
    let https = url.starts_with("https://");
    let tls = match (ca, cert, key) {
        (None, None, None) if !https => None,
        (Some(ca), Some(cert), Some(key)) if https => Some((ca, cert, key)),
        // Ignored, they would leave the call unauthenticated, or fail it obscurely.
        _ if https => bail!(
            "--signer-ca, --signer-cert and --signer-key go together: the https:// signer {url} \
             authenticates callers by certificate"
        ),
        _ => bail!(
            "--signer-ca, --signer-cert and --signer-key go together, with an https:// signer \
             only: {url} takes none"
        ),
    };
    let timeout = timeout.unwrap_or(DEFAULT_CALL_TIMEOUT);
    let list = async {
        let channel = if let Some(path) = url.strip_prefix("unix:") {
            sigcast_proto::unix_channel(path)
                .await
                .with_context(|| format!("connecting to the signer at {url}"))?
        } else {
            let mut endpoint = tonic::transport::Endpoint::from_shared(url.to_owned())
                .with_context(|| format!("signer address {url:?}"))?
                .connect_timeout(Duration::from_secs(5));
            if let Some((ca, cert, key)) = tls {
                endpoint = endpoint.tls_config(client_tls(&ca, Some((&cert, &key)))?)?;
            }
            endpoint
                .connect()
                .await
                .with_context(|| format!("connecting to the signer at {url}"))?
        };
        anyhow::Ok(
            signer::signer_service_client::SignerServiceClient::new(channel)
                .list_keys(signer::ListKeysRequest {})
                .await
                .map_err(|s| status("ListKeys", s))?
                .into_inner()
                .keys,
        )
    };
    match tokio::time::timeout(timeout, list).await {
        Ok(keys) => keys,
        Err(_) => Err(status(
            "ListKeys",
            tonic::Status::deadline_exceeded(format!("no answer from {url} within {timeout:?}")),
        )),
    }
}
