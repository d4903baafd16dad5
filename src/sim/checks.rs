//! The invariants the simulator checks after every event, over what the nodes hold:
//!
//! - at most one controller (Raft leader) per term;
//! - committed metadata logs agree: an index, once committed anywhere, holds the same entry on
//!   every node that commits it, for the rest of the run (so no committed entry is lost);
//! - applied catalogs agree: nodes that applied the same index hold the same catalog;
//! - a node's commit index never goes back while it runs;
//! - every partition: its in-sync set is within its replicas and not empty, its leader is in
//!   its in-sync set (or there is none), and at most one leader per leader epoch.

use super::node::SimNode;
use crate::storage::catalog::CatalogRecord;
use std::collections::BTreeMap;

/// An invariant broken: which, and the details.
#[derive(Debug, Clone)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

fn violation(invariant: &'static str, detail: String) -> Result<(), Violation> {
    Err(Violation { invariant, detail })
}

/// What a node has been checked up to, in its current run.
#[derive(Default, Clone, Copy)]
struct Seen {
    commit: u64,
    applied: u64,
}

#[derive(Default)]
pub struct Checker {
    leader_of_term: BTreeMap<u64, i32>,
    /// Index → (term, CRC32C of the entry's context and data).
    committed: BTreeMap<u64, (u64, u32)>,
    /// Applied index → CRC32C of the catalog there.
    catalogs: BTreeMap<u64, u32>,
    /// (topic id, partition, leader epoch) → leader.
    partition_leaders: BTreeMap<([u8; 16], i32, i32), i32>,
    seen: BTreeMap<i32, Seen>,
}

impl Checker {
    /// A node (re)started: its commit index may legitimately start lower (a commit learned
    /// from the leader is not synced).
    pub fn restarted(&mut self, node_id: i32) {
        self.seen.remove(&node_id);
    }

    /// Every invariant over `node` after an event touched it.
    pub fn check(&mut self, node: &SimNode) -> Result<(), Violation> {
        let status = node.raft.status();
        if status.leader {
            let first = *self.leader_of_term.entry(status.term).or_insert(node.id);
            if first != node.id {
                let detail = format!(
                    "term {}: node {first} and node {} both led",
                    status.term, node.id
                );
                return violation("at most one controller per term", detail);
            }
        }
        let seen = self.seen.get(&node.id).copied().unwrap_or_default();
        if status.commit < seen.commit {
            let detail = format!(
                "node {}: commit index {} after {}",
                node.id, status.commit, seen.commit
            );
            return violation("a running node's commit index never goes back", detail);
        }
        self.check_log(node, seen.commit, status.commit)?;
        if status.applied != seen.applied {
            self.check_catalog(node, status.applied)?;
        }
        self.seen.insert(
            node.id,
            Seen {
                commit: status.commit,
                applied: status.applied,
            },
        );
        Ok(())
    }

    /// The entries `node` committed after `from` up to `to` match what any node committed at
    /// those indexes.
    fn check_log(&mut self, node: &SimNode, from: u64, to: u64) -> Result<(), Violation> {
        let low = (from + 1).max(node.raft.first_index());
        if low > to {
            return Ok(());
        }
        let entries = node.raft.entries(low, to).map_err(|e| Violation {
            invariant: "committed entries are readable",
            detail: format!("node {}: entries {low}..={to}: {e}", node.id),
        })?;
        for e in entries {
            let crc = crc32c::crc32c_append(crc32c::crc32c(&e.context), &e.data);
            let first = *self.committed.entry(e.index).or_insert((e.term, crc));
            if first != (e.term, crc) {
                let detail = format!(
                    "index {}: node {} committed term {} (crc {crc:08x}), committed before: term {} (crc {:08x})",
                    e.index, node.id, e.term, first.0, first.1
                );
                return violation("committed metadata logs agree", detail);
            }
        }
        Ok(())
    }

    fn check_catalog(&mut self, node: &SimNode, applied: u64) -> Result<(), Violation> {
        let crc = node
            .applied
            .read(|c| crate::storage::catalog::encode(c).map_or(0, |bytes| crc32c::crc32c(&bytes)));
        let first = *self.catalogs.entry(applied).or_insert(crc);
        if first != crc {
            let detail = format!(
                "node {} at applied index {applied}: catalog crc {crc:08x}, another node's {first:08x}",
                node.id
            );
            return violation("applied catalogs agree", detail);
        }
        node.applied.read(|c| self.check_partitions(node.id, c))
    }

    fn check_partitions(&mut self, node_id: i32, c: &CatalogRecord) -> Result<(), Violation> {
        for t in &c.topics {
            for (p, a) in t.assignment.iter().enumerate() {
                let name = format!("{}-{p} on node {node_id}", t.name);
                if a.isr.is_empty() || a.isr.iter().any(|n| !a.replicas.contains(n)) {
                    let detail = format!("{name}: in sync {:?}, replicas {:?}", a.isr, a.replicas);
                    return violation("ISR ⊆ replicas, never empty", detail);
                }
                if a.leader != -1 && !a.isr.contains(&a.leader) {
                    let detail = format!("{name}: leader {} outside in sync {:?}", a.leader, a.isr);
                    return violation("a partition's leader is in sync", detail);
                }
                let key = (t.id, p as i32, a.leader_epoch);
                let first = *self.partition_leaders.entry(key).or_insert(a.leader);
                if first != a.leader {
                    let detail = format!(
                        "{name}: epoch {} led by {} and by {first}",
                        a.leader_epoch, a.leader
                    );
                    return violation("at most one leader per partition per epoch", detail);
                }
            }
        }
        Ok(())
    }

    /// Entries committed anywhere so far.
    pub fn committed_entries(&self) -> usize {
        self.committed.len()
    }
}
