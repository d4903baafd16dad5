"""Delayed operations on the timing wheel: fetch long polls and acks=all waits."""
import socket
import time

from confluent_kafka import Consumer, Producer, TopicPartition

import ck
import kafka_wire as kw
from metrics import metrics_config, scrape, total
from waiting import wait_until


def test_idle_long_poll_is_not_a_busy_loop(make_broker):
    config, metrics = metrics_config()
    broker = make_broker(shards=2, config=config)
    ck.create_topic(broker.bootstrap, "quiet", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "quiet", "fetch.wait.max.ms": 1000,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("quiet", 0, 0)])
    c.poll(1.0)  # connected and fetching
    before = total(metrics, "sluice_requests_total", api="Fetch")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert c.poll(0.2) is None
    fetches = total(metrics, "sluice_requests_total", api="Fetch") - before
    c.close()
    # About one Fetch a second, each parked for fetch.wait.max.ms; a busy loop makes thousands.
    assert 2 <= fetches <= 12, fetches


def test_produce_wakes_a_parked_fetch(broker):
    ck.create_topic(broker.bootstrap, "wake", 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wake", "fetch.wait.max.ms": 30000,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("wake", 0, 0)])
    c.poll(2.0)  # its fetch is now parked on the broker for up to 30 s
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    p.produce("wake", b"ping", partition=0)
    assert p.flush(10) == 0
    produced_at = time.monotonic()
    msg = None
    while msg is None and time.monotonic() - produced_at < 30:
        msg = c.poll(0.1)
    waited = time.monotonic() - produced_at
    c.close()
    assert msg is not None and msg.value() == b"ping"
    # The fetch completed on the append, not at its 30 s deadline.
    assert waited < 15, waited


def test_parked_fetch_woken_from_another_shard(make_broker):
    """The partition lives on one shard; connections land on both. Every parked fetch is
    woken by the append, whichever shard its connection is on."""
    config, metrics = metrics_config()
    broker = make_broker(shards=4, config=config)
    ck.create_topic(broker.bootstrap, "far", 4)
    socks = []
    for i in range(8):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
        s.sendall(kw.request(1, 4, i, kw.fetch_v4("far", i % 4, 0, 20000)))
        socks.append(s)
    wait_until(lambda: total(metrics, "sluice_parked_operations") == 8, 15, "the eight fetches to park")
    # A long linger puts each partition's ten records in one batch (flush sends them at
    # once), so the one append that wakes a fetch carries the whole high watermark.
    ck.produce(broker.bootstrap, "far", 40, 4, extra={"linger.ms": 2000})
    start = time.monotonic()
    for s in socks:
        error, hw, records = kw.fetch_v4_partition(kw.read_response(s))
        assert (error, hw) == (0, 10) and records > 0
        s.close()
    assert time.monotonic() - start < 15


def test_acks_all_times_out_with_request_timed_out(make_broker):
    # Syncs are held back for 3 s, so an acks=all produce with a 300 ms timeout cannot be
    # confirmed in time; one with a 10 s timeout is.
    broker = make_broker(shards=1, config="[log]\nflush_interval_ms = 3000\n")
    ck.create_topic(broker.bootstrap, "slow", 1)
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=20)
    batch = kw.record_batch([b"x"])
    s.sendall(kw.request(0, 3, 1, kw.produce_v3("slow", 0, batch, acks=-1, timeout_ms=300)))
    assert kw.produce_v3_error_code(kw.read_response(s))[0] == 7  # REQUEST_TIMED_OUT
    s.sendall(kw.request(0, 3, 2, kw.produce_v3("slow", 0, batch, acks=-1, timeout_ms=10000)))
    assert kw.produce_v3_error_code(kw.read_response(s)) == (0, 1)
    s.close()


def test_bound_on_parked_operations(make_broker):
    config, metrics = metrics_config("max_parked_operations = 2\n")
    broker = make_broker(shards=1, config=config)
    ck.create_topic(broker.bootstrap, "bounded", 1)
    socks = []
    for i in range(5):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
        s.sendall(kw.request(1, 4, i, kw.fetch_v4("bounded", 0, 0, 20000)))
        socks.append(s)
        # In order: each is parked or refused before the next is sent.
        wait_until(lambda: total(metrics, "sluice_parked_operations") + total(metrics, "sluice_parked_rejected_total")
                   == i + 1, 15, f"fetch {i} parked or refused")
    # Two park; the other three are answered at once, empty.
    answered = []
    for s in socks[2:]:
        s.settimeout(5)
        error, hw, records = kw.fetch_v4_partition(kw.read_response(s))
        answered.append((error, hw, records))
    assert answered == [(0, 0, 0)] * 3
    assert total(metrics, "sluice_parked_operations") == 2
    assert total(metrics, "sluice_parked_rejected_total") == 3
    assert "max_parked_operations" in broker.log()
    for s in socks:
        s.close()


def test_request_durations_run_from_the_last_byte_read_to_the_response_written(make_broker):
    config, metrics = metrics_config()
    broker = make_broker(shards=1, config=config)
    ck.create_topic(broker.bootstrap, "timed", 1)
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
    # A long poll on the empty partition: answered at its max_wait_ms, empty.
    s.sendall(kw.request(1, 4, 1, kw.fetch_v4("timed", 0, 0, max_wait_ms=400)))
    assert kw.fetch_v4_partition(kw.read_response(s))[:2] == (0, 0)
    # Five produces answered (acks=all), two with nothing to answer (acks=0, handled).
    for i in range(5):
        s.sendall(kw.request(0, 3, 10 + i, kw.produce_v3("timed", 0, kw.record_batch([b"r%d" % i]), acks=-1)))
        assert kw.produce_v3_error_code(kw.read_response(s)) == (0, i)  # (error, base offset)
    for i in range(2):
        s.sendall(kw.request(0, 3, 20 + i, kw.produce_v3("timed", 0, kw.record_batch([b"z"]), acks=0)))
    # Requests are handled in order: once this fetch is answered, the acks=0 ones were handled.
    s.sendall(kw.request(1, 4, 30, kw.fetch_v4("timed", 0, 0, max_wait_ms=0)))
    assert kw.fetch_v4_partition(kw.read_response(s))[0] == 0
    s.close()

    def count(api, le="+Inf"):
        return total(metrics, "sluice_request_duration_seconds_bucket", api=api, le=le)

    assert count("Produce") == total(metrics, "sluice_request_duration_seconds_count", api="Produce") == 7
    assert count("Produce") == total(metrics, "sluice_requests_total", api="Produce")
    # The last fetch's duration is recorded once its write completed, which may be a moment after
    # the client has read the bytes.
    wait_until(lambda: count("Fetch") == 2, 10, "the last fetch's duration recorded")
    # The long poll waited its 400 ms: above the 250 ms bucket's bound, so only one fetch is in it.
    assert count("Fetch", le="0.25") == 1
    # Buckets are cumulative.
    bounds = ["0.0001", "0.00025", "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1",
              "0.25", "0.5", "1", "2.5", "5", "+Inf"]
    counts = [count("Produce", le) for le in bounds]
    assert counts == sorted(counts), counts
    # APIs this shard never served print no histogram.
    assert not any(n.startswith("sluice_request_duration") and 'api="DeleteGroups"' in labels
                   for n, labels in scrape(metrics))
