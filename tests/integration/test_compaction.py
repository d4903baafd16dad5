"""Log compaction with real clients: in a compacted topic's closed segments only the latest
record of each key is left, at its original offset and byte-equal; what is left survives
SIGKILL; and `__consumer_offsets` is compacted the same way without losing a commit."""
import socket
import struct
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

import ck
import kafka_wire as kw
from metrics import metrics_config, total, wait_for_more
from waiting import wait_until

# A cleaner pass every 200 ms instead of every 15 s.
CONFIG = "[log]\ncleaner_interval_ms = 200\n"


def segment_bases(broker, topic, p):
    return sorted(int(f.stem) for f in (broker.data_dir / f"{topic}-{p}").glob("*.log"))


def read_all(bootstrap, topic, p, timeout_s=60):
    """(offset, key, value) of every record of the partition, up to its high watermark. The
    end is the consumer's partition EOF, not the last record's offset: the last offsets of a
    transactional topic are markers, which consumers never see."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        c.assign([TopicPartition(topic, p, 0)])
        out = []
        deadline = time.monotonic() + timeout_s
        while high > 0 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= high:
                    break
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


def expected_offsets(sent, active_base):
    """Below the active segment, the last offset of each key; from it on, every offset."""
    last = {}
    for offset, (key, _) in sorted(sent.items()):
        if offset < active_base:
            last[key] = offset
    return sorted(set(last.values()) | {o for o in sent if o >= active_base})


def test_only_the_latest_record_of_each_key_is_left(make_broker):
    config, metrics_addr = metrics_config(CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "cmp", 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                           "min.cleanable.dirty.ratio": "0"})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 4096, "linger.ms": 2})
    sent = {}
    for rnd in range(50):
        for k in range(40):
            key, value = b"key-%d" % k, b"value-%d-%d-" % (rnd, k) + b"x" * (k * 3)
            producer.produce("cmp", key=key, value=value, partition=0,
                             on_delivery=lambda e, m, kv=(key, value): sent.__setitem__(m.offset(), kv))
        producer.poll(0)
    assert producer.flush(30) == 0 and len(sent) == 2000

    def compacted():
        bases = segment_bases(broker, "cmp", 0)
        got = read_all(bootstrap, "cmp", 0)
        return [o for o, _, _ in got] == expected_offsets(sent, bases[-1]), got

    wait_until(lambda: compacted()[0], timeout_s=60, what="the closed segments to be compacted")
    got = compacted()[1]
    assert len(segment_bases(broker, "cmp", 0)) > 3
    for offset, key, value in got:
        assert (key, value) == sent[offset], f"offset {offset} differs"
    # Every key's latest value is there.
    latest = {}
    for offset, (key, value) in sorted(sent.items()):
        latest[key] = value
    assert {k: v for _, k, v in got} == latest
    assert total(metrics_addr, "sluice_compaction_records_removed_total") == len(sent) - len(got)
    # The compacted log is what recovery finds after a crash.
    broker.kill()
    broker.start()
    assert read_all(bootstrap, "cmp", 0) == got


def test_consumer_offsets_are_compacted_without_losing_a_commit(make_broker):
    config, metrics_addr = metrics_config(
        "offsets_topic_partitions = 1\noffsets_topic_segment_bytes = 16384\n" + CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "oc", 2)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer", "enable.auto.commit": False})
    c.assign([TopicPartition("oc", 0), TopicPartition("oc", 1)])
    commits = 1500
    for i in range(1, commits + 1):
        c.commit(offsets=[TopicPartition("oc", 0, i), TopicPartition("oc", 1, 2 * i)], asynchronous=False)
    c.close()
    assert len(segment_bases(broker, "__consumer_offsets", 0)) > 3
    wait_until(lambda: total(metrics_addr, "sluice_compaction_records_removed_total") > commits,
               what="old commits to be compacted away")
    # By default a log is cleaned once half of it is new; at ratio 0 every closed segment is.
    admin = ck.admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets", incremental_configs=[
        ConfigEntry("min.cleanable.dirty.ratio", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=10)

    def keys_below_active_segment():
        bases = segment_bases(broker, "__consumer_offsets", 0)
        return [k for o, k, _ in read_all(bootstrap, "__consumer_offsets", 0) if o < bases[-1]]

    # Below the active segment, each key is then left once.
    wait_until(lambda: len(set(keys_below_active_segment())) == len(keys_below_active_segment()),
               what="every closed segment to be compacted")
    # The group's offsets are replayed from the compacted log after a crash.
    broker.kill()
    broker.start()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "committer", "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition("oc", 0), TopicPartition("oc", 1)], timeout=30)
    finally:
        c.close()
    assert [(tp.partition, tp.offset) for tp in got] == [(0, commits), (1, 2 * commits)]


def test_a_deleted_key_goes_entirely_after_delete_retention_ms(make_broker):
    broker = make_broker(config=CONFIG)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "tomb", 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                            "min.cleanable.dirty.ratio": "0", "delete.retention.ms": "0"})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 4096, "linger.ms": 2})
    producer.produce("tomb", key=b"gone", value=b"first", partition=0)
    producer.produce("tomb", key=b"kept", value=b"value", partition=0)
    producer.produce("tomb", key=b"gone", value=None, partition=0)  # the delete
    for i in range(300):  # enough distinct keys to close a few segments behind them
        producer.produce("tomb", key=b"filler-%d" % i, value=b"f" * 200, partition=0)
    assert producer.flush(30) == 0

    def below_active_segment():
        active = segment_bases(broker, "tomb", 0)[-1]
        return [(k, v) for o, k, v in read_all(bootstrap, "tomb", 0) if o < active]

    wait_until(lambda: all(k != b"gone" for k, _ in below_active_segment()),
               what="the deleted key, tombstone included, to be compacted away")
    left = below_active_segment()
    assert (b"kept", b"value") in left
    assert {k for k, _ in left} <= {b"kept"} | {b"filler-%d" % i for i in range(300)}


def test_min_compaction_lag_holds_young_segments_back(make_broker):
    """min.compaction.lag.ms: segments whose newest record is younger are not cleaned; once the
    lag is lowered they are."""
    config, metrics_addr = metrics_config(CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "lag", 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                           "min.cleanable.dirty.ratio": "0", "min.compaction.lag.ms": "3600000"})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "batch.size": 4096, "linger.ms": 2})
    for rnd in range(50):
        for k in range(40):
            producer.produce("lag", key=b"key-%d" % k, value=b"v-%d-%d" % (rnd, k) + b"x" * 100, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
    assert len(segment_bases(broker, "lag", 0)) > 3
    wait_for_more(metrics_addr, "sluice_cleaner_passes_total", 3)
    assert total(metrics_addr, "sluice_compaction_records_removed_total") == 0
    assert len(read_all(bootstrap, "lag", 0)) == 2000
    admin = ck.admin(bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, "lag", incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=10)
    wait_until(lambda: total(metrics_addr, "sluice_compaction_records_removed_total") > 0,
               what="the segments to be cleaned once the lag allows it")


def batches_below(broker, topic, end):
    """(producer id, is a marker) of each batch of partition 0 below offset `end`, as stored
    (markers and aborted batches included: a raw read_uncommitted Fetch)."""
    out, offset = [], 0
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as sock:
        while offset < end:
            sock.sendall(kw.request(1, 4, 1, kw.fetch_v4(topic, 0, offset, 0)))
            batches = kw.fetch_v4_batches(kw.read_response(sock))
            if not batches:
                break
            for b in batches:
                base, = struct.unpack(">q", b[0:8])
                if base >= end:
                    return out
                attributes, last_delta = struct.unpack(">hi", b[21:27])
                producer_id, = struct.unpack(">q", b[43:51])
                out.append((producer_id, commit_marker(b) if attributes & 0x20 else None))
                offset = base + last_delta + 1
    return out


def commit_marker(b: bytes) -> bool:
    """Whether the control batch `b`'s one record is a commit marker (key: version 0, type 1)."""
    def varint(at):
        shift = value = 0
        while True:
            byte = b[at]
            value |= (byte & 0x7F) << shift
            at += 1
            if not byte & 0x80:
                return (value >> 1) ^ -(value & 1), at
            shift += 7
    at = 61  # the first record: length, attributes, timestamp delta, offset delta, key
    _length, at = varint(at)
    at += 1
    _ts, at = varint(at)
    _delta, at = varint(at)
    key_len, at = varint(at)
    return b[at:at + key_len] == b"\x00\x00\x00\x01"


def every_commit_marker_ends_a_transaction_with_a_batch_left(batches):
    """Per producer, between a commit marker and its marker before (or its first batch), one
    of its batches."""
    open_txn = {}
    for producer, marker in batches:
        if marker and not open_txn.pop(producer, False):
            return False
        if marker is None:
            open_txn[producer] = True
        else:
            open_txn.pop(producer, None)
    return True


def test_compaction_removes_aborted_transactions_and_keeps_what_was_committed(make_broker):
    """In a compacted topic written by a transactional producer, the cleaner removes aborted
    records (an aborted value never hides the committed one of its key), and past
    `delete.retention.ms` the markers of transactions it left nothing of, abort markers (with
    their index entries) included: read_committed still sees every key's latest committed value
    (across a restart too), read_uncommitted no longer sees aborted records below the active
    segment, and every commit marker left there ends a transaction with a batch left."""
    broker = make_broker(config=CONFIG)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "cmp-tx", 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                             "min.cleanable.dirty.ratio": "0", "delete.retention.ms": "0"})
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cmp-tx", "linger.ms": 2})
    p.init_transactions(60)
    committed = {}
    for rnd in range(30):
        for outcome in ("commit", "abort"):
            p.begin_transaction()
            for k in range(10):
                key, value = b"key-%d" % k, b"%s-%d-%d-" % (outcome.encode(), rnd, k) + b"x" * 200
                p.produce("cmp-tx", key=key, value=value, partition=0)
                if outcome == "commit":
                    committed[key] = value
            assert p.flush(30) == 0
            if outcome == "commit":
                p.commit_transaction(30)
            else:
                p.abort_transaction(30)

    def aborted_below_active():
        active = segment_bases(broker, "cmp-tx", 0)[-1]
        return [o for o, _, v in read_all(bootstrap, "cmp-tx", 0) if o < active and v.startswith(b"abort")]

    wait_until(lambda: len(segment_bases(broker, "cmp-tx", 0)) > 3 and not aborted_below_active(),
               timeout_s=60, what="the aborted transactions to be removed")
    active = segment_bases(broker, "cmp-tx", 0)[-1]
    stored = []

    def markers_removed():
        stored[:] = batches_below(broker, "cmp-tx", active)
        no_abort_marker = not any(m is False for _, m in stored)
        return no_abort_marker and every_commit_marker_ends_a_transaction_with_a_batch_left(stored)
    wait_until(markers_removed, timeout_s=60, what="the markers of emptied transactions to be removed")
    # 30 transactions committed, most of them below the active segment; each key's later
    # commit superseded the earlier ones, so few of their markers are left, and no abort marker.
    assert sum(m is True for _, m in stored) < 5, stored

    def read_committed_latest():
        """Each key's value as read_committed reads it: an index entry left without its abort
        marker would make librdkafka skip the producer's later, committed batches."""
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "rc", "isolation.level": "read_committed",
                      "enable.auto.commit": False})
        c.assign([TopicPartition("cmp-tx", 0, 0)])
        latest = {}
        deadline = time.monotonic() + 60
        while latest != committed and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                assert not m.value().startswith(b"abort"), m.offset()
                latest[m.key()] = m.value()
        c.close()
        return latest
    assert read_committed_latest() == committed
    broker.kill()
    broker.start()
    assert read_committed_latest() == committed
