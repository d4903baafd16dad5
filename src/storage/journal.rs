//! The shard journal's on-disk form, and its replay at start (the writer is
//! `partition/journal.rs`).
//!
//! Why: at moderate load every group-commit pass has a few small appends to a few partitions,
//! and each partition file cost its own fdatasync. An append's fdatasync also writes the inode
//! (the file grew), while overwriting blocks already written does not (on ext4 without a
//! journal it costs about half: `sluice probe`). So a pass copies its small appends into one
//! record each in its shard's journal, a preallocated file overwritten in place, and makes
//! them durable with one fdatasync; the segment files are synced later, together.
//!
//! Layout of `__journal/shard-N`: `CHUNKS` equal chunks, filled one after the other and then
//! from the first again. A chunk holds records from its first byte, each
//!
//! | magic u32 | crc32c u32 | run u64 | seq u32 | payload len u32 | dir len u16 | 0 u16 |
//! | topic id [16] | segment base i64 | file position u64 | dir | payload |
//!
//! little endian; the CRC covers every byte after it. `run` is random per process; `seq` counts
//! the chunks the writer began within a run. A chunk's valid records are those from its start
//! that are whole, pass their CRC and carry its first record's run and seq: the first record
//! that does not (zeros, a torn tail, leftovers of the chunk's previous fill) ends them.
//!
//! Invariants (kept by the writer, relied on here):
//! - a record's payload is the bytes `[position, position + len)` of segment `segment base` of
//!   the partition in directory `dir` of topic `topic id`, and everything before `position` in
//!   that file is durable already (synced, or in a valid record of the same or an earlier seq);
//! - no partition file changes other than by appending while a valid record covers it: before
//!   a truncation, a compacted segment's swap or a partition's removal, the writer syncs every
//!   covered file and voids the journal (zeroes each chunk's first record);
//! - the writer begins a chunk again only after syncing every file its previous records cover
//!   (it starts those syncs when it leaves the chunk, so they are done, or nearly, when it
//!   comes back: nothing waits on a whole journal's worth of segment writes at once).
//!
//! Replay (before any partition opens): every journal's chunks in seq order, each chunk's
//! valid records in order, are written into their segment files where the partition directory
//! still holds its topic and the file still exists and reaches the record's position; the
//! touched files are fdatasynced, then each journal is voided. Writing the same bytes twice is
//! harmless (a chunk already synced, a replay cut short and done again).

use super::catalog::TopicId;
use super::log::TOPIC_ID_FILE;
use super::segment::SegmentMeta;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The journals' directory under the data dir.
pub const DIR: &str = "__journal";
/// The first bytes of every record: "SLJ1".
const MAGIC: u32 = 0x314a_4c53;
pub const HEADER_BYTES: usize = 60;
/// The largest payload a record carries: larger appends are synced in their own file, where
/// one more fdatasync costs little next to writing the bytes twice.
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
/// The longest partition directory name a record carries (Kafka's topic names are ≤ 249).
const MAX_DIR_BYTES: usize = 512;
/// Chunks per journal file.
pub const CHUNKS: usize = 4;

/// Bytes of each chunk of a journal of `journal_bytes`.
pub fn chunk_bytes(journal_bytes: u64) -> u64 {
    journal_bytes / CHUNKS as u64
}

/// The journal file of shard `shard`.
pub fn path(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join(DIR).join(format!("shard-{shard}"))
}

/// What identifies the writer's current pass over the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub run: u64,
    pub seq: u32,
}

/// Where a record's payload belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    pub dir: &'a str,
    pub topic_id: TopicId,
    pub segment_base: i64,
    pub position: u64,
}

/// A valid record.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub target: Target<'a>,
    pub payload: &'a [u8],
}

/// Bytes a record of `payload_len` bytes for directory `dir` takes.
pub fn record_bytes(dir: &str, payload_len: usize) -> usize {
    HEADER_BYTES + dir.len() + payload_len
}

/// Appends a record to `out`; `fill` writes its payload of `payload_len` bytes in place (the
/// writer reads it straight from the segment file, with no copy between).
pub fn encode(
    out: &mut Vec<u8>,
    stamp: Stamp,
    target: &Target,
    payload_len: usize,
    fill: impl FnOnce(&mut [u8]) -> io::Result<()>,
) -> io::Result<()> {
    assert!(
        payload_len <= MAX_PAYLOAD_BYTES,
        "payload {payload_len} bytes"
    );
    assert!(
        !target.dir.is_empty() && target.dir.len() <= MAX_DIR_BYTES,
        "dir {:?}",
        target.dir
    );
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // the CRC, once the rest is in place
    out.extend_from_slice(&stamp.run.to_le_bytes());
    out.extend_from_slice(&stamp.seq.to_le_bytes());
    out.extend_from_slice(&(payload_len as u32).to_le_bytes());
    out.extend_from_slice(&(target.dir.len() as u16).to_le_bytes());
    out.extend_from_slice(&[0; 2]);
    out.extend_from_slice(&target.topic_id);
    out.extend_from_slice(&target.segment_base.to_le_bytes());
    out.extend_from_slice(&target.position.to_le_bytes());
    assert_eq!(out.len() - start, HEADER_BYTES, "header layout");
    out.extend_from_slice(target.dir.as_bytes());
    let payload_at = out.len();
    out.resize(payload_at + payload_len, 0);
    if let Err(e) = fill(&mut out[payload_at..]) {
        out.truncate(start);
        return Err(e);
    }
    let crc = crc32c::crc32c(&out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    Ok(())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The record at the start of `b` and its length, if one is whole and intact there.
fn parse(b: &[u8]) -> Option<(Stamp, Record<'_>, usize)> {
    if b.len() < HEADER_BYTES || u32_at(b, 0) != MAGIC {
        return None;
    }
    let payload_len = u32_at(b, 20) as usize;
    let dir_len = u16::from_le_bytes([b[24], b[25]]) as usize;
    if payload_len > MAX_PAYLOAD_BYTES || dir_len == 0 || dir_len > MAX_DIR_BYTES {
        return None;
    }
    let len = HEADER_BYTES + dir_len + payload_len;
    if b.len() < len || crc32c::crc32c(&b[8..len]) != u32_at(b, 4) {
        return None;
    }
    let dir = std::str::from_utf8(&b[HEADER_BYTES..HEADER_BYTES + dir_len]).ok()?;
    // One path component: a record never names a file outside its partition directory.
    if dir.contains('/') || dir == "." || dir == ".." {
        return None;
    }
    let stamp = Stamp {
        run: u64_at(b, 8),
        seq: u32_at(b, 16),
    };
    let target = Target {
        dir,
        topic_id: b[28..44].try_into().expect("16 bytes"),
        segment_base: u64_at(b, 44) as i64,
        position: u64_at(b, 52),
    };
    let payload = &b[HEADER_BYTES + dir_len..len];
    Some((stamp, Record { target, payload }, len))
}

/// A chunk's valid records and their stamp (see the module doc).
pub fn valid_records(chunk: &[u8]) -> (Option<Stamp>, Vec<Record<'_>>) {
    let mut records = Vec::new();
    let mut first = None;
    let mut at = 0;
    while let Some((stamp, record, len)) = parse(&chunk[at..]) {
        if *first.get_or_insert(stamp) != stamp {
            break;
        }
        records.push(record);
        at += len;
    }
    (first, records)
}

/// A journal file's valid records, its chunks in seq order.
pub fn journal_records(journal: &[u8]) -> Vec<Record<'_>> {
    let chunk = chunk_bytes(journal.len() as u64) as usize;
    if chunk == 0 {
        return Vec::new();
    }
    let mut chunks: Vec<(u32, Vec<Record>)> = journal
        .chunks_exact(chunk)
        .filter_map(|c| match valid_records(c) {
            (Some(stamp), records) => Some((stamp.seq, records)),
            (None, _) => None,
        })
        .collect();
    chunks.sort_by_key(|(seq, _)| *seq);
    chunks
        .into_iter()
        .flat_map(|(_, records)| records)
        .collect()
}

/// What a replay did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    pub records: usize,
    pub bytes: u64,
    /// Records whose partition, topic or segment is gone, or whose file ends before them.
    pub skipped: usize,
    pub files: usize,
}

/// The segment files records are written into, open once each, and each partition
/// directory's verdict on a topic id.
#[derive(Default)]
struct Targets {
    files: HashMap<PathBuf, File>,
    topics: HashMap<(String, TopicId), bool>,
}

impl Targets {
    /// The open segment file a record belongs in; None when its partition no longer holds
    /// its topic or the segment is gone.
    fn file(&mut self, data_dir: &Path, t: &Target) -> io::Result<Option<&File>> {
        let dir = data_dir.join(t.dir);
        let holds = *self
            .topics
            .entry((t.dir.to_string(), t.topic_id))
            .or_insert_with(|| {
                std::fs::read(dir.join(TOPIC_ID_FILE)).is_ok_and(|id| id == t.topic_id)
            });
        if !holds {
            return Ok(None);
        }
        let path = SegmentMeta::log_path(&dir, t.segment_base);
        if !self.files.contains_key(&path) {
            match OpenOptions::new().write(true).open(&path) {
                Ok(f) => self.files.insert(path.clone(), f),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
        }
        Ok(self.files.get(&path))
    }
}

/// Writes one journal's valid records into their segment files.
fn apply(
    data_dir: &Path,
    journal: &[u8],
    targets: &mut Targets,
    done: &mut Replayed,
) -> io::Result<()> {
    for record in journal_records(journal) {
        let t = &record.target;
        let Some(file) = targets.file(data_dir, t)? else {
            done.skipped += 1;
            continue;
        };
        // Each record continues what is durable before it, so a file that ends before its
        // position lost something replay cannot restore: left to recovery, said loudly.
        if file.metadata()?.len() < t.position {
            log::warn!(
                "journal: {}/{} ends before a record at {}; record skipped",
                t.dir,
                t.segment_base,
                t.position
            );
            done.skipped += 1;
            continue;
        }
        file.write_all_at(record.payload, t.position)?;
        done.records += 1;
        done.bytes += record.payload.len() as u64;
    }
    Ok(())
}

/// Replays every journal under `data_dir` (see the module doc), then voids them; journals of
/// shards `shards` and above are removed. Runs before any shard opens a partition.
pub fn replay(data_dir: &Path, shards: usize) -> io::Result<Replayed> {
    let dir = data_dir.join(DIR);
    let mut journals: Vec<(usize, PathBuf)> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .filter_map(|e| {
                let e = e.ok()?;
                let n = e
                    .file_name()
                    .to_str()?
                    .strip_prefix("shard-")?
                    .parse()
                    .ok()?;
                Some((n, e.path()))
            })
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Replayed::default()),
        Err(e) => return Err(e),
    };
    journals.sort();
    let mut targets = Targets::default();
    let mut done = Replayed::default();
    for (_, path) in &journals {
        apply(data_dir, &std::fs::read(path)?, &mut targets, &mut done)?;
    }
    for file in targets.files.values() {
        file.sync_data()?;
    }
    done.files = targets.files.len();
    for (n, path) in &journals {
        if *n >= shards {
            std::fs::remove_file(path)?;
        } else {
            void(&OpenOptions::new().write(true).open(path)?)?;
        }
    }
    super::disk::sync_dir(&dir)?;
    Ok(done)
}

/// Makes a journal hold no valid record, durably.
fn void(journal: &File) -> io::Result<()> {
    zero_headers(journal, journal.metadata()?.len())?;
    journal.sync_data()
}

/// Zeroes the first record header of each chunk of a journal of `journal_bytes` (not synced):
/// it then holds no valid record.
pub fn zero_headers(journal: &File, journal_bytes: u64) -> io::Result<()> {
    let chunk = chunk_bytes(journal_bytes);
    for i in 0..CHUNKS as u64 {
        journal.write_all_at(&[0; HEADER_BYTES], i * chunk)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: Stamp = Stamp { run: 7, seq: 0 };

    fn target(dir: &str, position: u64) -> Target<'_> {
        Target {
            dir,
            topic_id: [3; 16],
            segment_base: 0,
            position,
        }
    }

    fn record(out: &mut Vec<u8>, stamp: Stamp, t: &Target, payload: &[u8]) {
        encode(out, stamp, t, payload.len(), |b| {
            b.copy_from_slice(payload);
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn records_read_back_until_the_first_that_is_not_whole_or_not_of_this_fill() {
        let mut j = Vec::new();
        record(&mut j, RUN, &target("t-0", 0), b"abc");
        record(&mut j, RUN, &target("t-1", 10), b"");
        assert_eq!(j.len(), record_bytes("t-0", 3) + record_bytes("t-1", 0));
        let whole = j.len();
        // A previous fill's leftover after the head ends the chunk.
        record(&mut j, Stamp { seq: 9, ..RUN }, &target("t-0", 3), b"old");
        let (stamp, got) = valid_records(&j);
        assert_eq!(stamp, Some(RUN));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].target, target("t-0", 0));
        assert_eq!(got[0].payload, b"abc");
        assert_eq!(got[1].target, target("t-1", 10));
        // A torn record ends it, and so does any flipped byte.
        assert_eq!(valid_records(&j[..whole - 1]).1.len(), 1);
        let mut flipped = j.clone();
        flipped[HEADER_BYTES + 3] ^= 1;
        assert!(valid_records(&flipped).1.is_empty());
        assert_eq!(valid_records(&[0; 200]), (None, Vec::new()));
        // Another run's records after this run's first are leftovers too.
        let mut k = Vec::new();
        record(&mut k, Stamp { run: 8, seq: 0 }, &target("t-0", 0), b"new");
        k.extend_from_slice(&j);
        assert_eq!(valid_records(&k).1.len(), 1);
    }

    #[test]
    fn a_record_naming_a_path_outside_its_directory_is_not_valid() {
        for dir in ["..", "a/b", "."] {
            let mut j = Vec::new();
            record(&mut j, RUN, &target(dir, 0), b"x");
            assert!(valid_records(&j).1.is_empty(), "{dir}");
        }
    }

    fn partition(data: &Path, dir: &str, topic_id: TopicId, segment: &[u8]) -> PathBuf {
        let p = data.join(dir);
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join(TOPIC_ID_FILE), topic_id).unwrap();
        let log = SegmentMeta::log_path(&p, 0);
        std::fs::write(&log, segment).unwrap();
        log
    }

    /// A record as (dir, position, payload).
    type Written<'a> = (&'a str, u64, &'a [u8]);

    /// A journal of four `chunk`-byte chunks holding `fills` (seq, records), each in chunk i.
    fn journal(chunk: usize, fills: &[(u32, &[Written])]) -> Vec<u8> {
        let mut j = Vec::new();
        for &(seq, records) in fills {
            let start = j.len();
            for &(dir, position, payload) in records {
                record(
                    &mut j,
                    Stamp { seq, ..RUN },
                    &target(dir, position),
                    payload,
                );
            }
            j.resize(start + chunk, 0);
        }
        j.resize(chunk * CHUNKS, 0);
        j
    }

    #[test]
    fn chunks_are_read_in_seq_order() {
        let j = journal(
            256,
            &[
                (5, &[("t-0", 4, b"45")]),
                (3, &[("t-0", 0, b"01"), ("t-0", 2, b"23")]),
                (0, &[]),
                (6, &[("t-0", 6, b"67")]),
            ],
        );
        let positions: Vec<u64> = journal_records(&j)
            .iter()
            .map(|r| r.target.position)
            .collect();
        assert_eq!(positions, [0, 2, 4, 6]);
    }

    #[test]
    fn replay_writes_records_where_their_partition_and_segment_still_are_then_voids() {
        let data = tempfile::tempdir().unwrap();
        let kept = partition(data.path(), "t-0", [3; 16], b"0123");
        let other = partition(data.path(), "u-0", [4; 16], b"0123");
        let mut j = journal(
            1024,
            &[
                (1, &[("t-0", 8, b"89")]),
                (0, &[("t-0", 4, b"4567")]),
                (2, &[("t-0", 2, b"23")]), // the same bytes again: harmless
            ],
        );
        let mut rest = Vec::new();
        record(&mut rest, Stamp { seq: 3, ..RUN }, &target("u-0", 4), b"xx"); // another topic now
        record(
            &mut rest,
            Stamp { seq: 3, ..RUN },
            &target("gone-0", 0),
            b"xx",
        );
        record(
            &mut rest,
            Stamp { seq: 3, ..RUN },
            &target("t-0", 20),
            b"xx",
        ); // a gap
        let mut missing = target("t-0", 0);
        missing.segment_base = 100;
        record(&mut rest, Stamp { seq: 3, ..RUN }, &missing, b"xx");
        j[3 * 1024..3 * 1024 + rest.len()].copy_from_slice(&rest);
        std::fs::create_dir_all(data.path().join(DIR)).unwrap();
        std::fs::write(path(data.path(), 0), &j).unwrap();
        std::fs::write(path(data.path(), 3), &j).unwrap(); // a shard no longer run
        let done = replay(data.path(), 2).unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"0123456789");
        assert_eq!(std::fs::read(&other).unwrap(), b"0123");
        assert_eq!(done.records, 2 * 3);
        assert_eq!(done.skipped, 2 * 4);
        assert_eq!(done.files, 1);
        assert!(journal_records(&std::fs::read(path(data.path(), 0)).unwrap()).is_empty());
        assert!(!path(data.path(), 3).exists());
        // Nothing is left to replay.
        assert_eq!(replay(data.path(), 2).unwrap().records, 0);
    }
}
