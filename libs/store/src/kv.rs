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
