"""Power loss on one node: the data dir is on a disk that loses every write not yet fsynced
(`lazyfs.py`, a FUSE file system; needs root, as in CI, and is skipped where FUSE cannot mount).
SIGKILL alone proves little here, since the page cache outlives the process; this cut does not.

What must hold after the cut and a restart:
- every record acknowledged with acks=all is there, once, at its acknowledged offset;
- every record a consumer read before the cut is there at the offset it was read at: a
  consumer sees only records below the high watermark, which moves only after the fsync that
  covers them, so nothing it saw can be lost (acks=1 records included);
- acks=1 records no consumer saw may be lost (that is what acks=1 allows), and the log has no
  gap where they were;
- a consumer group's offsets, once their commit was acknowledged, are still committed;
- created topics, decided transactions, compacted logs (cut while the cleaner runs) and an
  acknowledged DeleteRecords are as they were answered."""
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient

import ck
from history import History, check_history, read_all
from metrics import metrics_config, total
from test_compaction import read_all as read_partition
from test_transactions import read_all as read_at
from waiting import wait_until


class Reader:
    """A consumer reading both partitions along: everything it saw, as {partition: {offset: value}}."""

    def __init__(self, bootstrap: str, topic: str):
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "along", "enable.auto.commit": False,
                                  "fetch.wait.max.ms": 20})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
        self.seen = {0: {}, 1: {}}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            msg = self.consumer.poll(0.05)
            if msg is not None and msg.error() is None:
                self.seen[msg.partition()][msg.offset()] = msg.value()
        self.consumer.close()


def fire_and_forget(bootstrap: str, topic: str, stop: threading.Event, acked: dict):
    """acks=1 records to partition 1 until `stop`: value → acknowledged offset."""
    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 1, "message.timeout.ms": 5000})
    i = 0
    while not stop.is_set():
        value = f"w{i:07d}".encode()
        try:
            p.produce(topic, value=value, partition=1,
                      on_delivery=lambda e, m: e is None and acked.__setitem__(m.value(), m.offset()))
            i += 1
        except BufferError:
            pass
        p.poll(0.001)
    p.flush(10)


# Group commit waits 100 ms before each pass, so that at any moment of the load some written
# bytes await their fsync and the cut has something to take.
SLOW_SYNC = """
[log]
flush_interval_ms = 100
"""


def commit_offsets(bootstrap: str, offsets):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "marks", "enable.auto.commit": False})
    try:
        c.commit(offsets=offsets, asynchronous=False)
    finally:
        c.close()


def committed(bootstrap: str, partitions):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "marks", "enable.auto.commit": False})
    try:
        return [(tp.partition, tp.offset) for tp in c.committed(partitions, timeout=30)]
    finally:
        c.close()


def test_power_loss_keeps_every_acknowledged_and_every_consumed_record(lazy_disk, make_broker):
    broker = make_broker(data_dir=lazy_disk.mount / "data", config=SLOW_SYNC)
    ck.create_topic(broker.bootstrap, "power", 2)
    h = History(broker.bootstrap, "power")
    reader = Reader(broker.bootstrap, "power")
    stop, acked_1 = threading.Event(), {}
    loose = threading.Thread(target=fire_and_forget, args=(broker.bootstrap, "power", stop, acked_1), daemon=True)
    for t in (h.thread, reader.thread, loose):
        t.start()
    wait_until(lambda: len(h.acked) > 3000 and len(acked_1) > 3000 and len(reader.seen[1]) > 1000, 120,
               "records acknowledged both ways and read along")
    marks = [TopicPartition("power", 0, 1000), TopicPartition("power", 1, 500)]
    commit_offsets(broker.bootstrap, marks)
    broker.kill()
    h.stop.set()
    stop.set()
    reader.stop.set()
    for t in (h.thread, reader.thread, loose):
        t.join(30)
    acked = dict(h.acked)
    seen = {p: dict(s) for p, s in reader.seen.items()}
    lost_bytes = lazy_disk.cut()
    assert lost_bytes > 0, "the cut lost nothing, so it tested nothing"

    broker.start()
    # The history's producer still holds what it sent after the kill: let it deliver that now,
    # so that the partitions' ends do not move while they are read to the end below.
    h.producer.flush(30)
    h.acked = acked
    check_history(h, read_all(broker.bootstrap, "power", max(acked.values()) + 1))
    after = ck.consume_to_end(broker.bootstrap, "power", [0, 1])
    at = {p: {offset: value for offset, _key, value, _headers, _ts in after[p]} for p in (0, 1)}
    for p in (0, 1):
        assert sorted(at[p]) == list(range(len(after[p]))), f"partition {p}: offsets without gaps"
        gone = [(o, v) for o, v in seen[p].items() if at[p].get(o) != v]
        assert not gone, f"partition {p}: {len(gone)} records read before the cut are gone, first {gone[:3]}"
    assert committed(broker.bootstrap, marks) == [(m.partition, m.offset) for m in marks]
    # Not asserted, only shown: how much acks=1 lost, which acks=1 allows.
    kept = len(set(acked_1) & set(at[1].values()))
    print(f"cut lost {lost_bytes} unsynced bytes; acks=1 kept {kept} of {len(acked_1)} acknowledged")


def test_power_loss_keeps_created_topics_and_decided_transactions(lazy_disk, make_broker):
    """What the broker acknowledged about topics and transactions survives a cut: a topic whose
    creation was answered exists with its partitions; a committed transaction's records are
    read_committed-visible and an aborted one's are not; the producer's next transaction after
    the restart commits (its transactional id and epoch were kept)."""
    broker = make_broker(data_dir=lazy_disk.mount / "data", config=SLOW_SYNC)
    ck.create_topic(broker.bootstrap, "decided", 3)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "power-txn", "linger.ms": 5})
    p.init_transactions(60)
    for prefix, commit in ((b"committed", True), (b"aborted", False)):
        p.begin_transaction()
        for i in range(30):
            p.produce("decided", value=prefix + b"-%d" % i, partition=i % 3)
        if commit:
            p.commit_transaction(60)
        else:
            p.abort_transaction(60)
    ck.create_topic(broker.bootstrap, "created-late", 4)
    broker.kill()
    print(f"cut lost {lazy_disk.cut()} unsynced bytes")

    broker.start()
    admin_topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=20).topics
    assert len(admin_topics["created-late"].partitions) == 4
    values = read_at(broker, "decided", 3, "read_committed", expect=30)
    assert sorted(values) == sorted(b"committed-%d" % i for i in range(30)), values
    p2 = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "power-txn", "linger.ms": 5})
    p2.init_transactions(60)
    p2.begin_transaction()
    p2.produce("decided", value=b"after", partition=0)
    p2.commit_transaction(60)
    assert b"after" in read_at(broker, "decided", 3, "read_committed", expect=31)



def read_compacted(broker, topic: str, sent: dict, when: str) -> list:
    """Partition 0 of a compacted topic after a cut, checked against `sent` ({offset: (key,
    value)} acknowledged): what is left is byte-equal at each offset, and every key's latest
    acknowledged value is there. Returns the records read."""
    got = read_partition(broker.bootstrap, topic, 0)
    for offset, key, value in got:
        assert (key, value) == sent[offset], f"offset {offset} differs after {when}"
    latest = {}
    for offset, (key, value) in sorted(sent.items()):
        latest[key] = value
    assert {k: v for _, k, v in got} == latest, f"a key's latest value is missing after {when}"
    return got


def test_power_loss_during_compaction_keeps_each_keys_latest_value(lazy_disk, make_broker):
    """A compacted topic written while the cleaner runs every 200 ms, with power cut at three
    moments: what is left is byte-equal to what was sent at each offset, and every key's latest
    acknowledged value is there (a cleaning pass cut short must leave the log as it was or as
    the pass made it, never without a key)."""
    broker = make_broker(data_dir=lazy_disk.mount / "data", config=SLOW_SYNC + "cleaner_interval_ms = 200\n")
    ck.create_topic(broker.bootstrap, "cmp", 1, {"cleanup.policy": "compact", "segment.bytes": "16384",
                                                  "min.cleanable.dirty.ratio": "0"})
    sent, removed = {}, []
    for cut in range(3):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "batch.size": 4096,
                             "linger.ms": 2})
        for rnd in range(20):
            for k in range(40):
                key, value = b"key-%d" % k, b"value-%d-%d-%d-" % (cut, rnd, k) + b"x" * (k * 3)
                producer.produce("cmp", key=key, value=value, partition=0,
                                 on_delivery=lambda e, m, kv=(key, value): e is None and sent.__setitem__(m.offset(), kv))
            producer.poll(0)
        assert producer.flush(30) == 0
        time.sleep(0.3 * cut)  # cut at different points of the cleaner's passes
        broker.kill()
        lazy_disk.cut()
        broker.start()
        got = read_compacted(broker, "cmp", sent, f"cut {cut}")
        removed.append(len(sent) - len(got))
    assert removed[-1] > 0, f"the cleaner removed nothing, so compaction was not tested: {removed}"


def test_power_loss_after_a_cleaning_pass_over_journaled_segments(lazy_disk, make_broker):
    """Small acks=all appends go through the shard journal (one record each, group commit);
    the cleaner then rewrites the segments those records cover, and power is cut once it has.
    The journal must have been fenced (its records voided once their files were synced) before
    the swap: replaying a record's old bytes over the cleaned copy would corrupt it. After the
    restart every record left is byte-equal to what was sent at its offset and each key's
    latest value is there."""
    config, metrics = metrics_config("[log]\ncleaner_interval_ms = 200\n")
    broker = make_broker(data_dir=lazy_disk.mount / "data", shards=1, config=config)
    ck.create_topic(broker.bootstrap, "journaled", 1, {"cleanup.policy": "compact", "segment.bytes": "8192",
                                                        "min.cleanable.dirty.ratio": "0"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    sent = {}
    for rnd in range(12):
        for k in range(20):
            key, value = b"key-%d" % k, b"value-%d-%d-" % (rnd, k) + b"y" * (k * 5)
            producer.produce("journaled", key=key, value=value, partition=0,
                             on_delivery=lambda e, m, kv=(key, value): e is None and sent.__setitem__(m.offset(), kv))
            assert producer.flush(10) == 0  # one record per request: each append is journaled
    assert len(sent) == 240

    def cleaned():
        return "partition journaled-0: compaction removed" in broker.log_path.read_text()

    wait_until(cleaned, 30, "a cleaning pass over the journaled segments")
    journaled = total(metrics, "sluice_journal_records_total")
    assert journaled >= 200, f"the appends did not go through the journal: {journaled} records"
    broker.kill()
    lazy_disk.cut()
    broker.start()
    got = read_compacted(broker, "journaled", sent, "the cut")
    assert len(got) < len(sent), "the cleaner removed nothing, so the fence was not tested"


def test_power_loss_keeps_an_acknowledged_delete_records(lazy_disk, make_broker):
    """DeleteRecords answered with a new log start inside a segment: after a cut the log still
    starts there (records below it stay gone), and everything above it is readable."""
    broker = make_broker(data_dir=lazy_disk.mount / "data", config=SLOW_SYNC)
    ck.create_topic(broker.bootstrap, "trim", 1, {"segment.bytes": "16384", "retention.ms": "-1"})
    offsets = ck.produce_values(broker.bootstrap, "trim", 0, [b"v%05d" % i for i in range(1000)])
    assert offsets == list(range(1000))
    admin = ck.admin(broker.bootstrap)
    futures = admin.delete_records([TopicPartition("trim", 0, 437)])
    assert [f.result(timeout=10).low_watermark for f in futures.values()] == [437]
    broker.kill()
    lazy_disk.cut()
    broker.start()
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "trim-reader"})
    try:
        assert c.get_watermark_offsets(TopicPartition("trim", 0), timeout=20) == (437, 1000)
    finally:
        c.close()
    got = ck.consume(broker.bootstrap, "trim", [0], 1000 - 437)[0]
    assert [(o, v) for o, _k, v, _h, _t in got] == [(i, b"v%05d" % i) for i in range(437, 1000)]
