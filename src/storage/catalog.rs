//! The topic catalog: names, ids, partition counts and per-topic config overrides, and the
//! dynamic broker configs (`broker_config.rs`).
//!
//! Shard 0 owns the authoritative copy and persists it (rkyv) before a change is acknowledged;
//! every shard holds an immutable `Arc<Catalog>` snapshot, replaced wholesale when shard 0
//! broadcasts a change. Readers never take a lock.

use super::broker_config::{self, BrokerSettings};
use super::features;
use super::security::{AclRecord, ScramCredentialRecord, SecurityView};
use super::topic_config::{self, Kind, TopicConfig};
use crate::clock::Ids;
use crate::config::Config;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FILE_NAME: &str = "catalog.rkyv";
/// The catalog file starts with this and a format version, so that a later Sluice can tell an
/// older layout from a damaged file and migrate it (and an older Sluice refuses a newer one).
/// Files written before the header existed are read as version 0 and rewritten as the current
/// version at the next change.
const MAGIC: &[u8; 7] = b"SLUICAT";
const FORMAT_VERSION: u8 = 6;
/// The format of a catalog below `features::PARTITION_EPOCHS`: what Sluice 0.1 reads, so that
/// a cluster not yet finalised at level 2 can go back to it.
const LEVEL_1_FORMAT_VERSION: u8 = 5;
/// The topic that holds consumer groups' offsets and metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// The topic that holds the transaction coordinators' state.
pub const TXN_STATE_TOPIC: &str = "__transaction_state";
/// Whether a topic is one of the broker's own (Kafka's `Topic.isInternal`): Metadata marks it
/// internal, clients may not produce to it or delete it.
pub fn is_internal(name: &str) -> bool {
    name == OFFSETS_TOPIC || name == TXN_STATE_TOPIC
}

/// Kafka's limit on topic name length.
pub const MAX_TOPIC_NAME_LEN: usize = 249;
/// Bound on partitions per topic, so a request cannot make the broker open unbounded files.
pub const MAX_PARTITIONS: i32 = crate::config::MAX_PARTITIONS_PER_TOPIC;
/// A topic's id (a UUID), which names it on the data path and in Fetch v13+.
pub type TopicId = [u8; 16];
/// The leader epoch of every partition while a broker runs alone: one leader, never replaced.
/// Stamped on stored batches and reported by Metadata, ListOffsets and OffsetsForLeaderEpoch;
/// the controller will assign epochs once partitions are replicated.
pub const SINGLE_NODE_LEADER_EPOCH: i32 = 0;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct TopicRecord {
    pub name: String,
    pub id: [u8; 16],
    pub partitions: u32,
    pub configs: Vec<(String, String)>,
    /// Each partition's replicas, leader and ISR, in partition order (format version 3 on).
    /// Empty on a single node, which leads every partition itself.
    pub assignment: Vec<PartitionAssignment>,
}

/// Where one partition lives in a cluster.
#[derive(
    rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq, Default,
)]
pub struct PartitionAssignment {
    /// Node ids, the preferred leader first. During a reassignment: the target replicas, then
    /// those being removed.
    pub replicas: Vec<i32>,
    /// -1: no leader (every in-sync replica is fenced).
    pub leader: i32,
    pub leader_epoch: i32,
    /// In-sync replicas: they hold every committed record (`partition/commit.rs`).
    pub isr: Vec<i32>,
    /// A reassignment in progress (KIP-455): replicas being added (they catch up as
    /// followers) and replicas to remove once every added one is in sync. Both empty
    /// otherwise.
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

impl PartitionAssignment {
    /// This assignment as a node not registered yet acts on it: the same epoch, no leader.
    pub fn held_back(&self) -> PartitionAssignment {
        PartitionAssignment {
            leader: -1,
            ..self.clone()
        }
    }
}

/// Whether `record` registers incarnation `incarnation` of node `node_id` (fenced or not), or
/// holds no brokers at all (a single node, or a cluster before its first registration).
pub fn registers(record: &CatalogRecord, node_id: i32, incarnation: u64) -> bool {
    record.brokers.is_empty()
        || record
            .brokers
            .iter()
            .any(|b| b.node_id == node_id && b.incarnation == incarnation)
}

/// The incarnation each of `nodes` is registered with among `brokers`, the fenced ones left
/// out: whose reports a leader may count (`commit::Replicas::note_registrations`).
pub fn registrations(brokers: &[BrokerRecord], nodes: &[i32]) -> BTreeMap<i32, u64> {
    brokers
        .iter()
        .filter(|b| !b.fenced && nodes.contains(&b.node_id))
        .map(|b| (b.node_id, b.incarnation))
        .collect()
}

/// A broker of the cluster, as it registered with the controller.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BrokerRecord {
    pub node_id: i32,
    /// Drawn at each start: a new incarnation is a restart, the same one a heartbeat.
    pub incarnation: u64,
    /// Its Kafka listeners, as advertised: a client of listener name N is told each broker's
    /// endpoint named N (Kafka's rule: brokers without one are not listed to it), and nodes
    /// dial each other's inter-broker listener.
    pub listeners: Vec<EndpointRecord>,
    pub rack: Option<String>,
    /// Fenced: its heartbeats stopped; it leads nothing and is not listed to clients.
    pub fenced: bool,
}

impl BrokerRecord {
    /// Its listener named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&EndpointRecord> {
        self.listeners.iter().find(|e| e.name == name)
    }
}

/// This node's listeners as it registers them: name, advertised address, protocol.
pub fn advertised_endpoints(config: &Config) -> Vec<EndpointRecord> {
    let each = config.effective_listeners().into_iter().map(|l| {
        let (host, port) = l.advertised();
        EndpointRecord {
            name: l.name,
            host,
            port,
            security_protocol: l.security_protocol.id(),
        }
    });
    each.collect()
}

/// Endpoints as logs name them: `internal 10.0.0.1:9094, external broker1:9093`.
pub fn describe_endpoints(endpoints: &[EndpointRecord]) -> String {
    let each: Vec<String> = endpoints
        .iter()
        .map(|e| format!("{} {}:{}", e.name, e.host, e.port))
        .collect();
    each.join(", ")
}

/// One advertised listener of a broker.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct EndpointRecord {
    pub name: String,
    pub host: String,
    pub port: i32,
    /// Kafka's security protocol id (`SecurityProtocol::id`): how a node dialing it connects.
    pub security_protocol: i16,
}

/// A broker as registered before listener lists (catalog formats 3 and 4, and the metadata
/// log's `RegisterBrokerV1`): one PLAINTEXT listener.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct BrokerRecordV1 {
    pub node_id: i32,
    pub incarnation: u64,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    pub fenced: bool,
}

impl From<BrokerRecordV1> for BrokerRecord {
    fn from(b: BrokerRecordV1) -> BrokerRecord {
        BrokerRecord {
            node_id: b.node_id,
            incarnation: b.incarnation,
            listeners: vec![EndpointRecord {
                name: crate::config::security::DEFAULT_LISTENER_NAME.into(),
                host: b.host,
                port: b.port,
                security_protocol: crate::config::SecurityProtocol::Plaintext.id(),
            }],
            rack: b.rack,
            fenced: b.fenced,
        }
    }
}

/// Dynamic broker config overrides (see `broker_config.rs`) for one scope: the whole cluster
/// ("") or one broker (its node id).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
pub struct BrokerConfigRecord {
    pub broker: String,
    pub configs: Vec<(String, String)>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Default)]
pub struct CatalogRecord {
    pub cluster_id: String,
    pub topics: Vec<TopicRecord>,
    /// Producer ids below this may have been handed out; allocation restarts here.
    pub producer_id_block_end: i64,
    /// Dynamic broker configs, per scope (format version 2 on).
    pub broker_configs: Vec<BrokerConfigRecord>,
    /// The cluster's registered brokers (format version 3 on, with listener lists from 5; empty
    /// on a single node).
    pub brokers: Vec<BrokerRecord>,
    /// Users' SCRAM credentials (format version 4 on).
    pub scram_credentials: Vec<ScramCredentialRecord>,
    /// The ACLs (format version 4 on).
    pub acls: Vec<AclRecord>,
    /// The finalised `metadata.version` (`features`; 0: none recorded, level 1). Format
    /// version 6 on, which is written only from level 2.
    pub metadata_version: i16,
    /// Each partition's epoch (Kafka's `partition_epoch`), by topic, in partition order: one
    /// more at every change of its replicas, leader, epoch or in-sync set
    /// (`controller::records`), so that a change computed from one state cannot apply to
    /// another. Kept from level 2 on (format version 6); empty below.
    pub partition_epochs: Vec<TopicEpochs>,
}

/// One topic's partition epochs.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct TopicEpochs {
    pub id: [u8; 16],
    pub epochs: Vec<i32>,
}

/// The overrides stored for one scope ("" or a node id).
pub fn scope_configs<'a>(scopes: &'a [BrokerConfigRecord], broker: &str) -> &'a [(String, String)] {
    scopes
        .iter()
        .find(|b| b.broker == broker)
        .map_or(&[], |b| &b.configs)
}

/// A topic in format versions 0 to 2, before replica assignments.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct TopicRecordV2 {
    name: String,
    id: [u8; 16],
    partitions: u32,
    configs: Vec<(String, String)>,
}

/// The catalog layout of format versions 0 and 1, before dynamic broker configs.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct CatalogRecordV1 {
    cluster_id: String,
    topics: Vec<TopicRecordV2>,
    producer_id_block_end: i64,
}

/// The catalog layout of format version 3, before credentials and ACLs.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct CatalogRecordV3 {
    cluster_id: String,
    topics: Vec<TopicRecord>,
    producer_id_block_end: i64,
    broker_configs: Vec<BrokerConfigRecord>,
    brokers: Vec<BrokerRecordV1>,
}

/// The catalog layout of format version 4, before brokers' listener lists.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct CatalogRecordV4 {
    cluster_id: String,
    topics: Vec<TopicRecord>,
    producer_id_block_end: i64,
    broker_configs: Vec<BrokerConfigRecord>,
    brokers: Vec<BrokerRecordV1>,
    scram_credentials: Vec<ScramCredentialRecord>,
    acls: Vec<AclRecord>,
}

/// The catalog layout of format version 5, before feature levels and partition epochs: what a
/// catalog below level 2 is still written in.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct CatalogRecordV5 {
    cluster_id: String,
    topics: Vec<TopicRecord>,
    producer_id_block_end: i64,
    broker_configs: Vec<BrokerConfigRecord>,
    brokers: Vec<BrokerRecord>,
    scram_credentials: Vec<ScramCredentialRecord>,
    acls: Vec<AclRecord>,
}

/// The catalog layout of format version 2, before brokers and replica assignments.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Clone, Debug, PartialEq)]
struct CatalogRecordV2 {
    cluster_id: String,
    topics: Vec<TopicRecordV2>,
    producer_id_block_end: i64,
    broker_configs: Vec<BrokerConfigRecord>,
}

impl From<TopicRecordV2> for TopicRecord {
    fn from(t: TopicRecordV2) -> TopicRecord {
        TopicRecord {
            name: t.name,
            id: t.id,
            partitions: t.partitions,
            configs: t.configs,
            assignment: Vec::new(),
        }
    }
}

impl CatalogRecord {
    /// The dynamic broker overrides that apply to `node_id`: the cluster-wide ones, then the
    /// broker's own (which win).
    pub fn broker_overrides(&self, node_id: i32) -> Vec<(String, String)> {
        let node = node_id.to_string();
        let mut out = self.scope_configs("").to_vec();
        out.extend_from_slice(self.scope_configs(&node));
        out
    }

    /// The overrides stored for one scope.
    pub fn scope_configs(&self, broker: &str) -> &[(String, String)] {
        scope_configs(&self.broker_configs, broker)
    }

    /// Replaces one scope's overrides (none: the scope is dropped).
    pub fn set_scope_configs(&mut self, broker: &str, configs: Vec<(String, String)>) {
        let kept = !configs.is_empty();
        self.broker_configs.retain(|b| b.broker != broker);
        if kept {
            self.broker_configs.push(BrokerConfigRecord {
                broker: broker.to_string(),
                configs,
            });
        }
        // One record per scope, so that `scope_configs` finds them all: never two.
        let records = self.broker_configs.iter().filter(|b| b.broker == broker);
        assert_eq!(records.count(), usize::from(kept), "scope {broker:?}");
    }
}

/// How IncrementalAlterConfigs changes one key (Kafka's `AlterConfigOp.OpType`, same numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
pub enum ConfigOp {
    Set = 0,
    Delete = 1,
    /// Add items to a list-valued config (only `cleanup.policy` here).
    Append = 2,
    /// Remove items from a list-valued config.
    Subtract = 3,
}

impl ConfigOp {
    pub fn from_code(code: i8) -> Option<ConfigOp> {
        [
            ConfigOp::Set,
            ConfigOp::Delete,
            ConfigOp::Append,
            ConfigOp::Subtract,
        ]
        .into_iter()
        .find(|op| *op as i8 == code)
    }
}

/// A topic's overrides after IncrementalAlterConfigs `edits` (key, operation, value), applied in
/// order to `current`; `effective` is the topic's resolved config, which a list operation on a
/// key without an override starts from. The result still has to pass `TopicConfig::resolve`.
pub fn edit_overrides(
    current: &[(String, String)],
    effective: &TopicConfig,
    edits: &[(String, ConfigOp, Option<String>)],
) -> Result<Vec<(String, String)>, String> {
    let lookup = |name: &str| {
        let key =
            topic_config::key(name).ok_or_else(|| format!("unknown topic config {name:?}"))?;
        Ok((key.kind, (key.read)(effective)))
    };
    edit_keyed_overrides(current, edits, lookup)
}

/// `edit_overrides` over any key table: `lookup` gives a key's type and effective value (what
/// a list operation on a key without an override starts from), or why the key is refused.
pub fn edit_keyed_overrides(
    current: &[(String, String)],
    edits: &[(String, ConfigOp, Option<String>)],
    lookup: impl Fn(&str) -> Result<(Kind, String), String>,
) -> Result<Vec<(String, String)>, String> {
    let mut overrides: Vec<(String, String)> = current.to_vec();
    for (i, (name, op, value)) in edits.iter().enumerate() {
        if edits[..i].iter().any(|(k, _, _)| k == name) {
            return Err(format!("{name} is changed twice in one request"));
        }
        let (kind, effective_value) = lookup(name)?;
        let at = overrides.iter().position(|(k, _)| k == name);
        let new_value = match op {
            ConfigOp::Delete => None,
            ConfigOp::Set => Some(
                value
                    .clone()
                    .ok_or_else(|| format!("{name}: SET needs a value"))?,
            ),
            ConfigOp::Append | ConfigOp::Subtract => {
                if kind != Kind::List {
                    return Err(format!(
                        "{name} is not a list: it cannot be appended to or subtracted from"
                    ));
                }
                let now = match at {
                    Some(j) => overrides[j].1.clone(),
                    None => effective_value,
                };
                Some(edit_list(&now, value.as_deref().unwrap_or_default(), *op))
            }
        };
        match (at, new_value) {
            (Some(j), Some(v)) => overrides[j].1 = v,
            (None, Some(v)) => overrides.push((name.clone(), v)),
            (Some(j), None) => {
                overrides.remove(j);
            }
            (None, None) => {}
        }
    }
    Ok(overrides)
}

/// A list value after APPEND (items not already there, at the end) or SUBTRACT of `given`.
fn edit_list(now: &str, given: &str, op: ConfigOp) -> String {
    let split = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut items = split(now);
    let given = split(given);
    if op == ConfigOp::Append {
        for g in given {
            if !items.contains(&g) {
                items.push(g);
            }
        }
    } else {
        items.retain(|item| !given.contains(item));
    }
    items.join(",")
}

#[derive(Debug)]
pub struct TopicMeta {
    /// The topic's name, shared (responses name topics without copying the string).
    pub name: Arc<str>,
    pub record: TopicRecord,
    pub config: TopicConfig,
    /// Its partitions' epochs (`CatalogRecord::partition_epochs`; empty below level 2).
    pub partition_epochs: Vec<i32>,
}

impl TopicMeta {
    /// Whether `partition` is one of the topic's.
    pub fn has_partition(&self, partition: i32) -> bool {
        (0..self.record.partitions as i32).contains(&partition)
    }

    /// Partition `p`'s assignment; None on a single node (it holds and leads everything).
    pub fn assignment(&self, p: i32) -> Option<&PartitionAssignment> {
        self.record.assignment.get(usize::try_from(p).ok()?)
    }

    /// Partition `p`'s epoch; None below level 2 (`features::PARTITION_EPOCHS`).
    pub fn partition_epoch(&self, p: i32) -> Option<i32> {
        self.partition_epochs.get(usize::try_from(p).ok()?).copied()
    }
}

#[derive(Debug)]
pub struct Catalog {
    pub cluster_id: String,
    pub topics: BTreeMap<String, Arc<TopicMeta>>,
    pub by_id: HashMap<TopicId, Arc<TopicMeta>>,
    pub producer_id_block_end: i64,
    /// Dynamic broker configs as stored, per scope.
    pub broker_configs: Vec<BrokerConfigRecord>,
    /// The broker settings in effect (the config file's, with dynamic overrides).
    pub broker: BrokerSettings,
    /// The topic config every topic starts from: the config file's defaults with the dynamic
    /// topic defaults (`log.retention.ms`, ...) applied.
    pub topic_defaults: TopicConfig,
    /// The cluster's brokers as registered (empty on a single node).
    pub brokers: Vec<BrokerRecord>,
    /// Credentials and ACLs as stored and as served.
    pub security: SecurityView,
    /// The cluster's `metadata.version` (`features::level`).
    pub metadata_version: i16,
    /// Where this node stands in the cluster the catalog describes.
    pub here: NodePlace,
}

/// This node's place in a catalog: who it is, who controls, whether it may act on its roles.
#[derive(Debug, Clone)]
pub struct NodePlace {
    /// This node's id: on a single node, the leader of every partition.
    pub node_id: i32,
    /// The active controller's node id, -1 while there is none; on a single node, `node_id`.
    pub controller_id: i32,
    /// Whether the catalog registers this process (always on a single node). A restarted
    /// node's recovered catalog still names its previous incarnation, whose roles it must not
    /// act on: registering fences that incarnation, giving each partition it led a new leader
    /// epoch, and until then its log may lack an unsynced tail that followers copied.
    pub registered: bool,
    clustered: bool,
}

impl Catalog {
    pub fn from_record(record: &CatalogRecord, config: &Config) -> Result<Catalog, String> {
        let overrides = record.broker_overrides(config.node_id);
        let dynamic = broker_config::resolve(config, &overrides)
            .map_err(|e| format!("dynamic broker configs: {e}"))?;
        let mut c = Catalog {
            cluster_id: record.cluster_id.clone(),
            topics: BTreeMap::new(),
            by_id: HashMap::new(),
            producer_id_block_end: record.producer_id_block_end,
            broker_configs: record.broker_configs.clone(),
            broker: dynamic.settings,
            topic_defaults: dynamic.topic_defaults,
            brokers: record.brokers.clone(),
            security: SecurityView::new(&record.scram_credentials, &record.acls, config)?,
            metadata_version: features::level(record.metadata_version),
            here: NodePlace {
                node_id: config.node_id,
                controller_id: config.node_id,
                registered: record.brokers.is_empty(),
                clustered: config.is_clustered(),
            },
        };
        // By topic id: one pass, not one search per topic.
        let epochs: HashMap<&TopicId, &[i32]> = record
            .partition_epochs
            .iter()
            .map(|e| (&e.id, &e.epochs[..]))
            .collect();
        for t in &record.topics {
            let config = c
                .resolve_topic(&t.configs)
                .map_err(|e| format!("topic {}: {e}", t.name))?;
            let partition_epochs = epochs.get(&t.id).map_or_else(Vec::new, |e| e.to_vec());
            let meta = Arc::new(TopicMeta {
                name: Arc::from(t.name.as_str()),
                record: t.clone(),
                config,
                partition_epochs,
            });
            c.by_id.insert(t.id, meta.clone());
            c.topics.insert(t.name.clone(), meta);
        }
        Ok(c)
    }

    /// Partition `p` of `topic`'s leader: its assignment's, or this node on a single node.
    pub fn leader_of(&self, topic: &TopicMeta, p: i32) -> i32 {
        topic.assignment(p).map_or(self.here.node_id, |a| a.leader)
    }

    /// Whether this node leads partition `p` of `topic` (and so takes its produce and fetch):
    /// never before this process is registered.
    pub fn leads(&self, topic: &TopicMeta, p: i32) -> bool {
        self.here.registered && self.leader_of(topic, p) == self.here.node_id
    }

    /// Whether this node holds a replica of partition `p` of `topic` (and so opens its log).
    pub fn holds(&self, topic: &TopicMeta, p: i32) -> bool {
        topic
            .assignment(p)
            .is_none_or(|a| a.replicas.contains(&self.here.node_id))
    }

    /// The brokers that serve: registered and not fenced. None while this node runs alone
    /// (it is the only broker).
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRecord> {
        self.brokers.iter().filter(|b| !b.fenced)
    }

    /// The brokers clients are told about: the live ones, and this node whatever its
    /// registration says. A node in controlled shutdown is fenced (its leaderships move) a
    /// moment before it stops answering, and a restarted node's catalog holds its own fenced
    /// registration until it registers again; told by the node it talks to that this very
    /// node is gone, while its partitions move, librdkafka 2.16 can lose a partition: it
    /// retires its handle of that broker while moving the partition to the new leader, undoes
    /// the move, and never fetches the partition again (the rolling-restart test's consumer
    /// stalled for good). Kafka's broker never answers without itself: it is fenced a
    /// heartbeat after its leaderships moved.
    pub fn listed_brokers(&self) -> impl Iterator<Item = &BrokerRecord> {
        let here = self.here.node_id;
        self.brokers
            .iter()
            .filter(move |b| !b.fenced || b.node_id == here)
    }

    /// Whether this node runs in a cluster (its catalog comes from the metadata log).
    pub fn is_clustered(&self) -> bool {
        self.here.clustered
    }

    /// Broker `node_id`'s listener named `listener`, if the broker is registered and live and
    /// has one.
    pub fn broker_endpoint(&self, node_id: i32, listener: &str) -> Option<&EndpointRecord> {
        self.live_brokers()
            .find(|b| b.node_id == node_id)
            .and_then(|b| b.endpoint(listener))
    }

    /// A topic's config: its own overrides on top of the defaults in effect
    /// (`topic_defaults`).
    pub fn resolve_topic(&self, overrides: &[(String, String)]) -> Result<TopicConfig, String> {
        self.topic_defaults.with_overrides(overrides)
    }

    pub fn to_record(&self) -> CatalogRecord {
        CatalogRecord {
            cluster_id: self.cluster_id.clone(),
            topics: self.topics.values().map(|t| t.record.clone()).collect(),
            producer_id_block_end: self.producer_id_block_end,
            broker_configs: self.broker_configs.clone(),
            brokers: self.brokers.clone(),
            scram_credentials: self.security.stored_credentials.clone(),
            acls: self.security.stored_acls.clone(),
            metadata_version: self.metadata_version,
            partition_epochs: self
                .topics
                .values()
                .filter(|t| !t.partition_epochs.is_empty())
                .map(|t| TopicEpochs {
                    id: t.record.id,
                    epochs: t.partition_epochs.clone(),
                })
                .collect(),
        }
    }

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join("__meta").join(FILE_NAME)
    }

    /// Loads the persisted catalog, or a fresh one with a new cluster id drawn from `ids`.
    pub fn load(data_dir: &Path, ids: &mut dyn Ids) -> anyhow::Result<CatalogRecord> {
        let path = Self::path(data_dir);
        match std::fs::read(&path) {
            Ok(raw) => {
                decode_record(&raw).map_err(|e| anyhow::anyhow!("catalog {}: {e}", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CatalogRecord {
                cluster_id: uuid::Uuid::from_bytes(ids.uuid()).simple().to_string()[..22]
                    .to_string(),
                topics: Vec::new(),
                producer_id_block_end: 0,
                // A new node starts at the newest level (a cluster's is its controller's).
                metadata_version: features::MAX_METADATA_VERSION,
                ..CatalogRecord::default()
            }),
            Err(e) => Err(anyhow::anyhow!(
                "cannot read catalog {}: {e}",
                path.display()
            )),
        }
    }

    /// Persists a catalog: write a temporary file, sync it, rename it over the old one, sync the
    /// directory. A crash leaves either the old or the new catalog, never a torn one.
    pub async fn persist(data_dir: &Path, record: &CatalogRecord) -> std::io::Result<()> {
        Self::persist_at(&Self::path(data_dir), record).await
    }

    /// Where a broker that is not a voter keeps the controller's catalog between runs.
    pub fn controller_copy_path(data_dir: &Path) -> PathBuf {
        data_dir.join("__meta").join("controller-catalog.rkyv")
    }

    /// `persist` to any path.
    pub async fn persist_at(path: &Path, record: &CatalogRecord) -> std::io::Result<()> {
        let dir = path.parent().expect("catalog has a parent dir");
        crate::storage::disk::create_dir_durably(dir)?;
        let tmp = path.with_extension("tmp");
        crate::storage::log::write_file(&tmp, encode_record(record)?).await?;
        std::fs::rename(&tmp, path)?;
        crate::storage::log::sync_dir(dir).await
    }

    /// A catalog file at `path`; None when there is none.
    pub fn read_at(path: &Path) -> anyhow::Result<Option<CatalogRecord>> {
        match std::fs::read(path) {
            Ok(raw) => decode_record(&raw)
                .map(Some)
                .map_err(|e| anyhow::anyhow!("catalog {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!(
                "cannot read catalog {}: {e}",
                path.display()
            )),
        }
    }
}

/// The catalog file's bytes: the header, then the record in rkyv, in the format of the
/// record's level (`features`): format 5 below level 2, which an older Sluice reads.
fn encode_record(record: &CatalogRecord) -> std::io::Result<Vec<u8>> {
    let level = features::level(record.metadata_version);
    let (version, body) = if level >= features::PARTITION_EPOCHS {
        (
            FORMAT_VERSION,
            rkyv::to_bytes::<rkyv::rancor::Error>(record),
        )
    } else {
        assert!(
            record.partition_epochs.is_empty(),
            "partition epochs are kept from level {} only",
            features::PARTITION_EPOCHS
        );
        let v5 = CatalogRecordV5 {
            cluster_id: record.cluster_id.clone(),
            topics: record.topics.clone(),
            producer_id_block_end: record.producer_id_block_end,
            broker_configs: record.broker_configs.clone(),
            brokers: record.brokers.clone(),
            scram_credentials: record.scram_credentials.clone(),
            acls: record.acls.clone(),
        };
        (
            LEVEL_1_FORMAT_VERSION,
            rkyv::to_bytes::<rkyv::rancor::Error>(&v5),
        )
    };
    let body = body.map_err(std::io::Error::other)?;
    let mut out = Vec::with_capacity(MAGIC.len() + 1 + body.len());
    out.extend_from_slice(MAGIC);
    out.push(version);
    out.extend_from_slice(&body);
    Ok(out)
}

/// Reads a catalog file of any version this Sluice knows.
fn decode_record(raw: &[u8]) -> Result<CatalogRecord, String> {
    let (version, body) = match raw.strip_prefix(MAGIC) {
        Some([version, body @ ..]) if *version <= FORMAT_VERSION => (*version, body),
        Some([version, ..]) => {
            return Err(format!(
                "format version {version} is newer than this Sluice reads ({FORMAT_VERSION})"
            ))
        }
        Some([]) => return Err("truncated header".into()),
        // Version 0: the record alone, as written before the header existed.
        None => (0, raw),
    };
    let mut aligned = rkyv::util::AlignedVec::<16>::new();
    aligned.extend_from_slice(body);
    let corrupt = |e: rkyv::rancor::Error| format!("corrupt: {e}");
    match version {
        FORMAT_VERSION => {
            rkyv::from_bytes::<CatalogRecord, rkyv::rancor::Error>(&aligned).map_err(corrupt)
        }
        LEVEL_1_FORMAT_VERSION => {
            rkyv::from_bytes::<CatalogRecordV5, rkyv::rancor::Error>(&aligned)
                .map(CatalogRecord::from)
                .map_err(corrupt)
        }
        _ => decode_before_v5(version, &aligned).map(CatalogRecord::from),
    }
}

impl From<CatalogRecordV5> for CatalogRecord {
    /// A catalog of level 1, as every catalog before format 6 is.
    fn from(v5: CatalogRecordV5) -> CatalogRecord {
        CatalogRecord {
            cluster_id: v5.cluster_id,
            topics: v5.topics,
            producer_id_block_end: v5.producer_id_block_end,
            broker_configs: v5.broker_configs,
            brokers: v5.brokers,
            scram_credentials: v5.scram_credentials,
            acls: v5.acls,
            metadata_version: features::MIN_METADATA_VERSION,
            partition_epochs: Vec::new(),
        }
    }
}

/// A catalog of format versions 0 to 4, in version 5's layout.
fn decode_before_v5(version: u8, aligned: &[u8]) -> Result<CatalogRecordV5, String> {
    let corrupt = |e: rkyv::rancor::Error| format!("corrupt: {e}");
    let v4 = match version {
        4 => rkyv::from_bytes::<CatalogRecordV4, rkyv::rancor::Error>(aligned).map_err(corrupt)?,
        _ => {
            let v3 = if version == 3 {
                rkyv::from_bytes::<CatalogRecordV3, rkyv::rancor::Error>(aligned)
                    .map_err(corrupt)?
            } else {
                decode_before_v3(version, aligned)?
            };
            CatalogRecordV4 {
                cluster_id: v3.cluster_id,
                topics: v3.topics,
                producer_id_block_end: v3.producer_id_block_end,
                broker_configs: v3.broker_configs,
                brokers: v3.brokers,
                scram_credentials: Vec::new(),
                acls: Vec::new(),
            }
        }
    };
    Ok(CatalogRecordV5 {
        cluster_id: v4.cluster_id,
        topics: v4.topics,
        producer_id_block_end: v4.producer_id_block_end,
        broker_configs: v4.broker_configs,
        brokers: v4.brokers.into_iter().map(BrokerRecord::from).collect(),
        scram_credentials: v4.scram_credentials,
        acls: v4.acls,
    })
}

/// A catalog of format versions 0 to 2, in version 3's layout.
fn decode_before_v3(version: u8, aligned: &[u8]) -> Result<CatalogRecordV3, String> {
    let corrupt = |e: rkyv::rancor::Error| format!("corrupt: {e}");
    // Version 2: no brokers or replica assignments yet (a single node's catalog).
    let old = if version == 2 {
        rkyv::from_bytes::<CatalogRecordV2, rkyv::rancor::Error>(aligned).map_err(corrupt)?
    } else {
        // Versions 0 and 1: no dynamic broker configs either.
        let v1 =
            rkyv::from_bytes::<CatalogRecordV1, rkyv::rancor::Error>(aligned).map_err(corrupt)?;
        CatalogRecordV2 {
            cluster_id: v1.cluster_id,
            topics: v1.topics,
            producer_id_block_end: v1.producer_id_block_end,
            broker_configs: Vec::new(),
        }
    };
    Ok(CatalogRecordV3 {
        cluster_id: old.cluster_id,
        topics: old.topics.into_iter().map(TopicRecord::from).collect(),
        producer_id_block_end: old.producer_id_block_end,
        broker_configs: old.broker_configs,
        brokers: Vec::new(),
    })
}

/// A catalog record's bytes as stored (header, then rkyv): also the controller's snapshots.
pub fn encode(record: &CatalogRecord) -> std::io::Result<Vec<u8>> {
    encode_record(record)
}

/// Reads bytes written by `encode`, of any format version this Sluice knows.
pub fn decode(raw: &[u8]) -> Result<CatalogRecord, String> {
    decode_record(raw)
}

/// Kafka's topic name rule: 1..=249 characters of [a-zA-Z0-9._-], not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_TOPIC_NAME_LEN {
        return Err(format!(
            "topic name must have 1..={MAX_TOPIC_NAME_LEN} characters"
        ));
    }
    if name == "." || name == ".." {
        return Err("topic name cannot be \".\" or \"..\"".into());
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(format!(
            "topic name {name:?} has characters other than [a-zA-Z0-9._-]"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_names_itself_to_clients_even_while_fenced_and_no_other_fenced_broker() {
        let broker = |node_id, fenced| BrokerRecord {
            node_id,
            incarnation: 1,
            listeners: Vec::new(),
            rack: None,
            fenced,
        };
        let record = CatalogRecord {
            brokers: vec![broker(1, false), broker(2, true), broker(3, true)],
            ..CatalogRecord::default()
        };
        let config = Config {
            node_id: 3,
            ..Config::default()
        };
        let catalog = Catalog::from_record(&record, &config).unwrap();
        let listed: Vec<i32> = catalog.listed_brokers().map(|b| b.node_id).collect();
        assert_eq!(listed, vec![1, 3]);
    }

    #[test]
    fn record_round_trips_through_rkyv() {
        let v2_topic = TopicRecordV2 {
            name: "t".into(),
            id: [3; 16],
            partitions: 8,
            configs: vec![("retention.ms".into(), "5".into())],
        };
        let scopes = vec![BrokerConfigRecord {
            broker: "".into(),
            configs: vec![("log.retention.ms".into(), "7".into())],
        }];
        let old_broker = BrokerRecordV1 {
            node_id: 1,
            incarnation: 9,
            host: "h".into(),
            port: 1,
            rack: Some("r".into()),
            fenced: false,
        };
        let mut topic = TopicRecord::from(v2_topic.clone());
        topic.assignment = vec![PartitionAssignment {
            replicas: vec![1, 2],
            leader: 1,
            leader_epoch: 4,
            isr: vec![1],
            ..Default::default()
        }];
        let rec = CatalogRecord {
            cluster_id: "c".into(),
            topics: vec![topic],
            producer_id_block_end: 3000,
            broker_configs: scopes.clone(),
            brokers: vec![BrokerRecord::from(old_broker.clone())],
            // Every catalog before format 6 is of level 1.
            metadata_version: features::MIN_METADATA_VERSION,
            ..CatalogRecord::default()
        };
        let v3 = CatalogRecordV3 {
            cluster_id: rec.cluster_id.clone(),
            topics: rec.topics.clone(),
            producer_id_block_end: rec.producer_id_block_end,
            broker_configs: rec.broker_configs.clone(),
            brokers: vec![old_broker.clone()],
        };
        let mut v3_file = b"SLUICAT\x03".to_vec();
        v3_file.extend_from_slice(&rkyv::to_bytes::<rkyv::rancor::Error>(&v3).unwrap());
        // Version 3 files load with no credentials and no ACLs, and each broker with one
        // PLAINTEXT listener.
        assert_eq!(decode_record(&v3_file), Ok(rec.clone()));
        assert_eq!(
            rec.brokers[0].endpoint("PLAINTEXT").map(|e| e.port),
            Some(1)
        );
        let mut rec = rec;
        rec.scram_credentials = vec![ScramCredentialRecord {
            user: "u".into(),
            mechanism: 1,
            salt: vec![1],
            iterations: 4096,
            stored_key: vec![2],
            server_key: vec![3],
        }];
        rec.acls = vec![AclRecord {
            resource_type: 2,
            name: "t".into(),
            pattern: 3,
            principal: "User:u".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        }];
        // Version 4 files keep their credentials and ACLs.
        let v4 = CatalogRecordV4 {
            cluster_id: rec.cluster_id.clone(),
            topics: rec.topics.clone(),
            producer_id_block_end: rec.producer_id_block_end,
            broker_configs: rec.broker_configs.clone(),
            brokers: vec![old_broker],
            scram_credentials: rec.scram_credentials.clone(),
            acls: rec.acls.clone(),
        };
        let mut v4_file = b"SLUICAT\x04".to_vec();
        v4_file.extend_from_slice(&rkyv::to_bytes::<rkyv::rancor::Error>(&v4).unwrap());
        assert_eq!(decode_record(&v4_file), Ok(rec.clone()));
        rec.brokers[0].listeners.push(EndpointRecord {
            name: "internal".into(),
            host: "10.0.0.1".into(),
            port: 9094,
            security_protocol: 3,
        });
        // Below level 2 the catalog is written in format 5, which Sluice 0.1 reads.
        let bytes = encode_record(&rec).unwrap();
        assert!(bytes.starts_with(b"SLUICAT\x05"));
        assert_eq!(decode_record(&bytes), Ok(rec.clone()));
        // From level 2: format 6, with the level and the partition epochs.
        let leveled = CatalogRecord {
            metadata_version: features::PARTITION_EPOCHS,
            partition_epochs: vec![TopicEpochs {
                id: rec.topics[0].id,
                epochs: vec![7],
            }],
            ..rec.clone()
        };
        let six = encode_record(&leveled).unwrap();
        assert!(six.starts_with(b"SLUICAT\x06"));
        assert_eq!(decode_record(&six), Ok(leveled));
        let rec = CatalogRecord {
            scram_credentials: Vec::new(),
            acls: Vec::new(),
            ..rec
        };
        // Version 2 files load with no brokers and no assignments.
        let v2 = CatalogRecordV2 {
            cluster_id: "c".into(),
            topics: vec![v2_topic.clone()],
            producer_id_block_end: 3000,
            broker_configs: scopes,
        };
        let mut v2_file = b"SLUICAT\x02".to_vec();
        v2_file.extend_from_slice(&rkyv::to_bytes::<rkyv::rancor::Error>(&v2).unwrap());
        let single = CatalogRecord {
            topics: vec![TopicRecord::from(v2_topic.clone())],
            brokers: Vec::new(),
            ..rec.clone()
        };
        assert_eq!(decode_record(&v2_file), Ok(single.clone()));
        // Files of versions 0 (no header) and 1 still load, with no broker configs.
        let v1 = CatalogRecordV1 {
            cluster_id: "c".into(),
            topics: vec![v2_topic],
            producer_id_block_end: 3000,
        };
        let body = rkyv::to_bytes::<rkyv::rancor::Error>(&v1).unwrap();
        let migrated = CatalogRecord {
            broker_configs: Vec::new(),
            ..single
        };
        assert_eq!(decode_record(&body), Ok(migrated.clone()));
        let mut v1_file = b"SLUICAT\x01".to_vec();
        v1_file.extend_from_slice(&body);
        assert_eq!(decode_record(&v1_file), Ok(migrated));
        // A newer format is refused by name, not misread.
        let mut newer = bytes.clone();
        newer[7] = 7;
        assert!(decode_record(&newer).unwrap_err().contains("version 7"));
        assert!(decode_record(b"SLUICAT").is_err());
    }

    #[test]
    fn config_validation() {
        let d = crate::config::TopicDefaults::default();
        let l = crate::config::LogConfig::default();
        assert!(TopicConfig::resolve(&d, &l, &[("nope".into(), "1".into())]).is_err());
        assert!(TopicConfig::resolve(&d, &l, &[("retention.ms".into(), "x".into())]).is_err());
        let c = TopicConfig::resolve(
            &d,
            &l,
            &[("message.timestamp.type".into(), "LogAppendTime".into())],
        )
        .unwrap();
        assert!(c.log_append_time);
        assert!(validate_topic_name("a.b-c_9").is_ok());
        assert!(validate_topic_name("a/b").is_err());
        assert!(validate_topic_name("..").is_err());
    }

    #[test]
    fn incremental_edits() {
        let d = crate::config::TopicDefaults::default();
        let l = crate::config::LogConfig::default();
        let current = vec![("retention.ms".to_string(), "5".to_string())];
        let effective = TopicConfig::resolve(&d, &l, &current).unwrap();
        let edit = |edits: &[(&str, ConfigOp, Option<&str>)]| {
            let edits: Vec<_> = edits
                .iter()
                .map(|(k, op, v)| (k.to_string(), *op, v.map(str::to_string)))
                .collect();
            edit_overrides(&current, &effective, &edits)
        };
        let kv = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            edit(&[
                ("retention.ms", ConfigOp::Set, Some("9")),
                ("segment.ms", ConfigOp::Set, Some("7"))
            ]),
            Ok(vec![kv("retention.ms", "9"), kv("segment.ms", "7")])
        );
        assert_eq!(
            edit(&[("retention.ms", ConfigOp::Delete, None)]),
            Ok(vec![])
        );
        // A list starts from the effective value (the default "delete") when not overridden.
        assert_eq!(
            edit(&[("cleanup.policy", ConfigOp::Append, Some("compact"))]),
            Ok(vec![
                kv("retention.ms", "5"),
                kv("cleanup.policy", "delete,compact")
            ])
        );
        assert_eq!(
            edit(&[("cleanup.policy", ConfigOp::Subtract, Some("delete"))]),
            Ok(vec![kv("retention.ms", "5"), kv("cleanup.policy", "")])
        );
        assert!(edit(&[("retention.ms", ConfigOp::Append, Some("1"))]).is_err());
        assert!(edit(&[("no.such", ConfigOp::Set, Some("1"))]).is_err());
        assert!(edit(&[("retention.ms", ConfigOp::Set, None)]).is_err());
        assert!(edit(&[
            ("retention.ms", ConfigOp::Set, Some("1")),
            ("retention.ms", ConfigOp::Delete, None)
        ])
        .is_err());
        assert_eq!(ConfigOp::from_code(2), Some(ConfigOp::Append));
        assert_eq!(ConfigOp::from_code(4), None);
    }
}
