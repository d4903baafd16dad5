//! `sluice group ...`: consumer groups, their members, offsets and lag.

use super::args::{Common, GroupCommand};
use super::client::{self, block_on, Context};
use super::output::{self, Table};
use super::position::{self, Position};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::groups::GroupInfo;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

pub fn run(command: GroupCommand) -> anyhow::Result<i32> {
    match command {
        GroupCommand::List { common } => list(&common),
        GroupCommand::Describe { group, common } => describe(&common, &group),
        GroupCommand::Seek {
            group,
            topic,
            to,
            common,
        } => seek(&common, &group, &topic, &to),
        GroupCommand::Delete { groups, common } => delete(&common, &groups),
    }
    .map(|()| 0)
}

fn list(common: &Common) -> anyhow::Result<()> {
    let consumer = client::consumer(common, None)?;
    let groups = consumer
        .fetch_group_list(None, client::timeout(common))
        .map_err(|e| client::failed(&consumer, "listing groups", e))?;
    let mut groups: Vec<&GroupInfo> = groups.groups().iter().collect();
    groups.sort_by_key(|g| g.name());
    let json: Vec<Value> = groups
        .iter()
        .map(|g| json!({"group": g.name(), "state": g.state(), "protocol_type": g.protocol_type(), "members": g.members().len()}))
        .collect();
    output::print(common.format, &Value::Array(json), || {
        let mut t = Table::new(&["GROUP", "STATE", "MEMBERS", "PROTOCOL-TYPE"]);
        for g in &groups {
            let cells = [g.name(), g.state()].map(str::to_string);
            t.row(
                cells
                    .into_iter()
                    .chain([g.members().len().to_string(), g.protocol_type().to_string()])
                    .collect(),
            );
        }
        t.render()
    });
    Ok(())
}

/// A member: id, client id, host, and its assignment (topic, partitions).
struct Member {
    id: String,
    client_id: String,
    host: String,
    assignment: Vec<(String, Vec<i32>)>,
}

/// A partition's committed offset, end offset and lag, and the member it is assigned to.
struct Lag {
    topic: String,
    partition: i32,
    committed: i64,
    end: i64,
    member: Option<String>,
}

fn describe(common: &Common, group: &str) -> anyhow::Result<()> {
    let consumer = client::consumer(common, Some(group))?;
    let (state, protocol, members) = group_info(&consumer, common, group)?;
    let lags = lags(&consumer, common, &members)?;
    let json = json!({
        "group": group, "state": state, "protocol": protocol,
        "members": members.iter().map(|m| json!({
            "member_id": m.id, "client_id": m.client_id, "host": m.host,
            "assignment": m.assignment.iter().map(|(t, ps)| json!({"topic": t, "partitions": ps})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "offsets": lags.iter().map(|l| json!({
            "topic": l.topic, "partition": l.partition, "committed": l.committed,
            "end": l.end, "lag": l.end - l.committed, "member": l.member,
        })).collect::<Vec<_>>(),
    });
    output::print(common.format, &json, || {
        let mut out = format!("group {group}: {state}, {} members\n", members.len());
        let mut t = Table::new(&["TOPIC", "PARTITION", "COMMITTED", "END", "LAG", "MEMBER"]);
        for l in &lags {
            let member = l.member.clone().unwrap_or_else(|| "-".into());
            t.row(vec![
                l.topic.clone(),
                l.partition.to_string(),
                l.committed.to_string(),
                l.end.to_string(),
                (l.end - l.committed).to_string(),
                member,
            ]);
        }
        out.push_str(&format!("\n{}", t.render()));
        out
    });
    Ok(())
}

/// The group's state, protocol and members, as DescribeGroups gives them ("Dead" for a group
/// the coordinator does not know).
fn group_info(
    consumer: &BaseConsumer<Context>,
    common: &Common,
    group: &str,
) -> anyhow::Result<(String, String, Vec<Member>)> {
    let what = format!("describing group {group}");
    let list = consumer
        .fetch_group_list(Some(group), client::timeout(common))
        .map_err(|e| client::failed(consumer, &what, e))?;
    let info = list.groups().iter().find(|g| g.name() == group);
    let Some(info) = info else {
        return Ok(("Dead".into(), String::new(), Vec::new()));
    };
    let members = info
        .members()
        .iter()
        .map(|m| Member {
            id: m.id().to_string(),
            client_id: m.client_id().to_string(),
            host: m.client_host().to_string(),
            assignment: m.assignment().map(assigned).unwrap_or_default(),
        })
        .collect();
    Ok((
        info.state().to_string(),
        info.protocol().to_string(),
        members,
    ))
}

/// The partitions a consumer-protocol assignment names (none if it cannot be read).
fn assigned(assignment: &[u8]) -> Vec<(String, Vec<i32>)> {
    use kafka_protocol::messages::ConsumerProtocolAssignment;
    use kafka_protocol::protocol::Decodable;
    if assignment.len() < 2 {
        return Vec::new();
    }
    let version = i16::from_be_bytes([assignment[0], assignment[1]]);
    let mut body = bytes::Bytes::copy_from_slice(&assignment[2..]);
    match ConsumerProtocolAssignment::decode(&mut body, version.clamp(0, 3)) {
        Ok(a) => a
            .assigned_partitions
            .iter()
            .map(|tp| (tp.topic.to_string(), tp.partitions.clone()))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Every partition the group has a committed offset for, with its end offset and lag. Kafka's
/// OffsetFetch for all of a group's partitions is not in librdkafka's Rust binding, so the
/// group's offsets are asked for every partition of every topic but the internal ones.
fn lags(
    consumer: &BaseConsumer<Context>,
    common: &Common,
    members: &[Member],
) -> anyhow::Result<Vec<Lag>> {
    let timeout = client::timeout(common);
    let metadata = client::metadata(consumer, common, None, "reading the topics")?;
    let mut tpl = TopicPartitionList::new();
    for t in metadata
        .topics()
        .iter()
        .filter(|t| !t.name().starts_with("__"))
    {
        for p in t.partitions() {
            tpl.add_partition(t.name(), p.id());
        }
    }
    let committed = consumer
        .committed_offsets(tpl, timeout)
        .map_err(|e| client::failed(consumer, "reading the group's offsets", e))?;
    let mut lags = Vec::new();
    for e in committed.elements() {
        let Offset::Offset(offset) = e.offset() else {
            continue;
        };
        let (_, end) = consumer
            .fetch_watermarks(e.topic(), e.partition(), timeout)
            .map_err(|err| {
                client::failed(
                    consumer,
                    &format!("offsets of {}-{}", e.topic(), e.partition()),
                    err,
                )
            })?;
        let member = members.iter().find(|m| {
            m.assignment
                .iter()
                .any(|(t, ps)| t == e.topic() && ps.contains(&e.partition()))
        });
        lags.push(Lag {
            topic: e.topic().to_string(),
            partition: e.partition(),
            committed: offset,
            end,
            member: member.map(|m| m.id.clone()),
        });
    }
    lags.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    Ok(lags)
}

/// Commits new offsets for an empty group: moving a live group's offsets under its members
/// would be undone by their next commit, so it is refused.
fn seek(common: &Common, group: &str, topic: &str, to: &str) -> anyhow::Result<()> {
    let position: Position = to
        .parse()
        .map_err(|e: String| anyhow::anyhow!("--to {e}"))?;
    let consumer = client::consumer(common, Some(group))?;
    let (state, _, members) = group_info(&consumer, common, group)?;
    anyhow::ensure!(
        members.is_empty() && matches!(state.as_str(), "Empty" | "Dead"),
        "group {group} is {state} with {} members: seek moves only an empty group's offsets; stop its consumers first",
        members.len()
    );
    let timeout = client::timeout(common);
    let what = format!("seeking group {group}");
    let partitions: Vec<i32> = client::partitions(&consumer, common, topic, &what)?
        .iter()
        .map(|p| p.id)
        .collect();
    let offsets = position::resolve(&consumer, topic, &partitions, position, timeout)?;
    let mut tpl = TopicPartitionList::new();
    for &(p, offset) in &offsets {
        tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
    }
    consumer.commit(&tpl, CommitMode::Sync).map_err(|e| {
        client::failed(&consumer, &format!("committing group {group}'s offsets"), e)
    })?;
    let json: Vec<Value> = offsets
        .iter()
        .map(|(p, o)| json!({"topic": topic, "partition": p, "offset": o}))
        .collect();
    output::print(common.format, &Value::Array(json), || {
        let mut t = Table::new(&["TOPIC", "PARTITION", "OFFSET"]);
        for (p, o) in &offsets {
            t.row(vec![topic.to_string(), p.to_string(), o.to_string()]);
        }
        format!("group {group} now starts at:\n{}", t.render())
    });
    Ok(())
}

fn delete(common: &Common, groups: &[String]) -> anyhow::Result<()> {
    let (admin, options) = client::admin(common)?;
    let refs: Vec<&str> = groups.iter().map(String::as_str).collect();
    let results = block_on(admin.delete_groups(&refs, &options))
        .map_err(|e| admin.inner().context().error("deleting groups", e))?;
    client::all_done(&admin, "deleting groups", results)?;
    output::print(common.format, &json!({"deleted": groups}), || {
        format!("deleted {}\n", groups.join(", "))
    });
    Ok(())
}
