//! The deterministic simulator (`sluice-sim`, `scripts/simulate`): the production controller
//! code of N nodes, run on one thread over a simulated network, disks and clocks, every fault
//! drawn from one seed, with the cluster's invariants checked after every event
//! (`checks.rs`). No glommio, no wall clock, no threads, and no iteration over a randomly
//! seeded hash map: a seed always replays the same run and prints the same output.
//!
//! What runs as production code: raft-rs with the controller's `RaftNode` and `RaftStore`
//! (over `SimDisk`), `Applied` and the metadata records, broker sessions and fencing
//! (`liveness`), placement, elections and AlterPartition (`replication_op`), and each replica's
//! `Partition` (`replica_log.rs`) on a simulated disk: opened as a broker opens it (recovery's
//! cut of a torn tail, the epoch cache, producer state, the transaction index, the high
//! watermark back to its checkpoint), assigned its role from the node's catalog, appended to as
//! the Produce handler appends (idempotent sequences, markers, rolls, the undo of a failed
//! write), read as the Fetch handler reads for a follower (which notes its position: the
//! commit rule) and for consumers (below the last stable offset with the aborted transactions
//! for read_committed), a follower's appends and truncations, the flusher's sync work between
//! `SyncQueue::take_work` and `complete_sync`; and the fetcher's decisions
//! (`replication::follower_rules`). Its batches are real record batches (`batch.rs`).
//! What the simulator stands in for: the glommio tasks that drive them (`node.rs`,
//! `replication.rs` for the fetcher's and the flusher's loops), RPC
//! (`network.rs`), and the disk (`disk.rs`).
//!
//! ## What runs, what is checked
//!
//! `scripts/simulate` builds and runs `sluice-sim` (feature `simulation`). One thread runs N nodes
//! (3 or 5): each a controller (`RaftNode` over `raft_store` on a simulated `Disk`, the production
//! `Applied` state machine and catalog), partition replicas whose decisions are the production ones
//! (`ReplicaState`'s rules over `commit::Replicas`: commit rule, ISR asks and registrations,
//! follower appends; leader epochs and truncation points; `ProducerTable` for idempotent producers, rebuilt from the log on restart and after a
//! truncation by `producer_state::rebuild`; the aborted-transaction index by `txn_index::record`;
//! the catalog's roles), a group coordinator (the production `Coordinator`, loaded by
//! `replay::may_load`/`replay::learn` from the offsets partition's records in the production
//! schemas), and a transaction coordinator (`txns.rs`: the production `txn::state::Coordinator` in
//! the shell `txn::service` and `txn::markers` put around it: loaded once the `__transaction_state`
//! leader's epoch start is committed, each move appended acks=all with min.insync.replicas 2 and
//! applied once committed or abandoned, markers written to each partition's leader and retried, the
//! completion retried while `retries_completion` allows, timeouts every second). Clients outlive
//! the nodes: plain producers (acks=all and acks=1), idempotent producers (one batch in flight per
//! partition, retried with the same sequence), a consumer per partition, and a group client that
//! commits the consumer's positions and fetches them back (in order on one connection per
//! coordinator, as Kafka's clients do) as the group's one member (join with KIP-394's member id
//! round trip, sync, heartbeat, rejoin when its membership is gone; the group's metadata persisted
//! and restored on failover as the broker does), a transactional producer (`txn_client.rs`:
//! InitProducerId, then one transaction at a time over one or two partitions, committed or aborted
//! as the seed draws; fenced, it initialises again) and a read_committed consumer that drops
//! aborted transactions' records as Kafka's consumers do. Everything is drawn from one seed
//! (ChaCha): the cluster's session and lag timings, per-node clock skew and slow disks, message
//! latency (with rare spikes of seconds), drops, duplicates and reordering, one- and two-way cuts
//! that heal, crashes (unsynced writes lost, torn tails, some with zeroed or stale sectors inside; half restarted at once), power cuts of
//! every node at once (no unsynced write survives), fdatasyncs that now and then stall, SIGSTOP-like
//! pauses (what arrives meanwhile is held and taken in order), monotonic clock jumps, failed fsyncs
//! and ENOSPC. Each node decides by its own clock (`World::clock_ms`). There is no wall clock, no
//! thread, and no iteration over a randomly seeded map, so a seed replays byte for byte. Request
//! and response pairs keep TCP's meaning: RPC and client requests arrive in order per connection,
//! and a sender that gives up on one opens a new connection, the old one's messages never
//! delivered (a coordinator resending a transaction marker, a version 1 transactional client
//! retrying); a
//! leader holds a follower fetch that finds nothing for up to 500 ms, as the Fetch handler does; a
//! follower takes only the answer to its outstanding OffsetsForLeaderEpoch query (never one meant
//! for its previous process). Once faults end the network is calm (no drops, duplicates or spikes),
//! so convergence is a property of the cluster, not of luck.
//!
//! Invariants (`src/sim/checks.rs`, `replica_checks.rs`, `clients.rs`, `groups.rs`,
//! `txn_checks.rs`) are checked
//! after every event and at the end after a quiet phase: one controller per term, metadata logs
//! agree, one leader per partition epoch, leader in sync, ISR within replicas, only a partition's
//! current leader (in its current epoch) changes its in-sync set, every in-sync replica holds
//! every committed record when the controller's entries are first applied, HW never backwards
//! on a leader, committed logs are prefixes of one another (these last two not for unclean
//! topics), no acknowledged acks=all write lost, no duplicate with idempotence, a consumer reads only
//! committed batches, an OffsetFetch from the current coordinator never returns less than was
//! acknowledged before it was asked, convergence once faults heal, and for transactions:
//! read_committed never returns a record of an aborted transaction from any replica that leads
//! (its outcome is the next marker of its producer in the committed log), transactions are
//! atomic across their partitions, the aborted-transaction index agrees below the high watermark
//! (a replica that commits a marker holds the entry the first replica to commit it held), every
//! transaction ends once a quorum is back (no leader holds one open, the coordinator holds none
//! prepared or ongoing), and replicas holding the leader's log hold its producer state and index.
//! Transaction states' times are the world's (NTP-synced wall clocks), not the nodes' jumping
//! monotonic clocks. Planted bugs (`src/inject.rs`, simulation builds only) prove the checks
//! bite: `--check-injections` must catch each within 200 seeds. What it does not run:
//! `Partition` itself (`replica.rs` calls its parts as it does), groups of
//! several members (rebalances
//! between them). A leader writes a transactional batch only once the coordinator its catalog
//! names says the transaction holds the partition (KIP-890 part 1, the production
//! `Coordinator::in_transaction`). Each seed draws its own mix of faults (`faults.rs`
//! `FaultMix`). The transactional client speaks transaction version 1 or 2 as the seed
//! draws (version 2's requests travel as any message, late or twice: its epoch bump per
//! transaction fences them).

mod batch;
mod checks;
pub mod cli;
mod clients;
mod disk;
mod faults;
mod groups;
mod members;
mod network;
mod node;
mod replica;
mod replica_checks;
mod replica_log;
mod replication;
mod trace;
mod txn_checks;
mod txn_client;
mod txns;
mod world;

use crate::inject::Bug;
use checks::Violation;
use world::{Stats, World};

/// Virtual time of one seed: faults, then quiet until the cluster must have converged.
const FAULT_MS: u64 = 60_000;
const QUIET_MS: u64 = 30_000;

/// One seed's run: its counts, or the invariant it broke with the trace's tail.
pub struct SeedRun {
    pub stats: Stats,
    pub violation: Option<(Violation, Vec<String>)>,
}

/// Runs one seed; a violation comes with the last `trace_lines` lines of the trace.
pub fn run_seed(seed: u64, bug: Option<Bug>, trace_lines: usize) -> SeedRun {
    crate::inject::plant(bug);
    let mut world = World::new(seed);
    // A panic in the production code (raft-rs's own assertions among them) would stop a
    // broker: it is a violation like any other, reported with the trace.
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        world.run(FAULT_MS, QUIET_MS)?;
        world.txns_converged()
    }))
    .unwrap_or_else(|panic| {
        Err(Violation {
            invariant: "no node panics",
            detail: panic_message(panic.as_ref()),
        })
    });
    crate::inject::plant(None);
    SeedRun {
        stats: world.ledger.stats,
        violation: result
            .err()
            .map(|v| (v, world.trace.tail(trace_lines).cloned().collect())),
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".into()
    }
}

/// After the quiet phase: one controller that every running node follows, every node applied
/// up to its commit with equal catalogs, and every broker registered and not fenced.
fn converged(world: &World) -> Result<(), Violation> {
    let fail = |detail: String| {
        Err(Violation {
            invariant: "the cluster converges once faults heal",
            detail,
        })
    };
    let nodes: Vec<_> = world.slots.iter().filter_map(|s| s.node.as_ref()).collect();
    if nodes.len() != world.slots.len() {
        return fail(format!(
            "{} of {} nodes run",
            nodes.len(),
            world.slots.len()
        ));
    }
    let leaders: Vec<i32> = nodes
        .iter()
        .filter(|n| n.raft.status().leader)
        .map(|n| n.id)
        .collect();
    if leaders.len() != 1 {
        return fail(format!("controllers: {leaders:?}"));
    }
    let catalog = |n: &node::SimNode| n.applied.read(crate::storage::catalog::encode).ok();
    let first = catalog(nodes[0]);
    let states: Vec<String> = nodes
        .iter()
        .map(|n| {
            let s = n.raft.status();
            format!(
                "node {}: term {} applied {} commit {} snapshot {}",
                n.id, s.term, s.applied, s.commit, s.snapshot_index
            )
        })
        .collect();
    let applied = nodes[0].raft.status().applied;
    if nodes
        .iter()
        .any(|n| n.raft.status().applied != applied || catalog(n) != first)
    {
        return fail(format!("catalogs differ: {}", states.join("; ")));
    }
    let brokers = nodes[0].applied.read(|c| c.brokers.clone());
    let unregistered: Vec<i32> = nodes
        .iter()
        .filter(|n| {
            !brokers
                .iter()
                .any(|b| b.node_id == n.id && b.incarnation == n.incarnation && !b.fenced)
        })
        .map(|n| n.id)
        .collect();
    if !unregistered.is_empty() {
        return fail(format!(
            "brokers not registered or fenced: {unregistered:?}"
        ));
    }
    Ok(())
}
