//! Transactions (KIP-98): the transaction coordinator. `state.rs` decides (pure: the time
//! comes in as values); `records.rs` holds `__transaction_state`'s record schemas;
//! `service.rs` is the shell on a shard (persistence, timeouts, loading) and `ops.rs` its
//! operations; `markers.rs` writes the markers that end a transaction, `remote.rs` makes the
//! calls to other nodes (WriteTxnMarkers, verification). The partition side is
//! `partition/txn.rs`.
//!
//! ## How transactions work
//!
//! - A transactional id lives on the leader of its `__transaction_state` partition (FNV hash of
//!   the id), on the shard that owns that partition (`txn::service::route`); a node that does not
//!   lead it answers NOT_COORDINATOR and the client asks FindCoordinator again.
//! - Every move of an id (Ongoing, PrepareCommit/Abort, Complete, Dead) is appended acks=all
//!   and applied only once committed: in a cluster, on every in-sync replica, and with three
//!   replicas on at least two (`__transaction_state` is created with min.insync.replicas 2,
//!   `controller::with_internal_min_isr`). So a new leader,
//!   which was in sync, holds every move a client was answered for. It loads a partition's ids
//!   only once its epoch start is committed (as groups do), forgets them when leadership goes, and
//!   writes the markers of the transactions it finds preparing.
//! - Markers: answered EndTxn means the Prepare state is durable; the markers follow in the
//!   background, one per partition, each retried until committed on that partition's leader (its
//!   owning shard here, or WriteTxnMarkers to another node, answered after the commit there). The
//!   transaction is Complete only after every marker is; a write of the completion that fails
//!   (NOT_ENOUGH_REPLICAS once the in-sync set shrank after the Prepare) is made again, backing off
//!   up to 1 s, for as long as the coordinator holds the transaction prepared
//!   (`Coordinator::retries_completion`, `markers::complete`; issue 36's second bug left the id
//!   in PrepareCommit, answering CONCURRENT_TRANSACTIONS, until its coordinator moved). Other
//!   coordinator writes that fail are made again too: a timed-out transaction's abort and an idle
//!   id's tombstone are found again at the next `transactions.check_interval_ms` pass, a group's
//!   metadata record is written again with the group as it is then (`group::persist_again`, one
//!   loop per group, backing off up to 5 s), and the controller's fencing of an expired broker is
//!   asked again at its next duty pass. Markers carry the state partition's
//!   leader epoch as the coordinator epoch (in the marker's value). Each partition keeps, per
//!   producer, the newest coordinator epoch of its markers (producer state, in the snapshot from
//!   version 3 and replayed from the markers by recovery) and refuses a marker from an older
//!   coordinator with TRANSACTION_COORDINATOR_FENCED (`partition::txn::check_markers`, under the
//!   append turn): a zombie coordinator's late marker changes nothing.
//! - Verification (KIP-890 part 1): a partition leader takes a producer's transactional batches
//!   only after the coordinator said the partition is in the producer's ongoing transaction at
//!   that epoch (`txn::remote::verify`: the mesh, or AddPartitionsToTxn v4 `verify_only` to
//!   another node). An unreachable coordinator is NOT_ENOUGH_REPLICAS to the producer
//!   (retriable), never an acceptance.
//! - Transaction version 2 (KIP-890 part 2, offered as the `transaction.version` feature in
//!   ApiVersions): the request version says which protocol a producer speaks. EndTxn v5
//!   (`Coordinator::end_txn_bumping`) persists the Prepare state with the epoch bumped and
//!   answers the bumped epoch; the markers carry it, so the partitions' producer state moves past
//!   the finished transaction's epoch and a late write of it is fenced. A retry at the epoch
//!   before the bump is answered from the persisted state (so also after a restart). Produce v12
//!   and TxnOffsetCommit v5 verify with `add` (AddPartitionsToTxn v4 without `verify_only` to
//!   another node): the coordinator adds the partitions, beginning the transaction, before the
//!   write is taken. Past the last epoch the Prepare state names the next producer id and the
//!   completion moves to it at epoch 0, keeping the old one to recognise a retry (value v1's
//!   tagged fields).

pub mod markers;
pub mod ops;
pub mod records;
pub mod remote;
pub mod service;
pub mod state;
