"""The classic group protocol: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups, and the
coordinator errors consumers act on."""
import threading

from registry import scenario
from side import Side


def _commit(s: Side, group, topic, offset, generation=-1, member="", version=9, partition=0, metadata=""):
    body = {"GroupId": group, "GenerationIdOrMemberEpoch": generation, "MemberId": member,
            "GroupInstanceId": None, "RetentionTimeMs": -1,
            "Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": partition, "CommittedOffset": offset,
                                                        "CommittedLeaderEpoch": -1, "CommittedMetadata": metadata}]}]}
    return s.send("OffsetCommit", version, body)


def _fetch_offsets(s: Side, group, topic, partitions=(0,), version=8):
    if version >= 8:
        return s.send("OffsetFetch", version, {"Groups": [{"GroupId": group, "Topics": [
            {"Name": topic, "PartitionIndexes": list(partitions)}]}], "RequireStable": False})
    return s.send("OffsetFetch", version, {"GroupId": group, "Topics": [
        {"Name": topic, "PartitionIndexes": list(partitions)}]})


def _describe(s: Side, *groups, version=5):
    return s.send("DescribeGroups", version, {"Groups": list(groups), "IncludeAuthorizedOperations": False})


@scenario
def find_coordinator_v0_oldest_version(s: Side):
    s.coordinator("g-fc-v0")
    return s.send("FindCoordinator", 0, {"Key": "g-fc-v0"})


@scenario
def find_coordinator_batched(s: Side):
    s.coordinator("g-fc-a")
    return s.send("FindCoordinator", 4, {"KeyType": 0, "CoordinatorKeys": ["g-fc-a", "g-fc-b", "g-fc-c"]})


@scenario
def find_coordinator_newest_version(s: Side):
    s.coordinator("g-fc-v6")
    return s.send("FindCoordinator", 6, {"KeyType": 0, "CoordinatorKeys": ["g-fc-v6"]})


@scenario
def find_coordinator_invalid_key_type(s: Side):
    return s.send("FindCoordinator", 4, {"KeyType": 7, "CoordinatorKeys": ["x"]})


@scenario
def join_group_member_id_required(s: Side):
    s.coordinator("g-kip394")
    first = s.join("g-kip394")
    return first["ErrorCode"], first["MemberId"] != "", first["GenerationId"]


@scenario
def join_group_single_member_becomes_leader(s: Side):
    s.coordinator("g-leader")
    return s.join_member("g-leader")


@scenario
def join_group_v0_oldest_version(s: Side):
    s.coordinator("g-join-v0")
    return s.send("JoinGroup", 0, {"GroupId": "g-join-v0", "SessionTimeoutMs": 10_000, "MemberId": "",
                                   "ProtocolType": "consumer", "Protocols": [{"Name": "range", "Metadata": b""}]})


@scenario
def join_group_unknown_member_id(s: Side):
    s.coordinator("g-unknown-member")
    return s.join("g-unknown-member", member_id="nobody-1234")


@scenario
def join_group_invalid_session_timeout(s: Side):
    s.coordinator("g-session")
    return s.join("g-session", session_timeout_ms=100), s.join("g-session", session_timeout_ms=10_000_000)


@scenario
def join_group_inconsistent_protocol_type(s: Side):
    s.stable_member("g-proto")
    return s.join("g-proto", protocol_type="connect", conn=s.connect())


@scenario
def join_group_empty_group_id(s: Side):
    return s.join("")


@scenario
def sync_group_assignment_reaches_member(s: Side):
    s.coordinator("g-sync")
    j = s.join_member("g-sync")
    return s.sync("g-sync", j["GenerationId"], j["MemberId"], [(j["MemberId"], b"\x00\x01assignment")])


@scenario
def sync_group_illegal_generation(s: Side):
    s.coordinator("g-sync-gen")
    j = s.join_member("g-sync-gen")
    return s.sync("g-sync-gen", j["GenerationId"] + 5, j["MemberId"])


@scenario
def sync_group_unknown_member(s: Side):
    s.stable_member("g-sync-unknown")
    return s.sync("g-sync-unknown", 1, "nobody-1")


@scenario
def sync_group_v0_oldest_version(s: Side):
    s.coordinator("g-sync-v0")
    j = s.send("JoinGroup", 0, {"GroupId": "g-sync-v0", "SessionTimeoutMs": 10_000, "MemberId": "",
                                "ProtocolType": "consumer", "Protocols": [{"Name": "range", "Metadata": b""}]})
    return s.send("SyncGroup", 0, {"GroupId": "g-sync-v0", "GenerationId": j["GenerationId"],
                                   "MemberId": j["MemberId"], "Assignments": [{"MemberId": j["MemberId"],
                                                                               "Assignment": b"a"}]})


def _heartbeat(s: Side, group, generation, member, version=4, conn=None):
    return (conn or s.conn).send("Heartbeat", version, {"GroupId": group, "GenerationId": generation,
                                                        "MemberId": member, "GroupInstanceId": None})


@scenario
def heartbeat_stable_member(s: Side):
    member, generation = s.stable_member("g-hb")
    return _heartbeat(s, "g-hb", generation, member), _heartbeat(s, "g-hb", generation, member, version=0)


@scenario
def heartbeat_errors(s: Side):
    member, generation = s.stable_member("g-hb-err")
    return (_heartbeat(s, "g-hb-err", generation + 3, member), _heartbeat(s, "g-hb-err", generation, "nobody-9"),
            _heartbeat(s, "g-hb-nowhere", 1, "nobody-9"))


@scenario
def heartbeat_during_rebalance(s: Side):
    member, generation = s.stable_member("g-hb-rebalance")
    # A second member's join puts the group in PreparingRebalance; it waits for the first to
    # rejoin, so it runs on its own connection and thread.
    other = s.connect()
    joined = {}
    t = threading.Thread(target=lambda: joined.update(r=s.join_member("g-hb-rebalance", conn=other)))
    t.start()
    import time
    deadline = time.monotonic() + 10
    while (hb := _heartbeat(s, "g-hb-rebalance", generation, member))["ErrorCode"] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    rejoin = s.join("g-hb-rebalance", member_id=member)
    t.join(15)
    return hb, rejoin["ErrorCode"], rejoin["GenerationId"] - generation, joined["r"]["ErrorCode"]


@scenario
def leave_group_batch(s: Side):
    member, _ = s.stable_member("g-leave")
    r = s.send("LeaveGroup", 5, {"GroupId": "g-leave", "Members": [
        {"MemberId": member, "GroupInstanceId": None, "Reason": "done"},
        {"MemberId": "nobody-1", "GroupInstanceId": None, "Reason": None}]})
    return r, _describe(s, "g-leave")["Groups"][0]["GroupState"]


@scenario
def leave_group_v0_unknown_member(s: Side):
    s.coordinator("g-leave-v0")
    return s.send("LeaveGroup", 0, {"GroupId": "g-leave-v0", "MemberId": "nobody-1"})


@scenario
def static_member_replaced_fences_the_old_one(s: Side):
    s.coordinator("g-static")
    first = s.join_member("g-static", instance_id="instance-a")
    s.sync("g-static", first["GenerationId"], first["MemberId"], [(first["MemberId"], b"")])
    second = s.join("g-static", instance_id="instance-a", conn=s.connect())
    old = _heartbeat(s, "g-static", first["GenerationId"], first["MemberId"])
    return first["ErrorCode"], second["ErrorCode"], second["MemberId"] != first["MemberId"], old


@scenario
def offset_commit_and_fetch_standalone(s: Side):
    s.create("oc-topic", partitions=2)
    s.coordinator("g-oc")
    c = _commit(s, "g-oc", "oc-topic", 42, metadata="meta")
    return c, _fetch_offsets(s, "g-oc", "oc-topic", (0, 1)), _fetch_offsets(s, "g-oc", "oc-topic", (0, 1), version=1)


@scenario
def offset_commit_v2_oldest_version(s: Side):
    s.create("oc-v2")
    s.coordinator("g-oc-v2")
    body = {"GroupId": "g-oc-v2", "GenerationIdOrMemberEpoch": -1, "MemberId": "", "RetentionTimeMs": -1,
            "Topics": [{"Name": "oc-v2", "Partitions": [{"PartitionIndex": 0, "CommittedOffset": 7,
                                                         "CommittedMetadata": None}]}]}
    return s.send("OffsetCommit", 2, body), _fetch_offsets(s, "g-oc-v2", "oc-v2")


@scenario
def offset_commit_unknown_topic(s: Side):
    s.coordinator("g-oc-unknown")
    return _commit(s, "g-oc-unknown", "oc-nowhere", 5)


@scenario
def offset_commit_illegal_generation_and_unknown_member(s: Side):
    s.create("oc-gen")
    member, generation = s.stable_member("g-oc-gen")
    return (_commit(s, "g-oc-gen", "oc-gen", 1, generation=generation + 1, member=member),
            _commit(s, "g-oc-gen", "oc-gen", 1, generation=generation, member="nobody-1"),
            _commit(s, "g-oc-gen", "oc-gen", 1, generation=generation, member=member))


@scenario
def offset_commit_metadata_too_large(s: Side):
    s.create("oc-meta")
    s.coordinator("g-oc-meta")
    return _commit(s, "g-oc-meta", "oc-meta", 1, metadata="m" * 5000)


@scenario
def offset_commit_to_non_empty_group_without_generation(s: Side):
    s.create("oc-simple")
    s.stable_member("g-oc-simple")
    return _commit(s, "g-oc-simple", "oc-simple", 3)


@scenario
def offset_fetch_unknown_group_and_all_topics(s: Side):
    s.create("of-all")
    s.coordinator("g-of-all")
    _commit(s, "g-of-all", "of-all", 9)
    unknown = _fetch_offsets(s, "g-of-nobody", "of-all")
    everything = s.send("OffsetFetch", 8, {"Groups": [{"GroupId": "g-of-all", "Topics": None}]})
    return unknown, everything


@scenario
def offset_fetch_several_groups(s: Side):
    s.create("of-multi")
    for g in ("g-of-a", "g-of-b"):
        s.coordinator(g)
        _commit(s, g, "of-multi", 11 if g.endswith("a") else 22)
    return s.send("OffsetFetch", 8, {"Groups": [{"GroupId": g, "Topics": [{"Name": "of-multi", "PartitionIndexes": [0]}]}
                                                for g in ("g-of-a", "g-of-b", "g-of-c")]})


@scenario
def offset_fetch_newest_version(s: Side):
    s.create("of-v10")
    s.coordinator("g-of-v10")
    _commit(s, "g-of-v10", "of-v10", 4)
    topic_id = s.topic_id("of-v10")
    return s.send("OffsetFetch", 10, {"Groups": [{"GroupId": "g-of-v10", "MemberId": None, "MemberEpoch": -1,
                                                  "Topics": [{"TopicId": topic_id, "PartitionIndexes": [0]}]}]})


@scenario
def offset_delete_from_empty_and_subscribed_group(s: Side):
    s.create("od-topic")
    s.coordinator("g-od")
    _commit(s, "g-od", "od-topic", 3)
    deleted = s.send("OffsetDelete", 0, {"GroupId": "g-od", "Topics": [{"Name": "od-topic", "Partitions": [
        {"PartitionIndex": 0}]}]})
    unknown = s.send("OffsetDelete", 0, {"GroupId": "g-od-nobody", "Topics": [{"Name": "od-topic", "Partitions": [
        {"PartitionIndex": 0}]}]})
    return deleted, _fetch_offsets(s, "g-od", "od-topic"), unknown


@scenario
def describe_groups_states(s: Side):
    s.stable_member("g-desc-stable")
    s.coordinator("g-desc-empty")
    s.create("dg-topic")
    _commit(s, "g-desc-empty", "dg-topic", 1)
    r = _describe(s, "g-desc-stable", "g-desc-empty", "g-desc-dead")
    return r


@scenario
def describe_groups_newest_version(s: Side):
    s.stable_member("g-desc-v6")
    return _describe(s, "g-desc-v6", "g-desc-v6-missing", version=6)


@scenario
def describe_groups_v0_oldest_version(s: Side):
    s.stable_member("g-desc-v0")
    return _describe(s, "g-desc-v0", version=0)


@scenario
def list_groups_with_state_filter(s: Side):
    s.stable_member("g-list-stable")
    everyone = s.send("ListGroups", 4, {"StatesFilter": []})
    stable = s.send("ListGroups", 4, {"StatesFilter": ["Stable"]})
    mine = lambda r: sorted((g["GroupId"], g["GroupState"]) for g in r["Groups"] if g["GroupId"].startswith("g-list"))
    return everyone["ErrorCode"], mine(everyone), mine(stable)


@scenario
def list_groups_v5_types(s: Side):
    s.stable_member("g-list-type")
    r = s.send("ListGroups", 5, {"StatesFilter": [], "TypesFilter": []})
    classic = s.send("ListGroups", 5, {"StatesFilter": [], "TypesFilter": ["classic"]})
    consumer = s.send("ListGroups", 5, {"StatesFilter": [], "TypesFilter": ["consumer"]})
    mine = lambda r: [g for g in r["Groups"] if g["GroupId"] == "g-list-type"]
    return r["ErrorCode"], mine(r), mine(classic), mine(consumer)


@scenario
def delete_groups_empty_non_empty_unknown(s: Side):
    s.stable_member("g-del-busy")
    s.create("del-topic")
    s.coordinator("g-del-empty")
    _commit(s, "g-del-empty", "del-topic", 1)
    r = s.send("DeleteGroups", 2, {"GroupsNames": ["g-del-busy", "g-del-empty", "g-del-nobody"]})
    return r, _describe(s, "g-del-empty")["Groups"][0]["GroupState"]


@scenario
def delete_groups_newest_version(s: Side):
    s.coordinator("g-del-v3")
    return s.send("DeleteGroups", 3, {"GroupsNames": ["g-del-v3-nobody"]})


@scenario
def describe_configs_of_a_group_after_setting(s: Side):
    s.stable_member("g-config")
    r = s.send("IncrementalAlterConfigs", 1, {"Resources": [{"ResourceType": 32, "ResourceName": "g-config", "Configs": [
        {"Name": "consumer.session.timeout.ms", "ConfigOperation": 0, "Value": "50000"}]}], "ValidateOnly": True})
    return r
