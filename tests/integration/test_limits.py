"""Connection limits, the idle timeout, in-flight requests, request memory and slow clients."""
import hashlib
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import ck
import kafka_wire as kw
from metrics import metrics_config, total
from confluent_kafka import Producer
from waiting import wait_until


def api_versions_ok(s, corr) -> bool:
    s.sendall(kw.request(18, 0, corr, b""))
    return struct.unpack(">ih", kw.read_response(s)[:6]) == (corr, 0)


def connect(broker):
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def connections_become(metrics, n):
    """Waits until the broker serves exactly `n` connections (the start-up probe's, or one a
    test closed, gone and its slot free)."""
    wait_until(lambda: total(metrics, "sluice_connections") == n, 15, f"{n} connections",
               state=lambda: total(metrics, "sluice_connections"))


def test_connections_per_ip_are_bounded(make_broker):
    config, metrics = metrics_config("max_connections_per_ip = 3\n")
    broker = make_broker(shards=2, config=config)
    connections_become(metrics, 0)
    kept = [connect(broker) for _ in range(3)]
    for i, s in enumerate(kept):
        assert api_versions_ok(s, i)
    extra = connect(broker)  # the kernel accepts; the broker closes it at once
    assert kw.closed_by_peer(extra)
    assert "max_connections_per_ip (3) reached" in broker.log()
    # The admitted ones still work, and a slot freed is a slot reusable.
    assert api_versions_ok(kept[0], 10)
    kept.pop().close()
    connections_become(metrics, 2)
    again = connect(broker)
    assert api_versions_ok(again, 11)
    for s in kept + [again, extra]:
        s.close()


def test_total_connections_are_bounded(make_broker):
    config, metrics = metrics_config("max_connections = 2\n")
    broker = make_broker(shards=2, config=config)
    connections_become(metrics, 0)
    a, b = connect(broker), connect(broker)
    assert api_versions_ok(a, 1) and api_versions_ok(b, 2)
    c = connect(broker)
    assert kw.closed_by_peer(c)
    assert "max_connections (2) reached" in broker.log()
    for s in (a, b, c):
        s.close()


def test_idle_connections_are_closed(make_broker):
    broker = make_broker(shards=1, config="connections_max_idle_ms = 1000\n")
    idle, busy = connect(broker), connect(broker)
    deadline = time.monotonic() + 3
    corr = 0
    while time.monotonic() < deadline:
        corr += 1
        assert api_versions_ok(busy, corr), "a connection in use stays open"
        time.sleep(0.3)  # a request every 0.3 s: in use, never idle for the 1 s bound
    assert kw.closed_by_peer(idle, timeout_s=1)
    assert "idle for 1000 ms" in broker.log()
    busy.close()


def test_in_flight_requests_per_connection_are_bounded(make_broker):
    config, metrics = metrics_config("max_in_flight_requests_per_connection = 3\n")
    broker = make_broker(shards=1, config=config)
    ck.create_topic(broker.bootstrap, "parked", 1)
    s = connect(broker)
    # A long poll on an empty partition holds the connection's one request in progress; ten
    # requests pipelined behind it may only be read up to the bound.
    frames = kw.request(1, 4, 0, kw.fetch_v4("parked", 0, 0, max_wait_ms=3000))
    frames += b"".join(kw.request(18, 0, corr, b"") for corr in range(1, 11))
    s.sendall(frames)
    # All eleven frames are in the broker's socket buffer at once: it reads what the bound
    # lets it, no more.
    wait_until(lambda: total(metrics, "sluice_requests_queued") >= 3, 15, "three requests read")
    assert total(metrics, "sluice_requests_queued") == 3
    # Everything is answered, in order, once the poll ends.
    for corr in range(11):
        assert struct.unpack(">i", kw.read_response(s)[:4])[0] == corr
    s.close()
    wait_until(lambda: total(metrics, "sluice_requests_queued") == 0, 15, "no request queued")


def test_request_memory_is_capped_with_backpressure(make_broker):
    # One shard may hold 2 MiB of request frames. Two producers each pipeline ten ~1 MB produce
    # requests, so the connections must wait for room in turn; nothing is lost.
    config, metrics = metrics_config(
        "request_max_bytes = 2097152\nmax_request_memory_bytes_per_shard = 2097152\n")
    broker = make_broker(shards=1, config=config)
    topics = ["mem-a", "mem-b"]
    for t in topics:
        ck.create_topic(broker.bootstrap, t, 1)
    values = [hashlib.sha256(str(i).encode()).digest() * 1600 for i in range(200)]  # 50 KiB each

    def produce(topic):
        p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 200})
        errors = []
        for v in values:
            p.produce(topic, value=v, on_delivery=lambda e, m: e and errors.append(e))
        assert p.flush(60) == 0 and not errors, errors[:3]

    with ThreadPoolExecutor(len(topics)) as pool:
        list(pool.map(produce, topics))
    assert total(metrics, "sluice_request_memory_waits_total") > 0
    for t in topics:
        got = ck.consume(broker.bootstrap, t, [0], len(values))
        assert [r[2] for r in got[0]] == values, t
        assert [r[0] for r in got[0]] == list(range(len(values)))
    # Every byte is given back once the last requests (the consumers' long polls) are answered.
    wait_until(lambda: total(metrics, "sluice_request_memory_bytes") == 0, 5, "request memory given back",
               state=lambda: total(metrics, "sluice_request_memory_bytes"))
    broker.assert_no_panic()


def test_slowloris_does_not_hold_up_its_shard(make_broker):
    config, metrics = metrics_config("request_read_timeout_ms = 6000\n")
    broker = make_broker(shards=1, config=config)
    slow = connect(broker)
    frame = kw.request(18, 0, 99, b"")
    stop = threading.Event()
    sent = []

    def trickle():
        for b in frame:
            if stop.wait(0.5):
                return
            try:
                slow.send(bytes([b]))
                sent.append(b)
            except OSError:
                return

    t = threading.Thread(target=trickle)
    t.start()
    try:
        # The one shard keeps serving everyone else while the slow request dribbles in.
        wait_until(lambda: len(sent) >= 2, 15, "the slow request to be under way")
        ck.create_topic(broker.bootstrap, "busy", 1)
        acked = ck.produce(broker.bootstrap, "busy", 200, 1)
        assert len(acked) == 200
        assert total(metrics, "sluice_slow_requests_closed_total") == 0, "the test ran too slowly"
        # ~1.5 s for the size, then the body's 6 s run out: the slow client is cut off.
        assert kw.closed_by_peer(slow, timeout_s=15)
        assert "request_read_timeout_ms" in broker.log()
        assert total(metrics, "sluice_slow_requests_closed_total") == 1
    finally:
        stop.set()
        t.join()
        slow.close()
