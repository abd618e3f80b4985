//! Blocks' outcomes shared through the store by the broadcaster replicas of one chain (see
//! `sigcast_evm::evidence::SharedOutcomes`): each block's receipt list is read from the node
//! by one replica, not by every one.

use sigcast_evm::B256;
use sigcast_evm::evidence::{Answer, Outcomes, Shared, SharedOutcomes};
use sigcast_store::Store;
use sigcast_store::blocks::{self, Block, Seen};
use std::time::Duration;

/// How long a replica waits before looking again at a block another replica reads: a list
/// of a full block takes the node a few hundred milliseconds to build.
const PAUSE: Duration = Duration::from_millis(50);

/// How long a claim may take in the store before the list is read here instead: a busy
/// store must not hold the checks of a block longer than reading its list would.
const CLAIM_WITHIN: Duration = Duration::from_millis(500);

/// One chain's blocks' outcomes in the store, as this replica sees them.
#[derive(Debug)]
pub(crate) struct StoreOutcomes {
    store: Store,
    chain: String,
    /// This process among the replicas, drawn at its start: a claim it finds of its own (a
    /// body run again) is still its own, and one left by an earlier start is another's.
    replica: u64,
}

impl StoreOutcomes {
    pub(crate) fn new(store: Store, chain: String, replica: u64) -> Self {
        Self {
            store,
            chain,
            replica,
        }
    }

    async fn seen_or_claimed(
        &self,
        number: u64,
        hash: String,
    ) -> sigcast_store::Result<Option<Seen>> {
        let (root, chain, replica) = (self.store.root().clone(), self.chain.clone(), self.replica);
        // A look first, which writes nothing: most looks find outcomes or a reader.
        let seen = {
            let (root, chain, hash) = (root.clone(), chain.clone(), hash.clone());
            self.store
                .read_point(move |tx| blocks::seen(tx, &root, block(&chain, number, &hash)))
                .await?
        };
        match seen {
            Some(Seen::Reading(id)) if id == replica => Ok(None),
            Some(seen) => Ok(Some(seen)),
            None => {
                self.store
                    .run_async(move |tx| {
                        blocks::claim(tx, &root, block(&chain, number, &hash), replica)
                    })
                    .await
            }
        }
    }

    /// Runs `body` on the block in a store transaction; what fails only costs the others a
    /// read of the list.
    async fn write(
        &self,
        number: u64,
        hash: B256,
        body: impl Fn(
            &mut dyn sigcast_store::KvTransaction,
            &sigcast_store::tuple::Subspace,
            Block<'_>,
        ) -> sigcast_store::Result<()>
        + Send
        + 'static,
    ) {
        let (root, chain, hash) = (
            self.store.root().clone(),
            self.chain.clone(),
            hash.to_string(),
        );
        let written = self
            .store
            .run_async(move |tx| body(tx, &root, block(&chain, number, &hash)))
            .await;
        if let Err(error) = written {
            tracing::warn!(%error, number, "block outcomes not shared in the store: other replicas read the list themselves");
        }
    }
}

fn block<'a>(chain: &'a str, number: u64, hash: &'a str) -> Block<'a> {
    Block {
        chain,
        number,
        hash,
    }
}

impl SharedOutcomes for StoreOutcomes {
    fn claim(&self, number: u64, hash: B256) -> Answer<'_, Shared> {
        Box::pin(async move {
            let seen =
                tokio::time::timeout(CLAIM_WITHIN, self.seen_or_claimed(number, hash.to_string()))
                    .await;
            match seen {
                Ok(Ok(None)) => Shared::Claimed,
                Ok(Ok(Some(Seen::Reading(_)))) => Shared::Elsewhere,
                Ok(Ok(Some(Seen::Outcomes(digest, success)))) => Shared::Known(Outcomes {
                    transactions: B256::from(digest),
                    success,
                }),
                // The store slow or failing: the list is read here, as with one replica.
                Ok(Err(error)) => {
                    tracing::warn!(%error, number, "block outcomes unreadable in the store: the list is read here");
                    Shared::Claimed
                }
                Err(_) => {
                    tracing::debug!(
                        number,
                        "block outcomes not read in time: the list is read here"
                    );
                    Shared::Claimed
                }
            }
        })
    }

    fn publish(&self, number: u64, hash: B256, outcomes: Outcomes) -> Answer<'_, ()> {
        let replica = self.replica;
        Box::pin(self.write(number, hash, move |tx, root, block| {
            blocks::publish(
                tx,
                root,
                block,
                replica,
                &outcomes.transactions.0,
                &outcomes.success,
            )
        }))
    }

    fn give_up(&self, number: u64, hash: B256) -> Answer<'_, ()> {
        let replica = self.replica;
        Box::pin(self.write(number, hash, move |tx, root, block| {
            blocks::give_up(tx, root, block, replica)
        }))
    }

    fn pause(&self) -> Answer<'_, ()> {
        Box::pin(tokio::time::sleep(PAUSE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sigcast_store::StoreConfig;

    fn outcomes(success: &[bool]) -> Outcomes {
        Outcomes {
            transactions: B256::repeat_byte(7),
            success: success.to_vec(),
        }
    }

    #[tokio::test]
    async fn replicas_on_one_store_claim_a_block_once_and_share_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig::sqlite(dir.path().join("store.db"))).unwrap();
        let replica = |id| StoreOutcomes::new(store.clone(), "eip155:1".into(), id);
        let (first, second, restarted) = (replica(1), replica(2), replica(3));
        let block = B256::repeat_byte(9);
        assert_eq!(first.claim(5, block).await, Shared::Claimed);
        assert_eq!(
            first.claim(5, block).await,
            Shared::Claimed,
            "its own claim, still"
        );
        assert_eq!(second.claim(5, block).await, Shared::Elsewhere);
        // Given up (its list unreadable): the next replica to look claims it.
        second.give_up(5, block).await;
        assert_eq!(
            restarted.claim(5, block).await,
            Shared::Elsewhere,
            "only the claimer gives up"
        );
        first.give_up(5, block).await;
        assert_eq!(second.claim(5, block).await, Shared::Claimed);
        second.publish(5, block, outcomes(&[true, false])).await;
        for replica in [&first, &second, &restarted] {
            assert_eq!(
                replica.claim(5, block).await,
                Shared::Known(outcomes(&[true, false]))
            );
        }
        // Another chain's replicas share nothing of it.
        let other_chain = StoreOutcomes::new(store.clone(), "eip155:2".into(), 1);
        assert_eq!(other_chain.claim(5, block).await, Shared::Claimed);
    }
}
