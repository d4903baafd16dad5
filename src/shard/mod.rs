//! A shard: what one executor (one core) owns, and the hops between shards.
//!
//! Each shard owns a set of partitions (chosen by `Router`), their files, a flusher task that
//! group-commits their writes, a timing wheel and its connections. The services that run on
//! every shard (group and transaction coordinators, the controller's handle) sit above it, each
//! a `mesh::Sharded` with its own mesh, and are handed to whoever needs them (`kafka::Services`).
//! The shard knows nothing of Kafka's APIs: handlers and services reach other shards with typed
//! requests (`mesh.rs`), and the partitions through `partition()`.
//!
//! Nothing here is shared across threads except immutable `Arc` snapshots and the counters.

pub mod catalog_install;
pub mod coordinator_load;
pub mod flusher;
pub mod housekeeping;
pub mod mesh;
pub mod router;

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::ShardMetrics;
use crate::partition::env::Environment;
use crate::partition::monitor::Waiter;
use crate::partition::{Appended, Partition, Source, TopicPartition, Watch};
use crate::security::node::NodeLogin;
use crate::storage::catalog::{Catalog, TopicMeta};
use crate::timer::Timers;
use bytes::Bytes;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use mesh::Mesh;
use router::Router;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// The shard that hosts the controller service (topic changes, producer-id blocks).
pub const CONTROLLER_SHARD: usize = 0;

/// How a parked wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Done,
    Deadline,
    /// The shard's bound on parked operations was reached.
    Refused,
}

pub struct Shard {
    pub id: usize,
    pub config: Arc<Config>,
    pub router: Arc<Router>,
    /// Clock, counters and the flusher's queue, shared with the shard's partitions.
    pub env: Rc<Environment>,
    /// The timing wheel every delayed operation on this shard parks on.
    pub timers: Rc<Timers>,
    pub mesh: Mesh<Shard>,
    /// Bytes of request frames the shard's connections may hold: `max_request_memory_bytes_per_shard`.
    pub request_memory: Rc<Semaphore>,
    catalog: RefCell<Arc<Catalog>>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    /// What this node logs in to other nodes with, and checks their logins against.
    pub login: Rc<NodeLogin>,
    shutting_down: Cell<bool>,
}

impl Shard {
    pub fn new(
        id: usize,
        config: Arc<Config>,
        router: Arc<Router>,
        catalog: Arc<Catalog>,
        mesh: Mesh<Shard>,
        clock: Arc<dyn Clock>,
        metrics: Arc<ShardMetrics>,
    ) -> Shard {
        let env = Environment::new(clock, metrics.clone());
        let timers = Rc::new(Timers::new(
            env.clock.monotonic_ms(),
            config.max_parked_operations,
            config.max_connections,
            metrics,
        ));
        Shard {
            id,
            login: Rc::new(NodeLogin::new(&config)),
            request_memory: Rc::new(Semaphore::new(
                config.max_request_memory_bytes_per_shard as u64,
            )),
            config,
            router,
            env,
            timers,
            mesh,
            catalog: RefCell::new(catalog),
            partitions: RefCell::new(HashMap::new()),
            shutting_down: Cell::new(false),
        }
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.env.clock
    }

    pub fn metrics(&self) -> &ShardMetrics {
        &self.env.metrics
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.borrow().clone()
    }

    /// Node `node`'s inter-broker listener (`inter_broker_listener`), if the node is live and
    /// registered one: where followers and transaction calls dial it.
    pub fn inter_broker_target(&self, node: i32) -> Option<crate::rpc::kafka_client::Target> {
        let listener = self.config.inter_broker_listener_name();
        let catalog = self.catalog();
        let e = catalog.broker_endpoint(node, listener)?;
        let protocol = crate::config::SecurityProtocol::from_id(e.security_protocol)?;
        Some(crate::rpc::kafka_client::Target::new(
            &e.host, e.port, protocol,
        ))
    }

    /// Replaces the catalog snapshot without touching partitions: the last step of an install
    /// (`catalog_install.rs`, once the partitions took it), or the controller's own
    /// bookkeeping, such as a producer-id block, that no other shard reads.
    pub fn set_catalog(&self, catalog: Arc<Catalog>) {
        *self.catalog.borrow_mut() = catalog;
    }

    /// Sleeps `period_ms` on the timing wheel, outside the bound on parked client operations;
    /// on a plain timer if the wheel refuses (a deadline past its range).
    pub async fn housekeeping_sleep(&self, period_ms: u64) {
        self.housekeeping_sleep_until(self.clock().monotonic_ms() + period_ms)
            .await
    }

    /// The same until `deadline_ms` (monotonic).
    pub async fn housekeeping_sleep_until(&self, deadline_ms: u64) {
        match self.timers.sleep_until_internal(deadline_ms) {
            Ok(sleep) => sleep.await,
            Err(_) => {
                let left_ms = deadline_ms.saturating_sub(self.clock().monotonic_ms());
                glommio::timer::sleep(std::time::Duration::from_millis(left_ms)).await
            }
        }
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.get()
    }

    /// Stops taking new work: readers close their connections, the flusher exits once idle.
    pub fn begin_shutdown(&self) {
        self.shutting_down.set(true);
        self.env.sync_queue.wake();
    }

    // ---- partitions --------------------------------------------------------------------

    pub fn partition(&self, tp: TopicPartition) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(&tp).cloned()
    }

    /// The partitions this shard owns, for a pass over them.
    pub fn partition_list(&self) -> Vec<Rc<Partition>> {
        self.partitions.borrow().values().cloned().collect()
    }

    pub fn partition_count(&self) -> usize {
        self.partitions.borrow().len()
    }

    /// Takes an opened `partition` into this shard's set (`catalog_install.rs`).
    pub fn adopt_partition(&self, partition: Rc<Partition>) {
        let tp = partition.id();
        let previous = self.partitions.borrow_mut().insert(tp, partition);
        assert!(
            previous.is_none(),
            "partition {tp:?} opened twice on one shard"
        );
    }

    /// Takes partition `tp` out of this shard's set, to retire it (`catalog_install.rs`).
    pub fn release_partition(&self, tp: TopicPartition) -> Option<Rc<Partition>> {
        self.partitions.borrow_mut().remove(&tp)
    }

    /// The shard that owns partition `p` of `topic`.
    pub fn owner(&self, topic: &str, p: i32) -> usize {
        self.router.shard_of(topic, p)
    }

    /// Where a request addressed to partition `p` of `topic` (None: not in `catalog`) goes:
    /// its owner shard and its id; or the error that answers it here. This node must lead the
    /// partition, or, where `followers_serve` (a consumer's Fetch v11+, KIP-392), hold a
    /// replica of it. Every partition-addressed API routes through this one rule.
    pub fn locate(
        &self,
        catalog: &Catalog,
        topic: Option<&TopicMeta>,
        p: i32,
        followers_serve: bool,
    ) -> Result<(usize, TopicPartition), ResponseError> {
        let Some(t) = topic.filter(|t| t.has_partition(p)) else {
            return Err(ResponseError::UnknownTopicOrPartition);
        };
        let serves = catalog.leads(t, p) || (followers_serve && catalog.holds(t, p));
        if !serves {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        let tp = TopicPartition {
            topic_id: t.record.id,
            partition: p,
        };
        Ok((self.owner(&t.name, p), tp))
    }

    /// Syncs and closes every partition, writing indexes and clean-shutdown markers.
    pub async fn close_partitions(&self) {
        for partition in self.partition_list() {
            partition.close().await;
        }
    }

    // ---- produce and wait --------------------------------------------------------------

    /// `Partition::append_acked`, then the wait for the durability `acks` asks: none for 0
    /// and 1, the commit for -1 (all), until `timeout_ms` (REQUEST_TIMED_OUT). A retried
    /// duplicate waits for its original records' commit.
    pub async fn produce(
        &self,
        partition: &Rc<Partition>,
        records: Bytes,
        source: Source,
        acks: i16,
        timeout_ms: i32,
    ) -> Result<Appended, ResponseError> {
        let appended = partition
            .append_acked(records, source, acks)
            .await
            .map_err(|r| r.error)?;
        if acks == -1 {
            let deadline_ms = self.clock().monotonic_ms() + timeout_ms.max(0) as u64;
            self.wait_committed(partition, appended.end_offset, deadline_ms)
                .await?;
        }
        Ok(appended)
    }

    /// Waits until `partition` has committed everything below `end_offset` (an acks=all
    /// answer), or `deadline_ms` (monotonic): REQUEST_TIMED_OUT. A partition that fails
    /// meanwhile answers KAFKA_STORAGE_ERROR.
    pub async fn wait_committed(
        &self,
        partition: &Partition,
        end_offset: i64,
        deadline_ms: u64,
    ) -> Result<(), ResponseError> {
        // The leadership the write was appended under. Should it end before the high watermark
        // passes the write (this node follows, and learns a high watermark from the new
        // leader, which may cover other records at those offsets), the write is not known to
        // be committed: NOT_LEADER_OR_FOLLOWER, as Kafka answers a delayed produce then.
        let appended_under = partition.leadership().map(|(generation, _)| generation);
        if appended_under.is_none() {
            return Err(if partition.is_failed() {
                ResponseError::KafkaStorageError
            } else {
                ResponseError::NotLeaderOrFollower
            });
        }
        let mut wait = self
            .wait_for_offset(partition, end_offset, deadline_ms)
            .await;
        if wait == Wait::Refused {
            // The sync is already under way: wait for it without a timeout timer rather than
            // fail a write that is about to become durable. The flusher bounds the wait.
            self.warn_parking_refused("an acks=all produce waits for its sync without a timeout");
            let reached = partition
                .wait_for(Watch::Committed, end_offset, futures::future::pending())
                .await;
            wait = if reached { Wait::Done } else { Wait::Deadline };
        }
        if partition.is_failed() {
            return Err(ResponseError::KafkaStorageError);
        }
        let led_since = partition.leadership().map(|(generation, _)| generation);
        if led_since != appended_under {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        if wait == Wait::Deadline {
            return Err(ResponseError::RequestTimedOut);
        }
        // Committed, but the in-sync set shrank below what the topic asks meanwhile.
        if partition.replication().check_insync(-1).is_err() {
            return Err(ResponseError::NotEnoughReplicasAfterAppend);
        }
        Ok(())
    }

    /// Waits until `partition`'s high watermark reaches `offset`, or `deadline_ms` (monotonic),
    /// parked on the shard's timing wheel.
    pub async fn wait_for_offset(
        &self,
        partition: &Partition,
        offset: i64,
        deadline_ms: u64,
    ) -> Wait {
        if partition.high_watermark() >= offset || partition.is_failed() {
            return Wait::Done;
        }
        let Ok(deadline) = self.timers.sleep_until(deadline_ms) else {
            return Wait::Refused;
        };
        if partition.wait_for(Watch::Committed, offset, deadline).await {
            Wait::Done
        } else {
            Wait::Deadline
        }
    }

    /// Waits until any of `watched` (partition, offset) reaches its offset (or fails), or
    /// `deadline_ms`: one waiter registered in each partition's monitor of the end `what` names.
    pub async fn wait_for_any(
        &self,
        watched: &[(Rc<Partition>, i64)],
        what: Watch,
        deadline_ms: u64,
    ) -> Wait {
        let waiter = Waiter::new();
        let mut registrations = Vec::with_capacity(watched.len());
        for (partition, offset) in watched {
            match partition.watch(*offset, &waiter, what) {
                Some(r) => registrations.push(r),
                None => return Wait::Done,
            }
        }
        let Ok(deadline) = self.timers.sleep_until(deadline_ms) else {
            self.warn_parking_refused("a fetch is answered without waiting");
            return Wait::Refused;
        };
        let woken = waiter.woken();
        futures::pin_mut!(woken, deadline);
        match futures::future::select(woken, deadline).await {
            futures::future::Either::Left(_) => Wait::Done,
            futures::future::Either::Right(_) => Wait::Deadline,
        }
    }

    /// Logs that the bound on parked operations was hit, at most once per 1000 refusals.
    fn warn_parking_refused(&self, what: &str) {
        let n = self.timers.parked_rejected.get();
        if n % 1000 == 1 {
            log::warn!(
                "shard {}: {} operations parked, the limit (max_parked_operations): {what} ({n} refused so far)",
                self.id,
                self.timers.parked()
            );
        }
    }
}
