//! Log compaction (`cleanup.policy=compact`): in the closed segments, a record whose key has a
//! later record there is removed, so that the log keeps at least the last value of every key.
//! Offsets never change: the records left keep theirs, and a consumer reading across the gaps
//! gets the next record that is left.
//!
//! Pure: `KeyMap` learns the latest offset of each key from segment bytes, `compact` rewrites
//! segment bytes given that map. The partition (`partition/compaction.rs`) does the reading,
//! writing and swapping of files.
//!
//! What is kept whole, so that nothing is lost that compaction cannot judge:
//! - compressed batches (their records would have to be decompressed and compressed again);
//!   their keys are not learned either, so an older uncompressed record whose newer value sits
//!   in a compressed batch stays too;
//! - records without a key;
//! - tombstones (null values) that are the latest for their key, like any latest record, until
//!   their segment is older than the topic's `delete.retention.ms`: then the key goes entirely
//!   (consumers had that long to see the delete).
//!
//! A batch whose records all go is removed whole, also an idempotent producer's (Kafka keeps
//! those as empty batches to remember the producer's last sequence): here producer state lives
//! in snapshots and is rebuilt from the active segment, which compaction never touches.
//!
//! Transactions (Kafka's cleaner rules): only segments below the last stable offset are
//! cleaned, so every transaction there has ended. An aborted transaction's batches are removed
//! whole and their keys are not learned (an aborted value never hides a committed one). A
//! commit marker is kept whole while any batch of its transaction is kept: a reader and
//! recovery need it to see the transaction end. Once none is (all superseded), it goes like a
//! tombstone, when its segment is older than `delete.retention.ms` (consumers had that long to
//! read past it). An abort marker goes the same way (its transaction's batches were all
//! removed), and with it the transaction's entry in the aborted-transaction index
//! (`Cleaning::aborts_removed`; the swap rewrites the index): a read_committed reader told of
//! an aborted transaction skips the producer's batches until its abort marker, so an entry
//! must never outlive its marker. A pass cleans a prefix of the log, oldest first, and a
//! transaction's batches come before its marker, so the pass has seen all of them when it
//! reaches the marker (`TxnsKept`).

use crate::protocol::batch::{self, BatchHeader, HEADER_BYTES, LOG_OVERHEAD};
use crate::storage::txn_index::AbortedTxn;
use std::collections::{HashMap, HashSet};

/// The partition's aborted transactions (its index, ordered by marker offset), to tell a
/// batch of an aborted transaction from one of a committed one.
#[derive(Clone, Copy)]
pub struct Aborted<'a>(pub &'a [AbortedTxn]);

impl Aborted<'_> {
    /// Whether `h` is a data batch of an aborted transaction. A producer's transactions do
    /// not overlap, so the producer's first entry whose marker lies at or after the batch is
    /// the only one that can hold it.
    fn holds(&self, h: &BatchHeader) -> bool {
        if !h.is_transactional() || h.is_control() {
            return false;
        }
        let from = self.0.partition_point(|e| e.last_offset < h.base_offset);
        self.0[from..]
            .iter()
            .find(|e| e.producer_id == h.producer_id)
            .is_some_and(|e| e.first_offset <= h.base_offset)
    }
}

/// What compaction does with a whole batch (its header `h`) before looking at its records.
fn kept_whole_or_removed(h: Option<&BatchHeader>, aborted: Aborted<'_>) -> Option<bool> {
    let h = h?;
    if h.is_control() {
        return Some(true);
    }
    aborted.holds(h).then_some(false)
}

/// What a pass carries from batch to batch and segment to segment, oldest first: the
/// producers a batch of whose present transaction (the one their next marker ends) was kept.
/// A producer leaves it at its marker, so it holds at most the producers whose transactions'
/// batches the pass has read and not yet their markers.
#[derive(Default)]
pub struct TxnsKept(HashSet<i64>);

impl TxnsKept {
    /// Notes a kept batch `h`, if it is a transaction's.
    fn note(&mut self, h: &BatchHeader) {
        if h.is_transactional() && !h.is_control() {
            self.0.insert(h.producer_id);
        }
    }

    /// Whether the transaction that `producer_id`'s marker ends kept a batch; the producer's
    /// next transaction starts with none.
    fn take(&mut self, producer_id: i64) -> bool {
        self.0.remove(&producer_id)
    }
}

/// Bytes a key costs in the map beyond its own length (hash table slot, Vec header, offset).
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// The latest offset of each key seen, within a memory budget.
pub struct KeyMap {
    latest: HashMap<Vec<u8>, i64>,
    bytes: usize,
    budget_bytes: usize,
}

impl KeyMap {
    pub fn new(budget_bytes: usize) -> KeyMap {
        KeyMap {
            latest: HashMap::new(),
            bytes: 0,
            budget_bytes,
        }
    }

    /// Learns the keys of a segment's whole batches. False if the budget ran out: the map then
    /// holds only part of this segment, and must not be used to compact it or later segments.
    pub fn learn(&mut self, data: &[u8], aborted: Aborted<'_>) -> bool {
        for b in Batches(data) {
            let header = batch::parse_header(b).ok();
            if kept_whole_or_removed(header.as_ref(), aborted).is_some() {
                continue; // a marker, or an aborted transaction's: its keys do not count
            }
            let Some(records) = batch::records(b) else {
                continue; // compressed (or unreadable): kept whole, keys not learned
            };
            for r in records {
                let Some(key) = r.key else { continue };
                match self.latest.get_mut(key) {
                    Some(offset) => *offset = r.offset,
                    None => {
                        self.bytes += key.len() + ENTRY_OVERHEAD_BYTES;
                        if self.bytes > self.budget_bytes {
                            return false;
                        }
                        self.latest.insert(key.to_vec(), r.offset);
                    }
                }
            }
        }
        true
    }

    /// Whether the record at `offset` with `key` is superseded by a later one.
    fn superseded(&self, key: &[u8], offset: i64) -> bool {
        self.latest.get(key).is_some_and(|&latest| latest > offset)
    }
}

/// What compaction did to one segment.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    pub records_removed: u64,
    pub batches_removed: u64,
    /// Of the batches removed, transaction markers.
    pub markers_removed: u64,
}

impl std::ops::AddAssign for Compacted {
    fn add_assign(&mut self, other: Compacted) {
        self.records_removed += other.records_removed;
        self.batches_removed += other.batches_removed;
        self.markers_removed += other.markers_removed;
    }
}

/// How a segment is cleaned: the keys' latest offsets, the aborted transactions, whether the
/// segment is past `delete.retention.ms` (its tombstones, and its markers whose transactions
/// kept nothing, go), and what the pass has kept of transactions so far. Out: the offsets of
/// the abort markers removed, whose index entries must go with them.
pub struct Cleaning<'a> {
    pub map: &'a KeyMap,
    pub aborted: Aborted<'a>,
    pub past_delete_retention: bool,
    pub txns: &'a mut TxnsKept,
    pub aborts_removed: Vec<i64>,
}

impl Cleaning<'_> {
    /// Whether the marker `b` (header `h`) stays: it goes past `delete.retention.ms` once its
    /// transaction kept nothing, an abort marker noting its offset for its index entry.
    fn marker_kept(&mut self, b: &[u8], h: Option<&BatchHeader>) -> bool {
        let kept_some = h.is_none_or(|h| self.txns.take(h.producer_id));
        if !self.past_delete_retention || kept_some {
            return true;
        }
        match (crate::protocol::control::commits(b), h) {
            (Some(commit), Some(h)) => {
                if !commit {
                    self.aborts_removed.push(h.base_offset);
                }
                false
            }
            _ => true,
        }
    }
}

/// Appends to `out` the segment bytes `data` less the records `map` says are superseded, less
/// the batches of aborted transactions, and (past `delete.retention.ms`) less its tombstones
/// and the markers of transactions nothing is kept of. Batches are rewritten only when they
/// lose records: same header (base offset, last offset delta, timestamps, producer fields),
/// new length, record count and CRC.
pub fn compact(data: &[u8], c: &mut Cleaning<'_>, out: &mut Vec<u8>) -> Compacted {
    let (map, aborted, drop_tombstones) = (c.map, c.aborted, c.past_delete_retention);
    let mut done = Compacted::default();
    for b in Batches(data) {
        let header = batch::parse_header(b).ok();
        match kept_whole_or_removed(header.as_ref(), aborted) {
            Some(true) => {
                if c.marker_kept(b, header.as_ref()) {
                    out.extend_from_slice(b);
                } else {
                    done.batches_removed += 1;
                    done.markers_removed += 1;
                }
                continue;
            }
            Some(false) => {
                done.records_removed += header.map_or(0, |h| h.record_count.max(0)) as u64;
                done.batches_removed += 1;
                continue;
            }
            None => {}
        }
        let Some(records) = batch::records(b) else {
            header.inspect(|h| c.txns.note(h));
            out.extend_from_slice(b);
            continue;
        };
        let total = records.len();
        let kept: Vec<&[u8]> = records
            .iter()
            .filter(|r| match r.key {
                None => true,
                Some(k) => {
                    let expired_tombstone = drop_tombstones && r.value.is_none();
                    !(map.superseded(k, r.offset) || expired_tombstone)
                }
            })
            .map(|r| r.bytes)
            .collect();
        done.records_removed += (total - kept.len()) as u64;
        if !kept.is_empty() {
            header.inspect(|h| c.txns.note(h));
        }
        if kept.len() == total {
            out.extend_from_slice(b);
            continue;
        }
        if kept.is_empty() {
            done.batches_removed += 1;
            continue;
        }
        let start = out.len();
        out.extend_from_slice(&b[..HEADER_BYTES]);
        for r in &kept {
            out.extend_from_slice(r);
        }
        let rewritten = &mut out[start..];
        let length = (rewritten.len() - LOG_OVERHEAD) as i32;
        rewritten[8..12].copy_from_slice(&length.to_be_bytes());
        rewritten[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
        batch::seal(rewritten);
    }
    done
}

/// The whole batches of segment bytes, in order; stops at anything that is not one (segments
/// hold whole, validated batches, so only a bug or disk corruption stops it early).
struct Batches<'a>(&'a [u8]);

impl<'a> Iterator for Batches<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let size = batch::peek_size(self.0).filter(|&s| s <= self.0.len())?;
        let (b, rest) = self.0.split_at(size);
        self.0 = rest;
        Some(b)
    }
}

/// The number of whole batches at the start of `data`, and the bytes they take: a chunk read
/// from a segment may end inside a batch.
pub fn whole_batches_len(data: &[u8]) -> usize {
    let mut at = 0;
    while let Some(size) = batch::peek_size(&data[at..]).filter(|&s| s <= data.len() - at) {
        at += size;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::batch::build;
    use crate::protocol::control;

    const NONE: Aborted<'static> = Aborted(&[]);

    /// `compact` of one segment in a pass of its own.
    fn compact_alone(
        data: &[u8],
        map: &KeyMap,
        aborted: Aborted<'_>,
        past_delete_retention: bool,
        out: &mut Vec<u8>,
    ) -> Compacted {
        let mut txns = TxnsKept::default();
        let mut cleaning = Cleaning {
            map,
            aborted,
            past_delete_retention,
            txns: &mut txns,
            aborts_removed: Vec::new(),
        };
        compact(data, &mut cleaning, out)
    }

    /// (base offset, is a marker) of each batch left.
    fn batches_left(data: &[u8]) -> Vec<(i64, bool)> {
        Batches(data)
            .map(|b| batch::parse_header(b).unwrap())
            .map(|h| (h.base_offset, h.is_control()))
            .collect()
    }

    /// Batches of (key, value) records, given base offsets in turn.
    fn segment(batches: &[&[(Option<&str>, Option<&str>)]]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut next = 0i64;
        for records in batches {
            let kv: Vec<_> = records
                .iter()
                .map(|(k, v)| (k.map(str::as_bytes), v.map(str::as_bytes)))
                .collect();
            let mut b = build(&kv, 1000);
            batch::assign(&mut b, next, 0, None);
            next += records.len() as i64;
            out.extend(b);
        }
        out
    }

    /// (offset, key, value) of every record left, checking each batch's CRC.
    fn contents(data: &[u8]) -> Vec<(i64, Option<String>, Option<String>)> {
        let s = |b: Option<&[u8]>| b.map(|b| String::from_utf8(b.to_vec()).unwrap());
        Batches(data)
            .flat_map(|b| {
                batch::validate(b).expect("a valid batch");
                batch::records(b)
                    .unwrap()
                    .into_iter()
                    .map(|r| (r.offset, s(r.key), s(r.value)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    #[test]
    fn an_aborted_transaction_is_removed_and_hides_nothing_then_its_marker_goes() {
        let kv = |k: &'static str, v: &'static str| [(Some(k.as_bytes()), Some(v.as_bytes()))];
        let mut batches = [
            build(&kv("k", "committed-old"), 1000),
            control::transactional(&kv("k", "committed"), 7, 0, 1000), // committed below
            control::transactional(&kv("k", "aborted"), 8, 0, 1000),   // aborted below
            control::marker(8, 0, false, 0, 1000),
            control::marker(7, 0, true, 0, 1000),
        ];
        let mut data = Vec::new();
        for (offset, b) in batches.iter_mut().enumerate() {
            batch::assign(b, offset as i64, 0, None);
            data.extend_from_slice(b);
        }
        let index = [AbortedTxn {
            producer_id: 8,
            first_offset: 2,
            last_offset: 3,
            last_stable_offset: 4,
        }];
        let aborted = Aborted(&index);
        let mut map = KeyMap::new(1 << 20);
        assert!(map.learn(&data, aborted));
        let mut out = Vec::new();
        let done = compact_alone(&data, &map, aborted, false, &mut out);
        assert_eq!(
            done,
            Compacted {
                records_removed: 2,
                batches_removed: 2,
                markers_removed: 0
            }
        );
        assert_eq!(batches_left(&out), vec![(1, false), (3, true), (4, true)]);
        // Past delete.retention.ms: the abort marker goes (its transaction kept nothing), and
        // its index entry is to go with it; the commit marker stays while its record does.
        let mut later = Vec::new();
        let mut txns = TxnsKept::default();
        let mut cleaning = Cleaning {
            map: &map,
            aborted,
            past_delete_retention: true,
            txns: &mut txns,
            aborts_removed: Vec::new(),
        };
        let done = compact(&out, &mut cleaning, &mut later);
        assert_eq!(
            (
                done.batches_removed,
                done.markers_removed,
                done.records_removed
            ),
            (1, 1, 0)
        );
        assert_eq!(cleaning.aborts_removed, vec![3]);
        assert_eq!(batches_left(&later), vec![(1, false), (4, true)]);
    }

    #[test]
    fn a_marker_goes_once_every_record_of_its_transaction_is_superseded() {
        let kv = |k: &'static str, v: &'static str| [(Some(k.as_bytes()), Some(v.as_bytes()))];
        // Producer 7 commits k twice in two transactions, then producer 9 writes k untransacted.
        let mut batches = [
            control::transactional(&kv("k", "first"), 7, 0, 1000),
            control::marker(7, 0, true, 0, 1000),
            control::transactional(&kv("k", "second"), 7, 0, 1000),
            control::marker(7, 0, true, 0, 1000),
            build(&kv("j", "other"), 1000),
        ];
        let mut segments = [Vec::new(), Vec::new()];
        for (offset, b) in batches.iter_mut().enumerate() {
            batch::assign(b, offset as i64, 0, None);
            segments[usize::from(offset >= 2)].extend_from_slice(b);
        }
        let mut map = KeyMap::new(1 << 20);
        assert!(segments.iter().all(|s| map.learn(s, NONE)));
        // One pass over both segments, oldest first: the first transaction's record is
        // superseded by the second's, so its marker goes; the second's record and marker stay.
        let mut txns = TxnsKept::default();
        let mut outs = [Vec::new(), Vec::new()];
        for (segment, out) in segments.iter().zip(outs.iter_mut()) {
            let mut cleaning = Cleaning {
                map: &map,
                aborted: NONE,
                past_delete_retention: true,
                txns: &mut txns,
                aborts_removed: Vec::new(),
            };
            compact(segment, &mut cleaning, out);
        }
        assert_eq!(batches_left(&outs[0]), vec![]);
        assert_eq!(
            batches_left(&outs[1]),
            vec![(2, false), (3, true), (4, false)]
        );
        assert!(
            txns.0.is_empty(),
            "every transaction seen ended at its marker"
        );
        // Not yet past delete.retention.ms: the marker stays.
        let mut out = Vec::new();
        compact_alone(&segments[0], &map, NONE, false, &mut out);
        assert_eq!(batches_left(&out), vec![(1, true)]);
    }

    #[test]
    fn keeps_the_latest_record_of_each_key_at_its_offset() {
        let data = segment(&[
            &[(Some("a"), Some("a1")), (Some("b"), Some("b1"))],
            &[(Some("a"), Some("a2")), (None, Some("no key"))],
            &[(Some("b"), None), (Some("c"), Some("c1"))],
        ]);
        let mut map = KeyMap::new(1 << 20);
        assert!(map.learn(&data, NONE));
        let mut out = Vec::new();
        let done = compact_alone(&data, &map, NONE, false, &mut out);
        assert_eq!(done.records_removed, 2);
        assert_eq!(done.batches_removed, 1, "the first batch lost both records");
        let own = |s: &str| Some(s.to_string());
        assert_eq!(
            contents(&out),
            vec![
                (2, own("a"), own("a2")),
                (3, None, own("no key")),
                (4, own("b"), None), // the tombstone is b's latest
                (5, own("c"), own("c1")),
            ]
        );
        // Compacting again changes nothing.
        let mut again = Vec::new();
        assert_eq!(
            compact_alone(&out, &map, NONE, false, &mut again),
            Compacted::default()
        );
        assert_eq!(again, out);
        // Once the segment is past delete.retention.ms, the tombstone and its key go too.
        let mut gone = Vec::new();
        assert_eq!(
            compact_alone(&out, &map, NONE, true, &mut gone).records_removed,
            1
        );
        assert_eq!(
            contents(&gone),
            vec![
                (2, own("a"), own("a2")),
                (3, None, own("no key")),
                (5, own("c"), own("c1"))
            ]
        );
    }

    #[test]
    fn a_rewritten_batch_keeps_its_header_fields_and_offset_range() {
        let mut data = segment(&[&[(Some("k"), Some("1")), (Some("j"), Some("1"))]]);
        // An idempotent producer's batch, whose first record is superseded below.
        data[43..51].copy_from_slice(&7i64.to_be_bytes()); // producer id
        data[51..53].copy_from_slice(&0i16.to_be_bytes()); // producer epoch
        data[53..57].copy_from_slice(&0i32.to_be_bytes()); // base sequence
        batch::seal(&mut data);
        let mut later = segment(&[&[(Some("k"), Some("2"))]]);
        batch::assign(&mut later, 2, 0, None);
        let mut map = KeyMap::new(1 << 20);
        assert!(map.learn(&data, NONE) && map.learn(&later, NONE));
        let mut out = Vec::new();
        compact_alone(&data, &map, NONE, false, &mut out);
        let h = batch::validate(&out).unwrap();
        assert_eq!((h.record_count, h.base_offset, h.last_offset()), (1, 0, 1));
        assert_eq!((h.producer_id, h.base_sequence), (7, 0));
        let own = |s: &str| Some(s.to_string());
        assert_eq!(contents(&out), vec![(1, own("j"), own("1"))]);
    }

    #[test]
    fn a_full_map_says_so() {
        let data = segment(&[&[(Some("a"), Some("1")), (Some("b"), Some("1"))]]);
        let mut map = KeyMap::new(ENTRY_OVERHEAD_BYTES + 1);
        assert!(!map.learn(&data, NONE));
    }

    #[test]
    fn chunks_end_at_whole_batches() {
        let data = segment(&[&[(Some("a"), Some("1"))], &[(Some("b"), Some("2"))]]);
        let first = batch::peek_size(&data).unwrap();
        assert_eq!(whole_batches_len(&data), data.len());
        assert_eq!(whole_batches_len(&data[..data.len() - 1]), first);
        assert_eq!(whole_batches_len(&data[..3]), 0);
    }
}
