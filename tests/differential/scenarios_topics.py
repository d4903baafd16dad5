"""ApiVersions, Metadata, DescribeCluster, CreateTopics, DeleteTopics, CreatePartitions,
DescribeConfigs, AlterConfigs and IncrementalAlterConfigs: what admin clients read and the
validation errors they surface."""
import struct

from kafka_wire import record_batch
from registry import scenario
from side import Side


def _topic(name, partitions=1, replicas=-1, configs=None, assignments=None):
    return {"Name": name, "NumPartitions": partitions, "ReplicationFactor": replicas,
            "Assignments": [{"PartitionIndex": p, "BrokerIds": b} for p, b in (assignments or [])],
            "Configs": [{"Name": k, "Value": v} for k, v in (configs or {}).items()]}


def _create(s: Side, *topics, version=7, validate_only=False):
    body = {"Topics": list(topics), "timeoutMs": 30_000, "validateOnly": validate_only}
    return s.send("CreateTopics", version, body)


def _configs_of(result):
    """A CreateTopics v5+ topic's configs as {name: (value, read-only, source, sensitive)}."""
    return {c["Name"]: (c["Value"], c["ReadOnly"], c["ConfigSource"], c["IsSensitive"])
            for c in result.get("Configs") or []}


@scenario
def api_versions_v0(s: Side):
    keys = s.send("ApiVersions", 0)
    return keys["ErrorCode"]


@scenario
def api_versions_v3_features(s: Side):
    r = s.send("ApiVersions", 3, {"ClientSoftwareName": "differential", "ClientSoftwareVersion": "1.0"})
    return r["ErrorCode"], [f for f in r["FinalizedFeatures"] if f["Name"] == "transaction.version"]


@scenario
def api_versions_unsupported_version(s: Side):
    """A version past the broker's newest: UNSUPPORTED_VERSION in a v0 answer that lists
    ApiVersions' own range (KIP-511)."""
    frame = struct.pack(">hhi", 18, 99, 7) + struct.pack(">h", 1) + b"x" + b"\x00" + b"\x01\x01\x00"
    raw = s.conn.send_raw(struct.pack(">i", len(frame)) + frame)
    correlation_id, error = struct.unpack(">ih", raw[:6])
    count = struct.unpack(">i", raw[6:10])[0]
    ranges = [struct.unpack(">hhh", raw[10 + 6 * i:16 + 6 * i]) for i in range(count)]
    return correlation_id, error, [r for r in ranges if r[0] == 18]


@scenario
def api_versions_common_apis(s: Side):
    """Every API Sluice's README lists, and the range each broker serves of it."""
    r = s.send("ApiVersions", 3, {"ClientSoftwareName": "differential", "ClientSoftwareVersion": "1.0"})
    wanted = {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 28,
              29, 30, 31, 32, 33, 36, 37, 42, 43, 44, 45, 46, 47, 50, 51, 60, 65, 66}
    return {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in r["ApiKeys"] if k["ApiKey"] in wanted}


@scenario
def metadata_v0_oldest_version(s: Side):
    s.create("md-v0", partitions=2)
    return s.send("Metadata", 0, {"Topics": [{"Name": "md-v0"}]})


@scenario
def metadata_newest_version(s: Side):
    s.create("md-v13", partitions=2)
    return s.send("Metadata", 13, {"Topics": [{"Name": "md-v13"}], "AllowAutoTopicCreation": False})


@scenario
def metadata_unknown_topic_with_auto_create_off(s: Side):
    return s.send("Metadata", 12, {"Topics": [{"Name": "md-nowhere"}], "AllowAutoTopicCreation": True})


@scenario
def metadata_invalid_topic_name(s: Side):
    return s.send("Metadata", 12, {"Topics": [{"Name": "bad name!"}, {"Name": "a" * 300}]})


@scenario
def metadata_by_topic_id(s: Side):
    s.create("md-byid")
    topic_id = s.topic_id("md-byid")
    return s.send("Metadata", 12, {"Topics": [{"TopicId": topic_id, "Name": None}]})


@scenario
def metadata_by_topic_id_with_an_empty_name(s: Side):
    """As the Java AdminClient's describeTopics by id asks: the id beside an empty name."""
    s.create("md-byid-empty")
    topic_id = s.topic_id("md-byid-empty")
    return s.send("Metadata", 13, {"Topics": [{"TopicId": topic_id, "Name": ""}], "AllowAutoTopicCreation": False})


@scenario
def metadata_authorized_operations(s: Side):
    s.create("md-ops")
    return s.send("Metadata", 10, {"Topics": [{"Name": "md-ops"}], "IncludeClusterAuthorizedOperations": True,
                                   "IncludeTopicAuthorizedOperations": True})


@scenario
def metadata_empty_topic_list(s: Side):
    return s.send("Metadata", 12, {"Topics": []})


@scenario
def describe_cluster_v0(s: Side):
    return s.send("DescribeCluster", 0, {"IncludeClusterAuthorizedOperations": True})


@scenario
def describe_cluster_v2_fenced(s: Side):
    return s.send("DescribeCluster", 2, {"IncludeClusterAuthorizedOperations": False, "EndpointType": 1,
                                         "IncludeFencedBrokers": True})


@scenario
def describe_cluster_controller_endpoint(s: Side):
    return s.send("DescribeCluster", 1, {"EndpointType": 2})


@scenario
def create_topic_v7_with_configs(s: Side):
    r = _create(s, _topic("ct-v7", 3, configs={"retention.ms": "3600000", "cleanup.policy": "compact"}))
    t = r["Topics"][0]
    return t["ErrorCode"], t["NumPartitions"], t["ReplicationFactor"], _configs_of(t)


@scenario
def create_topic_v2_oldest_version(s: Side):
    return _create(s, _topic("ct-v2", 2), version=2)


@scenario
def create_topic_validate_only(s: Side):
    """Kafka answers a validated topic as if created (a fresh id, its partitions, replicas and
    configs), and creates nothing."""
    first = _create(s, _topic("ct-validate", 2, configs={"retention.ms": "3600000"}), validate_only=True)
    t = first["Topics"][0]
    after = s.send("Metadata", 12, {"Topics": [{"Name": "ct-validate"}]})["Topics"][0]["ErrorCode"]
    fresh_id = t["TopicId"] != "AAAAAAAAAAAAAAAAAAAAAA"
    return t["ErrorCode"], fresh_id, t["NumPartitions"], t["ReplicationFactor"], _configs_of(t), after


@scenario
def create_topic_that_exists(s: Side):
    s.create("ct-exists")
    return _create(s, _topic("ct-exists"))


@scenario
def create_topic_invalid_names(s: Side):
    return [_create(s, _topic(n))["Topics"][0]["ErrorCode"] for n in ("bad/name", "", ".", "..", "a" * 250, "ok-😀")]


@scenario
def create_topic_zero_partitions(s: Side):
    return _create(s, _topic("ct-zero", 0))


@scenario
def create_topic_replication_factor_above_brokers(s: Side):
    return _create(s, _topic("ct-rf3", 1, replicas=3))


@scenario
def create_topic_unknown_config(s: Side):
    return _create(s, _topic("ct-unknown-config", configs={"no.such.config": "1"}))


@scenario
def create_topic_bad_config_value(s: Side):
    return [_create(s, _topic(f"ct-bad-{i}", configs={k: v}))["Topics"][0]["ErrorCode"]
            for i, (k, v) in enumerate([("retention.ms", "soon"), ("cleanup.policy", "sometimes"),
                                        ("min.insync.replicas", "0"), ("max.message.bytes", "-5")])]


@scenario
def create_topic_manual_assignment(s: Side):
    r = _create(s, _topic("ct-assign", partitions=-1, assignments=[(0, [1]), (1, [1])]))
    if r["Topics"][0]["ErrorCode"] == 0:
        s.wait_leaders("ct-assign", 2)  # Kafka's broker learns the topic a moment after the answer
    meta = s.send("Metadata", 12, {"Topics": [{"Name": "ct-assign"}]})["Topics"][0]
    return r, [(p["PartitionIndex"], p["ReplicaNodes"]) for p in meta["Partitions"]]


@scenario
def create_topic_assignment_to_unknown_broker(s: Side):
    return _create(s, _topic("ct-assign-bad", partitions=-1, assignments=[(0, [7])]))


@scenario
def create_topic_assignment_with_count(s: Side):
    return _create(s, _topic("ct-assign-count", partitions=2, assignments=[(0, [1])]))


@scenario
def create_topic_twice_in_one_request(s: Side):
    return _create(s, _topic("ct-dup"), _topic("ct-dup"))


@scenario
def create_topic_internal_name(s: Side):
    s.coordinator("g-create-internal")  # both brokers now hold __consumer_offsets
    return _create(s, _topic("__consumer_offsets"))


@scenario
def create_topic_colliding_name(s: Side):
    s.create("ct.collide")
    return _create(s, _topic("ct_collide"))


def _delete_by_name(s: Side, *names, version=6):
    return s.send("DeleteTopics", version, {"Topics": [{"Name": n} for n in names], "TopicNames": list(names),
                                            "TimeoutMs": 30_000})


@scenario
def delete_topic_v6_by_name(s: Side):
    s.create("dt-name")
    r = _delete_by_name(s, "dt-name")
    gone = s.eventually(lambda: s.send("Metadata", 12, {"Topics": [{"Name": "dt-name"}]})["Topics"][0]["ErrorCode"],
                        lambda code: code != 0)
    return r, gone


@scenario
def delete_topic_v1_oldest_version(s: Side):
    s.create("dt-v1")
    return _delete_by_name(s, "dt-v1", version=1)


@scenario
def delete_topic_by_id(s: Side):
    s.create("dt-id")
    topic_id = s.topic_id("dt-id")
    return s.send("DeleteTopics", 6, {"Topics": [{"Name": None, "TopicId": topic_id}], "TimeoutMs": 30_000})


@scenario
def delete_topic_unknown_name_and_id(s: Side):
    return (_delete_by_name(s, "dt-nowhere"),
            s.send("DeleteTopics", 6, {"Topics": [{"Name": None, "TopicId": "3q2-7wAAAAAAAAAAAAAAAA"}],
                                       "TimeoutMs": 30_000}))


@scenario(last=True)
def delete_topic_internal(s: Side):
    s.coordinator("g-delete-internal")
    return _delete_by_name(s, "__consumer_offsets")


@scenario
def delete_topic_then_produce(s: Side):
    s.create("dt-produce")
    _delete_by_name(s, "dt-produce")
    # Kafka's broker drops the partition a moment after the controller deletes the topic.
    offsets = {"ReplicaId": -1, "Topics": [{"Name": "dt-produce", "Partitions": [{"PartitionIndex": 0, "Timestamp": -1}]}]}
    code = s.eventually(lambda: s.send("ListOffsets", 1, offsets)["Topics"][0]["Partitions"][0]["ErrorCode"],
                        lambda code: code != 0)
    assert code != 0, f"{s.name}: dt-produce still served after its deletion"
    return s.produce("dt-produce", 0, record_batch([b"x"]))


def _create_partitions(s: Side, topic, count, assignments=None, validate_only=False, version=3):
    return s.send("CreatePartitions", version, {
        "Topics": [{"Name": topic, "Count": count,
                    "Assignments": None if assignments is None else [{"BrokerIds": b} for b in assignments]}],
        "TimeoutMs": 30_000, "ValidateOnly": validate_only})


@scenario
def create_partitions_grow(s: Side):
    s.create("cp-grow")
    r = _create_partitions(s, "cp-grow", 3)
    s.wait_leaders("cp-grow", 3)
    meta = s.send("Metadata", 12, {"Topics": [{"Name": "cp-grow"}]})["Topics"][0]
    return r, len(meta["Partitions"])


@scenario
def create_partitions_v0_oldest_version(s: Side):
    s.create("cp-v0")
    return _create_partitions(s, "cp-v0", 2, version=0)


@scenario
def create_partitions_smaller_or_same_count(s: Side):
    s.create("cp-smaller", partitions=3)
    return _create_partitions(s, "cp-smaller", 2), _create_partitions(s, "cp-smaller", 3)


@scenario
def create_partitions_unknown_topic(s: Side):
    return _create_partitions(s, "cp-nowhere", 2)


@scenario
def create_partitions_validate_only(s: Side):
    s.create("cp-validate")
    r = _create_partitions(s, "cp-validate", 4, validate_only=True)
    meta = s.send("Metadata", 12, {"Topics": [{"Name": "cp-validate"}]})["Topics"][0]
    return r, len(meta["Partitions"])


@scenario
def create_partitions_with_assignments(s: Side):
    s.create("cp-assign")
    good = _create_partitions(s, "cp-assign", 3, assignments=[[1], [1]])
    bad_count = _create_partitions(s, "cp-assign", 5, assignments=[[1]])
    bad_broker = _create_partitions(s, "cp-assign", 4, assignments=[[9]])
    return good, bad_count, bad_broker


def _describe_configs(s: Side, resource_type, name, keys=None, version=4, synonyms=False, documentation=False):
    return s.send("DescribeConfigs", version, {
        "Resources": [{"ResourceType": resource_type, "ResourceName": name, "ConfigurationKeys": keys}],
        "IncludeSynonyms": synonyms, "IncludeDocumentation": documentation})["Results"][0]


def _config_table(result):
    return {c["Name"]: {k: v for k, v in c.items() if k not in ("Name", "Documentation")}
            for c in result.get("Configs") or []}


@scenario
def describe_configs_topic_all(s: Side):
    s.create("dc-all", configs={"retention.ms": "123456"})
    r = _describe_configs(s, 2, "dc-all")
    return r["ErrorCode"], _config_table(r)


@scenario
def describe_configs_topic_keys_with_synonyms(s: Side):
    s.create("dc-keys", configs={"retention.ms": "123456"})
    return _describe_configs(s, 2, "dc-keys", keys=["retention.ms", "cleanup.policy", "segment.bytes"],
                             synonyms=True)


@scenario
def describe_configs_v1_oldest_version(s: Side):
    s.create("dc-v1")
    return _describe_configs(s, 2, "dc-v1", keys=["retention.ms", "max.message.bytes"], version=1)


@scenario
def describe_configs_unknown_topic(s: Side):
    return _describe_configs(s, 2, "dc-nowhere")


@scenario
def describe_configs_broker_keys(s: Side):
    keys = ["broker.rack", "connections.max.reauth.ms", "message.max.bytes", "num.partitions",
            "log.retention.ms", "auto.create.topics.enable", "offsets.topic.num.partitions",
            "sasl.kerberos.min.time.before.relogin", "no.such.key"]
    r = _describe_configs(s, 4, "1", keys=keys)
    return r["ErrorCode"], _config_table(r)


@scenario
def describe_configs_other_broker(s: Side):
    return _describe_configs(s, 4, "7", keys=["message.max.bytes"])


@scenario
def describe_configs_group(s: Side):
    s.stable_member("dc-group")
    r = _describe_configs(s, 32, "dc-group")
    return r["ErrorCode"], _config_table(r)


@scenario
def describe_configs_unknown_resource_type(s: Side):
    return _describe_configs(s, 9, "x")


def _alter(s: Side, resource_type, name, configs, validate_only=False, version=2):
    return s.send("AlterConfigs", version, {"Resources": [
        {"ResourceType": resource_type, "ResourceName": name,
         "Configs": [{"Name": k, "Value": v} for k, v in configs.items()]}], "ValidateOnly": validate_only})


def _incremental(s: Side, resource_type, name, ops, validate_only=False, version=1):
    return s.send("IncrementalAlterConfigs", version, {"Resources": [
        {"ResourceType": resource_type, "ResourceName": name,
         "Configs": [{"Name": k, "ConfigOperation": op, "Value": v} for k, op, v in ops]}],
        "ValidateOnly": validate_only})


@scenario
def alter_configs_topic_replaces_all(s: Side):
    s.create("ac-replace", configs={"retention.ms": "1000", "segment.ms": "600000"})
    r = _alter(s, 2, "ac-replace", {"retention.ms": "2000"})
    after = s.eventually(lambda: _config_table(_describe_configs(s, 2, "ac-replace", keys=["retention.ms", "segment.ms"])),
                         lambda t: t["retention.ms"]["Value"] == "2000")
    return r, after


@scenario
def alter_configs_validate_only(s: Side):
    s.create("ac-validate")
    r = _alter(s, 2, "ac-validate", {"retention.ms": "5000"}, validate_only=True)
    return r, _config_table(_describe_configs(s, 2, "ac-validate", keys=["retention.ms"]))


@scenario
def alter_configs_bad_key_and_value(s: Side):
    s.create("ac-bad")
    return _alter(s, 2, "ac-bad", {"no.such.key": "1"}), _alter(s, 2, "ac-bad", {"retention.ms": "x"})


@scenario
def alter_configs_unknown_topic(s: Side):
    return _alter(s, 2, "ac-nowhere", {"retention.ms": "5000"})


@scenario
def alter_configs_v0_oldest_version(s: Side):
    s.create("ac-v0")
    return _alter(s, 2, "ac-v0", {"retention.ms": "5000"}, version=0)


@scenario
def incremental_alter_topic_set_delete_append(s: Side):
    s.create("iac-ops", configs={"retention.ms": "1000"})
    r = _incremental(s, 2, "iac-ops", [("retention.ms", 1, None), ("segment.ms", 0, "700000"),
                                       ("cleanup.policy", 2, "compact")])
    after = s.eventually(
        lambda: _config_table(_describe_configs(s, 2, "iac-ops", keys=["retention.ms", "segment.ms", "cleanup.policy"])),
        lambda t: t["segment.ms"]["Value"] == "700000")
    return r, after


@scenario
def incremental_alter_append_to_non_list(s: Side):
    s.create("iac-append")
    return _incremental(s, 2, "iac-append", [("retention.ms", 2, "5")])


@scenario
def incremental_alter_same_key_twice(s: Side):
    s.create("iac-twice")
    return _incremental(s, 2, "iac-twice", [("retention.ms", 0, "5"), ("retention.ms", 0, "6")])


@scenario
def incremental_alter_unknown_operation(s: Side):
    s.create("iac-op")
    return _incremental(s, 2, "iac-op", [("retention.ms", 9, "5")])


@scenario
def incremental_alter_broker_dynamic_key(s: Side):
    """A per-broker dynamic key set, read back (Kafka applies it from its metadata log, a moment
    after answering), then deleted."""
    r = _incremental(s, 4, "1", [("log.cleaner.backoff.ms", 0, "20000")])
    after = s.eventually(lambda: _config_table(_describe_configs(s, 4, "1", keys=["log.cleaner.backoff.ms"])),
                         lambda t: t["log.cleaner.backoff.ms"]["Value"] == "20000")
    _incremental(s, 4, "1", [("log.cleaner.backoff.ms", 1, None)])
    return r, after


@scenario
def incremental_alter_broker_read_only_key(s: Side):
    return _incremental(s, 4, "1", [("broker.id", 0, "5"), ("no.such.broker.key", 0, "1")])


@scenario
def incremental_alter_broker_listener_key(s: Side):
    return _incremental(s, 4, "1", [("sasl.kerberos.min.time.before.relogin", 0, "60000")], validate_only=True)


@scenario
def incremental_alter_cluster_default(s: Side):
    r = _incremental(s, 4, "", [("log.cleaner.backoff.ms", 0, "25000")], validate_only=True)
    return r


@scenario
def alter_configs_broker_logger(s: Side):
    return _incremental(s, 8, "1", [("kafka.server.KafkaApis", 0, "INFO")], validate_only=True)


@scenario
def describe_log_dirs_of_a_topic(s: Side):
    """DescribeLogDirs v4 (kafka-log-dirs): each replica's size is its batches' bytes. The log
    dir's path and the disk's total and usable bytes are this machine's, not compared."""
    s.create("ld-topic", partitions=2)
    s.produce_values("ld-topic", 0, [b"x" * 100, b"y" * 50])
    r = s.send("DescribeLogDirs", 4, {"Topics": [{"Topic": "ld-topic", "Partitions": [0, 1, 9]},
                                                 {"Topic": "ld-nowhere", "Partitions": [0]}]})
    # Per topic, its replicas in index order (each broker lists them in its own order).
    return r["ErrorCode"], [(d["ErrorCode"], d["TotalBytes"] > 0, 0 <= d["UsableBytes"] <= d["TotalBytes"],
                             [(t["Name"], sorted((p["PartitionIndex"], p["PartitionSize"], p["OffsetLag"],
                                                  p["IsFutureKey"]) for p in t["Partitions"])) for t in d["Topics"]])
                            for d in r["Results"]]


@scenario
def describe_client_quotas_filters(s: Side):
    """DescribeClientQuotas (kafka-configs --describe --entity-type users): nothing set matches a
    valid filter; Kafka's refusals of invalid ones."""
    def describe(components, strict=False):
        r = s.send("DescribeClientQuotas", 1, {"Components": components, "Strict": strict})
        return r["ErrorCode"], r["Entries"]
    return {
        "all_users": describe([{"EntityType": "user", "MatchType": 2, "Match": None}]),
        "one_user": describe([{"EntityType": "user", "MatchType": 0, "Match": "alice"}], strict=True),
        "default_client": describe([{"EntityType": "client-id", "MatchType": 1, "Match": None}]),
        "unknown_type": describe([{"EntityType": "tenant", "MatchType": 2, "Match": None}])[0],
        "duplicate_type": describe([{"EntityType": "user", "MatchType": 2, "Match": None},
                                    {"EntityType": "user", "MatchType": 1, "Match": None}])[0],
        "ip_and_user": describe([{"EntityType": "ip", "MatchType": 2, "Match": None},
                                 {"EntityType": "user", "MatchType": 2, "Match": None}])[0],
    }

