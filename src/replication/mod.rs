//! Partition replication in a cluster (Kafka's model: followers pull, the controller keeps the
//! in-sync set). Per shard:
//! - `fetcher.rs`: one task per leader this shard's partitions follow, fetching over that
//!   leader's Kafka listener, appending, syncing, reporting through its next fetch;
//! - `isr.rs`: the leader's side of the in-sync set: followers that fell behind leave it,
//!   caught-up ones join, each change asked of the controller (AlterPartition);
//! - the follower's Kafka connection is `rpc/kafka_client.rs`.
//!
//! What commits a record is `partition/commit.rs`; what a partition does as leader or follower
//! is `partition/replica.rs`.

pub mod fetcher;
pub mod isr;

use crate::shard::Shard;
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

/// How often a shard looks for leaders to follow (a new assignment starts its fetcher within
/// this).
const SUPERVISE_PERIOD_MS: u64 = 100;

/// Runs the shard's replication: starts a fetcher for each leader its partitions follow (each
/// ends by itself when none does any more) and the in-sync set keeper. For a clustered node.
pub async fn run(shard: Rc<Shard>) {
    glommio::spawn_local(isr::keep(shard.clone())).detach();
    let mut running: HashMap<i32, Rc<Cell<bool>>> = HashMap::new();
    while !shard.is_shutting_down() {
        running.retain(|_, alive| alive.get());
        let mut leaders: Vec<i32> = shard
            .partition_list()
            .iter()
            .filter_map(|p| p.follower_view())
            .map(|v| v.leader)
            .filter(|l| *l >= 0)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for leader in leaders {
            if running.contains_key(&leader) {
                continue;
            }
            let alive = Rc::new(Cell::new(true));
            running.insert(leader, alive.clone());
            let shard = shard.clone();
            glommio::spawn_local(async move {
                fetcher::follow(shard, leader).await;
                alive.set(false);
            })
            .detach();
        }
        shard.housekeeping_sleep(SUPERVISE_PERIOD_MS).await;
    }
}
