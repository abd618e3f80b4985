//! Blocks' outcomes shared through the store by the broadcaster replicas of one chain (see
//! `sigcast_evm::evidence::SharedOutcomes`): each block's receipt list is read from the node
//! by one replica, not by every one.

use sigcast_evm::B256;
use sigcast_evm::evidence::{Answer, Shared, SharedOutcomes};
use sigcast_store::Store;
use sigcast_store::blocks::{self, Seen};
use std::time::Duration;

/// How long a replica waits before looking again at a block another replica reads: a list
/// of a full block takes the node a few hundred milliseconds to build.
const PAUSE: Duration = Duration::from_millis(50);

/// One chain's blocks' outcomes in the store, as this replica sees them.
#[derive(Debug)]
pub(crate) struct StoreOutcomes {
    store: Store,
    chain: String,
    /// This process, among the replicas: a claim it finds of its own (a body run again) is
    /// still its own.
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
}

impl SharedOutcomes for StoreOutcomes {
    fn claim(&self, number: u64, hash: B256) -> Answer<'_, Shared> {
        Box::pin(async move {
            let (root, chain, hash) = (
                self.store.root().clone(),
                self.chain.clone(),
                hash.to_string(),
            );
            let replica = self.replica;
            // A look first, which writes nothing: most looks find outcomes or a reader.
            let seen = {
                let (root, chain, hash) = (root.clone(), chain.clone(), hash.clone());
                self.store
                    .read_point(move |tx| blocks::seen(tx, &root, &chain, number, &hash))
                    .await
            };
            let seen = match seen {
                Ok(Some(Seen::Reading(id))) if id == replica => Ok(None),
                Ok(Some(seen)) => Ok(Some(seen)),
                Ok(None) => {
                    self.store
                        .run_async(move |tx| {
                            blocks::claim(tx, &root, &chain, number, &hash, replica)
                        })
                        .await
                }
                Err(error) => Err(error),
            };
            match seen {
                Ok(None) => Shared::Claimed,
                Ok(Some(Seen::Reading(_))) => Shared::Elsewhere,
                Ok(Some(Seen::Outcomes(outcomes))) => Shared::Known(outcomes),
                // The store unreadable: the list is read here, as with one replica.
                Err(error) => {
                    tracing::debug!(%error, number, "block outcomes unreadable in the store: the list is read here");
                    Shared::Claimed
                }
            }
        })
    }

    fn publish(&self, number: u64, hash: B256, outcomes: Option<Vec<bool>>) -> Answer<'_, ()> {
        Box::pin(async move {
            let (root, chain, hash) = (
                self.store.root().clone(),
                self.chain.clone(),
                hash.to_string(),
            );
            let replica = self.replica;
            let published = self
                .store
                .run_async(move |tx| match &outcomes {
                    Some(outcomes) => blocks::publish(tx, &root, &chain, number, &hash, outcomes),
                    None => blocks::give_up(tx, &root, &chain, number, &hash, replica),
                })
                .await;
            // Unpublished, the others wait for it and then read the list themselves.
            if let Err(error) = published {
                tracing::debug!(%error, number, "block outcomes not published");
            }
        })
    }

    fn pause(&self) -> Answer<'_, ()> {
        Box::pin(tokio::time::sleep(PAUSE))
    }
}
