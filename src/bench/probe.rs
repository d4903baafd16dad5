//! `sluice probe`: this machine's own limits, measured now, so that a broker's cost per byte can
//! be stated as a multiple of what the hardware allows in the same run (`perf/cost.py`):
//! - memcpy: one copy of large buffers, GiB/s on one core;
//! - CRC32C: the checksum every produced batch is validated with, GiB/s on one core (the same
//!   crate and code path the broker uses);
//! - 4 KiB write + fdatasync: the latency of the smallest durable append, p50 and p99.

use hdrhistogram::Histogram;
use serde::Serialize;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone, clap::Args)]
pub struct ProbeArgs {
    /// Directory for the fdatasync probe (use the data dir's file system).
    #[arg(long, default_value = ".")]
    pub dir: PathBuf,
    /// Bytes copied and checksummed per pass.
    #[arg(long, default_value_t = 256 << 20)]
    pub buffer_bytes: usize,
    /// Passes over the buffer for memcpy and CRC32C.
    #[arg(long, default_value_t = 8)]
    pub passes: usize,
    /// 4 KiB write + fdatasync rounds.
    #[arg(long, default_value_t = 2000)]
    pub syncs: usize,
    /// Write the figures as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub memcpy_gib_per_s: f64,
    pub crc32c_gib_per_s: f64,
    pub fdatasync_4k_p50_ms: f64,
    pub fdatasync_4k_p99_ms: f64,
    pub fdatasync_4k_max_ms: f64,
}

const GIB: f64 = (1u64 << 30) as f64;
const SYNC_BYTES: usize = 4096;

pub fn run(args: ProbeArgs) -> anyhow::Result<ProbeReport> {
    anyhow::ensure!(
        args.buffer_bytes >= 1 << 20 && args.passes > 0 && args.syncs > 0,
        "the buffer must hold at least 1 MiB, and passes and syncs be positive"
    );
    let report = ProbeReport {
        memcpy_gib_per_s: memcpy_speed(args.buffer_bytes, args.passes),
        crc32c_gib_per_s: crc32c_speed(args.buffer_bytes, args.passes),
        ..sync_latency(&args.dir, args.syncs)?
    };
    println!("memcpy              {:>8.2} GiB/s", report.memcpy_gib_per_s);
    println!("crc32c              {:>8.2} GiB/s", report.crc32c_gib_per_s);
    println!(
        "4 KiB fdatasync     p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        report.fdatasync_4k_p50_ms, report.fdatasync_4k_p99_ms, report.fdatasync_4k_max_ms
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report)
}

fn memcpy_speed(bytes: usize, passes: usize) -> f64 {
    let src: Vec<u8> = (0..bytes).map(|i| i as u8).collect();
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let start = Instant::now();
    for _ in 0..passes {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (bytes * passes) as f64 / GIB / start.elapsed().as_secs_f64()
}

fn crc32c_speed(bytes: usize, passes: usize) -> f64 {
    let data: Vec<u8> = (0..bytes).map(|i| (i * 7) as u8).collect();
    let start = Instant::now();
    let mut crc = 0;
    for _ in 0..passes {
        crc ^= crc32c::crc32c(std::hint::black_box(&data));
    }
    std::hint::black_box(crc);
    (bytes * passes) as f64 / GIB / start.elapsed().as_secs_f64()
}

/// Appends 4 KiB and fdatasyncs it, `rounds` times, in a fresh file in `dir`.
fn sync_latency(dir: &std::path::Path, rounds: usize) -> anyhow::Result<ProbeReport> {
    let path = dir.join(format!(".sluice-probe-{}", std::process::id()));
    let file = std::fs::File::create(&path)?;
    let block = vec![0x5au8; SYNC_BYTES];
    let mut h = Histogram::<u64>::new(3)?;
    let mut result = Ok(());
    for i in 0..rounds {
        let start = Instant::now();
        result = file
            .write_all_at(&block, (i * SYNC_BYTES) as u64)
            .and_then(|()| file.sync_data());
        if result.is_err() {
            break;
        }
        h.record(start.elapsed().as_nanos() as u64)?;
    }
    drop(file);
    std::fs::remove_file(&path)?;
    result?;
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(ProbeReport {
        memcpy_gib_per_s: 0.0,
        crc32c_gib_per_s: 0.0,
        fdatasync_4k_p50_ms: ms(h.value_at_quantile(0.5)),
        fdatasync_4k_p99_ms: ms(h.value_at_quantile(0.99)),
        fdatasync_4k_max_ms: ms(h.max()),
    })
}
