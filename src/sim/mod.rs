//! The deterministic simulator (`sluice-sim`, `scripts/simulate`): the production controller
//! code of N nodes, run on one thread over a simulated network, disks and clocks, every fault
//! drawn from one seed, with the cluster's invariants checked after every event
//! (`checks.rs`). No glommio, no wall clock, no threads, and no iteration over a randomly
//! seeded hash map: a seed always replays the same run and prints the same output.
//!
//! What runs as production code: raft-rs with the controller's `RaftNode` and `RaftStore`
//! (over `SimDisk`), `Applied` and the metadata records, broker sessions and fencing
//! (`liveness`), placement, elections and AlterPartition (`replication_op`). What the
//! simulator stands in for: the glommio tasks that drive them (`node.rs`), RPC (`network.rs`),
//! the files (`disk.rs`).

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
        stats: world.stats,
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
