//! A partition's part in replication: the role the controller's assignment gives it, the
//! follower positions a leader learns from fetches, a follower's appends of its leader's
//! batches, and the truncation of a divergent tail (see `commit.rs` for the rule these feed).

use super::commit::{IsrRequest, Role};
use super::{Partition, Watch};
use crate::protocol::batch;
use crate::storage::catalog::{registrations, BrokerRecord, PartitionAssignment};
use crate::storage::log::PartitionLog;
use bytes::Bytes;
use kafka_protocol::ResponseError;
use std::future::Future;
use std::rc::Rc;

/// What a follower's fetcher needs to fetch a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerView {
    pub leader: i32,
    pub epoch: i32,
    /// The log end: the next offset to fetch, and (after its sync) what this node reports.
    pub log_end_offset: i64,
    /// The newest epoch the log holds (-1: none), for OffsetsForLeaderEpoch.
    pub latest_epoch: i32,
    pub needs_truncation: bool,
}

impl Partition {
    /// Applies the controller's assignment of this partition (a cluster): the leader epoch,
    /// the replicas, the in-sync set and this node's role. A stale assignment (an older epoch)
    /// is ignored. Becoming leader starts a new epoch in the epoch cache at the log end;
    /// becoming a follower marks the log for truncation and wakes every waiter, so that
    /// acks=all producers learn that this node no longer leads.
    /// `brokers` are the catalog's registrations, whose reports the leader counts.
    pub fn assign(
        &self,
        local: i32,
        (a, partition_epoch): (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
    ) {
        let lead = a.leader == local;
        let hw = self.high_watermark();
        let Some(changed) = self.replica.replicas_mut().assign(local, a, now_ms, hw) else {
            return;
        };
        let mut replicas = self.replica.replicas_mut();
        replicas.note_partition_epoch(partition_epoch);
        replicas.note_registrations(registrations(brokers, &a.replicas));
        drop(replicas);
        self.log.borrow_mut().leader_epoch = a.leader_epoch;
        if changed && lead {
            crate::metrics::bump(&self.env.metrics.leader_elections);
            self.begin_epoch(a.leader_epoch);
        } else if changed {
            self.replica.set_needs_truncation(true);
            self.watchers.wake_on_demotion();
        }
        if changed {
            log::info!(
                "partition {}: {} at leader epoch {} (replicas {:?}, in sync {:?})",
                self.name,
                if lead { "leader" } else { "follower" },
                a.leader_epoch,
                a.replicas,
                a.isr
            );
        }
        self.advance_commit();
    }

    /// Notes in the epoch cache that `epoch` begins at the log end (this node now leads).
    fn begin_epoch(&self, epoch: i32) {
        let mut log = self.log.borrow_mut();
        let end = log.log_end_offset();
        self.replica.begin_leading(end);
        if log.epochs.assign(epoch, end) {
            if let Err(e) = log.epochs.save(&log.dir) {
                drop(log);
                self.env
                    .storage_error(&self.name, "saving the leader epoch cache", &e);
                self.retire();
            }
        }
    }

    pub fn is_leader(&self) -> bool {
        self.replica.is_leader()
    }

    /// Whether this node is a follower of the partition (a replica that does not lead).
    pub fn is_follower(&self) -> bool {
        self.replica.is_follower()
    }

    /// The in-sync follower among `candidates` (the nodes of a consumer's rack) that this
    /// leader sends a consumer fetching at `fetch_offset` to, if any (KIP-392; see
    /// `Replicas::preferred_read_replica`).
    pub fn preferred_read_replica(&self, candidates: &[i32], fetch_offset: i64) -> Option<i32> {
        if fetch_offset < self.log_start_offset() {
            return None; // out of range: the leader answers that itself
        }
        let now_ms = self.env.clock.monotonic_ms();
        self.replica
            .replicas()
            .preferred_read_replica(candidates, fetch_offset, now_ms)
    }

    /// While this node leads: which time it became leader (see `leader_generation`), and the
    /// offset its epoch began at (everything below was written by earlier leaders and is
    /// committed once the high watermark reaches it).
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.replica.leadership().filter(|_| !self.is_failed())
    }

    /// The in-sync replicas' count, and the topic's `min.insync.replicas`.
    pub fn insync(&self) -> (usize, usize) {
        self.replica.insync()
    }

    /// An acks=all append needs at least `min.insync.replicas` in sync (Kafka's rule; other
    /// acks do not wait for replicas): NOT_ENOUGH_REPLICAS otherwise.
    pub fn check_insync(&self, acks: i16) -> Result<(), ResponseError> {
        let (isr, min) = self.insync();
        if acks == -1 && isr < min {
            return Err(ResponseError::NotEnoughReplicas);
        }
        Ok(())
    }

    /// Whether this node leads the partition with fewer in-sync replicas than replicas.
    pub fn under_replicated(&self) -> bool {
        let r = self.replica.replicas();
        r.is_leader() && r.isr.len() < r.replicas.len()
    }

    /// A follower's fetch at `offset` reached this leader: notes its position and moves the
    /// high watermark if that commits more. Err when this node does not lead the partition
    /// for that replica, or the offset is past what this leader has.
    pub(super) fn note_replica_fetch(&self, node: i32, offset: i64) -> Result<(), ResponseError> {
        let end = self.log.borrow().written().offset;
        if offset > end {
            return Err(ResponseError::OffsetOutOfRange);
        }
        let now_ms = self.env.clock.monotonic_ms();
        if !self
            .replica
            .replicas_mut()
            .note_fetch(node, offset, end, now_ms)
        {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        self.advance_commit();
        Ok(())
    }

    /// How far this leader's furthest follower trails it: (records, bytes, ms since it last
    /// caught up); zeros on a follower.
    pub fn follower_lag(&self) -> (i64, u64, u64) {
        let log = self.log.borrow();
        let end = log.written().offset;
        let now_ms = self.env.clock.monotonic_ms();
        let (lowest, ms) = self.replica.replicas().follower_lag(end, now_ms);
        let bytes = if lowest < end {
            log.bytes_after(lowest).saturating_sub(log.bytes_after(end))
        } else {
            0
        };
        (end - lowest, bytes, ms)
    }

    /// The in-sync set change this leader should ask the controller for now, if any
    /// (`Replicas::isr_request_due`: the outstanding one again after `retry_ms`).
    pub fn isr_request_due(
        &self,
        lag_max_ms: u64,
        last_sent_ms: Option<u64>,
        retry_ms: u64,
    ) -> Option<IsrRequest> {
        let now_ms = self.env.clock.monotonic_ms();
        let positions = (self.high_watermark(), self.replica.epoch_start());
        self.replica.replicas_mut().isr_request_due(
            now_ms,
            lag_max_ms,
            positions,
            (last_sent_ms, retry_ms),
        )
    }

    /// The controller refused `request` for good: its joiners stop holding the high watermark.
    pub fn isr_refused(&self, request: &IsrRequest) {
        self.replica.replicas_mut().isr_refused(request);
        self.advance_commit();
    }

    /// Moves the high watermark as far as the commit rule allows now.
    pub(super) fn advance_commit(&self) {
        let high_watermark = {
            let mut log = self.log.borrow_mut();
            let committed = self.replica.replicas().committed(log.synced().offset);
            if committed <= log.high_watermark() {
                return;
            }
            let Some(to) = log.committable_at(committed) else {
                return;
            };
            if to.offset <= log.high_watermark() {
                return;
            }
            log.advance_high_watermark(to);
            to.offset
        };
        self.watchers.advance(Watch::Committed, high_watermark);
        self.advance_stable();
    }

    // ---- follower side ---------------------------------------------------------------------

    /// What the fetcher needs; None when this node leads the partition or it failed.
    pub fn follower_view(&self) -> Option<FollowerView> {
        if self.is_failed() {
            return None;
        }
        let r = self.replica.replicas();
        let Role::Follower { leader, .. } = r.role else {
            return None;
        };
        let log = self.log.borrow();
        Some(FollowerView {
            leader,
            epoch: r.epoch,
            log_end_offset: log.log_end_offset(),
            latest_epoch: log.epochs.latest().unwrap_or(-1),
            needs_truncation: self.replica.needs_truncation(),
        })
    }

    /// Where `epoch` ends in this log (OffsetForLeaderEpoch; see `epochs.rs`). A log without
    /// an epoch cache (a single node's, whose one epoch never changes) holds only its current
    /// epoch, from its start; an epoch past the current one is UNDEFINED.
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        // An epoch past this partition's current one has no end here (Kafka answers it
        // UNDEFINED too). A follower never asks for one: its epochs come from its leaders.
        if epoch > self.leader_epoch() {
            return crate::storage::epochs::UNDEFINED;
        }
        let log = self.log.borrow();
        if log.epochs.latest().is_none() {
            let mut only = crate::storage::epochs::LeaderEpochs::default();
            only.assign(log.leader_epoch, log.log_start_offset);
            return only.end_offset_for(epoch, log.log_end_offset());
        }
        log.epochs.end_offset_for(epoch, log.log_end_offset())
    }

    /// Where this follower cuts its log, given its leader's OffsetsForLeaderEpoch answer
    /// (epoch found, its end) for its newest epoch, and whether that settles it
    /// (`LeaderEpochs::cut_point`).
    pub fn cut_point(&self, answer: (i32, i64)) -> (i64, bool) {
        let high_watermark = self.high_watermark();
        let log = self.log.borrow();
        log.epochs
            .cut_point(log.log_end_offset(), high_watermark, answer)
    }

    /// The leader's high watermark, from a fetch response: this follower commits up to it as
    /// far as it has synced.
    pub fn learn_leader_high_watermark(&self, leader_hw: i64) {
        if let Role::Follower { leader_hw: hw, .. } = &mut self.replica.replicas_mut().role {
            *hw = (*hw).max(leader_hw);
        }
        self.advance_commit();
    }

    /// The leader's log start, from a fetch response: what DeleteRecords and retention removed
    /// on the leader goes here too, as far as this follower has committed.
    pub async fn learn_leader_log_start(&self, leader_log_start: i64) {
        let target = leader_log_start.min(self.high_watermark());
        if target <= self.log_start_offset() || self.is_leader() {
            return;
        }
        if let Err(e) = self.delete_records(target, true).await {
            log::warn!(
                "replica of {}: log start {target} not taken: {e:?}",
                self.name
            );
        }
    }

    /// Cuts the log at `offset` (the leader's answer to OffsetsForLeaderEpoch), under the
    /// append lock; then the fetcher may fetch from the log end.
    /// Cuts the log at `offset`; unless `complete`, the follower asks its leader again with
    /// its newest epoch after the cut (multi-step KIP-279 truncation).
    pub async fn truncate_diverged(
        &self,
        offset: i64,
        complete: bool,
    ) -> Result<(), ResponseError> {
        let _turn = self.append_lock.lock().await;
        let end = self.log_end_offset();
        if offset == end {
            // Epochs this node began as leader without appending hold no records.
            let mut log = self.log.borrow_mut();
            if log.epochs.truncate_from(end) {
                if let Err(e) = log.epochs.save(&log.dir) {
                    log::error!("partition {}: saving the epoch cache: {e}", self.name);
                }
            }
        }
        if offset < end {
            log::warn!(
                "partition {}: truncating the divergent tail {offset}..{end}",
                self.name
            );
            self.rewrite_fenced("truncate", |now_ms| {
                PartitionLog::truncate_to(&self.log, offset, now_ms)
            })
            .await?;
        }
        self.replica.set_needs_truncation(!complete);
        Ok(())
    }

    /// Replaces this follower's log with an empty one starting at `offset` when all it holds
    /// lies below that (its leader's log start: retention or DeleteRecords removed the records
    /// that would continue it, as for a new replica of an old topic or a wiped disk; Kafka's
    /// `truncateFullyAndStartAt`), or when it is empty and the leader's first batch begins
    /// before it. Under the append lock, after fencing the journal (which must not replay old
    /// records into the new log); then the fetcher fetches from `offset`.
    pub async fn restart_log_at(&self, offset: i64) -> Result<(), ResponseError> {
        let _turn = self.append_lock.lock().await;
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if self.is_leader() || (end >= offset && start != end) {
            return Ok(()); // it leads now, or it holds records at `offset` after all
        }
        match end < offset {
            true => log::warn!(
                "replica of {}: its log [{start}, {end}) lies below the leader's log start \
                 {offset}: starting over there",
                self.name
            ),
            false => log::info!(
                "replica of {}: the leader's batch holding {end} begins at {offset}: \
                 starting there",
                self.name
            ),
        }
        self.rewrite_fenced("restart at the leader's log start", |now_ms| {
            PartitionLog::restart_at(&self.log, offset, now_ms)
        })
        .await?;
        self.replica.set_needs_truncation(false);
        Ok(())
    }

    /// Rewrites the log (`rewrite`, given the wall clock) with the journal fenced, which must
    /// not replay what the rewrite removes over what is appended next; a failed rewrite
    /// retires the partition (KAFKA_STORAGE_ERROR). The caller holds the append lock.
    async fn rewrite_fenced<F>(
        &self,
        what: &str,
        rewrite: impl FnOnce(u64) -> F,
    ) -> Result<(), ResponseError>
    where
        F: Future<Output = std::io::Result<()>>,
    {
        let done = match self.env.fence_journal().await {
            Ok(_journal) => rewrite(self.env.clock.wall_ms()).await,
            Err(e) => Err(e),
        };
        if let Err(e) = done {
            self.env.storage_error(&self.name, what, &e);
            self.retire();
            return Err(ResponseError::KafkaStorageError);
        }
        Ok(())
    }

    /// Appends batches fetched from the leader as they are (offsets, epochs, CRCs kept), and
    /// queues them for the flusher. Returns the new log end. The batches must be whole, valid,
    /// dense and begin at the log end.
    pub fn append_replica(
        self: &Rc<Self>,
        records: Bytes,
    ) -> impl Future<Output = Result<i64, ResponseError>> + 'static {
        let turn = self.append_lock.lock();
        let this = self.clone();
        async move {
            let headers = batch::validate_all(&records).map_err(|e| {
                log::warn!("replica of {}: bad batch from the leader: {e:?}", this.name);
                ResponseError::CorruptMessage
            })?;
            let _turn = turn.await;
            if this.is_failed() {
                return Err(ResponseError::KafkaStorageError);
            }
            if this.is_leader() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            this.check_dense(&headers)?;
            this.note_epochs(&headers)?;
            this.write_replica(records, &headers).await
        }
    }

    /// Replicated batches must continue the log exactly.
    fn check_dense(&self, headers: &[batch::BatchHeader]) -> Result<(), ResponseError> {
        let mut next = self.log_end_offset();
        for h in headers {
            if h.base_offset != next || h.last_offset_delta < 0 {
                log::warn!(
                    "replica of {}: batch at {} where {next} was due",
                    self.name,
                    h.base_offset
                );
                return Err(ResponseError::OffsetOutOfRange);
            }
            next = h.next_offset();
        }
        Ok(())
    }

    /// Notes the epochs the batches begin (the cache is saved before the batches are written).
    fn note_epochs(&self, headers: &[batch::BatchHeader]) -> Result<(), ResponseError> {
        let mut log = self.log.borrow_mut();
        let mut changed = false;
        for h in headers {
            changed |= log.epochs.assign(h.partition_leader_epoch, h.base_offset);
        }
        if changed {
            if let Err(e) = log.epochs.save(&log.dir) {
                drop(log);
                self.env
                    .storage_error(&self.name, "saving the leader epoch cache", &e);
                return Err(ResponseError::KafkaStorageError);
            }
        }
        Ok(())
    }

    async fn write_replica(
        self: &Rc<Self>,
        records: Bytes,
        headers: &[batch::BatchHeader],
    ) -> Result<i64, ResponseError> {
        let now_ms = self.env.clock.wall_ms();
        let offsets = headers.last().expect("validated").next_offset() - self.log_end_offset();
        self.roll_if_needed(records.len() as u64, offsets, now_ms)
            .await?;
        let plan = self
            .log
            .borrow_mut()
            .prepare_replica_append(&records, headers, now_ms);
        let end = plan.end_offset;
        if let Err(e) = PartitionLog::write(&self.log, plan).await {
            self.env.storage_error(&self.name, "write", &e);
            return Err(ResponseError::KafkaStorageError);
        }
        self.queue_for_sync();
        self.watchers.advance(Watch::Written, end);
        crate::metrics::add(&self.env.metrics.replicated_bytes, records.len() as u64);
        Ok(end)
    }
}
