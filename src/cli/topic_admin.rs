//! CreateTopics, CreatePartitions, DeleteTopics and IncrementalAlterConfigs through
//! librdkafka's C API (`native_admin.rs`): librdkafka's topic and config results carry the
//! broker's error message ("500 partitions of kp would put 408 partitions on shard 0, over its
//! limit ..."), which the rdkafka crate's admin calls drop, keeping only the code (and it has
//! no IncrementalAlterConfigs at all).

use super::client::Context;
use super::native_admin::{self as native, c, text, Guard, Request, ERRSTR_BYTES};
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

/// A topic operation, as the commands ask for it.
pub enum TopicOp<'a> {
    Create {
        name: &'a str,
        partitions: i32,
        replicas: i32,
        configs: &'a [(String, String)],
    },
    AddPartitions {
        name: &'a str,
        total: i32,
    },
    Delete {
        names: &'a [String],
    },
    /// Sets and deletes some of a topic's overrides, keeping the others (KIP-339).
    AlterConfigs {
        name: &'a str,
        sets: &'a [(String, String)],
        deletes: &'a [String],
    },
}

/// One topic's outcome: its name, and where it failed the error with the broker's message.
pub type Outcome = (String, Option<String>);

/// Runs `op` and returns each topic's outcome; Err if the request itself failed (no broker
/// answered in `timeout`, an invalid argument).
pub fn run(
    admin: &AdminClient<Context>,
    op: TopicOp,
    timeout: Duration,
) -> anyhow::Result<Vec<Outcome>> {
    use rd::rd_kafka_admin_op_t::*;
    let kind = match op {
        TopicOp::Create { .. } => RD_KAFKA_ADMIN_OP_CREATETOPICS,
        TopicOp::AddPartitions { .. } => RD_KAFKA_ADMIN_OP_CREATEPARTITIONS,
        TopicOp::Delete { .. } => RD_KAFKA_ADMIN_OP_DELETETOPICS,
        TopicOp::AlterConfigs { .. } => RD_KAFKA_ADMIN_OP_INCREMENTALALTERCONFIGS,
    };
    // SAFETY: `submit` hands librdkafka objects it made and keeps alive for the call; the
    // event's results are read while the event lives.
    let event = native::call(admin, kind, timeout, |r| unsafe { submit(r, &op) })?;
    Ok(unsafe { outcomes(&op, event.0) })
}

/// Sends `op`'s request (librdkafka copies what it needs; the guards then destroy the rest).
unsafe fn submit(r: &Request, op: &TopicOp) -> anyhow::Result<()> {
    let mut errstr = [0 as std::ffi::c_char; ERRSTR_BYTES];
    let (p, n) = (errstr.as_mut_ptr(), errstr.len());
    match op {
        TopicOp::Create {
            name,
            partitions,
            replicas,
            configs,
        } => {
            let made = rd::rd_kafka_NewTopic_new(c(name)?.as_ptr(), *partitions, *replicas, p, n);
            let mut topic = Guard::new(made, rd::rd_kafka_NewTopic_destroy, &errstr)?;
            for (k, v) in configs.iter() {
                let set = rd::rd_kafka_NewTopic_set_config(topic.0, c(k)?.as_ptr(), c(v)?.as_ptr());
                if !native::ok(set) {
                    anyhow::bail!("config {k}={v}: {}", RDKafkaErrorCode::from(set));
                }
            }
            rd::rd_kafka_CreateTopics(r.rk, &mut topic.0, 1, r.options, r.queue);
        }
        TopicOp::AddPartitions { name, total } => {
            let total = usize::try_from(*total)?;
            let made = rd::rd_kafka_NewPartitions_new(c(name)?.as_ptr(), total, p, n);
            let mut parts = Guard::new(made, rd::rd_kafka_NewPartitions_destroy, &errstr)?;
            rd::rd_kafka_CreatePartitions(r.rk, &mut parts.0, 1, r.options, r.queue);
        }
        TopicOp::Delete { names } => {
            let mut topics = Vec::with_capacity(names.len());
            for name in names.iter() {
                let made = rd::rd_kafka_DeleteTopic_new(c(name)?.as_ptr());
                topics.push(Guard::new(made, rd::rd_kafka_DeleteTopic_destroy, &errstr)?);
            }
            let mut raw: Vec<_> = topics.iter().map(|t| t.0).collect();
            rd::rd_kafka_DeleteTopics(r.rk, raw.as_mut_ptr(), raw.len(), r.options, r.queue);
        }
        TopicOp::AlterConfigs {
            name,
            sets,
            deletes,
        } => submit_alter_configs(r, name, sets, deletes)?,
    }
    Ok(())
}

/// IncrementalAlterConfigs of one topic: SET each of `sets`, DELETE each of `deletes`.
unsafe fn submit_alter_configs(
    r: &Request,
    name: &str,
    sets: &[(String, String)],
    deletes: &[String],
) -> anyhow::Result<()> {
    use rd::rd_kafka_AlterConfigOpType_t::*;
    let topic = rd::rd_kafka_ResourceType_t::RD_KAFKA_RESOURCE_TOPIC;
    let made = rd::rd_kafka_ConfigResource_new(topic, c(name)?.as_ptr());
    anyhow::ensure!(!made.is_null(), "librdkafka refused topic {name}");
    let mut resource = Guard(made, rd::rd_kafka_ConfigResource_destroy);
    let edits = sets
        .iter()
        .map(|(k, v)| (k, Some(v), RD_KAFKA_ALTER_CONFIG_OP_TYPE_SET))
        .chain(
            deletes
                .iter()
                .map(|k| (k, None, RD_KAFKA_ALTER_CONFIG_OP_TYPE_DELETE)),
        );
    for (key, value, op) in edits {
        let value = value.map(|v| c(v)).transpose()?;
        let value = value.as_ref().map_or(std::ptr::null(), |v| v.as_ptr());
        let error = rd::rd_kafka_ConfigResource_add_incremental_config(
            resource.0,
            c(key)?.as_ptr(),
            op,
            value,
        );
        if let Some(e) = native::error(error) {
            rd::rd_kafka_error_destroy(error);
            anyhow::bail!("config {key}: {e}");
        }
    }
    rd::rd_kafka_IncrementalAlterConfigs(r.rk, &mut resource.0, 1, r.options, r.queue);
    Ok(())
}

/// Each topic result of `event` (of `op`'s kind).
unsafe fn outcomes(op: &TopicOp, event: *mut rd::rd_kafka_event_t) -> Vec<Outcome> {
    let mut count = 0usize;
    let results = match op {
        TopicOp::Create { .. } => rd::rd_kafka_CreateTopics_result_topics(
            rd::rd_kafka_event_CreateTopics_result(event),
            &mut count,
        ),
        TopicOp::AddPartitions { .. } => rd::rd_kafka_CreatePartitions_result_topics(
            rd::rd_kafka_event_CreatePartitions_result(event),
            &mut count,
        ),
        TopicOp::Delete { .. } => rd::rd_kafka_DeleteTopics_result_topics(
            rd::rd_kafka_event_DeleteTopics_result(event),
            &mut count,
        ),
        TopicOp::AlterConfigs { .. } => std::ptr::null_mut(),
    };
    if let TopicOp::AlterConfigs { .. } = op {
        return altered_configs(event);
    }
    (0..count)
        .map(|i| {
            let result = *results.add(i);
            outcome(
                rd::rd_kafka_topic_result_name(result),
                rd::rd_kafka_topic_result_error(result),
                rd::rd_kafka_topic_result_error_string(result),
            )
        })
        .collect()
}

/// A result's outcome from librdkafka's name, code and message of it.
unsafe fn outcome(
    name: *const std::ffi::c_char,
    code: rd::rd_kafka_resp_err_t,
    message: *const std::ffi::c_char,
) -> Outcome {
    let failed = !native::ok(code);
    (
        text(name),
        failed.then(|| native::described(code, &text(message))),
    )
}

/// Each resource result of an IncrementalAlterConfigs event.
unsafe fn altered_configs(event: *mut rd::rd_kafka_event_t) -> Vec<Outcome> {
    let mut count = 0usize;
    let result = rd::rd_kafka_event_IncrementalAlterConfigs_result(event);
    let resources = rd::rd_kafka_IncrementalAlterConfigs_result_resources(result, &mut count);
    (0..count)
        .map(|i| {
            let resource = *resources.add(i);
            outcome(
                rd::rd_kafka_ConfigResource_name(resource),
                rd::rd_kafka_ConfigResource_error(resource),
                rd::rd_kafka_ConfigResource_error_string(resource),
            )
        })
        .collect()
}
