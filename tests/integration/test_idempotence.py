"""Idempotent producers: no duplicates and no gaps across retries and broker restarts."""
import socket
import threading

from confluent_kafka import Producer

import ck
import kafka_wire as kw
from records import record
from waiting import wait_until

OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_RECORD = 87


def test_retries_across_two_sigkills_leave_no_duplicates_or_gaps(broker):
    partitions, count = 4, 50_000
    ck.create_topic(broker.bootstrap, "idem", partitions)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120_000, "retry.backoff.ms": 50})
    acked, failed = {}, []

    def on_delivery(err, msg, i):
        if err is None:
            acked[i] = (msg.partition(), msg.offset())
        else:
            failed.append((i, err))

    def load():
        for i in range(count):
            r = record(i, partitions)
            while True:
                try:
                    producer.produce("idem", key=r["key"], value=r["value"], partition=r["partition"],
                                     headers=r["headers"], timestamp=r["timestamp"],
                                     on_delivery=lambda e, m, i=i: on_delivery(e, m, i))
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(120)

    t = threading.Thread(target=load)
    t.start()
    for kill_at in (12_000, 30_000):
        wait_until(lambda: len(acked) >= kill_at, 60, f"{kill_at} acknowledgements", every_s=0.005)
        broker.kill()  # mid-load, with requests in flight that librdkafka will retry
        broker.start()
    t.join()
    assert not failed, failed[:5]
    assert len(acked) == count
    got = ck.consume_to_end(broker.bootstrap, "idem", range(partitions))
    for p in range(partitions):
        sent = [i for i in range(count) if i % partitions == p]
        stored = [int(dict(h)["idx"]) for _, _, _, h, _ in got[p]]
        # Exactly once and in send order: the partition is the send list itself, and every
        # acknowledged offset holds the record it was acknowledged for.
        assert stored == sent, f"partition {p}: {len(stored)} stored vs {len(sent)} sent"
    for i, (p, off) in acked.items():
        assert int(dict(got[p][off][3])["idx"]) == i


def connect(broker):
    return socket.create_connection(("127.0.0.1", broker.port), timeout=20)


def init_producer(s) -> tuple[int, int]:
    s.sendall(kw.request(22, 1, 100, kw.init_producer_id_v1()))
    error, pid, epoch = kw.init_producer_id_v1_response(kw.read_response(s))
    assert error == 0 and pid >= 0 and epoch == 0
    return pid, epoch


def produce(s, topic, batch, corr=1):
    s.sendall(kw.request(0, 3, corr, kw.produce_v3(topic, 0, batch)))
    return kw.produce_v3_error_code(kw.read_response(s))


def test_crafted_sequences_get_kafkas_error_codes(broker):
    ck.create_topic(broker.bootstrap, "seq", 1)
    s = connect(broker)
    pid, epoch = init_producer(s)
    pid2, _ = init_producer(s)
    assert pid2 != pid, "every InitProducerId gets a new id"
    b0 = kw.record_batch([b"a", b"b", b"c"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert produce(s, "seq", b0) == (0, 0)
    # The same batch again: its original offset, and nothing written.
    assert produce(s, "seq", b0) == (0, 0)
    b3 = kw.record_batch([b"d"], producer_id=pid, producer_epoch=epoch, base_sequence=3)
    assert produce(s, "seq", b3) == (0, 3)
    # A skipped sequence.
    b9 = kw.record_batch([b"x"], producer_id=pid, producer_epoch=epoch, base_sequence=9)
    assert produce(s, "seq", b9)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    # A bumped epoch starts again at 0; after it, the old epoch is stale.
    e1 = kw.record_batch([b"e"], producer_id=pid, producer_epoch=1, base_sequence=0)
    assert produce(s, "seq", e1) == (0, 4)
    old = kw.record_batch([b"f"], producer_id=pid, producer_epoch=0, base_sequence=4)
    assert produce(s, "seq", old)[0] == INVALID_PRODUCER_EPOCH
    # A producer the partition has no state for (expired, or its batches deleted by
    # retention) starts at the sequence it sends, as in Kafka since KIP-360; its next batch
    # follows on from there.
    stranger = kw.record_batch([b"g"], producer_id=987_654_321, producer_epoch=0, base_sequence=5)
    assert produce(s, "seq", stranger) == (0, 5)
    after = kw.record_batch([b"h"], producer_id=987_654_321, producer_epoch=0, base_sequence=7)
    assert produce(s, "seq", after)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
    s.close()
    got = ck.consume_to_end(broker.bootstrap, "seq", [0])
    assert [v for _, _, v, _, _ in got[0]] == [b"a", b"b", b"c", b"d", b"e", b"g"]


def test_client_markers_and_unverified_transactional_batches_are_refused(broker):
    """A control batch comes only from a transaction coordinator (Kafka: INVALID_RECORD), and a
    transactional batch only from a producer with a transactional id (Kafka:
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, for the whole request, markers included), whose
    coordinator added the partition to its transaction (KIP-890: INVALID_TXN_STATE otherwise,
    test_transaction_errors.py). Taking one would open a transaction here that nothing ends,
    holding back the last stable offset."""
    ck.create_topic(broker.bootstrap, "txn-guard", 1)
    s = connect(broker)
    pid, epoch = init_producer(s)
    marker = kw.record_batch([b"\x00\x00\x00\x00"], producer_id=pid, producer_epoch=epoch, base_sequence=-1,
                             keys=[b"\x00\x00\x00\x01"], attributes=0x30)
    assert produce(s, "txn-guard", marker)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    control = kw.record_batch([b"\x00\x00\x00\x00"], producer_id=pid, producer_epoch=epoch, base_sequence=-1,
                              keys=[b"\x00\x00\x00\x01"], attributes=0x20)
    assert produce(s, "txn-guard", control)[0] == INVALID_RECORD
    txn = kw.record_batch([b"t"], producer_id=pid, producer_epoch=epoch, base_sequence=0, attributes=0x10)
    assert produce(s, "txn-guard", txn)[0] == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # The producer's sequence is untouched: its first plain batch starts at 0.
    plain = kw.record_batch([b"p"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert produce(s, "txn-guard", plain) == (0, 0)
    s.close()
    got = ck.consume_to_end(broker.bootstrap, "txn-guard", [0])
    assert [v for _, _, v, _, _ in got[0]] == [b"p"]


def test_dedup_survives_sigkill_and_clean_restart(broker):
    ck.create_topic(broker.bootstrap, "dd", 1)
    s = connect(broker)
    pid, epoch = init_producer(s)
    b0 = kw.record_batch([b"1", b"2"], producer_id=pid, producer_epoch=epoch, base_sequence=0)
    assert produce(s, "dd", b0) == (0, 0)
    s.close()
    broker.kill()
    broker.start()
    s = connect(broker)
    assert produce(s, "dd", b0) == (0, 0), "recognised from the log after SIGKILL"
    b2 = kw.record_batch([b"3"], producer_id=pid, producer_epoch=epoch, base_sequence=2)
    assert produce(s, "dd", b2) == (0, 2)
    s.close()
    assert broker.stop() == 0
    broker.start()
    s = connect(broker)
    assert produce(s, "dd", b2) == (0, 2), "recognised from the snapshot after a clean restart"
    s.close()
    # Producer ids stay unique across restarts.
    s = connect(broker)
    pid_after, _ = init_producer(s)
    assert pid_after > pid
    s.close()
    got = ck.consume_to_end(broker.bootstrap, "dd", [0])
    assert [v for _, _, v, _, _ in got[0]] == [b"1", b"2", b"3"]
