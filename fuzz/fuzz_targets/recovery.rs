//! Recovery on arbitrary file contents: a partition directory holding segments, their offset
//! and time indexes, a producer snapshot and a clean-shutdown marker, as a crash or a bad disk
//! may leave them; plus the catalog and the consumer-group records replayed at start-up.
//!
//! Input: one flags byte, then sections, each a big-endian u16 length and that many bytes:
//! segment 0, its offset index, its time index, segment 1, the producer snapshot, the catalog,
//! a group record. Missing sections are absent files.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::group::records;
use sluice::storage::catalog::Catalog;
use sluice::storage::disk::OsDisk;
use sluice::storage::segment::SegmentMeta;
use sluice::storage::{producer_snapshots, producer_state, recovery};
use std::path::Path;

fn sections(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 && out.len() < 7 {
        let len = (u16::from_be_bytes([data[0], data[1]]) as usize).min(data.len() - 2);
        out.push(&data[2..2 + len]);
        data = &data[2 + len..];
    }
    out
}

fn put(path: &Path, bytes: Option<&&[u8]>) {
    if let Some(b) = bytes {
        std::fs::write(path, b).unwrap();
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let s = sections(rest);
    // tmpfs where there is one: the target writes files on every run.
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let dir = tempfile::tempdir_in(base).unwrap();
    let p = dir.path();
    put(&SegmentMeta::log_path(p, 0), s.first());
    put(&SegmentMeta::index_path(p, 0), s.get(1));
    put(&SegmentMeta::time_index_path(p, 0), s.get(2));
    if flags & 1 == 1 {
        // A second segment starting where the first one's offsets might end.
        put(&SegmentMeta::log_path(p, 1 + (flags >> 4) as i64), s.get(3));
    }
    put(&producer_snapshots::path(p, (flags >> 3) as i64), s.get(4));
    if flags & 2 == 2 {
        std::fs::write(p.join(recovery::CLEAN_MARKER), b"").unwrap();
    }
    let interval = 1 + (flags as u32 >> 2) * 64;
    if let Ok(r) = recovery::recover(&OsDisk::default(), p, interval, 0) {
        for meta in &r.segments {
            let len = std::fs::metadata(SegmentMeta::log_path(p, meta.base_offset))
                .map(|m| m.len())
                .unwrap_or(0);
            assert!(
                meta.size_bytes <= len,
                "a recovered segment claims bytes past its file"
            );
            assert!(meta.next_offset >= meta.base_offset);
        }
    }
    if let Some(raw) = s.get(4) {
        let _ = producer_state::decode_snapshot(raw);
        let _ = producer_snapshots::newest_at_or_below(&OsDisk::default(), p, i64::MAX);
    }
    if let Some(raw) = s.get(5) {
        let meta = p.join("__meta");
        std::fs::create_dir_all(&meta).unwrap();
        std::fs::write(Catalog::path(p), raw).unwrap();
        let _ = Catalog::load(p, &mut sluice::clock::SeededIds::new(0));
    }
    if let Some(raw) = s.get(6) {
        let _ = records::decode_offset(raw);
        let _ = records::decode_group(raw);
    }
});
