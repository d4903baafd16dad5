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
use super::clients::{ClientEvent, Clients};
use super::disk::{DiskFaults, SimDisk};
use super::groups::{Groups, SimCoordinator};
use super::network::{Connection, Network};
use super::node::{SimNode, Wire};
use super::replica_checks::History;
use super::replication::{NodeReplicas, Waiting};
use super::trace::Trace;
use super::txn_client::TxnClient;
use super::txns::{SimTxnCoordinator, TxnRecords};
use crate::config::{Config, Voter};
use crate::controller::ControllerOp;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// The clients' end of a connection (`World::send_ordered`).
pub const CLIENT: usize = usize::MAX;
/// The transactional producer's end of its connections (`TxnClient`, version 1).
pub const TXN_CLIENT: usize = usize::MAX - 1;

/// Bound on events one run may take (a livelock is a failure, not a hang).
const MAX_EVENTS: u64 = 2_000_000;
/// The active controller's duties run this often (`cluster::FENCE_CHECK_MS`).
const DUTIES_MS: u64 = 50;

#[derive(Debug)]
pub enum Event {
    Tick(usize),
    Deliver {
        from: usize,
        to: usize,
        wire: Wire,
    },
    /// A message on a connection (`World::send_ordered`), delivered only if the connection
    /// it was sent on is still the current one between its ends.
    DeliverOn {
        connection: Connection,
        from: usize,
        to: usize,
        wire: Wire,
    },
    Duties(usize),
    Heartbeat(usize),
    Operation,
    Fault,
    /// Every node loses power (a fault drawn after a roll: `now_and_then_power_cut`).
    PowerCut,
    Restart(usize),
    Replicate(usize),
    Flush(usize),
    /// The fdatasync of a node's flusher pass returns.
    Synced(usize),
    Heal(Vec<(usize, usize)>),
    EndFaults,
    Client(ClientEvent),
    /// A stopped node's stop is over.
    Resume(usize),
}

/// A node's place in the world: its disk outlives its process.
pub struct Slot {
    pub disk: Rc<SimDisk>,
    pub node: Option<SimNode>,
    config: Arc<Config>,
    /// The process is stopped (SIGSTOP) until then: its events wait in `held`.
    pub paused_until_ms: u64,
    held: Vec<Event>,
    /// Its clock runs this many per mille fast or slow (ticks come that much early or late).
    skew_permille: i64,
    /// How far its monotonic clock has jumped ahead (a host that stalled the VM, say).
    pub clock_jump_ms: u64,
    /// Its flusher's fdatasync takes up to this long.
    pub flush_max_ms: u64,
    /// Bumped at each start, so the events of a crashed run are dropped.
    pub run: u64,
    pub partitions: NodeReplicas,
    /// The group coordinator of the running process.
    pub coordinator: Option<SimCoordinator>,
    /// The transaction coordinator of the running process.
    pub txn: Option<SimTxnCoordinator>,
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
    pub power_cuts: u64,
    pub pauses: u64,
    pub cuts: u64,
    pub clock_jumps: u64,
    pub disk_faults: u64,
    pub elections: u64,
    pub committed: u64,
    pub idempotent_acked: u64,
    pub consumed: u64,
    pub offsets_committed: u64,
    pub offsets_fetched: u64,
    pub generations_joined: u64,
    pub txns_ended: u64,
    pub read_committed: u64,
    /// Replica logs whose torn tail the production recovery cut after a crash.
    pub tails_cut: u64,
    /// Segments the replica logs rolled.
    pub rolls: u64,
}

pub struct World {
    pub now_ms: u64,
    pub rng: ChaCha8Rng,
    agenda: Agenda,
    pub slots: Vec<Slot>,
    pub net: Network,
    pub trace: Trace,
    pub workload: Workload,
    /// acks=all produces waiting for their leader's high watermark.
    pub waiting: Vec<Waiting>,
    pub ledger: Ledger,
    pub clients: Clients,
    pub groups: Groups,
    pub txn_client: TxnClient,
}

/// The events to come, in time order (ties in the order they were scheduled), each tagged with
/// the run of the node it belongs to.
#[derive(Default)]
struct Agenda {
    queue: BTreeMap<(u64, u64), (u64, Event)>,
    next_seq: u64,
}

impl Agenda {
    fn push(&mut self, at_ms: u64, run: u64, event: Event) {
        self.next_seq += 1;
        self.queue.insert((at_ms, self.next_seq), (run, event));
    }

    /// The next event: its time, its node's run, the event.
    fn pop(&mut self) -> Option<(u64, u64, Event)> {
        let ((at_ms, _), (run, event)) = self.queue.pop_first()?;
        Some((at_ms, run, event))
    }
}

/// What the run does besides faults: the cluster it builds, the topics it made, whether the
/// faulty phase is on, and when operations stop.
pub struct Workload {
    pub faulting: bool,
    pub faults: super::faults::FaultMix,
    cluster_id: String,
    topics_created: u32,
    /// Operations stop then, so that the end of the quiet phase sees no change in flight.
    operations_until_ms: u64,
}

/// What the run saw, for the checks and the summary line: the controller log's checker, the
/// partitions' history, the transaction coordinator's records, the read_committed reads not
/// yet resolved, and the counts.
#[derive(Default)]
pub struct Ledger {
    pub checker: Checker,
    pub history: History,
    pub txns: TxnRecords,
    /// Transactional batches read_committed returned before their marker was committed:
    /// (partition, offset, producer id, the leader that returned it).
    pub unresolved_reads: Vec<(super::replication::Tp, i64, i64, usize)>,
    /// The highest controller entry any node has applied.
    pub first_applied: u64,
    pub stats: Stats,
}

impl World {
    pub fn new(seed: u64) -> World {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let nodes: usize = if rng.gen_bool(0.5) { 3 } else { 5 };
        let net = Network::draw(&mut rng);
        let faults = DiskFaults {
            fsync_error_ppm: if rng.gen_bool(0.3) { 2_000 } else { 0 },
            no_space_ppm: if rng.gen_bool(0.3) { 1_000 } else { 0 },
            writeback_permille: if rng.gen_bool(0.5) { 900 } else { 500 },
            hole_permille: if rng.gen_bool(0.5) { 900 } else { 500 },
        };
        let voters: Vec<Voter> = (0..nodes as i32)
            .map(|id| Voter {
                id,
                rpc: format!("127.0.0.1:{}", 19_000 + id),
            })
            .collect();
        // The cluster's timing, drawn per seed up to production's defaults (broker session
        // 9 s, replica lag 30 s), so that which of fencing and the lag bound comes first
        // varies; above what one lost message costs (a heartbeat every second; a fetch retried
        // after 2 s, plus a latency spike of up to 5 s), so that a healed cluster settles.
        let session_ms = rng.gen_range(4_000..=9_000);
        let lag_ms = rng.gen_range(8_000..=30_000);
        let slots = (0..nodes)
            .map(|i| {
                let disk_rng = ChaCha8Rng::seed_from_u64(rng.gen());
                let mut config = node_config(i as i32, &voters);
                config.cluster.broker_session_timeout_ms = session_ms;
                config.cluster.replica_lag_time_max_ms = lag_ms;
                Slot {
                    disk: Rc::new(SimDisk::new(disk_rng, faults)),
                    node: None,
                    config: Arc::new(config),
                    // Half the nodes have a slow disk, one in five a very slow one.
                    flush_max_ms: [5, 5, 5, 5, 5, 60, 60, 60, 250, 250][rng.gen_range(0..10)],
                    paused_until_ms: 0,
                    held: Vec::new(),
                    skew_permille: rng.gen_range(-50..=50),
                    clock_jump_ms: 0,
                    run: 0,
                    partitions: NodeReplicas::default(),
                    coordinator: None,
                    txn: None,
                }
            })
            .collect();
        let fault_mix = super::faults::FaultMix::draw(&mut rng);
        let cluster_id = format!("sim{:016x}", rng.gen::<u64>());
        let txn_client = TxnClient::new(rng.gen_bool(0.5));
        World {
            now_ms: 0,
            rng,
            agenda: Agenda::default(),
            slots,
            net,
            trace: Trace::default(),
            workload: Workload {
                faulting: true,
                faults: fault_mix,
                cluster_id,
                topics_created: 0,
                operations_until_ms: 0,
            },
            waiting: Vec::new(),
            ledger: Ledger::default(),
            clients: Clients::new(),
            groups: Groups::default(),
            txn_client,
        }
    }

    /// When operations (and new transactions) stop: before the quiet phase's second half.
    pub fn operations_until_ms(&self) -> u64 {
        self.workload.operations_until_ms
    }

    /// Schedules `event` `after_ms` from now, for the current run of its node.
    pub fn schedule(&mut self, after_ms: u64, event: Event) {
        let run = event_node(&event).map_or(0, |i| self.slots[i].run);
        self.agenda.push(self.now_ms + after_ms, run, event);
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
        self.workload.operations_until_ms = end_ms.saturating_sub(quiet_ms / 2);
        while let Some((at_ms, run, event)) = self.agenda.pop() {
            if at_ms > end_ms {
                break;
            }
            self.now_ms = at_ms;
            self.ledger.stats.events += 1;
            if self.ledger.stats.events > MAX_EVENTS {
                let detail = format!("{MAX_EVENTS} events by {at_ms} ms");
                return Err(Violation {
                    invariant: "a run ends within its event bound",
                    detail,
                });
            }
            self.dispatch(run, event)?;
        }
        self.ledger.stats.committed = self.ledger.checker.committed_entries() as u64;
        self.ledger.stats.txns_ended = self.txn_client.ended;
        let replicas = self
            .slots
            .iter()
            .flat_map(|s| s.partitions.replicas.values());
        for r in replicas {
            self.ledger.stats.rolls += r.log.rolls;
            self.ledger.stats.disk_faults += r.log.faults();
        }
        super::converged(self)
    }

    fn dispatch(&mut self, run: u64, event: Event) -> Result<(), Violation> {
        if let Some(i) = event_node(&event) {
            if run != self.slots[i].run {
                self.lost(&event);
                return Ok(());
            }
            if let Event::Resume(i) = event {
                return self.resume(i);
            }
            if self.slots[i].paused_until_ms > self.now_ms {
                // A stopped process does nothing; what was sent to it waits in its socket,
                // and is taken in the order it came once it runs again.
                self.slots[i].held.push(event);
                return Ok(());
            }
        }
        self.handle(event)
    }

    /// A stopped node `i` runs again once its last stop is over: everything held for it, in
    /// the order it came.
    fn resume(&mut self, i: usize) -> Result<(), Violation> {
        if self.slots[i].paused_until_ms > self.now_ms {
            return Ok(()); // stopped again meanwhile; a later Resume comes
        }
        for event in std::mem::take(&mut self.slots[i].held) {
            self.handle(event)?;
        }
        Ok(())
    }

    /// Stops node `i` (SIGSTOP) for `for_ms`: a stop of a stopped node ends no earlier than
    /// the first.
    pub(super) fn pause(&mut self, i: usize, for_ms: u64) {
        let until = self.now_ms + for_ms;
        if until > self.slots[i].paused_until_ms {
            self.slots[i].paused_until_ms = until;
            self.schedule(for_ms, Event::Resume(i));
        }
    }

    fn handle(&mut self, event: Event) -> Result<(), Violation> {
        match event {
            Event::Tick(i) => self.on_tick(i),
            Event::Deliver { from, to, wire } => self.on_deliver(from, to, wire),
            Event::DeliverOn {
                connection,
                from,
                to,
                wire,
            } => {
                if self.net.is_open(connection) {
                    return self.on_deliver(from, to, wire);
                }
                self.lost(&Event::Deliver { from, to, wire });
                Ok(())
            }
            Event::Duties(i) => self.on_duties(i),
            Event::Heartbeat(i) => self.on_heartbeat_due(i),
            Event::Operation => self.on_operation(),
            Event::Replicate(i) => self.on_replicate(i),
            Event::Flush(i) => self.on_flush(i),
            Event::Synced(i) => self.on_synced(i),
            Event::Fault => self.on_fault(),
            Event::PowerCut => {
                if self.workload.faulting {
                    self.power_cut();
                }
                Ok(())
            }
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
            Event::Client(event) => self.on_client(event),
            Event::Resume(i) => self.resume(i),
        }
    }

    /// Starts (or restarts) node `i` on what its disk holds.
    pub fn start(&mut self, i: usize) -> Result<(), Violation> {
        for event in std::mem::take(&mut self.slots[i].held) {
            self.lost(&event);
        }
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
        self.ledger.checker.restarted(i as i32);
        self.slots[i].node = Some(node);
        let coordinator =
            SimCoordinator::new(self.clock_ms(i), &self.slots[i].config, self.rng.gen());
        self.slots[i].coordinator = Some(coordinator);
        let txn = SimTxnCoordinator::new(&self.slots[i].config, self.clock_ms(i));
        self.slots[i].txn = Some(txn);
        self.draw_election_timeout(i);
        self.schedule(self.tick_ms(i), Event::Tick(i));
        self.schedule(DUTIES_MS, Event::Duties(i));
        self.schedule(10, Event::Heartbeat(i));
        self.schedule(super::replication::REPLICATE_MS, Event::Replicate(i));
        Ok(())
    }

    /// Node `i`'s process dies: its unsynced writes are lost (some torn at the tail; all of
    /// them when `power_cut`, its machine losing power).
    pub fn crash(&mut self, i: usize, why: &str, power_cut: bool) {
        if self.slots[i].node.take().is_none() {
            return;
        }
        self.slots[i].coordinator = None;
        self.slots[i].txn = None;
        for event in std::mem::take(&mut self.slots[i].held) {
            self.lost(&event);
        }
        self.slots[i].run += 1;
        // Its produce requests waiting for their high watermark die with it (their clients and
        // coordinators time out and retry): a leadership of the next process may have the same
        // generation, and must not answer them.
        self.waiting.retain(|w| w.node != i);
        let lost = self.slots[i].disk.crash(power_cut);
        let tails_cut = self.slots[i].partitions.crash(&mut self.rng, power_cut);
        self.ledger.stats.tails_cut += tails_cut;
        self.ledger.history.restarted(i);
        self.ledger.stats.crashes += 1;
        self.trace.note(
            self.now_ms,
            format!("node {i} crashes ({why}); {lost} unsynced bytes lost"),
        );
    }

    /// Node `i`'s monotonic clock: world time, skewed, plus its jumps. What the node decides
    /// by time (sessions, lag, retries) reads this, never the world's.
    pub fn clock_ms(&self, i: usize) -> u64 {
        let s = &self.slots[i];
        let now = self.now_ms as i64;
        (now + now * s.skew_permille / 1000) as u64 + s.clock_jump_ms
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
            self.lost(&Event::Deliver { from, to, wire });
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
                let now_ms = self.clock_ms(to);
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
            Wire::AlterPartition(tp, request) => self.on_alter_partition(from, to, tp, request)?,
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
                self.ledger.stats.disk_faults += 1;
                self.crash(i, &format!("cannot persist the Raft state: {e}"), false);
                let after_ms = self.rng.gen_range(100..2_000);
                self.schedule(after_ms, Event::Restart(i));
                return Ok(());
            }
        };
        let node = self.slots[i].node.as_ref().expect("still running");
        let after = node.raft.status();
        if after.leader && !before.leader {
            self.ledger.stats.elections += 1;
            self.trace
                .note(self.now_ms, format!("node {i} leads term {}", after.term));
        }
        for (what, result) in handled {
            self.trace
                .note(self.now_ms, format!("node {i} applied {what}: {result:?}"));
        }
        self.ledger.checker.check(node)?;
        if after.applied > self.ledger.first_applied {
            self.ledger.first_applied = after.applied;
            self.check_isr_holds_acked(i, after.applied)?;
        }
        self.decide_waiting_asks(i)
    }

    fn on_replication_wire(&mut self, from: usize, to: usize, wire: Wire) -> Result<(), Violation> {
        match wire {
            Wire::Produce {
                tp,
                payload,
                acks_all,
                stamp,
                producer,
            } => self.on_produce(to, tp, payload, acks_all, stamp, producer),
            Wire::Consume { tp, offset } => self.on_consume(to, tp, offset),
            Wire::OffsetCommit { tp, offset, member } => {
                self.on_offset_commit(to, tp, offset, member)
            }
            Wire::Member(request) => {
                self.on_member_request(to, request);
                Ok(())
            }
            Wire::OffsetFetch { tp, floor } => {
                self.on_offset_fetch(to, tp, floor);
                Ok(())
            }
            Wire::Fetch { tp, epoch, offset } => self.on_fetch(to, from, tp, epoch, offset),
            Wire::FetchReply { tp, epoch, answer } => self.on_fetch_reply(to, tp, epoch, answer),
            Wire::EpochQuery { tp, epoch, latest } => {
                self.on_epoch_query(to, from, tp, epoch, latest);
                Ok(())
            }
            Wire::EpochAnswer {
                tp,
                epoch,
                latest,
                answer,
            } => self.on_epoch_answer(to, tp, epoch, latest, answer),
            Wire::IsrRefused(tp, request) => self.on_isr_refused(to, tp, &request),
            Wire::Txn { request, op } => {
                self.on_txn_request(to, request, op);
                Ok(())
            }
            Wire::VerifyTxn {
                tp,
                partition,
                payload,
                stamp,
            } => {
                self.on_verify_txn(to, from, (tp, partition), (payload, stamp));
                Ok(())
            }
            Wire::TxnVerified {
                tp,
                payload,
                stamp,
                result,
            } => {
                self.on_txn_verified(to, tp, (payload, stamp), result);
                Ok(())
            }
            Wire::WriteMarker(marker) => {
                self.on_write_marker(to, marker);
                Ok(())
            }
            Wire::MarkerWritten { marker, result } => {
                self.on_marker_written(to, marker, result);
                Ok(())
            }
            Wire::ConsumeCommitted { tp, offset } => self.on_consume_committed(to, tp, offset),
            other => unreachable!("not a replication message: {other:?}"),
        }
    }

    /// Sends on one connection (`Network::ordered`): `connection` names its two ends, a
    /// client's as `CLIENT`.
    /// Returns whether the message is on its way (not lost at once).
    pub fn send_ordered(
        &mut self,
        connection: (usize, usize),
        from: usize,
        to: usize,
        wire: Wire,
    ) -> bool {
        let now_ms = self.now_ms;
        let sent = self
            .net
            .ordered(&mut self.rng, (from, to), connection, now_ms);
        if let Some((delay_ms, connection)) = sent {
            let event = Event::DeliverOn {
                connection,
                from,
                to,
                wire,
            };
            self.schedule(delay_ms, event);
        }
        sent.is_some()
    }

    /// An event that will never be handled (its node died, or it was stopped and killed).
    fn lost(&mut self, event: &Event) {
        if let Event::Deliver {
            wire: Wire::OffsetCommit { tp, .. },
            ..
        } = event
        {
            self.groups.commit_settled(*tp);
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
        let now_ms = self.clock_ms(i);
        let cluster_id = self.workload.cluster_id.clone();
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
        if self.now_ms >= self.workload.operations_until_ms {
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
            4..=11 => self.produce_idempotent(i),
            12..=17 => self.consume(i),
            18..=19 => self.commit_offset(i),
            20 => self.fetch_offset(i),
            21..=23 => self.member_step(i),
            24..=28 => self.txn_step(i),
            29..=30 => self.consume_committed(i),
            _ => self.produce(i),
        }
        self.after_raft_input(i)
    }

    /// Node `i`, as the controller, creates a topic placed over the live brokers.
    fn create_topic(&mut self, i: usize) {
        if self.workload.topics_created >= 8 {
            return;
        }
        // The first holds the group offsets, the second transactions' states (one partition
        // each, never unclean).
        let first = self.workload.topics_created < 2;
        let name = match self.workload.topics_created {
            0 => crate::storage::catalog::OFFSETS_TOPIC.to_string(),
            1 => crate::storage::catalog::TXN_STATE_TOPIC.to_string(),
            n => format!("t{n}"),
        };
        let id: [u8; 16] = self.rng.gen();
        let partitions = if first { 1 } else { self.rng.gen_range(1..=3) };
        let unclean = !first && self.rng.gen_bool(0.2);
        let node = self.slots[i].node.as_mut().expect("running");
        if node.create_topic(&name, id, partitions, unclean) {
            self.workload.topics_created += 1;
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

    fn end_faults(&mut self) {
        self.workload.faulting = false;
        self.net.heal_all();
        self.trace
            .note(self.now_ms, "faults end; links heal".into());
        // A stopped process runs its pause out (at most 15 s, within the quiet phase): what
        // waits in its sockets is then taken in the order it came, before anything sent later.
        for i in 0..self.slots.len() {
            self.slots[i].disk.heal();
            for r in self.slots[i].partitions.replicas.values() {
                r.log.heal();
            }
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
        | Event::Flush(i)
        | Event::Synced(i)
        | Event::Resume(i) => Some(*i),
        Event::Deliver { to, .. } | Event::DeliverOn { to, .. } => Some(*to),
        Event::Operation
        | Event::Fault
        | Event::PowerCut
        | Event::Restart(_)
        | Event::Heal(_)
        | Event::EndFaults
        | Event::Client(_) => None,
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
    config.cluster.snapshot_after_entries = 32;
    // Transactions past their timeout are aborted within a second, well inside a run.
    config.transactions.check_interval_ms = 1_000;
    config.voters = voters
        .iter()
        .map(|v| format!("{}@{}", v.id, v.rpc))
        .collect();
    config
}
