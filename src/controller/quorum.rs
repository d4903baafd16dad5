//! The controller quorum on a voter: the broker's driver of its `RaftNode` (`raft_node.rs`).
//!
//! One task (`drive`) owns the node: it ticks it on the shard's clock, steps the messages peers
//! sent and the proposals this node made (both arrive through a bounded inbox), and handles each
//! `Ready`; one task per peer sends that peer's messages over RPC. Proposals wait for their
//! entry to apply here (or for leadership to be lost).

use super::applied::Applied;
use super::messages::{self, RaftEnvelope};
use super::raft_node::{self, raft_id, Handled, RaftNode};
use super::raft_store::RaftStore;
use super::records;
use crate::clock::Clock;
use crate::config::Config;
use crate::rpc::{self, Peer};
use crate::security::node::NodeSecret;
use crate::storage::catalog::CatalogRecord;
use crate::storage::disk::OsDisk;
use futures::channel::oneshot;
use futures::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use protobuf::Message as _;
use raft::prelude::{EntryType, Message};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

pub use raft_node::Status;

/// Bound on inputs (peer messages and proposals) waiting for the driver.
const INBOX_CAPACITY: usize = 4096;
/// Bound on Raft messages waiting to go to one peer; past it they are dropped (Raft resends).
const OUTBOX_CAPACITY: usize = 1024;

enum Input {
    Raft(Message),
    Propose { id: u64, data: Vec<u8> },
}

pub struct Quorum {
    config: Arc<Config>,
    node: RaftNode,
    inbox: LocalSender<Input>,
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
        let every = config.cluster.snapshot_after_entries;
        let node = RaftNode::open(config.node_id, store, applied.clone(), every)?;
        let (tx, rx) = local_channel::new_bounded(INBOX_CAPACITY);
        let mut outboxes = HashMap::new();
        let mut senders = Vec::new();
        for v in voters.iter().filter(|v| v.id != config.node_id) {
            let (otx, orx) = local_channel::new_bounded(OUTBOX_CAPACITY);
            outboxes.insert(raft_id(v.id), otx);
            senders.push((
                Rc::new(Peer::new(v.rpc.clone(), NodeSecret::of(&config))),
                orx,
            ));
        }
        let status = node.status();
        log::info!(
            "controller quorum: node {} of voters {:?}, log from index {} (snapshot {}), {} entries committed",
            config.node_id,
            voters.iter().map(|v| v.id).collect::<Vec<_>>(),
            status.snapshot_index + 1,
            status.snapshot_index,
            status.commit
        );
        let quorum = Rc::new(Quorum {
            config,
            node,
            inbox: tx,
            applied,
            pending: RefCell::new(HashMap::new()),
            next_proposal: Cell::new(1),
            outboxes,
            dropped_messages: Cell::new(0),
        });
        Ok((quorum, QuorumInbox { rx, senders }))
    }

    pub fn status(&self) -> Status {
        self.node.status()
    }

    /// Whether every change this node proposed has applied here or can no longer apply
    /// (leadership lost): a change decided on the applied catalog then sees every change
    /// that may come before it in the log.
    pub fn settled(&self) -> bool {
        self.pending.borrow().is_empty()
    }

    /// Each voter's (node id, index of the last entry known replicated to it): the leader's
    /// view; empty on a follower.
    pub fn voter_progress(&self) -> Vec<(i32, u64)> {
        self.node.voter_progress()
    }

    /// A Raft message from a peer (the RPC handler). Dropped when the inbox is full: Raft
    /// resends what matters.
    pub fn receive(&self, envelope: RaftEnvelope) {
        let Some(msg) = raft_node::decode_message(&envelope.message) else {
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

    fn step(&self, input: Input) {
        match input {
            Input::Raft(m) => self.node.step(m),
            Input::Propose { id, data } => {
                if let Err(e) = self.node.propose(id, data) {
                    if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                        let _ = tx.send(Err(e));
                    }
                }
            }
        }
    }

    fn send(&self, msgs: Vec<Message>) {
        let cluster_id = self.applied.cluster_id();
        let from_leader = self.node.status().leader;
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

    /// Handles one Ready, if raft-rs has one, and answers the proposals it applied.
    fn on_ready(&self) {
        let handled = self.node.handle_ready(&mut |msgs| self.send(msgs));
        let Handled {
            proposals,
            lost_leadership,
        } = durable_or_stop(handled);
        for (id, result) in proposals {
            if let Some(tx) = self.pending.borrow_mut().remove(&id) {
                let _ = tx.send(result);
            }
        }
        if lost_leadership {
            for (_, tx) in self.pending.borrow_mut().drain() {
                let _ = tx.send(Err("this node is no longer the controller".into()));
            }
        }
        publish_metrics(&self.node, self.dropped_messages.get());
    }
}

/// Stops the process when the Raft state could not be written: going on would acknowledge
/// votes and entries that are not durable.
fn durable_or_stop<T>(result: anyhow::Result<T>) -> T {
    result.unwrap_or_else(|e| {
        log::error!("controller: cannot persist the Raft state: {e}; stopping");
        std::process::exit(1);
    })
}

/// Publishes the Raft state on `/metrics`.
fn publish_metrics(node: &RaftNode, dropped: u64) {
    use crate::metrics as m;
    use std::sync::atomic::Ordering::Relaxed;
    let s = node.status();
    m::RAFT_TERM.store(s.term, Relaxed);
    m::RAFT_ROLE.store(node.role_code(), Relaxed);
    m::RAFT_LEADER.store((s.leader_id + 1).max(0) as u64, Relaxed);
    m::RAFT_COMMIT_INDEX.store(s.commit, Relaxed);
    m::RAFT_APPLIED_INDEX.store(s.applied, Relaxed);
    m::RAFT_SNAPSHOT_INDEX.store(s.snapshot_index, Relaxed);
    m::RAFT_ELECTIONS.store(s.elections, Relaxed);
    m::RAFT_DROPPED_MESSAGES.store(dropped, Relaxed);
    if let Ok(mut v) = m::RAFT_FOLLOWER_LAG.lock() {
        *v = node.follower_lags();
    }
}

/// This voter's Raft state, with the quorum the config names.
fn open_store(config: &Config) -> anyhow::Result<RaftStore> {
    let voters = config.voter_list()?;
    RaftStore::open(
        Rc::new(OsDisk::default()),
        &config.data_dir,
        voters.iter().map(|v| raft_id(v.id)).collect(),
    )
}

/// A voter's catalog as of its last run: its latest snapshot, then every entry it knows
/// committed after it. Read before the shards start, so they serve it from the first request.
pub fn recover(config: &Config) -> anyhow::Result<CatalogRecord> {
    recover_from(&open_store(config)?)
}

/// The catalog `store` holds: its snapshot, then its entries up to the commit index it knows.
pub fn recover_from(store: &RaftStore) -> anyhow::Result<CatalogRecord> {
    let snapshot = store.snapshot();
    let snap_index = snapshot.get_metadata().index;
    let mut image = if snap_index > 0 {
        crate::storage::catalog::decode(&snapshot.data)
            .map_err(|e| anyhow::anyhow!("raft snapshot: {e}"))?
    } else {
        CatalogRecord::default()
    };
    let commit = raft::Storage::initial_state(store)?.hard_state.commit;
    if commit > snap_index {
        let entries = raft::Storage::entries(
            store,
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
            let decoded = records::decode(&e.data);
            if let Ok(recs) = &decoded {
                records::check_level(recs)
                    .map_err(|why| anyhow::anyhow!("entry {}: {why}", e.index))?;
            }
            let applied = decoded.and_then(|recs| records::apply(&mut image, &recs));
            if let Err(why) = applied {
                log::error!("controller: entry {} does not apply: {why}", e.index);
            }
        }
    }
    Ok(image)
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
            quorum.node.tick();
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
