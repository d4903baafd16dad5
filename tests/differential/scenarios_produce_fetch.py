"""Produce, Fetch, ListOffsets, DeleteRecords and OffsetForLeaderEpoch: offsets, record bytes,
and the error codes producers and consumers act on."""
import time

from kafka_wire import record_batch
from registry import scenario
from side import Side

HEADERS = [[(b"h1", b"v1"), (b"empty", b"")], [(b"null", None)], []]


# Three records: keys, a null key, headers with an empty and a null value.
THREE = record_batch([b"one", b"two", b"three"], keys=[b"k1", None, b"k3"], headers=HEADERS)


@scenario
def produce_v3_oldest_version(s: Side):
    s.create("p-v3")
    return [s.produce("p-v3", 0, THREE, version=3),
            s.produce("p-v3", 0, THREE, version=3)]


@scenario
def produce_newest_version(s: Side):
    """Produce v13 names the topic by id (KIP-516)."""
    s.create("p-v13")
    topic_id = s.topic_id("p-v13")
    produced = s.send("Produce", 13, {"Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"TopicId": topic_id, "PartitionData": [{"Index": 0, "Records": THREE}]}]})
    return produced, s.fetch("p-v13", 0, 0)


@scenario
def produce_v13_unknown_topic_id(s: Side):
    answer = s.send("Produce", 13, {"Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"TopicId": "3q2-7wAAAAAAAAAAAAAAAA", "PartitionData": [{"Index": 0, "Records": THREE}]},
        {"TopicId": "AAAAAAAAAAAAAAAAAAAAAA", "PartitionData": [{"Index": 0, "Records": THREE}]}]})
    # Kafka answers topics in its map's order, not the request's.
    answer["Responses"].sort(key=lambda t: t["TopicId"])
    return answer


@scenario
def produce_acks_1_then_fetch_bytes_equal(s: Side):
    s.create("p-acks1")
    first = s.produce("p-acks1", 0, THREE, acks=1)
    # A fetch that waits for data: Sluice's high watermark passes acks=1 records once they
    # are on disk, a moment after the producer's answer.
    return first, s.fetch("p-acks1", 0, 0, max_wait_ms=5000)


@scenario
def produce_acks_0_then_fetch(s: Side):
    s.create("p-acks0")
    s.produce("p-acks0", 0, THREE, acks=0)
    s.produce("p-acks0", 0, record_batch([b"x"]), acks=0)
    deadline = time.monotonic() + 10
    while (fetched := s.fetch("p-acks0", 0, 0))["HighWatermark"] < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    return fetched


@scenario
def produce_to_unknown_topic(s: Side):
    return s.produce("p-nowhere", 0, THREE)


@scenario
def produce_to_unknown_partition(s: Side):
    s.create("p-onepart")
    return s.produce("p-onepart", 7, THREE)


@scenario
def produce_invalid_required_acks(s: Side):
    s.create("p-acks2")
    return s.send("Produce", 9, {"Acks": 2, "TimeoutMs": 5000, "TopicData": [
        {"Name": "p-acks2", "PartitionData": [{"Index": 0, "Records": THREE}]}]})


@scenario
def produce_record_too_large(s: Side):
    s.create("p-large", configs={"max.message.bytes": 1000})
    return s.produce("p-large", 0, record_batch([b"x" * 2000])), s.produce("p-large", 0, record_batch([b"y" * 100]))


@scenario
def produce_corrupt_crc(s: Side):
    s.create("p-crc")
    batch = bytearray(THREE)
    batch[-1] ^= 0xFF
    return s.produce("p-crc", 0, bytes(batch)), s.fetch("p-crc", 0, 0)


@scenario
def produce_invalid_topic_name(s: Side):
    return s.produce("bad/name", 0, THREE)


@scenario
def produce_to_internal_topic(s: Side):
    s.coordinator("g-internal-produce")
    return s.produce("__consumer_offsets", 0, record_batch([b"x"], keys=[b"k"]))


@scenario
def produce_keyless_to_compacted_topic(s: Side):
    s.create("p-compacted", configs={"cleanup.policy": "compact"})
    return s.produce("p-compacted", 0, record_batch([b"a", b"b"], keys=[b"k", None]))


@scenario
def produce_log_append_time(s: Side):
    s.create("p-lat", configs={"message.timestamp.type": "LogAppendTime"})
    produced = s.produce("p-lat", 0, THREE)
    fetched = s.fetch("p-lat", 0, 0)
    return produced, fetched["ErrorCode"], fetched["HighWatermark"]


@scenario
def produce_timestamp_outside_window(s: Side):
    s.create("p-ts", configs={"message.timestamp.before.max.ms": 60_000})
    return s.produce("p-ts", 0, record_batch([b"old"], timestamp=1_000_000_000_000))


@scenario
def produce_idempotent_then_duplicate(s: Side):
    s.create("p-idem")
    pid = s.init_producer()
    batch = record_batch([b"a", b"b"], producer_id=pid["ProducerId"], producer_epoch=0, base_sequence=0)
    return pid, s.produce("p-idem", 0, batch), s.produce("p-idem", 0, batch), s.fetch("p-idem", 0, 0)["HighWatermark"]


@scenario
def produce_idempotent_sequence_gap(s: Side):
    s.create("p-gap")
    pid = s.init_producer()["ProducerId"]
    first = s.produce("p-gap", 0, record_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=0))
    gap = s.produce("p-gap", 0, record_batch([b"c"], producer_id=pid, producer_epoch=0, base_sequence=5))
    return first, gap


@scenario
def produce_idempotent_unknown_producer(s: Side):
    s.create("p-unknown-pid")
    return s.produce("p-unknown-pid", 0, record_batch([b"a"], producer_id=987_654, producer_epoch=0,
                                                      base_sequence=3))


@scenario
def produce_idempotent_first_sequence_not_zero(s: Side):
    s.create("p-seq-nonzero")
    pid = s.init_producer()["ProducerId"]
    return s.produce("p-seq-nonzero", 0, record_batch([b"a"], producer_id=pid, producer_epoch=0, base_sequence=7))


@scenario
def produce_control_batch_from_client(s: Side):
    s.create("p-control")
    marker = record_batch([b"\x00\x00\x00\x00\x00\x00"], keys=[b"\x00\x00\x00\x00"], attributes=0x30,
                          producer_id=5, producer_epoch=0)
    return s.produce("p-control", 0, marker)


@scenario
def produce_two_partitions_one_unknown(s: Side):
    s.create("p-mixed", partitions=2)
    return s.send("Produce", 9, {"Acks": -1, "TimeoutMs": 5000, "TopicData": [
        {"Name": "p-mixed", "PartitionData": [{"Index": 1, "Records": THREE},
                                              {"Index": 4, "Records": THREE}]}]})


@scenario
def fetch_v4_oldest_version(s: Side):
    s.create("f-v4")
    s.produce("f-v4", 0, THREE)
    return s.fetch("f-v4", 0, 0, version=4)


def _fetch_by_id(s: Side, version: int, topic_id: str, offset: int):
    """One partition's Fetch v13+ (topics by id), outside any session."""
    return s.send("Fetch", version, {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20,
                                     "SessionEpoch": -1, "Topics": [{"TopicId": topic_id, "Partitions": [
                                         {"Partition": 0, "FetchOffset": offset, "CurrentLeaderEpoch": -1,
                                          "PartitionMaxBytes": 1 << 20}]}]})


@scenario
def fetch_newest_version_by_topic_id(s: Side):
    s.create("f-v18")
    s.produce("f-v18", 0, THREE)
    return _fetch_by_id(s, 18, s.topic_id("f-v18"), 0)


@scenario
def fetch_v13_by_topic_id(s: Side):
    s.create("f-v13")
    s.produce("f-v13", 0, THREE)
    return _fetch_by_id(s, 13, s.topic_id("f-v13"), 1)


@scenario
def fetch_unknown_topic_id(s: Side):
    return _fetch_by_id(s, 13, "3q2-7wAAAAAAAAAAAAAAAA", 0)


@scenario
def fetch_unknown_topic_by_name(s: Side):
    return s.fetch("f-nowhere", 0, 0)


@scenario
def fetch_offset_out_of_range(s: Side):
    s.create("f-oor")
    s.produce("f-oor", 0, THREE)
    return s.fetch("f-oor", 0, 100), s.fetch("f-oor", 0, -5)


@scenario
def fetch_at_high_watermark_waits_and_returns_empty(s: Side):
    s.create("f-empty")
    s.produce("f-empty", 0, THREE)
    return s.fetch("f-empty", 0, 3, max_wait_ms=200)


@scenario
def fetch_from_the_middle_of_a_batch(s: Side):
    s.create("f-middle")
    s.produce("f-middle", 0, THREE)
    s.produce("f-middle", 0, record_batch([b"four"]))
    return s.fetch("f-middle", 0, 2)


@scenario
def fetch_max_bytes_smaller_than_first_batch(s: Side):
    s.create("f-kip74")
    s.produce("f-kip74", 0, record_batch([b"a" * 500]))
    s.produce("f-kip74", 0, record_batch([b"b" * 500]))
    return s.fetch("f-kip74", 0, 0, max_bytes=100)


@scenario
def fetch_unknown_leader_epoch(s: Side):
    s.create("f-epoch")
    return s.fetch("f-epoch", 0, 0, leader_epoch=7)


@scenario
def fetch_current_leader_epoch(s: Side):
    s.create("f-epoch0")
    s.produce("f-epoch0", 0, THREE)
    return s.fetch("f-epoch0", 0, 0, leader_epoch=0)


@scenario
def fetch_v11_names_the_consumers_rack(s: Side):
    # KIP-392: a lone leader has no other replica to send the consumer to, on either side.
    s.create("f-rack")
    s.produce("f-rack", 0, THREE)
    return s.send("Fetch", 11, {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20,
                                "SessionEpoch": -1, "RackId": "rack-a", "Topics": [{"Topic": "f-rack", "Partitions": [
                                    {"Partition": 0, "FetchOffset": 0, "CurrentLeaderEpoch": -1,
                                     "PartitionMaxBytes": 1 << 20}]}]})


@scenario
def fetch_unknown_partition(s: Side):
    s.create("f-part")
    return s.fetch("f-part", 3, 0)


def _session_fetch(s: Side, session_id: int, epoch: int, partitions, forgotten=()):
    return s.send("Fetch", 12, {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20,
                                "SessionId": session_id, "SessionEpoch": epoch,
                                "Topics": [{"Topic": t, "Partitions": [
                                    {"Partition": p, "FetchOffset": o, "PartitionMaxBytes": 1 << 20}]}
                                           for t, p, o in partitions],
                                "ForgottenTopicsData": [{"Topic": t, "Partitions": [p]} for t, p in forgotten]})


@scenario
def fetch_session_full_then_incremental(s: Side):
    s.create("f-session", partitions=2)
    s.produce("f-session", 0, THREE)
    full = _session_fetch(s, 0, 0, [("f-session", 0, 0), ("f-session", 1, 0)])
    sid = full["SessionId"]
    s.produce("f-session", 1, record_batch([b"new"]))
    incremental = _session_fetch(s, sid, 1, [("f-session", 0, 3)])
    nothing_new = _session_fetch(s, sid, 2, [])
    forget = _session_fetch(s, sid, 3, [], forgotten=[("f-session", 1)])
    return full, incremental, nothing_new, forget


@scenario
def fetch_session_wrong_epoch(s: Side):
    s.create("f-session-epoch")
    full = _session_fetch(s, 0, 0, [("f-session-epoch", 0, 0)])
    return full, _session_fetch(s, full["SessionId"], 5, [])


@scenario
def fetch_session_unknown_id(s: Side):
    return _session_fetch(s, 123_456, 1, [])


@scenario
def fetch_session_close(s: Side):
    s.create("f-session-close")
    full = _session_fetch(s, 0, 0, [("f-session-close", 0, 0)])
    closed = _session_fetch(s, full["SessionId"], -1, [("f-session-close", 0, 0)])
    after = _session_fetch(s, full["SessionId"], 1, [])
    return full, closed, after


def _list_offsets(s: Side, topic: str, timestamp: int, version: int = 6, partition: int = 0, epoch: int = -1):
    body = {"ReplicaId": -1, "IsolationLevel": 0, "Topics": [{"Name": topic, "Partitions": [
        {"PartitionIndex": partition, "CurrentLeaderEpoch": epoch, "Timestamp": timestamp}]}]}
    return s.send("ListOffsets", version, body)["Topics"][0]["Partitions"][0]


def _timestamped(s: Side, topic: str):
    s.create(topic)
    for i, ts in enumerate([1_700_000_000_000, 1_700_000_005_000, 1_700_000_002_000]):
        s.produce(topic, 0, record_batch([b"r%d" % i, b"s%d" % i], timestamp=ts))


@scenario
def list_offsets_v1_oldest_version(s: Side):
    _timestamped(s, "lo-v1")
    return [_list_offsets(s, "lo-v1", t, version=1) for t in (-2, -1, 1_700_000_001_000)]


@scenario
def list_offsets_earliest_latest_by_time(s: Side):
    _timestamped(s, "lo-v6")
    return [_list_offsets(s, "lo-v6", t) for t in (-2, -1, 1_700_000_000_000, 1_700_000_001_000,
                                                    1_700_000_004_000, 1_800_000_000_000)]


@scenario
def list_offsets_max_timestamp(s: Side):
    _timestamped(s, "lo-max")
    return _list_offsets(s, "lo-max", -3, version=7)


@scenario
def list_offsets_newest_version(s: Side):
    _timestamped(s, "lo-v11")
    return [_list_offsets(s, "lo-v11", t, version=11) for t in (-2, -1, -3, -4, -5)]


@scenario
def list_offsets_unknown_topic_and_partition(s: Side):
    s.create("lo-part")
    return _list_offsets(s, "lo-nowhere", -1), _list_offsets(s, "lo-part", -1, partition=9)


@scenario
def list_offsets_unknown_leader_epoch(s: Side):
    s.create("lo-epoch")
    return _list_offsets(s, "lo-epoch", -1, epoch=9), _list_offsets(s, "lo-epoch", -1, epoch=0)


@scenario
def list_offsets_empty_partition(s: Side):
    s.create("lo-empty")
    return [_list_offsets(s, "lo-empty", t) for t in (-2, -1, 1_700_000_000_000)]


def _delete_records(s: Side, topic: str, offset: int, version: int = 2, partition: int = 0):
    body = {"Topics": [{"Name": topic, "Partitions": [{"PartitionIndex": partition, "Offset": offset}]}],
            "TimeoutMs": 10_000}
    return s.send("DeleteRecords", version, body)["Topics"][0]["Partitions"][0]


@scenario
def delete_records_then_fetch_and_list(s: Side):
    s.create("dr-basic")
    s.produce("dr-basic", 0, THREE)
    s.produce("dr-basic", 0, THREE)
    deleted = _delete_records(s, "dr-basic", 4)
    return deleted, s.fetch("dr-basic", 0, 0), s.fetch("dr-basic", 0, 4), _list_offsets(s, "dr-basic", -2)


@scenario
def delete_records_beyond_high_watermark(s: Side):
    s.create("dr-beyond")
    s.produce("dr-beyond", 0, THREE)
    return _delete_records(s, "dr-beyond", 10), _delete_records(s, "dr-beyond", -1, version=0)


@scenario
def delete_records_unknown_topic_and_partition(s: Side):
    s.create("dr-part")
    return _delete_records(s, "dr-nowhere", 0), _delete_records(s, "dr-part", 0, partition=3)


@scenario
def delete_records_compacted_topic(s: Side):
    s.create("dr-compacted", configs={"cleanup.policy": "compact"})
    s.produce("dr-compacted", 0, record_batch([b"a"], keys=[b"k"]))
    return _delete_records(s, "dr-compacted", 1)


@scenario
def delete_records_below_log_start(s: Side):
    s.create("dr-below")
    s.produce("dr-below", 0, THREE)
    return _delete_records(s, "dr-below", 2), _delete_records(s, "dr-below", 1)


def _epoch_end(s: Side, topic: str, epoch: int, version: int = 4, partition: int = 0, current: int = -1):
    body = {"ReplicaId": -1, "Topics": [{"Topic": topic, "Partitions": [
        {"Partition": partition, "CurrentLeaderEpoch": current, "LeaderEpoch": epoch}]}]}
    return s.send("OffsetForLeaderEpoch", version, body)["Topics"][0]["Partitions"][0]


@scenario
def offset_for_leader_epoch(s: Side):
    s.create("ofle")
    s.produce("ofle", 0, THREE)
    return [_epoch_end(s, "ofle", e) for e in (0, 1, 5)] + [_epoch_end(s, "ofle", 0, version=2)]


@scenario
def offset_for_leader_epoch_errors(s: Side):
    s.create("ofle-err")
    return (_epoch_end(s, "ofle-nowhere", 0), _epoch_end(s, "ofle-err", 0, partition=4),
            _epoch_end(s, "ofle-err", 0, current=3))
