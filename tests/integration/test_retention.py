"""Retention by time and size, and DeleteRecords, with real clients: exactly the segments the
rules name are deleted, the log start offset moves to match, consumers behind it are reset, and
everything kept is byte-equal."""
import json
import os
import socket
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

import ck
import kafka_wire as kw
from metrics import metrics_config, total, wait_for_more
from records import expected_by_partition
from waiting import wait_until

# A retention pass every 200 ms instead of Kafka's 5 minutes.
CONFIG = "[log]\nretention_check_interval_ms = 200\n"
DAY_MS = 24 * 3600 * 1000
CLIENTS = Path(__file__).resolve().parents[1] / "clients"
# Small segments so that a few thousand records span many; small batches so that no batch
# fills a segment alone.
SMALL_SEGMENTS = {"segment.bytes": "16384"}
SMALL_BATCHES = {"batch.size": 4096}
OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION = 1, 3, 44


def segments(broker, topic, p):
    """[(base offset, bytes)] of the partition's segment files, oldest first."""
    files = sorted((broker.data_dir / f"{topic}-{p}").glob("*.log"))
    return [(int(f.stem), f.stat().st_size) for f in files]


def watermarks(bootstrap, topic, p):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    finally:
        c.close()


def read_from(bootstrap, topic, p, offset, count):
    """Assigns at `offset` with auto.offset.reset=earliest; returns (offset, key, value, ts)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, offset)])
    out = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < count and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
    finally:
        c.close()
    return out


def assert_old_records(got, want, start):
    """`got` holds the sent records `want[start:]` at their offsets, byte for byte."""
    assert [o for o, *_ in got] == list(range(start, start + len(got)))
    for offset, key, value, ts in got:
        w = want[offset]
        assert (key, value, ts) == (w["key"], w["value"], w["timestamp"]), f"offset {offset} differs"


def fetch_error(broker, topic, p, offset):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(kw.request(1, 4, 1, kw.fetch_v4(topic, p, offset, max_wait_ms=0)))
        return kw.fetch_v4_partition(kw.read_response(s))[0]


def delete_records_raw(broker, topic, offsets):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(kw.request(21, 1, 1, kw.delete_records_v1(topic, offsets)))
        return kw.delete_records_v1_response(kw.read_response(s))


def test_time_retention_deletes_expired_segments_only(make_broker):
    config, metrics_addr = metrics_config(CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "rt", 2, {**SMALL_SEGMENTS, "retention.ms": str(DAY_MS)})
    # records.py timestamps are from 2023: years past a one-day retention. Passes may already
    # run while these are produced.
    ck.produce(bootstrap, "rt", 3000, 2, extra=SMALL_BATCHES)
    first_fresh = {p: ck.produce_values(bootstrap, "rt", p, [b"fresh-%d" % i for i in range(100)], SMALL_BATCHES)[0]
                   for p in range(2)}
    wait_until(lambda: all(watermarks(bootstrap, "rt", p)[0] > 0 for p in range(2)), what="a retention pass")
    wait_for_more(metrics_addr, "sluice_retention_passes_total")  # a later pass must not delete more
    # About 500 KB over 16 KiB segments: dozens of segments went, not just one.
    assert total(metrics_addr, "sluice_retention_deleted_segments_total") > 10
    want = expected_by_partition(3000, 2)
    for p in range(2):
        bases = [b for b, _ in segments(broker, "rt", p)]
        low, high = watermarks(bootstrap, "rt", p)
        # Every segment holding only expired records is gone; the one holding the first fresh
        # record stays whole, expired records and all, and so does everything after it.
        assert low == bases[0] == max(b for b in bases if b <= first_fresh[p]), (low, bases, first_fresh[p])
        assert high == first_fresh[p] + 100
        got = read_from(bootstrap, "rt", p, 0, high - low)  # offset 0 is gone: reset to the start
        assert got[0][0] == low
        kept_old = [g for g in got if g[0] < first_fresh[p]]
        assert_old_records(kept_old, want[p], low)
        assert [g[2] for g in got[len(kept_old):]] == [b"fresh-%d" % i for i in range(100)]
        assert [g[0] for g in got] == list(range(low, high))
        assert fetch_error(broker, "rt", p, 0) == OFFSET_OUT_OF_RANGE


def test_a_fully_expired_log_empties_and_keeps_its_offsets(make_broker):
    broker = make_broker(config=CONFIG)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "gone", 1, {**SMALL_SEGMENTS, "retention.ms": str(DAY_MS)})
    ck.produce(bootstrap, "gone", 500, 1, extra=SMALL_BATCHES)
    wait_until(lambda: watermarks(bootstrap, "gone", 0) == (500, 500), what="every expired record to go")
    # The active segment was rolled away too: one empty segment at the end offset is left.
    assert segments(broker, "gone", 0) == [(500, 0)]
    assert ck.produce_values(bootstrap, "gone", 0, [b"after"]) == [500]
    got = read_from(bootstrap, "gone", 0, 0, 1)
    assert [(o, v) for o, _, v, _ in got] == [(500, b"after")]
    # The empty log and its offsets survive a crash.
    broker.kill()
    broker.start()
    assert watermarks(bootstrap, "gone", 0) == (500, 501)


def test_size_retention_keeps_the_newest_bytes(make_broker):
    config, metrics_addr = metrics_config(CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    bound = 50_000
    ck.create_topic(bootstrap, "rs", 1, {**SMALL_SEGMENTS, "retention.ms": "-1", "retention.bytes": str(bound)})
    ck.produce(bootstrap, "rs", 3000, 1, extra=SMALL_BATCHES)
    wait_until(lambda: watermarks(bootstrap, "rs", 0)[0] > 0, what="a retention pass")
    # Passes that ran during the produce saw part of the log: one that began after it is done.
    wait_for_more(metrics_addr, "sluice_retention_passes_total")
    segs = segments(broker, "rs", 0)
    total = sum(size for _, size in segs)
    # Kafka's rule: the oldest segments go while the rest still holds retention.bytes.
    assert total >= bound and total - segs[0][1] < bound, segs
    low, high = watermarks(bootstrap, "rs", 0)
    assert low == segs[0][0] and high == 3000
    got = read_from(bootstrap, "rs", 0, low, high - low)
    assert_old_records(got, expected_by_partition(3000, 1)[0], low)
    assert len(got) == high - low


def test_delete_records(make_broker):
    config, metrics_addr = metrics_config(CONFIG)
    broker = make_broker(config=config)
    bootstrap = broker.bootstrap
    ck.create_topic(bootstrap, "dr", 2, {**SMALL_SEGMENTS, "retention.ms": "-1"})
    ck.produce(bootstrap, "dr", 3000, 2, extra=SMALL_BATCHES)
    before = [b for b, _ in segments(broker, "dr", 0)]
    before_bytes = sum(size for p in range(2) for _, size in segments(broker, "dr", p))
    before_count = sum(len(segments(broker, "dr", p)) for p in range(2))
    assert len(before) > 3
    cut = before[2] + 5  # inside the third segment
    admin = ck.admin(bootstrap)
    futures = admin.delete_records([TopicPartition("dr", 0, cut), TopicPartition("dr", 1, -1)])
    lows = {tp.partition: f.result(timeout=10).low_watermark for tp, f in futures.items()}
    assert lows == {0: cut, 1: 1500}
    # Segments wholly below the new start are gone at once; the one it falls in stays.
    assert [b for b, _ in segments(broker, "dr", 0)] == before[2:]
    assert len(segments(broker, "dr", 1)) == 1
    after_bytes = sum(size for p in range(2) for _, size in segments(broker, "dr", p))
    after_count = sum(len(segments(broker, "dr", p)) for p in range(2))
    assert total(metrics_addr, "sluice_retention_deleted_segments_total") == before_count - after_count
    assert total(metrics_addr, "sluice_retention_deleted_bytes_total") == before_bytes - after_bytes
    want = expected_by_partition(3000, 2)

    def check():
        assert watermarks(bootstrap, "dr", 0) == (cut, 1500)
        assert watermarks(bootstrap, "dr", 1) == (1500, 1500)
        got = read_from(bootstrap, "dr", 0, 0, 1500 - cut)
        assert_old_records(got, want[0], cut)
        assert len(got) == 1500 - cut
        assert fetch_error(broker, "dr", 0, cut - 1) == OFFSET_OUT_OF_RANGE

    check()
    # Errors, as Kafka gives them; the log start never moves back.
    assert delete_records_raw(broker, "dr", {0: 1501, 1: cut - 10, 7: 0}) == {
        0: (OFFSET_OUT_OF_RANGE, -1), 1: (0, 1500), 7: (UNKNOWN_TOPIC_OR_PARTITION, -1)}
    ck.create_topic(bootstrap, "dr-compact", 1, {"cleanup.policy": "compact"})
    assert delete_records_raw(broker, "dr-compact", {0: 0}) == {0: (POLICY_VIOLATION, -1)}
    # A start inside a segment is durable: it survives SIGKILL.
    broker.kill()
    broker.start()
    check()


def test_kafkajs_delete_records(make_broker):
    broker = make_broker(config=CONFIG)
    ck.create_topic(broker.bootstrap, "drjs", 1, {"retention.ms": "-1"})
    ck.produce(broker.bootstrap, "drjs", 100, 1)
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC="drjs", PARTITION="0", OFFSET="42")
    p = subprocess.run(["node", str(CLIENTS / "kafkajs_delete_records.js")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"low": 42, "high": 100}
