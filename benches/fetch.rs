//! The Fetch encode path: framing a response around each partition's records. With zero-copy
//! the records are file slices (no bytes touched), on the copying path `Bytes` chunks (shared,
//! not copied); either way the encoder's cost should depend on the partition count, not on the
//! record bytes. Measured for 1, 100 and 1000 partitions of 64 KiB each.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sluice::protocol::chunk::{Chunk, FileSlice};
use sluice::protocol::fetch::{encode, FetchResponse, PartitionResponse, TopicResponse};
use std::os::fd::OwnedFd;
use std::sync::Arc;

const RECORDS_BYTES: usize = 64 * 1024;

fn response(partitions: usize, records: impl Fn() -> Chunk) -> FetchResponse {
    FetchResponse {
        error_code: 0,
        session_id: 0,
        topics: vec![TopicResponse {
            name: "bench-topic".into(),
            topic_id: [9; 16],
            partitions: (0..partitions as i32)
                .map(|p| PartitionResponse {
                    partition: p,
                    error_code: 0,
                    high_watermark: 1_000_000,
                    last_stable_offset: 1_000_000,
                    log_start_offset: 0,
                    aborted: None,
                    records: Some(records()),
                    preferred_read_replica: -1,
                })
                .collect(),
        }],
    }
}

fn fetch_encode(c: &mut Criterion) {
    let bytes = Bytes::from(vec![7u8; RECORDS_BYTES]);
    let fd: Arc<OwnedFd> = Arc::new(std::fs::File::open("/dev/null").unwrap().into());
    let mut g = c.benchmark_group("fetch_encode");
    for partitions in [1usize, 100, 1000] {
        g.throughput(Throughput::Bytes((partitions * RECORDS_BYTES) as u64));
        for version in [4i16, 13] {
            g.bench_with_input(
                BenchmarkId::new(format!("bytes_v{version}"), partitions),
                &partitions,
                |b, &n| {
                    b.iter_batched(
                        || response(n, || Chunk::Bytes(bytes.clone())),
                        |r| encode(r, version),
                        criterion::BatchSize::SmallInput,
                    )
                },
            );
            g.bench_with_input(
                BenchmarkId::new(format!("file_v{version}"), partitions),
                &partitions,
                |b, &n| {
                    b.iter_batched(
                        || {
                            response(n, || {
                                Chunk::File(FileSlice {
                                    fd: fd.clone(),
                                    position: 0,
                                    len: RECORDS_BYTES,
                                })
                            })
                        },
                        |r| encode(r, version),
                        criterion::BatchSize::SmallInput,
                    )
                },
            );
        }
    }
    g.finish();
}

criterion_group!(benches, fetch_encode);
criterion_main!(benches);
