"""Version edges: the oldest and newest version Kafka 4.4 defines of the APIs the other files
reach at one version only, and the admin APIs of partitions, leaders and the quorum."""
import time

from conftest import ADMIN
from registry import scenario
from side import Side


def _txn(s: Side, txn: str, topic: str):
    s.create(topic)
    p = s.init_producer(txn)
    return p["ProducerId"], p["ProducerEpoch"]


@scenario
def list_groups_v0_oldest_version(s: Side):
    s.stable_member("g-list-v0")
    r = s.send("ListGroups", 0)
    return r["ErrorCode"], [g for g in r["Groups"] if g["GroupId"] == "g-list-v0"]


@scenario
def api_versions_v4_supported_features(s: Side):
    r = s.send("ApiVersions", 4, {"ClientSoftwareName": "differential", "ClientSoftwareVersion": "1.0"})
    return r["ErrorCode"], [f for f in r["SupportedFeatures"] if f["Name"] == "transaction.version"]


def _api_versions_v5(s: Side, cluster_id, node_id) -> dict:
    """ApiVersions v5 naming the cluster and node the client means (KIP-1242): its error code
    and whether it still lists the APIs."""
    r = s.send("ApiVersions", 5, {"ClientSoftwareName": "differential", "ClientSoftwareVersion": "1.0",
                                  "ClusterId": cluster_id, "NodeId": node_id})
    return {"error": r["ErrorCode"], "lists_apis": bool(r["ApiKeys"]),
            "lists_features": bool(r["SupportedFeatures"]) or bool(r["FinalizedFeatures"])}


def _this_node(s: Side) -> tuple[str, int]:
    meta = s.send("Metadata", 12, {"Topics": []})
    return meta["ClusterId"], next(b["NodeId"] for b in meta["Brokers"] if b["Port"] == s.port)


@scenario
def api_versions_v5_for_this_node(s: Side):
    cluster, node = _this_node(s)
    return _api_versions_v5(s, cluster, node), _api_versions_v5(s, None, -1)


@scenario
def api_versions_v5_for_another_node_or_cluster(s: Side):
    cluster, node = _this_node(s)
    return {"other_node": _api_versions_v5(s, cluster, node + 1),
            "other_cluster": _api_versions_v5(s, "AAAAAAAAAAAAAAAAAAAAAQ", node)}


@scenario
def api_versions_v5_half_an_address(s: Side):
    cluster, node = _this_node(s)
    return {"cluster_only_other": _api_versions_v5(s, "AAAAAAAAAAAAAAAAAAAAAQ", -1),
            "node_only_other": _api_versions_v5(s, None, node + 1)}


@scenario
def api_versions_v3_supported_features(s: Side):
    r = s.send("ApiVersions", 3, {"ClientSoftwareName": "differential", "ClientSoftwareVersion": "1.0"})
    return [f for f in r["SupportedFeatures"] if f["Name"] == "transaction.version"]


@scenario
def offset_commit_newest_version(s: Side):
    s.create("oc-v10")
    s.coordinator("g-oc-v10")
    topic_id = s.topic_id("oc-v10")
    return s.send("OffsetCommit", 10, {"GroupId": "g-oc-v10", "GenerationIdOrMemberEpoch": -1, "MemberId": "",
                                       "Topics": [{"TopicId": topic_id, "Partitions": [
                                           {"PartitionIndex": 0, "CommittedOffset": 3}]}]})


@scenario
def init_producer_id_newest_version(s: Side):
    s.coordinator("t-init-v5", key_type=1)
    return s.init_producer("t-init-v5", version=5)


@scenario
def add_partitions_to_txn_v0_oldest_version(s: Side):
    pid, epoch = _txn(s, "t-apt-v0", "tx-apt-v0")
    return s.send("AddPartitionsToTxn", 0, {"V3AndBelowTransactionalId": "t-apt-v0", "V3AndBelowProducerId": pid,
                                            "V3AndBelowProducerEpoch": epoch,
                                            "V3AndBelowTopics": [{"Name": "tx-apt-v0", "Partitions": [0]}]})


@scenario
def add_partitions_to_txn_v5_verify_only(s: Side):
    """The brokers' batched form (KIP-890): only the cluster's own brokers may send it."""
    pid, epoch = _txn(s, "t-apt-v5", "tx-apt-v5")
    return s.send("AddPartitionsToTxn", 5, {"Transactions": [
        {"TransactionalId": "t-apt-v5", "ProducerId": pid, "ProducerEpoch": epoch, "VerifyOnly": True,
         "Topics": [{"Name": "tx-apt-v5", "Partitions": [0]}]}]})


@scenario
def add_offsets_to_txn_oldest_and_newest(s: Side):
    pid, epoch = _txn(s, "t-aot", "tx-aot")
    body = {"TransactionalId": "t-aot", "ProducerId": pid, "ProducerEpoch": epoch, "GroupId": "g-aot"}
    s.coordinator("g-aot")
    return s.send("AddOffsetsToTxn", 0, body), s.send("AddOffsetsToTxn", 4, body)


@scenario
def end_txn_v0_oldest_version(s: Side):
    pid, epoch = _txn(s, "t-end-v0", "tx-end-v0")
    return s.send("EndTxn", 0, {"TransactionalId": "t-end-v0", "ProducerId": pid, "ProducerEpoch": epoch,
                                "Committed": True})


@scenario
def txn_offset_commit_v0_oldest_version(s: Side):
    pid, epoch = _txn(s, "t-toc-v0", "tx-toc-v0")
    s.coordinator("g-toc-v0")
    s.send("AddOffsetsToTxn", 3, {"TransactionalId": "t-toc-v0", "ProducerId": pid, "ProducerEpoch": epoch,
                                  "GroupId": "g-toc-v0"})
    return s.send("TxnOffsetCommit", 0, {"TransactionalId": "t-toc-v0", "GroupId": "g-toc-v0", "ProducerId": pid,
                                         "ProducerEpoch": epoch, "Topics": [
                                             {"Name": "tx-toc-v0", "Partitions": [
                                                 {"PartitionIndex": 0, "CommittedOffset": 5,
                                                  "CommittedMetadata": ""}]}]})


@scenario
def txn_offset_commit_newest_version(s: Side):
    pid, epoch = _txn(s, "t-toc-v6", "tx-toc-v6")
    s.coordinator("g-toc-v6")
    topic_id = s.topic_id("tx-toc-v6")
    return s.send("TxnOffsetCommit", 6, {"TransactionalId": "t-toc-v6", "GroupId": "g-toc-v6", "ProducerId": pid,
                                         "ProducerEpoch": epoch, "GenerationIdOrMemberEpoch": -1, "MemberId": "",
                                         "Topics": [{"TopicId": topic_id, "Partitions": [
                                             {"PartitionIndex": 0, "CommittedOffset": 5}]}]})


@scenario
def incremental_alter_configs_v0_oldest_version(s: Side):
    s.create("iac-v0")
    r = s.send("IncrementalAlterConfigs", 0, {"Resources": [{"ResourceType": 2, "ResourceName": "iac-v0", "Configs": [
        {"Name": "retention.ms", "ConfigOperation": 0, "Value": "99000"}]}], "ValidateOnly": False})
    described = {"Resources": [{"ResourceType": 2, "ResourceName": "iac-v0", "ConfigurationKeys": ["retention.ms"]}]}
    after = s.eventually(lambda: s.send("DescribeConfigs", 4, described)["Results"][0]["Configs"][0]["Value"],
                         lambda value: value == "99000")
    return r, after


@scenario
def heartbeat_v0_and_leave_v4(s: Side):
    member, generation = s.stable_member("g-hb-v0")
    hb = s.send("Heartbeat", 0, {"GroupId": "g-hb-v0", "GenerationId": generation, "MemberId": member})
    leave = s.send("LeaveGroup", 4, {"GroupId": "g-hb-v0", "Members": [{"MemberId": member}]})
    return hb, leave


@scenario
def elect_leaders_preferred_not_needed(s: Side):
    s.create("el-preferred", partitions=2)
    body = {"ElectionType": 0, "TopicPartitions": [{"Topic": "el-preferred", "Partitions": [0, 1]}],
            "TimeoutMs": 10_000}
    return s.send("ElectLeaders", 2, body), s.send("ElectLeaders", 0, {k: v for k, v in body.items()
                                                                        if k != "ElectionType"})


@scenario
def elect_leaders_unknown_partition(s: Side):
    s.create("el-unknown")
    return s.send("ElectLeaders", 2, {"ElectionType": 1, "TopicPartitions": [
        {"Topic": "el-unknown", "Partitions": [4]}, {"Topic": "el-nowhere", "Partitions": [0]}], "TimeoutMs": 10_000})


@scenario
def list_partition_reassignments_none(s: Side):
    s.create("lpr-none")
    return s.send("ListPartitionReassignments", 0, {"TimeoutMs": 10_000, "Topics": [
        {"Name": "lpr-none", "PartitionIndexes": [0]}]})


@scenario
def alter_partition_reassignments_to_the_same_replica(s: Side):
    s.create("apr-same")
    r = s.send("AlterPartitionReassignments", 0, {"TimeoutMs": 10_000, "Topics": [
        {"Name": "apr-same", "Partitions": [{"PartitionIndex": 0, "Replicas": [1]}]}]})
    deadline = time.monotonic() + 10
    while True:
        listed = s.send("ListPartitionReassignments", 0, {"TimeoutMs": 10_000, "Topics": None})
        mine = [t for t in listed["Topics"] if t["Name"] == "apr-same"]
        if not mine or time.monotonic() > deadline:
            return r, mine
        time.sleep(0.05)


@scenario
def alter_partition_reassignments_unknown_broker(s: Side):
    s.create("apr-bad")
    return s.send("AlterPartitionReassignments", 0, {"TimeoutMs": 10_000, "Topics": [{"Name": "apr-bad", "Partitions": [
        {"PartitionIndex": 0, "Replicas": [9]}]}]})


@scenario
def alter_partition_reassignments_newest_version(s: Side):
    s.create("apr-v1")
    return s.send("AlterPartitionReassignments", 1, {"TimeoutMs": 10_000, "AllowReplicationFactorChange": True,
                                                     "Topics": [{"Name": "apr-v1", "Partitions": [
                                                         {"PartitionIndex": 0, "Replicas": [1]}]}]})


@scenario
def alter_partition_reassignments_refusing_a_replication_factor_change(s: Side):
    s.create("apr-rf")
    return s.send("AlterPartitionReassignments", 1, {"TimeoutMs": 10_000, "AllowReplicationFactorChange": False,
                                                     "Topics": [{"Name": "apr-rf", "Partitions": [
                                                         {"PartitionIndex": 0, "Replicas": [1, 2]},
                                                         {"PartitionIndex": 0, "Replicas": [1]}]}]})


@scenario
def describe_quorum(s: Side):
    r = s.send("DescribeQuorum", 1, {"Topics": [{"TopicName": "__cluster_metadata", "Partitions": [
        {"PartitionIndex": 0}]}]})
    topic = r["Topics"][0]
    partition = topic["Partitions"][0]
    return r["ErrorCode"], topic["TopicName"], partition["ErrorCode"], partition["LeaderId"], \
        [v["ReplicaId"] for v in partition["CurrentVoters"]], partition["Observers"]


@scenario(secure=True)
def describe_user_scram_credentials(s: Side):
    s.credentials = ADMIN
    r = s.send("DescribeUserScramCredentials", 0, {"Users": [{"Name": "nobody-here"}]})
    return r


@scenario(secure=True)
def alter_user_scram_credentials_then_describe(s: Side):
    s.credentials = ADMIN
    salted = bytes(32)
    upsert = s.send("AlterUserScramCredentials", 0, {"Deletions": [], "Upsertions": [
        {"Name": "dave", "Mechanism": 1, "Iterations": 4096, "Salt": b"salt-of-dave", "SaltedPassword": salted}]})
    described = s.send("DescribeUserScramCredentials", 0, {"Users": [{"Name": "dave"}]})
    bad = s.send("AlterUserScramCredentials", 0, {"Deletions": [{"Name": "dave", "Mechanism": 9}], "Upsertions": []})
    return upsert, described, bad


@scenario(secure=True)
def describe_acls_v1_oldest_version(s: Side):
    s.credentials = ADMIN
    return s.send("DescribeAcls", 1, {"ResourceTypeFilter": 2, "ResourceNameFilter": "nothing-here",
                                      "PatternTypeFilter": 3, "PrincipalFilter": None, "HostFilter": None,
                                      "Operation": 1, "PermissionType": 1})


@scenario(secure=True)
def sasl_authenticate_v0_oldest_version(s: Side):
    c = s.connect()
    c.send("SaslHandshake", 1, {"Mechanism": "PLAIN"})
    token = b"\x00" + ADMIN[0].encode() + b"\x00" + ADMIN[1].encode()
    return c.send("SaslAuthenticate", 0, {"AuthBytes": token})


@scenario
def offset_delete_subscribed_group(s: Side):
    s.create("od-busy")
    member, generation = s.stable_member("g-od-busy", subscribed=("od-busy",))
    s.send("OffsetCommit", 9, {"GroupId": "g-od-busy", "GenerationIdOrMemberEpoch": generation, "MemberId": member,
                               "Topics": [{"Name": "od-busy", "Partitions": [
                                   {"PartitionIndex": 0, "CommittedOffset": 1}]}]})
    return s.send("OffsetDelete", 0, {"GroupId": "g-od-busy", "Topics": [{"Name": "od-busy", "Partitions": [
        {"PartitionIndex": 0}]}]})


@scenario
def update_features_of_an_unknown_feature(s: Side):
    """UpdateFeatures (KIP-584) naming a feature the cluster does not have: refused as a
    whole (the finalisable one, metadata.version, has levels of each broker's own)."""
    r = s.send("UpdateFeatures", 1, {"timeoutMs": 10000, "FeatureUpdates": [
        {"Feature": "no.such.version", "MaxVersionLevel": 1, "UpgradeType": 1}], "ValidateOnly": True})
    return r["ErrorCode"], [(x["Feature"], x["ErrorCode"]) for x in r["Results"]]
