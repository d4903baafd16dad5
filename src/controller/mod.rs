//! The controller: topic changes and producer-id blocks, run on the controller shard (shard 0),
//! one at a time. A change is validated, checked against the broker's bounds, and expressed as
//! metadata records (`records.rs`), which are applied to a working copy of the catalog so that
//! the next item of the request sees them. Then they are made durable:
//! - on a single node, the new catalog is persisted and installed on every shard;
//! - in a cluster (`voters` set), the records are one entry of the Raft metadata log, proposed
//!   by the active controller; an operation that reaches another node is forwarded to it
//!   (`cluster.rs`). Every node applies committed entries to its catalog.
//!
//! Either way a change is answered once this node's shards have installed it: a topic exists
//! for clients only once every shard has opened its partitions.
//!
//! A service: the server wires one `Controller` into shard 0; other shards reach it with
//! `submit` and `allocate_producer_id`, typed requests over the mesh.
//!
//! ## The cluster
//!
//! Several `sluice serve` processes with the same `voters` list are one cluster (issue 15; KRaft's
//! combined mode). The metadata is replicated by Raft; partition data by Kafka's replication
//! model (issue 16, `replication/mod.rs`).
//!
//! - **The metadata log.** The voters run one Raft group (raft-rs 0.7) on their controller shard.
//!   Its entries are batches of metadata records (`controller/records.rs`): cluster id, broker
//!   registrations and fencing, topics with their assignments, partitions, topic and broker
//!   configs, producer-id blocks. An entry is one controller request, applied all or nothing to
//!   the catalog record, by every voter in log order, so every voter holds the same catalog. Raft
//!   ids are node ids + 1 (raft-rs reserves 0).
//! - **The driver** (`controller/quorum.rs`) is one task that owns the `RawNode`: it ticks it
//!   every `raft_tick_ms`, steps peer messages and proposals from a bounded inbox (steps all that
//!   arrived before handling the Ready, so one fdatasync covers them), and handles each Ready in
//!   raft-rs's order. Persisting (`raft_store.rs`) is std file I/O on shard 0's thread: a few
//!   hundred microseconds per metadata change, never on the data path.
//! - **Start-up.** A voter recovers its catalog before any shard starts
//!   (`quorum::recover`: latest snapshot, then the entries its hard state says are committed), so
//!   shards serve current metadata from the first request; raft-rs then starts after them. A
//!   broker that is not a voter starts from its copy of the controller's catalog.
//! - **Writes** (`controller::execute`): on the active controller (leader, with an entry of its
//!   own term committed and applied) the operation is validated against the applied catalog,
//!   expressed as records, proposed, and answered once applied and installed on this node's
//!   shards. Elsewhere it is forwarded over RPC (`messages::FORWARD`); no controller within
//!   `metadata_write_timeout_ms`: REQUEST_TIMED_OUT.
//! - **Applying** (`controller/applied.rs`): each applied entry, snapshot or change of controller
//!   bumps a generation; one task installs the newest catalog on every shard (states in between
//!   are skipped). Shards open the partitions this node holds a replica of; a partition request
//!   to a node that does not lead it is answered NOT_LEADER_OR_FOLLOWER (produce, fetch,
//!   ListOffsets, DeleteRecords), a group request NOT_COORDINATOR, and FindCoordinator names the
//!   leader of the group's `__consumer_offsets` partition. The internal topics are created only
//!   once as many brokers are live as their replication factor (`offsets_topic_replication_factor`,
//!   `transactions.state_log_replication_factor`; default min(3, voters)), never with fewer.
//! - **Liveness** (`controller/cluster.rs`, `liveness.rs`): every node heartbeats the active
//!   controller; the controller registers a new incarnation (a log record; the data dir remembers
//!   the last one, so a restart takes over its registration at once while a second process with
//!   a live node's id is refused), renews sessions, and fences a broker silent for
//!   `broker_session_timeout_ms`: its partitions move to another live in-sync replica, or have no
//!   leader (a new leader epoch either way). A controller that takes over gives every broker a
//!   full session. Brokers that are not voters get the catalog in heartbeat replies when behind.
//! - **Snapshots.** Every `snapshot_after_entries` applied entries a voter writes its catalog as a
//!   snapshot (`catalog::encode`) and rewrites its log without the entries before it; a follower
//!   behind the leader's first entry is sent the snapshot (raft-rs asks `Storage::snapshot`).
//! - **Refusals.** Raft messages carry the sender's cluster id: a voter drops messages of another
//!   cluster, and stops (with a message) when the quorum's leader is of another cluster than its
//!   data dir. The controller refuses a heartbeat of another cluster (INCONSISTENT_CLUSTER_ID) or
//!   a duplicate node id (DUPLICATE_BROKER_REGISTRATION); the refused node stops with the reason.
//! - **RPC** (`rpc/`): frames are size-bounded (256 MiB), checksummed and versioned; garbage, a
//!   bad checksum or a frame that trickles past 10 s closes that connection with a log line. At
//!   most 1024 RPC connections and 256 calls in progress per connection; Raft messages wait in a
//!   bounded outbox per peer (1024) and are dropped, counted, when it is full (Raft resends).
//!   With a cluster secret, a connection's handshake must finish within 10 s on the server (1 s
//!   on the dialer, its connect budget); refusals are logged at most once per 10 s per side.
//!   Where `[tls]` trusts a CA every RPC connection is TLS first (mutual: the server requires a
//!   certificate of the CA, the dialer checks the server's for the address dialed; the TLS
//!   handshake is bounded like a frame), and a TLS refusal is logged as a refusal. The
//!   certificates are read at start and again on SIGHUP, for new connections.
//! - **Ownership.** Everything of the cluster lives on shard 0; other shards reach it with typed
//!   requests (`controller::submit`, `allocate_producer_id`, `quorum_view`). A node that does not
//!   lead the quorum asks the active controller for its view (`messages::QUORUM`, a kind 0.1
//!   answers "unknown": DescribeQuorum then answers NOT_LEADER_OR_FOLLOWER, as from 0.1).
//! - **Feature levels** (`storage/features.rs`, `controller/features.rs`; KIP-584, KIP-778). The
//!   cluster's `metadata.version` is in the catalog (0.1's catalogs record none: level 1). A
//!   binary runs a range of levels (this one 1..=2) and writes the formats of the level its
//!   cluster finalised, never newer ones: at level 1 the catalog is written in format 5 and
//!   records and RPC messages are 0.1's, so a 0.1 node reads everything a new one writes until
//!   the level is raised, and a new node can be replaced by a 0.1 one again. Each broker tells
//!   each new active controller its range, and the same one again every 10 s (one that restarted
//!   forgot it; `messages::FEATURES`, a kind 0.1 answers "unknown");
//!   UpdateFeatures raises the level only when every registered broker (fenced or not) said it
//!   runs it, writes `SetFeatureLevel`, and never lowers it. A new cluster starts at the newest
//!   level (`records::bootstrap`); a node that applies a level beyond its range stops by name
//!   (`records::check_level`). Anything added to a record, catalog or RPC message from now on
//!   names the level that writes it (the table in `storage/features.rs`); variants added to the
//!   rkyv enums box their payloads so that older readers' layouts stay (tests check the archived
//!   sizes of records and forwarded operations).
//! - **Partition epochs** (level 2 on): every applied entry that changes a partition's assignment
//!   (replicas, leader, leader epoch, in-sync set, a reassignment's sets) moves its epoch by one
//!   (`records::renew_partition_epochs`, deterministic, so every node counts the same), kept in the
//!   catalog beside the assignments (format 6). A leader's in-sync change carries the epoch of the
//!   assignment it was computed from (`ControllerOp::AlterPartitionAt`); the controller refuses
//!   another epoch (INVALID_UPDATE_VERSION) and the record it writes (`AlterPartition`) applies
//!   only at that epoch, so a change computed from one state never lands on another. A leader drops
//!   an ask whose epoch is gone (`Replicas::note_partition_epoch`).

pub mod applied;
pub mod bounds;
mod broker_configs;
pub mod cluster;
pub mod elections;
pub mod features;
pub mod liveness;
pub mod messages;
pub mod placement;
pub mod quorum;
pub mod raft_node;
pub mod raft_store;
pub mod reassignment;
pub mod records;
pub mod security_ops;

use crate::clock::Ids;
use crate::partition::commit::{same_set, IsrRequest};
use crate::shard::catalog_install::install_on_every_shard;
use crate::shard::mesh::{Peer, Request, ShardGone, Sharded};
use crate::shard::{Shard, CONTROLLER_SHARD};
use crate::storage::catalog::{self, Catalog, CatalogRecord, ConfigOp, TopicRecord};
use crate::storage::topic_config::TopicConfig;
use cluster::Cluster;
use futures::future::LocalBoxFuture;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use records::{MetadataRecord, PartitionChange};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
    /// A manual assignment, as requested: (partition index, broker ids with the preferred
    /// leader first). Empty: placed by the controller.
    pub assignments: Vec<(i32, Vec<i32>)>,
}

impl NewTopic {
    /// How many partitions the topic gets: as many as its manual assignment lists, else as
    /// requested, else (-1) the broker's `num.partitions`.
    pub fn partition_count(&self, default: i32) -> i32 {
        match (self.assignments.len(), self.partitions) {
            (0, -1) => default,
            (0, n) => n,
            (n, _) => n as i32,
        }
    }
}

/// Partitions to add to a topic (CreatePartitions): the new total, and optionally the brokers
/// of each new partition, the preferred leader first.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct NewPartitions {
    pub name: String,
    pub count: i32,
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// Topic changes, executed by the controller.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub enum ControllerOp {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topics: Vec<NewPartitions>,
        validate_only: bool,
    },
    AlterConfigs {
        topics: Vec<(String, ConfigChange)>,
        validate_only: bool,
    },
    /// Dynamic broker configs of one scope: "" (the whole cluster) or a node id.
    AlterBrokerConfigs {
        broker: String,
        change: ConfigChange,
        validate_only: bool,
    },
    /// A partition's leader asks for a new in-sync set (AlterPartition, KIP-497), below
    /// level `PARTITION_EPOCHS`.
    AlterPartition(IsrChange),
    /// A broker stops (controlled shutdown): its registration is fenced, which moves its
    /// leaderships to other in-sync replicas.
    ShutdownBroker {
        node_id: i32,
        incarnation: u64,
    },
    /// ElectLeaders (KIP-460) of these partitions (topic, index): `elections::PREFERRED` or
    /// `elections::UNCLEAN`.
    ElectLeaders {
        election_type: i8,
        partitions: Vec<(String, i32)>,
    },
    /// AlterPartitionReassignments (KIP-455): per (topic, index), a target replica list, or
    /// None to cancel the reassignment in progress.
    Reassign {
        partitions: Vec<(String, i32, Option<Vec<i32>>)>,
    },
    /// The controller's own pass: completes every reassignment whose added replicas are all
    /// in sync.
    CompleteReassignments,
    /// Credential and ACL changes (issue 19).
    Security(Vec<security_ops::SecurityChange>),
    /// UpdateFeatures (KIP-584): all or nothing (`features::update`). Added after 0.1: an
    /// older controller refuses it as a message it cannot read.
    UpdateFeatures {
        updates: Vec<features::FeatureUpdate>,
        validate_only: bool,
    },
    /// `AlterPartition` from level `PARTITION_EPOCHS` on: computed at this partition epoch,
    /// taken only at it (boxed: a variant larger than the largest of 0.1 would make every
    /// forwarded operation unreadable to a 0.1 controller).
    AlterPartitionAt(Box<(IsrChange, i32)>),
}

impl ControllerOp {
    /// A leader's ask: with its partition epoch where it has one.
    pub fn alter_partition(change: IsrChange, partition_epoch: Option<i32>) -> ControllerOp {
        match partition_epoch {
            Some(e) => ControllerOp::AlterPartitionAt(Box::new((change, e))),
            None => ControllerOp::AlterPartition(change),
        }
    }
}

/// A leader's request to change its partition's in-sync replicas.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct IsrChange {
    pub topic_id: [u8; 16],
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    /// The committed set the leader computed from: taken only while it still is the set.
    pub from_isr: Vec<i32>,
    pub isr: Vec<i32>,
    /// The members `isr` adds, each with the registration (incarnation) whose fetches
    /// qualified it: taken only while that registration stands (KIP-903).
    pub joining: Vec<(i32, u64)>,
}

impl IsrChange {
    /// Leader `leader`'s ask for partition (`topic_id`, `partition`).
    pub fn new(topic_id: [u8; 16], partition: i32, leader: i32, r: IsrRequest) -> IsrChange {
        IsrChange {
            topic_id,
            partition,
            leader,
            leader_epoch: r.epoch,
            from_isr: r.from,
            isr: r.isr,
            joining: r.joining,
        }
    }
}

/// A change to one topic's config overrides.
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub enum ConfigChange {
    /// AlterConfigs: these overrides replace all of the topic's.
    Replace(Vec<(String, String)>),
    /// IncrementalAlterConfigs: (key, operation, value), applied in order.
    Incremental(Vec<(String, ConfigOp, Option<String>)>),
}

/// One item's outcome: an error code (0: done) and an optional message.
pub type Outcome = (i16, Option<String>);

fn err(e: ResponseError, msg: impl Into<String>) -> Outcome {
    (e.code(), Some(msg.into()))
}

/// Producer ids reserved per catalog write (or metadata log entry): a restart resumes after
/// the reserved block, so ids stay unique across restarts with one write per block.
const PRODUCER_ID_BLOCK: i64 = 1000;

impl ControllerOp {
    /// How many outcomes the operation answers (one per item).
    fn items(&self) -> usize {
        match self {
            ControllerOp::CreateTopics { topics, .. } => topics.len(),
            ControllerOp::DeleteTopics { names } => names.len(),
            ControllerOp::CreatePartitions { topics, .. } => topics.len(),
            ControllerOp::AlterConfigs { topics, .. } => topics.len(),
            ControllerOp::AlterBrokerConfigs { .. } => 1,
            ControllerOp::AlterPartition(_)
            | ControllerOp::AlterPartitionAt(_)
            | ControllerOp::ShutdownBroker { .. } => 1,
            ControllerOp::ElectLeaders { partitions, .. } => partitions.len(),
            ControllerOp::Reassign { partitions } => partitions.len(),
            ControllerOp::CompleteReassignments => 1,
            ControllerOp::Security(changes) => changes.len(),
            ControllerOp::UpdateFeatures { .. } => 1,
        }
    }
}

/// Every shard's way to the controller: the controller itself on `CONTROLLER_SHARD`, None
/// elsewhere; requests to it are always sent to that shard (`submit`, `allocate_producer_id`,
/// `quorum_view`).
pub type Controllers = Sharded<Option<Controller>>;

/// The controller if this is the controller shard.
pub fn on_this_shard(controllers: &Controllers) -> Option<&Controller> {
    let slot: &Option<Controller> = controllers;
    slot.as_ref()
}

/// The controller, on the controller shard (where every controller request runs).
pub fn here(controllers: &Controllers) -> &Controller {
    on_this_shard(controllers)
        .expect("controller requests run on the controller shard, which has the controller")
}

/// The controller's state on its shard.
pub struct Controller {
    /// Serializes controller operations: each reads, changes and persists the whole catalog.
    lock: Semaphore,
    /// The next producer id to hand out, and the end of the block it comes from.
    next_producer_id: Cell<i64>,
    producer_id_block_end: Cell<i64>,
    /// Where topic ids come from.
    ids: RefCell<Box<dyn Ids>>,
    /// This node's part in a cluster; None on a single node.
    pub cluster: Option<Rc<Cluster>>,
}

impl Controller {
    pub fn new(catalog: &Catalog, ids: Box<dyn Ids>, cluster: Option<Rc<Cluster>>) -> Controller {
        // In a cluster a node starts with no block and asks the controller for one.
        let (next, end) = match cluster {
            None => (catalog.producer_id_block_end, catalog.producer_id_block_end),
            Some(_) => (0, 0),
        };
        Controller {
            lock: Semaphore::new(1),
            next_producer_id: Cell::new(next),
            producer_id_block_end: Cell::new(end),
            ids: RefCell::new(ids),
            cluster,
        }
    }

    async fn lock(&self) -> glommio::sync::Permit<'_> {
        self.lock
            .acquire_permit(1)
            .await
            .expect("the controller lock never closes")
    }
}

/// Runs `op` on the controller (from any shard). Err: the controller shard is stopping.
pub async fn submit(
    controllers: &Rc<Controllers>,
    op: ControllerOp,
) -> Result<Vec<Outcome>, ShardGone> {
    controllers.call(CONTROLLER_SHARD, Submit(op)).await
}

/// Whether a cluster has the live brokers internal topic `name` (`__consumer_offsets`,
/// `__transaction_state`) waits for before it is created: its replication factor
/// (`Config::internal_topic_replication_factor`), so that it gets every replica. Kafka waits
/// the same way, with no time limit: until then its coordinators are not available.
pub fn internal_topic_brokers_live(shard: &Shard, name: &str) -> bool {
    shard.catalog().live_brokers().count() >= internal_topic_replication_factor(shard, name)
}

/// Replicas of internal topic `name` (`Config::internal_topic_replication_factor`).
pub fn internal_topic_replication_factor(shard: &Shard, name: &str) -> usize {
    let config = &shard.config;
    config.internal_topic_replication_factor(name == catalog::TXN_STATE_TOPIC)
}

/// A new producer id (from any shard), or an error code. Err: the controller is stopping.
pub async fn allocate_producer_id(
    controllers: &Rc<Controllers>,
) -> Result<Result<i64, i16>, ShardGone> {
    controllers.call(CONTROLLER_SHARD, AllocateProducerId).await
}

/// The controller quorum as its leader sees it (DescribeQuorum).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize, Debug, Clone, PartialEq)]
pub struct QuorumView {
    pub leader_id: i32,
    pub term: u64,
    pub commit: u64,
    /// Each voter's (node id, last entry replicated to it).
    pub voters: Vec<(i32, u64)>,
}

/// The quorum's state as its leader sees it, from any shard of any node of a cluster: a node
/// that does not lead the quorum asks the active controller (as a Kafka broker forwards
/// DescribeQuorum to it). None: no controller answered (or a single node). Err: the
/// controller shard is stopping.
pub async fn quorum_view(controllers: &Rc<Controllers>) -> Result<Option<QuorumView>, ShardGone> {
    controllers.call(CONTROLLER_SHARD, DescribeQuorum).await
}

/// The quorum's state if this node leads it (on the controller shard).
fn local_quorum_view(controllers: &Controllers) -> Option<QuorumView> {
    let controller = here(controllers);
    let quorum = controller.cluster.as_ref()?.quorum.clone()?;
    let s = quorum.status();
    let voters = quorum.voter_progress();
    (s.leader && !voters.is_empty()).then_some(QuorumView {
        leader_id: s.leader_id,
        term: s.term,
        commit: s.commit,
        voters,
    })
}

struct DescribeQuorum;

impl Request<Controllers> for DescribeQuorum {
    type Reply = Option<QuorumView>;
    fn run(self, controllers: Rc<Controllers>) -> LocalBoxFuture<'static, Option<QuorumView>> {
        Box::pin(async move {
            if let Some(view) = local_quorum_view(&controllers) {
                return Some(view);
            }
            let cluster = here(&controllers).cluster.clone()?;
            match cluster.call_controller(messages::QUORUM, &[]).await {
                Ok(body) => messages::decode(&body).ok(),
                Err((code, why)) => {
                    log::debug!(
                        "controller: no quorum view from the active controller: {code} {why:?}"
                    );
                    None
                }
            }
        })
    }
}

struct Submit(ControllerOp);

impl Request<Controllers> for Submit {
    type Reply = Vec<Outcome>;
    fn run(self, controllers: Rc<Controllers>) -> LocalBoxFuture<'static, Vec<Outcome>> {
        Box::pin(async move { execute(&controllers, self.0).await })
    }
}

struct AllocateProducerId;

impl Request<Controllers> for AllocateProducerId {
    type Reply = Result<i64, i16>;
    fn run(self, controllers: Rc<Controllers>) -> LocalBoxFuture<'static, Result<i64, i16>> {
        Box::pin(async move { next_producer_id(&controllers).await })
    }
}

/// Executes a topic change from the controller shard: here on a single node or when this node
/// is the active controller, otherwise on the active controller.
pub async fn execute(controllers: &Rc<Controllers>, op: ControllerOp) -> Vec<Outcome> {
    let shard = &controllers.shard;
    assert_eq!(
        shard.id, CONTROLLER_SHARD,
        "controller ops run on its shard"
    );
    let controller = here(controllers);
    let Some(cluster) = &controller.cluster else {
        return execute_here(controllers, op).await;
    };
    let items = op.items();
    cluster::route_op(controllers, cluster, op)
        .await
        .unwrap_or_else(|e| vec![e; items])
}

/// The catalog a change is decided on, under the controller's lock: in a cluster the applied
/// one, once every change this node proposed before has settled (`Cluster::await_settled`).
async fn decided_on(
    controller: &Controller,
    shard: &Shard,
    current: &Catalog,
) -> Result<CatalogRecord, Outcome> {
    match &controller.cluster {
        Some(c) => {
            c.await_settled(shard.clock()).await?;
            Ok(c.applied.image())
        }
        None => Ok(current.to_record()),
    }
}

/// Executes a topic change on this node's controller.
async fn execute_here(controllers: &Rc<Controllers>, op: ControllerOp) -> Vec<Outcome> {
    let shard = &controllers.shard;
    let controller = here(controllers);
    let _permit = controller.lock().await;
    let current = shard.catalog();
    let mut record = match decided_on(controller, shard, &current).await {
        Ok(record) => record,
        Err(e) => return vec![e; op.items()],
    };
    let mut out = Vec::new();
    let results = match op {
        ControllerOp::CreateTopics {
            topics,
            validate_only,
        } => create_topics(
            shard,
            controller,
            &mut record,
            &mut out,
            topics,
            validate_only,
        ),
        ControllerOp::DeleteTopics { names } => delete_topics(&mut record, &mut out, names),
        ControllerOp::CreatePartitions {
            topics,
            validate_only,
        } => create_partitions(shard, &mut record, &mut out, topics, validate_only),
        ControllerOp::AlterConfigs {
            topics,
            validate_only,
        } => alter_configs(&current, &mut record, &mut out, topics, validate_only),
        ControllerOp::AlterBrokerConfigs {
            broker,
            change,
            validate_only,
        } => {
            let r = broker_configs::alter(shard, &current, &record, &broker, change, validate_only);
            if let Some(change) = r.1 {
                push(&mut record, &mut out, change);
            }
            r.0
        }
        ControllerOp::Security(changes) => security_ops::apply(&mut record, &mut out, changes),
        ControllerOp::UpdateFeatures {
            updates,
            validate_only,
        } => update_features(controller, &mut record, &mut out, &updates, validate_only),
        op @ (ControllerOp::AlterPartition(_)
        | ControllerOp::AlterPartitionAt(_)
        | ControllerOp::ShutdownBroker { .. }
        | ControllerOp::ElectLeaders { .. }
        | ControllerOp::Reassign { .. }
        | ControllerOp::CompleteReassignments) => replication_op(&mut record, &mut out, op),
    };
    if out.is_empty() {
        return results;
    }
    let committed = match &controller.cluster {
        Some(c) => c.commit(out).await,
        None => commit(shard, &record).await,
    };
    match committed {
        Ok(()) => results,
        Err(e) => results
            .into_iter()
            .map(|r| if r.0 == 0 { e.clone() } else { r })
            .collect(),
    }
}

/// Finalises feature levels (`features::update`), logging each.
fn update_features(
    controller: &Controller,
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    updates: &[features::FeatureUpdate],
    validate_only: bool,
) -> Vec<Outcome> {
    let checked = match &controller.cluster {
        Some(c) => features::update(record, &c.supported.borrow(), updates),
        None => features::update(record, &features::SupportedRanges::default(), updates),
    };
    match checked {
        Err(outcome) => vec![outcome],
        Ok(records) => {
            for r in records.into_iter().filter(|_| !validate_only) {
                log::info!("controller: finalising {r:?}");
                push(record, out, r);
            }
            vec![(0, None)]
        }
    }
}

/// The operations on partitions' replicas: in-sync set changes, a broker's controlled
/// shutdown, leader elections.
pub(crate) fn replication_op(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    op: ControllerOp,
) -> Vec<Outcome> {
    match op {
        ControllerOp::AlterPartition(change) => vec![alter_partition(record, out, &change, None)],
        ControllerOp::AlterPartitionAt(at) => vec![alter_partition(record, out, &at.0, Some(at.1))],
        ControllerOp::ShutdownBroker {
            node_id,
            incarnation,
        } => {
            let live = record
                .brokers
                .iter()
                .any(|b| b.node_id == node_id && b.incarnation == incarnation && !b.fenced);
            if live {
                log::info!("controller: broker {node_id} shuts down; moving its leaderships");
                let fence = MetadataRecord::FenceBroker {
                    node_id,
                    incarnation,
                };
                push(record, out, fence);
            }
            vec![(0, None)]
        }
        ControllerOp::ElectLeaders {
            election_type,
            partitions,
        } => {
            let (records, outcomes) = elections::elect(record, &partitions, election_type);
            for r in records {
                push(record, out, r);
            }
            outcomes
        }
        ControllerOp::Reassign { partitions } => partitions
            .iter()
            .map(|(topic, index, target)| reassign(record, out, topic, *index, target.as_deref()))
            .collect(),
        ControllerOp::CompleteReassignments => {
            for r in reassignment::completions(record) {
                log::info!("controller: a reassignment completes: {r:?}");
                push(record, out, r);
            }
            vec![(0, None)]
        }
        _ => unreachable!("not a replication operation"),
    }
}

/// Starts or cancels the reassignment of one partition (see `reassignment.rs`).
fn reassign(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    topic: &str,
    index: i32,
    target: Option<&[i32]>,
) -> Outcome {
    let Some(t) = record.topics.iter().find(|t| t.name == topic) else {
        return err(ResponseError::UnknownTopicOrPartition, "no such topic");
    };
    let Some(a) = usize::try_from(index)
        .ok()
        .and_then(|i| t.assignment.get(i))
    else {
        return err(ResponseError::UnknownTopicOrPartition, "no such partition");
    };
    let next = match target {
        Some(target) => reassignment::start(record, a, target),
        None => reassignment::cancel(a).map(Some),
    };
    match next {
        Err(outcome) => outcome,
        Ok(None) => (0, None),
        Ok(Some(assignment)) => {
            log::info!(
                "controller: {topic}-{index} reassigned: replicas {:?} (adding {:?}, removing {:?})",
                assignment.replicas,
                assignment.adding,
                assignment.removing
            );
            let (id, epoch) = (t.id, a.leader_epoch);
            push(
                record,
                out,
                MetadataRecord::SetAssignment {
                    id,
                    partition: index,
                    epoch,
                    assignment,
                },
            );
            (0, None)
        }
    }
}

/// Checks a leader's in-sync set change against the applied catalog: only the partition's
/// current leader in its current epoch may change it (a deposed leader is fenced), the set
/// keeps the leader, stays within the replicas, and adds only live brokers.
fn alter_partition(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    change: &IsrChange,
    partition_epoch: Option<i32>,
) -> Outcome {
    let current = records::partition_epoch(record, &change.topic_id, change.partition);
    let planted = crate::inject::active(crate::inject::Bug::StaleIsrChange);
    if let Some(at) = partition_epoch.filter(|at| Some(*at) != current && !planted) {
        return err(
            ResponseError::InvalidUpdateVersion,
            format!("partition epoch {at} is stale: the partition is at {current:?}"),
        );
    }
    let Some(topic) = record.topics.iter().find(|t| t.id == change.topic_id) else {
        return err(ResponseError::UnknownTopicOrPartition, "no such topic");
    };
    let Some(a) = usize::try_from(change.partition)
        .ok()
        .and_then(|p| topic.assignment.get(p))
    else {
        return err(ResponseError::UnknownTopicOrPartition, "no such partition");
    };
    let epoch = a.leader_epoch;
    let stale = a.leader != change.leader || epoch != change.leader_epoch;
    if stale && !planted {
        return err(
            ResponseError::FencedLeaderEpoch,
            format!("leader {} epoch {} is current", a.leader, a.leader_epoch),
        );
    }
    if !same_set(&a.isr, &change.from_isr) && !planted {
        return err(
            ResponseError::InvalidUpdateVersion,
            format!("the in-sync set is {:?}, not {:?}", a.isr, change.from_isr),
        );
    }
    let valid =
        change.isr.contains(&change.leader) && change.isr.iter().all(|n| a.replicas.contains(n));
    if !valid {
        return err(
            ResponseError::InvalidRequest,
            format!("in-sync set {:?} for replicas {:?}", change.isr, a.replicas),
        );
    }
    if let Some(n) = ineligible_joiner(record, change, &a.isr) {
        return err(
            ResponseError::IneligibleReplica,
            format!("replica {n} is fenced or has registered again since its fetches"),
        );
    }
    if a.isr == change.isr {
        return (0, None);
    }
    let at = partition_epoch.map_or(String::new(), |e| format!(" at partition epoch {e}"));
    log::info!(
        "controller: {}-{} in sync {:?} → {:?}{at}",
        topic.name,
        change.partition,
        a.isr,
        change.isr
    );
    push(
        record,
        out,
        isr_record(change, epoch, partition_epoch.and(current)),
    );
    (0, None)
}

/// A member `change` adds to the in-sync set `isr` that may not join: it joins on what its
/// current registration reported, so not fenced and not restarted since.
fn ineligible_joiner(record: &CatalogRecord, change: &IsrChange, isr: &[i32]) -> Option<i32> {
    let registered = |n: &i32| {
        change.joining.iter().any(|(j, incarnation)| {
            j == n
                && record
                    .brokers
                    .iter()
                    .any(|b| b.node_id == *n && b.incarnation == *incarnation && !b.fenced)
        })
    };
    change
        .isr
        .iter()
        .copied()
        .find(|n| !isr.contains(n) && !registered(n))
}

/// The record of an in-sync set change the controller took: at the partition epoch where the
/// ask carried one (level `PARTITION_EPOCHS`), else from its set in its leader epoch.
fn isr_record(
    change: &IsrChange,
    leader_epoch: i32,
    partition_epoch: Option<i32>,
) -> MetadataRecord {
    match partition_epoch {
        Some(partition_epoch) => MetadataRecord::AlterPartition(Box::new(PartitionChange {
            id: change.topic_id,
            partition: change.partition,
            partition_epoch,
            isr: change.isr.clone(),
        })),
        None => MetadataRecord::AlterIsr {
            id: change.topic_id,
            partition: change.partition,
            epoch: leader_epoch,
            from: change.from_isr.clone(),
            isr: change.isr.clone(),
        },
    }
}

/// Applies a change to the working record (so the request's next items see it) and keeps it
/// for the log.
fn push(record: &mut CatalogRecord, out: &mut Vec<MetadataRecord>, change: MetadataRecord) {
    records::apply(record, std::slice::from_ref(&change))
        .expect("the controller's own checks passed");
    out.push(change);
}

/// Persists `record` and installs it on every shard (a single node). Err: the outcome of every
/// change in it.
async fn commit(shard: &Rc<Shard>, record: &CatalogRecord) -> Result<(), Outcome> {
    let config = &shard.config;
    let next = Catalog::from_record(record, config).map_err(|e| {
        log::error!("controller: new catalog is invalid: {e}");
        err(ResponseError::InvalidConfig, e)
    })?;
    Catalog::persist(&config.data_dir, record)
        .await
        .map_err(|e| {
            log::error!("controller: cannot persist the catalog: {e}");
            err(ResponseError::KafkaStorageError, e.to_string())
        })?;
    let next = Arc::new(next);
    for s in install_on_every_shard(shard, next).await {
        log::warn!("controller: shard {s} is stopping; it did not install the new catalog");
    }
    Ok(())
}

fn create_topics(
    shard: &Shard,
    controller: &Controller,
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> Vec<Outcome> {
    let config = &shard.config;
    let mut results = Vec::with_capacity(topics.len());
    for t in topics {
        if let Err(e) = check_new_topic(record, &shard.catalog(), &t) {
            results.push(e);
            continue;
        }
        let partitions = t.partition_count(config.topic_defaults.num_partitions);
        if let Err(e) = bounds::check_new_partitions(shard, record, &t.name, 0, partitions, true) {
            results.push(e);
            continue;
        }
        let placed = if t.assignments.is_empty() {
            place(shard, record, &t.name, t.replication_factor, partitions)
        } else {
            let mut by_index = t.assignments.clone();
            by_index.sort_by_key(|(i, _)| *i);
            let lists: Vec<Vec<i32>> = by_index.into_iter().map(|(_, b)| b).collect();
            place_manually(shard, record, &lists, None)
        };
        let assignment = match placed {
            Ok(a) => a,
            Err(e) => {
                results.push(e);
                continue;
            }
        };
        if !validate_only {
            let configs = with_internal_min_isr(&t.name, t.configs, &assignment);
            let topic = TopicRecord {
                name: t.name.clone(),
                id: controller.ids.borrow_mut().uuid(),
                partitions: partitions as u32,
                configs,
                assignment,
            };
            push(record, out, MetadataRecord::CreateTopic(topic));
            log::info!("creating topic {} with {partitions} partitions", t.name);
        }
        results.push((0, None));
    }
    results
}

/// `__transaction_state` with three replicas or more takes writes only while two are in sync
/// (Kafka's `transaction.state.log.min.isr`, 2): a transaction's commit decision is on two
/// nodes before any client hears of it, so losing the coordinator's node never loses it.
/// Fewer replicas keep the default (1), so that one node lost leaves it writable; a
/// min.insync.replicas the creator named stays.
pub(crate) fn with_internal_min_isr(
    topic: &str,
    mut configs: Vec<(String, String)>,
    assignment: &[catalog::PartitionAssignment],
) -> Vec<(String, String)> {
    const KEY: &str = "min.insync.replicas";
    let replicated = !assignment.is_empty() && assignment.iter().all(|a| a.replicas.len() >= 3);
    if topic == catalog::TXN_STATE_TOPIC && replicated && !configs.iter().any(|(k, _)| k == KEY) {
        configs.push((KEY.to_string(), "2".to_string()));
    }
    configs
}

/// How many replicas a new topic (or new partitions of `topic`) gets for the replication
/// factor asked: -1 is the default, one on a single node, in a cluster
/// `default_replication_factor`, or for the internal topics (`__consumer_offsets`,
/// `__transaction_state`) theirs (`Config::internal_topic_replication_factor`, created only
/// once that many brokers are live). Err: a factor the broker refuses. Both the creation
/// (`place`) and a validate-only CreateTopics' answer use it.
pub fn replication_factor(shard: &Shard, topic: &str, asked: i16) -> Result<usize, Outcome> {
    let config = &shard.config;
    match asked {
        -1 | 1 if !config.is_clustered() => Ok(1),
        _ if !config.is_clustered() => Err(err(
            ResponseError::InvalidReplicationFactor,
            "this broker runs alone and stores one replica: replication factor must be 1",
        )),
        -1 if catalog::is_internal(topic) => Ok(internal_topic_replication_factor(shard, topic)),
        -1 => Ok(config.default_replication_factor.max(0) as usize),
        n if n < 1 => Err(err(
            ResponseError::InvalidReplicationFactor,
            format!("replication factor {n} must be at least 1"),
        )),
        n => Ok(n as usize),
    }
}

/// Replicas for `count` new partitions of `topic`: none on a single node (it holds them all);
/// in a cluster, placed over the live brokers (`placement.rs`), as many per partition as
/// `replication_factor` gives.
fn place(
    shard: &Shard,
    record: &CatalogRecord,
    topic: &str,
    replication_factor: i16,
    count: i32,
) -> Result<Vec<catalog::PartitionAssignment>, Outcome> {
    let factor = self::replication_factor(shard, topic, replication_factor)?;
    if !shard.config.is_clustered() {
        return Ok(Vec::new());
    }
    let mut leaders: std::collections::HashMap<i32, usize> = Default::default();
    for a in record.topics.iter().flat_map(|t| t.assignment.iter()) {
        *leaders.entry(a.leader).or_default() += 1;
    }
    let live: Vec<placement::Candidate> = record
        .brokers
        .iter()
        .filter(|b| !b.fenced)
        .map(|b| placement::Candidate {
            node_id: b.node_id,
            rack: b.rack.clone(),
            leaders: leaders.get(&b.node_id).copied().unwrap_or(0),
        })
        .collect();
    placement::assign(&live, count as usize, factor)
        .map_err(|m| err(ResponseError::InvalidReplicationFactor, m))
}

/// Replicas as a CreateTopics or CreatePartitions request assigned them (Kafka's
/// `validateManualPartitionAssignment`): each partition's brokers non-empty, distinct, as many
/// as every other partition's (and as `factor`, a topic's existing replication), and every one
/// registered. The in-sync set is the unfenced ones, in order; the first leads. On a single
/// node the one broker is this one, and it holds every partition.
fn place_manually(
    shard: &Shard,
    record: &CatalogRecord,
    lists: &[Vec<i32>],
    factor: Option<usize>,
) -> Result<Vec<catalog::PartitionAssignment>, Outcome> {
    let invalid = |m: String| err(ResponseError::InvalidReplicaAssignment, m);
    let factor = factor.or(lists.first().map(Vec::len)).unwrap_or(0);
    let registered = |id: i32| match shard.config.is_clustered() {
        false => id == shard.config.node_id,
        true => record.brokers.iter().any(|b| b.node_id == id),
    };
    let mut out = Vec::with_capacity(lists.len());
    for (i, replicas) in lists.iter().enumerate() {
        let distinct: std::collections::HashSet<_> = replicas.iter().collect();
        if replicas.is_empty() || distinct.len() != replicas.len() {
            return Err(invalid(format!(
                "the assignment of partition {i} must name distinct brokers"
            )));
        }
        if replicas.len() != factor {
            return Err(invalid(format!(
                "the assignment of partition {i} has {} replicas, the others {factor}",
                replicas.len()
            )));
        }
        if let Some(id) = replicas.iter().find(|&&id| !registered(id)) {
            return Err(invalid(format!("broker {id} is not registered")));
        }
        let unfenced = |id: &&i32| {
            record
                .brokers
                .iter()
                .any(|b| b.node_id == **id && !b.fenced)
        };
        let isr: Vec<i32> = replicas.iter().filter(unfenced).copied().collect();
        if shard.config.is_clustered() && isr.is_empty() {
            return Err(invalid(format!("every broker of partition {i} is fenced")));
        }
        out.push(catalog::PartitionAssignment {
            leader: isr.first().copied().unwrap_or(-1),
            leader_epoch: 0,
            replicas: replicas.clone(),
            isr,
            ..Default::default()
        });
    }
    // A single node holds every partition without assignments.
    Ok(if shard.config.is_clustered() {
        out
    } else {
        Vec::new()
    })
}

fn delete_topics(
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    names: Vec<String>,
) -> Vec<Outcome> {
    names
        .into_iter()
        .map(|name| match record.topics.iter().find(|t| t.name == name) {
            Some(t) => {
                let id = t.id;
                push(record, out, MetadataRecord::DeleteTopic { id });
                log::info!("deleting topic {name}");
                (0, None)
            }
            None => err(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ),
        })
        .collect()
}

fn create_partitions(
    shard: &Shard,
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    topics: Vec<NewPartitions>,
    validate_only: bool,
) -> Vec<Outcome> {
    let mut results = Vec::with_capacity(topics.len());
    for NewPartitions {
        name,
        count,
        assignments,
    } in topics
    {
        let Some(t) = record.topics.iter().find(|t| t.name == name) else {
            results.push(err(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
            continue;
        };
        let (id, current) = (t.id, t.partitions as i32);
        // New partitions get as many replicas as the topic's first one has.
        let factor = t.assignment.first().map_or(-1, |a| a.replicas.len() as i16);
        let checked =
            added_partitions(shard, record, &name, (current, count), factor, &assignments);
        match checked {
            Err(e) => results.push(e),
            Ok(added) => {
                if !validate_only {
                    let change = MetadataRecord::CreatePartitions {
                        id,
                        count: count as u32,
                        added,
                    };
                    push(record, out, change);
                    log::info!("topic {name} now has {count} partitions");
                }
                results.push((0, None));
            }
        }
    }
    results
}

/// The assignments of the partitions that take topic `name` from `current` to `count` (placed
/// here, or as the request lists them), checked against the bounds.
fn added_partitions(
    shard: &Shard,
    record: &CatalogRecord,
    name: &str,
    (current, count): (i32, i32),
    factor: i16,
    assignments: &Option<Vec<Vec<i32>>>,
) -> Result<Vec<catalog::PartitionAssignment>, Outcome> {
    if count <= current {
        return Err(err(
            ResponseError::InvalidPartitions,
            format!("topic {name} already has {current} partitions"),
        ));
    }
    if count > catalog::MAX_PARTITIONS {
        return Err(err(
            ResponseError::InvalidPartitions,
            format!("at most {} partitions", catalog::MAX_PARTITIONS),
        ));
    }
    bounds::check_new_partitions(shard, record, name, current, count, false)?;
    match assignments {
        None => place(shard, record, name, factor, count - current),
        Some(lists) if lists.len() as i32 != count - current => Err(err(
            ResponseError::InvalidReplicaAssignment,
            format!(
                "adding {} partitions to {name} takes {} assignments, not {}",
                count - current,
                count - current,
                lists.len()
            ),
        )),
        Some(lists) => {
            let factor = (factor > 0).then_some(factor as usize);
            place_manually(shard, record, lists, factor)
        }
    }
}

fn alter_configs(
    current: &Catalog,
    record: &mut CatalogRecord,
    out: &mut Vec<MetadataRecord>,
    topics: Vec<(String, ConfigChange)>,
    validate_only: bool,
) -> Vec<Outcome> {
    let mut results = Vec::with_capacity(topics.len());
    for (name, change) in topics {
        let (Some(t), Some(meta)) = (
            record.topics.iter().find(|t| t.name == name),
            current.topics.get(&name),
        ) else {
            results.push(err(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
            continue;
        };
        let overrides = match change {
            ConfigChange::Replace(overrides) => Ok(overrides),
            ConfigChange::Incremental(edits) => {
                catalog::edit_overrides(&t.configs, &meta.config, &edits)
            }
        };
        let checked = overrides.and_then(|o| current.resolve_topic(&o).map(|_| o));
        match checked {
            Ok(overrides) => {
                if !validate_only && overrides != t.configs {
                    log::info!("topic {name}: configs now {overrides:?}");
                    let change = MetadataRecord::SetTopicConfigs {
                        id: t.id,
                        configs: overrides,
                    };
                    push(record, out, change);
                }
                results.push((0, None));
            }
            Err(m) => results.push(err(ResponseError::InvalidConfig, m)),
        }
    }
    results
}

fn check_new_topic(
    record: &CatalogRecord,
    current: &Catalog,
    t: &NewTopic,
) -> Result<TopicConfig, Outcome> {
    catalog::validate_topic_name(&t.name)
        .map_err(|m| err(ResponseError::InvalidTopicException, m))?;
    if record.topics.iter().any(|x| x.name == t.name) {
        return Err(err(
            ResponseError::TopicAlreadyExists,
            format!("topic {} already exists", t.name),
        ));
    }
    // Kafka's rule: '.' and '_' collide in metric names, so two topics may not differ only there.
    let collides = |a: &str| a.replace('.', "_") == t.name.replace('.', "_");
    if let Some(x) = record.topics.iter().find(|x| collides(&x.name)) {
        return Err(err(
            ResponseError::InvalidTopicException,
            format!("topic {} collides with existing topic {}", t.name, x.name),
        ));
    }
    if !t.assignments.is_empty() {
        check_manual_indexes(t)?;
    } else if t.partitions == 0 || t.partitions < -1 || t.partitions > catalog::MAX_PARTITIONS {
        return Err(err(
            ResponseError::InvalidPartitions,
            format!("partitions must be in 1..={}", catalog::MAX_PARTITIONS),
        ));
    }
    current
        .resolve_topic(&t.configs)
        .map_err(|m| err(ResponseError::InvalidConfig, m))
}

/// A manual assignment names neither a partition count nor a replication factor, and its
/// partitions are 0, 1, 2, ... each once (Kafka's CreateTopics rules).
fn check_manual_indexes(t: &NewTopic) -> Result<(), Outcome> {
    if t.partitions != -1 || t.replication_factor != -1 {
        return Err(err(
            ResponseError::InvalidRequest,
            "a manual assignment leaves the partition count and replication factor at -1",
        ));
    }
    let mut indexes: Vec<i32> = t.assignments.iter().map(|(i, _)| *i).collect();
    indexes.sort_unstable();
    if indexes.iter().enumerate().any(|(n, &i)| i != n as i32) {
        return Err(err(
            ResponseError::InvalidReplicaAssignment,
            "the assigned partitions must be 0, 1, 2, ... each once",
        ));
    }
    Ok(())
}

/// Hands out the next producer id (InitProducerId) from this node's block, reserving a new
/// block when it is used up: on a single node by persisting the block's end, in a cluster from
/// the active controller (a metadata log entry).
async fn next_producer_id(controllers: &Rc<Controllers>) -> Result<i64, i16> {
    let shard = &controllers.shard;
    let controller = here(controllers);
    let id = controller.next_producer_id.get();
    if id >= controller.producer_id_block_end.get() {
        let block = match &controller.cluster {
            None => reserve_producer_ids(controllers).await,
            Some(c) => match c.await_controller(shard.clock()).await {
                Ok(true) => reserve_producer_ids(controllers).await,
                Ok(false) => c
                    .call_controller(messages::PRODUCER_IDS, &[])
                    .await
                    .and_then(|b| {
                        messages::decode(&b).map_err(|m| err(ResponseError::UnknownServerError, m))
                    }),
                Err(e) => Err(e),
            },
        }
        .map_err(|(code, m)| {
            log::warn!("controller: no producer id block: {code} {m:?}");
            code
        })?;
        // Another caller may have taken a block meanwhile; the newer block wins, ids stay
        // unique either way.
        controller.next_producer_id.set(block.first);
        controller.producer_id_block_end.set(block.end);
    }
    let id = controller.next_producer_id.get();
    controller.next_producer_id.set(id + 1);
    Ok(id)
}

/// Reserves the next block of producer ids on this node's controller (the single node's, or
/// the active one's).
async fn reserve_producer_ids(
    controllers: &Rc<Controllers>,
) -> Result<messages::ProducerIdBlock, Outcome> {
    let shard = &controllers.shard;
    let controller = here(controllers);
    let _permit = controller.lock().await;
    let first = match &controller.cluster {
        Some(c) => c.applied.read(|i| i.producer_id_block_end),
        None => shard.catalog().producer_id_block_end,
    };
    let end = first + PRODUCER_ID_BLOCK;
    let block = messages::ProducerIdBlock { first, end };
    if let Some(c) = &controller.cluster {
        c.commit(vec![MetadataRecord::ProducerIdBlock { end }])
            .await?;
        return Ok(block);
    }
    let mut record = shard.catalog().to_record();
    record.producer_id_block_end = end;
    Catalog::persist(&shard.config.data_dir, &record)
        .await
        .map_err(|e| {
            log::error!("controller: cannot persist a producer id block: {e}");
            err(ResponseError::KafkaStorageError, e.to_string())
        })?;
    let next = Catalog::from_record(&record, &shard.config)
        .map_err(|m| err(ResponseError::UnknownServerError, m))?;
    // Only the controller reads the block end; other shards keep their snapshot.
    shard.set_catalog(Arc::new(next));
    Ok(block)
}
