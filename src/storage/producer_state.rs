//! Idempotent-producer state of one partition (KIP-98, KIP-360): for each producer id, its
//! epoch and the sequence ranges and offsets of its last five batches. Pure logic: the log
//! feeds it batch headers, and it decides whether a new batch is next in sequence, a duplicate
//! of a recent one, or out of order.

use crate::protocol::batch::BatchHeader;
use kafka_protocol::ResponseError;
use std::collections::{HashMap, VecDeque};

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
}

/// What the log must do with a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it.
    Append,
    /// Already written at these offsets: answer with them and write nothing.
    Duplicate { base_offset: i64 },
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProducerTable {
    producers: HashMap<i64, (i16, VecDeque<BatchMeta>, i64)>,
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
        let last = h.last_sequence();
        match self.producers.get(&h.producer_id) {
            None => {
                if h.base_sequence == 0 {
                    Ok(Verdict::Append)
                } else {
                    Err(ResponseError::UnknownProducerId)
                }
            }
            Some((epoch, batches, _)) => {
                if h.producer_epoch < *epoch {
                    return Err(ResponseError::InvalidProducerEpoch);
                }
                if h.producer_epoch > *epoch {
                    // A bumped epoch (KIP-360) starts its sequences again at 0.
                    return if h.base_sequence == 0 {
                        Ok(Verdict::Append)
                    } else {
                        Err(ResponseError::OutOfOrderSequenceNumber)
                    };
                }
                if let Some(b) = batches
                    .iter()
                    .find(|b| b.first_sequence == h.base_sequence && b.last_sequence == last)
                {
                    return Ok(Verdict::Duplicate {
                        base_offset: b.base_offset,
                    });
                }
                match batches.back() {
                    Some(b) if h.base_sequence == next_sequence(b.last_sequence) => {
                        Ok(Verdict::Append)
                    }
                    None if h.base_sequence == 0 => Ok(Verdict::Append),
                    _ => Err(ResponseError::OutOfOrderSequenceNumber),
                }
            }
        }
    }

    /// Records a batch written at its (assigned) offsets.
    pub fn record(&mut self, h: &BatchHeader, now_ms: i64) {
        if !h.is_idempotent() {
            return;
        }
        if !self.producers.contains_key(&h.producer_id) && self.producers.len() >= MAX_PRODUCERS {
            if let Some(oldest) = self
                .producers
                .iter()
                .min_by_key(|(_, (_, _, t))| *t)
                .map(|(id, _)| *id)
            {
                self.producers.remove(&oldest);
            }
        }
        let entry = self.producers.entry(h.producer_id).or_insert((
            h.producer_epoch,
            VecDeque::new(),
            now_ms,
        ));
        if h.producer_epoch != entry.0 {
            entry.0 = h.producer_epoch;
            entry.1.clear();
        }
        entry.1.push_back(BatchMeta {
            first_sequence: h.base_sequence,
            last_sequence: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        while entry.1.len() > BATCHES_PER_PRODUCER {
            entry.1.pop_front();
        }
        entry.2 = now_ms;
    }

    /// Forgets producers idle for longer than `expiration_ms`; returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, (_, _, t)| now_ms - *t < expiration_ms);
        before - self.producers.len()
    }

    /// Forgets batches at or after `offset` (after the log was truncated there).
    pub fn truncate(&mut self, offset: i64) {
        for (_, batches, _) in self.producers.values_mut() {
            batches.retain(|b| b.last_offset < offset);
        }
        self.producers.retain(|_, (_, b, _)| !b.is_empty());
    }

    pub fn to_entries(&self) -> Vec<ProducerEntry> {
        self.producers
            .iter()
            .map(|(&id, (epoch, batches, t))| ProducerEntry {
                producer_id: id,
                epoch: *epoch,
                batches: batches.iter().copied().collect(),
                last_update_ms: *t,
            })
            .collect()
    }

    pub fn from_entries(entries: Vec<ProducerEntry>) -> ProducerTable {
        ProducerTable {
            producers: entries
                .into_iter()
                .map(|e| (e.producer_id, (e.epoch, e.batches.into(), e.last_update_ms)))
                .collect(),
        }
    }
}

/// Producer state as of a log's end after a restart: `snapshot` if it is at or below
/// `log_end` (a snapshot past a truncated tail is useless), plus the idempotent batches
/// recovery scanned past its offset, in log order.
pub fn rebuild(
    snapshot: Option<Snapshot>,
    log_end: i64,
    scanned: &[BatchHeader],
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
    for h in scanned.iter().filter(|h| h.base_offset >= from) {
        table.record(h, now_ms);
    }
    table
}

/// A snapshot file: the table as of `offset` (every batch below it is reflected).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub offset: i64,
    pub producers: Vec<ProducerEntry>,
}

pub const SNAPSHOT_FILE: &str = "producer.snapshot";

pub fn encode_snapshot(s: &Snapshot) -> Vec<u8> {
    rkyv::to_bytes::<rkyv::rancor::Error>(s)
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

pub fn decode_snapshot(raw: &[u8]) -> Option<Snapshot> {
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(raw);
    rkyv::from_bytes::<Snapshot, rkyv::rancor::Error>(&aligned).ok()
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
        assert_eq!(
            t.check(&h(7, 0, 3, 1, 0)),
            Err(ResponseError::UnknownProducerId)
        );
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
}
