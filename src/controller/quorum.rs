//! The controller quorum on a voter: raft-rs's `RawNode` driven from the controller shard.
//!
//! One task (`drive`) owns the node: it ticks it, steps the messages peers sent and the
//! proposals this node made (both arrive through a bounded inbox), and handles each `Ready`
//! (raft-rs's order: send the leader's messages, install a snapshot, apply committed entries,
//! persist entries and hard state with one fdatasync, then send the messages that needed them
//! durable). Committed entries are applied to the node's catalog (`Applied`), in log order, on
//! every voter alike. Every `snapshot_after_entries` applied entries a snapshot of the catalog
//! is taken and the log before it dropped.
//!
//! Raft ids are node ids + 1: raft-rs reserves 0 for "none", while Kafka node ids start at 0.

use super::applied::Applied;
use super::messages::{self, RaftEnvelope};
use super::raft_store::RaftStore;
use super::records;
use crate::clock::Clock;
use crate::config::Config;
use crate::rpc::{self, Peer};
use crate::storage::catalog::CatalogRecord;
use futures::channel::oneshot;
use futures::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use protobuf::Message as _;
use raft::prelude::{Entry, EntryType, Message, Snapshot};
use raft::{RawNode, StateRole};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Bound on inputs (peer messages and proposals) waiting for the driver.
const INBOX_CAPACITY: usize = 4096;
/// Bound on Raft messages waiting to go to one peer; past it they are dropped (Raft resends).
const OUTBOX_CAPACITY: usize = 1024;

pub fn raft_id(node_id: i32) -> u64 {
    node_id as u64 + 1
}

pub fn node_id(raft_id: u64) -> i32 {
    raft_id as i32 - 1
}

enum Input {
    Raft(Message),
    Propose { id: u64, data: Vec<u8> },
}

/// What the rest of the node may read of the Raft state (updated by the driver).
#[derive(Clone, Copy, Debug, Default)]
pub struct Status {
    pub term: u64,
    pub leader: bool,
    /// The leader's node id, -1 when unknown.
    pub leader_id: i32,
    pub commit: u64,
    pub applied: u64,
    /// Leader only: an entry of its own term is committed and applied, so its catalog is
    /// current and it may validate changes against it.
    pub ready: bool,
    pub elections: u64,
    pub snapshot_index: u64,
}

pub struct Quorum {
    node_id: i32,
    config: Arc<Config>,
    raw: RefCell<RawNode<RaftStore>>,
    store: RaftStore,
    inbox: LocalSender<Input>,
    status: Cell<Status>,
    applied: Rc<Applied>,
    /// Proposals of this node waiting for their entry to apply: the result, and the catalog
    /// generation that holds it.
    pending: RefCell<HashMap<u64, oneshot::Sender<Result<u64, String>>>>,
    next_proposal: Cell<u64>,
    outboxes: HashMap<u64, LocalSender<Vec<u8>>>,
    /// Raft messages dropped because the inbox or a peer's outbox was full.
    pub dropped_messages: Cell<u64>,
}

impl Quorum {
    /// Opens the node's Raft state. `applied` must hold what `recover` returned: the entries
    /// this node knows committed are applied already, so raft-rs starts after them.
    pub fn open(
        config: Arc<Config>,
        applied: Rc<Applied>,
    ) -> anyhow::Result<(Rc<Quorum>, QuorumInbox)> {
        let voters = config.voter_list()?;
        let store = open_store(&config)?;
        let snap_index = store.snapshot().get_metadata().index;
        let hard_state = raft::Storage::initial_state(&store)?.hard_state;
        let commit = hard_state.commit;
        let cfg = raft::Config {
            id: raft_id(config.node_id),
            election_tick: 10,
            heartbeat_tick: 2,
            applied: commit.max(snap_index),
            max_size_per_msg: 1 << 20,
            max_inflight_msgs: 256,
            check_quorum: true,
            pre_vote: true,
            ..Default::default()
        };
        cfg.validate()?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let raw = RawNode::new(&cfg, store.clone(), &logger)?;
        let (tx, rx) = local_channel::new_bounded(INBOX_CAPACITY);
        let mut outboxes = HashMap::new();
        let mut senders = Vec::new();
        for v in voters.iter().filter(|v| v.id != config.node_id) {
            let (otx, orx) = local_channel::new_bounded(OUTBOX_CAPACITY);
            outboxes.insert(raft_id(v.id), otx);
            senders.push((Rc::new(Peer::new(v.rpc.clone())), orx));
        }
        log::info!(
            "controller quorum: node {} of voters {:?}, log from index {} (snapshot {snap_index}), {} entries committed",
            config.node_id,
            voters.iter().map(|v| v.id).collect::<Vec<_>>(),
            snap_index + 1,
            commit
        );
        let status = Status {
            term: hard_state.term,
            leader_id: -1,
            commit,
            applied: commit.max(snap_index),
            snapshot_index: snap_index,
            ..Status::default()
        };
        let quorum = Rc::new(Quorum {
            node_id: config.node_id,
            config,
            raw: RefCell::new(raw),
            store,
            inbox: tx,
            status: Cell::new(status),
            applied,
            pending: RefCell::new(HashMap::new()),
            next_proposal: Cell::new(1),
            outboxes,
            dropped_messages: Cell::new(0),
        });
        Ok((quorum, QuorumInbox { rx, senders }))
    }

    pub fn status(&self) -> Status {
        self.status.get()
    }

    /// Each voter's (node id, index of the last entry known replicated to it): the leader's
    /// view; empty on a follower.
    pub fn voter_progress(&self) -> Vec<(i32, u64)> {
        let raw = self.raw.borrow();
        if raw.raft.state != StateRole::Leader {
            return Vec::new();
        }
        let last = raw.raft.raft_log.last_index();
        let mut out: Vec<(i32, u64)> = raw
            .raft
            .prs()
            .iter()
            .map(|(id, p)| {
                (
                    node_id(*id),
                    if *id == raw.raft.id { last } else { p.matched },
                )
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// A Raft message from a peer (the RPC handler). Dropped when the inbox is full: Raft
    /// resends what matters.
    pub fn receive(&self, envelope: RaftEnvelope) {
        let Ok(msg) = Message::parse_from_bytes(&envelope.message) else {
            log::warn!("controller: an undecodable Raft message was dropped");
            return;
        };
        if self.inbox.try_send(Input::Raft(msg)).is_err() {
            self.dropped_messages.set(self.dropped_messages.get() + 1);
        }
    }

    /// Proposes an entry; Ok(catalog generation) once it is applied here, Err(why) when it
    /// cannot be (not the leader, leadership lost, or it does not apply).
    pub async fn propose(&self, data: Vec<u8>) -> Result<u64, String> {
        if !self.status().leader {
            return Err("not the controller".into());
        }
        let id = self.next_proposal.get();
        self.next_proposal.set(id + 1);
        let (tx, rx) = oneshot::channel();
        self.pending.borrow_mut().insert(id, tx);
        if self.inbox.send(Input::Propose { id, data }).await.is_err() {
            self.pending.borrow_mut().remove(&id);
            return Err("the controller is stopping".into());
        }
        rx.await
            .unwrap_or_else(|_| Err("leadership changed before the change committed".into()))
    }

    fn context(&self, id: u64) -> Vec<u8> {
        let mut c = Vec::with_capacity(12);
        c.extend_from_slice(&self.node_id.to_be_bytes());
        c.extend_from_slice(&id.to_be_bytes());
        c
    }

    /// Which of this node's proposals an entry is, if any.
    fn proposal_of(&self, e: &Entry) -> Option<u64> {
        let c: &[u8] = &e.context;
        if c.len() != 12 || c[..4] != self.node_id.to_be_bytes() {
            return None;
        }
        Some(u64::from_be_bytes(c[4..].try_into().expect("8 bytes")))
    }

    fn step(&self, input: Input) {
        let mut raw = self.raw.borrow_mut();
        match input {
            Input::Raft(m) => {
                let _ = raw.step(m);
            }
            Input::Propose { id, data } => {
                if let Err(e) = raw.propose(self.context(id), data) {
                    drop(raw);
                    if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                        let _ = tx.send(Err(format!("proposal dropped: {e}")));
                    }
                }
            }
        }
    }

    fn send(&self, msgs: Vec<Message>) {
        let cluster_id = self.applied.cluster_id();
        let from_leader = self.raw.borrow().raft.state == StateRole::Leader;
        for m in msgs {
            let Some(outbox) = self.outboxes.get(&m.to) else {
                continue;
            };
            let Ok(message) = m.write_to_bytes() else {
                continue;
            };
            let envelope = RaftEnvelope {
                cluster_id: cluster_id.clone(),
                from_leader,
                message,
            };
            if outbox.try_send(messages::encode(&envelope)).is_err() {
                self.dropped_messages.set(self.dropped_messages.get() + 1);
            }
        }
    }

    /// Handles one Ready, if raft-rs has one.
    fn on_ready(&self) {
        if !self.raw.borrow().has_ready() {
            return;
        }
        let mut ready = self.raw.borrow_mut().ready();
        if let Some(ss) = ready.ss() {
            self.on_soft_state(ss.leader_id, ss.raft_state);
        }
        self.send(ready.take_messages());
        if !ready.snapshot().is_empty() {
            self.install_snapshot(ready.snapshot().clone());
        }
        self.apply(ready.take_committed_entries());
        durable_or_stop(self.store.persist(ready.entries(), ready.hs()));
        self.send(ready.take_persisted_messages());
        let mut light = self.raw.borrow_mut().advance(ready);
        if let Some(commit) = light.commit_index() {
            durable_or_stop(self.store.set_commit(commit));
        }
        self.send(light.take_messages());
        self.apply(light.take_committed_entries());
        self.raw.borrow_mut().advance_apply();
        self.refresh_status();
        self.maybe_snapshot();
    }

    fn on_soft_state(&self, leader: u64, role: StateRole) {
        let mut s = self.status.get();
        let was_leader = s.leader;
        s.leader = role == StateRole::Leader;
        s.leader_id = if leader == raft::INVALID_ID {
            -1
        } else {
            node_id(leader)
        };
        self.count_election(&mut s);
        self.status.set(s);
        log::info!(
            "controller: node {} is {role:?} in term {}; the active controller is {}",
            self.node_id,
            s.term,
            if s.leader_id < 0 {
                "unknown".to_string()
            } else {
                format!("node {}", s.leader_id)
            }
        );
        if was_leader && !s.leader {
            for (_, tx) in self.pending.borrow_mut().drain() {
                let _ = tx.send(Err("this node is no longer the controller".into()));
            }
        }
        self.applied.set_controller(s.leader_id);
    }

    /// Each new term is an election held (one this node started, or one it took part in).
    fn count_election(&self, s: &mut Status) {
        let term = self.raw.borrow().raft.term;
        if term > s.term {
            s.elections += 1;
            s.term = term;
        }
    }

    fn refresh_status(&self) {
        let mut s = self.status.get();
        self.count_election(&mut s);
        let raw = self.raw.borrow();
        s.commit = raw.raft.raft_log.committed;
        s.applied = raw.raft.raft_log.applied;
        s.ready = s.leader && raw.raft.commit_to_current_term() && s.applied == s.commit;
        self.status.set(s);
        publish_metrics(&raw, &s, self.dropped_messages.get());
    }

    fn apply(&self, entries: Vec<Entry>) {
        for e in entries {
            let result = apply_entry(&self.applied, &e);
            if let Some(id) = self.proposal_of(&e) {
                if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                    let _ = tx.send(result);
                }
            }
            let mut s = self.status.get();
            s.applied = e.index;
            self.status.set(s);
        }
    }

    fn install_snapshot(&self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        let image = match crate::storage::catalog::decode(&snapshot.data) {
            Ok(i) => i,
            Err(e) => {
                log::error!("controller: the leader's snapshot at {index} is unreadable: {e}");
                return;
            }
        };
        durable_or_stop(self.store.install_snapshot(snapshot, true));
        log::info!("controller: installed the leader's snapshot at index {index}");
        self.applied.replace(image);
        let mut s = self.status.get();
        s.snapshot_index = index;
        self.status.set(s);
    }

    /// Takes a snapshot once `snapshot_after_entries` entries were applied since the last.
    fn maybe_snapshot(&self) {
        let s = self.status.get();
        let every = self.config.cluster.snapshot_after_entries;
        if s.applied < s.snapshot_index + every {
            return;
        }
        let Ok(term) = raft::Storage::term(&self.store, s.applied) else {
            return;
        };
        let mut snap = Snapshot::default();
        let meta = snap.mut_metadata();
        meta.index = s.applied;
        meta.term = term;
        meta.set_conf_state(self.raw.borrow().raft.prs().conf().to_conf_state());
        match self.applied.read(crate::storage::catalog::encode) {
            Ok(data) => snap.data = data.into(),
            Err(e) => {
                log::error!("controller: cannot encode a snapshot: {e}");
                return;
            }
        }
        if let Err(e) = self.store.install_snapshot(snap, false) {
            log::error!("controller: cannot write a snapshot: {e}");
            return;
        }
        log::info!("controller: snapshot at index {}", s.applied);
        let mut s = self.status.get();
        s.snapshot_index = s.applied;
        self.status.set(s);
    }
}

/// Stops the process when the Raft state could not be written: going on would acknowledge
/// votes and entries that are not durable.
fn durable_or_stop(result: anyhow::Result<()>) {
    if let Err(e) = result {
        log::error!("controller: cannot persist the Raft state: {e}; stopping");
        std::process::exit(1);
    }
}

/// Publishes the Raft state on `/metrics`.
fn publish_metrics(raw: &RawNode<RaftStore>, s: &Status, dropped: u64) {
    use crate::metrics as m;
    use std::sync::atomic::Ordering::Relaxed;
    let role = match raw.raft.state {
        StateRole::Leader => 2,
        StateRole::Candidate | StateRole::PreCandidate => 1,
        StateRole::Follower => 0,
    };
    m::RAFT_TERM.store(s.term, Relaxed);
    m::RAFT_ROLE.store(role, Relaxed);
    m::RAFT_LEADER.store((s.leader_id + 1).max(0) as u64, Relaxed);
    m::RAFT_COMMIT_INDEX.store(s.commit, Relaxed);
    m::RAFT_APPLIED_INDEX.store(s.applied, Relaxed);
    m::RAFT_SNAPSHOT_INDEX.store(s.snapshot_index, Relaxed);
    m::RAFT_ELECTIONS.store(s.elections, Relaxed);
    m::RAFT_DROPPED_MESSAGES.store(dropped, Relaxed);
    let lags = if s.leader {
        let last = raw.raft.raft_log.last_index();
        raw.raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != raw.raft.id)
            .map(|(id, p)| (node_id(*id), last.saturating_sub(p.matched)))
            .collect()
    } else {
        Vec::new()
    };
    if let Ok(mut v) = m::RAFT_FOLLOWER_LAG.lock() {
        *v = lags;
    }
}

/// This voter's Raft state, with the quorum the config names.
fn open_store(config: &Config) -> anyhow::Result<RaftStore> {
    let voters = config.voter_list()?;
    RaftStore::open(
        &config.data_dir,
        voters.iter().map(|v| raft_id(v.id)).collect(),
    )
}

/// A voter's catalog as of its last run: its latest snapshot, then every entry it knows
/// committed after it. Read before the shards start, so they serve it from the first request.
pub fn recover(config: &Config) -> anyhow::Result<CatalogRecord> {
    let store = open_store(config)?;
    let snapshot = store.snapshot();
    let snap_index = snapshot.get_metadata().index;
    let mut image = if snap_index > 0 {
        crate::storage::catalog::decode(&snapshot.data)
            .map_err(|e| anyhow::anyhow!("raft snapshot: {e}"))?
    } else {
        CatalogRecord::default()
    };
    let commit = raft::Storage::initial_state(&store)?.hard_state.commit;
    if commit > snap_index {
        let entries = raft::Storage::entries(
            &store,
            snap_index + 1,
            commit + 1,
            None,
            raft::GetEntriesContext::empty(false),
        )?;
        for e in entries
            .iter()
            .filter(|e| e.get_entry_type() == EntryType::EntryNormal)
        {
            if e.data.is_empty() {
                continue;
            }
            let applied =
                records::decode(&e.data).and_then(|recs| records::apply(&mut image, &recs));
            if let Err(why) = applied {
                log::error!("controller: entry {} does not apply: {why}", e.index);
            }
        }
    }
    Ok(image)
}

/// Applies one committed entry to the catalog: Ok(generation) or Err(why it did not apply).
/// Empty entries (a new leader's) and configuration changes (the quorum is static) carry no
/// records.
fn apply_entry(applied: &Applied, e: &Entry) -> Result<u64, String> {
    if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
        return Ok(applied.generation());
    }
    let result = records::decode(&e.data).and_then(|recs| applied.apply(&recs));
    if let Err(why) = &result {
        // Every voter reaches the same verdict on the same entry, so catalogs stay equal.
        log::error!("controller: entry {} does not apply: {why}", e.index);
    }
    result
}

/// The driver's ends: its inbox and the peers' outboxes.
pub struct QuorumInbox {
    rx: LocalReceiver<Input>,
    senders: Vec<(Rc<Peer>, LocalReceiver<Vec<u8>>)>,
}

/// Runs the quorum: one task drives the Raft node, one per peer sends its messages. Ticks
/// follow `clock` (the shard's monotonic clock).
pub async fn drive(quorum: Rc<Quorum>, inbox: QuorumInbox, clock: Arc<dyn Clock>) {
    for (peer, rx) in inbox.senders {
        glommio::spawn_local(send_to_peer(peer, rx)).detach();
    }
    let tick_ms = quorum.config.cluster.raft_tick_ms;
    let mut next_tick_ms = clock.monotonic_ms() + tick_ms;
    let rx = inbox.rx;
    loop {
        let now_ms = clock.monotonic_ms();
        if now_ms >= next_tick_ms {
            quorum.raw.borrow_mut().tick();
            next_tick_ms = now_ms + tick_ms;
        } else if let Some(Some(input)) =
            rpc::within(Duration::from_millis(next_tick_ms - now_ms), rx.recv()).await
        {
            quorum.step(input);
            // Step whatever else has arrived before handling the Ready: one fsync for all.
            while let Some(Some(input)) = rx.recv().now_or_never() {
                quorum.step(input);
            }
        }
        quorum.on_ready();
    }
}

async fn send_to_peer(peer: Rc<Peer>, rx: LocalReceiver<Vec<u8>>) {
    while let Some(bytes) = rx.recv().await {
        if let Err(e) = peer.send(messages::RAFT, &bytes).await {
            log::debug!("controller: cannot reach {}: {e}", peer.addr);
        }
    }
}
