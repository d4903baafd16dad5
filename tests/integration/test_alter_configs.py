"""Changing a topic's configs after creation, with real clients: IncrementalAlterConfigs and
AlterConfigs from confluent-kafka's AdminClient, and kafkajs. The new values show in
DescribeConfigs, survive SIGKILL, and take effect on open partitions."""
import json
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

import ck

CLIENTS = Path(__file__).resolve().parents[1] / "clients"
TOPIC = ConfigResource.Type.TOPIC


def describe(admin, topic):
    res = ConfigResource(TOPIC, topic)
    return admin.describe_configs([res])[res].result(timeout=10)


def incremental(admin, topic, *entries, validate_only=False):
    res = ConfigResource(TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, op, value in entries])
    return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(timeout=10)


def error_of(call):
    with pytest.raises(KafkaException) as e:
        call()
    return e.value.args[0].code()


def test_incremental_alter_configs(broker):
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "alt", 2, {"retention.ms": "12345"})
    incremental(admin, "alt",
                ("retention.ms", AlterConfigOpType.SET, "600000"),
                ("segment.bytes", AlterConfigOpType.SET, "16384"),
                ("cleanup.policy", AlterConfigOpType.APPEND, "compact"))
    c = describe(admin, "alt")
    assert (c["retention.ms"].value, c["segment.bytes"].value, c["cleanup.policy"].value) == \
        ("600000", "16384", "delete,compact")
    # The open partitions roll at the new segment size.
    ck.produce(broker.bootstrap, "alt", 2000, 2, extra={"batch.size": 4096})
    segments = sorted((broker.data_dir / "alt-0").glob("*.log"))
    assert len(segments) > 5 and all(s.stat().st_size <= 16384 for s in segments)
    # DELETE goes back to the default; SUBTRACT takes an item out of a list.
    incremental(admin, "alt",
                ("retention.ms", AlterConfigOpType.DELETE, None),
                ("cleanup.policy", AlterConfigOpType.SUBTRACT, "compact"))
    c = describe(admin, "alt")
    assert c["retention.ms"].is_default and c["retention.ms"].value == str(7 * 24 * 3600 * 1000)
    assert c["cleanup.policy"].value == "delete"
    # validate_only changes nothing.
    incremental(admin, "alt", ("retention.ms", AlterConfigOpType.SET, "1"), validate_only=True)
    assert describe(admin, "alt")["retention.ms"].is_default
    # Errors, as Kafka gives them.
    assert error_of(lambda: incremental(admin, "alt", ("retention.ms", AlterConfigOpType.SET, "soon"))) == \
        KafkaError.INVALID_CONFIG
    assert error_of(lambda: incremental(admin, "alt", ("no.such.key", AlterConfigOpType.SET, "1"))) == \
        KafkaError.INVALID_CONFIG
    assert error_of(lambda: incremental(admin, "alt", ("retention.ms", AlterConfigOpType.APPEND, "1"))) == \
        KafkaError.INVALID_CONFIG
    assert error_of(lambda: incremental(admin, "nope", ("retention.ms", AlterConfigOpType.SET, "1"))) == \
        KafkaError.UNKNOWN_TOPIC_OR_PART
    # Static broker settings come from the config file (dynamic ones: test_conformance.py).
    res = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)])
    assert error_of(lambda: admin.incremental_alter_configs([res])[res].result(timeout=10)) == \
        KafkaError.INVALID_REQUEST
    # The change is in the catalog: it survives SIGKILL.
    broker.kill()
    broker.start()
    c = describe(admin, "alt")
    assert (c["segment.bytes"].value, c["cleanup.policy"].value) == ("16384", "delete")


def test_alter_configs_replaces_all_overrides(broker):
    admin = ck.admin(broker.bootstrap)
    ck.create_topic(broker.bootstrap, "rep", 1, {"retention.ms": "12345", "segment.ms": "60000"})
    res = ConfigResource(TOPIC, "rep", set_config={"max.message.bytes": "2000"})
    admin.alter_configs([res])[res].result(timeout=10)
    c = describe(admin, "rep")
    assert c["retention.ms"].is_default and c["segment.ms"].is_default
    assert c["max.message.bytes"].value == "2000"
    # The new limit applies at once.
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "retries": 0})
    p.produce("rep", value=b"x" * 3000, on_delivery=lambda e, m: errors.append(e))
    p.flush(10)
    assert errors and errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE


def test_kafkajs_alter_configs(broker):
    ck.create_topic(broker.bootstrap, "altjs", 1)
    env = dict(os.environ, BOOTSTRAP=broker.bootstrap, TOPIC="altjs")
    p = subprocess.run(["node", str(CLIENTS / "kafkajs_alter_configs.js")], env=env, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"retention.ms": "3600000"}
