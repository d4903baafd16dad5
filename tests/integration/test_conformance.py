"""Kafka behaviours that real clients rely on, each checked with a real client and on the wire:
the response-level fetch limit (KIP-74) across partitions and shards, commit-on-revoke during a
cooperative rebalance, invalid topic names, keyless records on compacted topics, authorized
operations, compression.type, topic configs Kafka accepts, and dynamic broker configs."""
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AclOperation, AdminClient, ConfigResource, NewTopic

import ck
import kafka_wire as kw
from records import expected_by_partition

BIG_VALUE_BYTES = 900_000


def big_values(partitions: int, per_partition: int):
    """Distinct ~900 KB values, one batch each: {partition: [value]}."""
    return {p: [bytes([p * 16 + i]) * BIG_VALUE_BYTES for i in range(per_partition)] for p in range(partitions)}


def produce_big(bootstrap: str, topic: str, values):
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                         "batch.num.messages": 1, "compression.type": "none"})
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, value=v, partition=p)
            producer.poll(0)
    assert producer.flush(60) == 0


def test_fetch_response_stays_within_max_bytes_for_librdkafka(make_broker):
    """The case a client suite found: ~900 KB records in 3 partitions read with
    fetch.max.bytes=1000000 and receive.message.max.bytes=1000512. A response carrying one
    batch from every partition (2.7 MB) made librdkafka drop the connection and loop."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "large", 3)
    values = big_values(3, 4)
    produce_big(broker.bootstrap, "large", values)
    got = ck.consume(broker.bootstrap, "large", [0, 1, 2], 12, timeout_s=60,
                     extra={"fetch.max.bytes": 1_000_000, "receive.message.max.bytes": 1_000_512})
    for p in range(3):
        assert [m[2] for m in got[p]] == values[p], f"large[{p}]"
        assert [m[0] for m in got[p]] == [0, 1, 2, 3]


def fetch_sizes(sock, max_bytes: int, offsets=(0, 0, 0)):
    sock.sendall(kw.request(1, 7, 1, kw.fetch_v7(0, -1, [("wire", p, o) for p, o in enumerate(offsets)],
                                                    max_bytes=max_bytes)))
    error, _session, parts = kw.fetch_v7_response(kw.read_response(sock))
    assert error == 0
    assert [parts[("wire", p)][:2] for p in range(3)] == [(0, 3)] * 3, "every partition answered"
    return [parts[("wire", p)][2] for p in range(3)]


def test_fetch_max_bytes_on_the_wire(make_broker):
    """Per response: whole batches only, the total within max_bytes except for the first batch
    of the first partition with records (KIP-74). Partitions on both shards."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "wire", 3)
    produce_big(broker.bootstrap, "wire", big_values(3, 3))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        # Each partition reads up to 1 MiB: one ~900 KB batch.
        one = fetch_sizes(s, 100)[0]  # the first batch alone, though larger than the limit
        assert one > BIG_VALUE_BYTES
        assert fetch_sizes(s, 100) == [one, 0, 0]
        assert fetch_sizes(s, 2 * one - 1) == [one, 0, 0]
        assert fetch_sizes(s, 2 * one) == [one, one, 0]
        assert fetch_sizes(s, 10 * one) == [one, one, one]
        assert fetch_sizes(s, 100, offsets=(3, 0, 0)) == [0, one, 0]
        assert fetch_sizes(s, 100, offsets=(3, 3, 0)) == [0, 0, one]
        assert fetch_sizes(s, 2 * one, offsets=(3, 0, 0)) == [0, one, one]


def test_keyless_records_on_a_compacted_topic_are_refused(make_broker):
    """Kafka refuses them with INVALID_RECORD: compaction could never clean them. A client fails
    the records at once (the error is not retriable); keyed records still go in."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "keyed", 1, config={"cleanup.policy": "compact"})
    for codec in ("none", "gzip"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "compression.type": codec,
                             "message.timeout.ms": 60_000, "linger.ms": 0})
        errors = []
        producer.produce("keyed", value=b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
        # Delivered (failed) well before message.timeout.ms: no retry loop.
        assert producer.flush(20) == 0
        assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD], codec
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    offsets = []
    p.produce("keyed", key=b"k", value=b"v", partition=0, on_delivery=lambda e, m: offsets.append((e, m.offset())))
    assert p.flush(20) == 0
    assert offsets == [(None, 0)], "only the keyed record was stored"


def test_keyless_records_get_record_errors_on_the_wire(make_broker):
    broker = make_broker(shards=1)
    ck.create_topic(broker.bootstrap, "keyed", 1, config={"cleanup.policy": "compact"})
    batch = kw.record_batch([b"a", b"b", b"c"], keys=[b"k", None, None])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(kw.request(0, 8, 1, kw.produce_v3("keyed", 0, batch)))
        error, record_errors, message = kw.produce_v8_result(kw.read_response(s))
        assert error == 87  # INVALID_RECORD
        assert [i for i, _ in record_errors] == [1, 2]
        assert all("without key" in m for _, m in record_errors)
        assert message and "2 records" in message
        # Before v8 the code alone.
        s.sendall(kw.request(0, 3, 2, kw.produce_v3("keyed", 0, batch)))
        assert kw.produce_v3_error_code(kw.read_response(s)) == (87, -1)
        # Keys on every record: stored at offset 0 (nothing was written before).
        keyed = kw.record_batch([b"a", b"b"], keys=[b"k", b"j"])
        s.sendall(kw.request(0, 8, 3, kw.produce_v3("keyed", 0, keyed)))
        assert kw.produce_v8_result(kw.read_response(s)) == (0, [], None)
        s.sendall(kw.request(0, 3, 4, kw.produce_v3("keyed", 0, keyed)))
        assert kw.produce_v3_error_code(kw.read_response(s)) == (0, 2)


TOPIC_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PRODUCER_CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
PER_CODEC = 30


def stored_codecs(port: int, topic: str) -> list[int]:
    """The codec of every batch stored in partition 0, read raw."""
    codecs, offset = [], 0
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        while offset < PER_CODEC * len(PRODUCER_CODECS):
            s.sendall(kw.request(1, 4, 1, kw.fetch_v4(topic, 0, offset, max_wait_ms=0)))
            batches = kw.fetch_v4_batches(kw.read_response(s))
            assert batches, f"{topic}: nothing at {offset}"
            for b in batches:
                codecs.append(struct.unpack(">h", b[21:23])[0] & 7)
                base, last_delta = struct.unpack(">q", b[:8])[0], struct.unpack(">i", b[23:27])[0]
                offset = base + last_delta + 1
    return codecs


def test_every_compression_type_round_trips_every_producer_codec(make_broker):
    """Each topic compression.type, fed by a producer in each codec: the records come back
    byte-equal, and the stored batches are in the topic's codec (the producer's for producer)."""
    broker = make_broker(shards=2)
    for ctype in TOPIC_CODECS:
        ck.create_topic(broker.bootstrap, f"c-{ctype}", 1, config={"compression.type": ctype})
        for codec in PRODUCER_CODECS:
            ck.produce(broker.bootstrap, f"c-{ctype}", PER_CODEC, 1, compression=codec)
    want = expected_by_partition(PER_CODEC, 1)[0] * len(PRODUCER_CODECS)
    for ctype, stored in TOPIC_CODECS.items():
        topic = f"c-{ctype}"
        got = ck.consume(broker.bootstrap, topic, [0], len(want))[0]
        assert len(got) == len(want), topic
        for n, ((offset, key, value, headers, ts), w) in enumerate(zip(got, want)):
            assert (offset, key, value, headers, ts) == (n, w["key"], w["value"], w["headers"], w["timestamp"]), \
                f"{topic}@{n}"
        codecs = set(stored_codecs(broker.port, topic))
        assert codecs == ({stored} if stored is not None else set(PRODUCER_CODECS.values())), topic


def test_timestamps_outside_the_topic_bounds_are_refused(make_broker):
    """KIP-937: message.timestamp.before.max.ms / after.max.ms refuse CreateTime records too
    far from the broker's clock with INVALID_TIMESTAMP; records within them go in."""
    broker = make_broker(shards=1)
    ck.create_topic(broker.bootstrap, "recent", 1, config={"message.timestamp.before.max.ms": "3600000",
                                                          "message.timestamp.after.max.ms": "3600000"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    results = []
    now_ms = int(time.time() * 1000)
    for ts in (now_ms, now_ms - 7_200_000, now_ms + 7_200_000):
        producer.produce("recent", value=b"v", partition=0, timestamp=ts,
                         on_delivery=lambda e, m: results.append(e.code() if e else m.offset()))
        producer.flush(20)
    assert results == [0, KafkaError.INVALID_TIMESTAMP, KafkaError.INVALID_TIMESTAMP]


def describe_topic(bootstrap: str, topic: str) -> dict:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the answer is in
    described = admin.describe_configs([resource])[resource].result(10)
    return {k: v.value for k, v in described.items()}


def test_topic_configs_kafka_accepts(make_broker):
    """Configs clients set that Kafka accepts are accepted, described, and kept over a restart;
    bad values are refused naming the key."""
    broker = make_broker(shards=1)
    configs = {
        "flush.ms": "1000", "flush.messages": "1", "message.format.version": "2.8-IV1", "preallocate": "true",
        "min.compaction.lag.ms": "60000", "max.compaction.lag.ms": "86400000",
        "message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "3600000",
        "follower.replication.throttled.replicas": "*", "leader.replication.throttled.replicas": "0:1",
        "compression.type": "zstd",
    }
    ck.create_topic(broker.bootstrap, "configured", 1, config=configs)
    described = describe_topic(broker.bootstrap, "configured")
    assert {k: described[k] for k in configs} == configs
    # Defaults are described as Kafka's.
    ck.create_topic(broker.bootstrap, "plain", 1)
    plain = describe_topic(broker.bootstrap, "plain")
    assert plain["flush.messages"] == str(2**63 - 1) and plain["compression.type"] == "producer"
    assert plain["message.timestamp.after.max.ms"] == str(2**63 - 1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    bad = admin.create_topics([NewTopic("bad", 1, 1, config={"compression.type": "brotli"})])["bad"]
    with pytest.raises(KafkaException) as e:
        bad.result(10)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG and "compression.type" in e.value.args[0].str()
    broker.stop()
    broker.start()
    assert {k: v for k, v in describe_topic(broker.bootstrap, "configured").items() if k in configs} == configs


def test_authorized_operations_are_reported(make_broker):
    """Without an authorizer every operation is allowed, and clients that ask are told so."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "ops", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.ALTER, AclOperation.DESCRIBE, AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE}
    assert [n.id for n in cluster.nodes] == [0] and cluster.controller.id == 0
    topic = admin.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)["ops"].result(10)
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DELETE, AclOperation.ALTER,
        AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "described"})
    consumer.commit(offsets=[TopicPartition("ops", 0, 1)], asynchronous=False)
    consumer.close()
    group = admin.describe_consumer_groups(["described"], include_authorized_operations=True)["described"].result(10)
    assert set(group.authorized_operations) == {AclOperation.READ, AclOperation.DELETE, AclOperation.DESCRIBE}
