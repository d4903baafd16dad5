"""SASL failures and ACL denials, on the secured pair (conftest.secure_brokers): admin is a
super user, alice has only the ACLs a scenario gives her, on names of its own."""
from conftest import ADMIN, ALICE
from kafka_wire import record_batch
from registry import scenario
from side import Side, login

# Kafka's ACL codes: resource types, pattern types, operations, permissions.
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DESCRIBE = 3, 4, 5, 8
ALLOW, DENY = 3, 2


def _as_admin(s: Side) -> Side:
    s.credentials = ADMIN
    return s


def _alice(s: Side):
    return s.connect(credentials=ALICE)


def _grant(s: Side, resource_type, name, operation, permission=ALLOW, pattern=LITERAL, principal="User:alice"):
    binding = {"ResourceType": resource_type, "ResourceName": name, "ResourcePatternType": pattern,
               "Principal": principal, "Host": "*", "Operation": operation, "PermissionType": permission}
    r = s.send("CreateAcls", 3, {"Creations": [binding]})
    assert r["Results"][0]["ErrorCode"] == 0, f"{s.name}: CreateAcls {r}"
    _until_listed(s, binding)
    return r


def _until_listed(s: Side, binding: dict):
    """Until every node's DescribeAcls lists `binding`: Kafka's broker takes a new ACL into its
    authorizer (which DescribeAcls reads too) a moment after CreateAcls answers; Sluice answers
    once every shard has it. A request right after the grant may differ by timing alone."""
    acl_filter = {"ResourceTypeFilter": binding["ResourceType"], "ResourceNameFilter": binding["ResourceName"],
                  "PatternTypeFilter": binding["ResourcePatternType"], "PrincipalFilter": binding["Principal"],
                  "HostFilter": binding["Host"], "Operation": binding["Operation"],
                  "PermissionType": binding["PermissionType"]}
    for n in s.nodes:
        node = s.at(n)
        listed = s.eventually(lambda: node.send("DescribeAcls", 3, acl_filter),
                              lambda d: d["ErrorCode"] == 0 and len(d["Resources"]) > 0)
        assert listed["Resources"], f"{s.name}: node {n} does not list {binding}: {listed}"


@scenario(secure=True)
def sasl_wrong_password(s: Side):
    c = s.connect()
    handshake, auth = login(c, ALICE[0], "not-her-password")
    return handshake, auth["ErrorCode"]


@scenario(secure=True)
def sasl_unknown_mechanism(s: Side):
    return s.connect().send("SaslHandshake", 1, {"Mechanism": "GSSAPI"})


@scenario(secure=True)
def sasl_authenticated_user_describes_cluster(s: Side):
    c = s.connect(credentials=ALICE)
    return c.send("Metadata", 12, {"Topics": [], "IncludeClusterAuthorizedOperations": False})["Brokers"]


@scenario(secure=True)
def acl_topic_metadata_without_describe(s: Side):
    _as_admin(s).create("acl-hidden")
    return _alice(s).send("Metadata", 12, {"Topics": [{"Name": "acl-hidden"}]})["Topics"]


@scenario(secure=True)
def acl_produce_denied_then_allowed(s: Side):
    _as_admin(s).create("acl-write")
    alice = _alice(s)
    body = {"Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"Name": "acl-write", "PartitionData": [{"Index": 0, "Records": record_batch([b"x"])}]}]}
    denied = alice.send("Produce", 9, body)
    _grant(s, TOPIC, "acl-write", WRITE)
    allowed = alice.send("Produce", 9, body)
    return denied, allowed


@scenario(secure=True)
def acl_fetch_with_describe_but_not_read(s: Side):
    _as_admin(s).create("acl-read")
    _grant(s, TOPIC, "acl-read", DESCRIBE)
    alice = _alice(s)
    return alice.send("Fetch", 12, {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20,
                                    "SessionEpoch": -1, "Topics": [{"Topic": "acl-read", "Partitions": [
                                        {"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}]})


@scenario(secure=True)
def acl_group_denied(s: Side):
    alice = _alice(s)
    find = alice.send("FindCoordinator", 4, {"KeyType": 0, "CoordinatorKeys": ["acl-group"]})
    join = alice.send("JoinGroup", 9, {"GroupId": "acl-group", "SessionTimeoutMs": 10_000,
                                       "RebalanceTimeoutMs": 10_000, "MemberId": "", "ProtocolType": "consumer",
                                       "Protocols": [{"Name": "range", "Metadata": b""}]})
    return find, join["ErrorCode"]


@scenario(secure=True)
def acl_create_topic_without_create(s: Side):
    alice = _alice(s)
    return alice.send("CreateTopics", 7, {"Topics": [{"Name": "acl-create", "NumPartitions": 1,
                                                      "ReplicationFactor": -1}], "timeoutMs": 10_000})


@scenario(secure=True)
def acl_create_topic_with_prefixed_create(s: Side):
    _as_admin(s)
    _grant(s, TOPIC, "acl-prefixed-", CREATE, pattern=PREFIXED)
    alice = _alice(s)
    r = alice.send("CreateTopics", 7, {"Topics": [{"Name": "acl-prefixed-one", "NumPartitions": 1,
                                                   "ReplicationFactor": -1}], "timeoutMs": 10_000})
    return r["Topics"][0]["ErrorCode"], r["Topics"][0]["NumPartitions"]


@scenario(secure=True)
def acl_cluster_denied(s: Side):
    alice = _alice(s)
    configs = alice.send("DescribeConfigs", 4, {"Resources": [
        {"ResourceType": 4, "ResourceName": "1", "ConfigurationKeys": ["message.max.bytes"]}]})
    acls = alice.send("CreateAcls", 3, {"Creations": [
        {"ResourceType": TOPIC, "ResourceName": "x", "ResourcePatternType": LITERAL, "Principal": "User:alice",
         "Host": "*", "Operation": READ, "PermissionType": ALLOW}]})
    return configs, acls


@scenario(secure=True)
def acl_transactional_id_denied(s: Side):
    alice = _alice(s)
    find = alice.send("FindCoordinator", 4, {"KeyType": 1, "CoordinatorKeys": ["acl-txn"]})
    init = alice.send("InitProducerId", 4, {"TransactionalId": "acl-txn", "TransactionTimeoutMs": 60_000,
                                            "ProducerId": -1, "ProducerEpoch": -1})
    return find, init["ErrorCode"]


@scenario(secure=True)
def acl_deny_wins_over_allow(s: Side):
    _as_admin(s).create("acl-deny")
    _grant(s, TOPIC, "acl-deny", WRITE)
    _grant(s, TOPIC, "acl-", WRITE, permission=DENY, pattern=PREFIXED)
    alice = _alice(s)
    return alice.send("Produce", 9, {"Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"Name": "acl-deny", "PartitionData": [{"Index": 0, "Records": record_batch([b"x"])}]}]})


@scenario(secure=True)
def acls_created_described_deleted(s: Side):
    _as_admin(s)
    _grant(s, GROUP, "acl-crud-group", READ, principal="User:carol")
    _grant(s, TOPIC, "acl-crud-", READ, pattern=PREFIXED, principal="User:carol")
    described = s.send("DescribeAcls", 3, {"ResourceTypeFilter": 1, "ResourceNameFilter": None,
                                           "PatternTypeFilter": 1, "PrincipalFilter": "User:carol",
                                           "HostFilter": None, "Operation": 1, "PermissionType": 1})
    deleted = s.send("DeleteAcls", 3, {"Filters": [
        {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
         "PrincipalFilter": "User:carol", "HostFilter": None, "Operation": 1, "PermissionType": 1}]})
    after = s.send("DescribeAcls", 3, {"ResourceTypeFilter": 1, "ResourceNameFilter": None,
                                       "PatternTypeFilter": 1, "PrincipalFilter": "User:carol",
                                       "HostFilter": None, "Operation": 1, "PermissionType": 1})
    return described, deleted, after


@scenario(secure=True)
def acl_describe_configs_of_a_topic_without_describe_configs(s: Side):
    _as_admin(s).create("acl-configs")
    _grant(s, TOPIC, "acl-configs", DESCRIBE)
    return _alice(s).send("DescribeConfigs", 4, {"Resources": [
        {"ResourceType": 2, "ResourceName": "acl-configs", "ConfigurationKeys": ["retention.ms"]}]})
