//! Idempotent-producer state of one partition (KIP-98, KIP-360): for each producer id, its
//! epoch, the sequence ranges and offsets of its last five batches, and the first offset of
//! its ongoing transaction here, if any. Pure logic: the log feeds it batch headers, and it
//! decides whether a new batch is next in sequence, a duplicate of a recent one, or out of
//! order; the ongoing transactions give the partition's first unstable offset (the last
//! stable offset, KIP-98, is the smaller of it and the high watermark).
//!
//! ## Producer ids, sequences and persistence
//!
//! - InitProducerId goes to the controller (shard 0), which hands out ids from a block reserved in
//!   the catalog (1,000 at a time, persisted before use), so ids never repeat across restarts.
//! - Each partition's `ProducerTable` keeps, per producer id, the epoch and the sequence ranges and
//!   offsets of the last five batches. Under the append lock, a batch is checked before it gets
//!   offsets: next in sequence → appended; equal to a remembered batch → answered with that
//!   batch's offsets and nothing written (after waiting for its durability under acks=all);
//!   otherwise OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH or UNKNOWN_PRODUCER_ID.
//! - Persistence (`storage/producer_snapshots.rs`): a snapshot (`<offset>.snapshot`, rkyv, as
//!   Kafka names them) is written at every segment roll (as of the new segment's base) and at
//!   clean close (as of the log end); the newest 4 stay. Producer state as of an offset is the
//!   newest snapshot at or below it plus the idempotent batches read back from the log past it
//!   (chunked header reads; a marker's coordinator epoch from its record). A log rebuilds it so on
//!   open (as of its recovered end, so duplicates are still recognised after SIGKILL) **and when
//!   replication truncates it** (as of the cut; snapshots past the cut are removed): forgetting
//!   what lay past the cut is not enough, since a marker there closed a transaction that began
//!   below it, and that transaction must be open again for the new leader's marker to get its
//!   aborted-transaction entry (issue 36's first bug: read_committed through such a replica
//!   returned an aborted transaction). A legacy `producer.snapshot` is read until a newer file
//!   exists. Idle producers expire after `producer_id_expiration_ms`, checked on the timing wheel.
//! - A marker makes a producer unknown to the partition known at the marker's epoch (as Kafka's
//!   partitions do): a transactional write of an older epoch that arrives after a timeout's abort
//!   (which bumps the epoch) is fenced instead of opening a transaction no coordinator will end.

use crate::protocol::batch::BatchHeader;
use kafka_protocol::ResponseError;
use std::collections::{BTreeSet, HashMap, VecDeque};

/// Batches remembered per producer: Kafka's max.in.flight for idempotence is 5.
pub const BATCHES_PER_PRODUCER: usize = 5;
/// Bound on producers tracked per partition; the least recently used are forgotten first.
pub const MAX_PRODUCERS: usize = 100_000;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct BatchMeta {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub epoch: i16,
    pub batches: Vec<BatchMeta>,
    pub last_update_ms: i64,
    /// The first offset of its ongoing transaction in this partition.
    pub txn_first_offset: Option<i64>,
    /// The newest transaction coordinator epoch of its markers here (-1: none).
    pub coordinator_epoch: i32,
}

/// What the log must do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it.
    Append,
    /// Already written at these offsets: answer with them and write nothing.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Clone, PartialEq)]
struct Producer {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
    last_update_ms: i64,
    txn_first_offset: Option<i64>,
    coordinator_epoch: i32,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProducerTable {
    producers: HashMap<i64, Producer>,
    /// The ongoing transactions by first offset: (first offset, producer id).
    ongoing: BTreeSet<(i64, i64)>,
}

fn next_sequence(s: i32) -> i32 {
    if s == i32::MAX {
        0
    } else {
        s + 1
    }
}

impl ProducerTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Checks a batch (not yet written) against the producer's state.
    pub fn check(&self, h: &BatchHeader) -> Result<Verdict, ResponseError> {
        if !h.is_idempotent() {
            return Ok(Verdict::Append);
        }
        // A producer this partition has no state for starts where it says, as in Kafka since
        // KIP-360: its state may have expired (producer_id_expiration_ms) or gone with the
        // segments retention deleted, and its next batch is not an error.
        let Some(p) = self.producers.get(&h.producer_id) else {
            return Ok(Verdict::Append);
        };
        if h.producer_epoch < p.epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        if h.producer_epoch > p.epoch {
            // A bumped epoch (KIP-360) starts its sequences again at 0.
            return if h.base_sequence == 0 {
                Ok(Verdict::Append)
            } else {
                Err(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        let last = h.last_sequence();
        if let Some(b) = p
            .batches
            .iter()
            .find(|b| b.first_sequence == h.base_sequence && b.last_sequence == last)
        {
            return Ok(Verdict::Duplicate {
                base_offset: b.base_offset,
            });
        }
        match p.batches.back() {
            Some(b) if h.base_sequence == next_sequence(b.last_sequence) => Ok(Verdict::Append),
            None if h.base_sequence == 0 => Ok(Verdict::Append),
            _ => Err(ResponseError::OutOfOrderSequenceNumber),
        }
    }

    /// Records a batch written at its (assigned) offsets: its sequences, and for a
    /// transactional one the start of the producer's transaction here. A control batch (a
    /// marker) ends the transaction instead (`end_txn`).
    pub fn record(&mut self, h: &BatchHeader, now_ms: i64) {
        if !h.is_idempotent() {
            return;
        }
        if h.is_control() {
            self.end_txn(h.producer_id, h.producer_epoch, now_ms);
            return;
        }
        self.make_room(h.producer_id);
        let p = self.producer(h.producer_id, h.producer_epoch, now_ms);
        if h.producer_epoch != p.epoch {
            p.epoch = h.producer_epoch;
            p.batches.clear();
        }
        p.batches.push_back(BatchMeta {
            first_sequence: h.base_sequence,
            last_sequence: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        while p.batches.len() > BATCHES_PER_PRODUCER {
            p.batches.pop_front();
        }
        p.last_update_ms = now_ms;
        if h.is_transactional() && p.txn_first_offset.is_none() {
            p.txn_first_offset = Some(h.base_offset);
            let opened = self.ongoing.insert((h.base_offset, h.producer_id));
            // `ongoing` lists exactly the producers' open transactions, by first offset.
            assert!(
                opened,
                "producer {}: a transaction open twice at {}",
                h.producer_id, h.base_offset
            );
        }
    }

    fn producer(&mut self, producer_id: i64, epoch: i16, now_ms: i64) -> &mut Producer {
        self.producers.entry(producer_id).or_insert(Producer {
            epoch,
            batches: VecDeque::new(),
            last_update_ms: now_ms,
            txn_first_offset: None,
            coordinator_epoch: -1,
        })
    }

    /// Past `MAX_PRODUCERS`, the least recently used producer without an ongoing transaction
    /// goes to make room for `producer_id`.
    fn make_room(&mut self, producer_id: i64) {
        if self.producers.contains_key(&producer_id) || self.producers.len() < MAX_PRODUCERS {
            return;
        }
        let oldest = self
            .producers
            .iter()
            .filter(|(_, p)| p.txn_first_offset.is_none())
            .min_by_key(|(_, p)| p.last_update_ms)
            .map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.producers.remove(&id);
        }
    }

    /// A marker of (`producer_id`, `epoch`) ends its transaction here: the transaction's first
    /// offset, if it wrote anything (a partition added to a transaction may get only the
    /// marker). A producer not known here becomes known at the marker's epoch, as in Kafka: a
    /// write of an older epoch that arrives after the marker (one verified before a timeout's
    /// abort bumped the epoch) is then refused as fenced, rather than opening a transaction
    /// that no coordinator will ever end.
    pub fn end_txn(&mut self, producer_id: i64, epoch: i16, now_ms: i64) -> Option<i64> {
        self.make_room(producer_id);
        let p = self.producer(producer_id, epoch, now_ms);
        // A marker's epoch is the coordinator's (bumped when it fenced the producer).
        if epoch > p.epoch {
            p.epoch = epoch;
            p.batches.clear();
        }
        p.last_update_ms = now_ms;
        let first = p.txn_first_offset.take()?;
        let listed = self.ongoing.remove(&(first, producer_id));
        assert!(
            listed,
            "producer {producer_id}: its transaction at {first} was not listed"
        );
        Some(first)
    }

    /// A marker of `producer_id`'s, written by a coordinator of `coordinator_epoch` (read from
    /// the marker itself), was recorded: markers from older coordinators are fenced from now
    /// on (`check_marker`).
    pub fn note_coordinator_epoch(&mut self, producer_id: i64, coordinator_epoch: i32) {
        if let Some(p) = self.producers.get_mut(&producer_id) {
            p.coordinator_epoch = p.coordinator_epoch.max(coordinator_epoch);
        }
    }

    /// Whether a marker for `producer_id` from a coordinator of `coordinator_epoch` may be
    /// written: not when a newer coordinator already wrote one here (a zombie coordinator,
    /// TRANSACTION_COORDINATOR_FENCED, as Kafka's partitions answer).
    pub fn check_marker(
        &self,
        producer_id: i64,
        coordinator_epoch: i32,
    ) -> Result<(), ResponseError> {
        match self.producers.get(&producer_id) {
            Some(p) if coordinator_epoch < p.coordinator_epoch => {
                Err(ResponseError::TransactionCoordinatorFenced)
            }
            _ => Ok(()),
        }
    }

    /// The first offset of `producer_id`'s ongoing transaction here, if it has one.
    pub fn txn_first_offset(&self, producer_id: i64) -> Option<i64> {
        self.producers.get(&producer_id)?.txn_first_offset
    }

    /// The producer's current epoch here, if it is known.
    pub fn epoch_of(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|p| p.epoch)
    }

    /// The first offset of the oldest ongoing transaction: nothing from it on is stable.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(first, _)| *first)
    }

    /// The ongoing transactions: (producer id, first offset).
    pub fn ongoing(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.ongoing.iter().map(|(first, pid)| (*pid, *first))
    }

    /// Forgets producers idle for longer than `expiration_ms` (never one in a transaction);
    /// returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, p| {
            p.txn_first_offset.is_some() || now_ms - p.last_update_ms < expiration_ms
        });
        self.check_ongoing();
        before - self.producers.len()
    }

    /// `ongoing` lists exactly the producers' open transactions: none is forgotten while its
    /// transaction is open (the last stable offset would pass it). O(ongoing transactions):
    /// checked by the periodic passes, not per batch.
    fn check_ongoing(&self) {
        let open = self
            .producers
            .values()
            .filter(|p| p.txn_first_offset.is_some());
        assert_eq!(
            open.count(),
            self.ongoing.len(),
            "open transactions and their list"
        );
        for (first, id) in &self.ongoing {
            let p = self.producers.get(id).and_then(|p| p.txn_first_offset);
            assert_eq!(
                p,
                Some(*first),
                "producer {id}: its listed transaction at {first}"
            );
        }
    }

    /// Takes a batch read back from the log (a restart, a truncation): as `record`, and a
    /// marker's coordinator epoch (`coordinator_epoch`, -1 for other batches).
    pub fn replay(&mut self, h: &BatchHeader, coordinator_epoch: i32, now_ms: i64) {
        self.record(h, now_ms);
        if h.is_control() {
            self.note_coordinator_epoch(h.producer_id, coordinator_epoch);
        }
    }

    /// Forgets batches at or after `offset` and transactions that began there: what a log
    /// truncated there did before it rebuilt its state (`truncation_rebuilds`), kept only as
    /// the simulator's planted bug.
    pub fn truncate(&mut self, offset: i64) {
        for p in self.producers.values_mut() {
            p.batches.retain(|b| b.last_offset < offset);
            if p.txn_first_offset.is_some_and(|f| f >= offset) {
                p.txn_first_offset = None;
            }
        }
        self.producers
            .retain(|_, p| !p.batches.is_empty() || p.txn_first_offset.is_some());
        self.ongoing.retain(|(first, _)| *first < offset);
    }

    pub fn to_entries(&self) -> Vec<ProducerEntry> {
        self.producers
            .iter()
            .map(|(&id, p)| ProducerEntry {
                producer_id: id,
                epoch: p.epoch,
                batches: p.batches.iter().copied().collect(),
                last_update_ms: p.last_update_ms,
                txn_first_offset: p.txn_first_offset,
                coordinator_epoch: p.coordinator_epoch,
            })
            .collect()
    }

    pub fn from_entries(entries: Vec<ProducerEntry>) -> ProducerTable {
        let ongoing = entries
            .iter()
            .filter_map(|e| Some((e.txn_first_offset?, e.producer_id)))
            .collect();
        let producers = entries
            .into_iter()
            .map(|e| {
                let p = Producer {
                    epoch: e.epoch,
                    batches: e.batches.into(),
                    last_update_ms: e.last_update_ms,
                    txn_first_offset: e.txn_first_offset,
                    coordinator_epoch: e.coordinator_epoch,
                };
                (e.producer_id, p)
            })
            .collect();
        ProducerTable { producers, ongoing }
    }
}

/// An idempotent batch recovery scanned: its header, and for a marker the coordinator epoch
/// it carries (-1 otherwise).
pub type Scanned = (BatchHeader, i32);

/// Producer state as of a log's end after a restart: `snapshot` if it is at or below
/// `log_end` (a snapshot past a truncated tail is useless), plus the idempotent batches
/// recovery scanned past its offset, in log order.
pub fn rebuild(
    snapshot: Option<Snapshot>,
    log_end: i64,
    scanned: &[Scanned],
    now_ms: i64,
) -> ProducerTable {
    if crate::inject::active(crate::inject::Bug::ForgetProducerState) {
        return ProducerTable::default();
    }
    let snapshot = snapshot.filter(|s| s.offset <= log_end);
    let from = snapshot.as_ref().map_or(i64::MIN, |s| s.offset);
    let mut table = snapshot
        .map(|s| ProducerTable::from_entries(s.producers))
        .unwrap_or_default();
    for (h, coordinator_epoch) in scanned.iter().filter(|(h, _)| h.base_offset >= from) {
        table.replay(h, *coordinator_epoch, now_ms);
    }
    table
}

/// Whether a truncated log rebuilds its producer state (from a snapshot at or below the cut
/// and the batches between, as `rebuild` does after a restart) rather than forgetting what lies
/// past the cut (`ProducerTable::truncate`, only a planted bug's): forgetting cannot reopen a
/// transaction that a marker in the cut tail had closed, so when the new leader's marker for
/// it arrives, the replica writes no aborted-transaction index entry and read_committed through
/// it returns the aborted records.
pub fn truncation_rebuilds() -> bool {
    !crate::inject::active(crate::inject::Bug::TruncationKeepsClosedTransactions)
}

/// A snapshot file: the table as of `offset` (every batch below it is reflected).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub offset: i64,
    pub producers: Vec<ProducerEntry>,
}

/// Snapshot files from version 2 on begin with this and a version byte; version 1 files (no
/// transactions) are the rkyv bytes alone. Version 3 adds the coordinator epoch.
const SNAPSHOT_MAGIC: &[u8; 4] = b"SLPS";
const SNAPSHOT_VERSION: u8 = 3;
const SNAPSHOT_V2: u8 = 2;

/// A producer in a version 2 snapshot (no coordinator epoch).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
struct ProducerEntryV2 {
    producer_id: i64,
    epoch: i16,
    batches: Vec<BatchMeta>,
    last_update_ms: i64,
    txn_first_offset: Option<i64>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
struct SnapshotV2 {
    offset: i64,
    producers: Vec<ProducerEntryV2>,
}

/// A producer in a version 1 snapshot.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
struct ProducerEntryV1 {
    producer_id: i64,
    epoch: i16,
    batches: Vec<BatchMeta>,
    last_update_ms: i64,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
struct SnapshotV1 {
    offset: i64,
    producers: Vec<ProducerEntryV1>,
}

pub fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    let Ok(body) = rkyv::to_bytes::<rkyv::rancor::Error>(s) else {
        return Vec::new();
    };
    let mut out = Vec::with_capacity(SNAPSHOT_MAGIC.len() + 1 + body.len());
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.push(SNAPSHOT_VERSION);
    out.extend_from_slice(&body);
    out
}

/// Reads a snapshot of any version; None when it cannot be read (the table is then rebuilt
/// from the log alone). Older versions' producers get what they lacked as unknown.
pub fn decode_snapshot(raw: &[u8]) -> Option<Snapshot> {
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    let entry = |producer_id, epoch, batches, last_update_ms, txn_first_offset| ProducerEntry {
        producer_id,
        epoch,
        batches,
        last_update_ms,
        txn_first_offset,
        coordinator_epoch: -1,
    };
    match raw.strip_prefix(&SNAPSHOT_MAGIC[..]) {
        Some([SNAPSHOT_VERSION, body @ ..]) => {
            aligned.extend_from_slice(body);
            rkyv::from_bytes::<Snapshot, rkyv::rancor::Error>(&aligned).ok()
        }
        Some([SNAPSHOT_V2, body @ ..]) => {
            aligned.extend_from_slice(body);
            let v2 = rkyv::from_bytes::<SnapshotV2, rkyv::rancor::Error>(&aligned).ok()?;
            let producers = v2.producers.into_iter().map(|p| {
                entry(
                    p.producer_id,
                    p.epoch,
                    p.batches,
                    p.last_update_ms,
                    p.txn_first_offset,
                )
            });
            Some(Snapshot {
                offset: v2.offset,
                producers: producers.collect(),
            })
        }
        Some(_) => None,
        None => {
            aligned.extend_from_slice(raw);
            let v1 = rkyv::from_bytes::<SnapshotV1, rkyv::rancor::Error>(&aligned).ok()?;
            let producers = v1
                .producers
                .into_iter()
                .map(|p| entry(p.producer_id, p.epoch, p.batches, p.last_update_ms, None));
            Some(Snapshot {
                offset: v1.offset,
                producers: producers.collect(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset,
            size_bytes: 100,
            partition_leader_epoch: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn sequence_rules() {
        let mut t = ProducerTable::default();
        assert_eq!(t.check(&h(7, 0, 3, 1, 0)), Ok(Verdict::Append));
        assert_eq!(t.check(&h(7, 0, 0, 3, 0)), Ok(Verdict::Append));
        t.record(&h(7, 0, 0, 3, 10), 0);
        assert_eq!(
            t.check(&h(7, 0, 0, 3, 0)),
            Ok(Verdict::Duplicate { base_offset: 10 })
        );
        assert_eq!(
            t.check(&h(7, 0, 4, 1, 0)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(t.check(&h(7, 0, 3, 2, 0)), Ok(Verdict::Append));
        t.record(&h(7, 0, 3, 2, 13), 0);
        // An epoch bump restarts at 0; then the old epoch is fenced.
        assert_eq!(
            t.check(&h(7, 1, 5, 1, 0)),
            Err(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(t.check(&h(7, 1, 0, 1, 0)), Ok(Verdict::Append));
        t.record(&h(7, 1, 0, 1, 15), 0);
        assert_eq!(
            t.check(&h(7, 0, 5, 1, 0)),
            Err(ResponseError::InvalidProducerEpoch)
        );
    }

    #[test]
    fn keeps_five_batches_and_round_trips() {
        let mut t = ProducerTable::default();
        for i in 0..8 {
            t.record(&h(1, 0, i, 1, 100 + i as i64), i as i64);
        }
        assert_eq!(
            t.check(&h(1, 0, 2, 1, 0)),
            Err(ResponseError::OutOfOrderSequenceNumber),
            "forgotten: older than 5"
        );
        assert_eq!(
            t.check(&h(1, 0, 3, 1, 0)),
            Ok(Verdict::Duplicate { base_offset: 103 })
        );
        let snap = Snapshot {
            offset: 108,
            producers: t.to_entries(),
        };
        let back = decode_snapshot(&encode_snapshot(&snap)).unwrap();
        assert_eq!(ProducerTable::from_entries(back.producers), t);
        assert_eq!(t.expire(1000, 500), 1);
        assert!(t.is_empty());
    }

    fn txn(pid: i64, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
        BatchHeader {
            attributes: crate::protocol::batch::ATTR_TRANSACTIONAL,
            ..h(pid, 0, seq, count, base_offset)
        }
    }

    fn marker(pid: i64, epoch: i16, offset: i64) -> BatchHeader {
        BatchHeader {
            attributes: crate::protocol::batch::ATTR_TRANSACTIONAL
                | crate::protocol::batch::ATTR_CONTROL,
            base_sequence: -1,
            ..h(pid, epoch, -1, 1, offset)
        }
    }

    #[test]
    fn ongoing_transactions_hold_the_first_unstable_offset() {
        let mut t = ProducerTable::default();
        t.record(&h(1, 0, 0, 2, 0), 0);
        assert_eq!(
            t.first_unstable_offset(),
            None,
            "idempotent, not transactional"
        );
        t.record(&txn(2, 0, 2, 2), 0);
        t.record(&txn(3, 0, 1, 4), 0);
        t.record(&txn(2, 2, 1, 5), 0);
        assert_eq!(t.first_unstable_offset(), Some(2));
        assert_eq!(t.ongoing().collect::<Vec<_>>(), vec![(2, 2), (3, 4)]);
        // The marker ends producer 2's transaction; the marker itself is no sequenced batch.
        t.record(&marker(2, 0, 6), 0);
        assert_eq!(t.first_unstable_offset(), Some(4));
        assert_eq!(t.check(&txn(2, 3, 1, 0)), Ok(Verdict::Append));
        assert_eq!(
            t.end_txn(3, 1, 0),
            Some(4),
            "a bumped epoch from the coordinator"
        );
        assert_eq!(t.first_unstable_offset(), None);
        assert_eq!(t.end_txn(3, 1, 0), None, "nothing ongoing");
        // A transaction begun in a truncated tail is gone with it; one begun before stays.
        t.record(&txn(2, 3, 1, 7), 0);
        t.record(
            &BatchHeader {
                producer_epoch: 1,
                ..txn(3, 0, 1, 9)
            },
            0,
        );
        t.truncate(8);
        assert_eq!(t.ongoing().collect::<Vec<_>>(), vec![(2, 7)]);
        assert_eq!(
            t.expire(10_000, 1),
            1,
            "producer 1 goes (3 went with the truncated tail); 2 is in a transaction"
        );
        assert_eq!(t.len(), 1);
        let snap = Snapshot {
            offset: 8,
            producers: t.to_entries(),
        };
        let back = decode_snapshot(&encode_snapshot(&snap)).unwrap();
        assert_eq!(
            ProducerTable::from_entries(back.producers).first_unstable_offset(),
            Some(7)
        );
    }

    /// A timeout's abort bumps the epoch and writes a marker to every partition of the
    /// transaction, also those the producer's records have not reached yet: a record verified
    /// before the abort and written after it is fenced, not the start of a transaction no
    /// coordinator will end (found by the simulator).
    #[test]
    fn a_marker_makes_its_producer_known_so_that_a_late_older_write_is_fenced() {
        let mut t = ProducerTable::default();
        assert_eq!(t.end_txn(9, 3, 0), None, "nothing was ongoing here");
        assert_eq!(t.epoch_of(9), Some(3));
        assert_eq!(
            t.check(&txn(9, 0, 1, 0)),
            Err(ResponseError::InvalidProducerEpoch),
            "epoch 0, written before the bump"
        );
        assert_eq!(t.first_unstable_offset(), None);
        assert_eq!(
            t.check(&BatchHeader {
                producer_epoch: 3,
                ..txn(9, 0, 1, 0)
            }),
            Ok(Verdict::Append),
            "the bumped epoch starts its sequences here"
        );
    }

    #[test]
    fn a_snapshot_of_the_first_version_still_loads() {
        let v1 = SnapshotV1 {
            offset: 5,
            producers: vec![ProducerEntryV1 {
                producer_id: 9,
                epoch: 2,
                batches: vec![BatchMeta {
                    first_sequence: 0,
                    last_sequence: 4,
                    base_offset: 0,
                    last_offset: 4,
                }],
                last_update_ms: 77,
            }],
        };
        let raw = rkyv::to_bytes::<rkyv::rancor::Error>(&v1).unwrap();
        let s = decode_snapshot(&raw).expect("a version 1 file");
        assert_eq!((s.offset, s.producers[0].producer_id), (5, 9));
        assert_eq!(s.producers[0].txn_first_offset, None);
        assert_eq!(decode_snapshot(b"SLPS\x09rest"), None, "an unknown version");
        let v2 = SnapshotV2 {
            offset: 6,
            producers: vec![ProducerEntryV2 {
                producer_id: 9,
                epoch: 2,
                batches: Vec::new(),
                last_update_ms: 77,
                txn_first_offset: Some(4),
            }],
        };
        let mut raw = b"SLPS\x02".to_vec();
        raw.extend_from_slice(&rkyv::to_bytes::<rkyv::rancor::Error>(&v2).unwrap());
        let s = decode_snapshot(&raw).expect("a version 2 file");
        let p = &s.producers[0];
        assert_eq!((p.txn_first_offset, p.coordinator_epoch), (Some(4), -1));
    }

    #[test]
    fn markers_of_an_older_coordinator_are_fenced_across_a_snapshot() {
        let mut t = ProducerTable::default();
        assert_eq!(t.check_marker(2, 0), Ok(()), "an unknown producer");
        t.record(&txn(2, 0, 1, 4), 0);
        t.record(&marker(2, 0, 5), 0);
        t.note_coordinator_epoch(2, 3);
        assert_eq!(t.check_marker(2, 3), Ok(()));
        assert_eq!(t.check_marker(2, 4), Ok(()));
        assert_eq!(
            t.check_marker(2, 2),
            Err(ResponseError::TransactionCoordinatorFenced)
        );
        t.note_coordinator_epoch(2, 1);
        assert_eq!(
            t.check_marker(2, 2),
            Err(ResponseError::TransactionCoordinatorFenced),
            "never lowered"
        );
        let snapshot = Snapshot {
            offset: 6,
            producers: t.to_entries(),
        };
        let back = decode_snapshot(&encode_snapshot(&snapshot)).unwrap();
        let t = ProducerTable::from_entries(back.producers);
        assert_eq!(
            t.check_marker(2, 2),
            Err(ResponseError::TransactionCoordinatorFenced)
        );
        // Recovery replays a marker's coordinator epoch from the log.
        let replayed = rebuild(None, 10, &[(txn(2, 0, 1, 4), -1), (marker(2, 0, 5), 7)], 0);
        assert_eq!(
            replayed.check_marker(2, 6),
            Err(ResponseError::TransactionCoordinatorFenced)
        );
    }
}
