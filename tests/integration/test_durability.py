"""SIGKILL mid-load, torn tails, clean restarts: no acknowledged record is lost."""
import tarfile
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource

import ck
from records import check_partition, expected_by_partition, record
from waiting import wait_until


def test_sigkill_mid_load_keeps_every_acked_record(broker):
    partitions = 4
    ck.create_topic(broker.bootstrap, "dur", partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 5000, "retries": 0})
    acked = {}
    stop = threading.Event()

    def on_delivery(err, msg, i):
        if err is None:
            acked[i] = (msg.partition(), msg.offset())

    def load():
        i = 0
        while not stop.is_set():
            r = record(i, partitions)
            try:
                producer.produce("dur", key=r["key"], value=r["value"], partition=r["partition"],
                                 headers=r["headers"], timestamp=r["timestamp"],
                                 on_delivery=lambda e, m, i=i: on_delivery(e, m, i))
                i += 1
            except BufferError:
                pass
            producer.poll(0)

    t = threading.Thread(target=load)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 20_000, 30, "20,000 acknowledgements", every_s=0.01)
    finally:
        broker.kill()  # mid-load: the producer is still sending
        killed_with = len(acked)
        stop.set()
        t.join()
    producer.flush(10)  # everything in flight now fails: the broker is gone
    assert killed_with >= 20_000, f"only {killed_with} acks before the kill"
    broker.start()
    got = ck.consume_to_end(broker.bootstrap, "dur", range(partitions))
    stored = {(p, off): rec for p, recs in got.items() for off, *rec in recs}
    for i, (p, off) in acked.items():
        assert (p, off) in stored, f"acknowledged record {i} at {p}/{off} is missing"
        key, value, headers, ts = stored[(p, off)]
        r = record(i, partitions)
        assert (key, value, ts) == (r["key"], r["value"], r["timestamp"]), f"record {i} differs"
    # Offsets stay dense after recovery: nothing was lost in the middle of a partition.
    for p, recs in got.items():
        assert [o for o, *_ in recs] == list(range(len(recs)))


def produce_batches(bootstrap, topic, batches, per_batch):
    """One flush per batch, to a single partition: each flush becomes one record batch."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 100})
    for b in range(batches):
        for j in range(per_batch):
            i = b * per_batch + j
            r = record(i, 1)
            producer.produce(topic, key=r["key"], value=r["value"], partition=0, headers=r["headers"],
                             timestamp=r["timestamp"])
        assert producer.flush(30) == 0


def cut_last_batch(broker, topic):
    broker.kill()
    seg = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    size = seg.stat().st_size
    with open(seg, "r+b") as f:
        f.truncate(size - 10)  # cut the last batch mid-way
    broker.start()


def test_torn_tail_is_truncated_on_restart(make_broker):
    broker = make_broker(config="[log]\njournal_bytes = 0\n")
    ck.create_topic(broker.bootstrap, "torn", 1)
    produce_batches(broker.bootstrap, "torn", 10, 100)
    cut_last_batch(broker, "torn")
    assert "truncating" in broker.log()
    got = ck.consume(broker.bootstrap, "torn", [0], 900, timeout_s=30)
    want = expected_by_partition(900, 1)
    check_partition(got[0], want[0], "torn[0]")
    # The log continues right after the last whole batch.
    acked = ck.produce(broker.bootstrap, "torn", 1, 1)
    assert acked[0] == (0, 900)


def test_a_torn_tail_the_journal_holds_is_written_again_on_restart(broker):
    """Small appends are made durable in the shard's journal: a segment file that lost its
    tail gets it back from there before recovery looks at it."""
    ck.create_topic(broker.bootstrap, "torn", 1)
    produce_batches(broker.bootstrap, "torn", 10, 100)
    cut_last_batch(broker, "torn")
    assert "journals replayed" in broker.log()
    assert "truncating" not in broker.log()
    got = ck.consume(broker.bootstrap, "torn", [0], 1000, timeout_s=30)
    check_partition(got[0], expected_by_partition(1000, 1)[0], "torn[0]")
    acked = ck.produce(broker.bootstrap, "torn", 1, 1)
    assert acked[0] == (0, 1000)


def test_clean_restart_and_segment_roll(make_broker):
    # Small segments so the data spans many files and recovery loads their indexes.
    # About 320 KiB per partition in batches of at most ~8 KiB, against 32 KiB segments: about
    # ten segments. (librdkafka's default batch.size is 1 MB, which let one batch fill a segment
    # and made the count depend on timing.)
    broker = make_broker(shards=2, config="[log]\nsegment_bytes = 32768\nindex_interval_bytes = 1024\n")
    ck.create_topic(broker.bootstrap, "roll", 2)
    ck.produce(broker.bootstrap, "roll", 6000, 2, extra={"batch.size": 8192})
    segments = sorted((broker.data_dir / "roll-0").glob("*.log"))
    assert len(segments) > 5, segments
    # A batch that would take a segment past segment_bytes goes to a new one instead.
    assert all(s.stat().st_size <= 32768 for s in segments), [s.stat().st_size for s in segments]
    assert broker.stop() == 0
    assert "shut down cleanly" in broker.log()
    assert (broker.data_dir / "roll-0" / ".clean_shutdown").exists()
    broker.start()
    got = ck.consume(broker.bootstrap, "roll", [0, 1], 6000)
    want = expected_by_partition(6000, 2)
    for p in range(2):
        check_partition(got[p], want[p], f"roll[{p}]")
    # Reading from the middle of a middle segment lands on the exact offset.
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mid", "enable.auto.commit": False})
    c.assign([TopicPartition("roll", 0, 1234)])
    msg = None
    deadline = time.monotonic() + 20
    while msg is None and time.monotonic() < deadline:
        msg = c.poll(0.5)
    c.close()
    assert msg is not None and msg.offset() == 1234 and msg.key() == want[0][1234]["key"]


def test_topics_survive_restart(broker):
    ck.create_topic(broker.bootstrap, "keep", 3, {"retention.ms": "777"})
    broker.kill()
    broker.start()
    from confluent_kafka.admin import ConfigResource
    admin = ck.admin(broker.bootstrap)
    md = admin.list_topics(timeout=10)
    assert len(md.topics["keep"].partitions) == 3
    res = ConfigResource(ConfigResource.Type.TOPIC, "keep")
    assert admin.describe_configs([res])[res].result(timeout=10)["retention.ms"].value == "777"
    assert md.topics["keep"].partitions[0].leader == 0


@pytest.mark.parametrize("version", [0, 1])
def test_a_data_dir_from_an_older_catalog_format_still_loads(make_broker, tmp_path, version):
    """Data dirs written by earlier Sluices load: catalog format 1 (before dynamic broker
    configs; `fixtures/datadir-catalog-v1.tar.gz`, written by commit 6f91618: topic `old`, 2
    partitions, retention.ms 86400000, one record in old[1]) and format 0 (the same record
    without the header, as Sluice wrote before it had one). The next change rewrites the
    catalog as the current format."""
    data_dir = tmp_path / "data-0"  # where the first broker of make_broker keeps its data
    data_dir.mkdir()
    with tarfile.open(Path(__file__).parent / "fixtures" / "datadir-catalog-v1.tar.gz") as tar:
        # Python versions with extraction filters get the safe one; the archive is ours anyway.
        tar.extractall(data_dir, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    catalog = data_dir / "__meta" / "catalog.rkyv"
    raw = catalog.read_bytes()
    assert raw[:8] == b"SLUICAT\x01"
    if version == 0:
        catalog.write_bytes(raw[8:])
    broker = make_broker(shards=1)
    assert broker.data_dir == data_dir
    admin = ck.admin(broker.bootstrap)
    assert len(admin.list_topics(timeout=10).topics["old"].partitions) == 2
    got = ck.consume(broker.bootstrap, "old", [1], 1)
    assert [(m[0], m[2]) for m in got[1]] == [(0, b"kept")]
    ck.create_topic(broker.bootstrap, "new", 1)
    assert catalog.read_bytes()[:8] == b"SLUICAT\x05"
    broker.kill()
    broker.start()
    assert {"old", "new"} <= set(admin.list_topics(timeout=10).topics)
    res = ConfigResource(ConfigResource.Type.TOPIC, "old")
    assert admin.describe_configs([res])[res].result(10)["retention.ms"].value == "86400000"
