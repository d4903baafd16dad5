//! Counters each shard keeps about itself, and a tiny Prometheus text endpoint that reads them.
//! A shard only ever writes its own counters (relaxed atomics, no locks); the endpoint's
//! thread only reads.
//!
//! A base layer: it imports nothing from the crate, so every layer may count into it. Requests
//! are counted per API key number; the server names the APIs it serves when it starts the
//! endpoint.

use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of an HTTP request the endpoint reads before answering.
const MAX_REQUEST_BYTES: usize = 8192;
const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// API keys counted: Kafka's keys are small numbers (under 100 today); a request with a larger
/// key never reaches a handler.
pub const MAX_API_KEYS: usize = 128;

pub struct ShardMetrics {
    /// Requests served, indexed by API key number.
    pub requests: [AtomicU64; MAX_API_KEYS],
    /// The same requests by how long each took on the broker: from its last byte read to its
    /// response written (or, with nothing to answer, to its handling done), indexed likewise.
    pub request_duration: [LatencyHistogram; MAX_API_KEYS],
    pub parked: AtomicU64,
    pub parked_rejected: AtomicU64,
    /// Appends that failed to reach the disk (ENOSPC, EIO) and were answered KAFKA_STORAGE_ERROR.
    pub storage_errors: AtomicU64,
    /// Requests read from a socket and not yet answered.
    pub requests_queued: AtomicU64,
    /// Bytes of request frames held by the shard's connections, and how often a connection had
    /// to wait for room under `max_request_memory_bytes_per_shard`.
    pub request_memory_bytes: AtomicU64,
    pub request_memory_waits: AtomicU64,
    /// Connections closed because a request's bytes arrived too slowly.
    pub slow_requests_closed: AtomicU64,
    /// Client connections this shard accepted and still serves.
    pub connections: AtomicU64,
    /// Security (issue 19): failed SASL authentications and TLS handshakes, TLS handshakes
    /// completed, requests refused by the authorizer.
    pub authentication_failures: AtomicU64,
    pub tls_handshake_failures: AtomicU64,
    pub tls_handshakes: AtomicU64,
    pub authorization_denials: AtomicU64,
    /// SASL sessions renewed on their connection (KIP-368).
    pub reauthentications: AtomicU64,
    /// Fetched record bytes the kernel sent straight from segment files (sendfile), and those
    /// copied through user space while waiting for a full socket to drain.
    pub sendfile_bytes: AtomicU64,
    pub sendfile_copied_bytes: AtomicU64,
    /// Zero-copy fetches whose data was not in the page cache, read asynchronously instead.
    pub cold_fetches: AtomicU64,
    /// Segments and bytes deleted by retention and DeleteRecords.
    pub retention_deleted_segments: AtomicU64,
    pub retention_deleted_bytes: AtomicU64,
    /// Passes of the retention and cleaner loops over the shard's partitions, counted as each
    /// ends (a test or an operator can tell that a pass ran, not only what it removed).
    pub retention_passes: AtomicU64,
    pub cleaner_passes: AtomicU64,
    /// Fetch sessions held (KIP-227), and fetches served incrementally within one.
    pub fetch_sessions: AtomicU64,
    pub incremental_fetches: AtomicU64,
    /// Consumers' partition reads a leader sent to a replica of their rack (KIP-392), and
    /// those a follower served.
    pub preferred_replica_redirects: AtomicU64,
    pub follower_consumer_reads: AtomicU64,
    /// Records compaction removed because a later record has their key.
    pub compaction_records_removed: AtomicU64,
    /// `__consumer_offsets` records that could not be decoded at replay and were skipped.
    pub group_records_undecodable: AtomicU64,
    /// Group-commit passes of the flusher, by how long their fdatasyncs took, and the files
    /// they synced.
    pub flush_duration: LatencyHistogram,
    pub fsyncs: AtomicU64,
    /// Appends the flusher made durable as records of the shard's journal.
    pub journal_records: AtomicU64,
    /// New groups or members the coordinator refused for want of room (`max_groups_per_shard`
    /// groups, or its member bound): answered COORDINATOR_NOT_AVAILABLE.
    pub groups_refused: AtomicU64,
    /// Replication: partitions this shard leads with fewer in-sync replicas than replicas;
    /// in-sync set shrinks and expands this shard's leaders asked for; times this shard's
    /// partitions became leader here; record bytes followers appended from their leaders.
    pub under_replicated_partitions: AtomicU64,
    /// How far the furthest follower of a partition led here trails: records, and ms since it
    /// last caught up.
    pub follower_lag_records_max: AtomicU64,
    pub follower_lag_bytes_max: AtomicU64,
    pub follower_lag_ms_max: AtomicU64,
    pub isr_shrinks: AtomicU64,
    pub isr_expands: AtomicU64,
    pub leader_elections: AtomicU64,
    pub replicated_bytes: AtomicU64,
    /// Readiness (`GET /readyz`): 1 once the shard has recovered its partitions and listens
    /// for clients; on the controller shard, 1 once this node's registration with the
    /// cluster's controller was answered.
    pub serving: AtomicU64,
    pub registered: AtomicU64,
}

impl Default for ShardMetrics {
    fn default() -> ShardMetrics {
        ShardMetrics {
            requests: std::array::from_fn(|_| AtomicU64::new(0)),
            request_duration: std::array::from_fn(|_| LatencyHistogram::default()),
            parked: AtomicU64::new(0),
            parked_rejected: AtomicU64::new(0),
            storage_errors: AtomicU64::new(0),
            requests_queued: AtomicU64::new(0),
            request_memory_bytes: AtomicU64::new(0),
            request_memory_waits: AtomicU64::new(0),
            slow_requests_closed: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            authentication_failures: AtomicU64::new(0),
            tls_handshake_failures: AtomicU64::new(0),
            tls_handshakes: AtomicU64::new(0),
            authorization_denials: AtomicU64::new(0),
            reauthentications: AtomicU64::new(0),
            sendfile_bytes: AtomicU64::new(0),
            sendfile_copied_bytes: AtomicU64::new(0),
            cold_fetches: AtomicU64::new(0),
            retention_deleted_segments: AtomicU64::new(0),
            retention_deleted_bytes: AtomicU64::new(0),
            retention_passes: AtomicU64::new(0),
            cleaner_passes: AtomicU64::new(0),
            fetch_sessions: AtomicU64::new(0),
            incremental_fetches: AtomicU64::new(0),
            preferred_replica_redirects: AtomicU64::new(0),
            follower_consumer_reads: AtomicU64::new(0),
            compaction_records_removed: AtomicU64::new(0),
            group_records_undecodable: AtomicU64::new(0),
            serving: AtomicU64::new(0),
            registered: AtomicU64::new(0),
            groups_refused: AtomicU64::new(0),
            under_replicated_partitions: AtomicU64::new(0),
            follower_lag_records_max: AtomicU64::new(0),
            follower_lag_bytes_max: AtomicU64::new(0),
            follower_lag_ms_max: AtomicU64::new(0),
            isr_shrinks: AtomicU64::new(0),
            isr_expands: AtomicU64::new(0),
            leader_elections: AtomicU64::new(0),
            replicated_bytes: AtomicU64::new(0),
            flush_duration: LatencyHistogram::default(),
            fsyncs: AtomicU64::new(0),
            journal_records: AtomicU64::new(0),
        }
    }
}

/// Upper bounds (µs) of a latency histogram's buckets; one more bucket holds the rest. Up to
/// seconds, since a fetch may wait that long for records (`max_wait_ms`).
pub const LATENCY_BUCKETS_US: [u64; 15] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000,
];

/// A Prometheus histogram of durations, written by one shard only.
#[derive(Default)]
pub struct LatencyHistogram {
    /// Observations at or below each bound of `LATENCY_BUCKETS_US` (not cumulative), then above.
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl LatencyHistogram {
    pub fn observe(&self, us: u64) {
        let i = LATENCY_BUCKETS_US.partition_point(|&bound| bound < us);
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// The histogram's lines for one series (`labels`, such as `shard="0"`), cumulative as
    /// Prometheus wants them.
    fn render(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = LATENCY_BUCKETS_US
                .get(i)
                .map_or("+Inf".to_string(), |us| format!("{}", *us as f64 / 1e6));
            out.push_str(&format!(
                "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}\n"
            ));
        }
        out.push_str(&format!(
            "{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}\n",
            self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            self.count()
        ));
    }
}

/// File descriptors held by open log segments, all shards together (a segment holds two: its
/// file and the duplicate that fetches send from). Process-wide, since descriptors are.
pub static SEGMENT_DESCRIPTORS: AtomicU64 = AtomicU64::new(0);
/// Descriptors the process holds (counted once a minute) and its limit (RLIMIT_NOFILE).
pub static OPEN_DESCRIPTORS: AtomicU64 = AtomicU64::new(0);
pub static DESCRIPTOR_LIMIT: AtomicU64 = AtomicU64::new(0);

/// The controller quorum's Raft state on this node (a voter of a cluster; zero otherwise),
/// written by the controller shard.
pub static RAFT_TERM: AtomicU64 = AtomicU64::new(0);
/// 0 follower, 1 candidate (pre-vote included), 2 leader.
pub static RAFT_ROLE: AtomicU64 = AtomicU64::new(0);
/// The active controller's node id plus one (0: none known).
pub static RAFT_LEADER: AtomicU64 = AtomicU64::new(0);
pub static RAFT_COMMIT_INDEX: AtomicU64 = AtomicU64::new(0);
pub static RAFT_APPLIED_INDEX: AtomicU64 = AtomicU64::new(0);
pub static RAFT_SNAPSHOT_INDEX: AtomicU64 = AtomicU64::new(0);
pub static RAFT_ELECTIONS: AtomicU64 = AtomicU64::new(0);
pub static RAFT_DROPPED_MESSAGES: AtomicU64 = AtomicU64::new(0);
/// On the leader: each follower's (node id, entries behind the leader's log end).
pub static RAFT_FOLLOWER_LAG: std::sync::Mutex<Vec<(i32, u64)>> = std::sync::Mutex::new(Vec::new());

/// Process-wide gauges: name, help, value.
const PROCESS: &[(&str, &str, &AtomicU64)] = &[
    (
        "sluice_raft_term",
        "The controller quorum's current Raft term.",
        &RAFT_TERM,
    ),
    (
        "sluice_raft_role",
        "This node's Raft role in the controller quorum: 0 follower, 1 candidate, 2 leader.",
        &RAFT_ROLE,
    ),
    (
        "sluice_raft_leader_plus_one",
        "The active controller's node id plus one (0: none known).",
        &RAFT_LEADER,
    ),
    (
        "sluice_raft_commit_index",
        "The metadata log's commit index.",
        &RAFT_COMMIT_INDEX,
    ),
    (
        "sluice_raft_applied_index",
        "The metadata log index this node has applied.",
        &RAFT_APPLIED_INDEX,
    ),
    (
        "sluice_raft_snapshot_index",
        "The index of this node's latest metadata snapshot.",
        &RAFT_SNAPSHOT_INDEX,
    ),
    (
        "sluice_raft_elections_total",
        "Elections held since this node started (each new Raft term it saw).",
        &RAFT_ELECTIONS,
    ),
    (
        "sluice_raft_dropped_messages_total",
        "Raft messages dropped because an inbox or a peer's outbox was full.",
        &RAFT_DROPPED_MESSAGES,
    ),
    (
        "sluice_segment_descriptors",
        "File descriptors held by open log segments (all shards).",
        &SEGMENT_DESCRIPTORS,
    ),
    (
        "sluice_open_descriptors",
        "File descriptors the broker process holds (counted once a minute).",
        &OPEN_DESCRIPTORS,
    ),
    (
        "sluice_descriptor_limit",
        "The broker's file descriptor limit (RLIMIT_NOFILE, raised to the hard limit at start).",
        &DESCRIPTOR_LIMIT,
    ),
];

/// A rate limit for a log line that a flood of events could repeat (a full disk, a full
/// queue): at most one line per interval; the events in between are counted and reported with
/// the next line. Per shard (not `Sync`).
pub struct LogLimiter {
    interval_ms: u64,
    /// When the last line was let through (monotonic ms); None: never.
    last_ms: Cell<Option<u64>>,
    suppressed: Cell<u64>,
}

impl LogLimiter {
    pub const fn new(interval_ms: u64) -> LogLimiter {
        LogLimiter {
            interval_ms,
            last_ms: Cell::new(None),
            suppressed: Cell::new(0),
        }
    }

    /// Some(n): log now, and say that n lines were suppressed since the last one. None: stay
    /// quiet (the event is counted).
    pub fn admit(&self, now_ms: u64) -> Option<u64> {
        match self.last_ms.get() {
            Some(last) if now_ms < last + self.interval_ms => {
                self.suppressed.set(self.suppressed.get() + 1);
                None
            }
            _ => {
                self.last_ms.set(Some(now_ms));
                Some(self.suppressed.replace(0))
            }
        }
    }
}

impl ShardMetrics {
    pub fn count_request(&self, api_key: i16) {
        if let Some(counter) = by_api(&self.requests, api_key) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes that a request of `api_key` took `us` on the broker (see `request_duration`).
    pub fn observe_request(&self, api_key: i16, us: u64) {
        if let Some(histogram) = by_api(&self.request_duration, api_key) {
            histogram.observe(us);
        }
    }
}

/// `api_key`'s slot of a per-API array; None for a key outside it (never served).
fn by_api<T>(slots: &[T], api_key: i16) -> Option<&T> {
    usize::try_from(api_key).ok().and_then(|k| slots.get(k))
}

/// The APIs the endpoint reports: (key number, name), in the order to print.
pub type ApiNames = Vec<(i16, String)>;

/// Adds `delta` (which may be negative) to a gauge.
pub fn adjust(gauge: &AtomicU64, delta: i64) {
    if delta >= 0 {
        gauge.fetch_add(delta as u64, Ordering::Relaxed);
    } else {
        gauge.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
    }
}

pub fn bump(counter: &AtomicU64) {
    add(counter, 1);
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// One value per shard: name, help, type, and where it is kept.
type PerShard = (
    &'static str,
    &'static str,
    &'static str,
    fn(&ShardMetrics) -> &AtomicU64,
);

const PER_SHARD: &[PerShard] = &[
    (
        "sluice_parked_operations",
        "Operations parked on the shard's timing wheel.",
        "gauge",
        |m| &m.parked,
    ),
    (
        "sluice_parked_rejected_total",
        "Operations not parked because the shard's bound was reached.",
        "counter",
        |m| &m.parked_rejected,
    ),
    (
        "sluice_storage_errors_total",
        "Appends that failed to reach the disk and were answered KAFKA_STORAGE_ERROR.",
        "counter",
        |m| &m.storage_errors,
    ),
    (
        "sluice_requests_queued",
        "Requests read from sockets and not yet answered.",
        "gauge",
        |m| &m.requests_queued,
    ),
    (
        "sluice_request_memory_bytes",
        "Bytes of request frames held by the shard's connections.",
        "gauge",
        |m| &m.request_memory_bytes,
    ),
    (
        "sluice_request_memory_waits_total",
        "Times a connection waited for room under max_request_memory_bytes_per_shard.",
        "counter",
        |m| &m.request_memory_waits,
    ),
    (
        "sluice_slow_requests_closed_total",
        "Connections closed because a request arrived slower than request_read_timeout_ms.",
        "counter",
        |m| &m.slow_requests_closed,
    ),
    (
        "sluice_authentication_failures_total",
        "SASL authentications that failed (wrong password, unknown user, bad message).",
        "counter",
        |m| &m.authentication_failures,
    ),
    (
        "sluice_tls_handshakes_total",
        "TLS handshakes completed on TLS listeners.",
        "counter",
        |m| &m.tls_handshakes,
    ),
    (
        "sluice_tls_handshake_failures_total",
        "TLS handshakes that failed (plaintext or garbage on a TLS port, a refused certificate).",
        "counter",
        |m| &m.tls_handshake_failures,
    ),
    (
        "sluice_authorization_denials_total",
        "Requests or parts of requests the authorizer refused.",
        "counter",
        |m| &m.authorization_denials,
    ),
    (
        "sluice_reauthentications_total",
        "SASL sessions renewed on their connection (KIP-368, connections_max_reauth_ms).",
        "counter",
        |m| &m.reauthentications,
    ),
    (
        "sluice_sendfile_bytes_total",
        "Fetched record bytes sent from segment files by sendfile, never entering user space.",
        "counter",
        |m| &m.sendfile_bytes,
    ),
    (
        "sluice_sendfile_copied_bytes_total",
        "Fetched record bytes copied through user space while a full socket drained.",
        "counter",
        |m| &m.sendfile_copied_bytes,
    ),
    (
        "sluice_cold_fetches_total",
        "Zero-copy fetches of data not in the page cache, read asynchronously instead of sendfile.",
        "counter",
        |m| &m.cold_fetches,
    ),
    (
        "sluice_retention_deleted_segments_total",
        "Segments deleted by retention (retention.ms, retention.bytes) and DeleteRecords.",
        "counter",
        |m| &m.retention_deleted_segments,
    ),
    (
        "sluice_retention_deleted_bytes_total",
        "Bytes of segments deleted by retention and DeleteRecords.",
        "counter",
        |m| &m.retention_deleted_bytes,
    ),
    (
        "sluice_retention_passes_total",
        "Passes of retention over the shard's partitions (each log.retention.check.interval.ms).",
        "counter",
        |m| &m.retention_passes,
    ),
    (
        "sluice_cleaner_passes_total",
        "Passes of the log cleaner over the shard's partitions (each log.cleaner.backoff.ms).",
        "counter",
        |m| &m.cleaner_passes,
    ),
    (
        "sluice_preferred_replica_redirects_total",
        "Consumers' partition reads a leader sent to an in-sync replica of their rack (KIP-392).",
        "counter",
        |m| &m.preferred_replica_redirects,
    ),
    (
        "sluice_follower_consumer_reads_total",
        "Consumers' partition reads this node served as a follower (KIP-392).",
        "counter",
        |m| &m.follower_consumer_reads,
    ),
    (
        "sluice_fetch_sessions",
        "Incremental fetch sessions (KIP-227) the shard holds.",
        "gauge",
        |m| &m.fetch_sessions,
    ),
    (
        "sluice_incremental_fetches_total",
        "Fetch requests served incrementally within a fetch session.",
        "counter",
        |m| &m.incremental_fetches,
    ),
    (
        "sluice_connections",
        "Client connections the shard accepted and still serves.",
        "gauge",
        |m| &m.connections,
    ),
    (
        "sluice_compaction_records_removed_total",
        "Records compaction removed because a later record has the same key.",
        "counter",
        |m| &m.compaction_records_removed,
    ),
    (
        "sluice_group_records_undecodable_total",
        "__consumer_offsets records that could not be decoded at replay and were skipped.",
        "counter",
        |m| &m.group_records_undecodable,
    ),
    (
        "sluice_fsyncs_total",
        "fdatasyncs of appended data: the journal's, and partition files' (one per dirty file per group-commit pass, those a journal chunk covered once it is left, and those of a journal fence before a truncation, compaction swap or replica removal).",
        "counter",
        |m| &m.fsyncs,
    ),
    (
        "sluice_journal_records_total",
        "Small appends the flusher made durable as records of the shard's journal, not by syncing their files.",
        "counter",
        |m| &m.journal_records,
    ),
    (
        "sluice_groups_refused_total",
        "New consumer groups or members refused for want of room (max_groups_per_shard, or the member bound).",
        "counter",
        |m| &m.groups_refused,
    ),
    (
        "sluice_under_replicated_partitions",
        "Partitions led here with fewer in-sync replicas than replicas.",
        "gauge",
        |m| &m.under_replicated_partitions,
    ),
    (
        "sluice_follower_lag_records_max",
        "Records the furthest follower of a partition led here is behind its leader.",
        "gauge",
        |m| &m.follower_lag_records_max,
    ),
    (
        "sluice_follower_lag_bytes_max",
        "Bytes the furthest follower of a partition led here is behind its leader.",
        "gauge",
        |m| &m.follower_lag_bytes_max,
    ),
    (
        "sluice_follower_lag_ms_max",
        "Milliseconds since the furthest follower of a partition led here last caught up.",
        "gauge",
        |m| &m.follower_lag_ms_max,
    ),
    (
        "sluice_isr_shrinks_total",
        "In-sync set shrinks leaders here asked the controller for (a follower fell behind).",
        "counter",
        |m| &m.isr_shrinks,
    ),
    (
        "sluice_isr_expands_total",
        "In-sync set expansions leaders here asked the controller for (a follower caught up).",
        "counter",
        |m| &m.isr_expands,
    ),
    (
        "sluice_leader_elections_total",
        "Times a partition on this shard became leader here.",
        "counter",
        |m| &m.leader_elections,
    ),
    (
        "sluice_replicated_bytes_total",
        "Record bytes followers here appended from their leaders.",
        "counter",
        |m| &m.replicated_bytes,
    ),
];

pub fn render(shards: &[Arc<ShardMetrics>], apis: &ApiNames) -> String {
    let mut out = String::new();
    out.push_str("# HELP sluice_requests_total Kafka requests served.\n# TYPE sluice_requests_total counter\n");
    for (s, m) in shards.iter().enumerate() {
        for (key, name) in apis {
            let served = by_api(&m.requests, *key).map_or(0, |c| c.load(Ordering::Relaxed));
            out.push_str(&format!(
                "sluice_requests_total{{shard=\"{s}\",api=\"{name}\"}} {served}\n"
            ));
        }
    }
    let flush = "sluice_flush_duration_seconds";
    out.push_str(&format!(
        "# HELP {flush} How long each group-commit pass's fdatasyncs took.\n# TYPE {flush} histogram\n"
    ));
    for (s, m) in shards.iter().enumerate() {
        m.flush_duration
            .render(flush, &format!("shard=\"{s}\""), &mut out);
    }
    render_request_durations(shards, apis, &mut out);
    for &(name, help, value) in PROCESS {
        out.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {}\n",
            value.load(Ordering::Relaxed)
        ));
    }
    let lag = "sluice_raft_follower_lag_entries";
    out.push_str(&format!(
        "# HELP {lag} On the active controller: entries each follower is behind.\n# TYPE {lag} gauge\n"
    ));
    for (node, behind) in RAFT_FOLLOWER_LAG
        .lock()
        .map(|v| v.clone())
        .unwrap_or_default()
    {
        out.push_str(&format!("{lag}{{node=\"{node}\"}} {behind}\n"));
    }
    for &(name, help, kind, value) in PER_SHARD {
        out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
        for (s, m) in shards.iter().enumerate() {
            out.push_str(&format!(
                "{name}{{shard=\"{s}\"}} {}\n",
                value(m).load(Ordering::Relaxed)
            ));
        }
    }
    out
}

/// `sluice_request_duration_seconds`, per shard and API: only the APIs a shard has served, so
/// that the dozens of APIs a broker knows do not each print a histogram per shard.
fn render_request_durations(shards: &[Arc<ShardMetrics>], apis: &ApiNames, out: &mut String) {
    let name = "sluice_request_duration_seconds";
    out.push_str(&format!(
        "# HELP {name} Requests by how long they took, from the last byte read to the response written.\n# TYPE {name} histogram\n"
    ));
    for (s, m) in shards.iter().enumerate() {
        for (key, api) in apis {
            let served = by_api(&m.request_duration, *key).filter(|h| h.count() > 0);
            if let Some(histogram) = served {
                histogram.render(name, &format!("shard=\"{s}\",api=\"{api}\""), out);
            }
        }
    }
}

/// Whether the node is ready for clients: every shard serving and, in a cluster
/// (`clustered`), registered with the controller (on `controller_shard`). Not ready: why.
pub fn readiness(
    shards: &[Arc<ShardMetrics>],
    clustered: bool,
    controller_shard: usize,
) -> Result<(), String> {
    let serving = shards
        .iter()
        .filter(|m| m.serving.load(Ordering::Relaxed) == 1)
        .count();
    let mut why = Vec::new();
    if serving < shards.len() {
        why.push(format!("{serving} of {} shards serving", shards.len()));
    }
    if clustered && shards[controller_shard].registered.load(Ordering::Relaxed) == 0 {
        why.push("not registered with the controller".to_string());
    }
    match why.is_empty() {
        true => Ok(()),
        false => Err(why.join("; ")),
    }
}

/// What the metrics listener serves on `listener`, from a thread of its own.
pub struct Endpoint {
    pub shards: Vec<Arc<ShardMetrics>>,
    pub apis: ApiNames,
    /// `readiness`'s arguments beside the shards.
    pub clustered: bool,
    pub controller_shard: usize,
}

impl Endpoint {
    /// `GET /metrics` (Prometheus), `GET /healthz` (the process answers) and `GET /readyz`
    /// (`readiness`, 503 with the reason when not ready), for orchestrators' probes.
    fn respond(&self, request: &str) -> String {
        let path = request
            .strip_prefix("GET ")
            .and_then(|r| r.split(' ').next())
            .unwrap_or("");
        let (status, kind, body) = match path {
            "/metrics" => (
                "200 OK",
                "text/plain; version=0.0.4",
                render(&self.shards, &self.apis),
            ),
            "/healthz" => ("200 OK", "text/plain", "ok\n".to_string()),
            "/readyz" => match readiness(&self.shards, self.clustered, self.controller_shard) {
                Ok(()) => ("200 OK", "text/plain", "ready\n".to_string()),
                Err(why) => (
                    "503 Service Unavailable",
                    "text/plain",
                    format!("not ready: {why}\n"),
                ),
            },
            _ => ("404 Not Found", "text/plain", String::new()),
        };
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }
}

/// Serves `endpoint` on `listener` from a thread of its own, one connection at a time.
pub fn serve(listener: TcpListener, endpoint: Endpoint) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
                let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
                let mut buf = vec![0u8; MAX_REQUEST_BYTES];
                let mut n = 0;
                while n < buf.len() {
                    match stream.read(&mut buf[n..]) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => n += k,
                    }
                    if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                        break;
                    }
                }
                let request = String::from_utf8_lossy(&buf[..n]);
                let _ = stream.write_all(endpoint.respond(&request).as_bytes());
            }
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_durations_print_per_served_api_with_cumulative_buckets() {
        let shard = Arc::new(ShardMetrics::default());
        shard.observe_request(0, 150); // Produce: ≤ 250 µs
        shard.observe_request(0, 3_000); // ≤ 5 ms
        shard.observe_request(0, 60_000_000); // above every bound
        let apis: ApiNames = vec![(0, "Produce".into()), (1, "Fetch".into())];
        let text = render(&[shard], &apis);
        let line = |le: &str| {
            let prefix =
                format!("sluice_request_duration_seconds_bucket{{shard=\"0\",api=\"Produce\",le=\"{le}\"}} ");
            let found = text.lines().find_map(|l| l.strip_prefix(prefix.as_str()));
            found
                .unwrap_or_else(|| panic!("no bucket {le} in\n{text}"))
                .to_string()
        };
        assert_eq!(line("0.0001"), "0");
        assert_eq!(line("0.00025"), "1");
        assert_eq!(line("0.002"), "1");
        assert_eq!(line("0.005"), "2");
        assert_eq!(line("5"), "2");
        assert_eq!(line("+Inf"), "3");
        assert!(
            text.contains("sluice_request_duration_seconds_count{shard=\"0\",api=\"Produce\"} 3\n")
        );
        assert!(
            !text.contains("api=\"Fetch\",le="),
            "an API never served prints no histogram"
        );
    }
}
