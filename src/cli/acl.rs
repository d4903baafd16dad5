//! `sluice acl add|list|remove`: ACLs with `kafka-acls`' flags, through librdkafka's
//! CreateAcls, DescribeAcls and DeleteAcls C calls (`native_admin.rs`; the rdkafka crate has
//! none). An ACL is (resource type, name, pattern type, principal, host, operation,
//! permission); `add` makes one for each principal, host, operation and resource given,
//! `list` and `remove` take the same flags as filters.

use super::args::{AclArgs, AclCommand, AclOperation, Common, PatternType};
use super::client::{self, Context};
use super::native_admin::{self as native, c, text, Guard, Request, ERRSTR_BYTES};
use super::output::{self, Table};
use rd::rd_kafka_AclPermissionType_t as Permission;
use rd::rd_kafka_ResourcePatternType_t as Pattern;
use rd::rd_kafka_ResourceType_t as Resource;
use rdkafka::admin::AdminClient;
use rdkafka::bindings as rd;
use serde_json::{json, Value};
use std::ffi::CString;

/// The cluster's one resource name (Kafka's `kafka-cluster`).
const CLUSTER: &str = "kafka-cluster";

/// An ACL, or a filter of them (`None` and the ANY values match anything).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Acl {
    resource: Resource,
    name: Option<String>,
    pattern: Pattern,
    principal: Option<String>,
    host: Option<String>,
    operation: rd::rd_kafka_AclOperation_t,
    permission: Permission,
}

pub fn run(command: AclCommand) -> anyhow::Result<i32> {
    match command {
        AclCommand::Add { acl, common } => add(&common, &acl),
        AclCommand::List { acl, common } => list(&common, &acl),
        AclCommand::Remove { acl, common } => remove(&common, &acl),
    }
    .map(|()| 0)
}

fn add(common: &Common, a: &AclArgs) -> anyhow::Result<()> {
    let pattern = pattern(a.pattern);
    anyhow::ensure!(
        matches!(a.pattern, PatternType::Literal | PatternType::Prefixed),
        "an ACL's --resource-pattern-type is literal or prefixed"
    );
    let (resources, grants) = (resources(a), grants(a, false));
    anyhow::ensure!(
        !resources.is_empty(),
        "name a --topic, --group, --transactional-id or --cluster"
    );
    anyhow::ensure!(
        !grants.is_empty(),
        "name an --allow-principal or a --deny-principal"
    );
    anyhow::ensure!(!a.operations.is_empty(), "name an --operation");
    let operations: Vec<_> = a.operations.iter().map(|o| operation(*o)).collect();
    let acls = product(&resources, pattern, &grants, &operations);
    let (admin, _) = client::admin(common)?;
    create(&admin, common, &acls)?;
    print(common, &acls, &format!("added {} ACLs", acls.len()));
    Ok(())
}

fn list(common: &Common, a: &AclArgs) -> anyhow::Result<()> {
    let (admin, _) = client::admin(common)?;
    let mut found = Vec::new();
    for filter in filters(a, true) {
        found.extend(describe(&admin, common, &filter)?);
    }
    sorted(&mut found);
    print(common, &found, &format!("{} ACLs", found.len()));
    Ok(())
}

fn remove(common: &Common, a: &AclArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        !resources(a).is_empty(),
        "name the --topic, --group, --transactional-id or --cluster whose ACLs to remove"
    );
    let (admin, _) = client::admin(common)?;
    let mut removed = delete(&admin, common, &filters(a, false))?;
    sorted(&mut removed);
    print(common, &removed, &format!("removed {} ACLs", removed.len()));
    Ok(())
}

/// In a stable order (resource, principal, operation), each ACL once.
fn sorted(acls: &mut Vec<Acl>) {
    acls.sort_by_key(|a| {
        let codes = (a.resource as u32, a.pattern as u32, a.operation as u32);
        (
            codes,
            a.name.clone(),
            a.principal.clone(),
            a.host.clone(),
            a.permission as u32,
        )
    });
    acls.dedup();
}

/// The resources named: (type, name), the name always given (`None` is a filter's "any").
fn resources(a: &AclArgs) -> Vec<(Resource, Option<String>)> {
    let named = |r: Resource, names: &[String]| -> Vec<(Resource, Option<String>)> {
        names.iter().map(|n| (r, Some(n.clone()))).collect()
    };
    let mut out = named(Resource::RD_KAFKA_RESOURCE_TOPIC, &a.topics);
    out.extend(named(Resource::RD_KAFKA_RESOURCE_GROUP, &a.groups));
    out.extend(named(
        Resource::RD_KAFKA_RESOURCE_TRANSACTIONAL_ID,
        &a.transactional_ids,
    ));
    if a.cluster {
        out.push((
            Resource::RD_KAFKA_RESOURCE_BROKER,
            Some(CLUSTER.to_string()),
        ));
    }
    out
}

/// (principal, permission, host) for each principal and host named; `listing` adds the
/// `--principal`s with either permission.
fn grants(a: &AclArgs, listing: bool) -> Vec<(Option<String>, Permission, Option<String>)> {
    let hosts = |given: &[String]| match given.is_empty() {
        true => vec!["*".to_string()],
        false => given.to_vec(),
    };
    let mut out = Vec::new();
    let sides = [
        (
            &a.allow_principals,
            Permission::RD_KAFKA_ACL_PERMISSION_TYPE_ALLOW,
            hosts(&a.allow_hosts),
        ),
        (
            &a.deny_principals,
            Permission::RD_KAFKA_ACL_PERMISSION_TYPE_DENY,
            hosts(&a.deny_hosts),
        ),
    ];
    for (principals, permission, hosts) in sides {
        for p in principals {
            for h in &hosts {
                out.push((Some(p.clone()), permission, Some(h.clone())));
            }
        }
    }
    if listing {
        let any = Permission::RD_KAFKA_ACL_PERMISSION_TYPE_ANY;
        out.extend(a.principals.iter().map(|p| (Some(p.clone()), any, None)));
    }
    out
}

/// The filters `list` (`listing`) or `remove` asks with: each resource (any, listing none)
/// by each principal (any where none is named) by each operation (any where none is named).
fn filters(a: &AclArgs, listing: bool) -> Vec<Acl> {
    let mut resources = resources(a);
    let pattern = match resources.is_empty() {
        true => {
            resources.push((Resource::RD_KAFKA_RESOURCE_ANY, None));
            Pattern::RD_KAFKA_RESOURCE_PATTERN_ANY
        }
        false => pattern(a.pattern),
    };
    let mut grants = grants(a, listing);
    if grants.is_empty() {
        grants.push((None, Permission::RD_KAFKA_ACL_PERMISSION_TYPE_ANY, None));
    }
    let mut operations: Vec<_> = a.operations.iter().map(|o| operation(*o)).collect();
    if operations.is_empty() {
        operations.push(rd::rd_kafka_AclOperation_t::RD_KAFKA_ACL_OPERATION_ANY);
    }
    product(&resources, pattern, &grants, &operations)
}

/// One ACL (or filter) for each resource, grant (principal, permission, host) and operation.
fn product(
    resources: &[(Resource, Option<String>)],
    pattern: Pattern,
    grants: &[(Option<String>, Permission, Option<String>)],
    operations: &[rd::rd_kafka_AclOperation_t],
) -> Vec<Acl> {
    let mut out = Vec::with_capacity(resources.len() * grants.len() * operations.len());
    for (resource, name) in resources {
        for (principal, permission, host) in grants {
            for operation in operations {
                out.push(Acl {
                    resource: *resource,
                    name: name.clone(),
                    pattern,
                    principal: principal.clone(),
                    host: host.clone(),
                    operation: *operation,
                    permission: *permission,
                });
            }
        }
    }
    out
}

fn pattern(p: PatternType) -> Pattern {
    match p {
        PatternType::Literal => Pattern::RD_KAFKA_RESOURCE_PATTERN_LITERAL,
        PatternType::Prefixed => Pattern::RD_KAFKA_RESOURCE_PATTERN_PREFIXED,
        PatternType::Any => Pattern::RD_KAFKA_RESOURCE_PATTERN_ANY,
        PatternType::Match => Pattern::RD_KAFKA_RESOURCE_PATTERN_MATCH,
    }
}

fn operation(o: AclOperation) -> rd::rd_kafka_AclOperation_t {
    use rd::rd_kafka_AclOperation_t::*;
    match o {
        AclOperation::All => RD_KAFKA_ACL_OPERATION_ALL,
        AclOperation::Read => RD_KAFKA_ACL_OPERATION_READ,
        AclOperation::Write => RD_KAFKA_ACL_OPERATION_WRITE,
        AclOperation::Create => RD_KAFKA_ACL_OPERATION_CREATE,
        AclOperation::Delete => RD_KAFKA_ACL_OPERATION_DELETE,
        AclOperation::Alter => RD_KAFKA_ACL_OPERATION_ALTER,
        AclOperation::Describe => RD_KAFKA_ACL_OPERATION_DESCRIBE,
        AclOperation::ClusterAction => RD_KAFKA_ACL_OPERATION_CLUSTER_ACTION,
        AclOperation::DescribeConfigs => RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS,
        AclOperation::AlterConfigs => RD_KAFKA_ACL_OPERATION_ALTER_CONFIGS,
        AclOperation::IdempotentWrite => RD_KAFKA_ACL_OPERATION_IDEMPOTENT_WRITE,
    }
}

/// An ACL's fields as librdkafka names them (TOPIC, LITERAL, READ, ALLOW).
fn names(acl: &Acl) -> [String; 4] {
    // SAFETY: librdkafka's static names of its enums' values.
    unsafe {
        [
            text(rd::rd_kafka_ResourceType_name(acl.resource)),
            text(rd::rd_kafka_ResourcePatternType_name(acl.pattern)),
            text(rd::rd_kafka_AclOperation_name(acl.operation)),
            text(rd::rd_kafka_AclPermissionType_name(acl.permission)),
        ]
    }
}

fn print(common: &Common, acls: &[Acl], summary: &str) {
    let rows: Vec<_> = acls.iter().map(|a| (a, names(a))).collect();
    let json: Vec<Value> = rows
        .iter()
        .map(|(a, [resource, pattern, operation, permission])| {
            json!({"resource_type": resource, "name": a.name, "pattern_type": pattern,
                   "principal": a.principal, "host": a.host, "operation": operation,
                   "permission": permission})
        })
        .collect();
    output::print(common.format, &Value::Array(json), || {
        let mut t = Table::new(&[
            "PRINCIPAL",
            "PERMISSION",
            "OPERATION",
            "HOST",
            "RESOURCE",
            "NAME",
            "PATTERN",
        ]);
        for (a, [resource, pattern, operation, permission]) in &rows {
            let text = |s: &Option<String>| s.clone().unwrap_or_default();
            t.row(vec![
                text(&a.principal),
                permission.clone(),
                operation.clone(),
                text(&a.host),
                resource.clone(),
                text(&a.name),
                pattern.clone(),
            ]);
        }
        format!("{summary}\n{}", t.render())
    });
}

/// An `rd_kafka_AclBinding_t` (or filter) for `acl`, destroyed with the guard.
fn binding(acl: &Acl, filter: bool) -> anyhow::Result<Guard<rd::rd_kafka_AclBinding_t>> {
    let text = |s: &Option<String>| s.as_deref().map(c).transpose();
    let (name, principal, host) = (text(&acl.name)?, text(&acl.principal)?, text(&acl.host)?);
    let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
    let mut errstr = [0 as std::ffi::c_char; ERRSTR_BYTES];
    let make = match filter {
        true => rd::rd_kafka_AclBindingFilter_new,
        false => rd::rd_kafka_AclBinding_new,
    };
    // SAFETY: the strings live for the call (librdkafka copies them); errstr is its size.
    let made = unsafe {
        make(
            acl.resource,
            ptr(&name),
            acl.pattern,
            ptr(&principal),
            ptr(&host),
            acl.operation,
            acl.permission,
            errstr.as_mut_ptr(),
            errstr.len(),
        )
    };
    Guard::new(made, rd::rd_kafka_AclBinding_destroy, &errstr)
}

/// An ACL librdkafka returned.
///
/// # Safety
/// `b` is one of a live result event's bindings.
unsafe fn from_binding(b: *const rd::rd_kafka_AclBinding_t) -> Acl {
    let some = |s: String| Some(s);
    Acl {
        resource: rd::rd_kafka_AclBinding_restype(b),
        name: some(text(rd::rd_kafka_AclBinding_name(b))),
        pattern: rd::rd_kafka_AclBinding_resource_pattern_type(b),
        principal: some(text(rd::rd_kafka_AclBinding_principal(b))),
        host: some(text(rd::rd_kafka_AclBinding_host(b))),
        operation: rd::rd_kafka_AclBinding_operation(b),
        permission: rd::rd_kafka_AclBinding_permission_type(b),
    }
}

/// A one-line name of an ACL for error messages.
fn label(acl: &Acl) -> String {
    let [resource, _, operation, permission] = names(acl);
    let name = acl.name.as_deref().unwrap_or("*");
    let principal = acl.principal.as_deref().unwrap_or("*");
    format!("{permission} {principal} {operation} on {resource} {name}")
}

fn create(admin: &AdminClient<Context>, common: &Common, acls: &[Acl]) -> anyhow::Result<()> {
    let made: Vec<_> = acls
        .iter()
        .map(|a| binding(a, false))
        .collect::<anyhow::Result<_>>()?;
    let kind = rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_CREATEACLS;
    let what = "adding ACLs";
    // SAFETY: the bindings live until the call returns (librdkafka copies them); the event's
    // results are read while it lives.
    let event = native::call(admin, kind, client::timeout(common), |r: &Request| unsafe {
        let mut raw: Vec<_> = made.iter().map(|b| b.0).collect();
        rd::rd_kafka_CreateAcls(r.rk, raw.as_mut_ptr(), raw.len(), r.options, r.queue);
        Ok(())
    })
    .map_err(|e| admin.inner().context().error(what, e))?;
    let outcomes = unsafe {
        let result = rd::rd_kafka_event_CreateAcls_result(event.0);
        let mut count = 0usize;
        let results = rd::rd_kafka_CreateAcls_result_acls(result, &mut count);
        (0..count)
            .map(|i| {
                let error = native::error(rd::rd_kafka_acl_result_error(*results.add(i)));
                (acls.get(i).map_or_else(String::new, label), error)
            })
            .collect()
    };
    client::all_succeeded(admin, what, outcomes)
}

fn describe(
    admin: &AdminClient<Context>,
    common: &Common,
    filter: &Acl,
) -> anyhow::Result<Vec<Acl>> {
    let made = binding(filter, true)?;
    let kind = rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBEACLS;
    // SAFETY: as in `create`.
    let event = native::call(admin, kind, client::timeout(common), |r: &Request| unsafe {
        rd::rd_kafka_DescribeAcls(r.rk, made.0, r.options, r.queue);
        Ok(())
    })
    .map_err(|e| admin.inner().context().error("listing ACLs", e))?;
    unsafe {
        let result = rd::rd_kafka_event_DescribeAcls_result(event.0);
        let mut count = 0usize;
        let acls = rd::rd_kafka_DescribeAcls_result_acls(result, &mut count);
        Ok((0..count).map(|i| from_binding(*acls.add(i))).collect())
    }
}

fn delete(
    admin: &AdminClient<Context>,
    common: &Common,
    filters: &[Acl],
) -> anyhow::Result<Vec<Acl>> {
    let made: Vec<_> = filters
        .iter()
        .map(|a| binding(a, true))
        .collect::<anyhow::Result<_>>()?;
    let kind = rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DELETEACLS;
    let what = "removing ACLs";
    // SAFETY: as in `create`.
    let event = native::call(admin, kind, client::timeout(common), |r: &Request| unsafe {
        let mut raw: Vec<_> = made.iter().map(|b| b.0).collect();
        rd::rd_kafka_DeleteAcls(r.rk, raw.as_mut_ptr(), raw.len(), r.options, r.queue);
        Ok(())
    })
    .map_err(|e| admin.inner().context().error(what, e))?;
    let (mut removed, mut outcomes) = (Vec::new(), Vec::new());
    unsafe {
        let result = rd::rd_kafka_event_DeleteAcls_result(event.0);
        let mut count = 0usize;
        let responses = rd::rd_kafka_DeleteAcls_result_responses(result, &mut count);
        for i in 0..count {
            let r = *responses.add(i);
            let error = native::error(rd::rd_kafka_DeleteAcls_result_response_error(r));
            outcomes.push((filters.get(i).map_or_else(String::new, label), error));
            let mut matched = 0usize;
            let acls = rd::rd_kafka_DeleteAcls_result_response_matching_acls(r, &mut matched);
            removed.extend((0..matched).map(|j| from_binding(*acls.add(j))));
        }
    }
    client::all_succeeded(admin, what, outcomes)?;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        acl: AclArgs,
    }

    fn args(line: &[&str]) -> AclArgs {
        Cli::parse_from(std::iter::once("acl").chain(line.iter().copied())).acl
    }

    #[test]
    fn flags_make_one_acl_or_filter_per_principal_host_operation_and_resource() {
        let a = args(&[
            "--allow-principal",
            "User:a",
            "--deny-principal",
            "User:b",
            "--deny-host",
            "10.0.0.1",
            "--operation",
            "read",
            "--operation",
            "DescribeConfigs",
            "--topic",
            "t",
            "--cluster",
        ]);
        assert_eq!(resources(&a).len(), 2);
        let g = grants(&a, false);
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].2.as_deref(), Some("*"), "any host unless named");
        assert_eq!(g[1].2.as_deref(), Some("10.0.0.1"));
        let f = filters(&a, false);
        assert_eq!(f.len(), 2 * 2 * 2);
        assert!(f.iter().any(|x| x.name.as_deref() == Some(CLUSTER)));
        // No flags: one filter matching every ACL.
        let all = filters(&args(&[]), true);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].resource, Resource::RD_KAFKA_RESOURCE_ANY);
        assert_eq!(all[0].pattern, Pattern::RD_KAFKA_RESOURCE_PATTERN_ANY);
        assert_eq!(
            (all[0].name.as_ref(), all[0].principal.as_ref()),
            (None, None)
        );
        // `list --principal` matches either permission, any host.
        let p = grants(&args(&["--principal", "User:c"]), true);
        assert_eq!(
            p,
            vec![(
                Some("User:c".into()),
                Permission::RD_KAFKA_ACL_PERMISSION_TYPE_ANY,
                None
            )]
        );
    }
}
