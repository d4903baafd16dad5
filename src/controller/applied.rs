//! A clustered node's applied metadata: the catalog record the metadata log (or, on a broker
//! that is not a voter, the controller's heartbeat replies) has brought it to, and the task that
//! installs each new state on every shard.
//!
//! Each change (an applied entry, a snapshot, a new active controller) bumps a generation; the
//! installer installs the newest state on every shard and then marks that generation
//! installed, so a controller answers a change only once this node serves it.

use super::records::{self, MetadataRecord};
use crate::config::Config;
use crate::shard::catalog_install::install_on_every_shard;
use crate::shard::Shard;
use crate::storage::catalog::{registers, Catalog, CatalogRecord};
use event_listener::Event;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

pub struct Applied {
    config: Arc<Config>,
    image: RefCell<CatalogRecord>,
    generation: Cell<u64>,
    installed_generation: Cell<u64>,
    controller_id: Cell<i32>,
    /// The controller's applied index this state corresponds to (what a broker that is not a
    /// voter reports in its heartbeats).
    version: Cell<u64>,
    /// This process's incarnation (`cluster.rs`), 0 until it is drawn.
    incarnation: Cell<u64>,
    /// When this node first built a catalog with each fenced registration fenced ((node,
    /// incarnation) → monotonic ms): `Catalog::fenced_since_ms`.
    fenced_since_ms: RefCell<BTreeMap<(i32, u64), u64>>,
    changed: Event,
    installed: Event,
}

impl Applied {
    pub fn new(config: Arc<Config>, image: CatalogRecord) -> Applied {
        Applied {
            config,
            image: RefCell::new(image),
            generation: Cell::new(1),
            installed_generation: Cell::new(0),
            controller_id: Cell::new(-1),
            version: Cell::new(0),
            incarnation: Cell::new(0),
            fenced_since_ms: RefCell::new(BTreeMap::new()),
            changed: Event::new(),
            installed: Event::new(),
        }
    }

    /// A copy of the state (the controller's working copy for a change).
    pub fn image(&self) -> CatalogRecord {
        self.image.borrow().clone()
    }

    /// Reads the state in place: the catalog holds every topic, so a periodic reader (a
    /// heartbeat, the fencing check) borrows it rather than copying it.
    pub fn read<R>(&self, f: impl FnOnce(&CatalogRecord) -> R) -> R {
        f(&self.image.borrow())
    }

    pub fn cluster_id(&self) -> String {
        self.read(|i| i.cluster_id.clone())
    }

    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    pub fn version(&self) -> u64 {
        self.version.get()
    }

    pub fn set_version(&self, version: u64) {
        self.version.set(version);
    }

    fn bump(&self) -> u64 {
        let g = self.generation.get() + 1;
        self.generation.set(g);
        self.changed.notify(usize::MAX);
        g
    }

    /// Applies an entry's records; Ok(the generation that holds them).
    pub fn apply(&self, recs: &[MetadataRecord]) -> Result<u64, String> {
        records::apply(&mut self.image.borrow_mut(), recs)?;
        Ok(self.bump())
    }

    /// Replaces the whole state (a snapshot, or the controller's catalog).
    pub fn replace(&self, image: CatalogRecord) -> u64 {
        *self.image.borrow_mut() = image;
        self.bump()
    }

    pub fn set_incarnation(&self, incarnation: u64) {
        self.incarnation.set(incarnation);
        self.bump();
    }

    pub fn set_controller(&self, id: i32) {
        if self.controller_id.replace(id) != id {
            self.bump();
        }
    }

    pub fn controller_id(&self) -> i32 {
        self.controller_id.get()
    }

    /// The catalog of the current state at `now_ms` (monotonic), as shards serve it.
    pub fn catalog(&self, now_ms: u64) -> Result<Catalog, String> {
        let image = self.image.borrow();
        let mut c = Catalog::from_record(&image, &self.config)?;
        c.here.controller_id = self.controller_id.get();
        c.here.registered = registers(&image, self.config.node_id, self.incarnation.get());
        c.fenced_since_ms = self.note_fenced(&image, now_ms);
        Ok(c)
    }

    /// Notes the registrations `image` has fenced that were not fenced before (at `now_ms`),
    /// forgets those no longer fenced; returns when each broker was first seen fenced. A
    /// restarted node's first catalog counts every fenced registration as fenced now: which of
    /// them were fenced a moment before the restart is not known.
    fn note_fenced(&self, image: &CatalogRecord, now_ms: u64) -> BTreeMap<i32, u64> {
        let mut since = self.fenced_since_ms.borrow_mut();
        let fenced: Vec<(i32, u64)> = image
            .brokers
            .iter()
            .filter(|b| b.fenced)
            .map(|b| (b.node_id, b.incarnation))
            .collect();
        since.retain(|key, _| fenced.contains(key));
        for key in fenced {
            since.entry(key).or_insert(now_ms);
        }
        assert!(
            since.len() <= image.brokers.len(),
            "one entry per registration"
        );
        since.iter().map(|(&(node, _), &ms)| (node, ms)).collect()
    }

    /// Waits until `generation` is installed on every shard, at most until `deadline`.
    pub async fn wait_installed(&self, generation: u64, limit: std::time::Duration) -> bool {
        let wait = async {
            loop {
                let listener = self.installed.listen();
                if self.installed_generation.get() >= generation {
                    return;
                }
                listener.await;
            }
        };
        crate::rpc::within(limit, wait).await.is_some()
    }
}

/// Installs each new state on every shard, newest first (states in between are skipped).
pub async fn install_changes(shard: Rc<Shard>, applied: Rc<Applied>) {
    loop {
        let listener = applied.changed.listen();
        let generation = applied.generation.get();
        if applied.installed_generation.get() >= generation {
            listener.await;
            continue;
        }
        match applied.catalog(shard.clock().monotonic_ms()) {
            Ok(catalog) => {
                install_on_every_shard(&shard, Arc::new(catalog)).await;
            }
            // Every node applies the same records, so this would be a bug on every node: the
            // shards keep the last catalog that resolved.
            Err(e) => log::error!("controller: the applied metadata does not resolve: {e}"),
        }
        applied.installed_generation.set(generation);
        applied.installed.notify(usize::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::catalog::{BrokerRecord, LISTED_AFTER_FENCE_MS};

    fn registration(node_id: i32, incarnation: u64) -> MetadataRecord {
        MetadataRecord::RegisterBroker(Box::new(BrokerRecord {
            node_id,
            incarnation,
            listeners: Vec::new(),
            rack: None,
            fenced: false,
        }))
    }

    fn listed(applied: &Applied, built_ms: u64, at_ms: u64) -> Vec<i32> {
        let catalog = applied.catalog(built_ms).unwrap();
        catalog.listed_brokers(at_ms).map(|b| b.node_id).collect()
    }

    #[test]
    fn a_fenced_broker_is_listed_for_a_moment_from_when_this_node_saw_it_fenced() {
        let applied = Applied::new(Arc::new(Config::default()), CatalogRecord::default());
        let fence = |node_id, incarnation| MetadataRecord::FenceBroker {
            node_id,
            incarnation,
        };
        applied
            .apply(&[registration(1, 10), registration(2, 20), fence(1, 10)])
            .unwrap();
        // Fenced before this process started (a restarted node's own old registration among
        // such): seen fenced at its first catalog.
        assert_eq!(listed(&applied, 1_000, 1_000), vec![1, 2]);
        assert_eq!(
            listed(&applied, 1_000, 1_000 + LISTED_AFTER_FENCE_MS),
            vec![2]
        );
        applied.apply(&[fence(2, 20)]).unwrap();
        assert_eq!(listed(&applied, 5_000, 5_000), vec![2]);
        // The time it was first seen fenced stands in later catalogs.
        let last_listed_ms = 5_000 + LISTED_AFTER_FENCE_MS - 1;
        assert_eq!(listed(&applied, 6_000, last_listed_ms), vec![2]);
        assert!(listed(&applied, 6_000, last_listed_ms + 1).is_empty());
        // A new registration is live; fenced again, it is a new fence.
        applied.apply(&[registration(2, 21)]).unwrap();
        assert_eq!(listed(&applied, 9_000, 20_000), vec![2]);
        applied.apply(&[fence(2, 21)]).unwrap();
        assert_eq!(listed(&applied, 20_000, 20_000), vec![2]);
        // A node names itself whatever its registration says: it serves.
        let config = Config {
            node_id: 2,
            ..Config::default()
        };
        let here = Applied::new(Arc::new(config), applied.image());
        assert_eq!(listed(&here, 0, 10 * LISTED_AFTER_FENCE_MS), vec![2]);
    }
}
