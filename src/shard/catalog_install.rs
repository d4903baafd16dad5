//! Installing a new catalog on the shards, in two steps.
//!
//! A shard routes a partition's requests by its own catalog to the partition's owner shard. If
//! each shard opened its new partitions and switched catalogs in one go, a shard that switched
//! first would route a new partition's requests to an owner still opening it, and the client
//! would read UNKNOWN_TOPIC_OR_PARTITION from a node whose metadata had just named it the
//! leader. So every shard first prepares (deletes the partitions it no longer holds, opens the
//! ones it now owns: disk work, awaited), and only when all have, each serves the catalog (no
//! await: configures and assigns its partitions and switches).
//!
//! Invariant: a shard serves a catalog only after every shard opened that catalog's partitions.

use super::mesh::{Peer, Request};
use super::Shard;
use crate::partition::{Partition, TopicPartition};
use crate::storage::catalog::{Catalog, TopicMeta};
use crate::storage::segment_file::Volume;
use futures::future::LocalBoxFuture;
use std::rc::Rc;
use std::sync::Arc;

/// Installs `catalog` on every shard, both steps. Returns the shards that did not install it
/// (they are stopping).
pub async fn install_on_every_shard(shard: &Rc<Shard>, catalog: Arc<Catalog>) -> Vec<usize> {
    let shards = 0..shard.router.shards();
    let prepares = shards
        .clone()
        .map(|s| shard.call(s, PrepareCatalog(catalog.clone())));
    let prepared = futures::future::join_all(prepares).await;
    let installs = shards
        .clone()
        .map(|s| shard.call(s, InstallCatalog(catalog.clone())));
    let installed = futures::future::join_all(installs).await;
    shards
        .filter(|&s| prepared[s].is_err() || installed[s].is_err())
        .collect()
}

/// Installs `catalog` on this shard alone, both steps (at start, before it serves anyone).
pub async fn install_here(shard: &Shard, catalog: Arc<Catalog>) {
    prepare(shard, &catalog).await;
    serve(shard, catalog);
}

/// The first step: retires and deletes the partitions of topics that are gone (or, after a
/// reassignment, that this node no longer holds a replica of), then opens those this shard
/// now owns. Deletions go first: a topic deleted and created again between two catalogs
/// has the same directory.
async fn prepare(shard: &Shard, catalog: &Catalog) {
    let stale: Vec<TopicPartition> = shard
        .partition_list()
        .iter()
        .map(|p| p.id())
        .filter(|tp| match catalog.by_id.get(&tp.topic_id) {
            None => true,
            Some(t) => !catalog.holds(t, tp.partition),
        })
        .collect();
    for tp in stale {
        delete_partition(shard, tp).await;
    }
    for topic in catalog.topics.values() {
        open_owned(shard, catalog, topic).await;
    }
}

/// The second step: gives open partitions their topic's current settings (AlterConfigs,
/// which take effect from the next append or roll) and assignment, and serves `catalog`.
fn serve(shard: &Shard, catalog: Arc<Catalog>) {
    let now_ms = shard.clock().monotonic_ms();
    for p in shard.partition_list() {
        let Some(topic) = catalog.by_id.get(&p.id().topic_id) else {
            continue;
        };
        p.configure(&topic.config);
        let partition_epoch = topic.partition_epoch(p.id().partition);
        let Some(a) = topic.assignment(p.id().partition) else {
            continue;
        };
        let held;
        let a = match catalog.here.registered {
            true => a,
            false => {
                held = a.held_back();
                &held
            }
        };
        // A role change is the partition's to log and act on.
        p.replication().assign(
            catalog.here.node_id,
            (a, partition_epoch),
            &catalog.brokers,
            now_ms,
        );
    }
    shard.set_catalog(catalog);
}

/// Retires partition `tp` and deletes its directory.
async fn delete_partition(shard: &Shard, tp: TopicPartition) {
    let Some(p) = shard.release_partition(tp) else {
        return;
    };
    p.retire();
    let dir = shard.config.data_dir.join(p.name());
    // The journal must not replay the partition's records into a later replica of it in
    // the same directory.
    let _journal = match shard.env.fence_journal().await {
        Ok(held) => held,
        Err(e) => {
            log::error!(
                "deleting {}: journal fence failed: {e}; kept",
                dir.display()
            );
            return;
        }
    };
    let removed = std::fs::remove_dir_all(&dir);
    if let Err(e) = removed.and_then(|()| crate::storage::disk::sync_parent(&dir)) {
        log::error!("deleting {}: {e}", dir.display());
    }
    log::info!("shard {}: deleted partition {}", shard.id, p.name());
}

/// Opens the partitions of `topic` that this shard owns, this node holds a replica of, and
/// are not open yet.
async fn open_owned(shard: &Shard, catalog: &Catalog, topic: &TopicMeta) {
    for p in 0..topic.record.partitions as i32 {
        let tp = TopicPartition {
            topic_id: topic.record.id,
            partition: p,
        };
        let mine = shard.owner(&topic.name, p) == shard.id && catalog.holds(topic, p);
        if !mine || shard.partition(tp).is_some() {
            continue;
        }
        let env = shard.env.clone();
        match Partition::open((Volume::Os, &shard.config.data_dir), topic, p, env).await {
            Ok(partition) => {
                log::info!(
                    "shard {}: opened partition {} at offset {}",
                    shard.id,
                    partition.name(),
                    partition.log_end_offset()
                );
                shard.adopt_partition(Rc::new(partition));
            }
            Err(e) => log::error!(
                "shard {}: cannot open partition {}-{p}: {e}",
                shard.id,
                topic.name
            ),
        }
    }
}

/// The first step of an install, on the shard that receives it.
struct PrepareCatalog(Arc<Catalog>);

impl Request for PrepareCatalog {
    type Reply = ();
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move { prepare(&shard, &self.0).await })
    }
}

/// The second step of an install, on the shard that receives it.
struct InstallCatalog(Arc<Catalog>);

impl Request for InstallCatalog {
    type Reply = ();
    fn run(self, shard: Rc<Shard>) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move { serve(&shard, self.0) })
    }
}
