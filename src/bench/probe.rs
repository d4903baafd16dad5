//! `sluice probe`: this machine's own limits, measured now, so that a broker's cost per byte can
//! be stated as a multiple of what the hardware allows in the same run (`perf/cost.py`):
//! - memcpy: one copy of large buffers, GiB/s on one core;
//! - CRC32C: the checksum every produced batch is validated with, GiB/s on one core (the same
//!   crate and code path the broker uses);
//! - 4 KiB write + fdatasync: the latency of the smallest durable append, p50 and p99;
//! - the kernel's floor for a fetch and a produce over loopback TCP, CPU seconds per GiB
//!   (`loopback.rs`);
//! - waking a sleeping thread, across two cores and within one, µs of wall time and of CPU
//!   (`wakeup.rs`): what each hop between idle shards costs, the unit of a broker's CPU per
//!   request at moderate load.

use super::loopback::{self, Write::Buffered, Write::Direct};
use super::wakeup::{self, WakeupCost};
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
    /// Bytes moved over loopback for each floor (sendfile out; recv, CRC32C, write in), in each
    /// of three rounds; a floor is the least of its rounds.
    #[arg(long, default_value_t = 256 << 20)]
    pub loopback_bytes: u64,
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
    /// The same, overwriting a file written and synced beforehand (no size or allocation to
    /// record: what a preallocated journal would pay).
    pub fdatasync_4k_overwrite_p50_ms: f64,
    pub fdatasync_4k_overwrite_p99_ms: f64,
    /// Sender CPU per GiB of sendfile from the page cache over loopback.
    pub fetch_floor_s_per_gib: f64,
    /// Receiver CPU per GiB of recv over loopback, CRC32C, write and fdatasync.
    pub produce_floor_s_per_gib: f64,
    /// The same with O_DIRECT writes from an aligned buffer.
    pub produce_floor_direct_s_per_gib: f64,
    /// Waking a thread sleeping on another core (None on one core), and on the same core.
    pub wakeup_across_cores: Option<WakeupCost>,
    pub wakeup_same_core: WakeupCost,
}

const GIB: f64 = (1u64 << 30) as f64;
const SYNC_BYTES: usize = 4096;
/// The file the fetch floor sends again and again (small enough to stay in the page cache).
const SENDFILE_FILE_BYTES: usize = 64 << 20;
const FLOOR_ROUNDS: usize = 3;

pub fn run(args: ProbeArgs) -> anyhow::Result<ProbeReport> {
    anyhow::ensure!(
        args.buffer_bytes >= 1 << 20
            && args.passes > 0
            && args.syncs > 0
            && args.loopback_bytes >= SENDFILE_FILE_BYTES as u64,
        "the buffer must hold at least 1 MiB, passes and syncs be positive, and loopback bytes \
         at least {SENDFILE_FILE_BYTES}"
    );
    let sendfile_passes = (args.loopback_bytes / SENDFILE_FILE_BYTES as u64) as usize;
    let loopback_bytes = args.loopback_bytes >> 20 << 20; // whole MiBs, for O_DIRECT
    let append = sync_latency(&args.dir, args.syncs, false)?;
    let overwrite = sync_latency(&args.dir, args.syncs, true)?;
    let (wakeup_across_cores, wakeup_same_core) = wakeup::measure()?;
    let report = ProbeReport {
        memcpy_gib_per_s: memcpy_speed(args.buffer_bytes, args.passes),
        crc32c_gib_per_s: crc32c_speed(args.buffer_bytes, args.passes),
        fdatasync_4k_p50_ms: append.p50_ms,
        fdatasync_4k_p99_ms: append.p99_ms,
        fdatasync_4k_max_ms: append.max_ms,
        fdatasync_4k_overwrite_p50_ms: overwrite.p50_ms,
        fdatasync_4k_overwrite_p99_ms: overwrite.p99_ms,
        fetch_floor_s_per_gib: least_of_rounds(|| {
            loopback::sendfile_s_per_gib(&args.dir, SENDFILE_FILE_BYTES, sendfile_passes)
        })?,
        produce_floor_s_per_gib: least_of_rounds(|| {
            loopback::ingest_s_per_gib(&args.dir, loopback_bytes, Buffered)
        })?,
        produce_floor_direct_s_per_gib: least_of_rounds(|| {
            loopback::ingest_s_per_gib(&args.dir, loopback_bytes, Direct)
        })?,
        wakeup_across_cores,
        wakeup_same_core,
    };
    print(&report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(report)
}

/// The report as `sluice probe` prints it.
fn print(report: &ProbeReport) {
    println!("memcpy              {:>8.2} GiB/s", report.memcpy_gib_per_s);
    println!("crc32c              {:>8.2} GiB/s", report.crc32c_gib_per_s);
    println!(
        "4 KiB fdatasync     p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        report.fdatasync_4k_p50_ms, report.fdatasync_4k_p99_ms, report.fdatasync_4k_max_ms
    );
    println!(
        "  overwriting       p50 {:.3} ms, p99 {:.3} ms",
        report.fdatasync_4k_overwrite_p50_ms, report.fdatasync_4k_overwrite_p99_ms
    );
    println!(
        "fetch floor         {:>8.3} s/GiB (sendfile over loopback, sender CPU)",
        report.fetch_floor_s_per_gib
    );
    println!(
        "produce floor       {:>8.3} s/GiB (recv over loopback + CRC32C + write + fdatasync)",
        report.produce_floor_s_per_gib
    );
    println!(
        "  with O_DIRECT     {:>8.3} s/GiB",
        report.produce_floor_direct_s_per_gib
    );
    if let Some(w) = report.wakeup_across_cores {
        println!(
            "wake-up, 2 cores    {:>8.1} µs wall, {:.1} µs CPU (a thread asleep on another core)",
            w.wall_us, w.cpu_us
        );
    }
    let w = report.wakeup_same_core;
    println!(
        "wake-up, 1 core     {:>8.1} µs wall, {:.1} µs CPU",
        w.wall_us, w.cpu_us
    );
}

/// The least of `FLOOR_ROUNDS` measurements: a floor is what the path costs when nothing else
/// (another process, a page first touched in this VM) gets in its way.
fn least_of_rounds(mut measure: impl FnMut() -> std::io::Result<f64>) -> std::io::Result<f64> {
    let mut least = f64::INFINITY;
    for _ in 0..FLOOR_ROUNDS {
        least = least.min(measure()?);
    }
    Ok(least)
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

struct SyncLatency {
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
}

/// Writes 4 KiB and fdatasyncs it, `rounds` times, in a fresh file in `dir`: appending, or
/// (`overwrite`) over blocks written and synced before the timing starts.
fn sync_latency(
    dir: &std::path::Path,
    rounds: usize,
    overwrite: bool,
) -> anyhow::Result<SyncLatency> {
    let path = dir.join(format!(".sluice-probe-{}", std::process::id()));
    let file = std::fs::File::create(&path)?;
    let block = vec![0x5au8; SYNC_BYTES];
    let mut h = Histogram::<u64>::new(3)?;
    let mut result = Ok(());
    if overwrite {
        result = (0..rounds)
            .try_for_each(|i| file.write_all_at(&block, (i * SYNC_BYTES) as u64))
            .and_then(|()| file.sync_all());
    }
    for i in 0..rounds {
        if result.is_err() {
            break;
        }
        let start = Instant::now();
        result = file
            .write_all_at(&block, (i * SYNC_BYTES) as u64)
            .and_then(|()| file.sync_data());
        h.record(start.elapsed().as_nanos() as u64)?;
    }
    drop(file);
    std::fs::remove_file(&path)?;
    result?;
    let ms = |ns: u64| ns as f64 / 1e6;
    Ok(SyncLatency {
        p50_ms: ms(h.value_at_quantile(0.5)),
        p99_ms: ms(h.value_at_quantile(0.99)),
        max_ms: ms(h.max()),
    })
}
