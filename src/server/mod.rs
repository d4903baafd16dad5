//! Start-up and shutdown: one pinned glommio executor per shard, joined in a channel mesh, each
//! accepting on the same port (SO_REUSEPORT) so the kernel spreads connections across shards.

pub mod connection;
pub mod limits;
pub mod sendfile;

use crate::config::Config;
use crate::metrics::ShardMetrics;
use crate::shard::messages::MeshMsg;
use crate::shard::router::Router;
use crate::shard::{flusher, Shard};
use crate::storage::catalog::Catalog;
use event_listener::Event;
use futures::StreamExt;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Messages in flight between two shards before a sender waits.
const MESH_CHANNEL_CAPACITY: usize = 1024;
/// How often a shard checks whether a shutdown signal arrived.
const SHUTDOWN_POLL_MS: u64 = 50;
/// How long shutdown waits for requests in progress before flushing anyway.
const DRAIN_TIMEOUT_MS: u64 = 5_000;

static SHUTDOWN: AtomicBool = AtomicBool::new(false);

pub fn run(mut config: Config) -> anyhow::Result<()> {
    std::fs::create_dir_all(&config.data_dir).map_err(|e| {
        anyhow::anyhow!("cannot create data dir {}: {e}", config.data_dir.display())
    })?;
    // glommio opens files relative to no directory (not the working directory), so a relative
    // path such as the default ./data fails with EBADF deep inside the first shard.
    config.data_dir = std::path::absolute(&config.data_dir)?;
    // Two brokers on one data dir would interleave writes; refuse like Kafka's .lock file.
    let lock = std::fs::File::create(config.data_dir.join(".lock"))?;
    lock.try_lock().map_err(|_| {
        anyhow::anyhow!(
            "data dir {} is in use by another broker",
            config.data_dir.display()
        )
    })?;
    ensure_port_free(&config.listen)?;

    if !Catalog::path(&config.data_dir).exists() {
        log::info!("new data dir {}", config.data_dir.display());
    }
    let record = Catalog::load(&config.data_dir)?;
    log::info!(
        "cluster id {}, {} topics",
        record.cluster_id,
        record.topics.len()
    );
    let catalog = Arc::new(
        Catalog::from_record(&record, &config.topic_defaults, &config.log)
            .map_err(|e| anyhow::anyhow!(e))?,
    );
    let config = Arc::new(config);
    let router = Arc::new(Router::new(&config));
    let shards = config.shards;
    let cpus: Vec<usize> = if config.cpus.is_empty() {
        (0..std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1))
            .collect()
    } else {
        config.cpus.clone()
    };
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signals = signals;
            if let Some(sig) = signals.forever().next() {
                log::info!("signal {sig}: shutting down");
                SHUTDOWN.store(true, Ordering::SeqCst);
            }
        })?;

    let metrics: Vec<Arc<ShardMetrics>> = (0..shards)
        .map(|_| Arc::new(ShardMetrics::default()))
        .collect();
    if let Some(addr) = &config.metrics_listen {
        let listener = std::net::TcpListener::bind(addr)
            .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
        crate::metrics::serve(listener, metrics.clone())?;
        log::info!("metrics on http://{addr}/metrics");
    }
    let limits =
        limits::ConnectionLimits::new(config.max_connections, config.max_connections_per_ip);
    let mesh = MeshBuilder::<MeshMsg, _>::full(shards, MESH_CHANNEL_CAPACITY);
    let mut handles = Vec::with_capacity(shards);
    for id in 0..shards {
        let (config, router, catalog, mesh, metrics) = (
            config.clone(),
            router.clone(),
            catalog.clone(),
            mesh.clone(),
            metrics[id].clone(),
        );
        let limits = limits.clone();
        let cpu = cpus[id % cpus.len()];
        let handle = LocalExecutorBuilder::new(Placement::Fixed(cpu))
            .name(&format!("shard-{id}"))
            .spawn(move || async move {
                run_shard(id, config, router, catalog, mesh, metrics, limits).await
            })
            .map_err(|e| anyhow::anyhow!("cannot start shard {id}: {e}"))?;
        handles.push(handle);
    }
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
    drop(lock);
    if failed {
        anyhow::bail!("a shard failed");
    }
    log::info!("shut down cleanly");
    Ok(())
}

/// Creates `__consumer_offsets` on first start, so groups have somewhere to live. Other shards
/// may serve clients meanwhile; they answer group requests with COORDINATOR_NOT_AVAILABLE (which
/// clients retry) until it exists.
async fn ensure_offsets_topic(shard: &Rc<Shard>) {
    use crate::shard::messages::{ControllerOp, NewTopic};
    if shard
        .catalog()
        .topics
        .contains_key(crate::group::OFFSETS_TOPIC)
    {
        return;
    }
    let topic = NewTopic {
        name: crate::group::OFFSETS_TOPIC.to_string(),
        partitions: shard.config.offsets_topic_partitions,
        replication_factor: 1,
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
    for (code, message) in crate::kafka::controller::execute(shard, op).await {
        if code != 0 {
            log::error!(
                "cannot create {}: {code} {message:?}",
                crate::group::OFFSETS_TOPIC
            );
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

async fn run_shard(
    id: usize,
    config: Arc<Config>,
    router: Arc<Router>,
    catalog: Arc<Catalog>,
    mesh: MeshBuilder<MeshMsg, glommio::channels::channel_mesh::Full>,
    metrics: Arc<ShardMetrics>,
    limits: Arc<limits::ConnectionLimits>,
) -> anyhow::Result<()> {
    let (senders, mut receivers) = mesh
        .join()
        .await
        .map_err(|_| anyhow::anyhow!("shard {id}: cannot join the mesh"))?;
    let shard = Rc::new(Shard::new(
        id,
        config.clone(),
        router,
        catalog.clone(),
        Some(senders),
        metrics,
    ));
    glommio::spawn_local(shard.timers.clone().drive(crate::shard::now_ms)).detach();
    if id == crate::shard::CONTROLLER_SHARD && !Catalog::path(&config.data_dir).exists() {
        Catalog::persist(&config.data_dir, &catalog.to_record()).await?;
    }
    shard.apply_catalog(catalog).await;
    let flusher = glommio::spawn_local(flusher::run(shard.clone()));
    for (_, mut stream) in receivers.streams() {
        let shard = shard.clone();
        glommio::spawn_local(async move {
            while let Some(msg) = stream.next().await {
                shard.on_mesh_message(msg);
            }
        })
        .detach();
    }
    if id == crate::shard::CONTROLLER_SHARD {
        ensure_offsets_topic(&shard).await;
    }
    crate::group::replay(&shard).await;
    glommio::spawn_local(crate::group::drive(shard.clone())).detach();
    glommio::spawn_local(shard.clone().expire_producers()).detach();
    glommio::spawn_local(shard.clone().enforce_retention()).detach();
    glommio::spawn_local(shard.clone().compact_logs()).detach();
    let listener = TcpListener::bind(&config.listen)
        .map_err(|e| anyhow::anyhow!("shard {id}: cannot listen on {}: {e}", config.listen))?;
    log::info!(
        "shard {id}: serving {} partitions on {}",
        shard.partitions.borrow().len(),
        config.listen
    );

    let stop = Rc::new(Event::new());
    glommio::spawn_local({
        let (stop, shard) = (stop.clone(), shard.clone());
        async move {
            while !SHUTDOWN.load(Ordering::SeqCst) {
                glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
            }
            shard.shutting_down.set(true);
            stop.notify(usize::MAX);
            shard.sync_needed.notify(usize::MAX); // the flusher exits once idle
        }
    })
    .detach();
    loop {
        let stopped = stop.listen();
        if shard.shutting_down.get() {
            break;
        }
        let accept = listener.accept();
        futures::pin_mut!(accept);
        match futures::future::select(accept, stopped).await {
            futures::future::Either::Left((Ok(stream), _)) => {
                let admitted = match stream.peer_addr() {
                    Ok(addr) => limits.admit(addr.ip()),
                    Err(e) => Err(format!("no peer address: {e}")),
                };
                match admitted {
                    Ok(admission) => {
                        glommio::spawn_local(connection::serve(shard.clone(), stream, admission))
                            .detach();
                    }
                    Err(why) => log::warn!("shard {id}: refusing a connection: {why}"),
                }
            }
            futures::future::Either::Left((Err(e), _)) => {
                log::warn!("shard {id}: accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            futures::future::Either::Right(_) => break,
        }
    }
    drop(listener);
    // Let requests in progress finish, bounded; connections take no new ones.
    let drain_deadline = crate::shard::now_ms() + DRAIN_TIMEOUT_MS;
    // Requests read and not yet answered, queued ones included: the readers stop taking new
    // ones once `shutting_down` is set.
    let unanswered = || shard.metrics.requests_queued.load(Ordering::Relaxed);
    while unanswered() > 0 && crate::shard::now_ms() < drain_deadline {
        glommio::timer::sleep(Duration::from_millis(SHUTDOWN_POLL_MS)).await;
    }
    log::debug!("shard {id}: requests drained");
    flusher::drain(&shard).await;
    flusher.await;
    log::debug!("shard {id}: flusher stopped");
    shard.close_partitions().await;
    log::info!("shard {id}: closed");
    Ok(())
}
