//! `sluice bench`: a load generator that speaks Kafka through librdkafka (the `rdkafka` crate),
//! so its figures are what real applications see, against Sluice or any Kafka-compatible
//! broker.

pub mod args;
mod consume;
mod loopback;
mod payload;
pub mod probe;
mod produce;
pub mod stats;
mod wakeup;

use args::{BenchArgs, Mode};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Offset;
use serde::Serialize;
use stats::{Latency, Meter};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const METADATA_TIMEOUT: Duration = Duration::from_secs(5);
/// How long e2e consumers may trail the producers' end before the missing records count as lost.
const E2E_DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_DURATION_S: f64 = 10.0;

#[derive(Debug, Serialize)]
pub struct Report {
    pub mode: String,
    pub records: u64,
    pub bytes: u64,
    pub records_per_sec: f64,
    pub mb_per_sec: f64,
    pub errors: u64,
    pub latency_ms: Latency,
    /// e2e only: send to acknowledgement, from the same records' intended send times.
    pub ack_latency_ms: Option<Latency>,
    pub elapsed_s: f64,
    /// --transaction-records only: the transactions committed.
    pub transactions: Option<TransactionReport>,
    /// e2e only: records acknowledged to the producers but never received.
    pub e2e_missing: u64,
    pub e2e_duplicates: u64,
    pub command: String,
    pub nproc: usize,
    pub kernel: String,
    pub sluice_version: String,
}

#[derive(Debug, Serialize)]
pub struct TransactionReport {
    pub records_per_transaction: u64,
    pub commits: u64,
    pub commits_per_sec: f64,
    /// From the commit call to its return: the flush of the last records, then EndTxn.
    pub commit_latency_ms: Latency,
}

/// What the worker threads share with the main thread during a run.
struct Run {
    args: BenchArgs,
    producers: Arc<produce::Shared>,
    consumers: Arc<consume::Shared>,
    producing: bool,
    consuming: bool,
}

type Workers = Vec<std::thread::JoinHandle<Result<(), rdkafka::error::KafkaError>>>;

impl Run {
    /// The meter that the summary reports: receipt for consume and e2e, acks for produce.
    /// (records, bytes, errors)
    fn totals(&self) -> (u64, u64, u64) {
        let (p, c) = (&self.producers, &self.consumers);
        let m = if self.consuming { &c.meter } else { &p.meter };
        (
            m.records.load(Ordering::Relaxed),
            m.bytes.load(Ordering::Relaxed),
            p.meter.errors.load(Ordering::Relaxed) + c.meter.errors.load(Ordering::Relaxed),
        )
    }

    fn histogram(&self) -> hdrhistogram::Histogram<u64> {
        if self.consuming {
            self.consumers.meter.merged()
        } else {
            self.producers.meter.merged()
        }
    }
}

/// Runs the bench; Err for set-up failures (an unreachable broker, bad options).
pub fn run(args: BenchArgs) -> anyhow::Result<Report> {
    args.validate().map_err(|e| anyhow::anyhow!(e))?;
    let partitions = ensure_topic(&args)?;
    let epoch = Instant::now();
    let run = Run {
        consumers: Arc::new(consume::Shared {
            meter: Meter::new(args.consumers),
            stop: AtomicBool::new(false),
            epoch,
            received: AtomicU64::new(0),
            seen: Mutex::new(HashSet::new()),
            duplicates: AtomicU64::new(0),
        }),
        producers: Arc::new(produce::Shared {
            meter: Meter::new(args.producers),
            stop: AtomicBool::new(false),
            next: AtomicU64::new(0),
            epoch,
            acked_total: AtomicU64::new(0),
            printed: AtomicU64::new(0),
            commits: Meter::new(args.producers),
        }),
        producing: args.mode != Mode::Consume,
        consuming: args.mode != Mode::Produce,
        args,
    };
    let (consumer_threads, producer_threads) = spawn_workers(&run, partitions)?;
    let measured_from = watch(&run, &producer_threads);
    run.producers.stop.store(true, Ordering::Relaxed);
    for h in producer_threads {
        h.join()
            .map_err(|_| anyhow::anyhow!("a producer thread panicked"))??;
    }
    let elapsed = measured_from.elapsed();
    let missing = if run.args.mode == Mode::E2e {
        drain_e2e(&run)
    } else {
        0
    };
    run.consumers.stop.store(true, Ordering::Relaxed);
    for h in consumer_threads {
        h.join()
            .map_err(|_| anyhow::anyhow!("a consumer thread panicked"))??;
    }
    let report = report(&run, elapsed, missing);
    print_summary(&report);
    if let Some(path) = &run.args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(report)
}

/// Starts the consumer and producer threads (pinned to cores in turn with --pin).
fn spawn_workers(run: &Run, partitions: i32) -> anyhow::Result<(Workers, Workers)> {
    // Pinned threads cannot move off a core a pinned broker shard keeps busy, so on a machine
    // the bench shares with the broker they wait out whole scheduler slices: pin only on
    // request (--pin), where the load generator has cores of its own.
    let cores = if run.args.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let pin = move |i: usize| {
        if !cores.is_empty() {
            core_affinity::set_for_current(cores[i % cores.len()]);
        }
    };
    let args = &run.args;
    let starts = if run.consuming {
        start_offsets(args, partitions)?
    } else {
        Vec::new()
    };
    let mut consumers = Vec::new();
    for w in (0..args.consumers).filter(|_| run.consuming) {
        let (args, shared, starts, pin) = (
            args.clone(),
            run.consumers.clone(),
            starts.clone(),
            pin.clone(),
        );
        consumers.push(
            std::thread::Builder::new()
                .name(format!("consumer-{w}"))
                .spawn(move || {
                    pin(w + args.producers);
                    consume::run(w, &args, shared, &starts)
                })?,
        );
    }
    let mut producers = Vec::new();
    for w in (0..args.producers).filter(|_| run.producing) {
        let (args, shared, pin) = (args.clone(), run.producers.clone(), pin.clone());
        producers.push(
            std::thread::Builder::new()
                .name(format!("producer-{w}"))
                .spawn(move || {
                    pin(w);
                    produce::run(w, &args, shared, partitions)
                })?,
        );
    }
    Ok((consumers, producers))
}

/// Prints a progress line a second until the run is over (its duration, or its count); returns
/// when the measured part began (after the warm-up).
fn watch(run: &Run, producer_threads: &Workers) -> Instant {
    let args = &run.args;
    let warmup = if args.count.is_none() {
        Duration::from_secs_f64(args.warmup)
    } else {
        Duration::ZERO
    };
    let duration = match (args.count, args.duration) {
        (Some(_), _) => None,
        (None, d) => Some(Duration::from_secs_f64(d.unwrap_or(DEFAULT_DURATION_S))),
    };
    let begin = Instant::now();
    let mut measured_from = begin;
    let mut warmed = warmup.is_zero();
    let mut last = (Instant::now(), 0u64, 0u64);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let now = Instant::now();
        if !warmed && now - begin >= warmup {
            run.producers.meter.reset();
            run.producers.commits.reset();
            run.consumers.meter.reset();
            (measured_from, warmed, last) = (now, true, (now, 0, 0));
        }
        if now - last.0 >= Duration::from_secs(1) {
            last = progress(run, begin, last, warmed);
        }
        let producers_done = !run.producing || producer_threads.iter().all(|h| h.is_finished());
        let done = match duration {
            Some(d) => warmed && now - measured_from >= d,
            None if args.mode == Mode::Consume => {
                let received = run.consumers.received.load(Ordering::Relaxed);
                received >= args.count.unwrap_or(u64::MAX)
            }
            None => producers_done,
        };
        if done {
            return measured_from;
        }
    }
}

/// One progress line: the rates since `last` (when, records, bytes); returns the new `last`.
fn progress(
    run: &Run,
    begin: Instant,
    last: (Instant, u64, u64),
    warmed: bool,
) -> (Instant, u64, u64) {
    let now = Instant::now();
    let (records, bytes, errors) = run.totals();
    let secs = (now - last.0).as_secs_f64();
    println!(
        "{:>6.1}s {:>10.0} rec/s {:>9.2} MB/s  p99 {:>8.3} ms  errors {}{}",
        (now - begin).as_secs_f64(),
        (records - last.1) as f64 / secs,
        (bytes - last.2) as f64 / secs / 1e6,
        run.histogram().value_at_quantile(0.99) as f64 / 1000.0,
        errors,
        if warmed { "" } else { "  (warm-up)" }
    );
    (now, records, bytes)
}

/// Waits for the consumers to see everything the producers had acknowledged; returns how many
/// acknowledged records never arrived.
fn drain_e2e(run: &Run) -> u64 {
    let acked = run.producers.acked_total.load(Ordering::Relaxed);
    let seen = || run.consumers.seen.lock().expect("seen lock").len() as u64;
    let deadline = Instant::now() + E2E_DRAIN_TIMEOUT;
    while seen() < acked && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let missing = acked.saturating_sub(seen());
    if missing > 0 {
        eprintln!("bench: {missing} acknowledged records were never received");
    }
    missing
}

fn report(run: &Run, elapsed: Duration, missing: u64) -> Report {
    let (records, bytes, errors) = run.totals();
    let secs = elapsed.as_secs_f64().max(1e-9);
    Report {
        mode: format!("{:?}", run.args.mode).to_lowercase(),
        records,
        bytes,
        records_per_sec: records as f64 / secs,
        mb_per_sec: bytes as f64 / secs / 1e6,
        errors: errors + missing,
        latency_ms: Latency::from_histogram(&run.histogram()),
        ack_latency_ms: (run.args.mode == Mode::E2e)
            .then(|| Latency::from_histogram(&run.producers.meter.merged())),
        elapsed_s: secs,
        transactions: run.args.transaction_records.map(|n| {
            let commits = run.producers.commits.records.load(Ordering::Relaxed);
            TransactionReport {
                records_per_transaction: n,
                commits,
                commits_per_sec: commits as f64 / secs,
                commit_latency_ms: Latency::from_histogram(&run.producers.commits.merged()),
            }
        }),
        e2e_missing: missing,
        e2e_duplicates: run.consumers.duplicates.load(Ordering::Relaxed),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        nproc: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        sluice_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Checks the broker answers, and creates the topic if it is missing. Returns its partition
/// count.
fn ensure_topic(args: &BenchArgs) -> anyhow::Result<i32> {
    let probe: BaseConsumer = consume::client_config(args).create()?;
    let unreachable = |e: &dyn std::fmt::Display| {
        anyhow::anyhow!("cannot reach a broker at {}: {e}", args.bootstrap)
    };
    let md = probe
        .fetch_metadata(None, METADATA_TIMEOUT)
        .map_err(|e| unreachable(&e))?;
    if md.brokers().is_empty() {
        return Err(unreachable(&"no brokers in metadata"));
    }
    if let Some(t) = md
        .topics()
        .iter()
        .find(|t| t.name() == args.topic && t.error().is_none())
    {
        return Ok(t.partitions().len() as i32);
    }
    let admin: AdminClient<DefaultClientContext> = produce::client_config(args).create()?;
    let topic = NewTopic::new(
        &args.topic,
        args.partitions,
        TopicReplication::Fixed(args.replication_factor),
    );
    let results = futures::executor::block_on(admin.create_topics(
        [&topic],
        &AdminOptions::new().operation_timeout(Some(METADATA_TIMEOUT)),
    ))?;
    for r in results {
        match r {
            Ok(_) => {}
            Err((_, rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, code)) => anyhow::bail!("cannot create topic {name}: {code}"),
        }
    }
    // Wait until the new topic shows in metadata with all its partitions.
    let deadline = Instant::now() + METADATA_TIMEOUT;
    loop {
        let md = probe.fetch_metadata(Some(&args.topic), METADATA_TIMEOUT)?;
        if let Some(t) = md
            .topics()
            .iter()
            .find(|t| t.name() == args.topic && t.error().is_none() && !t.partitions().is_empty())
        {
            return Ok(t.partitions().len() as i32);
        }
        if Instant::now() > deadline {
            anyhow::bail!("topic {} did not appear in metadata", args.topic);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Where each partition's consumer starts: the earliest offset, or the current end, resolved
/// now so that an e2e run sees exactly the records it produces.
fn start_offsets(args: &BenchArgs, partitions: i32) -> anyhow::Result<Vec<Offset>> {
    let probe: BaseConsumer = consume::client_config(args).create()?;
    (0..partitions)
        .map(|p| {
            if args.mode == Mode::Consume && args.from == args::From::Earliest {
                return Ok(Offset::Beginning);
            }
            let (_, high) = probe.fetch_watermarks(&args.topic, p, METADATA_TIMEOUT)?;
            Ok(Offset::Offset(high))
        })
        .collect()
}

fn print_summary(r: &Report) {
    println!();
    println!("{:<14} {:>14}", "mode", r.mode);
    println!("{:<14} {:>14}", "records", r.records);
    println!("{:<14} {:>14}", "bytes", r.bytes);
    println!("{:<14} {:>14.0}", "records/s", r.records_per_sec);
    println!("{:<14} {:>14.2}", "MB/s", r.mb_per_sec);
    println!("{:<14} {:>14}", "errors", r.errors);
    print_latency("latency", &r.latency_ms);
    if let Some(ack) = &r.ack_latency_ms {
        print_latency("ack", ack);
    }
    if let Some(t) = &r.transactions {
        println!("{:<14} {:>14}", "commits", t.commits);
        println!("{:<14} {:>14.1}", "commits/s", t.commits_per_sec);
        print_latency("commit", &t.commit_latency_ms);
    }
}

fn print_latency(what: &str, l: &Latency) {
    for (name, v) in [
        ("p50", l.p50),
        ("p90", l.p90),
        ("p99", l.p99),
        ("p99.9", l.p99_9),
        ("p99.99", l.p99_99),
        ("max", l.max),
    ] {
        println!("{:<14} {:>11.3} ms", format!("{what} {name}"), v);
    }
}
