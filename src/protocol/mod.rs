//! Kafka wire protocol: framing, the record batch format, and the hand-written hot-path codecs.
//! Control-plane messages use the `kafka-protocol` crate.
pub mod batch;
pub mod chunk;
pub mod compression;
pub mod control;
pub mod fetch;
pub mod frame;
pub mod produce;
pub mod topics;
pub mod wire;
