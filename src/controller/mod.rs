//! The controller: topic changes and producer-id blocks, run on the controller shard (shard 0),
//! one at a time. A change is validated, checked against the broker's bounds, persisted in the
//! catalog, then installed on every shard before it is answered: a topic exists for clients
//! only once every shard has opened its partitions.
//!
//! A service: the server wires one `Controller` into shard 0; other shards reach it with
//! `submit` and `allocate_producer_id`, typed requests over the mesh.

pub mod bounds;
mod broker_configs;

use crate::clock::Ids;
use crate::shard::mesh::{Request, ShardGone};
use crate::shard::{InstallCatalog, Shard, CONTROLLER_SHARD};
use crate::storage::catalog::{self, Catalog, CatalogRecord, ConfigOp, TopicRecord};
use crate::storage::topic_config::TopicConfig;
use futures::future::LocalBoxFuture;
use glommio::sync::Semaphore;
use kafka_protocol::ResponseError;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;

pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: Vec<(String, String)>,
}

/// Topic changes, executed by the controller.
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
    /// Dynamic broker configs of one scope: "" (the whole cluster) or a node id.
    AlterBrokerConfigs {
        broker: String,
        change: ConfigChange,
        validate_only: bool,
    },
}

/// A change to one topic's config overrides.
pub enum ConfigChange {
    /// AlterConfigs: these overrides replace all of the topic's.
    Replace(Vec<(String, String)>),
    /// IncrementalAlterConfigs: (key, operation, value), applied in order.
    Incremental(Vec<(String, ConfigOp, Option<String>)>),
}

/// One item's outcome: an error code (0: done) and an optional message.
pub type Outcome = (i16, Option<String>);

fn err(e: ResponseError, msg: impl Into<String>) -> Outcome {
    (e.code(), Some(msg.into()))
}

/// Producer ids reserved per catalog write: a restart resumes after the reserved block, so
/// ids stay unique across restarts with one catalog write per block.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// The controller's state on its shard.
pub struct Controller {
    /// Serializes controller operations: each reads, changes and persists the whole catalog.
    lock: Semaphore,
    /// The next producer id to hand out.
    next_producer_id: Cell<i64>,
    /// Where topic ids come from.
    ids: RefCell<Box<dyn Ids>>,
}

impl Controller {
    pub fn new(catalog: &Catalog, ids: Box<dyn Ids>) -> Controller {
        Controller {
            lock: Semaphore::new(1),
            next_producer_id: Cell::new(catalog.producer_id_block_end),
            ids: RefCell::new(ids),
        }
    }

    async fn lock(&self) -> glommio::sync::Permit<'_> {
        self.lock
            .acquire_permit(1)
            .await
            .expect("the controller lock never closes")
    }
}

/// Runs `op` on the controller (from any shard). Err: the controller shard is stopping.
pub async fn submit(shard: &Rc<Shard>, op: ControllerOp) -> Result<Vec<Outcome>, ShardGone> {
    shard.call(CONTROLLER_SHARD, Submit(op)).await
}

/// A new producer id (from any shard), or an error code. Err: the controller is stopping.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<Result<i64, i16>, ShardGone> {
    shard.call(CONTROLLER_SHARD, AllocateProducerId).await
}

struct Submit(ControllerOp);

impl Request for Submit {
    type Reply = Vec<Outcome>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Vec<Outcome>> {
        Box::pin(async move { execute(&shard, self.0).await })
    }
}

struct AllocateProducerId;

impl Request for AllocateProducerId {
    type Reply = Result<i64, i16>;
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, Result<i64, i16>> {
        Box::pin(async move { next_producer_id(&shard).await })
    }
}

/// Executes a topic change on the controller shard.
pub async fn execute(shard: &Rc<Shard>, op: ControllerOp) -> Vec<Outcome> {
    assert_eq!(
        shard.id, CONTROLLER_SHARD,
        "controller ops run on its shard"
    );
    let controller = shard.service::<Controller>();
    let _permit = controller.lock().await;
    let current = shard.catalog();
    let mut record = current.to_record();
    let (results, changed) = match op {
        ControllerOp::CreateTopics {
            topics,
            validate_only,
        } => create_topics(shard, &controller, &mut record, topics, validate_only),
        ControllerOp::DeleteTopics { names } => delete_topics(&mut record, names),
        ControllerOp::CreatePartitions {
            topics,
            validate_only,
        } => create_partitions(shard, &mut record, topics, validate_only),
        ControllerOp::AlterConfigs {
            topics,
            validate_only,
        } => alter_configs(&current, &mut record, topics, validate_only),
        ControllerOp::AlterBrokerConfigs {
            broker,
            change,
            validate_only,
        } => broker_configs::alter(shard, &current, &mut record, &broker, change, validate_only),
    };
    if !changed {
        return results;
    }
    match commit(shard, &record).await {
        Ok(()) => results,
        Err(e) => results
            .into_iter()
            .map(|r| if r.0 == 0 { e.clone() } else { r })
            .collect(),
    }
}

/// Persists `record` and installs it on every shard. Err: the outcome of every change in it.
async fn commit(shard: &Rc<Shard>, record: &CatalogRecord) -> Result<(), Outcome> {
    let config = &shard.config;
    let next = Catalog::from_record(record, config).map_err(|e| {
        log::error!("controller: new catalog is invalid: {e}");
        err(ResponseError::InvalidConfig, e)
    })?;
    Catalog::persist(&config.data_dir, record)
        .await
        .map_err(|e| {
            log::error!("controller: cannot persist the catalog: {e}");
            err(ResponseError::KafkaStorageError, e.to_string())
        })?;
    let next = Arc::new(next);
    let installs = (0..shard.router.shards()).map(|s| shard.call(s, InstallCatalog(next.clone())));
    for (s, r) in futures::future::join_all(installs)
        .await
        .into_iter()
        .enumerate()
    {
        if r.is_err() {
            log::warn!("controller: shard {s} is stopping; it did not install the new catalog");
        }
    }
    Ok(())
}

fn create_topics(
    shard: &Shard,
    controller: &Controller,
    record: &mut CatalogRecord,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> (Vec<Outcome>, bool) {
    let config = &shard.config;
    let mut results = Vec::with_capacity(topics.len());
    let mut changed = false;
    for t in topics {
        if let Err(e) = check_new_topic(record, &shard.catalog(), &t) {
            results.push(e);
            continue;
        }
        let partitions = if t.partitions == -1 {
            config.topic_defaults.num_partitions
        } else {
            t.partitions
        };
        if let Err(e) = bounds::check_new_partitions(shard, record, &t.name, 0, partitions, true) {
            results.push(e);
            continue;
        }
        if !validate_only {
            record.topics.push(TopicRecord {
                name: t.name.clone(),
                id: controller.ids.borrow_mut().uuid(),
                partitions: partitions as u32,
                configs: t.configs,
            });
            changed = true;
            log::info!("creating topic {} with {partitions} partitions", t.name);
        }
        results.push((0, None));
    }
    (results, changed)
}

fn delete_topics(record: &mut CatalogRecord, names: Vec<String>) -> (Vec<Outcome>, bool) {
    let mut changed = false;
    let results = names
        .into_iter()
        .map(
            |name| match record.topics.iter().position(|t| t.name == name) {
                Some(i) => {
                    record.topics.remove(i);
                    changed = true;
                    log::info!("deleting topic {name}");
                    (0, None)
                }
                None => err(
                    ResponseError::UnknownTopicOrPartition,
                    format!("topic {name} does not exist"),
                ),
            },
        )
        .collect();
    (results, changed)
}

fn create_partitions(
    shard: &Shard,
    record: &mut CatalogRecord,
    topics: Vec<(String, i32)>,
    validate_only: bool,
) -> (Vec<Outcome>, bool) {
    let mut results = Vec::with_capacity(topics.len());
    let mut changed = false;
    for (name, count) in topics {
        let Some(i) = record.topics.iter().position(|t| t.name == name) else {
            results.push(err(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
            continue;
        };
        let current = record.topics[i].partitions as i32;
        let checked = if count <= current {
            Err(err(
                ResponseError::InvalidPartitions,
                format!("topic {name} already has {current} partitions"),
            ))
        } else if count > catalog::MAX_PARTITIONS {
            Err(err(
                ResponseError::InvalidPartitions,
                format!("at most {} partitions", catalog::MAX_PARTITIONS),
            ))
        } else {
            bounds::check_new_partitions(shard, record, &name, current, count, false)
        };
        match checked {
            Err(e) => results.push(e),
            Ok(()) => {
                if !validate_only {
                    record.topics[i].partitions = count as u32;
                    changed = true;
                    log::info!("topic {name} now has {count} partitions");
                }
                results.push((0, None));
            }
        }
    }
    (results, changed)
}

fn alter_configs(
    current: &Catalog,
    record: &mut CatalogRecord,
    topics: Vec<(String, ConfigChange)>,
    validate_only: bool,
) -> (Vec<Outcome>, bool) {
    let mut results = Vec::with_capacity(topics.len());
    let mut changed = false;
    for (name, change) in topics {
        let (Some(t), Some(meta)) = (
            record.topics.iter_mut().find(|t| t.name == name),
            current.topics.get(&name),
        ) else {
            results.push(err(
                ResponseError::UnknownTopicOrPartition,
                format!("topic {name} does not exist"),
            ));
            continue;
        };
        let overrides = match change {
            ConfigChange::Replace(overrides) => Ok(overrides),
            ConfigChange::Incremental(edits) => {
                catalog::edit_overrides(&t.configs, &meta.config, &edits)
            }
        };
        let checked = overrides.and_then(|o| current.resolve_topic(&o).map(|_| o));
        match checked {
            Ok(overrides) => {
                if !validate_only && overrides != t.configs {
                    log::info!("topic {name}: configs now {overrides:?}");
                    t.configs = overrides;
                    changed = true;
                }
                results.push((0, None));
            }
            Err(m) => results.push(err(ResponseError::InvalidConfig, m)),
        }
    }
    (results, changed)
}

fn check_new_topic(
    record: &CatalogRecord,
    current: &Catalog,
    t: &NewTopic,
) -> Result<TopicConfig, Outcome> {
    catalog::validate_topic_name(&t.name)
        .map_err(|m| err(ResponseError::InvalidTopicException, m))?;
    if record.topics.iter().any(|x| x.name == t.name) {
        return Err(err(
            ResponseError::TopicAlreadyExists,
            format!("topic {} already exists", t.name),
        ));
    }
    if t.partitions == 0 || t.partitions < -1 || t.partitions > catalog::MAX_PARTITIONS {
        return Err(err(
            ResponseError::InvalidPartitions,
            format!("partitions must be in 1..={}", catalog::MAX_PARTITIONS),
        ));
    }
    if t.replication_factor != -1 && t.replication_factor != 1 {
        return Err(err(
            ResponseError::InvalidReplicationFactor,
            "this broker stores one replica: replication factor must be 1",
        ));
    }
    current
        .resolve_topic(&t.configs)
        .map_err(|m| err(ResponseError::InvalidConfig, m))
}

/// Hands out the next producer id (InitProducerId), persisting a new reserved block when the
/// current one is used up.
async fn next_producer_id(shard: &Rc<Shard>) -> Result<i64, i16> {
    let controller = shard.service::<Controller>();
    let _permit = controller.lock().await;
    let current = shard.catalog();
    let id = controller.next_producer_id.get();
    if id >= current.producer_id_block_end {
        let mut record = current.to_record();
        record.producer_id_block_end = id + PRODUCER_ID_BLOCK;
        if let Err(e) = Catalog::persist(&shard.config.data_dir, &record).await {
            log::error!("controller: cannot persist a producer id block: {e}");
            return Err(ResponseError::KafkaStorageError.code());
        }
        let next = Catalog::from_record(&record, &shard.config)
            .map_err(|_| ResponseError::UnknownServerError.code())?;
        // Only the controller reads the block end; other shards keep their snapshot.
        shard.set_catalog(Arc::new(next));
    }
    controller.next_producer_id.set(id + 1);
    Ok(id)
}
