"""Connection limits and the idle timeout."""
import socket
import struct
import time

import kafka_wire as kw


def api_versions_ok(s, corr) -> bool:
    s.sendall(kw.request(18, 0, corr, b""))
    return struct.unpack(">ih", kw.read_response(s)[:6]) == (corr, 0)


def connect(broker):
    return socket.create_connection(("127.0.0.1", broker.port), timeout=10)


def settle():
    """Lets the broker notice that the start-up probe's connection closed and free its slot."""
    time.sleep(0.5)


def test_connections_per_ip_are_bounded(make_broker):
    broker = make_broker(shards=2, config="max_connections_per_ip = 3\n")
    settle()
    kept = [connect(broker) for _ in range(3)]
    for i, s in enumerate(kept):
        assert api_versions_ok(s, i)
    extra = connect(broker)  # the kernel accepts; the broker closes it at once
    assert kw.closed_by_peer(extra)
    assert "max_connections_per_ip (3) reached" in broker.log()
    # The admitted ones still work, and a slot freed is a slot reusable.
    assert api_versions_ok(kept[0], 10)
    kept.pop().close()
    time.sleep(0.3)
    again = connect(broker)
    assert api_versions_ok(again, 11)
    for s in kept + [again, extra]:
        s.close()


def test_total_connections_are_bounded(make_broker):
    broker = make_broker(shards=2, config="max_connections = 2\n")
    settle()
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
        time.sleep(0.3)
    assert kw.closed_by_peer(idle, timeout_s=1)
    assert "idle for 1000 ms" in broker.log()
    busy.close()
