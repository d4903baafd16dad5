//! Partition replication in a cluster (Kafka's model: followers pull, the controller keeps the
//! in-sync set). Per shard:
//! - `fetcher.rs`: one task per leader this shard's partitions follow, fetching over that
//!   leader's Kafka listener, appending, syncing, reporting through its next fetch;
//! - `follower_rules.rs`: the follower's decisions without I/O (what to ask its leader next,
//!   what to do with a fetch answer), run by `fetcher.rs` and by the simulator alike;
//! - `isr.rs`: the leader's side of the in-sync set: followers that fell behind leave it,
//!   caught-up ones join, each change asked of the controller (AlterPartition);
//! - the follower's Kafka connection is `rpc/kafka_client.rs`.
//!
//! What commits a record is `partition/commit.rs`; what a partition does as leader or follower
//! is `partition/replica.rs`.
//!
//! ## The model
//!
//! Kafka's model, made stricter where Kafka is loose: followers pull; the controller keeps each
//! partition's in-sync replicas (ISR) and elects leaders only from them; an acknowledgement means
//! "fsynced on every in-sync replica".
//!
//! - **Roles.** Every applied catalog gives each open partition its assignment
//!   (`Replication::assign`): replicas, ISR, leader, leader epoch. A node that becomes leader
//!   starts a new epoch in the partition's epoch cache at its log end (`storage/epochs.rs`,
//!   written before any batch of that epoch); one that becomes follower marks the log for
//!   truncation and wakes every waiter (parked acks=all produces answer NOT_LEADER_OR_FOLLOWER).
//!   An acks=all produce is answered OK only while the leadership it was appended under
//!   (`Partition::leadership`'s generation) still holds: a node that follows by then may learn a
//!   high watermark past the write from the new leader, which covers other records at those
//!   offsets (`Shard::wait_committed`).
//! - **Followers pull** (`replication/fetcher.rs`): per shard, one task per leader its partitions
//!   follow, over one connection to that leader's Kafka listener. A round: for partitions that
//!   started following a new epoch, OffsetForLeaderEpoch(newest epoch in the local log) and
//!   truncate to where the leader says it ends (KIP-279's rule; when the leader's answer is an
//!   epoch older than the one asked about, the follower asks again from the cut, since its own
//!   older epochs' tail may still diverge: `LeaderEpochs::cut_point`); then one Fetch (replica id
//!   set, sessionless, 500 ms long poll) of every followed partition from its log end; append what
//!   came as it is (`append_replica`: offsets, epochs, CRCs kept; idempotent producer state rebuilt
//!   from it); wait for the flusher's fdatasync; take the leader's high watermark and its log start
//!   (DeleteRecords and retention on the leader reach the follower, as far as it has committed).
//!   Only then the next fetch, whose offsets tell the leader what this follower has synced. A
//!   follower whose whole log lies below the leader's log start (a new replica of a topic retention
//!   has trimmed, a lost partition directory) is answered OFFSET_OUT_OF_RANGE with that start: it
//!   fences the journal and replaces its log with an empty one starting there
//!   (`Replication::restart_log_at`, `PartitionLog::restart_at`; Kafka's `truncateFullyAndStartAt`),
//!   moved back to the base of the first batch the leader sends when the start lies inside it.
//! - **The leader** serves a replica's fetch on the owning shard like a consumer's, with three
//!   differences: it notes the follower's fetch offset as its synced end (`commit.rs`), it reads
//!   up to the written end instead of the high watermark (so the follower's fsync runs beside the
//!   leader's), and it long-polls on the written end's monitor. Records still go out by sendfile.
//! - **Commit rule** (`partition/commit.rs`): a leader's high watermark is the smallest of its
//!   own synced end and every other ISR member's reported synced end (a member not heard from
//!   since this leader took over holds it); a follower's is its leader's, as far as it has
//!   synced. A batch-end map (`LogPositions::committable_at`) turns the offset into a log
//!   position. acks=all waits for it; with fewer ISR members than `min.insync.replicas` the
//!   produce is refused (NOT_ENOUGH_REPLICAS) or, if the set shrank while it waited,
//!   NOT_ENOUGH_REPLICAS_AFTER_APPEND.
//! - **ISR changes** (`replication/isr.rs`): every 50–250 ms each leader compares the ISR with
//!   what it should be (members not caught up within `replica_lag_time_max_ms` leave; replicas
//!   join whose synced end reached the high watermark and the epoch's start, reported by their
//!   current registration and recently enough that the next pass would keep them) and asks the
//!   controller (`ControllerOp::AlterPartition`). One ask is outstanding per partition; it names
//!   the committed set it was computed from, and the controller takes it only from the current
//!   leader in its current epoch, while that set stands (else INVALID_UPDATE_VERSION), with every
//!   joiner still registered under the incarnation the leader heard from (else
//!   INELIGIBLE_REPLICA, KIP-903), committing a `ChangeIsr` record. A shrink counts once
//!   installed; until then the committed ISR is used, so it never lets the high watermark pass a
//!   record the old set's members lack. The ask stays outstanding (sent again every 2 s) until
//!   the leader installs another set or the controller refuses it for good. A leader forgets a
//!   follower's position when the catalog shows that replica registered again or fenced.
//! - **Elections.** Fencing (session expiry) and controlled shutdown move a broker's
//!   leaderships to a live ISR member (new epoch) and take it out of ISRs of more than one
//!   member; the last ISR member is kept, so a partition whose only in-sync copy is gone has no
//!   leader rather than a leader without its data. Registration gives leaderless partitions back
//!   to a returning ISR member. Preferred-leader rebalancing and ElectLeaders use
//!   `controller/elections.rs`. An unclean election (a replica that is not in sync) happens only
//!   when ElectLeaders asks for one, or, where `unclean.leader.election.enable` is true, when the
//!   last in-sync replica is fenced or a replica registers while no in-sync one is back.
//! - **Reassignment** (`controller/reassignment.rs`, KIP-455): a move from replicas R to T sets
//!   the replicas to T then R − T with `adding`/`removing` in the assignment; the added brokers
//!   open the partition as followers and catch up, the leader's ISR keeping takes them in, and
//!   the active controller's pass (every 250 ms, under the controller lock) completes the move:
//!   replicas T, ISR without the removed, a new leader from T if the old one left. A shard
//!   deletes a partition's files once this node no longer holds a replica. Records that set a
//!   partition's ISR or whole assignment carry the leader epoch they were computed in, and change
//!   nothing in another (a fence applied in between wins).
//! - **Controlled shutdown** (SIGTERM, `cluster::release_leadership`): heartbeats stop, the
//!   controller fences the node's registration, and every shard keeps serving until the node has
//!   installed that (at most 15 s), so clients are redirected, not cut off.
//! - **Groups** (`group/replay.rs`): each shard loads a `__consumer_offsets` partition when this
//!   node becomes its leader, once the high watermark reaches the epoch's start (so every commit
//!   earlier leaders acknowledged is read; never before, however long that takes), and forgets
//!   its groups when leadership moves away. Until loaded, its groups' requests answer
//!   COORDINATOR_LOAD_IN_PROGRESS.
//!
//! - **Restarts** (`storage/hw_checkpoint.rs`): a replicated partition checkpoints its high
//!   watermark every 5 s and at close; after a restart it starts there (or at the log start),
//!   not at its recovered log end, since a tail it wrote may never have reached the other
//!   in-sync replicas. A lone copy's whole recovered log is committed, as before.
//!
//! - **A restart takes up no role before registering** (`storage/catalog.rs`,
//!   `Catalog::registered`): the recovered catalog's roles belong to the previous incarnation,
//!   whose unsynced tail may be lost while followers copied it; until the controller applies
//!   this incarnation's registration every partition is held back (leader -1), so produce and
//!   fetch answer NOT_LEADER_OR_FOLLOWER and clients retry. The controller fences the previous
//!   incarnation when the new one registers (`controller/records.rs`).
//! - **A requested joiner counts** (`partition/commit.rs`): from the moment a leader asks for
//!   a replica to join the ISR, the commit rule waits for it too (Kafka's "maximal ISR"), and
//!   goes on waiting for as long as the controller may still take the ask (until another set is
//!   installed, or a refusal for good), so a write acknowledged while the change was in flight is
//!   on the new member.
//!
//! At `metadata.version` 1 (0.1's formats) AlterPartition's compare-and-set is on the in-sync
//! set's members, not on a version: an ask delayed past a fence, behind a later ask of the same
//! leader that restored the set it came from, would still apply. Level 2's partition epochs
//! (`controller/mod.rs`, "The cluster") close it.

pub mod fetcher;
pub mod follower_rules;
pub mod isr;

use crate::controller::Controllers;
use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

/// How often a shard looks for leaders to follow (a new assignment starts its fetcher within
/// this).
const SUPERVISE_PERIOD_MS: u64 = 100;

/// Runs the shard's replication: starts a fetcher for each leader its partitions follow (each
/// ends by itself when none does any more) and the in-sync set keeper. For a clustered node.
pub async fn run(controllers: Rc<Controllers>) {
    let shard = controllers.shard.clone();
    glommio::spawn_local(isr::keep(controllers)).detach();
    let mut running: HashMap<i32, Rc<Cell<bool>>> = HashMap::new();
    while !shard.is_shutting_down() {
        running.retain(|_, alive| alive.get());
        let mut leaders: Vec<i32> = shard
            .partition_list()
            .iter()
            .filter_map(|p| p.replication().follower_view())
            .map(|v| v.leader)
            .filter(|l| *l >= 0)
            .collect();
        leaders.sort_unstable();
        leaders.dedup();
        for leader in leaders {
            if running.contains_key(&leader) {
                continue;
            }
            let alive = Rc::new(Cell::new(true));
            running.insert(leader, alive.clone());
            let shard = shard.clone();
            glommio::spawn_local(async move {
                fetcher::follow(shard, leader).await;
                alive.set(false);
            })
            .detach();
        }
        shard.housekeeping_sleep(SUPERVISE_PERIOD_MS).await;
    }
}
