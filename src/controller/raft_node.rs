//! One voter of the controller quorum, without I/O of its own: raft-rs's `RawNode` over the
//! durable `RaftStore`, applying committed entries to the node's catalog (`Applied`).
//!
//! The caller owns the loop: it ticks the node, steps peers' messages and proposals into it,
//! and calls `handle_ready`, which follows raft-rs's order (send the leader's messages, install
//! a snapshot, apply committed entries, persist entries and hard state with one fdatasync, then
//! send the messages that needed them durable) through the `send` the caller passes. The
//! broker's driver (`quorum.rs`) sends over RPC; the simulator (`sim/`) over its network.
//!
//! Invariants: a message raft-rs marks persisted leaves only after `RaftStore::persist`
//! returned; entries apply in log order, each once; every `snapshot_after_entries` applied
//! entries a snapshot of the catalog is taken and the log before it dropped.

use super::applied::Applied;
use super::raft_store::RaftStore;
use super::records;
use protobuf::Message as _;
use raft::prelude::{Entry, EntryType, Message, MessageType, Snapshot};
use raft::{RawNode, StateRole};
use std::cell::{Cell, RefCell};

/// Raft ids are node ids + 1: raft-rs reserves 0 for "none", while Kafka node ids start at 0.
pub fn raft_id(node_id: i32) -> u64 {
    node_id as u64 + 1
}

pub fn node_id(raft_id: u64) -> i32 {
    raft_id as i32 - 1
}

/// What the rest of the node may read of the Raft state (updated as the node runs).
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

/// What one `handle_ready` did that the caller acts on.
#[derive(Debug, Default)]
pub struct Handled {
    /// This node's proposals whose entries applied: (proposal id, Ok(catalog generation) or
    /// Err(why it did not apply)).
    pub proposals: Vec<(u64, Result<u64, String>)>,
    /// This node led and no longer does: its proposals still pending will not apply here.
    pub lost_leadership: bool,
}

pub struct RaftNode {
    node_id: i32,
    raw: RefCell<RawNode<RaftStore>>,
    store: RaftStore,
    status: Cell<Status>,
    applied: std::rc::Rc<Applied>,
    snapshot_after_entries: u64,
}

impl RaftNode {
    /// Starts the node on its durable state. `applied` must hold what `recover` returned for
    /// this store: the entries it knows committed are applied already, so raft-rs starts
    /// after them.
    pub fn open(
        node_id: i32,
        store: RaftStore,
        applied: std::rc::Rc<Applied>,
        snapshot_after_entries: u64,
    ) -> anyhow::Result<RaftNode> {
        assert!(snapshot_after_entries > 0, "snapshots need a period");
        let snap_index = store.snapshot().get_metadata().index;
        let hard_state = raft::Storage::initial_state(&store)?.hard_state;
        let commit = hard_state.commit;
        let cfg = raft::Config {
            id: raft_id(node_id),
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
        let status = Status {
            term: hard_state.term,
            leader_id: -1,
            commit,
            applied: commit.max(snap_index),
            snapshot_index: snap_index,
            ..Status::default()
        };
        Ok(RaftNode {
            node_id,
            raw: RefCell::new(raw),
            store,
            status: Cell::new(status),
            applied,
            snapshot_after_entries,
        })
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
                let matched = if *id == raw.raft.id { last } else { p.matched };
                (node_id(*id), matched)
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// 0 follower, 1 candidate, 2 leader.
    pub fn role_code(&self) -> u64 {
        match self.raw.borrow().raft.state {
            StateRole::Leader => 2,
            StateRole::Candidate | StateRole::PreCandidate => 1,
            StateRole::Follower => 0,
        }
    }

    /// The entries of the log from `low` up to and including `high` (both within what the
    /// store holds).
    pub fn entries(&self, low: u64, high: u64) -> raft::Result<Vec<Entry>> {
        let ctx = raft::GetEntriesContext::empty(false);
        raft::Storage::entries(&self.store, low, high + 1, None, ctx)
    }

    /// The first index the store still holds (after its snapshot).
    pub fn first_index(&self) -> u64 {
        raft::Storage::first_index(&self.store).expect("memory storage")
    }

    pub fn tick(&self) {
        self.raw.borrow_mut().tick();
    }

    pub fn step(&self, m: Message) {
        // A message raft-rs refuses (a stale term, a peer it does not know) changes nothing.
        let _ = self.raw.borrow_mut().step(m);
    }

    /// Proposes `data` as this node's proposal `id` (reported in `Handled::proposals` once it
    /// applies). Err: raft-rs dropped it (not the leader, or a leadership transfer).
    pub fn propose(&self, id: u64, data: Vec<u8>) -> Result<(), String> {
        let mut context = Vec::with_capacity(12);
        context.extend_from_slice(&self.node_id.to_be_bytes());
        context.extend_from_slice(&id.to_be_bytes());
        let proposed = self.raw.borrow_mut().propose(context, data);
        proposed.map_err(|e| format!("proposal dropped: {e}"))
    }

    /// Sets the election timeout raft-rs drew (the simulator draws it from its seed instead).
    pub fn set_election_timeout_ticks(&self, ticks: usize) {
        self.raw
            .borrow_mut()
            .raft
            .set_randomized_election_timeout(ticks);
    }

    /// Ticks since the node last heard from a leader or started an election.
    pub fn election_elapsed_ticks(&self) -> usize {
        self.raw.borrow().raft.election_elapsed
    }

    /// Handles one Ready, if raft-rs has one; `send` takes each batch of messages when raft-rs
    /// allows it to leave. Err: the Raft state could not be made durable (the node must stop).
    pub fn handle_ready(&self, send: &mut dyn FnMut(Vec<Message>)) -> anyhow::Result<Handled> {
        let mut handled = Handled::default();
        if !self.raw.borrow().has_ready() {
            return Ok(handled);
        }
        let mut ready = self.raw.borrow_mut().ready();
        if let Some(ss) = ready.ss() {
            handled.lost_leadership = self.on_soft_state(ss.leader_id, ss.raft_state);
        }
        self.send(ready.take_messages(), send);
        if !ready.snapshot().is_empty() {
            self.install_snapshot(ready.snapshot().clone())?;
        }
        self.apply(ready.take_committed_entries(), &mut handled);
        self.store.persist(ready.entries(), ready.hs())?;
        self.send(ready.take_persisted_messages(), send);
        let mut light = self.raw.borrow_mut().advance(ready);
        if let Some(commit) = light.commit_index() {
            self.store.set_commit(commit)?;
        }
        self.send(light.take_messages(), send);
        self.apply(light.take_committed_entries(), &mut handled);
        self.raw.borrow_mut().advance_apply();
        self.refresh_status();
        self.maybe_snapshot();
        Ok(handled)
    }

    /// Hands `msgs` to the caller's transport. A snapshot sent to a follower is reported
    /// finished at once: raft-rs otherwise waits for that report before it sends the follower
    /// anything again, so a snapshot lost on the way (the follower was down, a full outbox)
    /// would leave the follower behind for as long as this node leads. Reported finished, the
    /// follower is probed from the snapshot on: if it never got it, it refuses the next append
    /// and is sent the snapshot again.
    fn send(&self, msgs: Vec<Message>, send: &mut dyn FnMut(Vec<Message>)) {
        let snapshots: Vec<u64> = msgs
            .iter()
            .filter(|m| m.get_msg_type() == MessageType::MsgSnapshot)
            .map(|m| m.to)
            .collect();
        send(msgs);
        if crate::inject::active(crate::inject::Bug::SnapshotNotReported) {
            return;
        }
        for to in snapshots {
            let finished = raft::SnapshotStatus::Finish;
            self.raw.borrow_mut().report_snapshot(to, finished);
        }
    }

    /// Returns whether this node stopped leading.
    fn on_soft_state(&self, leader: u64, role: StateRole) -> bool {
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
        let active = if s.leader_id < 0 {
            "unknown".to_string()
        } else {
            format!("node {}", s.leader_id)
        };
        log::info!(
            "controller: node {} is {role:?} in term {}; the active controller is {active}",
            self.node_id,
            s.term,
        );
        self.applied.set_controller(s.leader_id);
        was_leader && !s.leader
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
    }

    /// Which of this node's proposals an entry is, if any.
    fn proposal_of(&self, e: &Entry) -> Option<u64> {
        let c: &[u8] = &e.context;
        if c.len() != 12 || c[..4] != self.node_id.to_be_bytes() {
            return None;
        }
        Some(u64::from_be_bytes(c[4..].try_into().expect("8 bytes")))
    }

    fn apply(&self, entries: Vec<Entry>, handled: &mut Handled) {
        for e in entries {
            let result = apply_entry(&self.applied, &e);
            if let Some(id) = self.proposal_of(&e) {
                handled.proposals.push((id, result));
            }
            let mut s = self.status.get();
            assert!(e.index > s.applied, "entries apply in log order, each once");
            s.applied = e.index;
            self.status.set(s);
        }
    }

    fn install_snapshot(&self, snapshot: Snapshot) -> anyhow::Result<()> {
        let index = snapshot.get_metadata().index;
        let image = match crate::storage::catalog::decode(&snapshot.data) {
            Ok(i) => i,
            Err(e) => {
                log::error!("controller: the leader's snapshot at {index} is unreadable: {e}");
                return Ok(());
            }
        };
        self.store.install_snapshot(snapshot, true)?;
        log::info!("controller: installed the leader's snapshot at index {index}");
        self.applied.replace(image);
        let mut s = self.status.get();
        s.snapshot_index = index;
        s.applied = s.applied.max(index);
        self.status.set(s);
        Ok(())
    }

    /// Takes a snapshot once `snapshot_after_entries` entries were applied since the last.
    fn maybe_snapshot(&self) {
        let s = self.status.get();
        if s.applied < s.snapshot_index + self.snapshot_after_entries {
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

    /// Each follower's (node id, entries behind the leader's last): empty on a follower.
    pub fn follower_lags(&self) -> Vec<(i32, u64)> {
        let raw = self.raw.borrow();
        if raw.raft.state != StateRole::Leader {
            return Vec::new();
        }
        let last = raw.raft.raft_log.last_index();
        raw.raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != raw.raft.id)
            .map(|(id, p)| (node_id(*id), last.saturating_sub(p.matched)))
            .collect()
    }
}

/// Applies one committed entry to the catalog: Ok(generation) or Err(why it did not apply).
/// Empty entries (a new leader's) and configuration changes (the quorum is static) carry no
/// records.
fn apply_entry(applied: &Applied, e: &Entry) -> Result<u64, String> {
    if e.get_entry_type() != EntryType::EntryNormal || e.data.is_empty() {
        return Ok(applied.generation());
    }
    let decoded = records::decode(&e.data);
    if let Err(why) = decoded
        .as_deref()
        .map(records::check_level)
        .unwrap_or(Ok(()))
    {
        super::cluster::fatal(&format!("controller: entry {}: {why}", e.index));
    }
    let result = decoded.and_then(|recs| applied.apply(&recs));
    if let Err(why) = &result {
        // Every voter reaches the same verdict on the same entry, so catalogs stay equal.
        log::error!("controller: entry {} does not apply: {why}", e.index);
    }
    result
}

/// Decodes a Raft message a peer sent (None: undecodable).
pub fn decode_message(bytes: &[u8]) -> Option<Message> {
    Message::parse_from_bytes(bytes).ok()
}
