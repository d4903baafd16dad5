"""Kafka behaviours that real clients rely on, each checked with a real client and on the wire:
the response-level fetch limit (KIP-74) across partitions and shards, commit-on-revoke during a
cooperative rebalance, invalid topic names, keyless records on compacted topics, authorized
operations, compression.type, topic configs Kafka accepts, and dynamic broker configs."""
import socket
import struct
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclOperation, AlterConfigOpType, ConfigEntry, ConfigResource,
                                  ConfigSource, NewTopic)

import ck
import kafka_wire as kw
from metrics import metrics_config, total
from records import expected_by_partition
from waiting import wait_until

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


def test_fetch_max_bytes_with_a_session_client(make_broker):
    """kafka-python fetches through incremental sessions (KIP-227): with a response limit that
    holds one ~900 KB batch, every partition still gets its turn (partitions that returned
    records go to the back of the session's order) and everything is read, in order."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "large", 3)
    values = big_values(3, 4)
    produce_big(broker.bootstrap, "large", values)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, fetch_max_bytes=1_000_000,
                             max_partition_fetch_bytes=1 << 20, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=30_000)
    try:
        consumer.assign([KTP("large", p) for p in range(3)])
        got = {p: [] for p in range(3)}
        arrival = []
        for m in consumer:
            got[m.partition].append((m.offset, m.value))
            arrival.append(m.partition)
            if len(arrival) == 12:
                break
    finally:
        consumer.close()
    for p in range(3):
        assert got[p] == list(enumerate(values[p])), f"large[{p}]"
    # The full request that opens the session and the first incremental one both start at
    # partition 0; from then on the partition just served goes to the back (as in Kafka).
    assert set(arrival[:4]) == {0, 1, 2}, f"each partition in turn, not one drained first: {arrival}"


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


def stored_bytes(port: int, topic: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(kw.request(1, 4, 1, kw.fetch_v4(topic, 0, 0, max_wait_ms=0, max_bytes=64 << 20)))
        return sum(len(b) for b in kw.fetch_v4_batches(kw.read_response(s)))


def test_compression_levels(make_broker):
    """KIP-390: the broker compresses at the topic's `compression.gzip.level` /
    `compression.zstd.level`: a higher level stores the same records in fewer bytes."""
    broker = make_broker(shards=1)
    # One uncompressed batch of log-like lines, the same bytes to every topic.
    values = [b"%d INFO service-%d served request %d in %d ms" % (1_700_000_000 + i, i % 7, i * 31, i % 97)
              for i in range(500)]
    batch = kw.record_batch(values)
    sizes = {}
    for codec, low, high in (("gzip", "1", "9"), ("zstd", "1", "19")):
        for level in (low, high):
            topic = f"{codec}-{level}"
            ck.create_topic(broker.bootstrap, topic, 1, config={"compression.type": codec,
                                                                 f"compression.{codec}.level": level})
            with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
                s.sendall(kw.request(0, 3, 1, kw.produce_v3(topic, 0, batch)))
                assert kw.produce_v3_error_code(kw.read_response(s)) == (0, 0)
            got = ck.consume(broker.bootstrap, topic, [0], len(values))[0]
            assert [m[2] for m in got] == values, topic
            sizes[topic] = stored_bytes(broker.port, topic)
        assert sizes[f"{codec}-{high}"] < sizes[f"{codec}-{low}"], sizes


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
    admin = ck.admin(bootstrap)  # kept alive until the answer is in
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
        "compression.type": "zstd", "compression.zstd.level": "10", "compression.gzip.level": "1",
        "compression.lz4.level": "12",
    }
    ck.create_topic(broker.bootstrap, "configured", 1, config=configs)
    described = describe_topic(broker.bootstrap, "configured")
    assert {k: described[k] for k in configs} == configs
    # Defaults are described as Kafka's.
    ck.create_topic(broker.bootstrap, "plain", 1)
    plain = describe_topic(broker.bootstrap, "plain")
    assert plain["flush.messages"] == str(2**63 - 1) and plain["compression.type"] == "producer"
    assert plain["message.timestamp.after.max.ms"] == "3600000"  # Kafka 4's default: an hour
    admin = ck.admin(broker.bootstrap)
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
    admin = ck.admin(broker.bootstrap)
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


def broker_resource(name: str, *entries):
    return ConfigResource(ConfigResource.Type.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, op, v in entries])


def describe_broker(admin, name: str) -> dict:
    res = ConfigResource(ConfigResource.Type.BROKER, name)
    return {k: (v.value, v.source, v.is_read_only) for k, v in admin.describe_configs([res])[res].result(10).items()}


def wire(broker, api_key: int, version: int, body: bytes):
    """One (Incremental)AlterConfigs request on its own connection: (error_code, message)."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(kw.request(api_key, version, 1, body))
        return kw.alter_configs_v0_result(kw.read_response(s))


def test_dynamic_broker_configs(make_broker):
    """KIP-226: dynamic broker configs change live for the whole cluster ("") or this broker,
    show in DescribeConfigs with their source, are topic defaults where Kafka has them, survive
    a restart, and static ones are refused naming the key."""
    broker = make_broker(shards=2)
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "inherits", 1)
    ck.create_topic(broker.bootstrap, "own", 1, config={"retention.ms": "5000"})
    SET = AlterConfigOpType.SET
    # The cluster-wide resource is named "", which librdkafka and kafka-python will not send:
    # on the wire.
    edits = [("compression.type", 0, "gzip"), ("log.retention.ms", 0, "7200000")]
    assert wire(broker, 44, 0, kw.incremental_alter_configs_v0(4, "", edits)) == (0, None)
    res = broker_resource("0", ("log.retention.ms", SET, "3600000"), ("log.cleaner.backoff.ms", SET, "2500"))
    admin.incremental_alter_configs([res])[res].result(10)

    def check():
        own = describe_broker(admin, "0")
        assert own["log.retention.ms"] == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG.value, False)
        assert own["compression.type"] == ("gzip", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value, False)
        assert own["log.cleaner.backoff.ms"][0] == "2500"
        assert own["log.dirs"][2] is True, "static keys are read-only"
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.sendall(kw.request(32, 1, 1, kw.describe_configs_v1(4, "")))
            cluster = kw.describe_configs_v1_result(kw.read_response(s))
        assert cluster == {"compression.type": ("gzip", 3, False), "log.retention.ms": ("7200000", 3, False)}
        # Topics without an override follow the broker's defaults; overrides win.
        assert describe_topic(broker.bootstrap, "inherits")["retention.ms"] == "3600000"
        assert describe_topic(broker.bootstrap, "own")["retention.ms"] == "5000"
        assert describe_topic(broker.bootstrap, "inherits")["compression.type"] == "gzip"

    check()
    # Live: an uncompressed producer's batches are stored gzip on the topic that inherits it.
    ck.produce(broker.bootstrap, "inherits", 5, 1, compression="none")
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(kw.request(1, 4, 1, kw.fetch_v4("inherits", 0, 0, max_wait_ms=0)))
        assert {struct.unpack(">h", b[21:23])[0] & 7 for b in kw.fetch_v4_batches(kw.read_response(s))} == {1}
    broker.stop()
    broker.start()
    admin = ck.admin(broker.bootstrap)
    check()
    # Static keys are refused by name, and nothing of the request is applied.
    res = broker_resource("0", ("log.dirs", SET, "/elsewhere"), ("log.retention.ms", SET, "1"))
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(10)
    assert e.value.args[0].code() == KafkaError.INVALID_REQUEST and "log.dirs" in e.value.args[0].str()
    assert describe_broker(admin, "0")["log.retention.ms"][0] == "3600000"
    # A bad value names the key; DELETE goes back to the cluster-wide value.
    res = broker_resource("0", ("log.retention.ms", SET, "soon"))
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(10)
    assert e.value.args[0].code() == KafkaError.INVALID_CONFIG and "log.retention.ms" in e.value.args[0].str()
    res = broker_resource("0", ("log.retention.ms", AlterConfigOpType.DELETE, ""))
    admin.incremental_alter_configs([res])[res].result(10)
    assert describe_topic(broker.bootstrap, "inherits")["retention.ms"] == "7200000"


def test_connection_limit_changes_live(make_broker):
    """max.connections.per.ip lowered at runtime refuses new connections past it."""
    config, metrics = metrics_config()
    broker = make_broker(shards=1, config=config)
    admin = ck.admin(broker.bootstrap)
    res = broker_resource("0", ("max.connections.per.ip", AlterConfigOpType.SET, "3"))
    admin.incremental_alter_configs([res])[res].result(10)
    del admin
    wait_until(lambda: total(metrics, "sluice_connections") == 0, 15, "the admin client's connections to close")
    socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=10) for _ in range(4)]
    try:
        for s in socks[:3]:
            s.sendall(kw.request(18, 0, 1, b""))
            assert kw.read_response(s)[:4] == struct.pack(">i", 1)
        assert kw.closed_by_peer(socks[3])
    finally:
        for s in socks:
            s.close()


@pytest.mark.parametrize("strategy,revoked", [("cooperative-sticky", 2), ("range", 4)])
def test_commit_on_revoke(make_broker, strategy, revoked):
    """The usual commit-on-revoke pattern: a consumer commits in its revoke callback while a
    second member joins (with the eager protocol, while the group prepares the rebalance).
    Kafka stores commits from the current generation in Stable and PreparingRebalance alike."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "coop", 4)
    ck.produce(broker.bootstrap, "coop", 40, 4)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": "coop", "enable.auto.commit": False,
            "partition.assignment.strategy": strategy, "auto.offset.reset": "earliest",
            "heartbeat.interval.ms": 500}
    committed, errors = [], []

    def on_revoke(consumer, partitions):
        offsets = [TopicPartition(p.topic, p.partition, 7) for p in partitions]
        if not offsets:
            return
        try:
            consumer.commit(offsets=offsets, asynchronous=False)
            committed.extend((p.partition, 7) for p in offsets)
        except KafkaException as e:
            errors.append(e.args[0])

    a = Consumer(conf)
    a.subscribe(["coop"], on_revoke=on_revoke)
    b = None
    try:
        deadline = time.monotonic() + 60
        while len(a.assignment()) < 4 and time.monotonic() < deadline:
            a.poll(0.2)
        assert len(a.assignment()) == 4
        b = Consumer(conf)
        b.subscribe(["coop"])
        while (len(a.assignment()), len(b.assignment())) != (2, 2) and time.monotonic() < deadline:
            a.poll(0.2)
            b.poll(0.2)
        assert (len(a.assignment()), len(b.assignment())) == (2, 2)
        assert not errors, errors
        assert len(committed) == revoked, "a committed the partitions it gave up"
        stored = a.committed([TopicPartition("coop", p) for p, _ in committed], timeout=10)
        assert [tp.offset for tp in stored] == [7] * revoked
    finally:
        close_members([c for c in (a, b) if c is not None])


def close_members(consumers):
    """Leaves the group by unsubscribing, with the revocations served by poll(), then closes.
    Closing a member whose revocation is still pending runs the rebalance callback inside
    close(), where librdkafka 2.16's rebalance_protocol() call (made by confluent-kafka's
    callback) can wait forever on the client's own main thread."""
    for c in consumers:
        c.unsubscribe()
    deadline = time.monotonic() + 30
    while any(c.assignment() for c in consumers) and time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
    for c in consumers:
        c.close()


def test_produce_to_an_invalid_topic_name_fails_at_once(make_broker):
    """INVALID_TOPIC_EXCEPTION is final for librdkafka: the record fails now, not when
    message.timeout.ms runs out (UNKNOWN_TOPIC_OR_PARTITION would be retried)."""
    broker = make_broker(shards=1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 120_000})
    errors = []
    producer.produce("bad name!", value=b"v", on_delivery=lambda e, m: errors.append(e))
    assert producer.flush(20) == 0
    assert [e.code() for e in errors] == [KafkaError.TOPIC_EXCEPTION]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        body = struct.pack(">i", 1) + kw.string("bad name!")
        s.sendall(kw.request(3, 1, 1, body))
        resp = kw.read_response(s)
        # v1: brokers, controller id, then topics: error code first.
        assert struct.pack(">h", 17) + kw.string("bad name!") in resp


def test_error_codes_on_the_wire(make_broker):
    """The exact codes, as a client library would see them in the frames."""
    broker = make_broker(shards=1)
    ck.create_topic(broker.bootstrap, "bounded", 1, config={"message.timestamp.before.max.ms": "60000"})
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        # A record a day old, on a topic that takes them at most a minute old: INVALID_TIMESTAMP
        # with the record named.
        old = kw.record_batch([b"a", b"b"], timestamp=int(time.time() * 1000) - 86_400_000)
        s.sendall(kw.request(0, 8, 1, kw.produce_v3("bounded", 0, old)))
        error, record_errors, message = kw.produce_v8_result(kw.read_response(s))
        assert (error, [i for i, _ in record_errors]) == (32, [0, 1]) and message
        # A static broker key: INVALID_REQUEST (42) naming it.
        edits = [("log.dirs", 0, "/elsewhere")]
        s.sendall(kw.request(44, 0, 3, kw.incremental_alter_configs_v0(4, "0", edits)))
        code, message = kw.alter_configs_v0_result(kw.read_response(s))
        assert code == 42 and "log.dirs" in message
