//! Transactions (KIP-98): the transaction coordinator. `state.rs` decides (pure: the time
//! comes in as values); `records.rs` holds `__transaction_state`'s record schemas.
//!
//! Not served yet: the coordinator's shell (placement on `__transaction_state`, its APIs,
//! markers) and the partition side (control batches, the last stable offset, read_committed).
//! Until then InitProducerId and FindCoordinator refuse transactional ids, so transactional
//! clients fail at once.

pub mod records;
pub mod state;
