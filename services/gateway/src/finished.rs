//! Finished operations held in memory, so that their replays skip the store.
//!
//! A terminal record never changes again: `operations::put` refuses every transition out of
//! a terminal state, to the same state too, and no other code writes a record. A copy read
//! once is what a later read of the store would return, on this replica or another, so it
//! needs no invalidation. A record not yet terminal is never kept. What is held answers only
//! a replay of its own caller (SubmitOperation): Get, Watch, List and Cancel read the store,
//! which alone shows a record rewritten or damaged from outside (what `sigcast reconcile`
//! and an operator's `op get` exist to see).

use hashlink::LruCache;
use prost::Message;
use sigcast_proto::pb;
use std::sync::{Arc, Mutex};

/// Bytes counted per entry beyond its op_id, caller and encoded record: the map's node, its
/// slot in the table and the allocations' headers.
const ENTRY_OVERHEAD: usize = 160;

/// The most recently read finished operations, up to `max_bytes`, least recently read
/// dropped first. Kept encoded (smaller than a decoded record's many strings); a hit is
/// decoded outside the lock.
pub(crate) struct FinishedOperations {
    entries: Mutex<Entries>,
    max_bytes: usize,
}

struct Entries {
    by_op_id: LruCache<String, Entry>,
    bytes: usize,
}

struct Entry {
    caller: String,
    encoded: Arc<[u8]>,
}

impl Entry {
    fn size(&self, op_id: &str) -> usize {
        op_id.len() + self.caller.len() + self.encoded.len() + ENTRY_OVERHEAD
    }
}

impl FinishedOperations {
    /// Holds up to `max_bytes`; 0 holds nothing.
    pub(crate) fn new(max_bytes: usize) -> Self {
        Self {
            entries: Mutex::new(Entries {
                by_op_id: LruCache::new_unbounded(),
                bytes: 0,
            }),
            max_bytes,
        }
    }

    /// `caller`'s finished operation `op_id`, if held. Another caller's is not answered from
    /// here (nor made more recent): it reads the store, as before anything was held, and
    /// learns nothing from how fast the answer comes.
    pub(crate) fn get(&self, op_id: &str, caller: &str) -> Option<pb::Operation> {
        if self.max_bytes == 0 {
            return None;
        }
        let encoded = {
            let mut entries = self.lock();
            if entries.by_op_id.peek(op_id)?.caller != caller {
                return None;
            }
            entries.by_op_id.get(op_id)?.encoded.clone()
        };
        // Encoded by `keep` from a record of this very type: a failure would be a defect, and
        // the caller then reads the store as if nothing were held.
        pb::Operation::decode(&*encoded).ok()
    }

    /// Holds `op` if it is terminal and fits; the least recently read go to make room.
    pub(crate) fn keep(&self, op: &pb::Operation) {
        if self.max_bytes == 0 || !is_terminal(op) {
            return;
        }
        // Held already (a Get of it, read from the store again): the same bytes.
        if self.lock().by_op_id.get(&op.op_id).is_some() {
            return;
        }
        let entry = Entry {
            caller: op.caller.clone(),
            encoded: op.encode_to_vec().into(),
        };
        let size = entry.size(&op.op_id);
        if size > self.max_bytes {
            return;
        }
        let mut entries = self.lock();
        if let Some(old) = entries.by_op_id.insert(op.op_id.clone(), entry) {
            entries.bytes -= old.size(&op.op_id);
        }
        entries.bytes += size;
        while entries.bytes > self.max_bytes {
            let Some((op_id, old)) = entries.by_op_id.remove_lru() else {
                break;
            };
            entries.bytes -= old.size(&op_id);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Every change leaves the map and its byte count consistent before any call that
        // could panic: a poisoned lock still holds a usable cache.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn is_terminal(op: &pb::Operation) -> bool {
    sigcast_proto::state_from_proto(op.state()).is_some_and(|state| state.is_terminal())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALLER: &str = "spiffe://example.org/payments";

    fn size(op: &pb::Operation) -> usize {
        Entry {
            caller: op.caller.clone(),
            encoded: op.encode_to_vec().into(),
        }
        .size(&op.op_id)
    }

    fn operation(op_id: &str, state: pb::OperationState) -> pb::Operation {
        pb::Operation {
            op_id: op_id.into(),
            state: state.into(),
            chain: "eip155:31337".into(),
            caller: CALLER.into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_terminal_operation_is_held_and_it_is_answered_as_kept() {
        let finished = FinishedOperations::new(1 << 20);
        for state in [
            pb::OperationState::Unspecified,
            pb::OperationState::Received,
            pb::OperationState::Signed,
            pb::OperationState::Sent,
        ] {
            let op_id = format!("{state:?}");
            finished.keep(&operation(&op_id, state));
            assert_eq!(finished.get(&op_id, CALLER), None, "{state:?} is not final");
        }
        for state in [
            pb::OperationState::Confirmed,
            pb::OperationState::Rejected,
            pb::OperationState::Cancelled,
        ] {
            let op_id = format!("{state:?}");
            let op = operation(&op_id, state);
            finished.keep(&op);
            assert_eq!(finished.get(&op_id, CALLER), Some(op), "{state:?} is final");
        }
        assert_eq!(finished.get("never-kept", CALLER), None);
    }

    #[test]
    fn another_caller_s_finished_operation_is_not_answered_nor_made_recent() {
        let one = size(&operation("op-0", pb::OperationState::Confirmed));
        let finished = FinishedOperations::new(2 * one);
        finished.keep(&operation("op-0", pb::OperationState::Confirmed));
        finished.keep(&operation("op-1", pb::OperationState::Confirmed));
        assert_eq!(finished.get("op-0", "spiffe://example.org/other"), None);
        // Not made more recent by the other caller's lookup: op-0 is still the first to go.
        finished.keep(&operation("op-2", pb::OperationState::Confirmed));
        assert_eq!(finished.get("op-0", CALLER), None);
        assert!(finished.get("op-1", CALLER).is_some());
    }

    #[test]
    fn past_its_bytes_the_least_recently_read_goes_first() {
        let one = size(&operation("op-0", pb::OperationState::Confirmed));
        let finished = FinishedOperations::new(3 * one);
        for i in 0..3 {
            finished.keep(&operation(
                &format!("op-{i}"),
                pb::OperationState::Confirmed,
            ));
        }
        // op-0 read again: op-1 is now the least recently read.
        assert!(finished.get("op-0", CALLER).is_some());
        finished.keep(&operation("op-3", pb::OperationState::Confirmed));
        assert!(
            finished.get("op-1", CALLER).is_none(),
            "the least recently read is dropped"
        );
        for kept in ["op-0", "op-2", "op-3"] {
            assert!(finished.get(kept, CALLER).is_some(), "{kept}");
        }
        assert!(finished.lock().bytes <= 3 * one);
        // Kept again, an entry is counted once.
        finished.keep(&operation("op-3", pb::OperationState::Confirmed));
        assert_eq!(finished.lock().bytes, 3 * one);
    }

    #[test]
    fn nothing_is_held_when_its_room_is_zero_or_too_small() {
        let op = operation("op-0", pb::OperationState::Confirmed);
        for max_bytes in [0, size(&op) - 1] {
            let finished = FinishedOperations::new(max_bytes);
            finished.keep(&op);
            assert_eq!(finished.get("op-0", CALLER), None, "{max_bytes}");
            assert_eq!(finished.lock().bytes, 0);
        }
    }
}
