//! `sluice consume`: prints a topic's records, alone or as a member of a group.

use super::args::{ConsumeArgs, Format};
use super::client::{self, Context};
use super::position::{self, Position};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a group member commits what it printed (and once more when it stops).
const COMMIT_EVERY: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(100);

pub fn run(args: ConsumeArgs) -> anyhow::Result<i32> {
    let from: Option<Position> = match &args.from {
        Some(s) => Some(
            s.parse()
                .map_err(|e: String| anyhow::anyhow!("--from {e}"))?,
        ),
        None => None,
    };
    let consumer = consumer(&args, from)?;
    let partitions = partitions(&consumer, &args)?;
    start(&consumer, &args, &partitions, from)?;
    // Interrupted, a member commits what it printed before it leaves.
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone())?;
    }
    let (mut printed, mut committed) = (0u64, Instant::now());
    let mut out = std::io::stdout().lock();
    while !stop.load(Ordering::Relaxed) && args.count.is_none_or(|n| printed < n) {
        match consumer.poll(POLL) {
            None => {}
            Some(Err(e)) => return Err(client::failed(&consumer, "consuming", e)),
            Some(Ok(m)) => {
                // A reader that went away (`| head`) ends the run as an interrupt does.
                match print_record(&mut out, args.common.format, &m) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => break,
                    result => result?,
                }
                printed += 1;
                if args.group.is_some() {
                    consumer.store_offset_from_message(&m)?;
                }
            }
        }
        if args.group.is_some() && committed.elapsed() >= COMMIT_EVERY {
            commit(&consumer, CommitMode::Async)?;
            committed = Instant::now();
        }
    }
    match out.flush() {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => return Err(e.into()),
        _ => {}
    }
    if args.group.is_some() {
        commit(&consumer, CommitMode::Sync)?;
    }
    Ok(0)
}

fn consumer(args: &ConsumeArgs, from: Option<Position>) -> anyhow::Result<BaseConsumer<Context>> {
    let mut c = client::config(&args.common);
    let reset = match from {
        Some(Position::Latest) => "latest",
        _ => "earliest",
    };
    let group = args
        .group
        .clone()
        .unwrap_or_else(|| format!("sluice-consume-{}", std::process::id()));
    c.set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", reset);
    c.create_with_context(Context::default())
        .map_err(|e| anyhow::anyhow!("cannot create a consumer for {}: {e}", args.common.brokers))
}

/// The partitions to read: `-p`, or all of the topic's. Asking first also makes an unreachable
/// cluster or a missing topic an error at once rather than a silent wait.
fn partitions(consumer: &BaseConsumer<Context>, args: &ConsumeArgs) -> anyhow::Result<Vec<i32>> {
    let topic = &args.topic;
    let what = format!("consuming {topic}");
    let all: Vec<i32> = client::partitions(consumer, &args.common, topic, &what)?
        .iter()
        .map(|p| p.id)
        .collect();
    match args.partition {
        Some(p) if all.contains(&p) => Ok(vec![p]),
        Some(p) => anyhow::bail!("{what}: it has no partition {p} ({} partitions)", all.len()),
        None => Ok(all),
    }
}

/// A group member without a position to start from joins the group (its committed offsets
/// first, else `--from`); otherwise the partitions are assigned at the positions `--from`
/// names (default earliest), and a group's commits are made under its name without joining.
fn start(
    consumer: &BaseConsumer<Context>,
    args: &ConsumeArgs,
    partitions: &[i32],
    from: Option<Position>,
) -> anyhow::Result<()> {
    let joins = args.group.is_some()
        && args.partition.is_none()
        && matches!(from, None | Some(Position::Earliest | Position::Latest));
    if joins {
        return consumer
            .subscribe(&[&args.topic])
            .map_err(|e| client::failed(consumer, "joining the group", e));
    }
    let position = from.unwrap_or(Position::Earliest);
    let timeout = client::timeout(&args.common);
    let offsets = position::resolve(consumer, &args.topic, partitions, position, timeout)?;
    let mut tpl = TopicPartitionList::new();
    for (p, offset) in offsets {
        tpl.add_partition_offset(&args.topic, p, Offset::Offset(offset))?;
    }
    consumer
        .assign(&tpl)
        .map_err(|e| client::failed(consumer, "assigning partitions", e))
}

/// Commits what was printed; nothing printed yet is not an error.
fn commit(consumer: &BaseConsumer<Context>, mode: CommitMode) -> anyhow::Result<()> {
    match consumer.commit_consumer_state(mode) {
        Ok(()) => Ok(()),
        Err(e) if e.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::NoOffset) => {
            Ok(())
        }
        Err(e) => Err(client::failed(consumer, "committing offsets", e)),
    }
}

fn print_record(
    out: &mut impl Write,
    format: Format,
    m: &BorrowedMessage<'_>,
) -> std::io::Result<()> {
    let text = |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
    match format {
        Format::Table => {
            writeln!(out, "{}", text(m.payload()).unwrap_or_default())?;
        }
        Format::Json => {
            let headers: Vec<Value> = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| json!({"key": h.key, "value": text(h.value)}))
                        .collect()
                })
                .unwrap_or_default();
            let record = json!({
                "topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
                "timestamp": m.timestamp().to_millis(), "key": text(m.key()),
                "value": text(m.payload()), "headers": headers,
            });
            writeln!(out, "{record}")?;
        }
    }
    Ok(())
}
