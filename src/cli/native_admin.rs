//! librdkafka's C admin API (`rdkafka::bindings`) on an admin client's own handle, for what the
//! rdkafka crate leaves out: the broker's error messages in topic results (`topic_admin.rs`)
//! and the SCRAM credential calls (`user.rs`). A call gets its own queue and waits for its one
//! result event, bounded by the command's timeout; every object made is destroyed by a guard.

use super::client::Context;
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use rdkafka::types::RDKafkaErrorCode;
use std::ffi::{CStr, CString};
use std::time::Duration;

/// Destroys a librdkafka object when dropped.
pub struct Guard<T>(pub *mut T, pub unsafe extern "C" fn(*mut T));

impl<T> Guard<T> {
    /// `made`, to be destroyed by `destroy`; Err with what librdkafka wrote to `errstr` when
    /// it made nothing.
    pub fn new(
        made: *mut T,
        destroy: unsafe extern "C" fn(*mut T),
        errstr: &[std::ffi::c_char],
    ) -> anyhow::Result<Guard<T>> {
        match made.is_null() {
            // SAFETY: librdkafka wrote a NUL-terminated message into the buffer it was given.
            true => anyhow::bail!("{}", unsafe { text(errstr.as_ptr()) }),
            false => Ok(Guard(made, destroy)),
        }
    }
}

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: made by librdkafka's constructor for this destructor, destroyed once.
            unsafe { (self.1)(self.0) }
        }
    }
}

/// Bytes for librdkafka's error messages about arguments.
pub const ERRSTR_BYTES: usize = 512;

/// A handle's request in flight: `submit` sends it (with these options, to this queue).
pub struct Request {
    pub rk: *mut rd::rd_kafka_t,
    pub options: *mut rd::rd_kafka_AdminOptions_t,
    pub queue: *mut rd::rd_kafka_queue_t,
}

/// Sends one admin request of `kind` through `submit` and returns its result event, once its
/// top-level error (none answered in time, say) is ruled out.
pub fn call(
    admin: &AdminClient<Context>,
    kind: rd::rd_kafka_admin_op_t,
    timeout: Duration,
    submit: impl FnOnce(&Request) -> anyhow::Result<()>,
) -> anyhow::Result<Guard<rd::rd_kafka_event_t>> {
    let rk = admin.inner().native_ptr();
    let timeout_ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    let mut errstr = [0 as std::ffi::c_char; ERRSTR_BYTES];
    // SAFETY: `rk` is the admin client's live handle, borrowed for this call; the queue and
    // options live until the event has come.
    unsafe {
        let queue = Guard(rd::rd_kafka_queue_new(rk), rd::rd_kafka_queue_destroy);
        let options = rd::rd_kafka_AdminOptions_new(rk, kind);
        let options = Guard::new(options, rd::rd_kafka_AdminOptions_destroy, &errstr)?;
        let (p, n) = (errstr.as_mut_ptr(), errstr.len());
        // Only the topic operations wait for the controller (an operation timeout).
        use rd::rd_kafka_admin_op_t::*;
        let waits = matches!(
            kind,
            RD_KAFKA_ADMIN_OP_CREATETOPICS
                | RD_KAFKA_ADMIN_OP_DELETETOPICS
                | RD_KAFKA_ADMIN_OP_CREATEPARTITIONS
        );
        if !ok(rd::rd_kafka_AdminOptions_set_request_timeout(
            options.0, timeout_ms, p, n,
        )) || (waits
            && !ok(rd::rd_kafka_AdminOptions_set_operation_timeout(
                options.0, timeout_ms, p, n,
            )))
        {
            anyhow::bail!("{}", text(p));
        }
        submit(&Request {
            rk,
            options: options.0,
            queue: queue.0,
        })?;
        // librdkafka answers by the request timeout (with a timeout error).
        let event = rd::rd_kafka_queue_poll(queue.0, timeout_ms.saturating_add(5_000));
        if event.is_null() {
            anyhow::bail!("no answer in {timeout:?}");
        }
        let event = Guard(event, rd::rd_kafka_event_destroy);
        if !ok(rd::rd_kafka_event_error(event.0)) {
            anyhow::bail!("{}", text(rd::rd_kafka_event_error_string(event.0)));
        }
        Ok(event)
    }
}

pub fn ok(code: rd::rd_kafka_resp_err_t) -> bool {
    code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
}

/// The error's name, with the broker's message where it says more than the code does.
pub fn described(code: rd::rd_kafka_resp_err_t, message: &str) -> String {
    // SAFETY: librdkafka's static description of a code.
    let generic = unsafe { text(rd::rd_kafka_err2str(code)) };
    let code = RDKafkaErrorCode::from(code);
    match message.is_empty() || message == generic {
        true => code.to_string(),
        false => format!("{code}: {message}"),
    }
}

/// An `rd_kafka_error_t` of a result (None: no error), described.
///
/// # Safety
/// `error` is null or one of librdkafka's, alive for this call.
pub unsafe fn error(error: *const rd::rd_kafka_error_t) -> Option<String> {
    if error.is_null() || ok(rd::rd_kafka_error_code(error)) {
        return None;
    }
    let code = rd::rd_kafka_error_code(error);
    Some(described(code, &text(rd::rd_kafka_error_string(error))))
}

pub fn c(s: &str) -> anyhow::Result<CString> {
    CString::new(s).map_err(|_| anyhow::anyhow!("{s:?} holds a NUL byte"))
}

/// A C string of librdkafka's, copied (empty for null).
///
/// # Safety
/// `p` is null or a NUL-terminated string alive for this call.
pub unsafe fn text(p: *const std::ffi::c_char) -> String {
    match p.is_null() {
        true => String::new(),
        false => CStr::from_ptr(p).to_string_lossy().into_owned(),
    }
}
