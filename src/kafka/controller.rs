//! Topic changes, run on the controller shard (shard 0), one at a time: validate, persist the
//! new catalog, then install it on every shard before answering. A topic exists for clients
//! only once every shard has opened its partitions.

use crate::shard::messages::{
    ConfigChange, ControllerOp, ControllerOutcome, NewTopic, ShardRequest,
};
use crate::shard::Shard;
use crate::storage::catalog::{self, Catalog, TopicConfig, TopicRecord};
use kafka_protocol::ResponseError;
use std::rc::Rc;
use std::sync::Arc;

fn err(e: ResponseError, msg: impl Into<String>) -> (i16, Option<String>) {
    (e.code(), Some(msg.into()))
}

pub async fn execute(shard: &Rc<Shard>, op: ControllerOp) -> ControllerOutcome {
    let _permit = shard.lock_controller().await;
    let current = shard.catalog();
    let mut record = current.to_record();
    let mut results = Vec::new();
    let mut changed = false;
    let config = &shard.config;
    match op {
        ControllerOp::CreateTopics {
            topics,
            validate_only,
        } => {
            for t in topics {
                let r = check_new_topic(&record, &t, config);
                match r {
                    Ok(config_resolved) => {
                        let _ = config_resolved;
                        if !validate_only {
                            let partitions = if t.partitions == -1 {
                                config.topic_defaults.num_partitions
                            } else {
                                t.partitions
                            };
                            record.topics.push(TopicRecord {
                                name: t.name.clone(),
                                id: *uuid::Uuid::new_v4().as_bytes(),
                                partitions: partitions as u32,
                                configs: t.configs.clone(),
                            });
                            changed = true;
                            log::info!("creating topic {} with {partitions} partitions", t.name);
                        }
                        results.push((0, None));
                    }
                    Err(e) => results.push(e),
                }
            }
        }
        ControllerOp::DeleteTopics { names } => {
            for name in names {
                match record.topics.iter().position(|t| t.name == name) {
                    Some(i) => {
                        record.topics.remove(i);
                        changed = true;
                        log::info!("deleting topic {name}");
                        results.push((0, None));
                    }
                    None => results.push(err(
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    )),
                }
            }
        }
        ControllerOp::CreatePartitions {
            topics,
            validate_only,
        } => {
            for (name, count) in topics {
                let Some(t) = record.topics.iter_mut().find(|t| t.name == name) else {
                    results.push(err(
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    ));
                    continue;
                };
                if count <= t.partitions as i32 {
                    results.push(err(
                        ResponseError::InvalidPartitions,
                        format!("topic {name} already has {} partitions", t.partitions),
                    ));
                } else if count > catalog::MAX_PARTITIONS {
                    results.push(err(
                        ResponseError::InvalidPartitions,
                        format!("at most {} partitions", catalog::MAX_PARTITIONS),
                    ));
                } else {
                    if !validate_only {
                        t.partitions = count as u32;
                        changed = true;
                        log::info!("topic {name} now has {count} partitions");
                    }
                    results.push((0, None));
                }
            }
        }
        ControllerOp::AlterConfigs {
            topics,
            validate_only,
        } => {
            for (name, change) in topics {
                let Some(t) = record.topics.iter_mut().find(|t| t.name == name) else {
                    results.push(err(
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    ));
                    continue;
                };
                let overrides = match change {
                    ConfigChange::Replace(overrides) => Ok(overrides),
                    ConfigChange::Incremental(edits) => current
                        .topics
                        .get(&name)
                        .ok_or_else(|| format!("topic {name} does not exist"))
                        .and_then(|meta| catalog::edit_overrides(&t.configs, &meta.config, &edits)),
                };
                let checked = overrides.and_then(|o| {
                    TopicConfig::resolve(&config.topic_defaults, &config.log, &o).map(|_| o)
                });
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
        }
    }
    if !changed {
        return results;
    }
    let next = match Catalog::from_record(&record, &config.topic_defaults, &config.log) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            log::error!("controller: new catalog is invalid: {e}");
            return results
                .into_iter()
                .map(|_| err(ResponseError::InvalidConfig, e.clone()))
                .collect();
        }
    };
    if let Err(e) = Catalog::persist(&config.data_dir, &record).await {
        log::error!("controller: cannot persist the catalog: {e}");
        return results
            .into_iter()
            .map(|r| {
                if r.0 == 0 {
                    err(ResponseError::KafkaStorageError, e.to_string())
                } else {
                    r
                }
            })
            .collect();
    }
    let installs =
        (0..shard.router.shards()).map(|s| shard.call(s, ShardRequest::ApplyCatalog(next.clone())));
    for (s, r) in futures::future::join_all(installs)
        .await
        .into_iter()
        .enumerate()
    {
        if r.is_err() {
            log::warn!("controller: shard {s} is stopping; it did not install the new catalog");
        }
    }
    results
}

fn check_new_topic(
    record: &catalog::CatalogRecord,
    t: &NewTopic,
    config: &crate::config::Config,
) -> Result<TopicConfig, (i16, Option<String>)> {
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
    TopicConfig::resolve(&config.topic_defaults, &config.log, &t.configs)
        .map_err(|m| err(ResponseError::InvalidConfig, m))
}

/// Producer ids reserved per catalog write: a restart resumes after the reserved block, so
/// ids stay unique across restarts with one catalog write per block.
const PRODUCER_ID_BLOCK: i64 = 1000;

/// Hands out the next producer id (InitProducerId), persisting a new reserved block when the
/// current one is used up.
pub async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<i64, i16> {
    let _permit = shard.lock_controller().await;
    let current = shard.catalog();
    let id = shard.next_producer_id.get();
    if id >= current.producer_id_block_end {
        let mut record = current.to_record();
        record.producer_id_block_end = id + PRODUCER_ID_BLOCK;
        if let Err(e) = Catalog::persist(&shard.config.data_dir, &record).await {
            log::error!("controller: cannot persist a producer id block: {e}");
            return Err(ResponseError::KafkaStorageError.code());
        }
        let next = Catalog::from_record(&record, &shard.config.topic_defaults, &shard.config.log)
            .map_err(|_| ResponseError::UnknownServerError.code())?;
        // Only the controller reads the block end; other shards keep their snapshot.
        *shard.catalog.borrow_mut() = Arc::new(next);
    }
    shard.next_producer_id.set(id + 1);
    Ok(id)
}
