//! One simulated node: the production controller voter (`RaftNode` over `RaftStore` on a
//! `SimDisk`, applying to `Applied`) and, around it, what the broker's `controller::cluster`
//! tasks do, step by step instead of as glommio tasks: the active controller's duties (forming
//! the cluster, broker sessions and fencing with `liveness::Sessions`), heartbeats, and
//! AlterPartition from the partitions this node leads, executed with the production
//! `controller::replication_op`.

use super::batch::Stamp;
use super::replication::Tp;
use crate::config::security::DEFAULT_LISTENER_NAME;
use crate::config::Config;
use crate::controller::applied::Applied;
use crate::controller::liveness::{Decision, Sessions};
use crate::controller::raft_node::{Handled, RaftNode};
use crate::controller::raft_store::RaftStore;
use crate::controller::records::{self, MetadataRecord};
use crate::controller::{quorum, ControllerOp};
use crate::partition::commit::IsrRequest;
use crate::storage::catalog::{BrokerRecord, CatalogRecord, EndpointRecord};
use crate::storage::disk::Disk;
use raft::prelude::Message;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

/// What nodes send each other over the simulated network.
#[derive(Clone, Debug)]
pub enum Wire {
    Raft(Message),
    /// A broker's heartbeat to the node it takes for the active controller.
    Heartbeat {
        node_id: i32,
        incarnation: u64,
        previous_incarnation: u64,
    },
    /// The controller's answer: the heartbeat was taken (the broker then counts as
    /// registered once its registration applies).
    HeartbeatTaken,
    /// A partition leader's in-sync set change (one sending of its ask), to the active
    /// controller.
    AlterPartition(Tp, IsrRequest),
    /// The controller's refusal of that sending for good, to the leader.
    IsrRefused(Tp, IsrRequest),
    /// A producer's batch of `payload` (1 to 3 records) to the partition's leader; an
    /// idempotent producer's carries its stamp and the producer to answer.
    Produce {
        tp: Tp,
        payload: u64,
        acks_all: bool,
        stamp: Option<Stamp>,
        producer: Option<usize>,
    },
    /// A consumer's fetch from `offset`.
    Consume {
        tp: Tp,
        offset: i64,
    },
    /// The group client's OffsetCommit of `offset` for `tp`, to the coordinator, as a member
    /// (its id and generation) or a simple consumer.
    OffsetCommit {
        tp: Tp,
        offset: i64,
        member: Option<(String, i32)>,
    },
    /// The group member's JoinGroup, SyncGroup or Heartbeat.
    Member(super::members::MemberRequest),
    /// The group client's OffsetFetch of `tp`, asked once `floor` was acknowledged.
    OffsetFetch {
        tp: Tp,
        floor: i64,
    },
    /// A follower's fetch from its synced end.
    Fetch {
        tp: Tp,
        epoch: i32,
        offset: i64,
    },
    /// The leader's batches from there and its high watermark, or why not.
    FetchReply {
        tp: Tp,
        epoch: i32,
        answer: super::replica::FetchAnswer,
    },
    /// OffsetsForLeaderEpoch for the follower's newest epoch.
    EpochQuery {
        tp: Tp,
        epoch: i32,
        latest: i32,
    },
    /// The answer names the query's `latest`, as a TCP response belongs to its request.
    EpochAnswer {
        tp: Tp,
        epoch: i32,
        latest: i32,
        answer: Result<(i32, i64), String>,
    },
    /// The transactional producer's request `request` to the coordinator in its metadata.
    Txn {
        request: u64,
        op: super::txns::TxnOp,
    },
    /// A partition leader's check, with the coordinator in its metadata, that the producer's
    /// transaction holds `partition` before it writes the producer's batch (KIP-890 part 1,
    /// `kafka::produce::verify_transactional`).
    VerifyTxn {
        tp: Tp,
        partition: crate::txn::state::TxnPartition,
        payload: u64,
        stamp: Stamp,
    },
    /// The coordinator's answer: the batch may be written, or why not.
    TxnVerified {
        tp: Tp,
        payload: u64,
        stamp: Stamp,
        result: Result<(), String>,
    },
    /// A transaction coordinator's marker, to the partition's leader (WriteTxnMarkers).
    WriteMarker(super::txns::MarkerRequest),
    /// The leader's answer: the marker is committed, or why not.
    MarkerWritten {
        marker: super::txns::MarkerRequest,
        result: Result<(), String>,
    },
    /// A read_committed consumer's fetch from `offset`.
    ConsumeCommitted {
        tp: Tp,
        offset: i64,
    },
}

/// The incarnation a node's data dir last registered with (the broker's `__meta/incarnation`).
const INCARNATION_FILE: &str = "/incarnation";

pub struct SimNode {
    pub id: i32,
    pub incarnation: u64,
    previous_incarnation: u64,
    pub raft: RaftNode,
    pub applied: Rc<Applied>,
    config: Arc<Config>,
    disk: Rc<dyn Disk>,
    sessions: Sessions,
    led_term: u64,
    next_proposal: u64,
    /// This node's proposals not yet applied or dropped: id → what they carry (for the trace).
    pub pending: BTreeMap<u64, String>,
    /// Leaders' asks (asker, partition, sending) waiting for the controller's turn: production's
    /// `execute_here` decides one change at a time, each once the earlier ones settled.
    pub waiting_asks: VecDeque<(usize, Tp, IsrRequest)>,
}

/// Bound on `SimNode::waiting_asks`; an ask past it is dropped (its leader sends it again).
pub const WAITING_ASKS_MAX: usize = 1024;

impl SimNode {
    /// Starts the node on what its disk holds (a restart recovers like the broker's `recover`).
    pub fn open(
        config: Arc<Config>,
        disk: Rc<dyn Disk>,
        incarnation: u64,
    ) -> anyhow::Result<SimNode> {
        let voters = config.voter_list()?;
        let ids = voters
            .iter()
            .map(|v| crate::controller::raft_node::raft_id(v.id));
        let store = RaftStore::open(disk.clone(), &config.data_dir, ids.collect())?;
        let image = quorum::recover_from(&store)?;
        let applied = Rc::new(Applied::new(config.clone(), image));
        let every = config.cluster.snapshot_after_entries;
        let raft = RaftNode::open(config.node_id, store, applied.clone(), every)?;
        let previous_incarnation = disk
            .read(std::path::Path::new(INCARNATION_FILE))?
            .and_then(|b| Some(u64::from_be_bytes(b.get(..8)?.try_into().ok()?)))
            .unwrap_or(0);
        Ok(SimNode {
            id: config.node_id,
            incarnation,
            previous_incarnation,
            raft,
            applied,
            config,
            disk,
            sessions: Sessions::default(),
            led_term: 0,
            next_proposal: 1,
            pending: BTreeMap::new(),
            waiting_asks: VecDeque::new(),
        })
    }

    /// Proposes records as the controller (dropped when this node does not lead).
    pub fn propose(&mut self, recs: Vec<MetadataRecord>, what: String) {
        if !self.raft.status().ready || recs.is_empty() {
            return;
        }
        let id = self.next_proposal;
        self.next_proposal += 1;
        if self.raft.propose(id, records::encode(&recs)).is_ok() {
            self.pending.insert(id, what);
        }
    }

    /// Handles one Ready; Err when the Raft state could not be made durable (the broker
    /// stops then: the world crashes this node). Ok: what this node's applied proposals
    /// carried, with their results.
    pub fn handle_ready(
        &mut self,
        send: &mut dyn FnMut(Vec<Message>),
    ) -> anyhow::Result<Vec<(String, Result<u64, String>)>> {
        let Handled {
            proposals,
            lost_leadership,
        } = self.raft.handle_ready(send)?;
        let applied = proposals
            .into_iter()
            .filter_map(|(id, result)| Some((self.pending.remove(&id)?, result)))
            .collect();
        if lost_leadership {
            self.pending.clear();
        }
        Ok(applied)
    }

    /// The active controller's periodic pass (`cluster::controller_duties`): form the cluster,
    /// take over broker sessions in a new term, fence brokers whose sessions expired, and
    /// complete reassignments.
    pub fn duties(&mut self, now_ms: u64, cluster_id: &str) {
        let status = self.raft.status();
        // The broker's duties task waits for each change it proposes to commit.
        if !status.ready || !self.pending.is_empty() {
            return;
        }
        if self.led_term != status.term {
            self.led_term = status.term;
            let sessions = &mut self.sessions;
            self.applied
                .read(|i| sessions.take_over(&i.brokers, now_ms));
        }
        if self.applied.cluster_id().is_empty() {
            let records = crate::controller::records::bootstrap(cluster_id.to_string());
            self.propose(records, "form the cluster".into());
            return;
        }
        let timeout_ms = self.config.cluster.broker_session_timeout_ms;
        let sessions = &mut self.sessions;
        let expired = self
            .applied
            .read(|i| sessions.expired(&i.brokers, now_ms, timeout_ms));
        let fences: Vec<MetadataRecord> = expired
            .into_iter()
            .map(|(node_id, incarnation)| MetadataRecord::FenceBroker {
                node_id,
                incarnation,
            })
            .collect();
        if !fences.is_empty() {
            let what = format!("fence {fences:?}");
            self.propose(fences, what);
        }
        self.execute(ControllerOp::CompleteReassignments);
    }

    /// A heartbeat on the active controller (`Cluster::on_heartbeat`). Returns whether it was
    /// taken.
    pub fn on_heartbeat(
        &mut self,
        node_id: i32,
        incarnation: u64,
        previous: u64,
        now_ms: u64,
    ) -> bool {
        if !self.raft.status().ready {
            return false;
        }
        let existing = self
            .applied
            .read(|i| i.brokers.iter().find(|b| b.node_id == node_id).cloned());
        let timeout_ms = self.config.cluster.broker_session_timeout_ms;
        let decision = self.sessions.heartbeat(
            existing.as_ref(),
            node_id,
            incarnation,
            previous,
            now_ms,
            timeout_ms,
        );
        match decision {
            Decision::Duplicate(_) => return false,
            Decision::Register => {
                let listener = EndpointRecord {
                    name: DEFAULT_LISTENER_NAME.into(),
                    host: "127.0.0.1".into(),
                    port: 9092 + node_id,
                    security_protocol: 0,
                };
                let rec = MetadataRecord::RegisterBroker(Box::new(BrokerRecord {
                    node_id,
                    incarnation,
                    listeners: vec![listener],
                    rack: None,
                    fenced: false,
                }));
                self.propose(vec![rec], format!("register broker {node_id}"));
            }
            Decision::Renew => {}
        }
        true
    }

    /// The heartbeat this node sends, and to whom: the controller it knows, else `fallback`.
    pub fn heartbeat(&self, fallback: i32) -> (i32, Wire) {
        let known = self.applied.controller_id();
        let to = if known >= 0 { known } else { fallback };
        let hb = Wire::Heartbeat {
            node_id: self.id,
            incarnation: self.incarnation,
            previous_incarnation: self.previous_incarnation,
        };
        (to, hb)
    }

    /// The controller took this node's heartbeat: once its registration applies, its data dir
    /// remembers the incarnation (`write_incarnation`).
    pub fn on_heartbeat_taken(&mut self) {
        let registered = self.applied.read(|i| {
            i.brokers
                .iter()
                .any(|b| b.node_id == self.id && b.incarnation == self.incarnation)
        });
        if registered && self.previous_incarnation != self.incarnation {
            let path = std::path::Path::new(INCARNATION_FILE);
            if self
                .disk
                .replace(path, &self.incarnation.to_be_bytes())
                .is_ok()
            {
                self.previous_incarnation = self.incarnation;
            }
        }
    }

    /// Whether this node may decide a change now: it is the active controller and every
    /// change it proposed before has applied or will not (`Cluster::await_settled`).
    pub fn settled(&self) -> bool {
        self.raft.status().ready && self.pending.is_empty()
    }

    /// Executes a replication operation as the active controller, from its applied catalog
    /// (`controller::execute_here`); it decides nothing until `settled`.
    pub fn execute(&mut self, op: ControllerOp) -> Vec<crate::controller::Outcome> {
        if !self.settled() {
            return Vec::new();
        }
        let what = describe_op(&op);
        let mut record: CatalogRecord = self.applied.image();
        let mut out = Vec::new();
        let outcomes = crate::controller::replication_op(&mut record, &mut out, op);
        self.propose(out, what);
        outcomes
    }
}

impl SimNode {
    /// Creates a topic as the controller, placed over the live brokers like
    /// `controller::create_topics` (replication factor 3, or every broker when fewer).
    /// Returns whether it was proposed.
    pub fn create_topic(
        &mut self,
        name: &str,
        id: [u8; 16],
        partitions: u32,
        unclean: bool,
    ) -> bool {
        use crate::controller::placement::{assign, Candidate};
        let live: Vec<Candidate> = self.applied.read(|c| {
            c.brokers
                .iter()
                .filter(|b| !b.fenced)
                .map(|b| Candidate {
                    node_id: b.node_id,
                    rack: None,
                    leaders: 0,
                })
                .collect()
        });
        if !self.raft.status().ready || live.len() < 2 {
            return false;
        }
        let Ok(assignment) = assign(&live, partitions as usize, live.len().min(3)) else {
            return false;
        };
        let configs = if unclean {
            vec![(
                "unclean.leader.election.enable".to_string(),
                "true".to_string(),
            )]
        } else {
            Vec::new()
        };
        // `__transaction_state` takes min.insync.replicas 2 where it has three replicas.
        let configs = crate::controller::with_internal_min_isr(name, configs, &assignment);
        let topic = crate::storage::catalog::TopicRecord {
            name: name.to_string(),
            id,
            partitions,
            configs,
            assignment,
        };
        self.propose(
            vec![MetadataRecord::CreateTopic(topic)],
            format!(
                "create topic {name} ({:02x}{:02x}, unclean {unclean})",
                id[0], id[1]
            ),
        );
        true
    }
}

/// An operation as the trace shows it.
fn describe_op(op: &ControllerOp) -> String {
    match op {
        ControllerOp::AlterPartitionAt(at) => format!(
            "{} at partition epoch {}",
            describe_op(&ControllerOp::AlterPartition(at.0.clone())),
            at.1
        ),
        ControllerOp::AlterPartition(c) => format!(
            "AlterPartition {:02x}{:02x}-{} by leader {} epoch {}: isr {:?} → {:?}",
            c.topic_id[0], c.topic_id[1], c.partition, c.leader, c.leader_epoch, c.from_isr, c.isr
        ),
        other => format!("{other:?}"),
    }
}
