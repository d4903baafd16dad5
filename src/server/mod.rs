//! Start-up and shutdown: one pinned glommio executor per shard, joined in channel meshes (the
//! shards' own and one per service that runs on every shard), each accepting on the same port
//! (SO_REUSEPORT) so the kernel spreads connections across shards.

pub mod authenticate;
pub mod bootstrap_users;
pub mod connection;
pub mod fd_budget;
pub mod limits;
pub mod sendfile;
pub mod tls;

use crate::clock::{Clock, RandomIds, SystemClock};
use crate::config::Config;
use crate::controller::applied::{self, Applied};
use crate::controller::cluster::{self, Cluster};
use crate::controller::quorum::{self, Quorum, QuorumInbox};
use crate::controller::{self, Controller, ControllerOp, Controllers, NewTopic};
use crate::group::{GroupService, Groups};
use crate::kafka::fetch_session::FetchSessions;
use crate::kafka::Services;
use crate::metrics::{adjust, ShardMetrics};
use crate::shard::mesh::{self, Mesh, MeshMsg, Sharded};
use crate::shard::router::Router;
use crate::shard::{catalog_install, flusher, housekeeping, Shard, CONTROLLER_SHARD};
use crate::storage::catalog::Catalog;
use crate::txn::service::{TxnService, Txns};
use event_listener::Event;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers};
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Messages in flight between two shards before a sender waits, on the shards' own mesh
/// (every produce and fetch of a partition another shard owns crosses it).
const MESH_CHANNEL_CAPACITY: usize = 1024;
/// The same on each service's mesh (group, transaction and controller requests: a request per
/// client call, not per partition). glommio allocates every channel's slots up front, for each
/// pair of shards: 1024 would cost 32 MiB more per service mesh at 16 shards, 500 MiB at 64.
const SERVICE_MESH_CHANNEL_CAPACITY: usize = 128;
/// How often a shard checks whether a shutdown signal arrived.
const SHUTDOWN_POLL_MS: u64 = 50;
/// How long shutdown waits for requests in progress before flushing anyway.
const DRAIN_TIMEOUT_MS: u64 = 5_000;

static SHUTDOWN: AtomicBool = AtomicBool::new(false);
/// Set once a clustered node's controlled shutdown moved its leaderships away (or gave up):
/// every shard keeps serving until then, so that clients are redirected, not cut off.
static RELEASED: AtomicBool = AtomicBool::new(false);
/// Bound on a controlled shutdown (a cluster without a quorum cannot move leadership).
const RELEASE_LIMIT_MS: u64 = 15_000;

pub fn run(mut config: Config) -> anyhow::Result<()> {
    keep_freed_memory();
    stop_on_panic();
    let lock = lock_data_dir(&mut config)?;
    replay_journals(&config)?;
    for listener in config.effective_listeners() {
        ensure_port_free(&listener.address)?;
    }
    tls::load(&config)?;
    let descriptor_limit = fd_budget::apply(&mut config)?;
    crate::metrics::DESCRIPTOR_LIMIT.store(descriptor_limit, Ordering::Relaxed);
    let catalog = load_catalog(&config)?;
    let mut rpc_listener = bind_rpc(&config)?;
    let config = Arc::new(config);
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let router = Arc::new(Router::new(&config));
    let shards = config.shards;
    watch_signals(config.clone())?;
    let metrics: Vec<Arc<ShardMetrics>> = (0..shards)
        .map(|_| Arc::new(ShardMetrics::default()))
        .collect();
    if let Some(addr) = &config.metrics_listen {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
        let endpoint = crate::metrics::Endpoint {
            shards: metrics.clone(),
            apis: crate::kafka::api_names(),
            clustered: !config.voters.is_empty(),
            controller_shard: CONTROLLER_SHARD,
        };
        crate::metrics::serve(listener, endpoint)?;
        log::info!("metrics on http://{addr}/metrics (and /healthz, /readyz)");
    }
    let limits = limits::ConnectionLimits::new();
    let meshes = Meshes::new(shards);
    let cpus = config.shard_cpus();
    let mut handles = Vec::with_capacity(shards);
    for (id, shard_metrics) in metrics.iter().enumerate() {
        let start = ShardStart {
            id,
            config: config.clone(),
            router: router.clone(),
            catalog: catalog.clone(),
            metrics: shard_metrics.clone(),
            clock: clock.clone(),
            limits: limits.clone(),
            descriptor_limit,
            rpc_listener: if id == CONTROLLER_SHARD {
                rpc_listener.take()
            } else {
                None
            },
        };
        let meshes = meshes.clone();
        let handle = LocalExecutorBuilder::new(placement(&config, &cpus, id)?)
            .name(&format!("shard-{id}"))
            .blocking_thread_pool_placement(blocking_placement(&cpus)?)
            .spawn(move || async move { run_shard(start, meshes).await })
            .map_err(|e| anyhow::anyhow!("cannot start shard {id}: {e}"))?;
        handles.push(handle);
    }
    let failed = join_shards(handles);
    drop(lock);
    if failed {
        anyhow::bail!("a shard failed");
    }
    log::info!("shut down cleanly");
    Ok(())
}

/// Where shard `id`'s thread runs: pinned to `cpus[id % len]`, or (`pin_shards = false`)
/// anywhere in `cpus`, where the kernel's scheduler places it. `cpus` is the config's, or
/// without one the CPUs the process was started on (`taskset`, a container's cpuset), so a
/// shard never runs outside them.
fn placement(config: &Config, cpus: &[usize], id: usize) -> anyhow::Result<Placement> {
    if config.pin_shards {
        return Ok(Placement::Fixed(cpus[id % cpus.len()]));
    }
    if config.cpus.is_empty() {
        return Ok(Placement::Unbound); // the thread inherits the process's CPUs
    }
    Ok(Placement::Fenced(cpu_set(cpus)?))
}

/// `cpus` as glommio's set of online CPUs.
fn cpu_set(cpus: &[usize]) -> anyhow::Result<glommio::CpuSet> {
    let online = glommio::CpuSet::online();
    let online = online.map_err(|e| anyhow::anyhow!("cannot list the CPUs: {e}"))?;
    Ok(online.filter(|l| cpus.contains(&l.cpu)))
}

/// Where a shard's blocking thread runs (recompression, journal preparation): on any of the
/// broker's CPUs, not pinned beside its shard, so that the work it takes off a shard's thread
/// goes to whichever CPU is free.
fn blocking_placement(cpus: &[usize]) -> anyhow::Result<glommio::PoolPlacement> {
    let set = cpu_set(cpus)?;
    Ok(glommio::PoolPlacement::Fenced(
        BLOCKING_THREADS_PER_SHARD,
        set,
    ))
}

/// Threads per shard for work that would hold a shard's thread: one, so such work of one shard
/// queues (each partition has at most one conversion in progress, under its append turn).
const BLOCKING_THREADS_PER_SHARD: usize = 1;

/// Writes what the shards' journals hold into the segment files, before any partition opens.
fn replay_journals(config: &Config) -> anyhow::Result<()> {
    let replayed = crate::storage::journal::replay(&config.data_dir, config.shards)
        .map_err(|e| anyhow::anyhow!("cannot replay the journals: {e}"))?;
    if replayed.records > 0 || replayed.skipped > 0 {
        log::info!(
            "journals replayed: {} records ({} bytes) into {} files, {} skipped",
            replayed.records,
            replayed.bytes,
            replayed.files,
            replayed.skipped
        );
    }
    Ok(())
}

/// Opens the shard's journal (`log.journal_bytes` > 0), with a random run id. Without one (a
/// disk too full to make it) the shard syncs every append in its own file, as with none
/// configured: slower under small appends, as durable.
async fn open_journal(shard: &Shard) {
    let (config, id) = (&shard.config, shard.id);
    if config.log.journal_bytes == 0 {
        return;
    }
    let path = crate::storage::journal::path(&config.data_dir, id);
    let uuid = crate::clock::Ids::uuid(&mut RandomIds);
    let run = u64::from_le_bytes(uuid[..8].try_into().expect("16 bytes"));
    let opened = shard
        .env
        .journal
        .open(&path, config.log.journal_bytes, run, &SHUTDOWN);
    match opened.await {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
            log::info!("shard {id}: {e}");
        }
        Err(e) => log::warn!(
            "shard {id}: cannot open the journal {}: {e}; every append is synced in its own file",
            path.display()
        ),
    }
}

/// A clustered node's inter-node RPC listener; None on a single node.
fn bind_rpc(config: &Config) -> anyhow::Result<Option<std::net::TcpListener>> {
    match (&config.rpc_listen, config.is_clustered()) {
        (Some(addr), true) => crate::rpc::bind(addr)
            .map(Some)
            .map_err(|e| anyhow::anyhow!("cannot listen for RPC on {addr}: {e}")),
        _ => Ok(None),
    }
}

/// A panic is a broken invariant (ours or a library's, raft-rs's among them): the whole process
/// stops, after the panic's message and backtrace are printed. Left to itself, a panic would
/// end one shard's thread while the others kept serving, a half-alive broker whose partitions
/// and controller on that shard no longer answer.
fn stop_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("sluice: stopping after a panic");
        std::process::abort();
    }));
}

/// Largest allocation glibc serves from its heaps rather than a fresh mmap (its upper limit).
const MALLOC_MMAP_THRESHOLD_BYTES: i32 = 32 << 20;
/// Free memory glibc keeps at the top of a heap instead of returning it to the kernel.
const MALLOC_TRIM_THRESHOLD_BYTES: i32 = 1 << 30;

/// Request frames (up to a megabyte or more each) are allocated and freed at the rate requests
/// arrive. Left to its defaults, glibc hands such blocks back to the kernel when freed, and the
/// next frame's pages fault in and are zeroed again while the socket is read into them: a
/// page fault and a clearing pass per 4 KiB of every produced byte. Keeping freed memory in
/// the heaps (bounded by the request memory limit) lets frames reuse mapped pages.
#[cfg(target_env = "gnu")]
fn keep_freed_memory() {
    // SAFETY: mallopt only changes glibc's tuning; it is called before any other thread.
    let ok = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD_BYTES) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD_BYTES) == 1
    };
    if !ok {
        log::warn!("cannot tune the allocator (mallopt); request buffers will be re-faulted");
    }
}

/// Other C libraries keep their own defaults.
#[cfg(not(target_env = "gnu"))]
fn keep_freed_memory() {}

/// Creates the data dir, makes its path absolute, and locks it: two brokers on one data dir
/// would interleave writes (refused like Kafka's .lock file). The lock holds while the file
/// lives.
fn lock_data_dir(config: &mut Config) -> anyhow::Result<std::fs::File> {
    crate::storage::disk::create_dir_durably(&config.data_dir).map_err(|e| {
        anyhow::anyhow!("cannot create data dir {}: {e}", config.data_dir.display())
    })?;
    // glommio opens files relative to no directory (not the working directory), so a relative
    // path such as the default ./data fails with EBADF deep inside the first shard.
    config.data_dir = std::path::absolute(&config.data_dir)?;
    let lock = std::fs::File::create(config.data_dir.join(".lock"))?;
    lock.try_lock().map_err(|_| {
        anyhow::anyhow!(
            "data dir {} is in use by another broker",
            config.data_dir.display()
        )
    })?;
    Ok(lock)
}

fn load_catalog(config: &Config) -> anyhow::Result<Arc<Catalog>> {
    let record = if config.is_clustered() {
        cluster_catalog(config)?
    } else {
        if !Catalog::path(&config.data_dir).exists() {
            log::info!("new data dir {}", config.data_dir.display());
        }
        Catalog::load(&config.data_dir, &mut RandomIds)?
    };
    log::info!(
        "cluster id {}, {} topics",
        if record.cluster_id.is_empty() {
            "not known yet"
        } else {
            &record.cluster_id
        },
        record.topics.len()
    );
    let catalog = Catalog::from_record(&record, config).map_err(|e| anyhow::anyhow!(e))?;
    Ok(Arc::new(catalog))
}

/// A clustered node's catalog as of its last run: a voter's from its Raft log, a broker's from
/// its copy of the controller's. A single node's data dir is refused: its topics are not in any
/// metadata log, and would vanish.
fn cluster_catalog(config: &Config) -> anyhow::Result<crate::storage::catalog::CatalogRecord> {
    if Catalog::path(&config.data_dir).exists() {
        anyhow::bail!(
            "data dir {} belongs to a single-node broker; a node of a cluster starts from a new data dir",
            config.data_dir.display()
        );
    }
    if config.is_voter() {
        return crate::controller::quorum::recover(config);
    }
    let copy = Catalog::controller_copy_path(&config.data_dir);
    Ok(Catalog::read_at(&copy)?.unwrap_or_default())
}

/// SIGTERM and SIGINT set the flag every shard polls; SIGHUP reloads the TLS certificate.
/// With SLUICE_FAULT_HOOKS=1 in the environment (tests only), SIGUSR1 cuts the node off from
/// the other nodes and SIGUSR2 reconnects it (`rpc::set_cut_off`).
fn watch_signals(config: Arc<Config>) -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2};
    let mut wanted = vec![SIGTERM, SIGINT, SIGHUP];
    if std::env::var("SLUICE_FAULT_HOOKS").as_deref() == Ok("1") {
        log::warn!(
            "fault hooks on: SIGUSR1 cuts this node off from the others, SIGUSR2 reconnects it"
        );
        wanted.extend([SIGUSR1, SIGUSR2]);
    }
    let signals = signal_hook::iterator::Signals::new(wanted)?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signals = signals;
            for sig in signals.forever() {
                match sig {
                    SIGHUP => tls::reload(&config),
                    SIGUSR1 | SIGUSR2 => {
                        log::warn!(
                            "signal {sig}: cut off from the other nodes: {}",
                            sig == SIGUSR1
                        );
                        crate::rpc::set_cut_off(sig == SIGUSR1);
                    }
                    _ => {
                        log::info!("signal {sig}: shutting down");
                        SHUTDOWN.store(true, Ordering::SeqCst);
                    }
                }
            }
        })?;
    Ok(())
}

/// Waits for every shard; true if any failed.
fn join_shards(handles: Vec<glommio::ExecutorJoinHandle<anyhow::Result<()>>>) -> bool {
    let mut failed = false;
    for (id, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                log::error!("shard {id} stopped with an error: {e}");
                failed = true;
            }
            Err(e) => {
                log::error!("shard {id} failed: {e:?}");
                failed = true;
            }
        }
    }
    failed
}

/// Creates `__consumer_offsets` on first start, so groups have somewhere to live. Other shards
/// may serve clients meanwhile; they answer group requests with COORDINATOR_NOT_AVAILABLE (which
/// clients retry) until it exists.
async fn ensure_offsets_topic(controllers: &Rc<Controllers>) {
    use crate::group::OFFSETS_TOPIC;
    let shard = &controllers.shard;
    // A broker told to stop while starting makes it at its next start.
    if shard.catalog().topics.contains_key(OFFSETS_TOPIC) || SHUTDOWN.load(Ordering::SeqCst) {
        return;
    }
    let topic = NewTopic {
        name: OFFSETS_TOPIC.to_string(),
        partitions: shard.config.offsets_topic_partitions,
        // The default: one replica alone, offsets_topic_replication_factor in a cluster.
        replication_factor: -1,
        assignments: Vec::new(),
        configs: vec![
            ("cleanup.policy".to_string(), "compact".to_string()),
            (
                "segment.bytes".to_string(),
                shard.config.offsets_topic_segment_bytes.to_string(),
            ),
        ],
    };
    let op = ControllerOp::CreateTopics {
        topics: vec![topic],
        validate_only: false,
    };
    for (code, message) in controller::execute(controllers, op).await {
        if code != 0 {
            log::error!("cannot create {OFFSETS_TOPIC}: {code} {message:?}");
        }
    }
}

/// glommio binds with SO_REUSEPORT, which would silently share a port with another process
/// listening there, so a connection attempt checks first. (A plain bind is no test: sockets a
/// killed broker left in FIN_WAIT make it fail spuriously.) A killed broker's listener can
/// outlive it for a moment, while the kernel tears down its io_uring asynchronously, so only a
/// listener that keeps answering for `PORT_PROBE_ATTEMPTS` tries counts as a clash.
fn ensure_port_free(listen: &str) -> anyhow::Result<()> {
    const PORT_PROBE_ATTEMPTS: u32 = 30;
    let addr: std::net::SocketAddr = listen.parse()?;
    for _ in 0..PORT_PROBE_ATTEMPTS {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    anyhow::bail!("cannot listen on {listen}: another process is listening there")
}

/// What a shard's executor starts from.
struct ShardStart {
    id: usize,
    config: Arc<Config>,
    router: Arc<Router>,
    catalog: Arc<Catalog>,
    metrics: Arc<ShardMetrics>,
    clock: Arc<dyn Clock>,
    limits: Arc<limits::ConnectionLimits>,
    descriptor_limit: u64,
    /// The inter-node RPC listener (the controller shard of a clustered node).
    rpc_listener: Option<std::net::TcpListener>,
}

/// The channel meshes every shard joins: the shards' own (partition work, catalog installs)
/// and one per service that runs on every shard.
#[derive(Clone)]
struct Meshes {
    shards: MeshBuilder<MeshMsg<Shard>, Full>,
    groups: MeshBuilder<MeshMsg<Groups>, Full>,
    txns: MeshBuilder<MeshMsg<Txns>, Full>,
    controllers: MeshBuilder<MeshMsg<Controllers>, Full>,
}

impl Meshes {
    fn new(shards: usize) -> Meshes {
        Meshes {
            shards: MeshBuilder::full(shards, MESH_CHANNEL_CAPACITY),
            groups: MeshBuilder::full(shards, SERVICE_MESH_CHANNEL_CAPACITY),
            txns: MeshBuilder::full(shards, SERVICE_MESH_CHANNEL_CAPACITY),
            controllers: MeshBuilder::full(shards, SERVICE_MESH_CHANNEL_CAPACITY),
        }
    }
}

/// Shard `id`'s end of one mesh, and what arrives there (served once the shard is ready).
async fn join<C: 'static>(
    id: usize,
    shards: usize,
    builder: MeshBuilder<MeshMsg<C>, Full>,
) -> anyhow::Result<(Mesh<C>, Receivers<MeshMsg<C>>)> {
    let (senders, receivers) = builder
        .join()
        .await
        .map_err(|_| anyhow::anyhow!("shard {id}: cannot join the mesh"))?;
    Ok((Mesh::new(id, shards, Some(senders)), receivers))
}

/// What other shards send a shard's meshes, served from `serve_meshes` on.
struct Inboxes {
    shard: Receivers<MeshMsg<Shard>>,
    groups: Receivers<MeshMsg<Groups>>,
    txns: Receivers<MeshMsg<Txns>>,
    controllers: Receivers<MeshMsg<Controllers>>,
}

fn serve_meshes(services: &Services, inboxes: Inboxes) {
    mesh::serve(&services.shard, inboxes.shard);
    mesh::serve(&services.groups, inboxes.groups);
    mesh::serve(&services.txns, inboxes.txns);
    mesh::serve(&services.controllers, inboxes.controllers);
}

async fn run_shard(mut start: ShardStart, meshes: Meshes) -> anyhow::Result<()> {
    let id = start.id;
    let stop_mark = StopMark::default();
    let (mesh, shard_inbox) = join(id, start.router.shards(), meshes.shards.clone()).await?;
    let shard = Rc::new(Shard::new(
        id,
        start.config.clone(),
        start.router.clone(),
        start.catalog.clone(),
        mesh,
        start.clock.clone(),
        start.metrics.clone(),
    ));
    let cluster = match (id, start.config.is_clustered()) {
        (CONTROLLER_SHARD, true) => Some(open_cluster(&start)?),
        _ => None,
    };
    let controller = cluster.as_ref().map(|c| c.0.clone());
    let (services, inboxes) =
        wire_services(&shard, &start, controller, meshes, shard_inbox).await?;
    let clock = start.clock.clone();
    glommio::spawn_local(shard.timers.clone().drive(move || clock.monotonic_ms())).detach();
    let config = &start.config;
    if id == CONTROLLER_SHARD && !config.is_clustered() && !Catalog::path(&config.data_dir).exists()
    {
        Catalog::persist(&config.data_dir, &start.catalog.to_record()).await?;
    }
    open_journal(&shard).await;
    catalog_install::install_here(&shard, start.catalog.clone()).await;
    let flusher = glommio::spawn_local(flusher::run(shard.clone()));
    serve_meshes(&services, inboxes);
    if id == CONTROLLER_SHARD {
        let controllers = &services.controllers;
        match cluster {
            None => ensure_offsets_topic(controllers).await,
            Some((cluster, inbox)) => {
                let listener = start
                    .rpc_listener
                    .take()
                    .expect("a clustered node binds RPC");
                run_cluster(controllers, cluster, inbox, listener);
            }
        }
        glommio::spawn_local(watch_descriptors(shard.clone(), start.descriptor_limit)).detach();
        glommio::spawn_local(bootstrap_users::ensure(controllers.clone())).detach();
    }
    crate::group::replay::load_led(&services.groups).await;
    spawn_shard_tasks(&services);
    OPENED_PARTITIONS.fetch_add(1, Ordering::SeqCst);
    wait_for_every_shard_to_open_its_partitions(&shard).await;
    serve_clients(&services, start.limits).await?;
    stop_mark.count();
    wait_for_every_shard_to_stop_serving(&shard).await;
    drain(&shard).await;
    flusher.await;
    log::debug!("shard {id}: flusher stopped");
    shard.close_partitions().await;
    log::info!("shard {id}: closed");
    Ok(())
}

/// The shard's tasks besides serving: its groups and transactions following their partitions'
/// leadership, the group coordinator's timers, producer expiry, retention, the cleaner, and in
/// a cluster replication and high-watermark checkpoints.
fn spawn_shard_tasks(services: &Services) {
    let shard = &services.shard;
    let (groups, txns) = (&services.groups, &services.txns);
    glommio::spawn_local(crate::group::replay::follow_leadership(groups.clone())).detach();
    glommio::spawn_local(crate::group::drive(groups.clone())).detach();
    glommio::spawn_local(crate::txn::service::follow_leadership(txns.clone())).detach();
    glommio::spawn_local(crate::txn::service::expire(txns.clone())).detach();
    glommio::spawn_local(housekeeping::expire_producers(shard.clone())).detach();
    glommio::spawn_local(housekeeping::enforce_retention(shard.clone())).detach();
    glommio::spawn_local(housekeeping::compact_logs(shard.clone())).detach();
    if shard.config.is_clustered() {
        glommio::spawn_local(crate::replication::run(services.controllers.clone())).detach();
        glommio::spawn_local(housekeeping::checkpoint_high_watermarks(shard.clone())).detach();
    }
}

/// The controller shard's part in a cluster: its applied metadata, and on a voter the Raft
/// quorum (with the inbox its driver reads).
fn open_cluster(start: &ShardStart) -> anyhow::Result<(Rc<Cluster>, Option<QuorumInbox>)> {
    let config = start.config.clone();
    let applied = Rc::new(Applied::new(config.clone(), start.catalog.to_record()));
    let (quorum, inbox) = if config.is_voter() {
        let (q, inbox) = Quorum::open(config.clone(), applied.clone())?;
        (Some(q), Some(inbox))
    } else {
        (None, None)
    };
    Ok((Rc::new(Cluster::new(config, applied, quorum)?), inbox))
}

/// Starts a clustered node's tasks on the controller shard: the Raft driver, the installer of
/// applied metadata, heartbeats, the controller's duties, and the RPC server.
fn run_cluster(
    controllers: &Rc<Controllers>,
    cluster: Rc<Cluster>,
    inbox: Option<QuorumInbox>,
    listener: std::net::TcpListener,
) {
    let shard = &controllers.shard;
    if let (Some(quorum), Some(inbox)) = (cluster.quorum.clone(), inbox) {
        let clock = shard.env.clock.clone();
        glommio::spawn_local(quorum::drive(quorum, inbox, clock)).detach();
    }
    let applied = cluster.applied.clone();
    glommio::spawn_local(applied::install_changes(shard.clone(), applied)).detach();
    let handler = cluster.handler(controllers);
    let secret = crate::security::node::NodeSecret::of(&shard.config);
    glommio::spawn_local(crate::rpc::serve(listener, handler, secret)).detach();
    let beat = cluster::heartbeat_loop(cluster.clone(), controllers.clone());
    glommio::spawn_local(beat).detach();
    let duties = cluster::controller_duties(cluster, controllers.clone());
    glommio::spawn_local(duties).detach();
    glommio::spawn_local(ensure_offsets_topic_in_cluster(controllers.clone())).detach();
    log::info!(
        "node {}: inter-node RPC on {}",
        shard.config.node_id,
        shard.config.rpc_listen.as_deref().unwrap_or("?")
    );
}

/// How often a clustered node checks whether `__consumer_offsets` should be created.
const OFFSETS_TOPIC_CHECK_MS: u64 = 1_000;
/// How often a cluster still waiting for the brokers of `__consumer_offsets` says so (first at
/// once, and again whenever the count of live brokers changes).
const OFFSETS_TOPIC_WAIT_LOG_MS: u64 = 30_000;

/// In a cluster, the active controller creates `__consumer_offsets` once as many brokers are
/// live as its replication factor asks, so it gets every replica; it waits for them however
/// long that takes (Kafka's rule), saying so in the log, while groups find no coordinator.
async fn ensure_offsets_topic_in_cluster(controllers: Rc<Controllers>) {
    use crate::group::OFFSETS_TOPIC;
    let shard = &controllers.shard;
    let cluster = controller::here(&controllers)
        .cluster
        .clone()
        .expect("a clustered node");
    // When the wait was last said, and how many brokers were live then.
    let mut said: Option<(u64, usize)> = None;
    loop {
        glommio::timer::sleep(Duration::from_millis(OFFSETS_TOPIC_CHECK_MS)).await;
        if shard.catalog().topics.contains_key(OFFSETS_TOPIC) {
            return;
        }
        if !cluster.is_active() {
            continue;
        }
        if controller::internal_topic_brokers_live(shard, OFFSETS_TOPIC) {
            ensure_offsets_topic(&controllers).await;
            continue;
        }
        let (now_ms, live) = (
            shard.clock().monotonic_ms(),
            shard.catalog().live_brokers().count(),
        );
        if said.is_none_or(|(t, n)| n != live || now_ms - t >= OFFSETS_TOPIC_WAIT_LOG_MS) {
            said = Some((now_ms, live));
            log::warn!(
                "{OFFSETS_TOPIC} waits for {} live brokers ({live} live): consumer groups have \
                 no coordinator until then (offsets_topic_replication_factor)",
                controller::internal_topic_replication_factor(shard, OFFSETS_TOPIC),
            );
        }
    }
}

/// Builds the services that run on every shard, each joined to its own mesh: the group and
/// transaction coordinators, the way to the controller (the controller itself on the
/// controller shard), and the shard's fetch sessions.
async fn wire_services(
    shard: &Rc<Shard>,
    start: &ShardStart,
    cluster: Option<Rc<Cluster>>,
    meshes: Meshes,
    shard_inbox: Receivers<MeshMsg<Shard>>,
) -> anyhow::Result<(Rc<Services>, Inboxes)> {
    let (config, id, shards) = (&start.config, start.id, start.router.shards());
    let (groups_mesh, groups) = join(id, shards, meshes.groups).await?;
    let (txns_mesh, txns) = join(id, shards, meshes.txns).await?;
    let (controllers_mesh, controllers) = join(id, shards, meshes.controllers).await?;
    let controller = (id == CONTROLLER_SHARD)
        .then(|| Controller::new(&start.catalog, Box::new(RandomIds), cluster));
    let controllers_service = Rc::new(Sharded::new(shard.clone(), controllers_mesh, controller));
    let now_ms = start.clock.monotonic_ms();
    let group_service = GroupService::new(now_ms, config, Box::new(RandomIds));
    let groups_service = Rc::new(Sharded::new(shard.clone(), groups_mesh, group_service));
    let txn_service = TxnService::new(config, groups_service.clone(), controllers_service.clone());
    let sessions = FetchSessions::new(id, shards, config.max_incremental_fetch_session_cache_slots);
    let services = Services {
        shard: shard.clone(),
        groups: groups_service,
        txns: Rc::new(Sharded::new(shard.clone(), txns_mesh, txn_service)),
        controllers: controllers_service,
        sessions: std::cell::RefCell::new(sessions),
    };
    let inboxes = Inboxes {
        shard: shard_inbox,
        groups,
        txns,
        controllers,
    };
    Ok((Rc::new(services), inboxes))
}

/// Binds every listener and accepts connections on each until shutdown.
async fn serve_clients(
    services: &Rc<Services>,
    limits: Arc<limits::ConnectionLimits>,
) -> anyhow::Result<()> {
    let shard = &services.shard;
    let id = shard.id;
    let mut bound = Vec::new();
    for l in shard.config.effective_listeners() {
        let listener = TcpListener::bind(&l.address)
            .map_err(|e| anyhow::anyhow!("shard {id}: cannot listen on {}: {e}", l.address))?;
        log::info!(
            "shard {id}: serving {} partitions on {} ({}, {})",
            shard.partition_count(),
            l.address,
            l.name,
            l.security_protocol.name()
        );
        bound.push((Rc::new(l), listener));
    }
    shard.metrics().serving.store(1, Ordering::Relaxed);
    let stop = Rc::new(Event::new());
    glommio::spawn_local({
        let (stop, shard, controllers) =
            (stop.clone(), shard.clone(), services.controllers.clone());
        async move {
            while !SHUTDOWN.load(Ordering::SeqCst) {
                glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
            }
            release_leadership(&controllers).await;
            shard.begin_shutdown();
            stop.notify(usize::MAX);
        }
    })
    .detach();
    let loops = bound
        .into_iter()
        .map(|(l, listener)| accept_loop(services, l, listener, &limits, &stop));
    futures::future::join_all(loops).await;
    Ok(())
}

/// Accepts connections on one listener until shutdown.
async fn accept_loop(
    services: &Rc<Services>,
    config: Rc<crate::config::ListenerConfig>,
    listener: TcpListener,
    limits: &Arc<limits::ConnectionLimits>,
    stop: &Event,
) {
    let shard = &services.shard;
    let id = shard.id;
    loop {
        let stopped = stop.listen();
        if shard.is_shutting_down() {
            return;
        }
        let accept = listener.accept();
        futures::pin_mut!(accept);
        match futures::future::select(accept, stopped).await {
            futures::future::Either::Left((Ok(stream), _)) => {
                let bounds = shard.catalog().broker;
                let admitted = match stream.peer_addr() {
                    Ok(addr) => limits.admit(
                        addr.ip(),
                        bounds.max_connections,
                        bounds.max_connections_per_ip,
                    ),
                    Err(e) => Err(format!("no peer address: {e}")),
                };
                match admitted {
                    Ok(admission) => {
                        let serve =
                            connection::serve(services.clone(), config.clone(), stream, admission);
                        let metrics = shard.env.metrics.clone();
                        adjust(&metrics.connections, 1);
                        glommio::spawn_local(async move {
                            serve.await;
                            adjust(&metrics.connections, -1);
                        })
                        .detach();
                    }
                    Err(why) => log::warn!("shard {id}: refusing a connection: {why}"),
                }
            }
            futures::future::Either::Left((Err(e), _)) => {
                log::warn!("shard {id}: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            futures::future::Either::Right(_) => return,
        }
    }
}

/// Lets requests in progress finish (bounded: connections take no new ones), then flushes.
/// A clustered node's controlled shutdown, run by the controller shard while every shard
/// keeps serving (see `cluster::release_leadership`).
async fn release_leadership(controllers: &Rc<Controllers>) {
    let shard = &controllers.shard;
    if !shard.config.is_clustered() {
        return;
    }
    if let Some(controller) = controller::on_this_shard(controllers) {
        if let Some(cluster) = &controller.cluster {
            cluster::release_leadership(cluster, controllers, RELEASE_LIMIT_MS).await;
        }
        RELEASED.store(true, Ordering::SeqCst);
        return;
    }
    let deadline_ms = shard.clock().monotonic_ms() + RELEASE_LIMIT_MS + 1_000;
    while !RELEASED.load(Ordering::SeqCst) && shard.clock().monotonic_ms() < deadline_ms {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
    }
}

/// Shards that stopped serving clients. A shard drains, closes its partitions and ends only
/// once every shard got there, answering its peers meanwhile: a shard still starting (opening
/// partitions or creating `__consumer_offsets` across the shards) awaits their replies, and a
/// peer that had ended would leave it waiting for ever (seen: a SIGTERM during a slow start).
static STOPPED_SERVING: AtomicUsize = AtomicUsize::new(0);
/// How often a shard waiting for the others to stop serving says so.
const STOP_WAIT_LOG_MS: u64 = 5_000;

/// Counts its shard in `STOPPED_SERVING` once: when the shard stops serving, or when it ends
/// early on an error, which also stops the whole broker (rather than leave it half alive, and
/// the other shards waiting for this one).
#[derive(Default)]
struct StopMark {
    counted: std::cell::Cell<bool>,
}

impl StopMark {
    fn count(&self) {
        if !self.counted.replace(true) {
            STOPPED_SERVING.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Drop for StopMark {
    fn drop(&mut self) {
        if !self.counted.get() {
            log::error!("a shard ended before it stopped serving: the broker stops");
            SHUTDOWN.store(true, Ordering::SeqCst);
            self.count();
        }
    }
}

/// How many shards have opened their partitions. A shard serves clients only once every shard
/// has: it routes a partition's requests to the partition's owner, which would answer
/// UNKNOWN_TOPIC_OR_PARTITION for one it was still opening (for seconds, after a crash with
/// many segments to recover).
static OPENED_PARTITIONS: AtomicUsize = AtomicUsize::new(0);

async fn wait_for_every_shard_to_open_its_partitions(shard: &Shard) {
    while OPENED_PARTITIONS.load(Ordering::SeqCst) < shard.router.shards()
        && !SHUTDOWN.load(Ordering::SeqCst)
    {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
    }
}

async fn wait_for_every_shard_to_stop_serving(shard: &Shard) {
    let mut said_ms = shard.clock().monotonic_ms();
    while STOPPED_SERVING.load(Ordering::SeqCst) < shard.router.shards() {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
        if shard.clock().monotonic_ms() - said_ms >= STOP_WAIT_LOG_MS {
            said_ms = shard.clock().monotonic_ms();
            log::info!(
                "shard {}: stopping once the shards still starting are done",
                shard.id
            );
        }
    }
}

async fn drain(shard: &Rc<Shard>) {
    let drain_deadline_ms = shard.clock().monotonic_ms() + DRAIN_TIMEOUT_MS;
    // Requests read and not yet answered, queued ones included: the readers stop taking new
    // ones once the shard is shutting down.
    let unanswered = || shard.metrics().requests_queued.load(Ordering::Relaxed);
    while unanswered() > 0 && shard.clock().monotonic_ms() < drain_deadline_ms {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
    }
    log::debug!("shard {}: requests drained", shard.id);
    flusher::drain(shard).await;
}

/// How often the controller shard counts the process's descriptors.
const DESCRIPTOR_WATCH_MS: u64 = 60_000;
/// The share of the descriptor limit past which each count logs a warning.
const DESCRIPTOR_WARN_PERCENT: u64 = 90;

/// Publishes the process's open descriptors, and warns while they pass 90% of the limit: a
/// partition that cannot open (EMFILE) or a refused client is the next step.
async fn watch_descriptors(shard: Rc<Shard>, limit: u64) {
    loop {
        if let Some(open) = fd_budget::open_descriptors() {
            crate::metrics::OPEN_DESCRIPTORS.store(open, Ordering::Relaxed);
            if open * 100 >= limit * DESCRIPTOR_WARN_PERCENT {
                log::warn!(
                    "{open} descriptors open, over {DESCRIPTOR_WARN_PERCENT}% of the limit ({limit}): new partitions or connections may fail with EMFILE"
                );
            }
        }
        shard.housekeeping_sleep(DESCRIPTOR_WATCH_MS).await;
    }
}
