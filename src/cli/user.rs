//! `sluice user ...`: SCRAM users (Kafka's `kafka-configs --entity-type users`), through
//! librdkafka's AlterUserScramCredentials and DescribeUserScramCredentials calls
//! (`native_admin.rs`; the rdkafka crate has neither). The broker stores salted keys only.

use super::args::{Common, Mechanism, UserCommand};
use super::client::{self, Context};
use super::native_admin::{self as native, c, text, Guard, Request};
use super::output::{self, Table};
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use serde_json::{json, Value};

pub fn run(command: UserCommand) -> anyhow::Result<i32> {
    match command {
        UserCommand::Set {
            name,
            password,
            mechanism,
            iterations,
            common,
        } => set(&common, &name, &password, mechanism, iterations),
        UserCommand::List { names, common } => list(&common, &names),
        UserCommand::Delete {
            name,
            mechanisms,
            common,
        } => delete(&common, &name, &mechanisms),
    }
    .map(|()| 0)
}

/// A change to one of a user's credentials.
enum Alteration<'a> {
    Upsert { password: &'a str, iterations: i32 },
    Delete,
}

fn set(
    common: &Common,
    name: &str,
    password: &str,
    mechanism: Mechanism,
    iterations: i32,
) -> anyhow::Result<()> {
    let change = Alteration::Upsert {
        password,
        iterations,
    };
    let (admin, _) = client::admin(common)?;
    alter(&admin, common, name, &[(mechanism, change)], "setting")?;
    let json = json!({"user": name, "mechanism": mechanism.name(), "iterations": iterations});
    output::print(common.format, &json, || {
        format!("set {} credential of user {name}\n", mechanism.name())
    });
    Ok(())
}

fn delete(common: &Common, name: &str, mechanisms: &[Mechanism]) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let mechanisms = match mechanisms.is_empty() {
        false => mechanisms.to_vec(),
        true => {
            let held = describe(&admin, common, &[name.to_string()])?;
            held.into_iter().map(|(_, m, _)| m).collect()
        }
    };
    let changes: Vec<_> = mechanisms
        .iter()
        .map(|m| (*m, Alteration::Delete))
        .collect();
    alter(&admin, common, name, &changes, "deleting")?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    output::print(
        common.format,
        &json!({"user": name, "deleted": names}),
        || format!("deleted {} of user {name}\n", names.join(", ")),
    );
    Ok(())
}

fn list(common: &Common, names: &[String]) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let rows = describe(&admin, common, names)?;
    let json: Vec<Value> = rows
        .iter()
        .map(|(u, m, i)| json!({"user": u, "mechanism": m.name(), "iterations": i}))
        .collect();
    output::print(common.format, &Value::Array(json), || {
        let mut t = Table::new(&["USER", "MECHANISM", "ITERATIONS"]);
        for (u, m, i) in &rows {
            t.row(vec![u.clone(), m.name().to_string(), i.to_string()]);
        }
        t.render()
    });
    Ok(())
}

/// Applies `changes` to user `name`'s credentials; Err names each refused one.
fn alter(
    admin: &AdminClient<Context>,
    common: &Common,
    name: &str,
    changes: &[(Mechanism, Alteration)],
    doing: &str,
) -> anyhow::Result<()> {
    let what = format!("{doing} credentials of user {name}");
    let kind = rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_ALTERUSERSCRAMCREDENTIALS;
    // SAFETY: `submit_alter` hands librdkafka alterations it keeps alive for the call; the
    // event's responses are read while the event lives.
    let event = native::call(admin, kind, client::timeout(common), |r| unsafe {
        submit_alter(r, name, changes)
    })
    .map_err(|e| admin.inner().context().error(&what, e))?;
    let outcomes = unsafe { altered(event.0) };
    client::all_succeeded(admin, &what, outcomes)
}

unsafe fn submit_alter(
    r: &Request,
    name: &str,
    changes: &[(Mechanism, Alteration)],
) -> anyhow::Result<()> {
    let user = c(name)?;
    let mut made = Vec::with_capacity(changes.len());
    for (mechanism, change) in changes {
        let alteration = match change {
            // No salt given: librdkafka draws a random one.
            Alteration::Upsert {
                password,
                iterations,
            } => rd::rd_kafka_UserScramCredentialUpsertion_new(
                user.as_ptr(),
                mechanism.native(),
                *iterations,
                password.as_ptr(),
                password.len(),
                std::ptr::null(),
                0,
            ),
            Alteration::Delete => {
                rd::rd_kafka_UserScramCredentialDeletion_new(user.as_ptr(), mechanism.native())
            }
        };
        anyhow::ensure!(
            !alteration.is_null(),
            "librdkafka refused the change of {name}"
        );
        made.push(Guard(
            alteration,
            rd::rd_kafka_UserScramCredentialAlteration_destroy,
        ));
    }
    let mut raw: Vec<_> = made.iter().map(|a| a.0).collect();
    rd::rd_kafka_AlterUserScramCredentials(r.rk, raw.as_mut_ptr(), raw.len(), r.options, r.queue);
    Ok(())
}

/// Each response of an AlterUserScramCredentials result event: (user, error).
unsafe fn altered(event: *mut rd::rd_kafka_event_t) -> Vec<(String, Option<String>)> {
    let result = rd::rd_kafka_event_AlterUserScramCredentials_result(event);
    let mut count = 0usize;
    let responses = rd::rd_kafka_AlterUserScramCredentials_result_responses(result, &mut count);
    (0..count)
        .map(|i| {
            let r = *responses.add(i);
            let user = text(rd::rd_kafka_AlterUserScramCredentials_result_response_user(
                r,
            ));
            (
                user,
                native::error(rd::rd_kafka_AlterUserScramCredentials_result_response_error(r)),
            )
        })
        .collect()
}

/// The credentials of `names` (every user's when empty): (user, mechanism, iterations), by
/// user then mechanism. Err names each user that could not be described (RESOURCE_NOT_FOUND:
/// no credentials).
fn describe(
    admin: &AdminClient<Context>,
    common: &Common,
    names: &[String],
) -> anyhow::Result<Vec<(String, Mechanism, i32)>> {
    let what = "describing users";
    let users: Vec<_> = names.iter().map(|n| c(n)).collect::<anyhow::Result<_>>()?;
    let kind = rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEUSERSCRAMCREDENTIALS;
    // SAFETY: the names live until the call returns (librdkafka copies them).
    let event = native::call(admin, kind, client::timeout(common), |r| unsafe {
        let mut raw: Vec<*const std::ffi::c_char> = users.iter().map(|u| u.as_ptr()).collect();
        rd::rd_kafka_DescribeUserScramCredentials(
            r.rk,
            raw.as_mut_ptr(),
            raw.len(),
            r.options,
            r.queue,
        );
        Ok(())
    })
    .map_err(|e| admin.inner().context().error(what, e))?;
    let (rows, outcomes) = unsafe { described(event.0) };
    client::all_succeeded(admin, what, outcomes)?;
    Ok(rows)
}

/// The credentials and per-user outcomes of a DescribeUserScramCredentials result event.
#[allow(clippy::type_complexity)]
unsafe fn described(
    event: *mut rd::rd_kafka_event_t,
) -> (Vec<(String, Mechanism, i32)>, Vec<(String, Option<String>)>) {
    let result = rd::rd_kafka_event_DescribeUserScramCredentials_result(event);
    let mut count = 0usize;
    let descriptions =
        rd::rd_kafka_DescribeUserScramCredentials_result_descriptions(result, &mut count);
    let (mut rows, mut outcomes) = (Vec::new(), Vec::new());
    for i in 0..count {
        let d = *descriptions.add(i);
        let user = text(rd::rd_kafka_UserScramCredentialsDescription_user(d));
        outcomes.push((
            user.clone(),
            native::error(rd::rd_kafka_UserScramCredentialsDescription_error(d)),
        ));
        for j in 0..rd::rd_kafka_UserScramCredentialsDescription_scramcredentialinfo_count(d) {
            let info = rd::rd_kafka_UserScramCredentialsDescription_scramcredentialinfo(d, j);
            if let Some(m) = Mechanism::of(rd::rd_kafka_ScramCredentialInfo_mechanism(info)) {
                rows.push((
                    user.clone(),
                    m,
                    rd::rd_kafka_ScramCredentialInfo_iterations(info),
                ));
            }
        }
    }
    rows.sort_by(|a, b| (&a.0, a.1.name()).cmp(&(&b.0, b.1.name())));
    (rows, outcomes)
}
