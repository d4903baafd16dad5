//! Broker configuration: embedded defaults, an optional TOML file, then command-line overrides.
//!
//! Every struct denies unknown fields so that a typo in the file stops start-up with a message
//! naming the key, instead of being silently ignored.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

pub mod security;
pub use security::{ListenerConfig, SecurityProtocol};

/// Bound on partitions per topic, so a request cannot make the broker open unbounded files.
pub const MAX_PARTITIONS_PER_TOPIC: i32 = 10_000;

/// Kafka's `socket.request.max.bytes` default: 100 MiB.
pub const DEFAULT_REQUEST_MAX_BYTES: usize = 100 * 1024 * 1024;
/// Replicas of an internal topic by default (Kafka's `offsets.topic.replication.factor` and
/// `transaction.state.log.replication.factor`), capped by the voters.
const DEFAULT_INTERNAL_REPLICATION_FACTOR: usize = 3;
/// The most replicas an internal topic may be configured with (as many as brokers can hold
/// the topic in any cluster this broker is tested at; Kafka's limit is Short.MAX_VALUE).
const MAX_INTERNAL_REPLICATION_FACTOR: i16 = 16;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address the Kafka listener binds on every shard (SO_REUSEPORT).
    pub listen: String,
    /// Address written into Metadata responses; defaults to `listen`.
    pub advertised_listener: Option<String>,
    pub data_dir: PathBuf,
    /// Number of shards (executors). 0 means one per available core.
    pub shards: usize,
    /// CPUs for the shards: pinned, shard i on `cpus[i % len]`; unpinned, the set they all
    /// may run on. Empty means every CPU this process may run on (`allowed_cpus`).
    pub cpus: Vec<usize>,
    /// Pin each shard's thread to one CPU (true, for a machine the broker has to itself), or
    /// let the kernel place them within `cpus` (false, for a machine whose cores the broker
    /// shares with its clients or other work: a shard then runs, and wakes another, on
    /// whichever core is free; measured in perf/results/2026-12-05-unpinned-shards.md).
    pub pin_shards: bool,
    /// This broker's id: Metadata names it as the broker, the controller, and every
    /// partition's leader and only replica; FindCoordinator and DescribeConfigs use it too.
    pub node_id: i32,
    pub request_max_bytes: usize,
    pub auto_create_topics: bool,
    /// Bound on operations parked on one shard's timing wheel (fetch long polls, acks=all
    /// timeouts). Past it, fetches are answered without waiting, with a log line.
    pub max_parked_operations: usize,
    /// Incremental fetch sessions (KIP-227) each shard holds (Kafka's
    /// `max.incremental.fetch.session.cache.slots`, there per broker). With none free, a new
    /// consumer fetches without a session.
    pub max_incremental_fetch_session_cache_slots: usize,
    /// Partitions of `__consumer_offsets`, which place and persist consumer groups.
    pub offsets_topic_partitions: i32,
    /// `segment.bytes` of `__consumer_offsets` when it is created (Kafka's
    /// `offsets.topic.segment.bytes`): small enough that old commits reach closed segments,
    /// where compaction removes the superseded ones.
    pub offsets_topic_segment_bytes: u64,
    /// Replicas of `__consumer_offsets` (Kafka's `offsets.topic.replication.factor`): the
    /// topic is created once this many brokers are live, however long that takes. Unset:
    /// min(3, voters), Kafka's 3 capped as its single-node defaults cap it.
    pub offsets_topic_replication_factor: Option<i16>,
    /// Kafka's group.initial.rebalance.delay.ms: how long an empty group's first rebalance waits
    /// for more members.
    pub group_initial_rebalance_delay_ms: u64,
    /// Kafka's group.min.session.timeout.ms.
    pub group_min_session_timeout_ms: i32,
    /// Kafka's producer.id.expiration.ms: an idempotent producer idle this long is forgotten.
    pub producer_id_expiration_ms: u64,
    /// Bound on open client connections to the broker (all shards together).
    pub max_connections: usize,
    /// Bound on open connections from one client IP.
    pub max_connections_per_ip: usize,
    /// Kafka's connections.max.idle.ms: a connection with no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// Requests a connection may have read and not yet answered. Requests pipeline: a produce
    /// waiting for its commit or a parked fetch does not hold up the next ones, and the
    /// produces in flight share fsyncs, so a latency-tuned producer (linger 0: many one-record
    /// requests in flight) needs a few hundred. Past it the broker stops reading that socket
    /// until a response goes out (TCP backpressure); responses still go out in request order.
    pub max_in_flight_requests_per_connection: usize,
    /// Bytes of request frames (mostly produce data) one shard's connections may hold at once.
    /// A connection that would pass it waits before reading the frame's body, so a flood of
    /// producers slows down instead of exhausting memory. At least `request_max_bytes`.
    pub max_request_memory_bytes_per_shard: usize,
    /// Time allowed from a request's first byte to its last. A client that trickles bytes
    /// (slowloris) is disconnected after it, so it cannot hold memory or a slot forever.
    pub request_read_timeout_ms: u64,
    /// Bound on topics (0: derived from the file-descriptor budget at start). A CreateTopics
    /// past it is refused with POLICY_VIOLATION.
    pub max_topics: usize,
    /// Bound on the partitions one shard owns (0: derived from the file-descriptor budget at
    /// start, see `server/fd_budget.rs`). A CreateTopics or CreatePartitions that would pass it
    /// on any shard is refused with POLICY_VIOLATION.
    pub max_partitions_per_shard: usize,
    /// Bound on the consumer groups one shard coordinates. A JoinGroup or OffsetCommit that
    /// would create one more is answered COORDINATOR_NOT_AVAILABLE, counted and logged.
    pub max_groups_per_shard: usize,
    /// Address of the Prometheus metrics endpoint (`GET /metrics`); none when unset.
    pub metrics_listen: Option<String>,
    /// Address of the inter-node RPC listener (Raft and controller traffic). Needed with
    /// `voters`; a voter's must be the address its `voters` entry names.
    pub rpc_listen: Option<String>,
    /// The controller quorum, `"ID@HOST:PORT"` (each voter's RPC address). Empty: this node
    /// runs alone, its own controller, as a single-node broker.
    pub voters: Vec<String>,
    /// This broker's rack: replicas of a partition go on distinct racks where racks are set.
    pub rack: Option<String>,
    /// Replicas of a topic created without a replication factor (Kafka's
    /// default.replication.factor). The internal topics have their own.
    pub default_replication_factor: i16,
    pub cluster: ClusterConfig,
    pub log: LogConfig,
    pub fetch: FetchConfig,
    pub topic_defaults: TopicDefaults,
    pub sharding: ShardingConfig,
    pub transactions: TransactionConfig,
    /// Listeners (issue 19): replace `listen` and `advertised_listener` when present.
    pub listeners: Vec<ListenerConfig>,
    /// The listener nodes of a cluster dial each other on (Kafka's
    /// `inter.broker.listener.name`): followers' fetches, transaction markers. Every node of
    /// the cluster has one of this name. Default: the first listener.
    pub inter_broker_listener: Option<String>,
    pub tls: Option<security::TlsConfig>,
    pub sasl: security::SaslConfig,
    pub authorization: security::AuthorizationConfig,
}

/// The transaction coordinator (Kafka's `transaction.*` broker settings).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransactionConfig {
    /// Partitions of `__transaction_state`, which place and persist transactional ids
    /// (Kafka's `transaction.state.log.num.partitions`).
    pub state_partitions: i32,
    /// Replicas of `__transaction_state` (Kafka's
    /// `transaction.state.log.replication.factor`), as `offsets_topic_replication_factor`.
    pub state_log_replication_factor: Option<i16>,
    /// The longest `transaction.timeout.ms` a producer may ask for (Kafka's
    /// `transaction.max.timeout.ms`).
    pub max_timeout_ms: i32,
    /// A transactional id idle this long is forgotten (Kafka's
    /// `transactional.id.expiration.ms`).
    pub id_expiration_ms: u64,
    /// How often each coordinator aborts transactions past their timeout and forgets expired
    /// ids (Kafka's `transaction.abort.timed.out.transaction.cleanup.interval.ms`).
    pub check_interval_ms: u64,
    /// The transaction version offered to clients (Kafka's `transaction.version` feature,
    /// finalized in ApiVersions): 2 lets clients that speak it (Java 4.x) use KIP-890 part 2,
    /// an epoch bump per transaction and partitions added by their first write; 0 or 1 keeps
    /// them on AddPartitionsToTxn and one epoch per producer session.
    pub version: i16,
}

impl Default for TransactionConfig {
    fn default() -> Self {
        TransactionConfig {
            state_partitions: 16,
            state_log_replication_factor: None,
            max_timeout_ms: 900_000, // Kafka's default, as txn::state::MAX_TIMEOUT_MS
            id_expiration_ms: 7 * 24 * 3600 * 1000,
            check_interval_ms: 10_000,
            version: 2,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Roll the active segment once it would exceed this many bytes (`segment.bytes`).
    pub segment_bytes: u64,
    /// Roll the active segment once it is this old (`segment.ms`).
    pub segment_ms: u64,
    /// Bytes of log between two sparse index entries (`index.interval.bytes`).
    pub index_interval_bytes: u32,
    /// How long the flusher waits after the first unflushed append before it issues the group's
    /// fdatasync. 0 means group commit: sync as soon as the previous sync finished.
    pub flush_interval_ms: u64,
    /// Bytes of each shard's journal (`__journal/shard-N`), where the flusher makes small
    /// appends durable with one fdatasync per pass instead of one per partition file. 0: no
    /// journal.
    pub journal_bytes: u64,
    /// How often each shard deletes segments past their topic's `retention.ms` or
    /// `retention.bytes` (Kafka's `log.retention.check.interval.ms`).
    pub retention_check_interval_ms: u64,
    /// How often each shard looks for compacted topics' logs to clean (Kafka's
    /// `log.cleaner.backoff.ms`).
    pub cleaner_interval_ms: u64,
    /// Memory for the key map of one compaction pass (Kafka's `log.cleaner.dedupe.buffer.size`);
    /// a pass cleans only the oldest segments whose keys fit.
    pub cleaner_dedupe_buffer_bytes: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchConfig {
    /// Send fetched records from the segment file to the socket with sendfile, never through
    /// user space. false keeps a plain copying path (read into memory, then write), so that the
    /// two can be measured against each other.
    pub zero_copy: bool,
    /// Which replica a consumer fetches from (Kafka's `replica.selector.class`, KIP-392).
    /// "leader", the default as in Kafka: always the leader. "rack-aware": a leader tells a
    /// consumer that names its rack (`client.rack`) to fetch from an in-sync replica in that
    /// rack, when the leader is not in it (`RackAwareReplicaSelector`).
    pub replica_selector: ReplicaSelector,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            zero_copy: true,
            replica_selector: ReplicaSelector::Leader,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReplicaSelector {
    Leader,
    RackAware,
}

impl ReplicaSelector {
    /// Kafka's name for the selector (`replica.selector.class`); None: Kafka's unset default,
    /// which reads from the leader.
    pub fn kafka_class(self) -> Option<&'static str> {
        match self {
            ReplicaSelector::Leader => None,
            ReplicaSelector::RackAware => {
                Some("org.apache.kafka.common.replica.RackAwareReplicaSelector")
            }
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TopicDefaults {
    pub num_partitions: i32,
    /// `max.message.bytes`: the largest record batch a topic accepts.
    pub max_message_bytes: u32,
    /// `message.timestamp.type`: "CreateTime" or "LogAppendTime".
    pub message_timestamp_type: String,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub cleanup_policy: String,
}

/// Timing and bounds of the replicated controller (only used with `voters`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterConfig {
    /// One Raft tick. Elections start after 10 to 20 ticks without a leader's heartbeat
    /// (raft-rs's randomized election timeout), heartbeats go out every 2 ticks.
    pub raft_tick_ms: u64,
    /// Kafka's broker.session.timeout.ms: a broker whose heartbeats stop for this long is
    /// fenced and loses the leadership of its partitions.
    pub broker_session_timeout_ms: u64,
    /// Kafka's broker.heartbeat.interval.ms.
    pub broker_heartbeat_interval_ms: u64,
    /// Applied entries past the last snapshot after which a new snapshot is taken and the log
    /// before it dropped (a far-behind node then catches up from the snapshot).
    pub snapshot_after_entries: u64,
    /// How long a metadata write (CreateTopics, ...) may wait for its commit before it is
    /// answered REQUEST_TIMED_OUT (no quorum).
    pub metadata_write_timeout_ms: u64,
    /// Kafka's replica.lag.time.max.ms: an in-sync follower that has not caught up with its
    /// leader for this long leaves the in-sync set (the leader asks the controller).
    pub replica_lag_time_max_ms: u64,
    /// Kafka's auto.leader.rebalance.enable and leader.imbalance.check.interval.seconds: the
    /// active controller moves leadership back to each partition's preferred (first) replica
    /// when that is a live in-sync broker, every interval.
    pub auto_leader_rebalance_enable: bool,
    pub leader_imbalance_check_interval_ms: u64,
    /// The secret every node of the cluster shares (`security::node`): the RPC handshake
    /// proves it both ways, and nodes log in to each other's SASL listeners with it. Needed
    /// once any listener uses TLS or SASL, or authorization is on.
    pub secret: Option<String>,
}

impl ClusterConfig {
    /// Each timing and bound within its range (the error names the key).
    fn validate(&self) -> anyhow::Result<()> {
        let checks: [(&str, u64, u64, u64); 7] = [
            ("cluster.raft_tick_ms", self.raft_tick_ms, 10, 10_000),
            (
                "cluster.broker_heartbeat_interval_ms",
                self.broker_heartbeat_interval_ms,
                10,
                60_000,
            ),
            (
                "cluster.broker_session_timeout_ms",
                self.broker_session_timeout_ms,
                2 * self.broker_heartbeat_interval_ms,
                3_600_000,
            ),
            (
                "cluster.snapshot_after_entries",
                self.snapshot_after_entries,
                2,
                10_000_000,
            ),
            (
                "cluster.metadata_write_timeout_ms",
                self.metadata_write_timeout_ms,
                100,
                600_000,
            ),
            (
                "cluster.replica_lag_time_max_ms",
                self.replica_lag_time_max_ms,
                100,
                3_600_000,
            ),
            (
                "cluster.leader_imbalance_check_interval_ms",
                self.leader_imbalance_check_interval_ms,
                100,
                86_400_000,
            ),
        ];
        for (key, value, lo, hi) in checks {
            in_range(key, value, lo, hi)?;
        }
        let min = security::MIN_CLUSTER_SECRET_BYTES;
        match &self.secret {
            Some(s) if s.len() < min => bad("cluster.secret", format!("at least {min} bytes")),
            _ => Ok(()),
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            raft_tick_ms: 100,
            broker_session_timeout_ms: 9_000,
            broker_heartbeat_interval_ms: 1_000,
            snapshot_after_entries: 10_000,
            metadata_write_timeout_ms: 10_000,
            replica_lag_time_max_ms: 30_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
            secret: None,
        }
    }
}

/// One voter of the controller quorum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub rpc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShardingConfig {
    /// Partitions of topics that are not pinned: "hash" spreads them by a hash of the topic name
    /// plus the partition number, so a topic's partitions land on consecutive shards.
    pub strategy: String,
    /// Per-topic pinning: the topic's partition p is owned by `shards[p % shards.len()]`.
    pub pin: Vec<TopicPin>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicPin {
    pub topic: String,
    pub shards: Vec<usize>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9092".into(),
            advertised_listener: None,
            data_dir: PathBuf::from("./data"),
            shards: 0,
            cpus: Vec::new(),
            pin_shards: true,
            node_id: 0,
            request_max_bytes: DEFAULT_REQUEST_MAX_BYTES,
            auto_create_topics: true,
            max_parked_operations: 100_000,
            max_incremental_fetch_session_cache_slots: 1000,
            metrics_listen: None,
            rpc_listen: None,
            voters: Vec::new(),
            rack: None,
            default_replication_factor: 1,
            cluster: ClusterConfig::default(),
            offsets_topic_partitions: 16,
            offsets_topic_segment_bytes: 100 * 1024 * 1024,
            offsets_topic_replication_factor: None,
            group_initial_rebalance_delay_ms: 3000,
            group_min_session_timeout_ms: 6000,
            producer_id_expiration_ms: 86_400_000,
            max_connections: 10_000,
            max_connections_per_ip: 1_000,
            connections_max_idle_ms: 600_000,
            max_in_flight_requests_per_connection: 500,
            // A largest request and some room: more only holds produce data a stalled disk
            // cannot take yet, raising latency and resident memory, not throughput
            // (perf/results/2026-12-05-request-memory.md).
            max_request_memory_bytes_per_shard: 128 * 1024 * 1024,
            request_read_timeout_ms: 30_000,
            max_topics: 0,
            max_partitions_per_shard: 0,
            max_groups_per_shard: 100_000,
            log: LogConfig::default(),
            fetch: FetchConfig::default(),
            topic_defaults: TopicDefaults::default(),
            sharding: ShardingConfig::default(),
            transactions: TransactionConfig::default(),
            listeners: Vec::new(),
            inter_broker_listener: None,
            tls: None,
            sasl: security::SaslConfig::default(),
            authorization: security::AuthorizationConfig::default(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            flush_interval_ms: 0,
            journal_bytes: 16 * 1024 * 1024,
            retention_check_interval_ms: 300_000,
            cleaner_interval_ms: 15_000,
            cleaner_dedupe_buffer_bytes: 128 * 1024 * 1024,
        }
    }
}

impl Default for TopicDefaults {
    fn default() -> Self {
        TopicDefaults {
            num_partitions: 1,
            max_message_bytes: 1024 * 1024 + 12,
            message_timestamp_type: "CreateTime".into(),
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            cleanup_policy: "delete".into(),
        }
    }
}

impl Default for ShardingConfig {
    fn default() -> Self {
        ShardingConfig {
            strategy: "hash".into(),
            pin: Vec::new(),
        }
    }
}

/// Overrides given on the command line; each wins over the file.
#[derive(Debug, Default)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub shards: Option<usize>,
    pub node_id: Option<i32>,
    pub rpc_listen: Option<String>,
    /// Comma-separated `ID@HOST:PORT` entries.
    pub voters: Option<String>,
}

impl Config {
    pub fn load(file: Option<&std::path::Path>, overrides: Overrides) -> anyhow::Result<Config> {
        let mut config = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    anyhow::anyhow!("cannot read config file {}: {e}", path.display())
                })?;
                Self::parse(&text)
                    .map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?
            }
            None => Config::default(),
        };
        if let Some(listen) = overrides.listen {
            if !config.listeners.is_empty() {
                anyhow::bail!("--listen and [[listeners]] both name listeners; keep one");
            }
            config.listen = listen;
        }
        if let Some(dir) = overrides.data_dir {
            config.data_dir = dir;
        }
        if let Some(shards) = overrides.shards {
            config.shards = shards;
        }
        if let Some(id) = overrides.node_id {
            config.node_id = id;
        }
        if let Some(rpc) = overrides.rpc_listen {
            config.rpc_listen = Some(rpc);
        }
        if let Some(voters) = overrides.voters {
            config.voters = voters
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
        }
        if config.shards == 0 {
            config.shards = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
        }
        config.validate()?;
        Ok(config)
    }

    pub fn parse(text: &str) -> anyhow::Result<Config> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Checks the values that the type system cannot; each message names the key.
    pub fn validate(&self) -> anyhow::Result<()> {
        self.validate_addresses()?;
        self.validate_shards()?;
        self.validate_requests()?;
        self.validate_connections()?;
        self.validate_groups_and_bounds()?;
        self.validate_log()?;
        self.validate_topic_defaults()?;
        self.validate_sharding()?;
        self.validate_security()?;
        self.validate_cluster()
    }

    /// The controller quorum, parsed (empty: a single node).
    pub fn voter_list(&self) -> anyhow::Result<Vec<Voter>> {
        let mut out: Vec<Voter> = Vec::with_capacity(self.voters.len());
        for v in &self.voters {
            let parsed = v.split_once('@').and_then(|(id, addr)| {
                let id: i32 = id.parse().ok().filter(|id| *id >= 0)?;
                addr.parse::<SocketAddr>().ok()?;
                Some(Voter {
                    id,
                    rpc: addr.to_string(),
                })
            });
            let Some(voter) = parsed else {
                bad(
                    "voters",
                    format!("{v:?} is not ID@HOST:PORT with a numeric host"),
                )?;
                unreachable!("bad returns an error");
            };
            if out.iter().any(|o| o.id == voter.id) {
                bad("voters", format!("node id {} is listed twice", voter.id))?;
            }
            out.push(voter);
        }
        Ok(out)
    }

    /// Whether this node is one of the controller quorum's voters (else, in a cluster, a
    /// broker only).
    pub fn is_voter(&self) -> bool {
        self.voter_list()
            .is_ok_and(|voters| voters.iter().any(|v| v.id == self.node_id))
    }

    /// Replicas of an internal topic, `__transaction_state` or else `__consumer_offsets`: its
    /// configured factor, or Kafka's default 3 capped by the voters (one on a single node).
    pub fn internal_topic_replication_factor(&self, transaction_state: bool) -> usize {
        let configured = match transaction_state {
            true => self.transactions.state_log_replication_factor,
            false => self.offsets_topic_replication_factor,
        };
        match (self.is_clustered(), configured) {
            (false, _) => 1,
            (true, Some(f)) => f as usize,
            (true, None) => self
                .voters
                .len()
                .clamp(1, DEFAULT_INTERNAL_REPLICATION_FACTOR),
        }
    }

    /// Whether this node is part of a cluster (a controller quorum is configured).
    pub fn is_clustered(&self) -> bool {
        !self.voters.is_empty()
    }

    fn validate_cluster(&self) -> anyhow::Result<()> {
        const MAX_VOTERS: usize = 9;
        let voters = self.voter_list()?;
        if voters.len() > MAX_VOTERS {
            return bad(
                "voters",
                format!("{} voters; at most {MAX_VOTERS}", voters.len()),
            );
        }
        if let Some(rack) = &self.rack {
            if rack.is_empty() || rack.len() > 255 {
                return bad("rack", "must have 1..=255 characters".into());
            }
        }
        in_range(
            "default_replication_factor",
            self.default_replication_factor,
            1,
            16,
        )?;
        self.cluster.validate()?;
        if voters.is_empty() {
            return Ok(());
        }
        let Some(rpc) = &self.rpc_listen else {
            return bad(
                "rpc_listen",
                "a node of a cluster (voters set) needs one".into(),
            );
        };
        if rpc.parse::<SocketAddr>().is_err() {
            return bad(
                "rpc_listen",
                format!("{rpc:?} is not HOST:PORT with a numeric host"),
            );
        }
        match voters.iter().find(|v| v.id == self.node_id) {
            Some(v) if v.rpc != *rpc => bad(
                "rpc_listen",
                format!(
                    "node {} is the voter at {} in `voters`, but listens for RPC on {rpc}",
                    self.node_id, v.rpc
                ),
            ),
            _ => Ok(()),
        }
    }

    fn validate_addresses(&self) -> anyhow::Result<()> {
        if self.listen.parse::<SocketAddr>().is_err() {
            return bad(
                "listen",
                format!("{:?} is not HOST:PORT with a numeric host", self.listen),
            );
        }
        if let Some(adv) = &self.advertised_listener {
            if host_port(adv).is_none() {
                return bad("advertised_listener", format!("{adv:?} is not HOST:PORT"));
            }
        }
        if let Some(m) = &self.metrics_listen {
            if m.parse::<SocketAddr>().is_err() {
                return bad(
                    "metrics_listen",
                    format!("{m:?} is not HOST:PORT with a numeric host"),
                );
            }
        }
        if self.node_id < 0 {
            return bad("node_id", format!("{} is negative", self.node_id));
        }
        Ok(())
    }

    /// The CPUs the shards run on: `cpus`, or every CPU this process may run on.
    pub fn shard_cpus(&self) -> Vec<usize> {
        if self.cpus.is_empty() {
            allowed_cpus()
        } else {
            self.cpus.clone()
        }
    }

    fn validate_shards(&self) -> anyhow::Result<()> {
        const MAX_SHARDS: usize = 1024;
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return bad(
                "shards",
                format!("{} is not in 1..={MAX_SHARDS}", self.shards),
            );
        }
        let allowed = allowed_cpus();
        if let Some(cpu) = self.cpus.iter().find(|c| !allowed.contains(c)) {
            return bad(
                "cpus",
                format!("cpu {cpu} is not one this process may run on ({allowed:?})"),
            );
        }
        Ok(())
    }

    fn validate_requests(&self) -> anyhow::Result<()> {
        if self.request_max_bytes < 1024 || self.request_max_bytes > i32::MAX as usize {
            return bad(
                "request_max_bytes",
                format!("{} is not in 1024..=2^31-1", self.request_max_bytes),
            );
        }
        in_range(
            "max_incremental_fetch_session_cache_slots",
            self.max_incremental_fetch_session_cache_slots,
            0,
            1_000_000,
        )?;
        in_range(
            "max_parked_operations",
            self.max_parked_operations,
            1,
            10_000_000,
        )?;
        in_range(
            "max_in_flight_requests_per_connection",
            self.max_in_flight_requests_per_connection,
            1,
            1000,
        )?;
        if self.max_request_memory_bytes_per_shard < self.request_max_bytes {
            return bad(
                "max_request_memory_bytes_per_shard",
                format!(
                    "{} is less than request_max_bytes ({}), so a largest request could never be read",
                    self.max_request_memory_bytes_per_shard, self.request_max_bytes
                ),
            );
        }
        in_range(
            "request_read_timeout_ms",
            self.request_read_timeout_ms,
            100,
            u64::MAX,
        )
    }

    fn validate_connections(&self) -> anyhow::Result<()> {
        in_range("max_connections", self.max_connections, 1, 1_000_000)?;
        in_range(
            "max_connections_per_ip",
            self.max_connections_per_ip,
            1,
            usize::MAX,
        )?;
        in_range(
            "connections_max_idle_ms",
            self.connections_max_idle_ms,
            100,
            u64::MAX,
        )
    }

    /// The transaction coordinator's settings, and both internal topics' replication factors.
    fn validate_transactions(&self) -> anyhow::Result<()> {
        let t = &self.transactions;
        in_range("transactions.state_partitions", t.state_partitions, 1, 1000)?;
        for (name, factor) in [
            (
                "offsets_topic_replication_factor",
                self.offsets_topic_replication_factor,
            ),
            (
                "transactions.state_log_replication_factor",
                t.state_log_replication_factor,
            ),
        ] {
            if let Some(f) = factor {
                in_range(name, f, 1, MAX_INTERNAL_REPLICATION_FACTOR)?;
                if f > 1 && !self.is_clustered() {
                    anyhow::bail!(
                        "{name} = {f}: a single node keeps one replica (set 1 or leave it out)"
                    );
                }
            }
        }
        in_range("transactions.max_timeout_ms", t.max_timeout_ms, 1, i32::MAX)?;
        in_range(
            "transactions.id_expiration_ms",
            t.id_expiration_ms,
            1,
            u64::MAX,
        )?;
        in_range(
            "transactions.check_interval_ms",
            t.check_interval_ms,
            10,
            3_600_000,
        )?;
        in_range("transactions.version", t.version, 0, 2)?;
        Ok(())
    }

    fn validate_groups_and_bounds(&self) -> anyhow::Result<()> {
        in_range(
            "offsets_topic_segment_bytes",
            self.offsets_topic_segment_bytes,
            1024,
            u32::MAX as u64,
        )?;
        in_range(
            "offsets_topic_partitions",
            self.offsets_topic_partitions,
            1,
            1000,
        )?;
        self.validate_transactions()?;
        in_range(
            "group_initial_rebalance_delay_ms",
            self.group_initial_rebalance_delay_ms,
            0,
            300_000,
        )?;
        in_range(
            "group_min_session_timeout_ms",
            self.group_min_session_timeout_ms,
            1,
            1_800_000,
        )?;
        in_range(
            "producer_id_expiration_ms",
            self.producer_id_expiration_ms,
            1000,
            u64::MAX,
        )?;
        in_range(
            "max_groups_per_shard",
            self.max_groups_per_shard,
            1,
            10_000_000,
        )?;
        // 0: derived from the descriptor budget at start.
        in_range("max_topics", self.max_topics, 0, 10_000_000)?;
        in_range(
            "max_partitions_per_shard",
            self.max_partitions_per_shard,
            0,
            10_000_000,
        )
    }

    fn validate_log(&self) -> anyhow::Result<()> {
        let log = &self.log;
        in_range(
            "log.segment_bytes",
            log.segment_bytes,
            1024,
            u32::MAX as u64,
        )?;
        in_range("log.segment_ms", log.segment_ms, 1, u64::MAX)?;
        in_range(
            "log.index_interval_bytes",
            log.index_interval_bytes,
            1,
            u32::MAX,
        )?;
        in_range(
            "log.retention_check_interval_ms",
            log.retention_check_interval_ms,
            100,
            86_400_000,
        )?;
        in_range(
            "log.cleaner_interval_ms",
            log.cleaner_interval_ms,
            100,
            86_400_000,
        )?;
        in_range(
            "log.cleaner_dedupe_buffer_bytes",
            log.cleaner_dedupe_buffer_bytes,
            1024 * 1024,
            64 * 1024 * 1024 * 1024,
        )?;
        if log.journal_bytes != 0 {
            // Replay reads a whole journal into memory: the bound is that memory's.
            in_range(
                "log.journal_bytes",
                log.journal_bytes,
                1024 * 1024,
                256 * 1024 * 1024,
            )?;
        }
        in_range("log.flush_interval_ms", log.flush_interval_ms, 0, 60_000)
    }

    fn validate_topic_defaults(&self) -> anyhow::Result<()> {
        let d = &self.topic_defaults;
        in_range(
            "topic_defaults.num_partitions",
            d.num_partitions,
            1,
            MAX_PARTITIONS_PER_TOPIC,
        )?;
        if !matches!(
            d.message_timestamp_type.as_str(),
            "CreateTime" | "LogAppendTime"
        ) {
            return bad(
                "topic_defaults.message_timestamp_type",
                format!(
                    "{:?} is neither CreateTime nor LogAppendTime",
                    d.message_timestamp_type
                ),
            );
        }
        if !matches!(
            d.cleanup_policy.as_str(),
            "delete" | "compact" | "compact,delete" | "delete,compact"
        ) {
            return bad(
                "topic_defaults.cleanup_policy",
                format!("{:?} is not a cleanup policy", d.cleanup_policy),
            );
        }
        Ok(())
    }

    fn validate_sharding(&self) -> anyhow::Result<()> {
        if self.sharding.strategy != "hash" {
            return bad(
                "sharding.strategy",
                format!("{:?} is unknown (only \"hash\")", self.sharding.strategy),
            );
        }
        for pin in &self.sharding.pin {
            if pin.shards.is_empty() {
                return bad(
                    "sharding.pin.shards",
                    format!("topic {:?} has an empty shard list", pin.topic),
                );
            }
            if let Some(s) = pin.shards.iter().find(|&&s| s >= self.shards) {
                return bad(
                    "sharding.pin.shards",
                    format!(
                        "topic {:?} names shard {s}, but there are {} shards",
                        pin.topic, self.shards
                    ),
                );
            }
        }
        Ok(())
    }
}

/// KEY=VALUE, split at the first '='.
pub fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("{s:?} is not KEY=VALUE"))
}

/// The CPUs this process may run on (its affinity, which `taskset` or a container's cpuset
/// narrows), ascending: what "all CPUs" means for `cpus`.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the kernel fills it (size given) for
    // this thread, and CPU_ISSET only reads it below CPU_SETSIZE.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    assert!(!cpus.is_empty(), "a running process may run on some CPU");
    cpus
}

/// An error naming the key and why its value is refused.
fn bad(key: &str, why: String) -> anyhow::Result<()> {
    Err(anyhow::anyhow!("invalid value for `{key}`: {why}"))
}

/// Checks `lo <= value <= hi`, naming the key otherwise.
fn in_range<T: PartialOrd + std::fmt::Display>(
    key: &str,
    value: T,
    lo: T,
    hi: T,
) -> anyhow::Result<()> {
    if value < lo || value > hi {
        return bad(key, format!("{value} is not in {lo}..={hi}"));
    }
    Ok(())
}

fn host_port(s: &str) -> Option<(String, i32)> {
    let (host, port) = s.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    if host.is_empty() {
        return None;
    }
    Some((host.trim_matches(['[', ']']).to_string(), port as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_key_is_named() {
        let err = Config::parse("listen = \"127.0.0.1:1\"\nlsten = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lsten"), "{err}");
        let err = Config::parse("[log]\nsegment_byte = 3\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("segment_byte"), "{err}");
    }

    #[test]
    fn bad_value_is_named() {
        let err = Config::parse("[log]\nsegment_bytes = \"big\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("segment_bytes"), "{err}");
        let mut c = Config::parse("shards = 2\n[log]\nsegment_bytes = 10\n").unwrap();
        c.shards = 2;
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("log.segment_bytes"), "{err}");
    }

    #[test]
    fn tuning_profiles_parse() {
        for (name, text) in [
            ("single-core", include_str!("../tuning/single-core.toml")),
            (
                "dedicated-8-core",
                include_str!("../tuning/dedicated-8-core.toml"),
            ),
            (
                "test-cross-shard",
                include_str!("../tuning/test-cross-shard.toml"),
            ),
        ] {
            let c = Config::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(c.shards > 0, "{name} sets shards");
        }
        let shared = Config::parse(include_str!("../tuning/shared-machine.toml")).unwrap();
        assert!(!shared.pin_shards && Config::default().pin_shards);
    }

    #[test]
    fn cpus_outside_the_process_affinity_are_refused() {
        let allowed = allowed_cpus();
        assert!(allowed.windows(2).all(|w| w[0] < w[1]), "{allowed:?}");
        let mut c = Config {
            shards: 1,
            cpus: vec![allowed[0]],
            ..Config::default()
        };
        c.validate().unwrap();
        c.cpus = vec![libc::CPU_SETSIZE as usize]; // past any set
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("cpus"), "{err}");
    }

    #[test]
    fn defaults_are_valid() {
        let c = Config {
            shards: 1,
            ..Config::default()
        };
        c.validate().unwrap();
        let listener = &c.effective_listeners()[0];
        assert_eq!(listener.advertised(), ("127.0.0.1".to_string(), 9092));
    }

    #[test]
    fn request_memory_must_hold_a_largest_request() {
        let c = Config::parse(
            "shards = 1\nrequest_max_bytes = 2048\nmax_request_memory_bytes_per_shard = 1024\n",
        )
        .unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("max_request_memory_bytes_per_shard"), "{err}");
        let c = Config::parse("shards = 1\nmax_in_flight_requests_per_connection = 0\n").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("max_in_flight_requests_per_connection"),
            "{err}"
        );
    }

    #[test]
    fn internal_topics_default_to_three_replicas_capped_by_the_voters() {
        let voters = |n: usize| (1..=n).map(|i| format!("{i}@127.0.0.1:{}", 9000 + i));
        let mut c = Config::default();
        assert_eq!(c.internal_topic_replication_factor(false), 1); // a single node
        for (count, expected) in [(1, 1), (2, 2), (3, 3), (5, 3)] {
            c.voters = voters(count).collect();
            assert_eq!(c.internal_topic_replication_factor(false), expected);
            assert_eq!(c.internal_topic_replication_factor(true), expected);
        }
        c.offsets_topic_replication_factor = Some(5);
        c.transactions.state_log_replication_factor = Some(2);
        assert_eq!(c.internal_topic_replication_factor(false), 5);
        assert_eq!(c.internal_topic_replication_factor(true), 2);
    }

    #[test]
    fn a_single_node_refuses_internal_topics_of_several_replicas() {
        let c = Config::parse("shards = 1\noffsets_topic_replication_factor = 3\n").unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains("offsets_topic_replication_factor"), "{err}");
        let c = Config::parse("shards = 1\n[transactions]\nstate_log_replication_factor = 0\n");
        let err = c.unwrap().validate().unwrap_err().to_string();
        assert!(err.contains("state_log_replication_factor"), "{err}");
        let c = Config::parse("shards = 1\noffsets_topic_replication_factor = 1\n").unwrap();
        c.validate().unwrap();
    }
}
