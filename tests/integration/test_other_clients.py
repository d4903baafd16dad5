"""Round trips through kafka-python, kcat and kafkajs."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

import ck
from records import check_partition, expected_by_partition, record

CLIENTS = Path(__file__).resolve().parents[1] / "clients"


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_kafka_python_round_trip(broker, compression):
    topic = f"kp-{compression or 'none'}"
    count, partitions = 5000, 4
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    admin.close()
    # kafka-python 3 turns idempotence on by default, as Java does: InitProducerId and sequence
    # numbers are exercised here too.
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", compression_type=compression, linger_ms=5)
    futures = []
    for i in range(count):
        r = record(i, partitions)
        futures.append(producer.send(topic, key=r["key"], value=r["value"], partition=r["partition"],
                                     headers=r["headers"], timestamp_ms=r["timestamp"]))
    producer.flush(60)
    metas = [f.get(timeout=30) for f in futures]
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    got = {p: [] for p in range(partitions)}
    for n, m in enumerate(consumer):
        got[m.partition].append((m.offset, m.key, m.value, m.headers, m.timestamp))
        if n + 1 == count:
            break
    consumer.close()
    want = expected_by_partition(count, partitions)
    for p in range(partitions):
        check_partition(got[p], want[p], f"{topic}[{p}]")
    for i, meta in enumerate(metas):
        assert got[meta.partition][meta.offset][1] == f"key-{i}".encode()


def test_kcat_round_trip(broker):
    ck.create_topic(broker.bootstrap, "kc", 3)
    lines = [f"key{i}:value-{i}" for i in range(300)]
    subprocess.run(["kcat", "-b", broker.bootstrap, "-P", "-t", "kc", "-K:", "-X", "acks=all", "-p", "1"],
                   input="\n".join(lines) + "\n", text=True, check=True, timeout=60)
    out = subprocess.run(["kcat", "-b", broker.bootstrap, "-C", "-t", "kc", "-p", "1", "-e", "-f", "%o|%k|%s\n"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert out == [f"{i}|key{i}|value-{i}" for i in range(300)]
    listing = subprocess.run(["kcat", "-b", broker.bootstrap, "-L", "-t", "kc"], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    assert 'topic "kc" with 3 partitions' in listing
    for p in range(3):
        assert f"partition {p}, leader 0" in listing


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_kafkajs_round_trip(broker, compression):
    """kafkajs admin creates the topic and its producer writes with acks=all; kafkajs's own
    Fetch and record decoding reads everything back (through its Cluster and Broker, since its
    only consumer API needs consumer groups)."""
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC=f"js-{compression}", COUNT="3000",
               PARTITIONS="4", COMPRESSION=compression)
    proc = subprocess.run(["node", str(CLIENTS / "kafkajs_round_trip.js")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["produced"] == 3000
    assert result["consumed"] == 3000
    assert result["mismatches"] == [], result["mismatches"][:5]
