//! Cleaning a compacted partition: when its closed segments are dirty enough
//! (`min.cleanable.dirty.ratio`), the latest record of each key is kept (see
//! storage/compaction.rs for the rules). The shard runs a pass over its compacted partitions
//! every `log.cleaner_interval_ms`.
//!
//! Reading, learning keys and writing the compacted copies run without the append lock: they
//! touch only closed segments below the high watermark, which appends never change. Only each
//! swap takes the lock, and checks the segment is still the one that was read.
//!
//! ## Scheduling and the swap
//!
//! Each shard looks at its `cleanup.policy=compact` partitions every `log.cleaner.backoff.ms`
//! (`shard/housekeeping.rs`; the config file's `log.cleaner_interval_ms` unless changed
//! dynamically). The pass considers the closed segments wholly below the last stable offset (so
//! every transaction in them has ended), up to the first one younger than `min.compaction.lag.ms`
//! (by its newest record). A partition is cleaned when those that are new since its last cleaning
//! (`PartitionLog::cleaned_to`, in memory, so the first pass after a start cleans everything) are
//! at least `min.cleanable.dirty.ratio` of the closed bytes, or when one of them is older than
//! `max.compaction.lag.ms`. Keyless records never reach a compacted topic: appends refuse them
//! (`partition/ingest.rs`). The pass reads those segments in chunks of whole batches, learns the
//! latest offset of every key (`storage/compaction.rs`, `KeyMap`, bounded by
//! `log.cleaner_dedupe_buffer_bytes`; a segment whose keys do not fit ends the pass before it),
//! then writes each segment's compacted copy to `<base>.log.cleaned`: batches that lose nothing are
//! copied, batches that lose some keep their header (base offset, last offset delta, timestamps,
//! producer fields) with the remaining records' bytes, a new length, count and CRC, and batches
//! that lose all go. The active segment is never touched.
//!
//! All of that runs without the append lock: closed segments below the high watermark never
//! change. Each swap takes the lock, checks the segment is still the one read (retention may have
//! deleted it), removes its index files, renames the copy over it, writes new index files and
//! syncs the directory (`PartitionLog::replace_segment`); a crash at any step leaves either
//! segment whole, and recovery removes a leftover `.cleaned` copy. In-flight fetches keep reading
//! the old file through their own descriptors. Reads skip the gaps: a fetch for an offset past
//! the last record a compacted segment holds starts at the next segment with records. Stored
//! batches may therefore span more offsets than they hold records (Kafka's rule too); produced
//! batches must still be dense. Compressed batches are kept whole and their keys not learned.
//! Transactions: the batches of an aborted transaction (the partition's aborted-transaction index
//! says which) are removed whole and their keys not learned, so an aborted value never hides a
//! committed one. A commit marker is kept whole while any batch of its transaction is; once
//! none is (all superseded) it goes like a tombstone, when its segment is older than
//! `delete.retention.ms` (Kafka's rule; an exactly-once processor's commits would otherwise leave
//! `__consumer_offsets` a marker per transaction forever). A pass reads its segments oldest
//! first and a transaction's batches precede its marker, so it has seen them all by then
//! (`storage::compaction::TxnsKept`). An abort marker goes the same way (its transaction's
//! batches are always removed), and its entry in the aborted-transaction index with it: a
//! read_committed reader told of an aborted transaction skips the producer's batches until its
//! abort marker, so an entry must never outlive its marker. The swap writes the index without
//! those entries aside first (`aborted-transactions.<base>.next`, synced), renames the compacted
//! segment over the old one (the commit point), then renames the index into place; recovery
//! adopts a leftover `.next` whose segment copy is gone and drops one whose copy is still there
//! (`txn_index::settle_swaps`), so the index and the segment's markers always agree.
//! Tombstones stay while they are the latest record of their key, until their segment's newest
//! record is older than `delete.retention.ms` (1 day): then the key goes entirely.

use super::env::Environment;
use super::fifo_lock::FifoLock;
use super::txn::StableBound;
use crate::protocol::batch;
use crate::storage::compaction::{self, Aborted, Cleaning, Compacted, KeyMap, TxnsKept};
use crate::storage::log::{create_file, PartitionLog};
use crate::storage::recovery;
use crate::storage::segment::{self, SegmentMeta};
use crate::storage::segment_file::SegmentFile;
use crate::storage::txn_index::AbortedTxn;
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;

/// Bytes of a segment read at a time.
const CHUNK_BYTES: u64 = 8 * 1024 * 1024;

/// A compacted topic's cleaning settings.
#[derive(Debug, Clone, Copy)]
pub struct CleanPolicy {
    pub min_dirty_ratio: f64,
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment younger than this is not cleaned yet (nor any after
    /// it, so what is cleaned stays a prefix of the log).
    pub min_lag_ms: i64,
    /// `max.compaction.lag.ms`: a dirty segment older than this is cleaned whatever the
    /// dirty ratio.
    pub max_lag_ms: i64,
    /// Memory for the pass's key map (`log.cleaner_dedupe_buffer_bytes`).
    pub dedupe_buffer_bytes: usize,
}

/// A closed segment as the pass found it.
struct Closed {
    base_offset: i64,
    size_bytes: u64,
    created_ms: u64,
    /// Its newest record's timestamp (-1: none), for `delete.retention.ms`.
    max_timestamp: i64,
    file: Rc<SegmentFile>,
}

impl Closed {
    /// Whether the segment is older than `age_ms` (by its newest record, or its creation).
    fn past(&self, age_ms: i64, now_ms: u64) -> bool {
        segment::age_ms(self.max_timestamp, self.created_ms, now_ms) > age_ms
    }
}

/// What a pass found to clean: the closed segments below the last stable offset, where the
/// dirty part (new since the last pass) starts, and the aborted transactions.
struct Survey {
    closed: Vec<Closed>,
    aborted: Vec<AbortedTxn>,
    cleaned_to: i64,
    dir: PathBuf,
    index_interval_bytes: u32,
}

/// The parts of a partition that cleaning works on (`Partition::compaction`).
pub struct Compaction<'a> {
    name: &'a str,
    log: &'a RefCell<PartitionLog>,
    append_lock: &'a FifoLock,
    stable: &'a StableBound,
    env: &'a Environment,
}

impl<'a> Compaction<'a> {
    pub fn new(
        name: &'a str,
        log: &'a RefCell<PartitionLog>,
        append_lock: &'a FifoLock,
        stable: &'a StableBound,
        env: &'a Environment,
    ) -> Compaction<'a> {
        Compaction {
            name,
            log,
            append_lock,
            stable,
            env,
        }
    }

    /// One cleaning pass, if the closed segments are dirty enough. Storage errors are logged
    /// (rate limited) and counted; the next pass tries again.
    pub async fn compact(&self, policy: CleanPolicy) {
        if let Err(e) = self.try_compact(policy).await {
            self.env.storage_error(self.name, "compaction", &e);
        }
    }

    async fn try_compact(&self, policy: CleanPolicy) -> std::io::Result<()> {
        let now_ms = self.env.clock.wall_ms();
        let Some(survey) = self.survey(policy.min_lag_ms, now_ms) else {
            return Ok(());
        };
        let total: u64 = survey.closed.iter().map(|c| c.size_bytes).sum();
        let dirty = || {
            survey
                .closed
                .iter()
                .filter(|c| c.base_offset >= survey.cleaned_to)
        };
        let dirty_bytes: u64 = dirty().map(|c| c.size_bytes).sum();
        let overdue = dirty().any(|c| c.past(policy.max_lag_ms, now_ms));
        let dirty_enough = dirty_bytes as f64 >= policy.min_dirty_ratio * total as f64;
        if dirty_bytes == 0 || !(dirty_enough || overdue) {
            return Ok(());
        }
        let aborted = Aborted(&survey.aborted);
        let budget_bytes = policy.dedupe_buffer_bytes;
        let (map, covered) = learn_keys(&survey.closed, aborted, budget_bytes).await?;
        if covered == 0 {
            log::warn!(
                "partition {}: the keys of segment {} do not fit log.cleaner_dedupe_buffer_bytes; not compacted",
                self.name,
                survey.closed[0].base_offset
            );
        }
        let done = self.rewrite(&survey, covered, &map, policy).await?;
        let next_dirty = self.dirty_start(&survey, covered);
        self.log.borrow_mut().cleaned_to = next_dirty;
        crate::metrics::add(
            &self.env.metrics.compaction_records_removed,
            done.records_removed,
        );
        if done != Compacted::default() {
            log::info!(
                "partition {}: compaction removed {} records (superseded, or expired tombstones; {} whole batches, {} of them transaction markers) below offset {next_dirty}",
                self.name,
                done.records_removed,
                done.batches_removed,
                done.markers_removed
            );
        }
        Ok(())
    }

    /// The closed segments wholly below the last stable offset (so every transaction in them
    /// has ended), up to the first younger than `min_lag_ms`; None when the log is offline.
    fn survey(&self, min_lag_ms: i64, now_ms: u64) -> Option<Survey> {
        let log = self.log.borrow();
        if log.failed {
            return None;
        }
        let lso = super::txn::last_stable_offset(&log);
        let closed = log
            .segments
            .windows(2)
            .take_while(|w| w[1].meta.base_offset <= lso)
            .map(|w| Closed {
                base_offset: w[0].meta.base_offset,
                size_bytes: w[0].meta.size_bytes,
                created_ms: w[0].meta.created_ms,
                max_timestamp: w[0].meta.max_timestamp,
                file: w[0].file.clone(),
            })
            .take_while(|c| min_lag_ms <= 0 || c.past(min_lag_ms - 1, now_ms))
            .collect();
        Some(Survey {
            closed,
            aborted: log.aborted.clone(),
            cleaned_to: log.cleaned_to,
            dir: log.dir.clone(),
            index_interval_bytes: log.settings.index_interval_bytes,
        })
    }

    /// Writes the compacted copy of each of the first `covered` closed segments and swaps it in
    /// under the append lock.
    async fn rewrite(
        &self,
        survey: &Survey,
        covered: usize,
        map: &KeyMap,
        policy: CleanPolicy,
    ) -> std::io::Result<Compacted> {
        let mut done = Compacted::default();
        // Oldest segment first: a transaction's batches are seen before its marker.
        let mut txns = TxnsKept::default();
        for c in &survey.closed[..covered] {
            let cleaned = recovery::cleaned_path(&survey.dir, c.base_offset);
            let mut cleaning = Cleaning {
                map,
                aborted: Aborted(&survey.aborted),
                past_delete_retention: c.past(policy.delete_retention_ms, self.env.clock.wall_ms()),
                txns: &mut txns,
                aborts_removed: Vec::new(),
            };
            let interval = survey.index_interval_bytes;
            let compacted = write_compacted(c, &mut cleaning, &cleaned, interval).await?;
            let Some((meta, segment_done)) = compacted else {
                continue; // nothing to remove in this one
            };
            // Under the append lock, so that no abort's index entry is appended meanwhile.
            let _turn = self.append_lock.lock().await;
            // The journal must not replay the old segment's bytes over the cleaned copy.
            let _journal = self.env.fence_journal().await?;
            let removed = &cleaning.aborts_removed;
            let replaced =
                PartitionLog::replace_segment(self.log, c.size_bytes, &cleaned, meta, removed)
                    .await?;
            // The LSO's cached place lies above the cleaned segments; forgotten anyway, as a
            // swapped segment's byte positions are not its old ones.
            self.stable.forget();
            if replaced {
                done += segment_done;
            }
        }
        Ok(done)
    }

    /// Where the dirty part starts after cleaning the first `covered` closed segments.
    fn dirty_start(&self, survey: &Survey, covered: usize) -> i64 {
        let closed = &survey.closed;
        match (
            covered.checked_sub(1).map(|i| &closed[i]),
            closed.get(covered),
        ) {
            (_, Some(first_left)) => first_left.base_offset,
            (Some(last), None) => {
                let log = self.log.borrow();
                log.segments
                    .iter()
                    .map(|s| s.meta.base_offset)
                    .find(|&b| b > last.base_offset)
                    .unwrap_or_else(|| log.log_end_offset())
            }
            (None, None) => survey.cleaned_to,
        }
    }
}

/// Learns the keys of the closed segments, oldest first; a segment whose keys do not all fit
/// ends the pass there. Returns the map and how many segments it covers.
async fn learn_keys(
    closed: &[Closed],
    aborted: Aborted<'_>,
    budget_bytes: usize,
) -> std::io::Result<(KeyMap, usize)> {
    let mut map = KeyMap::new(budget_bytes);
    let mut covered = 0;
    for c in closed {
        let mut at = 0;
        while at < c.size_bytes {
            let chunk = read_chunk(&c.file, at, c.size_bytes).await?;
            if !map.learn(&chunk, aborted) {
                return Ok((map, covered));
            }
            at += chunk.len() as u64;
        }
        covered += 1;
    }
    Ok((map, covered))
}

/// Writes the compacted copy of a closed segment to `path` and syncs it; returns its
/// bookkeeping and what was removed, or None (and no file) when nothing would be.
async fn write_compacted(
    c: &Closed,
    cleaning: &mut Cleaning<'_>,
    path: &std::path::Path,
    index_interval_bytes: u32,
) -> std::io::Result<Option<(SegmentMeta, Compacted)>> {
    let mut out = Vec::new();
    let mut done = Compacted::default();
    let mut meta = SegmentMeta::new(c.base_offset, c.created_ms);
    let file = create_file(path).await?;
    let mut at = 0;
    while at < c.size_bytes {
        let chunk = read_chunk(&c.file, at, c.size_bytes).await?;
        at += chunk.len() as u64;
        out.clear();
        done += compaction::compact(&chunk, cleaning, &mut out);
        let mut pos = 0;
        while pos < out.len() {
            let size = batch::peek_size(&out[pos..]).expect("compact writes whole batches");
            let header = batch::parse_header(&out[pos..pos + size])
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
            meta.note_batch(&header, meta.size_bytes, index_interval_bytes);
            pos += size;
        }
        if !out.is_empty() {
            let len = out.len();
            let position = meta.size_bytes - len as u64;
            let written = file
                .write_at(std::mem::take(&mut out), position)
                .await
                .map_err(std::io::Error::from)?;
            if written != len {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
        }
    }
    if done == Compacted::default() {
        file.close().await.map_err(std::io::Error::from)?;
        std::fs::remove_file(path)?;
        return Ok(None);
    }
    file.fdatasync().await.map_err(std::io::Error::from)?;
    file.close().await.map_err(std::io::Error::from)?;
    Ok(Some((meta, done)))
}

/// Whole batches of a segment from byte `at` (at most a chunk, at least one batch).
async fn read_chunk(file: &SegmentFile, at: u64, size_bytes: u64) -> std::io::Result<Vec<u8>> {
    let want = CHUNK_BYTES.min(size_bytes - at) as usize;
    let data = file.read_at(at, want).await?;
    let whole = compaction::whole_batches_len(&data);
    if whole > 0 {
        return Ok(data[..whole].to_vec());
    }
    // A batch larger than a chunk: read exactly it.
    let size = batch::peek_size(&data)
        .filter(|&s| at + s as u64 <= size_bytes)
        .ok_or_else(|| std::io::Error::other(format!("no whole batch at byte {at}")))?;
    let data = file.read_at(at, size).await?;
    Ok(data.to_vec())
}
