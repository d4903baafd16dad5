//! One partition replica on one simulated node: production's `Partition` (`replica_log.rs`),
//! called as the broker calls it. Its role from the node's catalog (`assign`), a producer's
//! append as the Produce handler makes it, a follower's fetch as the leader's Fetch handler
//! reads it, a follower's appends, truncations and high watermark as its fetcher hands them
//! on, the in-sync set changes it asks for. What this module adds is the part of the fetcher
//! the simulator plays (a fetch in flight, the epoch query outstanding, the leader's high
//! watermark taken once what was fetched is synced) and the simulator's bookkeeping.

use super::batch::{Batch, Stamp, TxnPart};
use super::replica_log::{decode, done, SimLog};
use crate::partition::commit::IsrRequest;
use crate::partition::replica_state::{Assigned, FollowerView};
use crate::partition::{Partition, ReadRequest, ReadResult, Source};
use crate::protocol::chunk::Chunk;
use crate::replication::fetcher::{take_leader_offsets, Taken};
use crate::replication::follower_rules::Fetched;
use crate::storage::catalog::{BrokerRecord, PartitionAssignment};
use bytes::Bytes;
use kafka_protocol::ResponseError;
use rand_chacha::ChaCha8Rng;

/// The most bytes a fetch reads of a partition (a fetch's `partition_max_bytes`): the first
/// batch whole however large (KIP-74), whole batches after it up to the bound.
const FETCH_MAX_BYTES: usize = 16 << 10;

/// A leader's answer to a follower's fetch of one partition (its part of a Fetch response).
#[derive(Clone, Debug)]
pub struct FetchAnswer {
    pub error_code: i16,
    /// The batches read, as the leader sends them.
    pub records: Bytes,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

impl FetchAnswer {
    pub fn refused(error: ResponseError) -> FetchAnswer {
        FetchAnswer {
            error_code: error.code(),
            records: Bytes::new(),
            high_watermark: -1,
            log_start_offset: -1,
        }
    }

    /// What a follower reads of it (`follower_rules::react`).
    pub fn fetched(&self) -> Fetched {
        let records = (!self.records.is_empty()).then_some(&self.records);
        let offsets = (self.high_watermark, self.log_start_offset);
        Fetched::of(self.error_code, records, offsets)
    }

    /// A long poll's reason to wait: no error and nothing new.
    pub fn is_empty(&self) -> bool {
        self.error_code == 0 && self.records.is_empty()
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
    /// The production partition on its simulated disk.
    pub log: SimLog,
    /// A fetch (or epoch query) to the leader is on its way, sent then.
    pub fetch_sent_ms: Option<u64>,
    /// The newest epoch the outstanding OffsetsForLeaderEpoch query asked about.
    pub epoch_query: Option<i32>,
    /// A follower's last fetch: the end of what it appended, and the leader's high watermark
    /// and log start, taken once that end is synced (`replication::fetcher`).
    leader_offsets_after_sync: Option<(i64, (i64, i64))>,
    /// Committed batches below this were checked against the history.
    pub checked_to: i64,
}

impl SimReplica {
    /// A replica with no role until its node's catalog assigns one, over `log`.
    pub fn new(log: SimLog) -> SimReplica {
        SimReplica {
            log,
            fetch_sent_ms: None,
            epoch_query: None,
            leader_offsets_after_sync: None,
            checked_to: 0,
        }
    }

    fn partition(&self) -> &Partition {
        self.log.partition()
    }

    pub fn log_end(&self) -> i64 {
        self.log.log_end()
    }

    pub fn high_watermark(&self) -> i64 {
        self.partition().high_watermark()
    }

    pub fn synced_end(&self) -> i64 {
        self.log.view().synced().offset
    }

    pub fn is_leader(&self) -> bool {
        self.partition().is_leader()
    }

    /// The current leader epoch.
    pub fn epoch(&self) -> i32 {
        self.partition().replica_state().replicas().epoch
    }

    /// `Partition::leadership`: while this replica leads, the generation of its leadership
    /// and the offset its epoch began at.
    pub fn leadership(&self) -> Option<(u64, i64)> {
        self.partition().leadership()
    }

    /// What production's fetcher reads of the partition (`Replication::follower_view`).
    pub fn follower_view(&self) -> Option<FollowerView> {
        self.partition().replication().follower_view()
    }

    /// Whether this follower must check its tail against its leader's before it fetches.
    pub fn needs_truncation(&self) -> bool {
        self.partition().replica_state().needs_truncation()
    }

    /// A crash and restart: what the disk kept, and no role until the node's catalog assigns
    /// one. Returns the bytes recovery cut from the log's tail.
    pub fn crash(&mut self, rng: &mut ChaCha8Rng, power_cut: bool) -> u64 {
        let cut = self.log.crash(rng, power_cut);
        // What the process held in memory is gone.
        self.fetch_sent_ms = None;
        self.epoch_query = None;
        self.leader_offsets_after_sync = None;
        self.checked_to = 0;
        cut
    }

    /// `Replication::assign`: the controller's assignment of this partition. Returns whether
    /// this node's role changed.
    pub fn assign(
        &mut self,
        local: i32,
        assignment: (&PartitionAssignment, Option<i32>),
        brokers: &[BrokerRecord],
        now_ms: u64,
    ) -> bool {
        self.log.tick(now_ms);
        let assigned = self
            .partition()
            .replication()
            .assign(local, assignment, brokers, now_ms);
        if assigned == Assigned::Follows {
            self.fetch_sent_ms = None;
        }
        !matches!(assigned, Assigned::Stale | Assigned::Kept)
    }

    /// A producer's batch, as the Produce handler appends it (`Partition::append_acked`:
    /// acks=all needs `min_insync` in sync): a coordinator's marker as the coordinator's, a
    /// transaction's records as verified by their coordinator (KIP-890).
    pub fn append(
        &mut self,
        payload: u64,
        count: i64,
        stamp: Option<Stamp>,
        acks_all: bool,
        min_insync: usize,
    ) -> Result<Appended, String> {
        self.log.set_min_insync(min_insync);
        let batch = Batch {
            base: self.log_end(),
            count,
            epoch: self.epoch(),
            payload,
            stamp,
        };
        let source = match stamp.and_then(|s| s.txn) {
            Some(TxnPart::Marker { .. }) => Source::Coordinator,
            Some(TxnPart::Records) => Source::VerifiedTransaction,
            None => Source::Client,
        };
        let acks = if acks_all { -1 } else { 1 };
        match self.log.append(batch, (source, acks)) {
            Ok((base, true)) => Ok(Appended::Duplicate(base)),
            Ok((base, false)) => Ok(Appended::New(base)),
            Err(e) => Err(format!("{e:?}")),
        }
    }

    /// The flusher's pass plans a sync of this replica's writes: false when it has none.
    pub fn start_sync(&mut self) -> bool {
        self.log.start_sync()
    }

    /// The sync planned by `start_sync` returns (`Partition::complete_sync`: the commit rule
    /// may move), and a follower takes its leader's offsets once what it fetched is synced
    /// (the fetcher's wait). False when none was in flight.
    pub fn finish_sync(&mut self) -> bool {
        if !self.log.finish_sync() {
            return false;
        }
        self.take_leader_offsets_if_synced();
        true
    }

    /// `fetcher::take_leader_offsets` once this follower synced what its last fetch appended.
    fn take_leader_offsets_if_synced(&mut self) {
        let synced = self.synced_end();
        let due = self
            .leader_offsets_after_sync
            .take_if(|(end, _)| *end <= synced);
        if let Some((_, offsets)) = due {
            done(take_leader_offsets(self.partition(), offsets));
        }
    }

    /// A follower's fetch at `offset` in leader epoch `epoch` on this leader, read as the
    /// leader's Fetch handler reads it (`Partition::read`, which notes the follower's
    /// position first): its batches from there and the high watermark, or why not.
    pub fn serve_fetch(&self, node: i32, epoch: i32, offset: i64, now_ms: u64) -> FetchAnswer {
        self.log.tick(now_ms);
        let (read, records) = self.read(offset, (node, epoch), false);
        FetchAnswer {
            error_code: read.error_code,
            records,
            high_watermark: read.high_watermark,
            log_start_offset: read.log_start_offset,
        }
    }

    /// A consumer's fetch at `offset` on this leader, as the Fetch handler reads it
    /// (`Partition::read`): the batches below the high watermark, or, `read_committed`, below
    /// the last stable offset with the aborted transactions of the range as (producer id,
    /// first offset). Nothing when the read is refused.
    pub fn serve_consumer(
        &self,
        offset: i64,
        read_committed: bool,
    ) -> (Vec<Batch>, Vec<(i64, i64)>) {
        let (read, records) = self.read(offset, (-1, -1), read_committed);
        (decode(&records), read.aborted.unwrap_or_default())
    }

    /// `Partition::read` from `offset` for `reader` (a follower's node id and leader epoch, or
    /// -1s for a consumer), as bytes.
    fn read(&self, offset: i64, reader: (i32, i32), read_committed: bool) -> (ReadResult, Bytes) {
        let request = ReadRequest {
            offset,
            max_bytes: FETCH_MAX_BYTES,
            leader_epoch: reader.1,
            zero_copy: false,
            whole_first_batch: true,
            replica: reader.0,
            read_committed,
            any_replica: false,
        };
        let mut read = done(self.partition().read(request));
        let records = match read.records.take() {
            None => Bytes::new(),
            Some(Chunk::Bytes(bytes)) => bytes,
            Some(Chunk::File(_)) => unreachable!("a read that is not zero-copy returns bytes"),
        };
        (read, records)
    }

    /// `Replication::epoch_end`: where `epoch` ends in this log (OffsetsForLeaderEpoch).
    pub fn epoch_end(&self, epoch: i32) -> (i32, i64) {
        self.partition().replication().epoch_end(epoch)
    }

    /// Where this follower cuts its log for its leader's epoch answer, and whether that
    /// settles it (`Replication::cut_point`).
    pub fn cut_point(&self, answer: (i32, i64)) -> (i64, bool) {
        self.partition().replication().cut_point(answer)
    }

    /// `Replication::truncate_diverged`: the log cut at `offset`; unless `complete`, the
    /// follower asks its leader again.
    pub fn truncate_diverged(&mut self, offset: i64, complete: bool) {
        self.log.truncate_diverged(offset, complete);
        self.checked_to = self.checked_to.min(self.log_end());
    }

    /// The leader's answer to this follower's fetch, taken as the fetcher takes it
    /// (`fetcher::take_fetched`, in the state `view` says); once what came is synced, the
    /// leader's offsets.
    pub fn take_fetched(&mut self, view: &FollowerView, answer: &FetchAnswer) -> Taken {
        let records = (!answer.records.is_empty()).then(|| answer.records.clone());
        let taken = self.log.take_fetched(view, &answer.fetched(), records);
        self.checked_to = self.checked_to.min(self.log_end());
        if let Taken::WaitSynced(end) = taken {
            let offsets = (answer.high_watermark, answer.log_start_offset);
            self.leader_offsets_after_sync = Some((end, offsets));
            self.take_leader_offsets_if_synced();
        }
        taken
    }

    /// The controller refused `request` for good (`Replication::isr_refused`).
    pub fn isr_refused(&mut self, request: &IsrRequest) {
        self.partition().replication().isr_refused(request);
    }

    /// The in-sync set change this leader should ask for now (`Replication::isr_request_due`).
    pub fn ask_isr(
        &mut self,
        now_ms: u64,
        lag_max_ms: u64,
        last_sent_ms: Option<u64>,
    ) -> Option<IsrRequest> {
        self.log.tick(now_ms);
        let retry_ms = crate::replication::isr::RETRY_MS;
        self.partition()
            .replication()
            .isr_request_due(lag_max_ms, last_sent_ms, retry_ms)
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
