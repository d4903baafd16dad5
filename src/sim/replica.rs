//! One partition replica on one simulated node. The decisions are the production code's: the
//! commit rule, followers' positions and the in-sync set a leader wants (`commit::Replicas`),
//! the leader epoch cache and the KIP-279 cut point (`epochs::LeaderEpochs`). What stands in for
//! `Partition` and `PartitionLog` (the glommio-bound parts) is this model: the log as a list of
//! batches with a written and a synced end, mirroring `Partition::assign`, `append`,
//! `append_replica`, `truncate_diverged` and `advance_commit` step by step.
//!
//! What survives a crash: the synced batches and a random prefix of the unsynced ones (a
//! process crash keeps the page cache, a power cut does not), the epoch cache as last saved
//! (saved synchronously, like `leader-epoch-checkpoint`) less epochs past the log end, and the
//! high-watermark checkpoint (taken every `HW_CHECKPOINT_MS`).

use crate::partition::commit::{IsrRequest, Replicas, Role};
use crate::protocol::batch::BatchHeader;
use crate::storage::catalog::{registrations, BrokerRecord, PartitionAssignment};
use crate::storage::epochs::LeaderEpochs;
use crate::storage::producer_state::{self, ProducerTable, Scanned, Verdict};
use crate::storage::txn_index::{self, AbortedTxn, Marker};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// A batch of `count` records from one produce (`payload` identifies it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    pub base: i64,
    pub count: i64,
    pub epoch: i32,
    pub payload: u64,
    /// An idempotent producer's batch: its id, epoch and first sequence.
    pub stamp: Option<Stamp>,
}

/// What an idempotent producer writes into a batch's header; a transactional producer's
/// batches and its coordinator's markers are marked `txn`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub producer_id: i64,
    pub epoch: i16,
    pub sequence: i32,
    pub txn: Option<TxnPart>,
}

/// What part of a transaction a batch is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnPart {
    /// The producer's records.
    Records,
    /// The marker that ends the transaction here (a control batch of one record).
    Marker {
        commit: bool,
        coordinator_epoch: i32,
    },
}

impl Batch {
    pub fn end(&self) -> i64 {
        self.base + self.count
    }

    /// The header the production producer state reads (only the fields it uses).
    pub fn header(&self) -> BatchHeader {
        use crate::protocol::batch::{ATTR_CONTROL, ATTR_TRANSACTIONAL};
        let stamp = self.stamp.unwrap_or(Stamp {
            producer_id: -1,
            epoch: -1,
            sequence: -1,
            txn: None,
        });
        let attributes = match stamp.txn {
            None => 0,
            Some(TxnPart::Records) => ATTR_TRANSACTIONAL,
            Some(TxnPart::Marker { .. }) => ATTR_TRANSACTIONAL | ATTR_CONTROL,
        };
        BatchHeader {
            base_offset: self.base,
            size_bytes: 0,
            partition_leader_epoch: self.epoch,
            attributes,
            last_offset_delta: (self.count - 1) as i32,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: stamp.producer_id,
            producer_epoch: stamp.epoch,
            base_sequence: stamp.sequence,
            record_count: self.count as i32,
        }
    }

    /// What a marker batch says (`txn_index::Marker`); None for other batches.
    pub fn marker(&self) -> Option<Marker> {
        match self.stamp?.txn? {
            TxnPart::Marker {
                commit,
                coordinator_epoch,
            } => Some(Marker {
                coordinator_epoch,
                commits: Some(commit),
            }),
            TxnPart::Records => None,
        }
    }

    /// (producer id, whether it commits) of a marker batch.
    pub fn ends_txn(&self) -> Option<(i64, bool)> {
        let commits = self.marker()?.commits?;
        Some((self.stamp?.producer_id, commits))
    }

    /// The producer id of a transaction's records.
    pub fn txn_records_of(&self) -> Option<i64> {
        let s = self.stamp?;
        (s.txn == Some(TxnPart::Records)).then_some(s.producer_id)
    }

    /// The batch as `producer_state::rebuild` replays it.
    fn scanned(&self) -> Scanned {
        let epoch = self.marker().map_or(-1, |m| m.coordinator_epoch);
        (self.header(), epoch)
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

#[derive(Clone, Debug)]
pub struct SimReplica {
    pub batches: Vec<Batch>,
    pub synced_end: i64,
    pub high_watermark: i64,
    pub epochs: LeaderEpochs,
    saved_epochs: LeaderEpochs,
    /// Idempotent producers' sequences and ongoing transactions (`PartitionLog::producers`),
    /// rebuilt from the log on restart and after a truncation.
    pub producers: ProducerTable,
    /// The aborted-transaction index (`PartitionLog::aborted`): an entry per abort marker of a
    /// transaction that wrote here. Its file keeps what was written; entries past the log end
    /// are dropped on load.
    pub aborted: Vec<AbortedTxn>,
    pub hw_checkpoint: i64,
    pub replicas: Replicas,
    pub needs_truncation: bool,
    epoch_start: i64,
    /// Bumped at each leadership won: waiting acks=all produces of an older one fail.
    pub leader_generation: u64,
    /// A fetch (or epoch query) to the leader is on its way, sent then.
    pub fetch_sent_ms: Option<u64>,
    /// The newest epoch the outstanding OffsetsForLeaderEpoch query asked about.
    pub epoch_query: Option<i32>,
    /// A follower's leader high watermark from the last fetch, taken once what came is synced.
    leader_hw_after_sync: Option<i64>,
    /// Committed batches below this were checked against the history.
    pub checked_to: i64,
}

impl SimReplica {
    pub fn new() -> SimReplica {
        let mut replicas = Replicas::alone();
        replicas.epoch = -1;
        replicas.role = Role::Follower {
            leader: -1,
            leader_hw: 0,
        };
        SimReplica {
            batches: Vec::new(),
            synced_end: 0,
            high_watermark: 0,
            epochs: LeaderEpochs::default(),
            saved_epochs: LeaderEpochs::default(),
            producers: ProducerTable::default(),
            aborted: Vec::new(),
            hw_checkpoint: 0,
            replicas,
            needs_truncation: false,
            epoch_start: 0,
            leader_generation: 0,
            fetch_sent_ms: None,
            epoch_query: None,
            leader_hw_after_sync: None,
            checked_to: 0,
        }
    }

    pub fn log_end(&self) -> i64 {
        self.batches.last().map_or(0, Batch::end)
    }

    pub fn is_leader(&self) -> bool {
        self.replicas.is_leader()
    }

    /// `Partition::last_stable_offset`: below it every transaction has ended.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark;
        self.producers
            .first_unstable_offset()
            .map_or(hw, |first| first.min(hw))
    }

    /// `Partition::leadership`: while this replica leads, the generation of its leadership
    /// and the offset its epoch began at.
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.is_leader()
            .then_some((self.leader_generation, self.epoch_start))
    }

    /// A crash and restart: what the disk kept, and no role until the node's catalog assigns one.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng) {
        let unsynced = self
            .batches
            .iter()
            .filter(|b| b.base >= self.synced_end)
            .count();
        let kept = if unsynced == 0 {
            0
        } else {
            rng.gen_range(0..=unsynced)
        };
        let keep = self.batches.len() - unsynced + kept;
        self.batches.truncate(keep);
        let end = self.log_end();
        let mut epochs = self.saved_epochs.clone();
        epochs.truncate_from(end + 1);
        // As `PartitionLog::open` does, from the batches read back (no snapshot here).
        let producers = self.rebuilt_producers();
        let mut aborted = std::mem::take(&mut self.aborted);
        aborted.retain(|e| e.last_offset < end);
        let restarted = SimReplica {
            producers,
            aborted,
            batches: std::mem::take(&mut self.batches),
            synced_end: end,
            high_watermark: self.hw_checkpoint.min(end),
            epochs: epochs.clone(),
            saved_epochs: epochs,
            hw_checkpoint: self.hw_checkpoint.min(end),
            ..SimReplica::new()
        };
        *self = restarted;
    }

    /// Producer state as `PartitionLog` rebuilds it from its batches (no snapshot here), after a
    /// restart or a truncation.
    fn rebuilt_producers(&self) -> ProducerTable {
        let scanned: Vec<_> = self.batches.iter().map(Batch::scanned).collect();
        producer_state::rebuild(None, self.log_end(), &scanned, 0)
    }

    /// `Partition::assign`: the controller's assignment of this partition. Returns whether
    /// this node's role changed.
    pub fn assign(
        &mut self,
        local: i32,
        (a, partition_epoch): (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
    ) -> bool {
        let Some(changed) = self.replicas.assign(local, a, now_ms, self.high_watermark) else {
            return false;
        };
        self.replicas.note_partition_epoch(partition_epoch);
        self.replicas
            .note_registrations(registrations(brokers, &a.replicas));
        let lead = a.leader == local;
        if changed {
            if lead {
                self.leader_generation += 1;
                self.epoch_start = self.log_end();
                self.epochs.assign(a.leader_epoch, self.epoch_start);
                self.saved_epochs = self.epochs.clone();
            } else {
                self.needs_truncation = true;
                self.fetch_sent_ms = None;
            }
        }
        self.advance_commit();
        changed
    }

    /// A producer's batch on the leader (acks=all needs `min_insync` in sync), checked against
    /// its producer's sequences when it is idempotent (`Partition::check_sequence`); a
    /// coordinator's marker against the coordinator epochs of earlier markers
    /// (`Partition::check_markers`).
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
        if acks_all && self.replicas.isr.len() < min_insync {
            return Err("NOT_ENOUGH_REPLICAS".into());
        }
        let batch = Batch {
            base: self.log_end(),
            count,
            epoch: self.replicas.epoch,
            payload,
            stamp,
        };
        let verdict = match batch.marker() {
            Some(m) => self
                .producers
                .check_marker(batch.header().producer_id, m.coordinator_epoch)
                .map(|()| Verdict::Append),
            None => self.producers.check(&batch.header()),
        };
        match verdict {
            Ok(Verdict::Duplicate { base_offset }) => return Ok(Appended::Duplicate(base_offset)),
            Ok(Verdict::Append) => {}
            Err(e) => return Err(format!("{e:?}")),
        }
        self.push(batch);
        Ok(Appended::New(batch.base))
    }

    /// Appends a batch at the log end and notes it as `PartitionLog::plan_batches` does: its
    /// producer's sequence or transaction, and an abort marker's index entry.
    fn push(&mut self, b: Batch) {
        let entry = txn_index::record(&mut self.producers, &b.header(), b.marker(), 0);
        self.aborted.extend(entry);
        self.batches.push(b);
    }

    /// The flusher's fdatasync: everything written is durable; the commit rule may move.
    pub fn sync(&mut self) {
        self.synced_end = self.log_end();
        if let Some(hw) = self.leader_hw_after_sync.take() {
            self.learn_leader_high_watermark(hw);
        }
        self.advance_commit();
    }

    /// `Partition::advance_commit`.
    pub fn advance_commit(&mut self) {
        let committed = self.replicas.committed(self.synced_end);
        if committed > self.high_watermark {
            self.high_watermark = committed;
        }
    }

    /// A follower's fetch at `offset` on this leader: its batches from there, the high
    /// watermark and the log start, or why not.
    pub fn serve_fetch(
        &mut self,
        node: i32,
        epoch: i32,
        offset: i64,
        now_ms: u64,
    ) -> Result<(Vec<Batch>, i64), &'static str> {
        if !self.is_leader() || epoch != self.replicas.epoch {
            return Err("NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH");
        }
        let end = self.log_end();
        if offset > end {
            return Err("OFFSET_OUT_OF_RANGE");
        }
        if !self.replicas.note_fetch(node, offset, end, now_ms) {
            return Err("NOT_LEADER_OR_FOLLOWER");
        }
        self.advance_commit();
        self.read_for_follower(epoch, offset)
    }

    /// What a (parked) follower fetch in `epoch` from `offset` gets now: the batches from
    /// there and the high watermark.
    pub fn read_for_follower(
        &self,
        epoch: i32,
        offset: i64,
    ) -> Result<(Vec<Batch>, i64), &'static str> {
        if !self.is_leader() || epoch != self.replicas.epoch {
            return Err("NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH");
        }
        let batches = self
            .batches
            .iter()
            .filter(|b| b.base >= offset)
            .take(8)
            .copied()
            .collect();
        Ok((batches, self.high_watermark))
    }

    /// `Partition::epoch_end`: where `epoch` ends in this log (OffsetsForLeaderEpoch).
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end())
    }

    /// `Partition::truncate_diverged` at the production cut point for the leader's answer.
    pub fn truncate_diverged(&mut self, answer: (i32, i64)) {
        let (offset, complete) = self
            .epochs
            .cut_point(self.log_end(), self.high_watermark, answer);
        if offset < self.log_end() {
            self.batches.retain(|b| b.end() <= offset);
            // A cut point inside a batch keeps none of it (the log cuts at batch bounds).
            let end = self.log_end();
            // As `PartitionLog::truncate_to`: producer state rebuilt as of the cut, index
            // entries of cut markers dropped.
            if producer_state::truncation_rebuilds() {
                self.producers = self.rebuilt_producers();
            } else {
                self.producers.truncate(end);
            }
            self.aborted.retain(|e| e.last_offset < end);
            self.synced_end = self.synced_end.min(end);
            self.high_watermark = self.high_watermark.min(end);
            self.checked_to = self.checked_to.min(end);
        }
        if self.epochs.truncate_from(self.log_end()) {
            self.saved_epochs = self.epochs.clone();
        }
        self.needs_truncation = !complete;
    }

    /// `Partition::append_replica`: the leader's batches, which must continue this log, and
    /// the leader's high watermark, taken once they are synced. Returns whether they were
    /// taken.
    pub fn append_replica(&mut self, batches: &[Batch], leader_hw: i64) -> bool {
        let continues = batches.first().is_some_and(|b| b.base == self.log_end());
        if self.is_leader() || !continues {
            return false;
        }
        let mut changed = false;
        for b in batches {
            changed |= self.epochs.assign(b.epoch, b.base);
            self.push(*b);
        }
        if changed {
            self.saved_epochs = self.epochs.clone();
        }
        self.leader_hw_after_sync = Some(leader_hw);
        true
    }

    /// The leader's high watermark, from a fetch response.
    pub fn learn_leader_high_watermark(&mut self, leader_hw: i64) {
        if let Role::Follower { leader_hw: hw, .. } = &mut self.replicas.role {
            *hw = (*hw).max(leader_hw);
        }
        self.advance_commit();
    }

    /// The in-sync set change this leader should ask for now (`Partition::isr_request_due`).
    pub fn ask_isr(
        &mut self,
        now_ms: u64,
        lag_max_ms: u64,
        last_sent_ms: Option<u64>,
    ) -> Option<IsrRequest> {
        self.replicas.isr_request_due(
            now_ms,
            lag_max_ms,
            (self.high_watermark, self.epoch_start),
            (last_sent_ms, crate::replication::isr::RETRY_MS),
        )
    }

    /// The batch at `base`, if this log holds one there.
    pub fn batch_at(&self, base: i64) -> Option<&Batch> {
        self.batches
            .binary_search_by_key(&base, |b| b.base)
            .ok()
            .map(|i| &self.batches[i])
    }
}
