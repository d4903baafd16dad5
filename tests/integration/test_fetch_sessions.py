"""Incremental fetch sessions (KIP-227): kafka-python consumes through one, and the raw
protocol shows the session rules: only changed partitions come back, epochs must follow on,
forgotten partitions leave the session, and a closed or unknown session is refused."""
import socket
import time

import ck
import kafka_wire as kw
from metrics import metrics_config, total
from records import check_partition, expected_by_partition

FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH = 70, 71


def test_kafka_python_consumes_through_an_incremental_session(make_broker):
    from kafka import KafkaConsumer, TopicPartition
    config, metrics_addr = metrics_config()
    broker = make_broker(config=config)
    partitions, count = 8, 2000
    ck.create_topic(broker.bootstrap, "fs", partitions)
    ck.produce(broker.bootstrap, "fs", count, partitions)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=200)
    consumer.assign([TopicPartition("fs", p) for p in range(partitions)])
    got = {p: [] for p in range(partitions)}

    def poll_until(n, timeout_s=60):
        deadline = time.monotonic() + timeout_s
        while sum(map(len, got.values())) < n and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.key, m.value, m.headers, m.timestamp) for m in msgs]

    poll_until(count)
    want = expected_by_partition(count, partitions)
    for p in range(partitions):
        check_partition(got[p], want[p], f"fs[{p}]")
    # Idle polls are incremental; a record produced now still arrives through the session.
    assert total(metrics_addr, "sluice_fetch_sessions") >= 1
    before = total(metrics_addr, "sluice_incremental_fetches_total")
    assert not consumer.poll(timeout_ms=1000)
    assert total(metrics_addr, "sluice_incremental_fetches_total") > before
    ck.produce(broker.bootstrap, "fs", count + partitions, partitions)  # records 0.. again, one more per partition
    poll_until(2 * count + partitions)
    consumer.close()
    assert all(len(got[p]) == 2 * len(want[p]) + 1 for p in range(partitions))
    assert all([o for o, *_ in got[p]] == list(range(len(got[p]))) for p in range(partitions))


def fetch(sock, session_id, epoch, partitions=(), forgotten=(), max_wait_ms=0):
    sock.sendall(kw.request(1, 7, 1, kw.fetch_v7(session_id, epoch, partitions, forgotten, max_wait_ms)))
    return kw.fetch_v7_response(kw.read_response(sock))


def test_session_rules_on_the_wire(broker):
    ck.create_topic(broker.bootstrap, "sw", 3)
    ck.produce(broker.bootstrap, "sw", 30, 3)  # ten records per partition
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        # A full request opens a session and answers every partition.
        error, sid, parts = fetch(s, 0, 0, [("sw", p, 0) for p in range(3)])
        assert error == 0 and sid != 0
        assert {k: (e, hw) for k, (e, hw, _) in parts.items()} == {("sw", p): (0, 10) for p in range(3)}
        assert all(size > 0 for _, _, size in parts.values())
        # The client moves its offsets to the end: partitions with nothing new are left out.
        error, sid2, parts = fetch(s, sid, 1, [("sw", p, 10) for p in range(3)], max_wait_ms=100)
        assert (error, sid2, parts) == (0, sid, {})
        # A record on partition 1 only: only partition 1 comes back, without waiting out max_wait.
        ck.produce_values(broker.bootstrap, "sw", 1, [b"new"])
        error, _, parts = fetch(s, sid, 2, max_wait_ms=1000)
        assert error == 0 and list(parts) == [("sw", 1)]
        assert parts[("sw", 1)][:2] == (0, 11) and parts[("sw", 1)][2] > 0
        # Epochs must follow on; an unknown session is refused.
        assert fetch(s, sid, 2)[0] == INVALID_FETCH_SESSION_EPOCH
        assert fetch(s, sid + 1_000_000, 1)[0] == FETCH_SESSION_ID_NOT_FOUND
        # Catch partition 1 up and forget partition 0: new records on 0 no longer come back,
        # those on 2 do.
        error, _, parts = fetch(s, sid, 3, [("sw", 1, 11)], forgotten=[("sw", [0])])
        assert (error, parts) == (0, {})
        ck.produce_values(broker.bootstrap, "sw", 0, [b"unseen"])
        ck.produce_values(broker.bootstrap, "sw", 2, [b"seen"])
        error, _, parts = fetch(s, sid, 4, max_wait_ms=1000)
        assert error == 0 and list(parts) == [("sw", 2)] and parts[("sw", 2)][1] == 11
        # The final epoch closes the session (and answers as a sessionless full fetch).
        error, sid3, parts = fetch(s, sid, -1, [("sw", 0, 0)])
        assert (error, sid3) == (0, 0) and parts[("sw", 0)][1] == 11
        assert fetch(s, sid, 5)[0] == FETCH_SESSION_ID_NOT_FOUND
