//! The simulated world: nodes, the network between them, virtual time, and the faults, all
//! drawn from one seed. Events run one at a time in time order (ties in the order they were
//! scheduled), so a seed always replays the same run.
//!
//! A run has two phases: `fault_ms` of faults (crashes that lose unsynced writes, paused
//! processes, cut links, lost, duplicated and late messages, failed fsyncs, a full disk) with
//! admin and partition-leader operations throughout, then `quiet_ms` with every fault healed,
//! after which the cluster must have converged (one controller, equal catalogs, every broker
//! registered).

use super::checks::{Checker, Violation};
use super::disk::{DiskFaults, SimDisk};
use super::network::Network;
use super::node::{SimNode, Wire};
use super::replica_checks::History;
use super::replication::{NodeReplicas, Waiting};
use super::trace::Trace;
use crate::config::{Config, Voter};
use crate::controller::ControllerOp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// Bound on events one run may take (a livelock is a failure, not a hang).
const MAX_EVENTS: u64 = 2_000_000;
/// The active controller's duties run this often (`cluster::FENCE_CHECK_MS`).
const DUTIES_MS: u64 = 50;

#[derive(Debug)]
pub enum Event {
    Tick(usize),
    Deliver { from: usize, to: usize, wire: Wire },
    Duties(usize),
    Heartbeat(usize),
    Operation,
    Fault,
    Restart(usize),
    Replicate(usize),
    Flush(usize),
    Heal(Vec<(usize, usize)>),
    EndFaults,
}

/// A node's place in the world: its disk outlives its process.
pub struct Slot {
    pub disk: Rc<SimDisk>,
    pub node: Option<SimNode>,
    config: Arc<Config>,
    /// The process is stopped (SIGSTOP) until then: its events wait.
    pub paused_until_ms: u64,
    /// Its clock runs this many per mille fast or slow (ticks come that much early or late).
    skew_permille: i64,
    /// Bumped at each start, so the events of a crashed run are dropped.
    pub run: u64,
    pub partitions: NodeReplicas,
}

impl Slot {
    pub fn config(&self) -> &Config {
        &self.config
    }
}

/// What a run counted (reported in the summary line).
#[derive(Default, Debug, Clone, Copy)]
pub struct Stats {
    pub events: u64,
    pub crashes: u64,
    pub pauses: u64,
    pub cuts: u64,
    pub disk_faults: u64,
    pub elections: u64,
    pub committed: u64,
}

pub struct World {
    pub now_ms: u64,
    pub rng: ChaCha8Rng,
    queue: BTreeMap<(u64, u64), (u64, Event)>,
    next_seq: u64,
    pub slots: Vec<Slot>,
    pub net: Network,
    pub trace: Trace,
    pub checker: Checker,
    pub stats: Stats,
    pub faulting: bool,
    cluster_id: String,
    topics_created: u32,
    /// Operations stop then, so that the end of the quiet phase sees no change in flight.
    operations_until_ms: u64,
    pub waiting: Vec<Waiting>,
    pub history: History,
    next_payload: u64,
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nodes: usize = if rng.gen_bool(0.5) { 3 } else { 5 };
        let net = Network::draw(&mut rng);
        let faults = DiskFaults {
            fsync_error_ppm: if rng.gen_bool(0.3) { 2_000 } else { 0 },
            no_space_ppm: if rng.gen_bool(0.3) { 1_000 } else { 0 },
        };
        let voters: Vec<Voter> = (0..nodes as i32)
            .map(|id| Voter {
                id,
                rpc: format!("127.0.0.1:{}", 19_000 + id),
            })
            .collect();
        let slots = (0..nodes)
            .map(|i| {
                let disk_rng = ChaCha8Rng::seed_from_u64(rng.gen());
                Slot {
                    disk: Rc::new(SimDisk::new(disk_rng, faults)),
                    node: None,
                    config: Arc::new(node_config(i as i32, &voters)),
                    paused_until_ms: 0,
                    skew_permille: rng.gen_range(-50..=50),
                    run: 0,
                    partitions: NodeReplicas::default(),
                }
            })
            .collect();
        let cluster_id = format!("sim{:016x}", rng.gen::<u64>());
        World {
            now_ms: 0,
            rng,
            queue: BTreeMap::new(),
            next_seq: 0,
            slots,
            net,
            trace: Trace::default(),
            checker: Checker::default(),
            stats: Stats::default(),
            faulting: true,
            cluster_id,
            topics_created: 0,
            operations_until_ms: 0,
            waiting: Vec::new(),
            history: History::default(),
            next_payload: 1,
        }
    }

    /// Schedules `event` `after_ms` from now, for the current run of its node.
    pub fn schedule(&mut self, after_ms: u64, event: Event) {
        let run = event_node(&event).map_or(0, |i| self.slots[i].run);
        self.next_seq += 1;
        let key = (self.now_ms + after_ms, self.next_seq);
        self.queue.insert(key, (run, event));
    }

    /// Runs the seed to its end: Err on the first invariant broken.
    pub fn run(&mut self, fault_ms: u64, quiet_ms: u64) -> Result<(), Violation> {
        for i in 0..self.slots.len() {
            self.start(i)?;
        }
        self.schedule(100, Event::Operation);
        self.schedule(500, Event::Fault);
        self.schedule(fault_ms, Event::EndFaults);
        let end_ms = fault_ms + quiet_ms;
        self.operations_until_ms = end_ms.saturating_sub(quiet_ms / 2);
        while let Some(((at_ms, _), (run, event))) = self.queue.pop_first() {
            if at_ms > end_ms {
                break;
            }
            self.now_ms = at_ms;
            self.stats.events += 1;
            if self.stats.events > MAX_EVENTS {
                let detail = format!("{MAX_EVENTS} events by {at_ms} ms");
                return Err(Violation {
                    invariant: "a run ends within its event bound",
                    detail,
                });
            }
            self.dispatch(run, event)?;
        }
        self.stats.committed = self.checker.committed_entries() as u64;
        super::converged(self)
    }

    fn dispatch(&mut self, run: u64, event: Event) -> Result<(), Violation> {
        if let Some(i) = event_node(&event) {
            if run != self.slots[i].run {
                return Ok(());
            }
            if self.slots[i].paused_until_ms > self.now_ms {
                // A stopped process does nothing; what was sent to it waits in its socket.
                let wait = self.slots[i].paused_until_ms - self.now_ms;
                self.schedule(wait, event);
                return Ok(());
            }
        }
        match event {
            Event::Tick(i) => self.on_tick(i),
            Event::Deliver { from, to, wire } => self.on_deliver(from, to, wire),
            Event::Duties(i) => self.on_duties(i),
            Event::Heartbeat(i) => self.on_heartbeat_due(i),
            Event::Operation => self.on_operation(),
            Event::Replicate(i) => self.on_replicate(i),
            Event::Flush(i) => self.on_flush(i),
            Event::Fault => self.on_fault(),
            Event::Restart(i) if self.slots[i].node.is_none() => self.start(i),
            Event::Restart(_) => Ok(()),
            Event::Heal(links) => {
                self.on_heal(links);
                Ok(())
            }
            Event::EndFaults => {
                self.end_faults();
                Ok(())
            }
        }
    }

    /// Starts (or restarts) node `i` on what its disk holds.
    pub fn start(&mut self, i: usize) -> Result<(), Violation> {
        let slot = &mut self.slots[i];
        slot.run += 1;
        slot.paused_until_ms = 0;
        let incarnation = self.rng.gen::<u64>() | 1;
        let disk: Rc<dyn crate::storage::disk::Disk> = slot.disk.clone();
        let node =
            SimNode::open(slot.config.clone(), disk, incarnation).map_err(|e| Violation {
                invariant: "a node restarts on what its disk holds",
                detail: format!("node {i}: {e:#}"),
            })?;
        self.trace.note(
            self.now_ms,
            format!("node {i} starts ({})", describe(&node)),
        );
        self.checker.restarted(i as i32);
        self.slots[i].node = Some(node);
        self.draw_election_timeout(i);
        self.schedule(self.tick_ms(i), Event::Tick(i));
        self.schedule(DUTIES_MS, Event::Duties(i));
        self.schedule(10, Event::Heartbeat(i));
        self.schedule(super::replication::REPLICATE_MS, Event::Replicate(i));
        Ok(())
    }

    /// Node `i`'s process dies: its unsynced writes are lost (some torn at the tail).
    pub fn crash(&mut self, i: usize, why: &str) {
        if self.slots[i].node.take().is_none() {
            return;
        }
        self.slots[i].run += 1;
        let lost = self.slots[i].disk.crash();
        self.slots[i].partitions.crash(&mut self.rng);
        self.history.restarted(i);
        self.stats.crashes += 1;
        self.trace.note(
            self.now_ms,
            format!("node {i} crashes ({why}); {lost} unsynced bytes lost"),
        );
    }

    fn tick_ms(&self, i: usize) -> u64 {
        let base = self.slots[i].config.cluster.raft_tick_ms as i64;
        (base + base * self.slots[i].skew_permille / 1000).max(1) as u64
    }

    /// raft-rs draws each election timeout from the thread's RNG; the simulator overrides it
    /// from the seed whenever the node has just reset its election clock.
    fn draw_election_timeout(&mut self, i: usize) {
        let Some(node) = &self.slots[i].node else {
            return;
        };
        if node.raft.election_elapsed_ticks() == 0 {
            node.raft
                .set_election_timeout_ticks(self.rng.gen_range(10..20));
        }
    }

    fn on_tick(&mut self, i: usize) -> Result<(), Violation> {
        if let Some(node) = &self.slots[i].node {
            node.raft.tick();
        }
        self.schedule(self.tick_ms(i), Event::Tick(i));
        self.after_raft_input(i)
    }

    fn on_deliver(&mut self, from: usize, to: usize, wire: Wire) -> Result<(), Violation> {
        if self.slots[to].node.is_none() {
            return Ok(());
        }
        match wire {
            Wire::Raft(m) => {
                self.slots[to].node.as_ref().expect("checked").raft.step(m);
                return self.after_raft_input(to);
            }
            Wire::Heartbeat {
                node_id,
                incarnation,
                previous_incarnation,
            } => {
                let now_ms = self.now_ms;
                let node = self.slots[to].node.as_mut().expect("checked");
                if node.on_heartbeat(node_id, incarnation, previous_incarnation, now_ms) {
                    self.send(to, from, Wire::HeartbeatTaken);
                }
            }
            Wire::HeartbeatTaken => {
                self.slots[to]
                    .node
                    .as_mut()
                    .expect("checked")
                    .on_heartbeat_taken();
            }
            Wire::AlterPartition(change) => {
                let node = self.slots[to].node.as_mut().expect("checked");
                node.execute(ControllerOp::AlterPartition(change));
            }
            wire => return self.on_replication_wire(from, to, wire),
        }
        self.after_raft_input(to)
    }

    /// After the node's Raft state may have changed: redraw its election timeout, handle its
    /// Ready (sending what it allows), and check every invariant over it.
    fn after_raft_input(&mut self, i: usize) -> Result<(), Violation> {
        self.draw_election_timeout(i);
        let Some(node) = self.slots[i].node.as_mut() else {
            return Ok(());
        };
        let before = node.raft.status();
        let mut out = Vec::new();
        let handled = node.handle_ready(&mut |msgs| out.extend(msgs));
        for m in out {
            let to = crate::controller::raft_node::node_id(m.to) as usize;
            self.send(i, to, Wire::Raft(m));
        }
        let handled = match handled {
            Ok(h) => h,
            Err(e) => {
                // The broker exits when its Raft state cannot be made durable.
                self.stats.disk_faults += 1;
                self.crash(i, &format!("cannot persist the Raft state: {e}"));
                let after_ms = self.rng.gen_range(100..2_000);
                self.schedule(after_ms, Event::Restart(i));
                return Ok(());
            }
        };
        let node = self.slots[i].node.as_ref().expect("still running");
        let after = node.raft.status();
        if after.leader && !before.leader {
            self.stats.elections += 1;
            self.trace
                .note(self.now_ms, format!("node {i} leads term {}", after.term));
        }
        for (what, result) in handled {
            self.trace
                .note(self.now_ms, format!("node {i} applied {what}: {result:?}"));
        }
        self.checker.check(node)
    }

    fn on_replication_wire(&mut self, from: usize, to: usize, wire: Wire) -> Result<(), Violation> {
        match wire {
            Wire::Produce {
                tp,
                payload,
                acks_all,
            } => self.on_produce(to, tp, payload, acks_all),
            Wire::Fetch { tp, epoch, offset } => self.on_fetch(to, from, tp, epoch, offset),
            Wire::FetchReply { tp, epoch, result } => self.on_fetch_reply(to, tp, epoch, result),
            Wire::EpochQuery { tp, epoch, latest } => {
                self.on_epoch_query(to, from, tp, epoch, latest);
                Ok(())
            }
            Wire::EpochAnswer { tp, epoch, answer } => self.on_epoch_answer(to, tp, epoch, answer),
            other => unreachable!("not a replication message: {other:?}"),
        }
    }

    pub fn send(&mut self, from: usize, to: usize, wire: Wire) {
        let deliveries = self.net.deliveries(&mut self.rng, from, to);
        for delay_ms in deliveries {
            let wire = wire.clone();
            self.schedule(delay_ms, Event::Deliver { from, to, wire });
        }
    }

    fn on_duties(&mut self, i: usize) -> Result<(), Violation> {
        self.schedule(DUTIES_MS, Event::Duties(i));
        let now_ms = self.now_ms;
        let cluster_id = self.cluster_id.clone();
        if let Some(node) = self.slots[i].node.as_mut() {
            node.duties(now_ms, &cluster_id);
        }
        self.after_raft_input(i)
    }

    fn on_heartbeat_due(&mut self, i: usize) -> Result<(), Violation> {
        let every = self.slots[i].config.cluster.broker_heartbeat_interval_ms;
        self.schedule(every, Event::Heartbeat(i));
        let fallback = self.rng.gen_range(0..self.slots.len()) as i32;
        let Some(node) = self.slots[i].node.as_mut() else {
            return Ok(());
        };
        let (to, hb) = node.heartbeat(fallback);
        if to as usize == i {
            // The controller's own heartbeat goes straight to it.
            return self.on_deliver(i, i, hb);
        }
        self.send(i, to as usize, hb);
        Ok(())
    }

    /// An admin or partition-leader operation, then the next one.
    fn on_operation(&mut self) -> Result<(), Violation> {
        if self.now_ms >= self.operations_until_ms {
            return Ok(());
        }
        let next = self.rng.gen_range(10..100);
        self.schedule(next, Event::Operation);
        let i = self.rng.gen_range(0..self.slots.len());
        if self.slots[i].node.is_none() || self.slots[i].paused_until_ms > self.now_ms {
            return Ok(());
        }
        match self.rng.gen_range(0..40) {
            0..=2 => self.create_topic(i),
            3 => {
                let partitions = self.random_partitions(i);
                let op = ControllerOp::ElectLeaders {
                    election_type: crate::controller::elections::PREFERRED,
                    partitions,
                };
                self.slots[i].node.as_mut().expect("running").execute(op);
            }
            _ => self.produce(i),
        }
        self.after_raft_input(i)
    }

    /// Node `i`, as the controller, creates a topic placed over the live brokers.
    fn create_topic(&mut self, i: usize) {
        if self.topics_created >= 8 {
            return;
        }
        let name = format!("t{}", self.topics_created);
        let id: [u8; 16] = self.rng.gen();
        let partitions = self.rng.gen_range(1..=3);
        let unclean = self.rng.gen_bool(0.2);
        let node = self.slots[i].node.as_mut().expect("running");
        if node.create_topic(&name, id, partitions, unclean) {
            self.topics_created += 1;
        }
    }

    fn random_partitions(&mut self, i: usize) -> Vec<(String, i32)> {
        let node = self.slots[i].node.as_ref().expect("running");
        let all = node.applied.read(|c| {
            c.topics
                .iter()
                .flat_map(|t| (0..t.partitions as i32).map(|p| (t.name.clone(), p)))
                .collect::<Vec<_>>()
        });
        all.into_iter().filter(|_| self.rng.gen_bool(0.5)).collect()
    }

    /// A producer that took its metadata from node `i` sends a batch to the leader that
    /// names, acks=all or acks=1.
    fn produce(&mut self, i: usize) {
        let node = self.slots[i].node.as_ref().expect("running");
        let led: Vec<(super::replication::Tp, i32)> = node.applied.read(|c| {
            super::replication::assignments(c)
                .map(|(tp, a)| (tp, a.leader))
                .filter(|(_, leader)| *leader >= 0)
                .collect()
        });
        if led.is_empty() {
            return;
        }
        let (tp, leader) = led[self.rng.gen_range(0..led.len())];
        let payload = self.next_payload;
        self.next_payload += 1;
        let acks_all = self.rng.gen_bool(0.8);
        self.send(
            i,
            leader as usize,
            Wire::Produce {
                tp,
                payload,
                acks_all,
            },
        );
    }

    fn end_faults(&mut self) {
        self.faulting = false;
        self.net.heal_all();
        self.trace
            .note(self.now_ms, "faults end; links heal".into());
        for i in 0..self.slots.len() {
            self.slots[i].paused_until_ms = 0;
            self.slots[i].disk.heal();
            if self.slots[i].node.is_none() {
                self.schedule(0, Event::Restart(i));
            }
        }
    }
}

fn event_node(event: &Event) -> Option<usize> {
    match event {
        Event::Tick(i)
        | Event::Duties(i)
        | Event::Heartbeat(i)
        | Event::Replicate(i)
        | Event::Flush(i) => Some(*i),
        Event::Deliver { to, .. } => Some(*to),
        Event::Operation | Event::Fault | Event::Restart(_) | Event::Heal(_) | Event::EndFaults => {
            None
        }
    }
}

fn describe(node: &SimNode) -> String {
    let s = node.raft.status();
    format!(
        "term {}, commit {}, snapshot {}",
        s.term, s.commit, s.snapshot_index
    )
}

/// A node's config: production defaults, with snapshots often enough to be exercised.
fn node_config(id: i32, voters: &[Voter]) -> Config {
    let mut config = Config {
        node_id: id,
        data_dir: "/data".into(),
        ..Config::default()
    };
    config.cluster.snapshot_after_entries = 64;
    config.voters = voters
        .iter()
        .map(|v| format!("{}@{}", v.id, v.rpc))
        .collect();
    config
}
