//! `sluice cluster info|health`: the cluster as the metadata describes it.

use super::args::{ClusterCommand, Common};
use super::client::{self, Context};
use super::output::{self, Table};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::metadata::Metadata;
use serde_json::json;
use std::collections::BTreeSet;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// `cluster health`'s exit status when something is wrong (1 stays "could not ask").
const UNHEALTHY_EXIT: i32 = 3;
/// How long a broker's port may take to accept before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

pub fn run(command: ClusterCommand) -> anyhow::Result<i32> {
    match command {
        ClusterCommand::Info { common } => info(&common).map(|()| 0),
        ClusterCommand::Health { common } => health(&common),
    }
}

fn metadata(common: &Common) -> anyhow::Result<(BaseConsumer<Context>, Metadata)> {
    let consumer = client::consumer(common, None)?;
    let metadata = client::metadata(&consumer, common, None, "reading the cluster's metadata")?;
    Ok((consumer, metadata))
}

fn info(common: &Common) -> anyhow::Result<()> {
    let (consumer, metadata) = metadata(common)?;
    let timeout = client::timeout(common);
    let cluster_id = consumer.client().fetch_cluster_id(timeout);
    let controller = controller_id(&consumer, timeout);
    let mut brokers: Vec<(i32, String)> = metadata
        .brokers()
        .iter()
        .map(|b| (b.id(), format!("{}:{}", b.host(), b.port())))
        .collect();
    brokers.sort();
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    let versions = json!({"sluice_cli": env!("CARGO_PKG_VERSION"), "librdkafka": librdkafka});
    let json = json!({
        "cluster_id": cluster_id, "controller": controller,
        "brokers": brokers.iter().map(|(id, addr)| json!({"id": id, "address": addr})).collect::<Vec<_>>(),
        "versions": versions,
    });
    output::print(common.format, &json, || {
        let mut t = Table::new(&["BROKER", "ADDRESS", "CONTROLLER"]);
        for (id, addr) in &brokers {
            let is = if controller == Some(*id) { "yes" } else { "" };
            t.row(vec![id.to_string(), addr.clone(), is.to_string()]);
        }
        format!(
            "cluster {}\n\n{}\nsluice cli {}, librdkafka {librdkafka}\n",
            cluster_id.as_deref().unwrap_or("(no id)"),
            t.render(),
            env!("CARGO_PKG_VERSION")
        )
    });
    Ok(())
}

/// The active controller's id as the metadata names it (librdkafka has no safe accessor).
fn controller_id(consumer: &BaseConsumer<Context>, timeout: Duration) -> Option<i32> {
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the pointer is the live client's own handle, borrowed for this call only.
    let id =
        unsafe { rdkafka::bindings::rd_kafka_controllerid(consumer.client().native_ptr(), ms) };
    (id >= 0).then_some(id)
}

/// What is wrong with the cluster, if anything.
#[derive(Default)]
struct Findings {
    leaderless: Vec<(String, i32)>,
    under_replicated: Vec<(String, i32, Vec<i32>, Vec<i32>)>,
    /// Brokers named as replicas but absent from the metadata (down, or fenced).
    offline: BTreeSet<i32>,
    /// Brokers in the metadata whose port does not accept from here.
    unreachable: Vec<i32>,
}

fn health(common: &Common) -> anyhow::Result<i32> {
    let (_, metadata) = metadata(common)?;
    let f = findings(&metadata);
    let healthy = f.leaderless.is_empty()
        && f.under_replicated.is_empty()
        && f.offline.is_empty()
        && f.unreachable.is_empty();
    let json = json!({
        "healthy": healthy,
        "leaderless": f.leaderless.iter().map(|(t, p)| json!({"topic": t, "partition": p})).collect::<Vec<_>>(),
        "under_replicated": f.under_replicated.iter().map(|(t, p, r, i)| json!({"topic": t, "partition": p, "replicas": r, "isr": i})).collect::<Vec<_>>(),
        "offline_brokers": f.offline, "unreachable_brokers": f.unreachable,
    });
    output::print(common.format, &json, || render(healthy, &f));
    Ok(if healthy { 0 } else { UNHEALTHY_EXIT })
}

fn findings(metadata: &Metadata) -> Findings {
    let mut f = Findings::default();
    let listed: BTreeSet<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
    for t in metadata.topics() {
        for p in t.partitions() {
            if p.leader() < 0 {
                f.leaderless.push((t.name().to_string(), p.id()));
            }
            if p.isr().len() < p.replicas().len() {
                let (r, i) = (p.replicas().to_vec(), p.isr().to_vec());
                f.under_replicated
                    .push((t.name().to_string(), p.id(), r, i));
            }
            f.offline
                .extend(p.replicas().iter().filter(|r| !listed.contains(r)));
        }
    }
    for b in metadata.brokers() {
        let addr = format!("{}:{}", b.host(), b.port());
        let reachable = addr
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .is_some_and(|a| TcpStream::connect_timeout(&a, CONNECT_TIMEOUT).is_ok());
        if !reachable {
            f.unreachable.push(b.id());
        }
    }
    f
}

fn render(healthy: bool, f: &Findings) -> String {
    let mut out = format!("healthy: {}\n", if healthy { "yes" } else { "no" });
    let ids = |s: &[i32]| {
        if s.is_empty() {
            "none".to_string()
        } else {
            output::ids(s)
        }
    };
    out.push_str(&format!(
        "offline brokers: {}\n",
        ids(&f.offline.iter().copied().collect::<Vec<_>>())
    ));
    out.push_str(&format!("unreachable brokers: {}\n", ids(&f.unreachable)));
    out.push_str(&format!("leaderless partitions: {}\n", f.leaderless.len()));
    out.push_str(&format!(
        "under-replicated partitions: {}\n",
        f.under_replicated.len()
    ));
    if !f.leaderless.is_empty() || !f.under_replicated.is_empty() {
        let mut t = Table::new(&["TOPIC", "PARTITION", "PROBLEM", "REPLICAS", "ISR"]);
        for (topic, p) in &f.leaderless {
            t.row(vec![
                topic.clone(),
                p.to_string(),
                "no leader".into(),
                String::new(),
                String::new(),
            ]);
        }
        for (topic, p, r, i) in &f.under_replicated {
            t.row(vec![
                topic.clone(),
                p.to_string(),
                "under-replicated".into(),
                output::ids(r),
                output::ids(i),
            ]);
        }
        out.push_str(&format!("\n{}", t.render()));
    }
    out
}
