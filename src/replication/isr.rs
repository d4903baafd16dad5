//! The leader's side of the in-sync set (Kafka's ISR, KIP-497): every pass, each partition this
//! shard leads says which change it should ask of the controller (`Replication::isr_request_due`:
//! members that have not caught up within `replica_lag_time_max_ms` leave, replicas that
//! reached the high watermark join; one ask outstanding at a time, sent again after
//! `RETRY_MS` while no answer settles it). A shrink counts only once the controller has
//! committed it and this node installed it (`Replication::assign`); a member asked to join holds
//! the high watermark from the ask on, until the leader installs another set or the controller
//! refuses the ask for good (`partition/commit.rs`).

use crate::controller::{self, ControllerOp, Controllers, IsrChange};
use crate::partition::commit::IsrRequest;
use crate::partition::{Partition, TopicPartition};
use crate::shard::Shard;
use kafka_protocol::ResponseError;
use std::collections::HashMap;
use std::rc::Rc;

/// Bounds on the pass period (a quarter of the lag bound within them).
const MIN_PERIOD_MS: u64 = 50;
const MAX_PERIOD_MS: u64 = 250;
/// An outstanding ask not yet settled is sent again after this (its answer may be lost).
pub const RETRY_MS: u64 = 2_000;

pub async fn keep(controllers: Rc<Controllers>) {
    let shard = &controllers.shard;
    let lag_max_ms = shard.config.cluster.replica_lag_time_max_ms;
    let period_ms = (lag_max_ms / 4).clamp(MIN_PERIOD_MS, MAX_PERIOD_MS);
    // When each partition's ask was last sent.
    let mut sent_ms: HashMap<TopicPartition, u64> = HashMap::new();
    while !shard.is_shutting_down() {
        shard.housekeeping_sleep(period_ms).await;
        let now_ms = shard.clock().monotonic_ms();
        let node = shard.catalog().here.node_id;
        let partitions = shard.partition_list();
        publish(shard, &partitions);
        sent_ms.retain(|tp, _| partitions.iter().any(|p| p.id() == *tp));
        for p in partitions {
            let last = sent_ms.get(&p.id()).copied();
            let Some(request) = p.replication().isr_request_due(lag_max_ms, last, RETRY_MS) else {
                continue;
            };
            sent_ms.insert(p.id(), now_ms);
            let (current, _) = p.replication().insync();
            let counter = if request.isr.len() < current {
                &shard.metrics().isr_shrinks
            } else {
                &shard.metrics().isr_expands
            };
            crate::metrics::bump(counter);
            let controllers = controllers.clone();
            glommio::spawn_local(async move { ask(&controllers, &p, node, request).await })
                .detach();
        }
    }
}

/// Asks the controller for one change. A refusal for good (an invalid set, an ineligible
/// joiner) ends the ask; any other answer leaves it to the set this node installs next.
async fn ask(controllers: &Rc<Controllers>, p: &Partition, node: i32, request: IsrRequest) {
    let change = IsrChange::new(p.id().topic_id, p.id().partition, node, request.clone());
    let op = ControllerOp::alter_partition(change, request.partition_epoch);
    let name = p.name();
    let isr = &request.isr;
    // Err: the controller shard is stopping.
    if let Ok(outcomes) = controller::submit(controllers, op).await {
        match outcomes.first() {
            Some((0, _)) => log::info!("partition {name}: asked for in-sync set {isr:?}"),
            Some((code, msg)) => {
                log::warn!("partition {name}: in-sync set {isr:?} refused ({code}: {msg:?})");
                if refused_for_good(*code) {
                    p.replication().isr_refused(&request);
                }
            }
            None => {}
        }
    }
}

/// Whether an AlterPartition refusal settles the ask: the set is invalid, or a joiner is not
/// eligible under the registration it was asked with, whatever happens next. (A stale epoch
/// or in-sync set leaves it to the set the leader installs.)
pub fn refused_for_good(code: i16) -> bool {
    code == ResponseError::InvalidRequest.code() || code == ResponseError::IneligibleReplica.code()
}

/// The shard's replication gauges: partitions led here with fewer in-sync replicas than
/// replicas, and how far the furthest follower of any of them trails (records, bytes, ms).
fn publish(shard: &Shard, partitions: &[Rc<Partition>]) {
    use std::sync::atomic::Ordering::Relaxed;
    let under = partitions
        .iter()
        .filter(|p| p.replication().under_replicated())
        .count();
    let (records, bytes, ms) = partitions
        .iter()
        .map(|p| p.replication().follower_lag())
        .fold((0, 0, 0), |(r, b, m), (pr, pb, pm)| {
            (r.max(pr), b.max(pb), m.max(pm))
        });
    let m = shard.metrics();
    m.under_replicated_partitions.store(under as u64, Relaxed);
    m.follower_lag_records_max.store(records as u64, Relaxed);
    m.follower_lag_bytes_max.store(bytes, Relaxed);
    m.follower_lag_ms_max.store(ms, Relaxed);
}
