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

    /// The catalog of the current state, as shards serve it.
    pub fn catalog(&self) -> Result<Catalog, String> {
        let image = self.image.borrow();
        let mut c = Catalog::from_record(&image, &self.config)?;
        c.here.controller_id = self.controller_id.get();
        c.here.registered = registers(&image, self.config.node_id, self.incarnation.get());
        Ok(c)
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
        match applied.catalog() {
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
