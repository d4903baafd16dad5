//! A partition's part in replication: the role the controller's assignment gives it, the
//! follower positions a leader learns from fetches, a follower's appends of its leader's
//! batches, and the truncation of a divergent tail (see `commit.rs` for the rule these feed).

use super::commit::IsrRequest;
use super::env::Environment;
use super::fifo_lock::FifoLock;
use super::replica_state::{Assigned, FollowerView, ReplicaLog, ReplicaRefusal, ReplicaState};
use super::retention::Retention;
use super::watchers::Watchers;
use crate::protocol::batch;
use crate::storage::catalog::{BrokerRecord, PartitionAssignment};
use crate::storage::epochs::LeaderEpochs;
use crate::storage::log::PartitionLog;
use kafka_protocol::ResponseError;
use std::cell::RefCell;
use std::future::Future;

/// The parts of a partition that replication works on (`Partition::replication`): its
/// replica state and the log and waiters the replication rules move.
pub struct Replication<'a> {
    name: &'a str,
    log: &'a RefCell<PartitionLog>,
    append_lock: &'a FifoLock,
    watchers: &'a Watchers,
    replica: &'a ReplicaState,
    env: &'a Environment,
}

impl<'a> Replication<'a> {
    pub fn new(
        (name, log): (&'a str, &'a RefCell<PartitionLog>),
        append_lock: &'a FifoLock,
        watchers: &'a Watchers,
        replica: &'a ReplicaState,
        env: &'a Environment,
    ) -> Replication<'a> {
        Replication {
            name,
            log,
            append_lock,
            watchers,
            replica,
            env,
        }
    }

    fn is_failed(&self) -> bool {
        self.log.borrow().failed
    }

    /// Applies the controller's assignment of this partition (a cluster): the leader epoch,
    /// the replicas, the in-sync set and this node's role. A stale assignment (an older epoch)
    /// is ignored. Becoming leader starts a new epoch in the epoch cache at the log end;
    /// becoming a follower marks the log for truncation and wakes every waiter, so that
    /// acks=all producers learn that this node no longer leads.
    /// `brokers` are the catalog's registrations, whose reports the leader counts. Returns
    /// what the assignment meant here.
    pub fn assign(
        &self,
        local: i32,
        assignment: (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
    ) -> Assigned {
        let a = assignment.0;
        let assigned = self.replica.assign(
            local,
            assignment,
            brokers,
            now_ms,
            &mut *self.log.borrow_mut(),
        );
        let assigned = assigned.unwrap_or_else(|e| {
            self.env
                .storage_error(self.name, "saving the leader epoch cache", &e);
            super::take_offline(self.log, self.watchers);
            Assigned::Leads // the leadership began; the partition is offline now
        });
        if assigned == Assigned::Stale {
            return assigned;
        }
        self.log.borrow_mut().leader_epoch = a.leader_epoch;
        match assigned {
            Assigned::Leads => crate::metrics::bump(&self.env.metrics.leader_elections),
            Assigned::Follows => self.watchers.wake_on_demotion(),
            Assigned::Kept | Assigned::Stale => {}
        }
        if assigned != Assigned::Kept {
            log::info!(
                "partition {}: {} at leader epoch {} (replicas {:?}, in sync {:?})",
                self.name,
                if assigned == Assigned::Leads {
                    "leader"
                } else {
                    "follower"
                },
                a.leader_epoch,
                a.replicas,
                a.isr
            );
        }
        self.advance_commit();
        assigned
    }

    /// The in-sync follower among `candidates` (the nodes of a consumer's rack) that this
    /// leader sends a consumer fetching at `fetch_offset` to, if any (KIP-392; see
    /// `Replicas::preferred_read_replica`).
    pub fn preferred_read_replica(&self, candidates: &[i32], fetch_offset: i64) -> Option<i32> {
        if fetch_offset < self.log.borrow().log_start_offset {
            return None; // out of range: the leader answers that itself
        }
        let now_ms = self.env.clock.monotonic_ms();
        self.replica
            .replicas()
            .preferred_read_replica(candidates, fetch_offset, now_ms)
    }

    /// The in-sync replicas' count, and the topic's `min.insync.replicas`.
    pub fn insync(&self) -> (usize, usize) {
        self.replica.insync()
    }

    /// An acks=all append needs at least `min.insync.replicas` in sync (Kafka's rule; other
    /// acks do not wait for replicas): NOT_ENOUGH_REPLICAS otherwise. Leadership is checked
    /// first, as Kafka does: a follower answers NOT_LEADER_OR_FOLLOWER, whatever its view of
    /// the in-sync set (NOT_ENOUGH_REPLICAS would keep the producer at the wrong node).
    pub fn check_insync(&self, acks: i16) -> Result<(), ResponseError> {
        if !self.replica.is_leader() {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        self.replica.check_insync(acks)
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
        let now_ms = self.env.clock.monotonic_ms();
        let moved =
            self.replica
                .note_replica_fetch(&mut *self.log.borrow_mut(), (node, offset), now_ms);
        self.committed(moved?);
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
        self.replica.isr_request_due(
            &*self.log.borrow(),
            (now_ms, lag_max_ms),
            (last_sent_ms, retry_ms),
        )
    }

    /// The controller refused `request` for good: its joiners stop holding the high watermark.
    pub fn isr_refused(&self, request: &IsrRequest) {
        let moved = self
            .replica
            .isr_refused(&mut *self.log.borrow_mut(), request);
        self.committed(moved);
    }

    /// Moves the high watermark as far as the commit rule allows now.
    pub fn advance_commit(&self) {
        let moved = self.replica.advance_commit(&mut *self.log.borrow_mut());
        self.committed(moved);
    }

    /// Wakes what waits on the high watermark when it `moved` (to that offset).
    fn committed(&self, moved: Option<i64>) {
        super::wake_committed(self.log, self.watchers, moved);
    }

    // ---- follower side ---------------------------------------------------------------------

    /// What the fetcher needs; None when this node leads the partition or it failed.
    pub fn follower_view(&self) -> Option<FollowerView> {
        if self.is_failed() {
            return None;
        }
        self.replica.follower_view(&*self.log.borrow())
    }

    /// Where `epoch` ends in this log (OffsetForLeaderEpoch; `LeaderEpochs::answer_for`).
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let log = self.log.borrow();
        let span = (log.log_start_offset, log.log_end_offset());
        log.epochs.answer_for(epoch, log.leader_epoch, span)
    }

    /// Where this follower cuts its log, given its leader's OffsetsForLeaderEpoch answer
    /// (epoch found, its end) for its newest epoch, and whether that settles it
    /// (`LeaderEpochs::cut_point`).
    pub fn cut_point(&self, answer: (i32, i64)) -> (i64, bool) {
        self.replica.cut_point(&*self.log.borrow(), answer)
    }

    /// The leader's high watermark, from a fetch response: this follower commits up to it as
    /// far as it has synced.
    pub fn learn_leader_high_watermark(&self, leader_hw: i64) {
        let moved = self
            .replica
            .learn_leader_high_watermark(&mut *self.log.borrow_mut(), leader_hw);
        self.committed(moved);
    }

    /// The leader's log start, from a fetch response: what DeleteRecords and retention removed
    /// on the leader goes here too, as far as this follower has committed.
    pub async fn learn_leader_log_start(&self, leader_log_start: i64) {
        let (high_watermark, log_start) = {
            let log = self.log.borrow();
            (log.high_watermark(), log.log_start_offset)
        };
        let target = leader_log_start.min(high_watermark);
        if target <= log_start || self.replica.is_leader() {
            return;
        }
        let retention = Retention::new(self.name, self.log, self.append_lock, self.env);
        if let Err(e) = retention.delete_records(target, true).await {
            log::warn!(
                "replica of {}: log start {target} not taken: {e:?}",
                self.name
            );
        }
    }

    /// Cuts the log at `offset` (where `cut_point` put the leader's answer to
    /// OffsetsForLeaderEpoch), under the append lock, then `ReplicaState::truncated`: unless
    /// `complete` the follower asks its leader again with its newest epoch after the cut
    /// (multi-step KIP-279 truncation), else the fetcher fetches from the log end.
    pub async fn truncate_diverged(
        &self,
        offset: i64,
        complete: bool,
    ) -> Result<(), ResponseError> {
        let _turn = self.append_lock.lock().await;
        let end = self.log.borrow().log_end_offset();
        if offset < end {
            log::warn!(
                "partition {}: truncating the divergent tail {offset}..{end}",
                self.name
            );
            self.rewrite_fenced("truncate", |now_ms| {
                PartitionLog::truncate_to(self.log, offset, now_ms)
            })
            .await?;
        }
        let truncated = self
            .replica
            .truncated(&mut *self.log.borrow_mut(), complete);
        if let Err(e) = truncated {
            log::error!("partition {}: saving the epoch cache: {e}", self.name);
        }
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
        let (start, end) = {
            let log = self.log.borrow();
            (log.log_start_offset, log.log_end_offset())
        };
        if self.replica.is_leader() || (end >= offset && start != end) {
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
            PartitionLog::restart_at(self.log, offset, now_ms)
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
            self.env.storage_error(self.name, what, &e);
            super::take_offline(self.log, self.watchers);
            return Err(ResponseError::KafkaStorageError);
        }
        Ok(())
    }

    /// `ReplicaState::take_replica_batches`: this node follows and the batches continue its
    /// log; the epochs they begin are in the saved cache.
    pub(super) fn take_replica_batches(
        &self,
        headers: &[batch::BatchHeader],
    ) -> Result<(), ResponseError> {
        let taken = self
            .replica
            .take_replica_batches(&mut *self.log.borrow_mut(), headers);
        match taken {
            Ok(()) => Ok(()),
            Err(ReplicaRefusal::Leads) => Err(ResponseError::NotLeaderOrFollower),
            Err(ReplicaRefusal::Gap { due, found }) => {
                log::warn!(
                    "replica of {}: batch at {found} where {due} was due",
                    self.name
                );
                Err(ResponseError::OffsetOutOfRange)
            }
            Err(ReplicaRefusal::Storage(e)) => {
                self.env
                    .storage_error(self.name, "saving the leader epoch cache", &e);
                Err(ResponseError::KafkaStorageError)
            }
        }
    }
}

/// The production log under the replication rules (`replica_state.rs`).
impl ReplicaLog for PartitionLog {
    fn log_end(&self) -> i64 {
        self.log_end_offset()
    }

    fn written_end(&self) -> i64 {
        self.written().offset
    }

    fn synced_end(&self) -> i64 {
        self.synced().offset
    }

    fn high_watermark(&self) -> i64 {
        PartitionLog::high_watermark(self)
    }

    fn commit_up_to(&mut self, offset: i64) -> Option<i64> {
        PartitionLog::commit_up_to(self, offset)
    }

    fn epochs(&self) -> &LeaderEpochs {
        &self.epochs
    }

    fn change_epochs(
        &mut self,
        change: impl FnOnce(&mut LeaderEpochs) -> bool,
    ) -> std::io::Result<()> {
        if change(&mut self.epochs) {
            self.epochs.save(&*self.volume().disk(), &self.dir)?;
        }
        Ok(())
    }
}
