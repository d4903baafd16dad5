//! Transactions (KIP-98): the transaction coordinator. `state.rs` decides (pure: the time
//! comes in as values); `records.rs` holds `__transaction_state`'s record schemas;
//! `service.rs` is the shell on a shard (persistence, timeouts, loading) and `ops.rs` its
//! operations; `markers.rs` writes the markers that end a transaction, `remote.rs` makes the
//! calls to other nodes (WriteTxnMarkers, verification). The partition side is
//! `partition/txn.rs`.

pub mod markers;
pub mod ops;
pub mod records;
pub mod remote;
pub mod service;
pub mod state;
