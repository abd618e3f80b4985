/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An SQLite call failed. Busy and locked errors are retried by [`crate::Store::run`].
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A FoundationDB call failed. Kept as `FdbError` so the retry loop can hand it to
    /// `on_error`, which knows which codes are retryable.
    #[cfg(feature = "fdb")]
    #[error("foundationdb: {0}")]
    Fdb(#[from] foundationdb::FdbError),
    /// The store could not be opened.
    #[error("opening the {backend} store at {location}: {reason}")]
    Open {
        /// Backend name.
        backend: &'static str,
        /// File or cluster file.
        location: String,
        /// What went wrong.
        reason: String,
    },
    /// A transaction kept conflicting or finding the database busy until its deadline.
    #[error("store busy: transaction gave up after {attempts} attempts over {elapsed_ms} ms")]
    Busy {
        /// Attempts made.
        attempts: u32,
        /// Time spent.
        elapsed_ms: u128,
    },
    /// A stored value does not decode: the store holds data this version cannot read.
    #[error("decoding {what} stored at key {key}: {reason}")]
    Corrupt {
        /// What was being decoded.
        what: &'static str,
        /// The key, hex-encoded.
        key: String,
        /// Decoder message.
        reason: String,
    },
    /// The store was written by a newer build: this one must not read or write it.
    #[error(
        "the store holds data format {found}, newer than this build's {ours}: refusing to run; finish the upgrade (or roll it back) so every service runs one version"
    )]
    NewerFormat {
        /// The format the store records.
        found: u32,
        /// This build's format.
        ours: u32,
    },
    /// The blocking task running a transaction was lost (runtime shutting down).
    #[error("store task failed: {0}")]
    Task(String),
}

impl Error {
    /// Whether running the transaction again may succeed: the database was busy or locked.
    /// (FoundationDB errors are classified by `on_error` in the FoundationDB backend.)
    pub(crate) fn is_sqlite_busy(&self) -> bool {
        matches!(
            self,
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if matches!(e.code, rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

/// Result of store calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
