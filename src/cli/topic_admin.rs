//! CreateTopics, CreatePartitions and DeleteTopics through librdkafka's C API
//! (`rdkafka::bindings`) on the admin client's own handle: librdkafka's topic results carry the
//! broker's error message ("500 partitions of kp would put 408 partitions on shard 0, over its
//! limit ..."), which the rdkafka crate's admin calls drop, keeping only the code. Each call
//! gets its own queue and waits for its one result event, bounded by the command's timeout.

use super::client::Context;
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::types::RDKafkaErrorCode;
use std::ffi::{CStr, CString};
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
    let rk = admin.inner().native_ptr();
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `rk` is the admin client's live handle (borrowed for this call); every object
    // made here is destroyed by its guard, after librdkafka copied what it needs from it.
    unsafe {
        let queue = Guard(rd::rd_kafka_queue_new(rk), rd::rd_kafka_queue_destroy);
        let options = admin_options(rk, &op, timeout_ms)?;
        submit(rk, &op, options.0, queue.0)?;
        // librdkafka answers by the operation timeout (with a timeout error per topic).
        let event = rd::rd_kafka_queue_poll(queue.0, timeout_ms.saturating_add(5_000));
        if event.is_null() {
            anyhow::bail!("no answer in {timeout:?}");
        }
        let event = Guard(event, rd::rd_kafka_event_destroy);
        if rd::rd_kafka_event_error(event.0) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            anyhow::bail!("{}", text(rd::rd_kafka_event_error_string(event.0)));
        }
        Ok(outcomes(&op, event.0))
    }
}

/// Destroys a librdkafka object when dropped.
struct Guard<T>(*mut T, unsafe extern "C" fn(*mut T));

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by librdkafka's constructor for this destructor, destroyed once.
            unsafe { (self.1)(self.0) }
        }
    }
}

/// Bytes for librdkafka's error messages about arguments.
const ERRSTR_BYTES: usize = 512;

unsafe fn admin_options(
    rk: *mut rd::rd_kafka_t,
    op: &TopicOp,
    timeout_ms: i32,
) -> anyhow::Result<Guard<rd::rd_kafka_AdminOptions_t>> {
    use rd::rd_kafka_admin_op_t::*;
    let kind = match op {
        TopicOp::Create { .. } => RD_KAFKA_ADMIN_OP_CREATETOPICS,
        TopicOp::AddPartitions { .. } => RD_KAFKA_ADMIN_OP_CREATEPARTITIONS,
        TopicOp::Delete { .. } => RD_KAFKA_ADMIN_OP_DELETETOPICS,
    };
    let options = Guard(
        rd::rd_kafka_AdminOptions_new(rk, kind),
        rd::rd_kafka_AdminOptions_destroy,
    );
    let mut errstr = [0 as std::ffi::c_char; ERRSTR_BYTES];
    let (p, n) = (errstr.as_mut_ptr(), errstr.len());
    let ok = rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
    if rd::rd_kafka_AdminOptions_set_request_timeout(options.0, timeout_ms, p, n) != ok
        || rd::rd_kafka_AdminOptions_set_operation_timeout(options.0, timeout_ms, p, n) != ok
    {
        anyhow::bail!("{}", text(p));
    }
    Ok(options)
}

/// Sends `op`'s request; its result event comes to `queue`.
unsafe fn submit(
    rk: *mut rd::rd_kafka_t,
    op: &TopicOp,
    options: *mut rd::rd_kafka_AdminOptions_t,
    queue: *mut rd::rd_kafka_queue_t,
) -> anyhow::Result<()> {
    let mut errstr = [0 as std::ffi::c_char; ERRSTR_BYTES];
    let (p, n) = (errstr.as_mut_ptr(), errstr.len());
    match op {
        TopicOp::Create {
            name,
            partitions,
            replicas,
            configs,
        } => {
            let topic = rd::rd_kafka_NewTopic_new(c(name)?.as_ptr(), *partitions, *replicas, p, n);
            let mut topic = Guard(non_null(topic, p)?, rd::rd_kafka_NewTopic_destroy);
            for (k, v) in configs.iter() {
                let set = rd::rd_kafka_NewTopic_set_config(topic.0, c(k)?.as_ptr(), c(v)?.as_ptr());
                if set != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    anyhow::bail!("config {k}={v}: {}", RDKafkaErrorCode::from(set));
                }
            }
            rd::rd_kafka_CreateTopics(rk, &mut topic.0, 1, options, queue);
        }
        TopicOp::AddPartitions { name, total } => {
            let total = usize::try_from(*total)?;
            let parts = rd::rd_kafka_NewPartitions_new(c(name)?.as_ptr(), total, p, n);
            let mut parts = Guard(non_null(parts, p)?, rd::rd_kafka_NewPartitions_destroy);
            rd::rd_kafka_CreatePartitions(rk, &mut parts.0, 1, options, queue);
        }
        TopicOp::Delete { names } => {
            let mut topics = Vec::with_capacity(names.len());
            for name in names.iter() {
                let t = rd::rd_kafka_DeleteTopic_new(c(name)?.as_ptr());
                topics.push(Guard(t, rd::rd_kafka_DeleteTopic_destroy));
            }
            let mut raw: Vec<_> = topics.iter().map(|t| t.0).collect();
            rd::rd_kafka_DeleteTopics(rk, raw.as_mut_ptr(), raw.len(), options, queue);
        }
    }
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
    };
    (0..count)
        .map(|i| {
            let result = *results.add(i);
            let name = text(rd::rd_kafka_topic_result_name(result));
            let code = rd::rd_kafka_topic_result_error(result);
            let failed = code != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR;
            let message = text(rd::rd_kafka_topic_result_error_string(result));
            (name, failed.then(|| described(code, &message)))
        })
        .collect()
}

/// The error's name, with the broker's message where it said more than the code does.
fn described(code: rd::rd_kafka_resp_err_t, message: &str) -> String {
    // SAFETY: librdkafka's static description of a code.
    let generic = unsafe { text(rd::rd_kafka_err2str(code)) };
    let code = RDKafkaErrorCode::from(code);
    match message.is_empty() || message == generic {
        true => code.to_string(),
        false => format!("{code}: {message}"),
    }
}

fn c(s: &str) -> anyhow::Result<CString> {
    CString::new(s).map_err(|_| anyhow::anyhow!("{s:?} holds a NUL byte"))
}

/// `made`, or the error librdkafka wrote to `errstr` making it.
unsafe fn non_null<T>(made: *mut T, errstr: *const std::ffi::c_char) -> anyhow::Result<*mut T> {
    match made.is_null() {
        true => anyhow::bail!("{}", text(errstr)),
        false => Ok(made),
    }
}

/// A C string of librdkafka's, copied (empty for null).
unsafe fn text(p: *const std::ffi::c_char) -> String {
    match p.is_null() {
        true => String::new(),
        false => CStr::from_ptr(p).to_string_lossy().into_owned(),
    }
}
