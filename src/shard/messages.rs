//! What shards say to each other over the channel mesh. Everything here is `Send`: record bytes
//! travel as `Bytes` (a reference count, not a copy), catalogs as `Arc` snapshots.

use crate::protocol::chunk::Chunk;
use crate::storage::catalog::Catalog;
use bytes::Bytes;
use std::sync::Arc;

pub struct ProduceItem {
    pub topic: String,
    pub partition: i32,
    pub records: Option<Bytes>,
}

#[derive(Debug, Clone, Copy)]
pub struct ProduceOutcome {
    pub error_code: i16,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

impl ProduceOutcome {
    pub fn failed(e: kafka_protocol::ResponseError) -> ProduceOutcome {
        ProduceOutcome {
            error_code: e.code(),
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}

#[derive(Clone)]
pub struct FetchItem {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: usize,
    pub leader_epoch: i32,
    /// Answer with a file range to sendfile (`fetch.zero_copy`), not bytes read into memory.
    pub zero_copy: bool,
}

pub struct FetchOutcome {
    pub error_code: i16,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// None when there is nothing to return.
    pub records: Option<Chunk>,
}

pub struct OffsetsItem {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
}

#[derive(Debug, Clone, Copy)]
pub struct OffsetsOutcome {
    pub error_code: i16,
    pub offset: i64,
    pub timestamp: i64,
    pub leader_epoch: i32,
}

pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// Topic changes, executed by the controller (shard 0), which owns the catalog.
pub enum ControllerOp {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
    },
    DeleteTopics {
        names: Vec<String>,
    },
    CreatePartitions {
        topics: Vec<(String, i32)>,
        validate_only: bool,
    },
    AlterConfigs {
        topics: Vec<(String, ConfigChange)>,
        validate_only: bool,
    },
}

/// A change to one topic's config overrides.
pub enum ConfigChange {
    /// AlterConfigs: these overrides replace all of the topic's.
    Replace(Vec<(String, String)>),
    /// IncrementalAlterConfigs: (key, operation, value), applied in order.
    Incremental(Vec<(String, crate::storage::catalog::ConfigOp, Option<String>)>),
}

/// Per item: an error code and an optional message.
pub type ControllerOutcome = Vec<(i16, Option<String>)>;

pub enum ShardRequest {
    Produce {
        acks: i16,
        timeout_ms: i32,
        items: Vec<ProduceItem>,
    },
    Fetch {
        items: Vec<FetchItem>,
    },
    /// Completes when any listed partition's high watermark passes the given offset, or at the
    /// deadline (ms since the Unix epoch).
    WaitForData {
        items: Vec<(String, i32, i64)>,
        deadline_ms: u64,
    },
    ListOffsets {
        items: Vec<OffsetsItem>,
    },
    /// Move each partition's log start offset up to the offset (-1: its high watermark).
    DeleteRecords {
        items: Vec<(String, i32, i64)>,
    },
    ApplyCatalog(Arc<Catalog>),
    Controller(ControllerOp),
    /// A consumer-group operation, for the shard that owns the group.
    Group(crate::group::GroupOp),
    /// A new producer id, from the controller.
    AllocateProducerId,
}

pub enum ShardReply {
    Produce(Vec<ProduceOutcome>),
    Fetch(Vec<FetchOutcome>),
    ListOffsets(Vec<OffsetsOutcome>),
    /// Per item: error code and the new log start offset (low watermark).
    DeleteRecords(Vec<(i16, i64)>),
    Controller(ControllerOutcome),
    /// WaitForData: whether the shard parked the wait (false: its parking bound was hit).
    Parked(bool),
    Group(crate::group::GroupReply),
    ProducerId(Result<i64, i16>),
    Done,
}

pub enum MeshMsg {
    Request {
        from: usize,
        id: u64,
        request: ShardRequest,
    },
    Reply {
        id: u64,
        reply: ShardReply,
    },
}
