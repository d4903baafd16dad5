//! What a partition knows of its replicas besides its log: the replicas and its role with the
//! commit rule over them (`commit.rs`), whether a follower must cut a divergent tail first,
//! which leadership this node holds and where its epoch began, the topic's
//! `min.insync.replicas`, and the high watermark last checkpointed.
//!
//! The replication rules that move this state and the log's positions together live here too,
//! written against `ReplicaLog` (the log's ends, its high watermark and its epoch cache) and
//! doing no I/O beyond the epoch cache's save: taking an assignment, moving the high watermark,
//! a leader noting a follower's fetch, a follower taking its leader's batches and high
//! watermark, cutting a divergent tail. `Partition` runs them over its `PartitionLog`, and so
//! does the simulator (`sim/replica.rs`, over a simulated disk), so the simulator's seeds test
//! these very functions, not a copy; the trait lets this module's unit tests run them over a
//! list of batch ends.
//!
//! Invariant: the leader generation only grows, and moves exactly when this node starts a new
//! leadership; `epoch_start` is the log end at that moment.

use super::commit::{IsrRequest, Replicas, Role};
use crate::protocol::batch::BatchHeader;
use crate::storage::catalog::{registrations, BrokerRecord, PartitionAssignment};
use crate::storage::epochs::LeaderEpochs;
use kafka_protocol::ResponseError;
use std::cell::{Cell, Ref, RefCell, RefMut};

/// A partition's log as the replication rules see it: its ends, its high watermark and its
/// leader epoch cache. Nothing here waits: writes, syncs and truncations are the caller's.
pub trait ReplicaLog {
    /// The next offset to assign.
    fn log_end(&self) -> i64;
    /// The end of the bytes whose write completed (the log end where writes complete at once).
    fn written_end(&self) -> i64 {
        self.log_end()
    }
    /// The end of what a completed fdatasync covers on this node.
    fn synced_end(&self) -> i64;
    fn high_watermark(&self) -> i64;
    /// Moves the high watermark to the furthest batch end at or below `offset` (and the synced
    /// end) when that lies above it; the new high watermark when it moved.
    fn commit_up_to(&mut self, offset: i64) -> Option<i64>;
    fn epochs(&self) -> &LeaderEpochs;
    /// Applies `change` to the epoch cache and, when it changed anything, saves the cache (before
    /// any batch it describes is written, as Kafka's `leader-epoch-checkpoint`).
    fn change_epochs(
        &mut self,
        change: impl FnOnce(&mut LeaderEpochs) -> bool,
    ) -> std::io::Result<()>;
}

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

/// What an assignment from the controller meant to this node (`ReplicaState::assign`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Assigned {
    /// An older leader epoch than the one held: ignored.
    Stale,
    /// The same role in the same epoch (the replicas or the in-sync set may have changed).
    Kept,
    /// This node leads now: a new leadership began at the log end.
    Leads,
    /// This node follows now: it checks its tail against its leader's before it fetches.
    Follows,
}

/// Why a follower refuses batches fetched from its leader (`ReplicaState::take_replica_batches`).
#[derive(Debug)]
pub enum ReplicaRefusal {
    /// This node leads the partition now.
    Leads,
    /// A batch does not begin where the log (or the batch before it) ends.
    Gap { due: i64, found: i64 },
    /// The epoch cache could not be saved.
    Storage(std::io::Error),
}

#[derive(Debug)]
pub struct ReplicaState {
    /// The replicas, this node's role, and the commit rule over them.
    replicas: RefCell<Replicas>,
    /// Set when this node starts following a new leader epoch: the fetcher cuts the log's
    /// divergent tail (OffsetsForLeaderEpoch) before it fetches.
    needs_truncation: Cell<bool>,
    /// Where this node's current leader epoch began in the log (a leader's view).
    epoch_start: Cell<i64>,
    /// Bumped each time this node becomes the partition's leader, so that state built from
    /// the log while leading (the coordinators') knows when to load it again.
    leader_generation: Cell<u64>,
    /// The topic's `min.insync.replicas`.
    min_insync_replicas: Cell<i32>,
    /// The high watermark last checkpointed (`hw_checkpoint.rs`); Some(i64::MAX) for a lone
    /// copy, which never checkpoints (its whole recovered log is committed).
    hw_checkpointed: Cell<Option<i64>>,
}

impl ReplicaState {
    /// A partition's state as it opens: alone on a single node, which leads it; a replica of
    /// a cluster (`replicated`: its topic has assignments, so its high watermark is
    /// checkpointed) without a role until the controller assigns one.
    pub fn new(min_insync_replicas: i32, replicated: bool) -> ReplicaState {
        let state = ReplicaState {
            replicas: RefCell::new(Replicas::alone()),
            needs_truncation: Cell::new(false),
            epoch_start: Cell::new(0),
            leader_generation: Cell::new(0),
            min_insync_replicas: Cell::new(min_insync_replicas),
            hw_checkpointed: Cell::new(if replicated { None } else { Some(i64::MAX) }),
        };
        if replicated && !crate::inject::active(crate::inject::Bug::OpenedReplicaLeadsAlone) {
            // No role until the controller's assignment gives it one (`assign`): it takes no
            // appends and fetches from no one, as a Kafka broker's partition before its first
            // leadership change. Alone, it would lead itself in epoch 0 meanwhile (the
            // simulator found a restarted replica taking appends there).
            let mut replicas = state.replicas_mut();
            replicas.epoch = -1;
            replicas.role = Role::Follower {
                leader: -1,
                leader_hw: 0,
            };
        }
        state
    }

    pub fn replicas(&self) -> Ref<'_, Replicas> {
        self.replicas.borrow()
    }

    fn replicas_mut(&self) -> RefMut<'_, Replicas> {
        self.replicas.borrow_mut()
    }

    pub fn is_leader(&self) -> bool {
        self.replicas.borrow().is_leader()
    }

    pub fn is_follower(&self) -> bool {
        matches!(self.replicas.borrow().role, Role::Follower { .. })
    }

    /// This node became the leader with its log ending at `log_end`: a new leadership.
    pub fn begin_leading(&self, log_end: i64) {
        let generation = self.leader_generation.get() + 1;
        self.leader_generation.set(generation);
        self.epoch_start.set(log_end);
        assert!(self.is_leader(), "a leadership begins only on a leader");
    }

    /// While this node leads: its leadership's generation and the offset its epoch began at.
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.is_leader()
            .then(|| (self.leader_generation.get(), self.epoch_start.get()))
    }

    pub fn epoch_start(&self) -> i64 {
        self.epoch_start.get()
    }

    /// The in-sync replicas' count, and the topic's `min.insync.replicas` (at least 1).
    pub fn insync(&self) -> (usize, usize) {
        let isr = self.replicas.borrow().isr.len();
        (isr, self.min_insync_replicas.get().max(1) as usize)
    }

    pub fn set_min_insync_replicas(&self, min: i32) {
        self.min_insync_replicas.set(min);
    }

    pub fn needs_truncation(&self) -> bool {
        self.needs_truncation.get()
    }

    pub fn set_needs_truncation(&self, needed: bool) {
        self.needs_truncation.set(needed);
    }

    /// Whether a high watermark of `hw` is news to the checkpoint file.
    pub fn checkpoint_due(&self, hw: i64) -> bool {
        self.hw_checkpointed.get().is_none_or(|c| c < hw)
    }

    pub fn checkpointed(&self, hw: i64) {
        assert!(
            self.checkpoint_due(hw),
            "the checkpointed high watermark never moves back"
        );
        self.hw_checkpointed.set(Some(hw));
    }
}

/// The replication rules (see the module doc), over the log `log`.
impl ReplicaState {
    /// Takes the controller's assignment `a` (with its partition epoch) for node `local`, given
    /// the catalog's registrations `brokers`. Becoming leader begins a leadership and an epoch
    /// at the log end (the cache saved); becoming a follower marks the log for truncation.
    /// Err: the epoch cache was not saved (the leadership has begun regardless).
    pub fn assign(
        &self,
        local: i32,
        (a, partition_epoch): (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
        log: &mut impl ReplicaLog,
    ) -> std::io::Result<Assigned> {
        let hw = log.high_watermark();
        let Some(changed) = self.replicas_mut().assign(local, a, now_ms, hw) else {
            return Ok(Assigned::Stale);
        };
        let mut replicas = self.replicas_mut();
        replicas.note_partition_epoch(partition_epoch);
        replicas.note_registrations(registrations(brokers, &a.replicas));
        drop(replicas);
        match (changed, a.leader == local) {
            (false, _) => Ok(Assigned::Kept),
            (true, true) => {
                let end = log.log_end();
                self.begin_leading(end);
                let planted = crate::inject::active(crate::inject::Bug::LeaderSkipsEpochStart);
                log.change_epochs(|e| !planted && e.assign(a.leader_epoch, end))?;
                Ok(Assigned::Leads)
            }
            (true, false) => {
                self.set_needs_truncation(true);
                Ok(Assigned::Follows)
            }
        }
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

    /// Moves the high watermark as far as the commit rule allows now; the new one if it moved.
    pub fn advance_commit(&self, log: &mut impl ReplicaLog) -> Option<i64> {
        let before = log.high_watermark();
        let committed = self.replicas().committed(log.synced_end());
        if committed <= before {
            return None;
        }
        let moved = log.commit_up_to(committed)?;
        assert!(
            moved > before && moved <= committed,
            "high watermark {before} moved to {moved}, the rule allowing {committed}"
        );
        Some(moved)
    }

    /// A leader's view of a follower's fetch at `offset`: the follower's position is noted and
    /// the high watermark moves if that commits more (the new one if it moved). Err when this
    /// node does not lead the partition for that replica, or the offset is past what this
    /// leader wrote.
    pub fn note_replica_fetch(
        &self,
        log: &mut impl ReplicaLog,
        (node, offset): (i32, i64),
        now_ms: u64,
    ) -> Result<Option<i64>, ResponseError> {
        let written_end = log.written_end();
        if offset > written_end {
            return Err(ResponseError::OffsetOutOfRange);
        }
        if !self
            .replicas_mut()
            .note_fetch(node, offset, written_end, now_ms)
        {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        Ok(self.advance_commit(log))
    }

    /// The in-sync set change this leader should ask the controller for now, if any
    /// (`Replicas::isr_request_due`: the outstanding one again `retry_ms` after `last_sent_ms`).
    pub fn isr_request_due(
        &self,
        log: &impl ReplicaLog,
        (now_ms, lag_max_ms): (u64, u64),
        (last_sent_ms, retry_ms): (Option<u64>, u64),
    ) -> Option<IsrRequest> {
        let positions = (log.high_watermark(), self.epoch_start());
        self.replicas_mut()
            .isr_request_due(now_ms, lag_max_ms, positions, (last_sent_ms, retry_ms))
    }

    /// The controller refused `request` for good: its joiners stop holding the high watermark
    /// (the new one if it moved).
    pub fn isr_refused(&self, log: &mut impl ReplicaLog, request: &IsrRequest) -> Option<i64> {
        self.replicas_mut().isr_refused(request);
        self.advance_commit(log)
    }

    /// A follower's check of batches fetched from its leader (`headers`, in order) before it
    /// writes them: this node follows, and they continue its log densely. The epochs they
    /// begin are noted in the cache and saved before they are written.
    pub fn take_replica_batches(
        &self,
        log: &mut impl ReplicaLog,
        headers: &[BatchHeader],
    ) -> Result<(), ReplicaRefusal> {
        if self.is_leader() {
            return Err(ReplicaRefusal::Leads);
        }
        let mut next = log.log_end();
        let planted = crate::inject::active(crate::inject::Bug::FollowerSkipsGapCheck);
        for h in headers.iter().filter(|_| !planted) {
            if h.base_offset != next || h.last_offset_delta < 0 {
                let found = h.base_offset;
                return Err(ReplicaRefusal::Gap { due: next, found });
            }
            next = h.next_offset();
        }
        log.change_epochs(|epochs| {
            let mut changed = false;
            for h in headers {
                changed |= epochs.assign(h.partition_leader_epoch, h.base_offset);
            }
            changed
        })
        .map_err(ReplicaRefusal::Storage)
    }

    /// The leader's high watermark, from a fetch response: this follower commits up to it as
    /// far as it has synced (the new high watermark if it moved).
    pub fn learn_leader_high_watermark(
        &self,
        log: &mut impl ReplicaLog,
        leader_hw: i64,
    ) -> Option<i64> {
        if let Role::Follower { leader_hw: hw, .. } = &mut self.replicas_mut().role {
            *hw = (*hw).max(leader_hw);
        }
        self.advance_commit(log)
    }

    /// What a follower's fetcher needs (None where this node leads): whom it asks, in which
    /// epoch, and whether it asks where its newest epoch ends (a tail to check) or fetches
    /// from its log end.
    pub fn follower_view(&self, log: &impl ReplicaLog) -> Option<FollowerView> {
        let r = self.replicas();
        let Role::Follower { leader, .. } = r.role else {
            return None;
        };
        Some(FollowerView {
            leader,
            epoch: r.epoch,
            log_end_offset: log.log_end(),
            latest_epoch: log.epochs().latest().unwrap_or(-1),
            needs_truncation: self.needs_truncation(),
        })
    }

    /// Where this follower cuts its log, given its leader's OffsetsForLeaderEpoch answer
    /// (epoch found, its end) for its newest epoch, and whether that settles it
    /// (`LeaderEpochs::cut_point`).
    pub fn cut_point(&self, log: &impl ReplicaLog, answer: (i32, i64)) -> (i64, bool) {
        let epochs = log.epochs();
        epochs.cut_point(log.log_end(), log.high_watermark(), answer)
    }

    /// After the divergent tail was cut (or found to be empty): the epochs that begin at or
    /// past the log end go (epochs this node began as leader without appending hold no
    /// records), and unless `complete` the follower asks its leader again with its newest
    /// epoch after the cut (multi-step KIP-279 truncation). Err: the cache was not saved.
    pub fn truncated(&self, log: &mut impl ReplicaLog, complete: bool) -> std::io::Result<()> {
        self.set_needs_truncation(!complete);
        let end = log.log_end();
        assert!(
            log.high_watermark() <= end && log.synced_end() <= end,
            "positions past the log end {end} after a truncation"
        );
        log.change_epochs(|e| e.truncate_from(end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of batch ends only: enough for the rules.
    #[derive(Default)]
    struct Ends {
        ends: Vec<i64>,
        synced: i64,
        hw: i64,
        epochs: LeaderEpochs,
        saves: usize,
    }

    impl ReplicaLog for Ends {
        fn log_end(&self) -> i64 {
            self.ends.last().copied().unwrap_or(0)
        }
        fn synced_end(&self) -> i64 {
            self.synced
        }
        fn high_watermark(&self) -> i64 {
            self.hw
        }
        fn commit_up_to(&mut self, offset: i64) -> Option<i64> {
            let to = self
                .ends
                .iter()
                .copied()
                .filter(|e| *e <= offset.min(self.synced))
                .max()?;
            (to > self.hw).then(|| {
                self.hw = to;
                to
            })
        }
        fn epochs(&self) -> &LeaderEpochs {
            &self.epochs
        }
        fn change_epochs(
            &mut self,
            change: impl FnOnce(&mut LeaderEpochs) -> bool,
        ) -> std::io::Result<()> {
            self.saves += usize::from(change(&mut self.epochs));
            Ok(())
        }
    }

    fn assignment(leader: i32, epoch: i32) -> PartitionAssignment {
        PartitionAssignment {
            leader,
            leader_epoch: epoch,
            replicas: vec![1, 2],
            isr: vec![1, 2],
            adding: Vec::new(),
            removing: Vec::new(),
        }
    }

    fn header(base: i64, count: i32, epoch: i32) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            size_bytes: 0,
            partition_leader_epoch: epoch,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: count,
        }
    }

    #[test]
    fn a_replica_of_a_cluster_has_no_role_until_assigned_and_a_lone_partition_leads() {
        let (state, mut log) = (ReplicaState::new(2, true), Ends::default());
        log.ends = vec![7];
        assert!(!state.is_leader() && state.leadership().is_none());
        let view = state.follower_view(&log).expect("not a leader");
        assert_eq!(
            (view.leader, view.epoch),
            (-1, -1),
            "it fetches from no one"
        );
        assert_eq!(
            state
                .assign(1, (&assignment(1, 0), None), &[], 0, &mut log)
                .unwrap(),
            Assigned::Leads,
            "epoch 0 is a new leadership, not one it held"
        );
        assert_eq!(state.leadership(), Some((1, 7)));
        let alone = ReplicaState::new(1, false);
        assert!(alone.is_leader() && alone.leadership().is_some());
    }

    #[test]
    fn a_new_leader_begins_its_epoch_at_the_log_end_and_a_new_follower_truncates_first() {
        let (state, mut log) = (ReplicaState::new(1, true), Ends::default());
        log.ends = vec![3, 5];
        let a = assignment(1, 4);
        assert_eq!(
            state.assign(1, (&a, None), &[], 0, &mut log).unwrap(),
            Assigned::Leads
        );
        assert_eq!(state.leadership(), Some((1, 5)));
        assert_eq!(log.epochs.latest(), Some(4));
        assert_eq!(log.saves, 1, "the cache is saved once");
        assert_eq!(
            state.assign(1, (&a, None), &[], 1, &mut log).unwrap(),
            Assigned::Kept
        );
        let b = assignment(2, 5);
        assert_eq!(
            state.assign(1, (&b, None), &[], 2, &mut log).unwrap(),
            Assigned::Follows
        );
        assert!(state.needs_truncation() && state.leadership().is_none());
        assert_eq!(
            state.assign(1, (&a, None), &[], 3, &mut log).unwrap(),
            Assigned::Stale
        );
        state.truncated(&mut log, true).unwrap();
        assert!(!state.needs_truncation());
    }

    #[test]
    fn a_follower_takes_only_batches_that_continue_its_log_and_notes_their_epochs() {
        let (state, mut log) = (ReplicaState::new(1, true), Ends::default());
        state
            .assign(1, (&assignment(2, 7), None), &[], 0, &mut log)
            .unwrap();
        log.ends = vec![10];
        let gap = state.take_replica_batches(&mut log, &[header(10, 2, 6), header(13, 1, 7)]);
        assert!(matches!(
            gap,
            Err(ReplicaRefusal::Gap { due: 12, found: 13 })
        ));
        assert_eq!(
            log.epochs.latest(),
            None,
            "nothing of a refused fetch is noted"
        );
        let dense = [header(10, 2, 6), header(12, 1, 7)];
        state.take_replica_batches(&mut log, &dense).unwrap();
        assert_eq!(log.epochs.end_offset_for(6, 13), (6, 12));
        state
            .assign(1, (&assignment(1, 8), None), &[], 1, &mut log)
            .unwrap();
        let leads = state.take_replica_batches(&mut log, &[header(10, 1, 8)]);
        assert!(matches!(leads, Err(ReplicaRefusal::Leads)));
    }

    #[test]
    fn a_follower_commits_its_leaders_high_watermark_only_as_far_as_it_synced() {
        let (state, mut log) = (ReplicaState::new(1, true), Ends::default());
        state
            .assign(1, (&assignment(2, 1), None), &[], 0, &mut log)
            .unwrap();
        (log.ends, log.synced) = (vec![4, 8, 12], 8);
        assert_eq!(state.learn_leader_high_watermark(&mut log, 12), Some(8));
        log.synced = 12;
        assert_eq!(state.advance_commit(&mut log), Some(12));
        assert_eq!(state.advance_commit(&mut log), None);
    }
}
