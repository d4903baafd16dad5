"""Round trips through librdkafka (confluent-kafka): admin, produce with acks=all in every
compression, consume by assignment, byte-equal check."""
import pytest
from confluent_kafka.admin import ConfigResource, NewPartitions

import ck
from records import check_partition, expected_by_partition

COUNT = 20_000
PARTITIONS = 8


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_round_trip_every_compression(broker, compression):
    topic = f"rt-{compression}"
    ck.create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = ck.produce(broker.bootstrap, topic, COUNT, PARTITIONS, compression)
    assert len(acked) == COUNT
    got = ck.consume(broker.bootstrap, topic, range(PARTITIONS), COUNT)
    want = expected_by_partition(COUNT, PARTITIONS)
    for p in range(PARTITIONS):
        check_partition(got[p], want[p], f"{topic}[{p}]")
    # The offsets the producer was told are the offsets the records are stored at.
    for i, (p, off) in acked.items():
        assert got[p][off][1] == f"key-{i}".encode()


def test_admin_describe_configs_and_partitions(broker):
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "cfg", 2, {"retention.ms": "12345", "message.timestamp.type": "CreateTime"})
    res = ConfigResource(ConfigResource.Type.TOPIC, "cfg")
    configs = admin.describe_configs([res])[res].result(timeout=10)
    assert configs["retention.ms"].value == "12345"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    assert configs["cleanup.policy"].is_default
    admin.create_partitions([NewPartitions("cfg", 5)])["cfg"].result(timeout=10)
    md = admin.list_topics("cfg", timeout=10)
    assert sorted(md.topics["cfg"].partitions) == [0, 1, 2, 3, 4]
    # The new partitions take writes.
    acked = ck.produce(broker.bootstrap, "cfg", 50, 5)
    assert {p for p, _ in acked.values()} == {0, 1, 2, 3, 4}


def test_admin_errors(broker):
    from confluent_kafka.admin import NewTopic
    from confluent_kafka import KafkaError
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "dup", 1)
    cases = {
        "dup": (NewTopic("dup", 1, 1), KafkaError.TOPIC_ALREADY_EXISTS),
        "bad/name": (NewTopic("bad/name", 1, 1), KafkaError.TOPIC_EXCEPTION),
        "rf3": (NewTopic("rf3", 1, 3), KafkaError.INVALID_REPLICATION_FACTOR),
        "badcfg": (NewTopic("badcfg", 1, 1, config={"no.such.key": "1"}), KafkaError.INVALID_CONFIG),
    }
    for name, (nt, code) in cases.items():
        with pytest.raises(Exception) as e:
            admin.create_topics([nt])[nt.topic].result(timeout=10)
        assert e.value.args[0].code() == code, (name, e.value)


def test_delete_topic_and_recreate(broker):
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "gone", 2)
    ck.produce(broker.bootstrap, "gone", 100, 2)
    admin.delete_topics(["gone"])["gone"].result(timeout=10)
    assert "gone" not in admin.list_topics(timeout=10).topics
    # Recreated under the same name, it starts empty.
    ck.create_topic(broker.bootstrap, "gone", 2)
    acked = ck.produce(broker.bootstrap, "gone", 10, 2)
    assert sorted(off for _, off in acked.values()) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]


def test_list_offsets_by_timestamp(broker):
    from confluent_kafka import Consumer, TopicPartition
    from records import BASE_TS_MS
    ck.create_topic(broker.bootstrap, "ts", 1)
    ck.produce(broker.bootstrap, "ts", 1000, 1, extra={"linger.ms": 50})
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ts"})
    try:
        lo, hi = c.get_watermark_offsets(TopicPartition("ts", 0), timeout=10)
        assert (lo, hi) == (0, 1000)
        for target in [0, 1, 499, 998, 999]:
            tp = c.offsets_for_times([TopicPartition("ts", 0, BASE_TS_MS + target)], timeout=10)[0]
            assert tp.offset == target, (target, tp)
        past = c.offsets_for_times([TopicPartition("ts", 0, BASE_TS_MS + 5000)], timeout=10)[0]
        assert past.offset == -1
    finally:
        c.close()
    # The answer carries the found record's own timestamp (kafka-python exposes it).
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    kc = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        found = kc.offsets_for_times({KTP("ts", 0): BASE_TS_MS + 499})[KTP("ts", 0)]
        assert (found.offset, found.timestamp) == (499, BASE_TS_MS + 499)
    finally:
        kc.close()


def test_log_append_time(broker):
    import time
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    ck.create_topic(broker.bootstrap, "lat", 1, {"message.timestamp.type": "LogAppendTime"})
    before_ms = int(time.time() * 1000)
    ck.produce(broker.bootstrap, "lat", 50, 1)
    after_ms = int(time.time() * 1000)
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lat", "enable.auto.commit": False})
    c.assign([TopicPartition("lat", 0, 0)])
    seen = []
    deadline = time.monotonic() + 20
    while len(seen) < 50 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            seen.append(m.timestamp())
    c.close()
    assert len(seen) == 50
    for ts_type, ts in seen:
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert before_ms <= ts <= after_ms, (before_ms, ts, after_ms)


def test_requests_use_topic_id_versions(make_broker):
    """librdkafka 2.x fetches with topic ids (Fetch v13) and reads them from Metadata v12."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "ids", 2)
    ck.produce(broker.bootstrap, "ids", 10, 2)
    got = ck.consume(broker.bootstrap, "ids", [0, 1], 10)
    assert sum(len(v) for v in got.values()) == 10
