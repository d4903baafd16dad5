"""confluent-kafka (librdkafka) helpers."""
import subprocess
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker import BINARY
from records import record


def sluice_cli(conf: dict, *args, timeout_s=60) -> subprocess.CompletedProcess:
    """Runs the operator command `sluice ARGS` against the brokers of librdkafka config `conf`,
    its other settings passed as `-X KEY=VALUE` (as for a secured cluster)."""
    settings = [a for k, v in conf.items() if k != "bootstrap.servers" for a in ("-X", f"{k}={v}")]
    return subprocess.run([str(BINARY), *args, "--brokers", conf["bootstrap.servers"], *settings],
                          capture_output=True, text=True, timeout=timeout_s)


def admin(bootstrap: str) -> AdminClient:
    """An admin client past its bootstrap. librdkafka retires its bootstrap connection once a
    Metadata answer names the brokers (debug=broker: "Decommissioning this broker"), failing a
    request in flight on it with _DESTROY_BROKER; requests sent to any broker (AlterConfigs,
    DescribeConfigs) can go there. So the client first waits for one such answer (if the
    broker is up; if not, the caller's own request reports it)."""
    client = AdminClient({"bootstrap.servers": bootstrap})
    try:
        client.list_topics(timeout=5)
    except KafkaException:
        pass
    return client


def create_topic(bootstrap: str, name: str, partitions: int, config=None, replicas: int = 1):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replicas,
                                            config=config or {})])
    futures[name].result(timeout=30)


def read_everything(bootstrap: str, topic: str, partitions: int, isolation="read_committed") -> list[tuple]:
    """Every record of `topic` from offset 0 to each partition's end, sorted: (partition,
    offset, key, value, headers), bytes as stored. Fails if a partition stays silent for 5 s
    before its end."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-everything", "isolation.level": isolation,
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got, ended = [], set()
        while len(ended) < partitions:
            m = c.poll(5)
            assert m is not None, f"{topic}: no record or end of partition in 5 s (read {len(got)})"
            if m.error():
                assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                ended.add(m.partition())
                continue
            got.append((m.partition(), m.offset(), m.key(), m.value(), m.headers()))
        return sorted(got)
    finally:
        c.close()


def produce(bootstrap: str, topic: str, count: int, partitions: int, compression="none", extra=None):
    """Produces records 0..count with acks=all; returns {i: (partition, offset)} of acknowledged ones."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "compression.type": compression, "linger.ms": 5}
    conf.update(extra or {})
    producer = Producer(conf)
    acked, errors = {}, []

    def on_delivery(err, msg, i):
        if err is not None:
            errors.append((i, err))
        else:
            acked[i] = (msg.partition(), msg.offset())

    for i in range(count):
        r = record(i, partitions)
        while True:
            try:
                producer.produce(topic, key=r["key"], value=r["value"], partition=r["partition"], headers=r["headers"],
                                 timestamp=r["timestamp"], on_delivery=lambda e, m, i=i: on_delivery(e, m, i))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records not delivered"
    assert not errors, f"delivery errors: {errors[:5]}"
    return acked


def produce_values(bootstrap: str, topic: str, partition: int, values, extra=None):
    """Produces plain values to one partition with acks=all and the current time as timestamp;
    returns their offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **(extra or {})})
    offsets = {}
    for i, v in enumerate(values):
        producer.produce(topic, value=v, partition=partition,
                         on_delivery=lambda e, m, i=i: offsets.__setitem__(i, m.offset()))
    assert producer.flush(30) == 0
    assert len(offsets) == len(values)
    return [offsets[i] for i in range(len(values))]


def consume(bootstrap: str, topic: str, partitions, expected_total: int, timeout_s=60.0, extra=None):
    """Reads by assignment from offset 0; returns {partition: [(offset, key, value, headers, ts)]}."""
    conf = {"bootstrap.servers": bootstrap, "group.id": "assign-only", "enable.auto.commit": False,
            "enable.partition.eof": False}
    conf.update(extra or {})
    consumer = Consumer(conf)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got = {p: [] for p in partitions}
    n = 0
    deadline = time.monotonic() + timeout_s
    try:
        while n < expected_total and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.headers() or [], msg.timestamp()[1]))
            n += 1
    finally:
        consumer.close()
    return got


def consume_to_end(bootstrap: str, topic: str, partitions, timeout_s=60.0):
    """Reads every partition from offset 0 up to its high watermark at call time."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "assign-only", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
    finally:
        consumer.close()
    got = consume(bootstrap, topic, [p for p in partitions if ends[p] > 0], sum(ends.values()), timeout_s)
    for p in partitions:
        got.setdefault(p, [])
        assert len(got[p]) == ends[p], f"{topic}[{p}]: read {len(got[p])} of {ends[p]}"
    return got
