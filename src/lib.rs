//! Sluice: a thread-per-core, Kafka-wire-compatible streaming broker. See ARCHITECTURE.md.
#[cfg(feature = "bench")]
pub mod bench;
pub mod clock;
pub mod config;
pub mod controller;
pub mod group;
pub mod kafka;
pub mod metrics;
pub mod partition;
pub mod protocol;
pub mod replication;
pub mod rpc;
pub mod server;
pub mod shard;
pub mod storage;
pub mod timer;
