"""A connection's requests pipeline: a request waiting for durability (acks=all) or for data
(a long poll) does not hold up the requests after it, while responses still go out in request
order and a partition's appends keep the order their requests arrived in."""
import random
import socket
import struct

import ck
import pytest
import kafka_wire as kw
from confluent_kafka import Producer


def connect(broker):
    return socket.create_connection(("127.0.0.1", broker.port), timeout=60)


def corr(response: bytes) -> int:
    return struct.unpack(">i", response[:4])[0]


def test_pipelined_acks_all_produces_answer_in_order_with_dense_offsets(make_broker):
    broker = make_broker(shards=2, config="max_in_flight_requests_per_connection = 50\n")
    ck.create_topic(broker.bootstrap, "pipe", 2)
    s = connect(broker)
    n = 200
    # Both partitions, interleaved: one on each shard at most, so both the local and the
    # cross-shard paths pipeline.
    frames = b"".join(
        kw.request(0, 3, i, kw.produce_v3("pipe", i % 2, kw.record_batch([b"v%d" % i]), acks=-1))
        for i in range(n))
    s.sendall(frames)
    next_offset = {0: 0, 1: 0}
    for i in range(n):
        r = kw.read_response(s)
        assert corr(r) == i, "responses in request order"
        error, base = kw.produce_v3_error_code(r)
        assert error == 0
        assert base == next_offset[i % 2], "each partition's appends in arrival order"
        next_offset[i % 2] += 1
    # Everything acknowledged is there, byte-equal, in order.
    got = ck.consume(broker.bootstrap, "pipe", [0, 1], n)
    for p in (0, 1):
        assert [v for _, _, v, _, _ in got[p]] == [b"v%d" % i for i in range(p, n, 2)]


@pytest.mark.parametrize("shards", [1, 2])
def test_requests_spanning_partitions_keep_each_partitions_order(make_broker, shards):
    """A request's appends to several partitions of one shard must not let a later request
    overtake it on a partition while an earlier partition's append waits (a roll, the disk).
    Small segments make rolls frequent; each request names a random subset of partitions in a
    random order. On two shards, one request's appends also go to a peer over the mesh."""
    broker = make_broker(shards=shards)
    partitions = 4
    ck.create_topic(broker.bootstrap, "span", partitions, {"segment.bytes": "16384"})
    s = connect(broker)
    rng = random.Random(7)
    n = 1500
    sent = {p: [] for p in range(partitions)}
    counts = {}  # (request, partition): records
    frames = []
    for i in range(n):
        chosen = rng.sample(range(partitions), rng.randint(1, partitions))
        items = []
        for p in chosen:
            values = [b"r%d-p%d-%d-" % (i, p, k) + bytes(rng.randrange(300)) for k in range(rng.randint(1, 8))]
            sent[p].extend(values)
            counts[i, p] = len(values)
            items.append((p, kw.record_batch(values)))
        frames.append(kw.request(0, 3, i, kw.produce_v3_partitions("span", items, acks=-1)))
    s.sendall(b"".join(frames))
    next_offset = {p: 0 for p in range(partitions)}
    for i in range(n):
        r = kw.read_response(s)
        assert corr(r) == i
        for p, error, base in sorted(kw.produce_v3_results(r)):
            assert error == 0
            assert base == next_offset[p], f"request {i} overtaken on partition {p}"
            next_offset[p] = base + counts[i, p]
    got = ck.consume(broker.bootstrap, "span", list(range(partitions)), sum(map(len, sent.values())))
    for p in range(partitions):
        assert [v for _, _, v, _, _ in got[p]] == sent[p], f"partition {p} out of order"


def test_a_parked_fetch_does_not_hold_up_the_produce_after_it(make_broker):
    broker = make_broker(shards=1)
    ck.create_topic(broker.bootstrap, "poll", 1)
    s = connect(broker)
    # A long poll on the empty partition, then, on the same connection, a produce to it. Served
    # one at a time, the produce would wait for the poll's 30 s and the poll would come back
    # empty; pipelined, the produce appends at once and the poll returns its record.
    s.sendall(kw.request(1, 4, 1, kw.fetch_v4("poll", 0, 0, max_wait_ms=30_000)))
    s.sendall(kw.request(0, 3, 2, kw.produce_v3("poll", 0, kw.record_batch([b"late"]), acks=1)))
    fetched = kw.read_response(s)
    assert corr(fetched) == 1, "the fetch was sent first, so it is answered first"
    error, hw, size = kw.fetch_v4_partition(fetched)
    assert (error, hw) == (0, 1) and size > 0
    assert b"late" in kw.fetch_v4_batches(fetched)[0]
    produced = kw.read_response(s)
    assert corr(produced) == 2
    assert kw.produce_v3_error_code(produced) == (0, 0)


def test_librdkafka_with_linger_0_and_many_requests_in_flight(make_broker):
    """The pattern that used to cost seconds of latency: a latency-tuned producer (linger 0,
    acks=all) keeps many one-record requests in flight on one connection."""
    broker = make_broker(shards=2)
    ck.create_topic(broker.bootstrap, "lat0", 1)
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0,
                  "enable.idempotence": True})
    acked = []
    for i in range(2000):
        p.produce("lat0", value=b"%d" % i, partition=0,
                  on_delivery=lambda e, m: acked.append((e, m.offset())))
        p.poll(0)
    assert p.flush(60) == 0
    assert all(e is None for e, _ in acked)
    assert sorted(o for _, o in acked) == list(range(2000))
