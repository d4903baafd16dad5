//! Producer threads: one librdkafka producer each, pinned to a core.

use super::args::{BenchArgs, Keys};
use super::payload::{self, Stamp};
use super::stats::Meter;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the producers share.
pub struct Shared {
    pub meter: Meter,
    pub stop: AtomicBool,
    /// Next sequence number to claim, for --count.
    pub next: AtomicU64,
    pub epoch: Instant,
    /// Records acknowledged over the whole run, warm-up included (never reset).
    pub acked_total: AtomicU64,
    /// Errors printed so far; only the first few are printed.
    pub printed: AtomicU64,
    /// Transactions committed, with each commit's latency (--transaction-records).
    pub commits: Meter,
}

const PRINTED_ERRORS_MAX: u64 = 5;

impl Shared {
    pub fn report_error(&self, what: &str) {
        self.meter.error();
        if self.printed.fetch_add(1, Ordering::Relaxed) < PRINTED_ERRORS_MAX {
            eprintln!("bench: {what}");
        }
    }
}

struct Context {
    shared: Arc<Shared>,
    worker: usize,
}

impl ClientContext for Context {}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(msg) => {
                self.shared.acked_total.fetch_add(1, Ordering::Relaxed);
                let now_ns = self.shared.epoch.elapsed().as_nanos() as u64;
                let payload = msg.payload().unwrap_or_default();
                if let Some(stamp) = payload::read(payload) {
                    let latency_us = now_ns.saturating_sub(stamp.sent_ns) / 1000;
                    self.shared
                        .meter
                        .record(self.worker, payload.len(), latency_us);
                }
            }
            Err((e, _)) => self.shared.report_error(&format!("delivery failed: {e}")),
        }
    }
}

pub fn client_config(args: &BenchArgs) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &args.bootstrap)
        .set("acks", args.acks_str())
        .set("compression.type", args.compression_str())
        .set("linger.ms", args.linger_ms.to_string())
        .set("batch.size", args.batch_size.to_string())
        .set("message.timeout.ms", "30000")
        .set("queue.buffering.max.kbytes", "262144")
        // The bench measures the broker, not idempotence: keep librdkafka's default off.
        .set("enable.idempotence", "false");
    for (k, v) in &args.client_config {
        c.set(k, v);
    }
    c
}

/// Runs one producer until `stop`, or until --count records have been claimed.
pub fn run(
    worker: usize,
    args: &BenchArgs,
    shared: Arc<Shared>,
    partitions: i32,
) -> Result<(), KafkaError> {
    let ctx = Context {
        shared: shared.clone(),
        worker,
    };
    let mut config = client_config(args);
    if args.idempotence || args.transaction_records.is_some() {
        config.set("enable.idempotence", "true");
    }
    if args.transaction_records.is_some() {
        // Unique per run and worker, so that one run never fences another's producers.
        let id = format!("sluice-bench-{}-{worker}", std::process::id());
        config.set("transactional.id", id);
    }
    let producer: BaseProducer<Context> = config.create_with_context(ctx)?;
    let mut txn = args
        .transaction_records
        .map(|n| Transactions::begin(&producer, n))
        .transpose()?;
    let per_producer_rate = args.rate.map(|r| r / args.producers as f64);
    let start = Instant::now();
    let mut buf = payload::filler(args.message_size);
    let mut sent: u64 = 0;
    let mut rng = worker as u64 * 0x9e37_79b9_7f4a_7c15 + 1;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let seq = shared.next.fetch_add(1, Ordering::Relaxed);
        if args.count.is_some_and(|n| seq >= n) {
            break;
        }
        let intended = pace(&producer, per_producer_rate, start, sent);
        let sent_ns = intended.duration_since(shared.epoch).as_nanos() as u64;
        payload::write(
            &mut buf,
            &Stamp {
                sent_ns,
                producer: worker as u32,
                seq,
            },
        );
        let key = next_key(args.keys, seq, &mut rng);
        let mut record = BaseRecord::to(&args.topic).payload(&buf[..]);
        if let Some(k) = &key {
            record = record.key(&k[..]);
        } else {
            record = record.partition(((seq + worker as u64) % partitions as u64) as i32);
        }
        send(&producer, &shared, record);
        sent += 1;
        producer.poll(Duration::ZERO);
        if let Some(t) = &mut txn {
            t.sent(&producer, &shared, worker);
        }
    }
    if let Some(t) = &mut txn {
        t.commit(&producer, &shared, worker);
    }
    flush(&producer, &shared);
    Ok(())
}

/// The key of record `seq` (None: records go round the partitions instead).
fn next_key(keys: Keys, seq: u64, rng: &mut u64) -> Option<[u8; 8]> {
    match keys {
        Keys::None => None,
        Keys::Random => {
            // xorshift: cheap and good enough to spread keys.
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            Some(rng.to_be_bytes())
        }
        Keys::Distinct(n) => Some((seq % n).to_be_bytes()),
    }
}

/// Waits up to 30 s for the records in flight; those still unacknowledged count as errors.
fn flush(producer: &BaseProducer<Context>, shared: &Shared) {
    if producer.flush(Duration::from_secs(30)).is_err() {
        let left = producer.in_flight_count();
        for _ in 0..left {
            shared.meter.error();
        }
        shared.report_error(&format!(
            "{left} records not acknowledged within 30 s of the end"
        ));
    }
}

/// A transactional producer's open transaction: committed every `records_per_txn` records.
struct Transactions {
    records_per_txn: u64,
    in_txn: u64,
}

/// How long a transaction's init, commit or abort may take before it counts as failed.
const TXN_TIMEOUT: Duration = Duration::from_secs(30);

impl Transactions {
    fn begin(producer: &BaseProducer<Context>, records_per_txn: u64) -> Result<Self, KafkaError> {
        producer.init_transactions(TXN_TIMEOUT)?;
        producer.begin_transaction()?;
        Ok(Transactions {
            records_per_txn,
            in_txn: 0,
        })
    }

    fn sent(&mut self, producer: &BaseProducer<Context>, shared: &Shared, worker: usize) {
        self.in_txn += 1;
        if self.in_txn >= self.records_per_txn {
            self.commit(producer, shared, worker);
            if let Err(e) = producer.begin_transaction() {
                shared.report_error(&format!("begin transaction failed: {e}"));
            }
        }
    }

    /// Commits the open transaction (an empty one is left open); a failed commit is aborted
    /// and counted as an error.
    fn commit(&mut self, producer: &BaseProducer<Context>, shared: &Shared, worker: usize) {
        if self.in_txn == 0 {
            return;
        }
        self.in_txn = 0;
        let started = Instant::now();
        // Deliveries first, served as they come: the crate's own flush inside
        // commit_transaction polls in 100 ms steps, which would be most of what is measured.
        while producer.in_flight_count() > 0 && started.elapsed() < TXN_TIMEOUT {
            producer.poll(Duration::from_millis(1));
        }
        match producer.commit_transaction(TXN_TIMEOUT) {
            Ok(()) => {
                let us = started.elapsed().as_micros() as u64;
                shared.commits.record(worker, 0, us);
            }
            Err(e) => {
                shared.report_error(&format!("commit failed: {e}"));
                if let Err(e) = producer.abort_transaction(TXN_TIMEOUT) {
                    shared.report_error(&format!("abort failed: {e}"));
                }
            }
        }
    }
}

/// When the `sent`-th record of a paced producer is due, or now when unpaced. Latency counts
/// from this intended time, so a stall is not hidden. The wait until then is spent serving
/// delivery reports (librdkafka hands them over only inside `poll`): sleeping instead would
/// add up to a send interval to every acknowledgement's measured latency.
fn pace(producer: &BaseProducer<Context>, rate: Option<f64>, start: Instant, sent: u64) -> Instant {
    let Some(rate) = rate else {
        return Instant::now();
    };
    let at = start + Duration::from_secs_f64(sent as f64 / rate);
    loop {
        let now = Instant::now();
        if now >= at {
            return at;
        }
        producer.poll(at - now);
    }
}

/// Hands a record to librdkafka. A full local queue is back-pressure, not an error: callbacks
/// are served and the send retried.
fn send(producer: &BaseProducer<Context>, shared: &Shared, record: BaseRecord<'_, [u8], [u8]>) {
    let mut pending = record;
    loop {
        match producer.send(pending) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                producer.poll(Duration::from_millis(1));
                pending = r;
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            Err((e, _)) => {
                shared.report_error(&format!("send failed: {e}"));
                return;
            }
        }
    }
}
