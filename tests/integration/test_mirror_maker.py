"""MirrorMaker 2 (dedicated mode, `connect-mirror` 4.3.1 from tests/kafka/connect/libs: see its
pom) replicating a topic and its consumer group's offsets into a Sluice node, from another
Sluice node and from Kafka 4.4: every record arrives byte-equal in order as `SOURCE.orders`, and
the group's offsets are translated (checkpoints, `sync.group.offsets.enabled`), so a consumer
of the group resumes on the target where it stopped on the source."""
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import ck
import kafka_tools
from waiting import wait_until

pytestmark = pytest.mark.skipif(not (kafka_tools.CONNECT_LIBS / ".installed").exists(),
                                reason="scripts/kafka-install has not run")

RECORDS = 1000
# The group read everything before the move. (MirrorMaker translates an offset exactly only
# near its newest offset syncs: older ones it keeps sparsely and translates to a lower bound,
# so a group far behind resumes earlier on the target, at least once, by design.)
COMMITTED = {0: RECORDS // 2, 1: RECORDS // 2}


def mirror_maker(root: Path, source: str, target: str) -> subprocess.Popen:
    props = root / "mm2.properties"
    props.write_text("\n".join([
        "clusters = source, target", f"source.bootstrap.servers = {source}", f"target.bootstrap.servers = {target}",
        "source->target.enabled = true", "source->target.topics = orders", "source->target.groups = readers",
        "target->source.enabled = false",
        # One node per side: every internal topic gets one replica.
        *(f"{k}.replication.factor = 1" for k in ("replication", "checkpoints.topic", "heartbeats.topic",
                                                  "offset-syncs.topic", "offset.storage", "status.storage",
                                                  "config.storage")),
        "replication.factor = 1",
        "sync.group.offsets.enabled = true", "sync.group.offsets.interval.seconds = 1",
        "emit.checkpoints.interval.seconds = 1", "refresh.topics.interval.seconds = 1",
        "refresh.groups.interval.seconds = 1", "emit.heartbeats.interval.seconds = 1",
        # An offset sync for every record, so translation is exact.
        "offset.lag.max = 0", ""]))
    log = open(root / "mm2.log", "w")
    command = kafka_tools.java_command("org.apache.kafka.connect.mirror.MirrorMaker", props, heap_mb=384,
                                       libs=kafka_tools.CONNECT_LIBS)
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)


def produce(source: str, first: int, count: int):
    p = Producer({"bootstrap.servers": source, "acks": "all"})
    for i in range(first, first + count):
        p.produce("orders", key=b"k%d" % i, value=b"v%d-" % i + bytes(range(i % 200)), partition=i % 2,
                  headers=[("n", b"%d" % i)])
    assert p.flush(30) == 0


def fill_source(source: str):
    """`orders` with RECORDS keyed records with headers over two partitions, and the group
    `readers` committed at COMMITTED (then gone: MM2 syncs the offsets of idle groups)."""
    ck.create_topic(source, "orders", 2)
    produce(source, 0, RECORDS)
    c = Consumer({"bootstrap.servers": source, "group.id": "readers", "enable.auto.commit": False})

    def committed_there():
        # A broker just started may not coordinate the group yet (Kafka 4.4 answers
        # NOT_COORDINATOR until its offsets topic is ready): clients retry.
        try:
            c.commit(offsets=[TopicPartition("orders", p, o) for p, o in COMMITTED.items()], asynchronous=False)
            return True
        except KafkaException as e:
            moving = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                      KafkaError.COORDINATOR_NOT_AVAILABLE)
            assert e.args[0].code() in moving, e
            return False
    try:
        wait_until(committed_there, 30, "the group's offsets committed on the source")
    finally:
        c.close()


def records(bootstrap, topic):
    return ck.read_everything(bootstrap, topic, len(COMMITTED))


def committed(bootstrap, group, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in COMMITTED], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def mirrored(root: Path, source: str, target: str):
    mm = mirror_maker(root, source, target)
    try:
        wanted = records(source, "orders")
        wait_until(lambda: "source.orders" in kafka_tools.run("kafka-topics", "--bootstrap-server", target,
                                                                 "--list").stdout.split(), 120, "source.orders made",
                   state=lambda: (root / "mm2.log").read_text()[-3000:])
        # Byte-equal, in order, at the same offsets (so translated offsets are the source's).
        wait_until(lambda: records(target, "source.orders") == wanted, 120, "every record mirrored",
                   state=lambda: (root / "mm2.log").read_text()[-3000:])
        wait_until(lambda: committed(target, "readers", "source.orders") == COMMITTED, 120,
                   "the group's offsets translated", state=lambda: committed(target, "readers", "source.orders"))
        # The group moves: on the target it reads only what the source gets from now on.
        produce(source, RECORDS, 10)
        wanted = records(source, "orders")
        wait_until(lambda: records(target, "source.orders") == wanted, 60, "the new records mirrored")
        reader = Consumer({"bootstrap.servers": target, "group.id": "readers", "enable.auto.commit": False})
        try:
            reader.subscribe(["source.orders"])
            got = []
            while len(got) < 10:
                m = reader.poll(20)
                assert m is not None and m.error() is None, (m and m.error(), got)
                got.append(m.key())
            assert sorted(got) == sorted(b"k%d" % i for i in range(RECORDS, RECORDS + 10)), got
            assert reader.poll(2) is None
        finally:
            reader.close()
        assert mm.poll() is None, (root / "mm2.log").read_text()[-3000:]
    finally:
        mm.kill()
        mm.wait()


def test_mirror_maker_2_from_sluice_to_sluice(make_broker, tmp_path):
    source, target = make_broker(), make_broker()
    fill_source(source.bootstrap)
    mirrored(tmp_path, source.bootstrap, target.bootstrap)


def test_mirror_maker_2_from_kafka_to_sluice(make_broker, tmp_path):
    target = make_broker()
    with kafka_tools.peer.KafkaCluster(tmp_path / "kafka", heap_mb=512) as kafka:
        fill_source(kafka.bootstrap())
        mirrored(tmp_path, kafka.bootstrap(), target.bootstrap)
