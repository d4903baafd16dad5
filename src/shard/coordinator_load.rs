//! Following the leadership of a coordinator's internal topic: the group coordinator's
//! `__consumer_offsets` and the transaction coordinator's `__transaction_state` (and share
//! groups' later). One pass over the shard's partitions of the topic loads each this node has
//! come to lead (replaying it, once its epoch start is committed) and unloads each it no longer
//! leads; what loading and unloading mean is the coordinator's (`Coordinated`).
//!
//! Invariant: a partition is marked loaded only under the leadership it was replayed in; a
//! leadership that changed during the replay is loaded again at the next pass.

use super::mesh::Peer;
use super::Shard;
use crate::partition::{Partition, ReadRequest};
use crate::protocol::chunk::Chunk;
use bytes::Bytes;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

/// Bytes read from a partition at a time during a replay.
const REPLAY_READ_BYTES: usize = 1 << 20;

/// A coordinator whose state is kept in the partitions of one internal topic: a service on
/// every shard, each loading the partitions its shard owns.
pub trait Coordinated: Peer {
    /// What a load found that the coordinator acts on once the partition is marked loaded.
    type Loaded;
    /// The internal topic.
    fn topic(&self) -> &'static str;
    /// The leader generation each loaded partition was loaded under, by partition index.
    fn loaded(&self) -> &RefCell<HashMap<i32, u64>>;
    /// Forgets what partition `index` (of `partitions`) held (its loaded mark is already gone).
    fn unload(&self, index: i32, partitions: u32);
    /// Partition `p` waits to load until `epoch_start` is committed.
    fn waits(&self, p: &Partition, epoch_start: i64);
    /// Replays partition `p` (of `partitions`) into the coordinator (on the shard's thread:
    /// the future need not be `Send`).
    fn load(
        self: &Rc<Self>,
        p: &Partition,
        partitions: u32,
    ) -> impl std::future::Future<Output = Self::Loaded>;
    /// After a load that kept its leadership, the partition now marked loaded.
    fn on_loaded(self: &Rc<Self>, loaded: Self::Loaded);
}

/// Whether a new leader of a coordinator's partition may load it: once its epoch start is
/// committed. Below it lie writes an earlier leader may have acknowledged, and a coordinator
/// that served without them would hand out state that went backwards (the simulator found
/// that a fallback after 30 s did exactly that for group offsets).
pub fn may_load(high_watermark: i64, epoch_start: i64) -> bool {
    high_watermark >= epoch_start
        || crate::inject::active(crate::inject::Bug::CoordinatorLoadsEarly)
}

/// This shard's partitions of internal topic `topic`, with the topic's partition count.
fn partitions_of(shard: &Shard, topic: &str) -> (Vec<Rc<Partition>>, u32) {
    let Some(topic) = shard.catalog().topics.get(topic).cloned() else {
        return (Vec::new(), 0);
    };
    let partitions = shard
        .partition_list()
        .into_iter()
        .filter(|p| p.id().topic_id == topic.record.id)
        .collect();
    (partitions, topic.record.partitions)
}

/// Whether a partition of `c`'s topic that this shard leads is not loaded yet under its
/// present leadership.
pub fn loading<C: Coordinated>(c: &C) -> bool {
    let loaded = c.loaded().borrow();
    partitions_of(c.home(), c.topic()).0.iter().any(|p| {
        p.leadership()
            .is_some_and(|(g, _)| loaded.get(&p.id().partition) != Some(&g))
    })
}

/// One pass over this shard's partitions of `c`'s topic: loads those led here and not loaded
/// under this leadership, unloads those no longer led here.
pub async fn load_led<C: Coordinated>(c: &Rc<C>) {
    let (partitions, count) = partitions_of(c.home(), c.topic());
    let unload = |index: i32| {
        c.loaded().borrow_mut().remove(&index);
        c.unload(index, count);
    };
    for p in partitions {
        let index = p.id().partition;
        let loaded = c.loaded().borrow().get(&index).copied();
        match (p.leadership(), loaded) {
            (Some((generation, _)), Some(l)) if generation == l => {}
            (Some((generation, epoch_start)), loaded) => {
                if loaded.is_some() {
                    unload(index);
                }
                if !may_load(p.high_watermark(), epoch_start) {
                    c.waits(&p, epoch_start);
                    continue;
                }
                let found = c.load(&p, count).await;
                if p.leadership().is_some_and(|(g, _)| g == generation) {
                    c.loaded().borrow_mut().insert(index, generation);
                    c.on_loaded(found);
                }
            }
            (None, Some(_)) => unload(index),
            (None, None) => {}
        }
    }
}

/// Reads a partition of the broker's own records from its start to its high watermark, a
/// chunk of whole batches at a time: `learn` takes each and returns the offset after its
/// last batch (None: stop).
pub async fn read_from_start(partition: &Partition, mut learn: impl FnMut(&Bytes) -> Option<i64>) {
    let mut offset = partition.log_start_offset();
    loop {
        let read = partition
            .read(ReadRequest {
                offset,
                max_bytes: REPLAY_READ_BYTES,
                leader_epoch: -1,
                zero_copy: false,
                whole_first_batch: true,
                replica: -1,
                read_committed: false,
                any_replica: false,
            })
            .await;
        let data = match read.records {
            Some(Chunk::Bytes(b)) if read.error_code == 0 && !b.is_empty() => b,
            _ => return,
        };
        match learn(&data) {
            Some(next) if next > offset => offset = next,
            _ => return,
        }
    }
}
