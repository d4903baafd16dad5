//! librdkafka clients for the operator commands, and errors that name their cause.
//!
//! librdkafka retries a refused or lost connection by itself and tells the caller only that
//! its request timed out; the reason (connection refused, unknown host, ...) goes to the error
//! callback. `Context` keeps the latest such reason, so that a failure can be one line saying
//! both what failed and why.

use super::args::Common;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::metadata::Metadata;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// What the callbacks of a command's clients learn.
#[derive(Default)]
pub struct Context {
    /// librdkafka's latest error report (a client error callback).
    last_error: Mutex<Option<String>>,
    /// Produce: records acknowledged, and records that failed with the first failure.
    pub delivered: AtomicU64,
    pub failed: AtomicU64,
    first_failure: Mutex<Option<String>>,
}

impl Context {
    pub fn first_failure(&self) -> Option<String> {
        self.first_failure.lock().expect("context lock").clone()
    }

    /// Keeps `reason` as the latest error, unless it says less than the one kept ("1/1
    /// brokers are down" follows the connection failure that caused it).
    fn note(&self, reason: &str) {
        let mut last = self.last_error.lock().expect("context lock");
        if !(reason.contains("brokers are down") && last.is_some()) {
            *last = Some(reason.to_string());
        }
    }

    /// `what` failed with `e`: one line, with librdkafka's reason where it has one.
    pub fn error(&self, what: &str, e: impl std::fmt::Display) -> anyhow::Error {
        match self.last_error.lock().expect("context lock").as_deref() {
            Some(reason) => anyhow::anyhow!("{what}: {e} ({reason})"),
            None => anyhow::anyhow!("{what}: {e}"),
        }
    }
}

impl ClientContext for Context {
    /// librdkafka's own log lines would interleave with the command's output, so they are
    /// kept, not printed. Its error lines (a failed connect: "Connect to ipv4#... failed:
    /// Connection refused") come from its own threads at once, while the error callback
    /// waits for a poll that a failing metadata request may never make.
    fn log(&self, level: RDKafkaLogLevel, _fac: &str, message: &str) {
        if (level as i32) <= RDKafkaLogLevel::Error as i32 {
            self.note(message);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match reason.is_empty() {
            true => self.note(&error.to_string()),
            false => self.note(reason),
        }
    }
}

impl ConsumerContext for Context {}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                let mut first = self.first_failure.lock().expect("context lock");
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// The settings every client of a command shares.
pub fn config(common: &Common) -> ClientConfig {
    let mut c = ClientConfig::new();
    let timeout_ms = timeout(common).as_millis().to_string();
    c.set("bootstrap.servers", &common.brokers)
        .set("client.id", "sluice-cli")
        .set("socket.timeout.ms", &timeout_ms)
        // A broker that is down is retried quickly, so the command's own timeout decides.
        .set("reconnect.backoff.max.ms", "1000")
        .set_log_level(RDKafkaLogLevel::Error);
    for (k, v) in &common.client_config {
        c.set(k, v);
    }
    c
}

pub fn timeout(common: &Common) -> Duration {
    Duration::from_secs(common.timeout_s.max(1))
}

/// A consumer for metadata, offsets and group lookups; `group` when it acts for a group (its
/// committed offsets) without joining it.
pub fn consumer(common: &Common, group: Option<&str>) -> anyhow::Result<BaseConsumer<Context>> {
    let mut c = config(common);
    c.set("group.id", group.unwrap_or("sluice-cli"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    c.create_with_context(Context::default())
        .map_err(|e| anyhow::anyhow!("cannot create a client for {}: {e}", common.brokers))
}

/// librdkafka puts its log and error events on the consumer's queue: serving them lets
/// `Context` learn why a request failed (a failing metadata request alone serves none).
const DRAIN_POLLS: usize = 5;

/// The cluster's metadata (of `topic`, or of all topics), or why it could not be had.
pub fn metadata(
    consumer: &BaseConsumer<Context>,
    common: &Common,
    topic: Option<&str>,
    what: &str,
) -> anyhow::Result<Metadata> {
    consumer
        .fetch_metadata(topic, timeout(common))
        .map_err(|e| failed(consumer, what, e))
}

/// A partition as the metadata describes it.
pub struct Partition {
    pub id: i32,
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// `topic`'s partitions in id order, or why there are none (no such topic, no cluster).
pub fn partitions(
    consumer: &BaseConsumer<Context>,
    common: &Common,
    topic: &str,
    what: &str,
) -> anyhow::Result<Vec<Partition>> {
    let metadata = metadata(consumer, common, Some(topic), what)?;
    let t = metadata.topics().iter().find(|t| t.name() == topic);
    let t = t.ok_or_else(|| anyhow::anyhow!("{what}: no topic {topic} in the metadata"))?;
    if let Some(e) = t.error() {
        anyhow::bail!("{what}: {}", rdkafka::types::RDKafkaErrorCode::from(e));
    }
    let mut out: Vec<Partition> = t
        .partitions()
        .iter()
        .map(|p| Partition {
            id: p.id(),
            leader: p.leader(),
            replicas: p.replicas().to_vec(),
            isr: p.isr().to_vec(),
        })
        .collect();
    out.sort_by_key(|p| p.id);
    Ok(out)
}

/// `what` failed with `e`, as `Context::error` says, once the consumer's queued events are
/// served.
pub fn failed(
    consumer: &BaseConsumer<Context>,
    what: &str,
    e: impl std::fmt::Display,
) -> anyhow::Error {
    for _ in 0..DRAIN_POLLS {
        consumer.poll(Duration::from_millis(20));
    }
    consumer.context().error(what, e)
}

/// An admin client, once the cluster answered a metadata request: an admin request to an
/// unreachable cluster only times out, while the metadata request's failure says why.
pub fn admin(common: &Common) -> anyhow::Result<(AdminClient<Context>, AdminOptions)> {
    let probe = consumer(common, None)?;
    metadata(
        &probe,
        common,
        None,
        &format!("reaching {}", common.brokers),
    )?;
    let admin = config(common)
        .create_with_context(Context::default())
        .map_err(|e| anyhow::anyhow!("cannot create a client for {}: {e}", common.brokers))?;
    let timeout = timeout(common);
    let options = AdminOptions::new()
        .request_timeout(Some(timeout))
        .operation_timeout(Some(timeout));
    Ok((admin, options))
}

/// Every named outcome of an admin request (groups) succeeded, or one error naming each
/// failure.
pub fn all_done(
    admin: &AdminClient<Context>,
    what: &str,
    results: Vec<Result<String, (String, RDKafkaErrorCode)>>,
) -> anyhow::Result<()> {
    let outcomes = results.into_iter().map(|r| match r {
        Ok(name) => (name, None),
        Err((name, code)) => (name, Some(code.to_string())),
    });
    all_succeeded(admin, what, outcomes.collect())
}

/// `all_done` for outcomes that carry their error's description (`topic_admin::Outcome`).
pub fn all_succeeded(
    admin: &AdminClient<Context>,
    what: &str,
    outcomes: Vec<(String, Option<String>)>,
) -> anyhow::Result<()> {
    let failed: Vec<String> = outcomes
        .into_iter()
        .filter_map(|(name, error)| error.map(|e| format!("{name}: {e}")))
        .collect();
    match failed.is_empty() {
        true => Ok(()),
        false => Err(admin.inner().context().error(what, failed.join("; "))),
    }
}

/// Waits for an admin operation (a future) on this thread.
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}
