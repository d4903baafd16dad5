//! Micro-benchmarks of the storage hot path: record-batch validation (CRC32C) and log append
//! and read through glommio's io_uring files; and of compaction's in-memory work on a segment.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice::protocol::batch;
use sluice::storage::log::{LogSettings, PartitionLog};
use sluice::storage::read::{locate_batches, read_batches, Limit};
use sluice::storage::segment_file::Volume;
use std::cell::RefCell;

/// 16 records of 1 KiB: a typical librdkafka batch for 1 KiB messages.
fn sample_batch() -> Bytes {
    Bytes::from(batch::synthetic(0, 16, 1024, 1_700_000_000_000))
}

fn validate(c: &mut Criterion) {
    let b = sample_batch();
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Bytes(b.len() as u64));
    g.bench_function("validate_16x1KiB", |bench| {
        bench.iter(|| batch::validate(&b).unwrap())
    });
    g.finish();
}

const BATCHES: usize = 256;

fn settings() -> LogSettings {
    LogSettings {
        segment_bytes: 64 << 20,
        segment_ms: u64::MAX,
        index_interval_bytes: 4096,
        log_append_time: false,
    }
}

async fn fill(log: &RefCell<PartitionLog>, b: &Bytes) {
    let headers = batch::validate_all(b).unwrap();
    for _ in 0..BATCHES {
        let plan = log.borrow_mut().prepare_append(b, &headers, 0);
        PartitionLog::write(log, plan).await.unwrap();
    }
}

fn append_and_read(c: &mut Criterion) {
    let executor = glommio::LocalExecutorBuilder::default().make().unwrap();
    let b = sample_batch();
    let mut g = c.benchmark_group("log");
    g.throughput(Throughput::Bytes((b.len() * BATCHES) as u64));
    g.sample_size(20);
    g.bench_function("append_256x16KiB", |bench| {
        bench.iter_batched(
            || tempfile::tempdir().unwrap(),
            |dir| {
                executor.run(async {
                    let log = RefCell::new(
                        PartitionLog::open((Volume::Os, dir.path().into()), settings(), 0, 0)
                            .await
                            .unwrap(),
                    );
                    fill(&log, &b).await;
                });
                dir
            },
            BatchSize::PerIteration,
        )
    });
    // Read everything back, batch by batch as a consumer would, from the page cache.
    let dir = tempfile::tempdir().unwrap();
    let log = executor.run(async {
        let log = RefCell::new(
            PartitionLog::open((Volume::Os, dir.path().into()), settings(), 0, 0)
                .await
                .unwrap(),
        );
        fill(&log, &b).await;
        let work = log.borrow_mut().take_sync_work().unwrap();
        for f in &work.files {
            f.fdatasync().await.unwrap();
        }
        {
            let mut l = log.borrow_mut();
            l.complete_sync(work.target);
            let synced = l.synced();
            l.advance_high_watermark(synced);
        }
        log
    });
    g.bench_function("read_256x16KiB", |bench| {
        bench.iter(|| {
            executor.run(async {
                let mut offset = 0;
                let end = log.borrow().high_watermark();
                while offset < end {
                    let plan = log.borrow().plan_read(offset).unwrap().unwrap();
                    let boundary = |limit| {
                        log.borrow()
                            .batch_start_at_or_before(plan.segment_base, limit)
                    };
                    let got = read_batches(&plan, offset, Limit::bytes(1 << 20), boundary)
                        .await
                        .unwrap();
                    let mut at = 0;
                    while at < got.len() {
                        let h = batch::parse_header(&got[at..]).unwrap();
                        offset = h.next_offset();
                        at += h.size_bytes;
                    }
                }
            })
        })
    });
    // What the zero-copy fetch does instead of reading: find the same spans from headers and
    // the index, leaving the bytes in the file for sendfile.
    g.bench_function("locate_256x16KiB", |bench| {
        bench.iter(|| {
            executor.run(async {
                let mut offset = 0;
                let end = log.borrow().high_watermark();
                while offset < end {
                    let plan = log.borrow().plan_read(offset).unwrap().unwrap();
                    let boundary = |limit| {
                        log.borrow()
                            .batch_start_at_or_before(plan.segment_base, limit)
                    };
                    let span = locate_batches(&plan, offset, Limit::bytes(1 << 20), boundary)
                        .await
                        .unwrap()
                        .unwrap();
                    // Every batch is the same 16 records, and each span starts at `offset`.
                    offset += (span.len / b.len() as u64) as i64 * 16;
                }
            })
        })
    });
    g.finish();
}

/// A 4 MiB segment of 16-record batches of 256-byte values over 1,000 keys, each key written
/// about 16 times: the key map learned from it, then the segment compacted (the latest record
/// of each key kept, most batches rewritten).
fn compaction(c: &mut Criterion) {
    use sluice::storage::compaction::{compact, Aborted, Cleaning, KeyMap, TxnsKept};
    let value = vec![b'v'; 256];
    let keys: Vec<Vec<u8>> = (0..1000)
        .map(|k| format!("key-{k:05}").into_bytes())
        .collect();
    let mut segment = Vec::new();
    let mut offset = 0i64;
    let mut k = 0;
    while segment.len() < 4 << 20 {
        let records: Vec<_> = (0..16)
            .map(|i| (Some(&keys[(k + i * 61) % keys.len()][..]), Some(&value[..])))
            .collect();
        k += 1;
        let mut b = batch::build(&records, 1_700_000_000_000);
        batch::assign(&mut b, offset, 0, None);
        offset += 16;
        segment.extend(b);
    }
    let mut g = c.benchmark_group("compaction");
    g.throughput(Throughput::Bytes(segment.len() as u64));
    g.bench_function("learn_4MiB", |bench| {
        bench.iter(|| {
            let mut map = KeyMap::new(64 << 20);
            assert!(map.learn(&segment, Aborted(&[])));
            map
        })
    });
    let mut map = KeyMap::new(64 << 20);
    assert!(map.learn(&segment, Aborted(&[])));
    g.bench_function("compact_4MiB", |bench| {
        let mut out = Vec::with_capacity(segment.len());
        bench.iter(|| {
            out.clear();
            let mut txns = TxnsKept::default();
            let mut cleaning = Cleaning {
                map: &map,
                aborted: Aborted(&[]),
                past_delete_retention: false,
                txns: &mut txns,
                aborts_removed: Vec::new(),
            };
            compact(&segment, &mut cleaning, &mut out)
        })
    });
    g.finish();
}

criterion_group!(benches, validate, append_and_read, compaction);
criterion_main!(benches);
