"""Transactions (KIP-98) with confluent-kafka: commit and abort over several partitions,
read_committed against read_uncommitted, an open transaction holding read_committed readers at
the last stable offset, zombie fencing, the transaction timeout, and a SIGKILL."""
import json
import os
import subprocess
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition, OFFSET_BEGINNING

import ck
import eos

CLIENTS = Path(__file__).resolve().parent.parent / "clients"
FAST_CHECKS = "[transactions]\ncheck_interval_ms = 100\n"


def txn_producer(broker, tid, **extra):
    conf = {"bootstrap.servers": broker.bootstrap, "transactional.id": tid, "linger.ms": 5}
    conf.update(extra)
    p = Producer(conf)
    p.init_transactions(60)
    return p


def send(p, topic, values, partitions):
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
    assert p.flush(30) == 0


def read_all(broker, topic, partitions, isolation, settle_s=3.0, timeout_s=60.0, expect=None):
    """Every value readable at `isolation` (read_committed / read_uncommitted): reads until
    `expect` values came (then `settle_s` more, so that extra ones would show), or until nothing
    new came for `settle_s`."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": False})
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + timeout_s
    last_new = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None:
                if m.error():
                    raise KafkaException(m.error())
                got.append(m.value())
                last_new = time.monotonic()
            waited = time.monotonic() - last_new
            if waited > settle_s and (expect is None or len(got) >= expect):
                break
    finally:
        c.close()
    return got


def test_commit_and_abort_over_partitions(make_broker):
    broker = make_broker()
    ck.create_topic(broker.bootstrap, "tx", 3)
    p = txn_producer(broker, "tx-a")
    committed1 = [b"c1-%d" % i for i in range(30)]
    aborted = [b"ab-%d" % i for i in range(30)]
    committed2 = [b"c2-%d" % i for i in range(30)]
    for values, commit in ((committed1, True), (aborted, False), (committed2, True)):
        p.begin_transaction()
        send(p, "tx", values, 3)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    rc = read_all(broker, "tx", 3, "read_committed", expect=60)
    assert sorted(rc) == sorted(committed1 + committed2)
    ru = read_all(broker, "tx", 3, "read_uncommitted", expect=90)
    assert sorted(ru) == sorted(committed1 + aborted + committed2)
    # Markers take offsets: 90 records and 3 markers in each of 3 partitions.
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "w"})
    ends = [c.get_watermark_offsets(TopicPartition("tx", i), timeout=10)[1] for i in range(3)]
    c.close()
    assert sum(ends) == 90 + 9


def test_an_open_transaction_holds_read_committed_readers(make_broker):
    broker = make_broker()
    ck.create_topic(broker.bootstrap, "open", 1)
    p = txn_producer(broker, "tx-open")
    p.begin_transaction()
    send(p, "open", [b"pending-%d" % i for i in range(5)], 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("open", value=b"after", partition=0)
    assert plain.flush(10) == 0
    assert read_all(broker, "open", 1, "read_committed", settle_s=2.0) == []
    assert len(read_all(broker, "open", 1, "read_uncommitted", expect=6)) == 6
    p.commit_transaction(30)
    got = read_all(broker, "open", 1, "read_committed", expect=6)
    assert got == [b"pending-%d" % i for i in range(5)] + [b"after"]


def test_a_second_instance_fences_the_first(make_broker):
    broker = make_broker()
    ck.create_topic(broker.bootstrap, "zombie", 2)
    old = txn_producer(broker, "tx-z")
    old.begin_transaction()
    send(old, "zombie", [b"zombie-%d" % i for i in range(10)], 2)
    new = txn_producer(broker, "tx-z")  # aborts the old instance's transaction first
    try:
        old.commit_transaction(30)
        raise AssertionError("the fenced producer's commit succeeded")
    except KafkaException as e:
        assert e.args[0].fatal() or "fenced" in str(e).lower(), e
    new.begin_transaction()
    send(new, "zombie", [b"new-%d" % i for i in range(10)], 2)
    new.commit_transaction(30)
    got = read_all(broker, "zombie", 2, "read_committed", expect=10)
    assert sorted(got) == sorted(b"new-%d" % i for i in range(10))


def test_an_abandoned_transaction_is_aborted_after_its_timeout(make_broker):
    broker = make_broker(config=FAST_CHECKS)
    ck.create_topic(broker.bootstrap, "abandoned", 1)
    p = txn_producer(broker, "tx-t", **{"transaction.timeout.ms": 2000})
    p.begin_transaction()
    send(p, "abandoned", [b"lost-%d" % i for i in range(5)], 1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("abandoned", value=b"later", partition=0)
    assert plain.flush(10) == 0
    # The producer never ends it; the broker aborts it and readers get past it.
    got = read_all(broker, "abandoned", 1, "read_committed", expect=1, timeout_s=30)
    assert got == [b"later"]
    del p


def test_transactions_survive_sigkill(make_broker):
    broker = make_broker()
    ck.create_topic(broker.bootstrap, "durable", 2)
    p = txn_producer(broker, "tx-d")
    p.begin_transaction()
    send(p, "durable", [b"kept-%d" % i for i in range(20)], 2)
    p.commit_transaction(30)
    p.begin_transaction()
    send(p, "durable", [b"dropped-%d" % i for i in range(20)], 2)
    p.abort_transaction(30)
    broker.kill()
    broker.start()
    got = read_all(broker, "durable", 2, "read_committed", expect=20)
    assert sorted(got) == sorted(b"kept-%d" % i for i in range(20))
    # The coordinator's state came back: the id's next instance is fenced in after it.
    again = txn_producer(broker, "tx-d")
    again.begin_transaction()
    send(again, "durable", [b"after-%d" % i for i in range(4)], 2)
    again.commit_transaction(30)
    got = read_all(broker, "durable", 2, "read_committed", expect=24)
    assert len(got) == 24


def test_kafkajs_transactions(broker):
    """kafkajs's transactional producer and its read_committed consumer."""
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC="js-tx")
    proc = subprocess.run(["node", str(CLIENTS / "kafkajs_transactions.js")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])["got"]
    assert got == sorted(f"committed-{i}" for i in range(20))
    assert sorted(read_all(broker, "js-tx", 3, "read_uncommitted", expect=40)) == sorted(
        [f"committed-{i}".encode() for i in range(20)] + [f"aborted-{i}".encode() for i in range(20)])


def test_kafka_python_transactions(broker):
    """kafka-python's transactional producer, and its read_committed consumer."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTopicPartition
    ck.create_topic(broker.bootstrap, "kp-tx", 2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="kp-txn")
    p.init_transactions()
    for prefix, commit in ((b"committed", True), (b"aborted", False)):
        p.begin_transaction()
        for i in range(10):
            p.send("kp-tx", value=prefix + b"-%d" % i, partition=i % 2)
        p.flush()
        if commit:
            p.commit_transaction()
        else:
            p.abort_transaction()
    p.close()
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                      enable_auto_commit=False, consumer_timeout_ms=3000)
    c.assign([KpTopicPartition("kp-tx", 0), KpTopicPartition("kp-tx", 1)])
    c.seek_to_beginning()
    got = sorted(m.value for m in c)
    c.close()
    assert got == sorted(b"committed-%d" % i for i in range(10))


def test_exactly_once_processing_survives_two_sigkills(make_broker):
    """A consume-transform-produce loop (tests/clients/eos_processor.py) commits its consumed
    offsets in each transaction; the broker is SIGKILLed twice mid-run and the processor starts
    itself again each time. The output, read with read_committed, holds each input once."""
    broker = make_broker()
    total = 600
    ck.create_topic(broker.bootstrap, "eos-in", 3)
    ck.create_topic(broker.bootstrap, "eos-out", 3)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    inputs = [b"in-%d" % i for i in range(total)]
    for i, v in enumerate(inputs):
        plain.produce("eos-in", value=v, partition=i % 3)
    assert plain.flush(30) == 0
    proc = eos.Processor(broker.bootstrap, "eos-in", "eos-out", "eos-group", "eos-proc", total)
    try:
        for share in (total // 3, 2 * total // 3):
            proc.wait_for_committed(share)
            broker.kill()
            broker.start()
        proc.finish()
    finally:
        proc.stop()
    restarts = proc.restarts()
    got = read_all(broker, "eos-out", 3, "read_committed", expect=total)
    assert len(got) == total and sorted(got) == sorted(b"out-" + v for v in inputs), (
        len(got), len(set(got)), restarts)


def committed_offset(broker, group, topic, isolation, timeout_s=10):
    """The group's committed offset of `topic`-0 as a consumer at `isolation` reads it
    (read_committed asks for stable offsets: KIP-447); None when the read timed out."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "isolation.level": isolation})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout_s)[0].offset
    except KafkaException:
        return None
    finally:
        c.close()


def test_offsets_sent_to_a_transaction_take_effect_with_its_commit(make_broker):
    """send_offsets_to_transaction: the offsets stay pending (unstable for read_committed
    readers, unseen by others) until the commit, an abort drops them, and pending offsets
    survive a SIGKILL until their transaction ends."""
    broker = make_broker()
    ck.create_topic(broker.bootstrap, "src", 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g-off"})
    meta = consumer.consumer_group_metadata()
    p = txn_producer(broker, "tx-off")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("src", 0, 7)], meta, 30)
    assert committed_offset(broker, "g-off", "src", "read_uncommitted") < 0
    assert committed_offset(broker, "g-off", "src", "read_committed", timeout_s=3) is None
    p.commit_transaction(30)
    assert committed_offset(broker, "g-off", "src", "read_committed") == 7
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("src", 0, 9)], meta, 30)
    p.abort_transaction(30)
    assert committed_offset(broker, "g-off", "src", "read_committed") == 7
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("src", 0, 11)], meta, 30)
    broker.kill()
    broker.start()
    # Replayed as pending; the producer's commit (retried across the restart) settles them.
    assert committed_offset(broker, "g-off", "src", "read_uncommitted") == 7
    p.commit_transaction(60)
    assert committed_offset(broker, "g-off", "src", "read_committed") == 11
    consumer.close()
