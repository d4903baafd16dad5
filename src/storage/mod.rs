//! Durable storage: segmented partition logs, their indexes, recovery, and the topic catalog.
pub mod broker_config;
pub mod catalog;
pub mod compaction;
pub mod disk;
pub mod epochs;
pub mod hw_checkpoint;
pub mod index;
pub mod journal;
pub mod log;
pub mod producer_state;
pub mod read;
pub mod recovery;
pub mod retention;
pub mod security;
pub mod segment;
pub mod topic_config;
pub mod txn_index;
