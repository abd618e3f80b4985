//! What every sigcast service process shares: loading its configuration (defaults, then a TOML
//! file, then environment variables), running its `main` with errors printed as one line, and
//! the signals that stop it gracefully.
//!
//! Nothing here knows a service's settings or does its work; it must never log a value it
//! loads, since configurations name secrets' locations.

pub mod accept;
pub mod clock;
pub mod identity;
pub mod liveness;
pub mod tls;

use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future;
use std::path::Path;
use std::process::ExitCode;

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file or environment did not parse.
    #[error("reading configuration: {0}")]
    Load(#[from] Box<figment::Error>),
    /// A value is out of range.
    #[error("configuration value {field}: {rule}")]
    Invalid {
        /// Which setting.
        field: &'static str,
        /// What it must be.
        rule: String,
    },
}

impl ConfigError {
    /// A value out of range.
    pub fn invalid(field: &'static str, rule: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            rule: rule.into(),
        }
    }
}

/// A service configuration: serde in both directions, with defaults and a validity check.
pub trait ServiceConfig: Serialize + DeserializeOwned + Default {
    /// Prefix of the environment variables that override the file, e.g. `SIGCAST_SIGNER__`;
    /// `__` separates levels after it.
    const ENV_PREFIX: &'static str;

    /// Checks values that parse but cannot work.
    fn validate(&self) -> Result<(), ConfigError>;

    /// Defaults, overridden by `file` (if given), then by the environment; then validated.
    fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        let mut figment = Figment::from(Serialized::defaults(Self::default()));
        if let Some(file) = file {
            if !file.exists() {
                return Err(ConfigError::invalid(
                    "--config",
                    format!("file {} does not exist", file.display()),
                ));
            }
            figment = figment.merge(Toml::file(file));
        }
        let config: Self = figment
            .merge(Env::prefixed(Self::ENV_PREFIX).split("__"))
            .extract()
            .map_err(Box::new)?;
        config.validate()?;
        Ok(config)
    }
}

/// Runs a service's async main on a multi-threaded runtime; a failure is printed as one line
/// with its cause chain (no backtrace for a configuration mistake) and exits 1.
pub fn main(service: impl Future<Output = anyhow::Result<()>>) -> ExitCode {
    // 1 MiB stacks, not 2: the signer locks its memory (mlockall), which makes every thread's
    // whole stack resident; nothing here recurses deeply. Blocking threads are bounded well
    // above the store's transaction concurrency.
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(1024 * 1024)
        .max_blocking_threads(64)
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|rt| rt.block_on(service));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Completes on SIGTERM (how Kubernetes and process managers stop a service) or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
        }
        Err(error) => {
            tracing::warn!(%error, "no SIGTERM handler; stopping on Ctrl-C only");
            let _ = ctrl_c.await;
        }
    }
}

/// Awaits `serving`, servers that stop accepting once `stopping` completes and then wait for
/// their calls to end, giving those calls at most `drain` after `stopping`. `None` when the
/// drain ran out (the calls still open are then dropped with the servers, logged). A stream
/// that never ends by itself (a client's Health/Watch) would otherwise keep the process past
/// its grace period, to be killed there with every other call cut.
pub async fn drained<T>(
    serving: impl Future<Output = T>,
    stopping: impl Future<Output = ()>,
    drain: std::time::Duration,
) -> Option<T> {
    let drained = async move {
        stopping.await;
        tokio::time::sleep(drain).await;
    };
    tokio::select! {
        served = serving => Some(served),
        () = drained => {
            tracing::warn!(drain_secs = drain.as_secs(), "calls still open after the drain period: closing them");
            None
        }
    }
}

#[cfg(test)]
// figment's Jail fixes the closures' error type to its own (large) figment::Error.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Example {
        port: u16,
        nested: Nested,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Nested {
        name: String,
    }

    impl Default for Example {
        fn default() -> Self {
            Self {
                port: 1,
                nested: Nested::default(),
            }
        }
    }

    impl Default for Nested {
        fn default() -> Self {
            Self {
                name: "default".into(),
            }
        }
    }

    impl ServiceConfig for Example {
        const ENV_PREFIX: &'static str = "SIGCAST_EXAMPLE__";
        fn validate(&self) -> Result<(), ConfigError> {
            if self.port == 0 {
                Err(ConfigError::invalid("port", "must not be 0"))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn defaults_then_file_then_environment() {
        figment::Jail::expect_with(|jail| {
            assert_eq!(Example::load(None).unwrap(), Example::default());
            jail.create_file("example.toml", "port = 7\n[nested]\nname = \"file\"")?;
            jail.set_env("SIGCAST_EXAMPLE__NESTED__NAME", "env");
            let loaded = Example::load(Some(Path::new("example.toml"))).unwrap();
            assert_eq!(
                loaded,
                Example {
                    port: 7,
                    nested: Nested { name: "env".into() }
                }
            );
            Ok(())
        });
    }

    #[test]
    fn mistakes_are_named() {
        figment::Jail::expect_with(|jail| {
            jail.create_file("zero.toml", "port = 0")?;
            assert!(
                Example::load(Some(Path::new("zero.toml")))
                    .unwrap_err()
                    .to_string()
                    .contains("port")
            );
            jail.create_file("typo.toml", "prot = 3")?;
            assert!(
                Example::load(Some(Path::new("typo.toml")))
                    .unwrap_err()
                    .to_string()
                    .contains("prot")
            );
            assert!(
                Example::load(Some(Path::new("missing.toml")))
                    .unwrap_err()
                    .to_string()
                    .contains("missing.toml")
            );
            Ok(())
        });
    }
}
