//! Transactions (KIP-98): the transaction coordinator. `state.rs` decides (pure: the time
//! comes in as values); `records.rs` holds `__transaction_state`'s record schemas;
//! `service.rs` is the shell on a shard (persistence, markers, timeouts, loading) and `ops.rs`
//! its operations. The partition side is `partition/txn.rs`.

pub mod ops;
pub mod records;
pub mod service;
pub mod state;
