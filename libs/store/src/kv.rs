//! The transaction interface both backends implement. Keys and values are bytes; keys order
//! bytewise (memcmp), as in FoundationDB, so tuple-encoded keys range-scan in tuple order.

use crate::Result;

/// Reads within a transaction. All reads of one transaction see one consistent snapshot plus
/// the transaction's own writes.
pub trait KvRead {
    /// The value at `key`, if any.
    fn get(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>>;

    /// Key-value pairs with `begin <= key < end`, in key order (reversed when `reverse`), at
    /// most `limit` of them.
    fn get_range(
        &mut self,
        begin: &[u8],
        end: &[u8],
        limit: usize,
        reverse: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>>;
}

/// Reads and writes within a transaction. Writes become visible to others only at commit.
pub trait KvTransaction: KvRead {
    /// Sets `key` to `value`.
    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()>;
    /// Removes `key`.
    fn clear(&mut self, key: &[u8]) -> Result<()>;
    /// Removes every key with `begin <= key < end`.
    fn clear_range(&mut self, begin: &[u8], end: &[u8]) -> Result<()>;
}

/// FoundationDB's limits, enforced by both backends as each write is made: a store that works
/// embedded must work on a cluster, and a write over a limit fails where it is made, not at
/// commit.
pub(crate) mod limits {
    use crate::{Error, Result};

    /// Largest key.
    pub(crate) const KEY: usize = 10_000;
    /// Largest value.
    pub(crate) const VALUE: usize = 100_000;
    /// Most bytes of keys and values one transaction may write or clear.
    pub(crate) const TRANSACTION: usize = 10_000_000;

    fn check(what: &'static str, size: usize, limit: usize) -> Result<()> {
        if size > limit {
            return Err(Error::TooLarge { what, size, limit });
        }
        Ok(())
    }

    /// A key about to be read or written.
    pub(crate) fn key(key: &[u8]) -> Result<()> {
        check("key", key.len(), KEY)
    }

    /// The size of one transaction's writes so far.
    #[derive(Debug, Default)]
    pub(crate) struct Written(usize);

    impl Written {
        /// A set of `key` to `value`.
        pub(crate) fn set(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
            self::key(key)?;
            check("value", value.len(), VALUE)?;
            self.add(key.len() + value.len())
        }

        /// A clear of one key, or of a range (`begin` and `end` together).
        pub(crate) fn clear(&mut self, bytes: usize) -> Result<()> {
            self.add(bytes)
        }

        fn add(&mut self, bytes: usize) -> Result<()> {
            self.0 += bytes;
            check("transaction", self.0, TRANSACTION)
        }
    }
}
