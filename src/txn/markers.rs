//! The markers that end a prepared transaction: one control batch per partition of the
//! transaction, written by the partition's leader. A partition this node leads is reached over
//! the mesh (`MarkersOnOwner` on its shard); one another node leads, with WriteTxnMarkers to
//! that node's Kafka listener (`remote.rs`), which runs the same `MarkersOnOwner` there. Each
//! marker is retried until it is committed or the transaction moved on (its coordinator lost
//! the id, or completed it); the transaction completes only once every marker is, and a
//! refused write of its completion is made again (`complete`).

use super::service::{persist, Txns};
use super::state::Markers;
use crate::partition::TopicPartition;
use crate::shard::mesh::{Peer, Request};
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::rc::Rc;

/// How long a marker's append waits for its commit.
const COMMIT_TIMEOUT_MS: u64 = 30_000;
/// How long a failed marker write waits before it is tried again.
const RETRY_MS: u64 = 100;
/// The longest wait before a failed completion is written again: the transaction's id answers
/// CONCURRENT_TRANSACTIONS meanwhile, so it must complete soon after a quorum is back.
const RETRY_MAX_MS: u64 = 1_000;

/// Writes `markers` to every partition of the transaction (retrying until each is committed or
/// the transaction moved on), then persists its completion. Runs in the background: the
/// client's EndTxn was answered once the Prepare state was durable.
pub fn spawn(txns: &Rc<Txns>, markers: Markers) {
    let txns = txns.clone();
    glommio::spawn_local(async move {
        let txns = &txns;
        let coordinator_epoch = super::service::coordinator_epoch(txns, &markers);
        // Every partition's marker at once: their fsyncs group, so a transaction over many
        // partitions completes in about one.
        let writes = markers
            .partitions
            .iter()
            .map(|(topic, index)| until_written(txns, &markers, topic, *index, coordinator_epoch));
        let written = futures::future::join_all(writes).await;
        if written.iter().any(|w| !w) {
            return; // the transaction moved on, or the shard stops: nothing to complete
        }
        complete(txns, &markers).await;
    })
    .detach();
}

/// Persists the completion of `markers`' transaction, whose markers are all written; a failed
/// write (too few in-sync replicas of `__transaction_state`, say) is tried again, backing off
/// up to `RETRY_MAX_MS`, for as long as `retries_completion` allows: until it succeeds, this
/// coordinator no longer holds the transaction, or the shard stops.
async fn complete(txns: &Rc<Txns>, markers: &Markers) {
    let shard = &txns.shard;
    let id = &markers.transactional_id;
    for failures in 1u32.. {
        let now_ms = shard.clock().wall_ms() as i64;
        let step = txns
            .coordinator
            .borrow_mut()
            .markers_written(markers, now_ms);
        let Some(step) = step else {
            return; // completed, or moved on
        };
        if persist(txns, id, step).await.is_ok() {
            if failures > 1 {
                log::info!("transactional id {id}: completion persisted after {failures} tries");
            }
            return;
        }
        if !txns.coordinator.borrow().retries_completion(markers) || shard.is_shutting_down() {
            return;
        }
        if failures == 1 || failures.is_multiple_of(50) {
            log::warn!("transactional id {id}: completion not persisted after {failures} tries; trying again");
        }
        let backoff_ms = (RETRY_MS << failures.min(4)).min(RETRY_MAX_MS);
        shard.housekeeping_sleep(backoff_ms).await;
    }
}

/// Writes one partition's marker, retrying until it is committed (true) or the transaction
/// moved on or the shard stops (false).
async fn until_written(
    txns: &Rc<Txns>,
    markers: &Markers,
    topic: &str,
    index: i32,
    coordinator_epoch: i32,
) -> bool {
    let shard = &txns.shard;
    let mut failures = 0u32;
    while let Err(e) = write(txns, markers, topic, index, coordinator_epoch).await {
        if !still_preparing(txns, markers) || shard.is_shutting_down() {
            return false;
        }
        failures += 1;
        // Said once it is more than a leader moving (which takes a few tries), then every
        // hundredth try: a partition that stays unwritable holds its transaction open.
        if failures == 20 || failures.is_multiple_of(100) {
            log::warn!(
                "transactional id {}: marker for {topic}-{index} not written after {failures} tries ({e:?})",
                markers.transactional_id
            );
        }
        shard.housekeeping_sleep(RETRY_MS).await;
    }
    true
}

fn still_preparing(txns: &Txns, m: &Markers) -> bool {
    let c = txns.coordinator.borrow();
    c.markers(&m.transactional_id).as_ref() == Some(m)
}

/// Writes the marker on the partition's leader: this node's owning shard, or another node.
async fn write(
    txns: &Rc<Txns>,
    m: &Markers,
    topic: &str,
    index: i32,
    coordinator_epoch: i32,
) -> Result<(), ResponseError> {
    let shard = &txns.shard;
    let catalog = shard.catalog();
    let Some(t) = catalog.topics.get(topic).filter(|t| t.has_partition(index)) else {
        return Ok(()); // deleted since it joined the transaction: nothing left to mark
    };
    let marker = Marker {
        tp: TopicPartition {
            topic_id: t.record.id,
            partition: index,
        },
        producer_id: m.producer_id,
        producer_epoch: m.producer_epoch,
        commit: m.commit,
        coordinator_epoch,
    };
    if !catalog.leads(t, index) {
        let leader = catalog.leader_of(t, index);
        return super::remote::write_marker(txns, leader, topic, &marker).await;
    }
    let owner = shard.owner(topic, index);
    let codes = txns
        .call(owner, MarkersOnOwner(vec![marker]))
        .await
        .map_err(|_| ResponseError::NotLeaderOrFollower)?;
    let code = codes.first().copied();
    super::remote::result_of(code.unwrap_or(ResponseError::UnknownServerError.code()))
}

/// One partition's marker: the end of (`producer_id`, `producer_epoch`)'s transaction there.
/// `coordinator_epoch` is the coordinator's leader epoch, as Kafka records it.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    pub tp: TopicPartition,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    pub coordinator_epoch: i32,
}

/// Writes markers on their partitions' shard, each waited for until committed; answers an
/// error code per marker, in order. An offsets partition then settles the producer's pending
/// transactional offset commits.
pub struct MarkersOnOwner(pub Vec<Marker>);

impl Request<Txns> for MarkersOnOwner {
    type Reply = Vec<i16>;
    fn run(self, txns: Rc<Txns>) -> LocalBoxFuture<'static, Self::Reply> {
        Box::pin(async move {
            let writes = self.0.iter().map(|m| write_here(&txns, m));
            let written = futures::future::join_all(writes).await;
            written
                .into_iter()
                .map(|w| w.err().map_or(0, |e| e.code()))
                .collect()
        })
    }
}

async fn write_here(txns: &Rc<Txns>, m: &Marker) -> Result<(), ResponseError> {
    let shard = &txns.shard;
    let p = shard
        .partition(m.tp)
        .ok_or(ResponseError::NotLeaderOrFollower)?;
    let appended = p
        .append_marker(
            m.producer_id,
            m.producer_epoch,
            m.commit,
            m.coordinator_epoch,
        )
        .await?;
    let deadline_ms = shard.clock().monotonic_ms() + COMMIT_TIMEOUT_MS;
    shard
        .wait_committed(&p, appended.end_offset, deadline_ms)
        .await?;
    let offsets = shard
        .catalog()
        .topics
        .get(crate::group::OFFSETS_TOPIC)
        .cloned();
    if offsets.is_some_and(|t| t.record.id == m.tp.topic_id) {
        crate::group::settle_txn(&txns.groups, m.tp.partition, m.producer_id, m.commit);
    }
    Ok(())
}
