//! `sluice topic ...`: a topic's life cycle through librdkafka's admin API (create, add
//! partitions and delete through its C API, `topic_admin.rs`, for the broker's error messages).

use super::args::{Common, TopicCommand};
use super::client::{self, block_on};
use super::output::{self, Table};
use super::topic_admin::{self, TopicOp};
use rdkafka::admin::{ConfigSource, ResourceSpecifier};
use rdkafka::consumer::Consumer;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

pub fn run(command: TopicCommand) -> anyhow::Result<i32> {
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replicas,
            configs,
            common,
        } => create(&common, &name, partitions, replicas, &configs),
        TopicCommand::List { common } => list(&common),
        TopicCommand::Describe { name, common } => describe(&common, &name),
        TopicCommand::AlterConfig {
            name,
            sets,
            deletes,
            common,
        } => alter_config(&common, &name, &sets, &deletes),
        TopicCommand::AddPartitions {
            name,
            total,
            common,
        } => add_partitions(&common, &name, total),
        TopicCommand::Delete { names, common } => delete(&common, &names),
    }
    .map(|()| 0)
}

fn create(
    common: &Common,
    name: &str,
    partitions: i32,
    replicas: i32,
    configs: &[(String, String)],
) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let op = TopicOp::Create {
        name,
        partitions,
        replicas,
        configs,
    };
    let what = format!("creating topic {name}");
    let outcomes = topic_admin::run(&admin, op, client::timeout(common))
        .map_err(|e| admin.inner().context().error(&what, e))?;
    client::all_succeeded(&admin, &what, outcomes)?;
    let json = json!({"topic": name, "partitions": partitions, "replicas": replicas});
    output::print(common.format, &json, || {
        format!("created topic {name}: {partitions} partitions, {replicas} replicas\n")
    });
    Ok(())
}

fn list(common: &Common) -> anyhow::Result<()> {
    let consumer = client::consumer(common, None)?;
    let metadata = client::metadata(&consumer, common, None, "listing topics")?;
    let mut topics: Vec<_> = metadata.topics().iter().collect();
    topics.sort_by_key(|t| t.name());
    let rows: Vec<(String, usize, usize)> = topics
        .iter()
        .map(|t| {
            let replicas = t.partitions().first().map_or(0, |p| p.replicas().len());
            (t.name().to_string(), t.partitions().len(), replicas)
        })
        .collect();
    let json: Vec<Value> = rows
        .iter()
        .map(|(n, p, r)| json!({"name": n, "partitions": p, "replicas": r}))
        .collect();
    output::print(common.format, &Value::Array(json), || {
        let mut t = Table::new(&["NAME", "PARTITIONS", "REPLICAS"]);
        for (n, p, r) in &rows {
            t.row(vec![n.clone(), p.to_string(), r.to_string()]);
        }
        t.render()
    });
    Ok(())
}

/// Per partition: id, leader, replicas, ISR, log start offset, high watermark.
type PartitionRow = (i32, i32, Vec<i32>, Vec<i32>, i64, i64);

fn describe(common: &Common, name: &str) -> anyhow::Result<()> {
    let partitions = partitions(common, name)?;
    let configs = overrides(common, name)?;
    let json = json!({
        "name": name,
        "partitions": partitions.iter().map(|(p, leader, replicas, isr, start, hw)| json!({
            "partition": p, "leader": leader, "replicas": replicas, "isr": isr,
            "log_start_offset": start, "high_watermark": hw,
        })).collect::<Vec<_>>(),
        "configs": Value::Object(configs.iter().map(|(k, v)| (k.clone(), json!(v))).collect::<Map<_, _>>()),
    });
    output::print(common.format, &json, || {
        let mut t = Table::new(&[
            "PARTITION",
            "LEADER",
            "REPLICAS",
            "ISR",
            "LOG-START",
            "HIGH-WATERMARK",
        ]);
        for (p, leader, replicas, isr, start, hw) in &partitions {
            let cells = [
                p.to_string(),
                leader.to_string(),
                output::ids(replicas),
                output::ids(isr),
            ];
            t.row(
                cells
                    .into_iter()
                    .chain([start.to_string(), hw.to_string()])
                    .collect(),
            );
        }
        let mut out = format!(
            "topic {name}: {} partitions\n\n{}",
            partitions.len(),
            t.render()
        );
        if !configs.is_empty() {
            let mut c = Table::new(&["CONFIG", "VALUE"]);
            for (k, v) in &configs {
                c.row(vec![k.clone(), v.clone()]);
            }
            out.push_str(&format!("\n{}", c.render()));
        }
        out
    });
    Ok(())
}

/// The topic's partitions, each with its offsets; an error when the topic does not exist.
fn partitions(common: &Common, name: &str) -> anyhow::Result<Vec<PartitionRow>> {
    let consumer = client::consumer(common, None)?;
    let timeout = client::timeout(common);
    let what = format!("describing topic {name}");
    let partitions = client::partitions(&consumer, common, name, &what)?;
    let mut rows = Vec::with_capacity(partitions.len());
    for p in partitions {
        let (start, hw) = consumer
            .fetch_watermarks(name, p.id, timeout)
            .map_err(|e| client::failed(&consumer, &format!("offsets of {name}-{}", p.id), e))?;
        rows.push((p.id, p.leader, p.replicas, p.isr, start, hw));
    }
    Ok(rows)
}

/// The topic's own config overrides (what differs from the broker's defaults).
fn overrides(common: &Common, name: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let (admin, options) = client::admin(common)?;
    let what = format!("describing the configs of topic {name}");
    let results = block_on(admin.describe_configs([&ResourceSpecifier::Topic(name)], &options))
        .map_err(|e| admin.inner().context().error(&what, e))?;
    let mut out = BTreeMap::new();
    for r in results {
        let resource = r.map_err(|code| admin.inner().context().error(&what, code))?;
        for e in resource.entries {
            if e.source == ConfigSource::DynamicTopic && !e.is_default {
                out.insert(e.name, e.value.unwrap_or_default());
            }
        }
    }
    Ok(out)
}

/// IncrementalAlterConfigs (librdkafka's C call, `topic_admin.rs`): the edits alone, so
/// two operators editing one topic's other keys at once both keep theirs, and a refusal
/// carries the broker's message. Deleting a key the topic does not override is refused here.
fn alter_config(
    common: &Common,
    name: &str,
    sets: &[(String, String)],
    deletes: &[String],
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !sets.is_empty() || !deletes.is_empty(),
        "give --set KEY=VALUE or --delete KEY"
    );
    let before = overrides(common, name)?;
    if let Some(key) = deletes.iter().find(|k| !before.contains_key(*k)) {
        anyhow::bail!("topic {name} has no override of {key} to delete");
    }
    let (admin, _) = client::admin(common)?;
    let what = format!("altering the configs of topic {name}");
    let op = TopicOp::AlterConfigs {
        name,
        sets,
        deletes,
    };
    let outcomes = topic_admin::run(&admin, op, client::timeout(common))
        .map_err(|e| admin.inner().context().error(&what, e))?;
    client::all_succeeded(&admin, &what, outcomes)?;
    let configs = overrides(common, name)?;
    let json = json!({"topic": name, "configs": configs});
    output::print(common.format, &json, || {
        let mut t = Table::new(&["CONFIG", "VALUE"]);
        for (k, v) in &configs {
            t.row(vec![k.clone(), v.clone()]);
        }
        format!("topic {name}'s overrides now:\n{}", t.render())
    });
    Ok(())
}

fn add_partitions(common: &Common, name: &str, total: usize) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let what = format!("adding partitions to topic {name}");
    let op = TopicOp::AddPartitions {
        name,
        total: i32::try_from(total)?,
    };
    let outcomes = topic_admin::run(&admin, op, client::timeout(common))
        .map_err(|e| admin.inner().context().error(&what, e))?;
    client::all_succeeded(&admin, &what, outcomes)?;
    let json = json!({"topic": name, "partitions": total});
    output::print(common.format, &json, || {
        format!("topic {name} now has {total} partitions\n")
    });
    Ok(())
}

fn delete(common: &Common, names: &[String]) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let outcomes = topic_admin::run(&admin, TopicOp::Delete { names }, client::timeout(common))
        .map_err(|e| admin.inner().context().error("deleting topics", e))?;
    client::all_succeeded(&admin, "deleting topics", outcomes)?;
    output::print(common.format, &json!({"deleted": names}), || {
        format!("deleted {}\n", names.join(", "))
    });
    Ok(())
}
