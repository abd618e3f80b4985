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
        "the store holds data format {found}, newer than this build's {ours}: refusing to run; finish the upgrade so every service runs one version"
    )]
    NewerFormat {
        /// The format the store records.
        found: u32,
        /// This build's format.
        ours: u32,
    },
    /// A key, a value or a whole transaction is over FoundationDB's limits, which the
    /// embedded backend enforces too: what is stored on one backend can be stored on the other.
    #[error("{what} of {size} bytes is over the store's limit of {limit} bytes")]
    TooLarge {
        /// "key", "value" or "transaction".
        what: &'static str,
        /// Its size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// A change of an operation's state that its lifecycle forbids; nothing was written.
    #[error("operation {op_id}: {source}")]
    IllegalTransition {
        /// The operation.
        op_id: String,
        /// The refused transition.
        source: sigcast_domain::Error,
    },
    /// A transaction body refused to go on; nothing it wrote was committed. Returned only
    /// by the `*_or_refuse` runners, which hand the refusal itself to their caller.
    #[error("the transaction body refused; nothing was written")]
    Refused,
    /// The group-commit thread ended: grouped transactions can no longer commit.
    #[error("the store's group-commit thread has ended")]
    GroupCommitEnded,
    /// The group-commit thread has been inside one transaction for too long.
    #[error("the store's group-commit thread has been inside one transaction for {seconds} s")]
    GroupCommitStalled {
        /// How long.
        seconds: u64,
    },
    /// The blocking task running a transaction was lost (runtime shutting down).
    #[error("store task failed: {0}")]
    Task(String),
}

impl Error {
    /// Whether the store refused the write for want of space: the disk, or `max_size_mb`.
    /// Nothing of the transaction was written; a retry succeeds once space is back.
    pub fn is_full(&self) -> bool {
        matches!(
            self,
            Error::Sqlite(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DiskFull
        )
    }

    /// What of this error is the store's as a whole, which any other transaction would meet
    /// again (after the same wait): its write lock held by another process past the retry
    /// deadline, a data format a newer build raised, FoundationDB's transaction timeout.
    /// `None` for what a body caused. (`group`: the error of a group commit, where
    /// FoundationDB's timeout may be the group's own doing: many bodies' reads, conflicts
    /// retried until it, not the cluster's.)
    #[cfg_attr(not(feature = "fdb"), allow(unused_variables))]
    pub fn store_wide(&self, group: bool) -> Option<StoreWide> {
        match self {
            Error::Busy {
                attempts,
                elapsed_ms,
            } => Some(StoreWide::Busy {
                attempts: *attempts,
                elapsed_ms: *elapsed_ms,
            }),
            Error::NewerFormat { found, ours } => Some(StoreWide::NewerFormat {
                found: *found,
                ours: *ours,
            }),
            #[cfg(feature = "fdb")]
            Error::Fdb(e) if !group && e.code() == crate::fdb::TIMED_OUT => {
                Some(StoreWide::FdbTimedOut(*e))
            }
            _ => None,
        }
    }

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

/// An error of the store as a whole ([`Error::store_wide`]), to give every caller waiting on
/// it a copy.
#[derive(Debug, Clone, Copy)]
pub enum StoreWide {
    /// [`Error::Busy`].
    Busy {
        /// Attempts made.
        attempts: u32,
        /// Time spent.
        elapsed_ms: u128,
    },
    /// [`Error::NewerFormat`].
    NewerFormat {
        /// The format the store records.
        found: u32,
        /// This build's format.
        ours: u32,
    },
    /// FoundationDB's `transaction_timed_out`.
    #[cfg(feature = "fdb")]
    FdbTimedOut(foundationdb::FdbError),
}

impl From<StoreWide> for Error {
    fn from(wide: StoreWide) -> Self {
        match wide {
            StoreWide::Busy {
                attempts,
                elapsed_ms,
            } => Error::Busy {
                attempts,
                elapsed_ms,
            },
            StoreWide::NewerFormat { found, ours } => Error::NewerFormat { found, ours },
            #[cfg(feature = "fdb")]
            StoreWide::FdbTimedOut(e) => Error::Fdb(e),
        }
    }
}

/// Result of store calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
