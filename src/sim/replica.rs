//! One partition replica on one simulated node. Its decisions are the production code's: the
//! replication rules of `partition::replica_state` (assignment, the commit rule, a leader noting
//! follower fetches, a follower taking its leader's batches and high watermark, the KIP-279 cut
//! point and what follows a cut) over the production `PartitionLog` on a simulated disk
//! (`replica_log.rs`), called in the order `Partition` calls them; idempotent and transactional
//! producer state (`producer_state`) and the aborted-transaction index (`txn_index`) are the
//! log's own, and the simulated flusher plans and completes its syncs as `shard::flusher` does.

use super::batch::{Batch, Stamp};
use super::replica_log::SimLog;
use crate::partition::commit::IsrRequest;
use crate::partition::replica_state::{Assigned, ReplicaState};
use crate::partition::txn;
use crate::protocol::batch::{parse_header, BatchHeader};
use crate::replication::follower_rules::Fetched;
use crate::storage::catalog::{BrokerRecord, PartitionAssignment};
use crate::storage::producer_state::Verdict;
use kafka_protocol::ResponseError;
use rand_chacha::ChaCha8Rng;

/// A leader's answer to a follower's fetch of one partition (its part of a Fetch response).
#[derive(Clone, Debug)]
pub struct FetchAnswer {
    pub error: Option<ResponseError>,
    pub batches: Vec<Batch>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

impl FetchAnswer {
    pub fn refused(error: ResponseError) -> FetchAnswer {
        FetchAnswer {
            error: Some(error),
            batches: Vec::new(),
            high_watermark: -1,
            log_start_offset: -1,
        }
    }

    /// What a follower reads of it (`follower_rules::react`).
    pub fn fetched(&self) -> Fetched {
        Fetched {
            error: self.error,
            first_base: self.batches.first().map(|b| b.base),
            high_watermark: self.high_watermark,
            log_start_offset: self.log_start_offset,
        }
    }

    /// A long poll's reason to wait: no error and nothing new.
    pub fn is_empty(&self) -> bool {
        self.error.is_none() && self.batches.is_empty()
    }
}

/// A leader's answer to a produce it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Written at this base offset.
    New(i64),
    /// An idempotent producer's retry of the batch already at this base offset.
    Duplicate(i64),
}

#[derive(Debug)]
pub struct SimReplica {
    pub log: SimLog,
    /// The role, the commit rule and the leadership: production's `ReplicaState`.
    pub state: ReplicaState,
    /// A fetch (or epoch query) to the leader is on its way, sent then.
    pub fetch_sent_ms: Option<u64>,
    /// The newest epoch the outstanding OffsetsForLeaderEpoch query asked about.
    pub epoch_query: Option<i32>,
    /// A follower's last fetch: the end of what it appended and the leader's high watermark,
    /// taken once that end is synced (`replication::fetcher`).
    leader_hw_after_sync: Option<(i64, i64)>,
    /// Committed batches below this were checked against the history.
    pub checked_to: i64,
}

impl SimReplica {
    /// A replica with no role until its node's catalog assigns one, over `log`.
    pub fn new(log: SimLog) -> SimReplica {
        SimReplica {
            log,
            state: ReplicaState::unassigned(1),
            fetch_sent_ms: None,
            epoch_query: None,
            leader_hw_after_sync: None,
            checked_to: 0,
        }
    }

    pub fn log_end(&self) -> i64 {
        self.log.log_end()
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.view().high_watermark()
    }

    pub fn synced_end(&self) -> i64 {
        self.log.view().synced().offset
    }

    pub fn is_leader(&self) -> bool {
        self.state.is_leader()
    }

    /// The current leader epoch.
    pub fn epoch(&self) -> i32 {
        self.state.replicas().epoch
    }

    /// Below it every transaction has ended (the production rule, `txn::last_stable_offset`).
    pub fn last_stable_offset(&self) -> i64 {
        txn::last_stable_offset(&self.log.view())
    }

    /// `Partition::leadership`: while this replica leads, the generation of its leadership
    /// and the offset its epoch began at.
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.state.leadership()
    }

    /// A crash and restart: what the disk kept, and no role until the node's catalog assigns
    /// one. Returns the bytes recovery cut from the log's tail.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        let cut = self.log.crash(rng, power_cut);
        // What the process held in memory is gone.
        self.state = ReplicaState::unassigned(1);
        self.fetch_sent_ms = None;
        self.epoch_query = None;
        self.leader_hw_after_sync = None;
        self.checked_to = 0;
        cut
    }

    /// `Partition::assign`: the controller's assignment of this partition. Returns whether
    /// this node's role changed.
    pub fn assign(
        &mut self,
        local: i32,
        assignment: (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
    ) -> bool {
        let assigned = self
            .state
            .assign(
                local,
                assignment,
                brokers,
                now_ms,
                &mut *self.log.view_mut(),
            )
            .expect("the simulated disk saves the epoch cache");
        if assigned == Assigned::Stale {
            return false;
        }
        self.log.view_mut().leader_epoch = assignment.0.leader_epoch;
        if assigned == Assigned::Follows {
            self.fetch_sent_ms = None;
        }
        self.state.advance_commit(&mut *self.log.view_mut());
        assigned != Assigned::Kept
    }

    /// A producer's batch on the leader (acks=all needs `min_insync` in sync), checked against
    /// its producer's sequences when it is idempotent (`Partition::check_sequence`); a
    /// coordinator's marker against the coordinator epochs of earlier markers
    /// (`txn::check_markers`).
    pub fn append(
        &mut self,
        payload: u64,
        count: i64,
        stamp: Option<Stamp>,
        acks_all: bool,
        min_insync: usize,
    ) -> Result<Appended, String> {
        if !self.is_leader() {
            return Err("NOT_LEADER_OR_FOLLOWER".into());
        }
        // The topic's setting, as `Partition::configure` hands it on.
        self.state.set_min_insync_replicas(min_insync as i32);
        self.state
            .check_insync(if acks_all { -1 } else { 1 })
            .map_err(|e| format!("{e:?}"))?;
        let batch = Batch {
            base: self.log_end(),
            count,
            epoch: self.epoch(),
            payload,
            stamp,
        };
        let verdict = {
            let log = self.log.view();
            match batch.marker() {
                Some(_) => {
                    let bytes = batch.encode();
                    let header = parse_header(&bytes).expect("a simulated batch parses");
                    txn::check_markers(&log, &bytes, &[header]).map(|()| Verdict::Append)
                }
                None => log.producers.check(&batch.header()),
            }
        };
        match verdict {
            Ok(Verdict::Duplicate { base_offset }) => return Ok(Appended::Duplicate(base_offset)),
            Ok(Verdict::Append) => {}
            Err(e) => return Err(format!("{e:?}")),
        }
        // As `Partition::append` answers a failed roll or write.
        self.log
            .append(batch)
            .map_err(|_| "KAFKA_STORAGE_ERROR".to_string())?;
        Ok(Appended::New(batch.base))
    }

    /// The flusher's pass plans a sync of this replica's writes: false when it has none.
    pub fn start_sync(&mut self) -> bool {
        self.log.start_sync()
    }

    /// The sync planned by `start_sync` returns (`Partition::complete_sync`): the commit rule
    /// may move, and a follower takes its leader's high watermark once what it fetched is
    /// synced. False when none was in flight.
    pub fn finish_sync(&mut self) -> bool {
        if !self.log.finish_sync() {
            return false;
        }
        let synced = self.synced_end();
        let log = &mut *self.log.view_mut();
        if let Some((_, hw)) = self.leader_hw_after_sync.take_if(|(end, _)| *end <= synced) {
            self.state.learn_leader_high_watermark(log, hw);
        }
        self.state.advance_commit(log);
        true
    }

    /// A follower's fetch at `offset` on this leader: its batches from there and the high
    /// watermark, or why not.
    pub fn serve_fetch(&mut self, node: i32, epoch: i32, offset: i64, now_ms: u64) -> FetchAnswer {
        if let Err(refused) = self.check_fetch_epoch(epoch) {
            return refused;
        }
        let noted =
            self.state
                .note_replica_fetch(&mut *self.log.view_mut(), (node, offset), now_ms);
        match noted {
            Err(e @ ResponseError::OffsetOutOfRange) => FetchAnswer {
                high_watermark: self.high_watermark(),
                log_start_offset: 0,
                ..FetchAnswer::refused(e)
            },
            Err(e) => FetchAnswer::refused(e),
            Ok(_) => self.read_for_follower(epoch, offset),
        }
    }

    /// Why a follower's fetch in leader epoch `epoch` is refused here, as the leader's Fetch
    /// handler answers: not the leader, an older epoch (fenced), or one it has not seen yet.
    fn check_fetch_epoch(&self, epoch: i32) -> Result<(), FetchAnswer> {
        let error = match (self.is_leader(), epoch.cmp(&self.epoch())) {
            (false, _) => ResponseError::NotLeaderOrFollower,
            (true, std::cmp::Ordering::Less) => ResponseError::FencedLeaderEpoch,
            (true, std::cmp::Ordering::Greater) => ResponseError::UnknownLeaderEpoch,
            (true, std::cmp::Ordering::Equal) => return Ok(()),
        };
        Err(FetchAnswer::refused(error))
    }

    /// What a (parked) follower fetch in `epoch` from `offset` gets now: the batches from
    /// there and the high watermark (the simulated logs start at 0).
    pub fn read_for_follower(&self, epoch: i32, offset: i64) -> FetchAnswer {
        if let Err(refused) = self.check_fetch_epoch(epoch) {
            return refused;
        }
        FetchAnswer {
            error: None,
            batches: self.log.read_from(offset, 8),
            high_watermark: self.high_watermark(),
            log_start_offset: 0,
        }
    }

    /// `Partition::epoch_end`: where `epoch` ends in this log (OffsetsForLeaderEpoch), from
    /// its start (the simulated logs keep every record).
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        let span = (0, self.log_end());
        self.log.view().epochs.answer_for(epoch, self.epoch(), span)
    }

    /// Where this follower cuts its log for its leader's epoch answer, and whether that
    /// settles it (`Partition::cut_point`).
    pub fn cut_point(&self, answer: (i32, i64)) -> (i64, bool) {
        self.state.cut_point(&*self.log.view(), answer)
    }

    /// `Partition::truncate_diverged`: the log cut at `offset`; unless `complete`, the
    /// follower asks its leader again.
    pub fn truncate_diverged(&mut self, offset: i64, complete: bool) {
        if offset < self.log_end() {
            self.log.truncate_to(offset);
            self.checked_to = self.checked_to.min(self.log_end());
        }
        self.state
            .truncated(&mut *self.log.view_mut(), complete)
            .expect("the simulated disk saves the epoch cache");
    }

    /// `Partition::append_replica`: the leader's batches, which must continue this log, and
    /// the leader's high watermark, taken once they are synced. Returns whether they were
    /// taken.
    pub fn append_replica(&mut self, batches: &[Batch], leader_hw: i64) -> bool {
        let headers: Vec<BatchHeader> = batches.iter().map(Batch::header).collect();
        if headers.is_empty()
            || self
                .state
                .take_replica_batches(&mut *self.log.view_mut(), &headers)
                .is_err()
        {
            return false;
        }
        if self.log.append_replica(batches).is_err() {
            return false; // KAFKA_STORAGE_ERROR: the fetcher asks again
        }
        self.leader_hw_after_sync = Some((self.log_end(), leader_hw));
        true
    }

    /// The leader's high watermark, from a fetch response.
    pub fn learn_leader_high_watermark(&mut self, leader_hw: i64) {
        self.state
            .learn_leader_high_watermark(&mut *self.log.view_mut(), leader_hw);
    }

    /// The controller refused `request` for good (`Partition::isr_refused`).
    pub fn isr_refused(&mut self, request: &IsrRequest) {
        self.state.isr_refused(&mut *self.log.view_mut(), request);
    }

    /// The in-sync set change this leader should ask for now (`Partition::isr_request_due`).
    pub fn ask_isr(
        &mut self,
        now_ms: u64,
        lag_max_ms: u64,
        last_sent_ms: Option<u64>,
    ) -> Option<IsrRequest> {
        let retry_ms = crate::replication::isr::RETRY_MS;
        self.state.isr_request_due(
            &*self.log.view(),
            (now_ms, lag_max_ms),
            (last_sent_ms, retry_ms),
        )
    }

    /// The batch at `base`, if this log holds one there.
    pub fn batch_at(&self, base: i64) -> Option<&Batch> {
        let batches = &self.log.batches;
        batches
            .binary_search_by_key(&base, |b| b.base)
            .ok()
            .map(|i| &batches[i])
    }
}
