//! The leader's side of the in-sync set (Kafka's ISR, KIP-497): every pass, each partition this
//! shard leads says which set it should have (`Partition::wanted_isr`: members that have not
//! caught up within `replica_lag_time_max_ms` leave, replicas that reached the high watermark
//! join), and a differing one is asked of the controller. A shrink counts only once the
//! controller has committed it and this node installed it (`Partition::assign`); a member
//! asked to join holds the high watermark from the ask on (`Replicas::note_isr_request`).

use crate::controller::{self, ControllerOp, IsrChange};
use crate::partition::{Partition, TopicPartition};
use crate::shard::Shard;
use std::collections::HashMap;
use std::rc::Rc;

/// Bounds on the pass period (a quarter of the lag bound within them).
const MIN_PERIOD_MS: u64 = 50;
const MAX_PERIOD_MS: u64 = 250;
/// A change asked for and not yet seen installed is not asked again before this.
const RETRY_MS: u64 = 2_000;

pub async fn keep(shard: Rc<Shard>) {
    let lag_max_ms = shard.config.cluster.replica_lag_time_max_ms;
    let period_ms = (lag_max_ms / 4).clamp(MIN_PERIOD_MS, MAX_PERIOD_MS);
    // What was asked per partition, and when.
    let mut asked: HashMap<TopicPartition, (Vec<i32>, u64)> = HashMap::new();
    while !shard.is_shutting_down() {
        shard.housekeeping_sleep(period_ms).await;
        let now_ms = shard.clock().monotonic_ms();
        let node = shard.catalog().node_id;
        let partitions = shard.partition_list();
        publish(&shard, &partitions);
        for p in partitions {
            let Some(wanted) = p.wanted_isr(lag_max_ms) else {
                p.note_isr_request(None);
                asked.remove(&p.id());
                continue;
            };
            // Before the ask leaves: the controller may commit it at any moment.
            p.note_isr_request(Some(&wanted.isr));
            if asked
                .get(&p.id())
                .is_some_and(|(a, at)| *a == wanted.isr && now_ms < at + RETRY_MS)
            {
                continue;
            }
            asked.insert(p.id(), (wanted.isr.clone(), now_ms));
            let (current, _) = p.insync();
            let counter = if wanted.isr.len() < current {
                &shard.metrics().isr_shrinks
            } else {
                &shard.metrics().isr_expands
            };
            crate::metrics::bump(counter);
            let change = IsrChange {
                topic_id: p.id().topic_id,
                partition: p.id().partition,
                leader: node,
                leader_epoch: wanted.epoch,
                isr: wanted.isr,
                joining: wanted.joining,
            };
            let shard = shard.clone();
            let name = p.name().to_string();
            glommio::spawn_local(async move { ask(&shard, change, &name).await }).detach();
        }
    }
}

/// Asks the controller for one change; a refusal is logged (the next pass asks again if the
/// partition still wants it).
async fn ask(shard: &Rc<Shard>, change: IsrChange, name: &str) {
    let isr = change.isr.clone();
    // Err: the controller shard is stopping.
    if let Ok(outcomes) = controller::submit(shard, ControllerOp::AlterPartition(change)).await {
        match outcomes.first() {
            Some((0, _)) => log::info!("partition {name}: asked for in-sync set {isr:?}"),
            Some((code, msg)) => {
                log::warn!("partition {name}: in-sync set {isr:?} refused ({code}: {msg:?})")
            }
            None => {}
        }
    }
}

/// The shard's replication gauges: partitions led here with fewer in-sync replicas than
/// replicas, and how far the furthest follower of any of them trails (records, bytes, ms).
fn publish(shard: &Shard, partitions: &[Rc<Partition>]) {
    use std::sync::atomic::Ordering::Relaxed;
    let under = partitions.iter().filter(|p| p.under_replicated()).count();
    let (records, bytes, ms) = partitions
        .iter()
        .map(|p| p.follower_lag())
        .fold((0, 0, 0), |(r, b, m), (pr, pb, pm)| {
            (r.max(pr), b.max(pb), m.max(pm))
        });
    let m = shard.metrics();
    m.under_replicated_partitions.store(under as u64, Relaxed);
    m.follower_lag_records_max.store(records as u64, Relaxed);
    m.follower_lag_bytes_max.store(bytes, Relaxed);
    m.follower_lag_ms_max.store(ms, Relaxed);
}
