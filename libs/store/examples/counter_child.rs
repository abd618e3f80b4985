//! A child process for the store's multi-process test: opens the store named by its arguments
//! and increments one counter in `count` separate transactions.
//!
//! `counter_child <sqlite|fdb> <path or cluster file> <namespace> <count>`

use sigcast_store::{Store, StoreConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [backend, location, namespace, count] = args.as_slice() else {
        return Err(
            "usage: counter_child <sqlite|fdb> <path or cluster file> <namespace> <count>".into(),
        );
    };
    let mut config = match backend.as_str() {
        "sqlite" => StoreConfig::sqlite(location),
        _ => StoreConfig::fdb(Some(location.into())),
    };
    config.namespace = namespace.clone();
    let store = Store::open(&config)?;
    let key = store.root().pack(&("counter",));
    for _ in 0..count.parse::<u32>()? {
        store.run(|tx| {
            let value = tx
                .get(&key)?
                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap_or([0; 8])));
            tx.set(&key, &(value + 1).to_be_bytes())
        })?;
    }
    Ok(())
}
