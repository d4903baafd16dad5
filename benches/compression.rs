//! What `compression.type` costs the broker: converting one producer batch (1,000 records of
//! 1 KiB of log-like text, compressible as real payloads are) from one codec to another, as
//! an append to a topic whose codec differs does. Throughput is counted in uncompressed bytes,
//! so seconds per GiB is 1 / (GiB/s).

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::protocol::batch;
use sluice::protocol::compression::{self, Codec};
use std::hint::black_box;
use std::time::Duration;

const RECORDS: usize = 1000;
const RECORD_BYTES: usize = 1024;
const CODECS: [(Codec, &str); 5] = [
    (Codec::None, "none"),
    (Codec::Gzip, "gzip"),
    (Codec::Snappy, "snappy"),
    (Codec::Lz4, "lz4"),
    (Codec::Zstd, "zstd"),
];

/// Log-like text: a timestamp, a level, a service, ids and a message, all varying.
fn record(i: usize) -> Vec<u8> {
    let mut out = String::with_capacity(RECORD_BYTES);
    let mut n = i as u64;
    while out.len() < RECORD_BYTES {
        n = n
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.push_str(&format!(
            "{{\"ts\":{},\"level\":\"{}\",\"service\":\"svc-{}\",\"trace\":\"{:016x}\",\"msg\":\"request served in {} ms\"}}",
            1_700_000_000_000u64 + (n >> 40),
            ["INFO", "WARN", "DEBUG"][(n % 3) as usize],
            n % 17,
            n,
            n % 1000
        ));
    }
    out.truncate(RECORD_BYTES);
    out.into_bytes()
}

fn plain_batch() -> Vec<u8> {
    let values: Vec<Vec<u8>> = (0..RECORDS).map(record).collect();
    let rows: Vec<_> = values.iter().map(|v| (None, Some(&v[..]))).collect();
    batch::build(&rows, 1_700_000_000_000)
}

fn convert(c: &mut Criterion) {
    let plain = plain_batch();
    let h = batch::validate(&plain).unwrap();
    let mut g = c.benchmark_group("convert_1000x1KiB");
    g.throughput(Throughput::Bytes(
        (plain.len() - batch::HEADER_BYTES) as u64,
    ));
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for (from, from_name) in CODECS {
        let source = compression::convert(&plain, &h, from, 64 << 20).unwrap();
        let sh = batch::validate(&source).unwrap();
        for (to, to_name) in CODECS {
            if from == to || (from != Codec::None && to != Codec::None && to != Codec::Zstd) {
                continue; // compress, decompress, and every codec to zstd
            }
            g.bench_function(format!("{from_name}_to_{to_name}"), |b| {
                b.iter(|| compression::convert(black_box(&source), &sh, to, 64 << 20).unwrap())
            });
        }
        eprintln!(
            "{from_name}: {} bytes for {} bytes of records (ratio {:.2})",
            source.len(),
            plain.len(),
            plain.len() as f64 / source.len() as f64
        );
    }
    g.finish();
}

criterion_group!(benches, convert);
criterion_main!(benches);
