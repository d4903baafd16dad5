//! A node of a cluster, on the controller shard: its part in the controller quorum (voters),
//! its broker registration and heartbeats, the inter-node RPC it answers, and forwarding
//! metadata writes to the active controller.
//!
//! - Voters run the Raft quorum (`quorum.rs`) and apply the metadata log themselves; a broker
//!   that is not a voter is sent the catalog in its heartbeat replies whenever it is behind.
//! - Every node heartbeats the active controller every `broker_heartbeat_interval_ms`. The
//!   controller registers new incarnations (a log record), renews sessions, and fences brokers
//!   whose session expired (`liveness.rs`).
//! - A node refuses, and stops with a message naming why, when the controller says its node
//!   id is held by another live process (still so after two session timeouts: a controller
//!   taking over gives every registered broker a fresh session, so this node's own earlier
//!   incarnation is refused for up to one, until it expires) or its cluster id differs, or
//!   when the quorum's leader speaks for another cluster than the one its data dir belongs to.

use super::applied::Applied;
use super::features;
use super::liveness::{Decision, Sessions};
use super::messages::{
    self, BrokerHeartbeat, Failure, Forward, HeartbeatReply, Outcomes, SupportedLevels,
};
use super::quorum::Quorum;
use super::records::{self, MetadataRecord};
use super::{ControllerOp, Controllers, Outcome};
use crate::clock::Clock;
use crate::config::{Config, Voter};
use crate::rpc::{self, Peer};
use crate::security::node::NodeSecret;
use crate::storage::catalog::BrokerRecord;
use futures::future::LocalBoxFuture;
use kafka_protocol::ResponseError;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// How often the active controller looks for expired broker sessions.
const FENCE_CHECK_MS: u64 = 250;
/// How often a waiting metadata write checks for a controller again.
const CONTROLLER_POLL_MS: u64 = 50;
/// The file in `data_dir/__meta` that remembers the incarnation this node last registered.
const INCARNATION_FILE: &str = "incarnation";

pub struct Cluster {
    pub config: Arc<Config>,
    pub applied: Rc<Applied>,
    pub quorum: Option<Rc<Quorum>>,
    /// This node's side as a broker: its registration and heartbeats.
    broker: BrokerSide,
    voters: Vec<Voter>,
    peers: HashMap<i32, Rc<Peer>>,
    sessions: RefCell<Sessions>,
    /// Registrations this controller is writing (one at a time per node id).
    registering: RefCell<HashSet<i32>>,
    /// The term in which this node last took over as controller.
    led_term: Cell<u64>,
    /// On the active controller: the feature levels each broker runs (`features`).
    pub supported: RefCell<features::SupportedRanges>,
}

/// A node's side as a broker of the cluster: who it is to the controller, what it last heard
/// from it, and what it last told it.
struct BrokerSide {
    /// This run's incarnation, and the one before it (0: none), as the registration says.
    incarnation: u64,
    previous_incarnation: u64,
    /// The active controller as the last heartbeat reply named it (brokers that are not
    /// voters have no other way to know).
    controller_hint: Cell<i32>,
    registered: Cell<bool>,
    /// Set by a controlled shutdown: heartbeats stop, so the fenced registration stays fenced.
    releasing: Cell<bool>,
    /// When the controller first refused this node's node id as held by a live broker, since
    /// the last heartbeat it answered (monotonic ms).
    refused_since_ms: Cell<Option<u64>>,
    /// The controller this node last told its levels to (-1: none yet), and when (monotonic
    /// ms).
    told_levels: Cell<(i32, u64)>,
}

/// A broker tells the same controller its levels again after this: a controller that
/// restarted (the same node id, its ranges gone with its memory) hears them within it.
const RETELL_LEVELS_MS: u64 = 10_000;

impl Cluster {
    pub fn new(
        config: Arc<Config>,
        applied: Rc<Applied>,
        quorum: Option<Rc<Quorum>>,
    ) -> anyhow::Result<Cluster> {
        let voters = config.voter_list()?;
        let peers = voters
            .iter()
            .map(|v| {
                (
                    v.id,
                    Rc::new(Peer::new(v.rpc.clone(), NodeSecret::of(&config))),
                )
            })
            .collect();
        let previous_incarnation = read_incarnation(&config);
        let incarnation = loop {
            let id = u64::from_be_bytes(uuid::Uuid::new_v4().as_bytes()[..8].try_into()?);
            if id != 0 && id != previous_incarnation {
                break id;
            }
        };
        applied.set_incarnation(incarnation);
        Ok(Cluster {
            config,
            applied,
            quorum,
            broker: BrokerSide {
                incarnation,
                previous_incarnation,
                controller_hint: Cell::new(-1),
                registered: Cell::new(false),
                releasing: Cell::new(false),
                refused_since_ms: Cell::new(None),
                told_levels: Cell::new((-1, 0)),
            },
            voters,
            peers,
            sessions: RefCell::new(Sessions::default()),
            registering: RefCell::new(HashSet::new()),
            led_term: Cell::new(0),
            supported: RefCell::new(features::SupportedRanges::default()),
        })
    }

    /// The active controller's node id, -1 when unknown.
    pub fn controller_id(&self) -> i32 {
        match &self.quorum {
            Some(q) => q.status().leader_id,
            None => self.broker.controller_hint.get(),
        }
    }

    /// Whether this node is the active controller with a current catalog.
    pub fn is_active(&self) -> bool {
        self.quorum.as_ref().is_some_and(|q| q.status().ready)
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.cluster.metadata_write_timeout_ms)
    }

    fn failure(&self, code: ResponseError, message: impl Into<String>) -> (u8, Vec<u8>) {
        self.failed((code.code(), Some(message.into())))
    }

    /// A call's failure reply from an operation's outcome, naming the active controller.
    fn failed(&self, (code, message): Outcome) -> (u8, Vec<u8>) {
        let f = Failure {
            code,
            message: message.unwrap_or_default(),
            controller_id: self.controller_id(),
        };
        (messages::FAILURE, messages::encode(&f))
    }

    /// Proposes records and waits until they are applied and installed here. Err: the error
    /// code every item of the request gets.
    pub async fn commit(&self, recs: Vec<MetadataRecord>) -> Result<(), Outcome> {
        let quorum = self.quorum.as_ref().ok_or_else(|| not_controller(-1))?;
        let propose = quorum.propose(records::encode(&recs));
        let generation = match rpc::within(self.timeout(), propose).await {
            None => {
                return Err((
                    ResponseError::RequestTimedOut.code(),
                    Some("the change did not commit in time (is a quorum of voters up?)".into()),
                ))
            }
            Some(Err(why)) => return Err((ResponseError::NotController.code(), Some(why))),
            Some(Ok(g)) => g,
        };
        // Answered once this node serves the change; others learn it within a heartbeat.
        self.applied
            .wait_installed(generation, self.timeout())
            .await;
        Ok(())
    }

    /// Waits (bounded by the write timeout, on `clock`) until this node's proposals have
    /// settled (`Quorum::settled`). A change whose commit timed out may still apply; one
    /// decided before it does would not see it (the simulator, seed 61843: a leader's ask
    /// refused for good while an earlier sending of it could still apply).
    pub async fn await_settled(&self, clock: &dyn Clock) -> Result<(), Outcome> {
        let deadline_ms = clock.monotonic_ms() + self.config.cluster.metadata_write_timeout_ms;
        while !self.quorum.as_ref().is_none_or(|q| q.settled()) {
            if clock.monotonic_ms() >= deadline_ms {
                return Err((
                    ResponseError::RequestTimedOut.code(),
                    Some("an earlier change has not committed (is a quorum of voters up?)".into()),
                ));
            }
            glommio::timer::sleep(Duration::from_millis(CONTROLLER_POLL_MS)).await;
        }
        Ok(())
    }

    /// Waits (bounded by the write timeout, on `clock`) for an active controller: Ok(true)
    /// when it is this node, Ok(false) when it is another one (its id in `controller_id()`).
    pub async fn await_controller(&self, clock: &dyn Clock) -> Result<bool, Outcome> {
        let deadline_ms = clock.monotonic_ms() + self.config.cluster.metadata_write_timeout_ms;
        loop {
            if self.is_active() {
                return Ok(true);
            }
            let id = self.controller_id();
            let leading_unready = self.quorum.as_ref().is_some_and(|q| q.status().leader);
            if id >= 0 && id != self.config.node_id && !leading_unready {
                return Ok(false);
            }
            if clock.monotonic_ms() >= deadline_ms {
                return Err((
                    ResponseError::RequestTimedOut.code(),
                    Some("no active controller (is a quorum of voters up?)".into()),
                ));
            }
            glommio::timer::sleep(Duration::from_millis(CONTROLLER_POLL_MS)).await;
        }
    }

    /// Sends a call to the active controller (another node); Err(outcome) when it fails.
    pub async fn call_controller(&self, kind: u8, payload: &[u8]) -> Result<Vec<u8>, Outcome> {
        let id = self.controller_id();
        let peer = self.peer_of(id).ok_or_else(|| not_controller(id))?;
        match peer.call(kind, payload, self.timeout()).await {
            Ok((messages::REPLY, body)) => Ok(body),
            Ok((messages::FAILURE, body)) => {
                let f: Failure = messages::decode(&body).map_err(|m| (unknown(), Some(m)))?;
                if !self.is_voter() && f.controller_id >= 0 {
                    self.broker.controller_hint.set(f.controller_id);
                }
                Err((f.code, Some(f.message)))
            }
            Ok((kind, _)) => Err((unknown(), Some(format!("unexpected reply kind {kind}")))),
            Err(e) => {
                if !self.is_voter() {
                    self.broker.controller_hint.set(-1);
                }
                Err((
                    ResponseError::RequestTimedOut.code(),
                    Some(format!("controller {id} at {}: {e}", peer.addr)),
                ))
            }
        }
    }

    fn is_voter(&self) -> bool {
        self.quorum.is_some()
    }

    /// The RPC peer of node `id` (voters only: the controller is always one).
    fn peer_of(&self, id: i32) -> Option<Rc<Peer>> {
        self.peers.get(&id).cloned()
    }

    /// The handler the RPC server calls for every incoming frame.
    pub fn handler(self: &Rc<Self>, controllers: &Rc<Controllers>) -> rpc::Handler {
        let (cluster, controllers) = (self.clone(), controllers.clone());
        Rc::new(move |kind, payload| cluster.clone().on_frame(controllers.clone(), kind, payload))
    }

    fn on_frame(
        self: Rc<Self>,
        controllers: Rc<Controllers>,
        kind: u8,
        payload: Vec<u8>,
    ) -> Option<LocalBoxFuture<'static, (u8, Vec<u8>)>> {
        if kind == messages::RAFT {
            self.on_raft(&payload);
            return None;
        }
        Some(Box::pin(async move {
            if !self.is_active() {
                return self.failure(ResponseError::NotController, "not the active controller");
            }
            match kind {
                messages::FORWARD => match messages::decode::<Forward>(&payload) {
                    Ok(f) => {
                        let outcomes = super::execute(&controllers, f.op).await;
                        (messages::REPLY, messages::encode(&Outcomes(outcomes)))
                    }
                    Err(m) => self.failure(ResponseError::InvalidRequest, m),
                },
                messages::HEARTBEAT => match messages::decode::<BrokerHeartbeat>(&payload) {
                    Ok(hb) => self.on_heartbeat(&controllers, hb).await,
                    Err(m) => self.failure(ResponseError::InvalidRequest, m),
                },
                messages::FEATURES => match messages::decode::<SupportedLevels>(&payload) {
                    Ok(l) => {
                        self.note_levels(&l);
                        (messages::REPLY, Vec::new())
                    }
                    Err(m) => self.failure(ResponseError::InvalidRequest, m),
                },
                messages::QUORUM => match super::local_quorum_view(&controllers) {
                    Some(view) => (messages::REPLY, messages::encode(&view)),
                    None => self.failure(ResponseError::NotController, "not the quorum's leader"),
                },
                messages::PRODUCER_IDS => match super::reserve_producer_ids(&controllers).await {
                    Ok(block) => (messages::REPLY, messages::encode(&block)),
                    Err(outcome) => self.failed(outcome),
                },
                other => self.failure(
                    ResponseError::InvalidRequest,
                    format!("unknown kind {other}"),
                ),
            }
        }))
    }

    fn on_raft(&self, payload: &[u8]) {
        let Some(quorum) = &self.quorum else {
            return;
        };
        let envelope = match messages::decode::<messages::RaftEnvelope>(payload) {
            Ok(e) => e,
            Err(m) => {
                log::warn!("controller: dropped a Raft message: {m}");
                return;
            }
        };
        let mine = self.applied.cluster_id();
        if !mine.is_empty() && !envelope.cluster_id.is_empty() && envelope.cluster_id != mine {
            if envelope.from_leader {
                fatal(&format!(
                    "this node's data dir ({}) belongs to cluster {mine}, but the controller quorum's leader is of cluster {}; refusing to join it",
                    self.config.data_dir.display(),
                    envelope.cluster_id
                ));
            }
            log::warn!(
                "controller: dropped a Raft message from a node of cluster {} (this is cluster {mine})",
                envelope.cluster_id
            );
            return;
        }
        quorum.receive(envelope);
    }

    async fn on_heartbeat(
        &self,
        controllers: &Rc<Controllers>,
        hb: BrokerHeartbeat,
    ) -> (u8, Vec<u8>) {
        let shard = &controllers.shard;
        let cluster_id = self.applied.cluster_id();
        if !hb.cluster_id.is_empty() && hb.cluster_id != cluster_id {
            return self.failure(
                ResponseError::InconsistentClusterId,
                format!(
                    "node {} belongs to cluster {}, this is cluster {cluster_id}",
                    hb.node_id, hb.cluster_id
                ),
            );
        }
        let existing = self
            .applied
            .read(|i| i.brokers.iter().find(|b| b.node_id == hb.node_id).cloned());
        let now_ms = shard.clock().monotonic_ms();
        let timeout_ms = self.config.cluster.broker_session_timeout_ms;
        let decision = self.sessions.borrow_mut().heartbeat(
            existing.as_ref(),
            hb.node_id,
            hb.incarnation,
            hb.previous_incarnation,
            now_ms,
            timeout_ms,
        );
        match decision {
            Decision::Duplicate(m) => {
                return self.failure(ResponseError::DuplicateBrokerRegistration, m)
            }
            Decision::Register => {
                if let Err(outcome) = self.register(&hb).await {
                    return self.failed(outcome);
                }
            }
            Decision::Renew => {}
        }
        let version = self.quorum.as_ref().map_or(0, |q| q.status().applied);
        let catalog = if !hb.voter && hb.metadata_version < version {
            self.applied
                .read(crate::storage::catalog::encode)
                .ok()
                .map(|bytes| (version, bytes))
        } else {
            None
        };
        let reply = HeartbeatReply {
            controller_id: self.config.node_id,
            catalog,
        };
        (messages::REPLY, messages::encode(&reply))
    }

    async fn register(&self, hb: &BrokerHeartbeat) -> Result<(), Outcome> {
        if !self.registering.borrow_mut().insert(hb.node_id) {
            return Ok(());
        }
        log::info!(
            "controller: registering broker {} at {} (incarnation {:x})",
            hb.node_id,
            crate::storage::catalog::describe_endpoints(&hb.listeners),
            hb.incarnation
        );
        let record = MetadataRecord::RegisterBroker(Box::new(BrokerRecord {
            node_id: hb.node_id,
            incarnation: hb.incarnation,
            listeners: hb.listeners.clone(),
            rack: hb.rack.clone(),
            fenced: false,
        }));
        let result = self.commit(vec![record]).await;
        self.registering.borrow_mut().remove(&hb.node_id);
        result
    }

    fn heartbeat(&self) -> BrokerHeartbeat {
        BrokerHeartbeat {
            cluster_id: self.applied.cluster_id(),
            node_id: self.config.node_id,
            incarnation: self.broker.incarnation,
            previous_incarnation: self.broker.previous_incarnation,
            listeners: crate::storage::catalog::advertised_endpoints(&self.config),
            rack: self.config.rack.clone(),
            metadata_version: self.applied.version(),
            voter: self.is_voter(),
        }
    }

    /// Sends one heartbeat to the active controller (or, not knowing it, to a voter in turn).
    async fn send_heartbeat(self: &Rc<Self>, controllers: &Rc<Controllers>, turn: usize) {
        let hb = self.heartbeat();
        let mut target = self.controller_id();
        if target < 0 {
            target = self.voters[turn % self.voters.len()].id;
        }
        let reply = if target == self.config.node_id {
            if !self.is_active() {
                return;
            }
            self.on_heartbeat(controllers, hb).await
        } else {
            let Some(peer) = self.peer_of(target) else {
                return;
            };
            let limit = Duration::from_millis(self.config.cluster.broker_heartbeat_interval_ms * 2);
            match peer
                .call(messages::HEARTBEAT, &messages::encode(&hb), limit)
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    log::debug!("heartbeat to node {target}: {e}");
                    if !self.is_voter() {
                        self.broker.controller_hint.set(-1);
                    }
                    return;
                }
            }
        };
        self.on_heartbeat_reply(controllers, target, reply).await;
    }

    async fn on_heartbeat_reply(
        &self,
        controllers: &Controllers,
        target: i32,
        (kind, body): (u8, Vec<u8>),
    ) {
        let shard = &controllers.shard;
        if kind == messages::FAILURE {
            let Ok(f) = messages::decode::<Failure>(&body) else {
                return;
            };
            if f.code == ResponseError::DuplicateBrokerRegistration.code() {
                self.refused_as_duplicate(controllers, target, &f.message);
            }
            if f.code == ResponseError::InconsistentClusterId.code() {
                fatal(&format!(
                    "the controller (node {target}) refused this node: {}",
                    f.message
                ));
            }
            if !self.is_voter() {
                self.broker.controller_hint.set(f.controller_id);
            }
            return;
        }
        let Ok(reply) = messages::decode::<HeartbeatReply>(&body) else {
            return;
        };
        self.broker.refused_since_ms.set(None);
        if !self.is_voter() {
            self.broker.controller_hint.set(reply.controller_id);
            self.applied.set_controller(reply.controller_id);
        }
        if !self.broker.registered.replace(true) {
            // `/readyz` reads it (metrics::readiness).
            shard
                .metrics()
                .registered
                .store(1, std::sync::atomic::Ordering::Relaxed);
            log::info!(
                "registered with the controller (node {}) as broker {}",
                reply.controller_id,
                self.config.node_id
            );
            write_incarnation(&self.config, self.broker.incarnation);
        }
        self.tell_levels(target, shard.clock().monotonic_ms()).await;
        if let Some((version, bytes)) = reply.catalog {
            self.install_from_controller(version, &bytes).await;
        }
    }

    fn levels(&self) -> SupportedLevels {
        SupportedLevels {
            node_id: self.config.node_id,
            incarnation: self.broker.incarnation,
            metadata_version: features::own_range(),
        }
    }

    fn note_levels(&self, l: &SupportedLevels) {
        let mut supported = self.supported.borrow_mut();
        if supported.of(l.node_id, l.incarnation) != Some(l.metadata_version) {
            log::info!(
                "controller: broker {} runs metadata.version {}..={}",
                l.node_id,
                l.metadata_version.0,
                l.metadata_version.1
            );
        }
        supported.note(l.node_id, l.incarnation, l.metadata_version);
    }

    /// Tells controller `target` (which just answered a heartbeat) the levels this binary
    /// runs: at once when it is another controller than last told, else every
    /// `RETELL_LEVELS_MS`; again at the next heartbeat if the call fails.
    async fn tell_levels(&self, target: i32, now_ms: u64) {
        let (told, at_ms) = self.broker.told_levels.get();
        if told == target && now_ms < at_ms + RETELL_LEVELS_MS {
            return;
        }
        if target == self.config.node_id {
            self.note_levels(&self.levels());
            self.broker.told_levels.set((target, now_ms));
            return;
        }
        let Some(peer) = self.peer_of(target) else {
            return;
        };
        let limit = Duration::from_millis(self.config.cluster.broker_heartbeat_interval_ms * 2);
        let payload = messages::encode(&self.levels());
        match peer.call(messages::FEATURES, &payload, limit).await {
            Ok((messages::REPLY, _)) => self.broker.told_levels.set((target, now_ms)),
            Ok((_, body)) => {
                let why = messages::decode::<Failure>(&body).map(|f| f.message);
                log::debug!("controller {target} did not take this node's levels: {why:?}");
            }
            Err(e) => log::debug!("telling controller {target} this node's levels: {e}"),
        }
    }

    /// The controller refused this node's node id as held by a live broker. That broker may be
    /// this node's own earlier incarnation, whose session a newly active controller started
    /// afresh (say after the whole cluster lost power and the record of that incarnation with
    /// it): it expires within one session timeout, so the node retries at every heartbeat and
    /// stops only once refused for two.
    fn refused_as_duplicate(&self, controllers: &Controllers, target: i32, why: &str) {
        let shard = &controllers.shard;
        let now_ms = shard.clock().monotonic_ms();
        let first = self.broker.refused_since_ms.get().is_none();
        let since_ms = self.broker.refused_since_ms.get().unwrap_or(now_ms);
        self.broker.refused_since_ms.set(Some(since_ms));
        let patience_ms = 2 * self.config.cluster.broker_session_timeout_ms;
        if now_ms.saturating_sub(since_ms) >= patience_ms {
            fatal(&format!(
                "the controller (node {target}) refused this node for {patience_ms} ms: {why}"
            ));
        }
        if first {
            log::warn!(
                "the controller (node {target}) refuses this node for now: {why}; retrying \
                 until that registration's session expires"
            );
        }
    }

    /// A broker that is not a voter takes the controller's catalog, and keeps a copy for its
    /// next start.
    async fn install_from_controller(&self, version: u64, bytes: &[u8]) {
        let image = match crate::storage::catalog::decode(bytes) {
            Ok(i) => i,
            Err(e) => {
                log::warn!("the controller's catalog is unreadable: {e}");
                return;
            }
        };
        let mine = self.applied.cluster_id();
        if !mine.is_empty() && mine != image.cluster_id {
            fatal(&format!(
                "this node's data dir belongs to cluster {mine}, the controller's is {}",
                image.cluster_id
            ));
        }
        let path = crate::storage::catalog::Catalog::controller_copy_path(&self.config.data_dir);
        if let Err(e) = crate::storage::catalog::Catalog::persist_at(&path, &image).await {
            log::error!("cannot persist the controller's catalog: {e}");
            return;
        }
        self.applied.set_version(version);
        self.applied.replace(image);
    }
}

fn unknown() -> i16 {
    ResponseError::UnknownServerError.code()
}

fn not_controller(id: i32) -> Outcome {
    (
        ResponseError::NotController.code(),
        Some(format!("no route to the active controller ({id})")),
    )
}

/// Stops the process with `why`: a node that must not join the cluster.
pub(crate) fn fatal(why: &str) -> ! {
    log::error!("{why}");
    eprintln!("sluice: {why}");
    std::process::exit(1);
}

fn read_incarnation(config: &Config) -> u64 {
    let path = config.data_dir.join("__meta").join(INCARNATION_FILE);
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
        .unwrap_or(0)
}

/// Records durably (write, sync, rename, sync the directory) the incarnation just registered,
/// which the next start names as its previous one: a restart is then taken at once, without
/// waiting for the earlier registration's session to expire.
fn write_incarnation(config: &Config, incarnation: u64) {
    use crate::storage::disk::Disk;
    let dir = config.data_dir.join("__meta");
    let disk = crate::storage::disk::OsDisk::default();
    let write = disk.create_dir_all(&dir).and_then(|_| {
        disk.replace(
            &dir.join(INCARNATION_FILE),
            format!("{incarnation:x}\n").as_bytes(),
        )
    });
    if let Err(e) = write {
        log::warn!("cannot record this node's incarnation: {e}");
    }
}

/// Heartbeats the active controller for as long as the node runs.
pub async fn heartbeat_loop(cluster: Rc<Cluster>, controllers: Rc<Controllers>) {
    let every = Duration::from_millis(cluster.config.cluster.broker_heartbeat_interval_ms);
    let mut turn = 0usize;
    while !cluster.broker.releasing.get() {
        cluster.send_heartbeat(&controllers, turn).await;
        turn += 1;
        glommio::timer::sleep(every).await;
    }
}

/// Kafka's controlled shutdown: before a node stops (SIGTERM), it asks the controller to fence
/// its registration, which moves the leadership of its partitions to other in-sync replicas and
/// takes it out of their in-sync sets (`records::fence`), and waits until this node has
/// installed that (its partitions are then followers, and clients have been sent on with
/// NOT_LEADER_OR_FOLLOWER) or `limit_ms` passes. So a rolling restart shows clients no errors.
pub async fn release_leadership(
    cluster: &Rc<Cluster>,
    controllers: &Rc<Controllers>,
    limit_ms: u64,
) {
    let shard = &controllers.shard;
    cluster.broker.releasing.set(true);
    let node_id = cluster.config.node_id;
    let op = super::ControllerOp::ShutdownBroker {
        node_id,
        incarnation: cluster.broker.incarnation,
    };
    let outcome = super::execute(controllers, op).await;
    if let Some((code, msg)) = outcome.first().filter(|o| o.0 != 0) {
        log::warn!("controlled shutdown refused ({code}: {msg:?}); stopping anyway");
        return;
    }
    let deadline_ms = shard.clock().monotonic_ms() + limit_ms;
    let released = || {
        shard
            .catalog()
            .brokers
            .iter()
            .any(|b| b.node_id == node_id && b.fenced)
    };
    while !released() && shard.clock().monotonic_ms() < deadline_ms {
        glommio::timer::sleep(Duration::from_millis(CONTROLLER_POLL_MS)).await;
    }
    log::info!("node {node_id}: leadership released for shutdown");
}

/// On the active controller: fences brokers whose sessions expired, and proposes the cluster
/// id when the log has none (the cluster's first start).
pub async fn controller_duties(cluster: Rc<Cluster>, controllers: Rc<Controllers>) {
    let shard = &controllers.shard;
    let Some(quorum) = cluster.quorum.clone() else {
        return;
    };
    let mut rebalanced_ms = shard.clock().monotonic_ms();
    loop {
        glommio::timer::sleep(Duration::from_millis(FENCE_CHECK_MS)).await;
        let status = quorum.status();
        if !status.ready {
            continue;
        }
        let now_ms = shard.clock().monotonic_ms();
        let c = &cluster.config.cluster;
        if c.auto_leader_rebalance_enable
            && now_ms >= rebalanced_ms + c.leader_imbalance_check_interval_ms
        {
            rebalanced_ms = now_ms;
            rebalance_leaders(&cluster, &controllers).await;
        }
        // Under the controller's lock, like every change computed from the catalog.
        if cluster
            .applied
            .read(|c| !super::reassignment::completions(c).is_empty())
        {
            super::execute(&controllers, super::ControllerOp::CompleteReassignments).await;
        }
        // Read again: the awaits above may have taken a while, and heartbeats came meanwhile.
        let now_ms = shard.clock().monotonic_ms();
        if cluster.led_term.replace(status.term) != status.term {
            let mut sessions = cluster.sessions.borrow_mut();
            cluster
                .applied
                .read(|i| sessions.take_over(&i.brokers, now_ms));
        }
        if cluster.applied.cluster_id().is_empty() {
            let id = uuid::Uuid::new_v4().simple().to_string()[..22].to_string();
            log::info!("controller: forming cluster {id}");
            let _ = cluster.commit(records::bootstrap(id)).await;
            continue;
        }
        let timeout_ms = cluster.config.cluster.broker_session_timeout_ms;
        let expired = {
            let mut sessions = cluster.sessions.borrow_mut();
            cluster
                .applied
                .read(|i| sessions.expired(&i.brokers, now_ms, timeout_ms))
        };
        if expired.is_empty() {
            continue;
        }
        let fences = expired
            .into_iter()
            .map(|(node_id, incarnation)| {
                log::warn!("controller: broker {node_id}'s session expired; fencing it");
                MetadataRecord::FenceBroker {
                    node_id,
                    incarnation,
                }
            })
            .collect();
        let _ = cluster.commit(fences).await;
    }
}

/// Preferred-leader rebalancing (on the active controller): partitions whose first replica is
/// a live in-sync broker that does not lead get it back as leader.
async fn rebalance_leaders(cluster: &Rc<Cluster>, controllers: &Rc<Controllers>) {
    let partitions = cluster.applied.read(super::elections::imbalanced);
    if partitions.is_empty() {
        return;
    }
    log::info!(
        "controller: moving {} partitions back to their preferred leaders",
        partitions.len()
    );
    let op = super::ControllerOp::ElectLeaders {
        election_type: super::elections::PREFERRED,
        partitions,
    };
    super::execute(controllers, op).await;
}

/// Runs an operation on the active controller from any node: here when this node is it,
/// otherwise forwarded over RPC. Err: the code for every item.
pub async fn route_op(
    controllers: &Rc<Controllers>,
    cluster: &Cluster,
    op: ControllerOp,
) -> Result<Vec<Outcome>, Outcome> {
    let shard = &controllers.shard;
    if cluster.await_controller(shard.clock()).await? {
        return Ok(super::execute_here(controllers, op).await);
    }
    let forwarded = cluster
        .call_controller(messages::FORWARD, &messages::encode(&Forward { op }))
        .await;
    let body = match forwarded {
        // The active controller could not read the operation (RPC frames are checksummed, so
        // only its layout can be foreign): it runs an older release, mid-upgrade.
        Err((code, _)) if code == ResponseError::InvalidRequest.code() => {
            return Err(older_controller(cluster.controller_id()));
        }
        other => other?,
    };
    let Outcomes(outcomes) = messages::decode(&body).map_err(|m| (unknown(), Some(m)))?;
    Ok(outcomes)
}

/// The answer to an operation the active controller, node `id`, cannot read.
fn older_controller(id: i32) -> Outcome {
    let why = format!(
        "the active controller, node {id}, runs an older Sluice that does not know this \
         operation: finish the rolling upgrade first"
    );
    (ResponseError::UnsupportedVersion.code(), Some(why))
}
