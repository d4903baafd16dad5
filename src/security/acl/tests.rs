use super::*;

fn acl(
    kind: ResourceType,
    name: &str,
    pattern: PatternType,
    who: &str,
    op: Operation,
    p: Permission,
) -> Acl {
    Acl {
        resource_type: kind,
        name: name.to_string(),
        pattern,
        principal: who.to_string(),
        host: WILDCARD.to_string(),
        operation: op,
        permission: p,
    }
}

fn topic(name: &str, who: &str, op: Operation, p: Permission) -> Acl {
    acl(ResourceType::Topic, name, PatternType::Literal, who, op, p)
}

fn authorizer(acls: Vec<Acl>) -> Authorizer {
    let mut a = Authorizer::default();
    for acl in acls {
        assert_eq!(acl.invalid(), None, "{acl:?}");
        a.add(acl).unwrap();
    }
    a
}

const ALICE: &str = "User:alice";

/// Alice may write to every topic whose name starts with `logs-`.
fn alice_writes_logs() -> Acl {
    acl(
        ResourceType::Topic,
        "logs-",
        PatternType::Prefixed,
        ALICE,
        Operation::Write,
        Permission::Allow,
    )
}
const BOB: &str = "User:bob";
const HOST: &str = "127.0.0.1";

fn may(a: &Authorizer, who: &str, op: Operation, topic: &str) -> bool {
    a.authorize(who, HOST, op, ResourceType::Topic, topic)
}

#[test]
fn an_allow_grants_its_operation_and_the_describe_it_implies() {
    let a = authorizer(vec![topic(
        "orders",
        ALICE,
        Operation::Read,
        Permission::Allow,
    )]);
    assert!(may(&a, ALICE, Operation::Read, "orders"));
    assert!(
        may(&a, ALICE, Operation::Describe, "orders"),
        "READ implies DESCRIBE"
    );
    assert!(!may(&a, ALICE, Operation::Write, "orders"));
    assert!(
        !may(&a, BOB, Operation::Read, "orders"),
        "an ACL names the topic: others are denied"
    );
    assert!(
        !may(&a, ALICE, Operation::Read, "payments"),
        "no ACL, and no allow-everyone"
    );
    let open = Authorizer {
        allow_everyone_if_no_acl_found: true,
        ..a.clone()
    };
    assert!(may(&open, BOB, Operation::Write, "payments"));
    assert!(
        !may(&open, BOB, Operation::Read, "orders"),
        "only where no ACL names it"
    );
}

#[test]
fn deny_beats_allow_and_wildcards_match_everyone() {
    let a = authorizer(vec![
        topic(WILDCARD, ANY_USER, Operation::All, Permission::Allow),
        topic("orders", BOB, Operation::Write, Permission::Deny),
    ]);
    assert!(may(&a, BOB, Operation::Read, "orders"));
    assert!(!may(&a, BOB, Operation::Write, "orders"));
    assert!(may(&a, ALICE, Operation::Write, "orders"));
    assert!(may(&a, BOB, Operation::Write, "other"));
    let deny_all = authorizer(vec![
        topic("orders", ALICE, Operation::Read, Permission::Allow),
        topic("orders", ALICE, Operation::All, Permission::Deny),
    ]);
    assert!(!may(&deny_all, ALICE, Operation::Read, "orders"));
}

#[test]
fn prefixed_patterns_hosts_and_super_users() {
    let logs = alice_writes_logs();
    let mut a = authorizer(vec![logs]);
    assert!(may(&a, ALICE, Operation::Write, "logs-app"));
    assert!(may(&a, ALICE, Operation::Write, "logs-"));
    assert!(!may(&a, ALICE, Operation::Write, "log"));
    let mut from_one_host = topic("orders", BOB, Operation::Read, Permission::Allow);
    from_one_host.host = "10.0.0.1".into();
    a.add(from_one_host).unwrap();
    assert!(!may(&a, BOB, Operation::Read, "orders"));
    assert!(a.authorize(
        BOB,
        "10.0.0.1",
        Operation::Read,
        ResourceType::Topic,
        "orders"
    ));
    a.super_users.push(BOB.into());
    assert!(
        may(&a, BOB, Operation::Delete, "logs-app"),
        "a super user may do anything"
    );
}

#[test]
fn alter_configs_implies_describe_configs_on_the_cluster() {
    let a = authorizer(vec![acl(
        ResourceType::Cluster,
        CLUSTER_NAME,
        PatternType::Literal,
        ALICE,
        Operation::AlterConfigs,
        Permission::Allow,
    )]);
    let on_cluster = |op| a.authorize(ALICE, HOST, op, ResourceType::Cluster, CLUSTER_NAME);
    assert!(on_cluster(Operation::DescribeConfigs));
    assert!(
        !on_cluster(Operation::Describe),
        "ALTER_CONFIGS does not imply DESCRIBE"
    );
    assert!(!a.authorize(
        ALICE,
        HOST,
        Operation::AlterConfigs,
        ResourceType::Topic,
        CLUSTER_NAME
    ));
}

#[test]
fn filters_select_describe_and_remove() {
    let prefixed = alice_writes_logs();
    let literal = topic("logs-app", BOB, Operation::Read, Permission::Allow);
    let group = acl(
        ResourceType::Group,
        "g",
        PatternType::Literal,
        BOB,
        Operation::Read,
        Permission::Allow,
    );
    let mut a = authorizer(vec![prefixed.clone(), literal.clone(), group.clone()]);
    a.add(literal.clone()).unwrap();
    let any = AclFilter {
        resource_type: ResourceType::Any,
        name: None,
        pattern: PatternType::Any,
        principal: None,
        host: None,
        operation: Operation::Any,
        permission: Permission::Any,
    };
    assert_eq!(a.describe(&any).len(), 3, "adding an ACL twice keeps one");
    let matching = AclFilter {
        resource_type: ResourceType::Topic,
        name: Some("logs-app".into()),
        pattern: PatternType::Match,
        ..any.clone()
    };
    assert_eq!(
        a.describe(&matching),
        vec![prefixed.clone(), literal.clone()]
    );
    let exact_prefixed = AclFilter {
        name: Some("logs-".into()),
        pattern: PatternType::Prefixed,
        ..matching.clone()
    };
    assert_eq!(a.describe(&exact_prefixed), vec![prefixed.clone()]);
    let bobs = AclFilter {
        principal: Some(BOB.into()),
        ..any.clone()
    };
    assert_eq!(a.remove(&bobs), vec![literal, group]);
    assert_eq!(a.describe(&any), vec![prefixed]);
}

#[test]
fn invalid_acls_are_named() {
    let good = topic("t", ALICE, Operation::Read, Permission::Allow);
    let bad = [
        Acl {
            resource_type: ResourceType::Any,
            ..good.clone()
        },
        Acl {
            pattern: PatternType::Match,
            ..good.clone()
        },
        Acl {
            operation: Operation::Any,
            ..good.clone()
        },
        Acl {
            permission: Permission::Any,
            ..good.clone()
        },
        Acl {
            principal: "alice".into(),
            ..good.clone()
        },
        Acl {
            host: String::new(),
            ..good.clone()
        },
        Acl {
            resource_type: ResourceType::Cluster,
            name: "other".into(),
            ..good.clone()
        },
        Acl {
            pattern: PatternType::Prefixed,
            name: WILDCARD.into(),
            ..good.clone()
        },
    ];
    for acl in bad {
        assert!(acl.invalid().is_some(), "{acl:?}");
    }
    for op in Operation::ALL {
        assert_eq!(Operation::from_code(op.code()), Some(*op));
    }
    assert_eq!(ResourceType::from_code(2), Some(ResourceType::Topic));
    assert_eq!(PatternType::from_code(4), Some(PatternType::Prefixed));
    assert_eq!(Permission::from_code(0), None);
}

#[test]
fn authorize_any_needs_an_allow_no_deny_covers_whole() {
    let write = Operation::Write;
    let any = |a: &Authorizer, who| a.authorize_any(who, HOST, write, ResourceType::Topic);
    let a = authorizer(vec![alice_writes_logs()]);
    assert!(any(&a, ALICE));
    assert!(!any(&a, BOB));
    let denied = vec![
        alice_writes_logs(),
        acl(
            ResourceType::Topic,
            "logs-",
            PatternType::Prefixed,
            ALICE,
            write,
            Permission::Deny,
        ),
    ];
    assert!(!any(&authorizer(denied), ALICE));
    let narrower = vec![
        alice_writes_logs(),
        topic("logs-a", ALICE, write, Permission::Deny),
    ];
    assert!(
        any(&authorizer(narrower), ALICE),
        "other logs- topics stay writable"
    );
    let everything = vec![
        alice_writes_logs(),
        topic("*", ALICE, write, Permission::Deny),
    ];
    assert!(!any(&authorizer(everything), ALICE));
}
