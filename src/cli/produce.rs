//! `sluice produce`: one record per line of standard input.

use super::args::ProduceArgs;
use super::client::{self, Context};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde_json::json;
use std::io::{BufRead, IsTerminal, Write};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often progress is shown on a terminal.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// Longest line taken from standard input: a record larger than this is refused by default
/// brokers anyway (message.max.bytes), so the command says so instead of buffering it.
const MAX_LINE_BYTES: usize = 1 << 20;

pub fn run(args: ProduceArgs) -> anyhow::Result<i32> {
    let producer = producer(&args)?;
    let progress = std::io::stderr().is_terminal();
    let (mut sent, mut shown) = (0u64, Instant::now());
    // The same headers go with every record: built once.
    let mut headers = OwnedHeaders::new_with_capacity(args.headers.len());
    for (k, v) in &args.headers {
        headers = headers.insert(Header {
            key: k,
            value: Some(v.as_str()),
        });
    }
    let (mut input, mut line) = (std::io::stdin().lock(), Vec::new());
    while read_line(&mut input, &mut line, sent + 1)? {
        let (key, value) = split(&args, &line);
        send(&producer, &args, key, value, &headers)?;
        sent += 1;
        producer.poll(Duration::ZERO);
        if progress && shown.elapsed() >= PROGRESS_EVERY {
            show_progress(&producer, sent);
            shown = Instant::now();
        }
    }
    finish(&producer, &args, sent, progress)
}

fn producer(args: &ProduceArgs) -> anyhow::Result<BaseProducer<Context>> {
    let mut c = client::config(&args.common);
    let acks = if args.acks == "-1" { "all" } else { &args.acks };
    let timeout_ms = client::timeout(&args.common).as_millis().to_string();
    c.set("acks", acks)
        // Retries cannot duplicate or reorder a record where the broker can tell (acks=all).
        .set("enable.idempotence", (acks == "all").to_string())
        .set("message.timeout.ms", &timeout_ms)
        .set("linger.ms", "5");
    c.create_with_context(Context::default())
        .map_err(|e| anyhow::anyhow!("cannot create a producer for {}: {e}", args.common.brokers))
}

/// Reads line `number` into `line` without its newline, its bytes as they are (records need
/// not be text); false at the end of the input. A line is read only up to its bound.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>, number: u64) -> anyhow::Result<bool> {
    line.clear();
    let n = std::io::Read::take(&mut *input, MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', line)
        .map_err(|e| anyhow::anyhow!("reading standard input: {e}"))?;
    if line.last() == Some(&b'\n') {
        line.pop();
    }
    anyhow::ensure!(
        line.len() <= MAX_LINE_BYTES,
        "line {number} is over {MAX_LINE_BYTES} bytes"
    );
    Ok(n > 0)
}

/// A line's key and value: the fixed key, or the line split at the first separator (a line
/// without one is a value without a key).
fn split<'a>(args: &'a ProduceArgs, line: &'a [u8]) -> (Option<&'a [u8]>, &'a [u8]) {
    match (&args.key, &args.key_separator) {
        (Some(k), _) => (Some(k.as_bytes()), line),
        (None, Some(sep)) => {
            let sep = sep.as_bytes();
            match line.windows(sep.len()).position(|w| w == sep) {
                Some(at) => (Some(&line[..at]), &line[at + sep.len()..]),
                None => (None, line),
            }
        }
        (None, None) => (None, line),
    }
}

/// Queues one record, waiting for room while librdkafka's queue is full.
fn send(
    producer: &BaseProducer<Context>,
    args: &ProduceArgs,
    key: Option<&[u8]>,
    value: &[u8],
    headers: &OwnedHeaders,
) -> anyhow::Result<()> {
    loop {
        let mut record = BaseRecord::to(&args.topic)
            .payload(value)
            .headers(headers.clone());
        if let Some(k) = key {
            record = record.key(k);
        }
        if let Some(p) = args.partition {
            record = record.partition(p);
        }
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                producer.poll(Duration::from_millis(100));
            }
            Err((e, _)) => return Err(producer.context().error("producing", e)),
        }
    }
}

fn show_progress(producer: &BaseProducer<Context>, sent: u64) {
    let acked = producer.context().delivered.load(Ordering::Relaxed);
    eprint!("\r{sent} records sent, {acked} acknowledged");
    let _ = std::io::stderr().flush();
}

/// Waits for every record's outcome (bounded by message.timeout.ms), then reports; any failed
/// record makes the exit status non-zero.
fn finish(
    producer: &BaseProducer<Context>,
    args: &ProduceArgs,
    sent: u64,
    progress: bool,
) -> anyhow::Result<i32> {
    let bound = client::timeout(&args.common) + Duration::from_secs(5);
    let flushed = producer.flush(bound);
    if progress {
        eprintln!();
    }
    let ctx = producer.context();
    let (delivered, failed) = (
        ctx.delivered.load(Ordering::Relaxed),
        ctx.failed.load(Ordering::Relaxed),
    );
    let json =
        json!({"topic": args.topic, "sent": sent, "acknowledged": delivered, "failed": failed});
    if delivered == sent {
        super::output::print(args.common.format, &json, || {
            format!("{delivered} records produced to {}\n", args.topic)
        });
        return Ok(0);
    }
    let cause = match (ctx.first_failure(), flushed) {
        (Some(f), _) => f,
        (None, Err(e)) => e.to_string(),
        (None, Ok(())) => "no delivery report".to_string(),
    };
    Err(ctx.error(
        &format!(
            "{} of {sent} records not produced to {}",
            sent - delivered,
            args.topic
        ),
        cause,
    ))
}
