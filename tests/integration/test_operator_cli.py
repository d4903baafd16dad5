"""The operator's command line (issue 20): `sluice topic|produce|consume|group|cluster`
against real brokers, their JSON parsed, their refusals and errors checked."""
import concurrent.futures
import json
import os
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer

from broker import BINARY, free_port
from cluster import Cluster
from metrics import metrics_config
from waiting import wait_until


def sluice(broker, *args, stdin=None, timeout=30):
    """Runs `sluice ARGS --brokers BROKER`; returns the completed process."""
    brokers = broker if isinstance(broker, str) else broker.bootstrap
    return subprocess.run([str(BINARY), *args, "--brokers", brokers], input=stdin,
                          capture_output=True, text=True, timeout=timeout)


def ok(broker, *args, stdin=None):
    p = sluice(broker, *args, stdin=stdin)
    assert p.returncode == 0, f"sluice {' '.join(args)}: rc {p.returncode}\n{p.stderr}"
    return p.stdout


def as_json(broker, *args, stdin=None):
    return json.loads(ok(broker, *args, "--format", "json", stdin=stdin))


def test_topic_life_cycle(broker):
    out = ok(broker, "topic", "create", "orders", "-p", "3", "-c", "retention.ms=3600000")
    assert "created topic orders" in out
    listed = {t["name"]: t for t in as_json(broker, "topic", "list")}
    assert listed["orders"] == {"name": "orders", "partitions": 3, "replicas": 1}

    d = as_json(broker, "topic", "describe", "orders")
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 0 and p["replicas"] == [0] and p["isr"] == [0] for p in d["partitions"])
    assert all(p["log_start_offset"] == 0 and p["high_watermark"] == 0 for p in d["partitions"])
    assert d["configs"] == {"retention.ms": "3600000"}
    table = ok(broker, "topic", "describe", "orders")
    assert "HIGH-WATERMARK" in table and "retention.ms" in table

    ok(broker, "topic", "alter-config", "orders", "--set", "cleanup.policy=compact", "--delete", "retention.ms")
    assert as_json(broker, "topic", "describe", "orders")["configs"] == {"cleanup.policy": "compact"}
    refused = sluice(broker, "topic", "alter-config", "orders", "--delete", "retention.ms")
    assert refused.returncode != 0 and "no override of retention.ms" in refused.stderr
    # IncrementalAlterConfigs: a refused value is named with the broker's message, and the
    # other overrides stay.
    bad = sluice(broker, "topic", "alter-config", "orders", "--set", "retention.ms=soon")
    assert bad.returncode != 0 and "InvalidConfig" in bad.stderr and "soon" in bad.stderr, bad.stderr
    ok(broker, "topic", "alter-config", "orders", "--set", "retention.bytes=1048576")
    assert as_json(broker, "topic", "describe", "orders")["configs"] == {"cleanup.policy": "compact",
                                                                         "retention.bytes": "1048576"}

    ok(broker, "topic", "add-partitions", "orders", "-n", "5")
    assert len(as_json(broker, "topic", "describe", "orders")["partitions"]) == 5
    # A refusal says what the broker said, not only its code.
    fewer = sluice(broker, "topic", "add-partitions", "orders", "-n", "2")
    assert fewer.returncode != 0 and "InvalidPartitions" in fewer.stderr, fewer.stderr
    assert "topic orders already has 5 partitions" in fewer.stderr, fewer.stderr
    wide = sluice(broker, "topic", "create", "wide", "-r", "3")
    assert wide.returncode != 0 and "InvalidReplicationFactor" in wide.stderr, wide.stderr
    assert "this broker runs alone and stores one replica" in wide.stderr, wide.stderr

    again = sluice(broker, "topic", "create", "orders")
    assert again.returncode != 0
    assert len(again.stderr.strip().splitlines()) == 1 and "already exists" in again.stderr.lower(), again.stderr

    ok(broker, "topic", "delete", "orders")
    assert "orders" not in {t["name"] for t in as_json(broker, "topic", "list")}
    missing = sluice(broker, "topic", "describe", "orders")
    assert missing.returncode != 0 and "unknown topic" in missing.stderr.lower(), missing.stderr


def test_produce_from_stdin_and_consume_back(broker):
    ok(broker, "topic", "create", "lines", "-p", "2")
    lines = [f"key-{i}:value {i} ünïcode" for i in range(200)]
    out = as_json(broker, "produce", "lines", "-p", "1", "--key-separator", ":", "-H", "origin=cli",
                  stdin="\n".join(lines) + "\n")
    assert out == {"topic": "lines", "sent": 200, "acknowledged": 200, "failed": 0}

    got = [json.loads(line) for line in
           ok(broker, "consume", "lines", "-p", "1", "-n", "200", "--from", "earliest", "--format", "json").splitlines()]
    assert [r["offset"] for r in got] == list(range(200))
    assert [f"{r['key']}:{r['value']}" for r in got] == lines
    assert all(r["partition"] == 1 and r["headers"] == [{"key": "origin", "value": "cli"}] for r in got)
    assert all(r["timestamp"] > 0 for r in got)

    # Table format: the values, one per line; --from an offset starts there.
    values = ok(broker, "consume", "lines", "-p", "1", "-n", "3", "--from", "197").splitlines()
    assert values == ["value 197 ünïcode", "value 198 ünïcode", "value 199 ünïcode"]
    # A time after every record starts at the end: nothing to read from there.
    later = ok(broker, "consume", "lines", "-p", "1", "--from", "@99999999999999", "-n", "0")
    assert later == ""
    bad = sluice(broker, "consume", "lines", "--from", "yesterday")
    assert bad.returncode != 0 and "yesterday" in bad.stderr
    assert sluice(broker, "consume", "lines", "-p", "7", "-n", "1").returncode != 0


def lags(broker, group):
    d = as_json(broker, "group", "describe", group)
    return d, {(o["topic"], o["partition"]): o for o in d["offsets"]}


def test_group_lag_seek_and_delete(broker):
    ok(broker, "topic", "create", "work", "-p", "2")
    for p in (0, 1):
        ok(broker, "produce", "work", "-p", str(p), stdin="".join(f"r{p}-{i}\n" for i in range(10 + p)))
    got = ok(broker, "consume", "work", "--group", "billing", "-n", "21").splitlines()
    assert sorted(got) == sorted([f"r0-{i}" for i in range(10)] + [f"r1-{i}" for i in range(11)])

    d, by_partition = lags(broker, "billing")
    assert d["state"] in ("Empty", "Dead") and d["members"] == []
    assert {k: (o["committed"], o["end"], o["lag"]) for k, o in by_partition.items()} == \
        {("work", 0): (10, 10, 0), ("work", 1): (11, 11, 0)}
    assert "billing" in {g["group"] for g in as_json(broker, "group", "list")}

    ok(broker, "group", "seek", "billing", "--topic", "work", "--to", "earliest")
    _, by_partition = lags(broker, "billing")
    assert {k: o["lag"] for k, o in by_partition.items()} == {("work", 0): 10, ("work", 1): 11}
    ok(broker, "group", "seek", "billing", "--topic", "work", "--to", "4")
    _, by_partition = lags(broker, "billing")
    assert {k: o["committed"] for k, o in by_partition.items()} == {("work", 0): 4, ("work", 1): 4}
    # The group consumes again from where seek put it.
    again = ok(broker, "consume", "work", "--group", "billing", "-n", "13").splitlines()
    assert sorted(again) == sorted([f"r0-{i}" for i in range(4, 10)] + [f"r1-{i}" for i in range(4, 11)])

    ok(broker, "group", "delete", "billing")
    assert "billing" not in {g["group"] for g in as_json(broker, "group", "list")}


def test_seek_is_refused_while_the_group_has_members(broker):
    ok(broker, "topic", "create", "busy", "-p", "1")
    member = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "live", "session.timeout.ms": 10000})
    try:
        member.subscribe(["busy"])
        deadline = time.monotonic() + 30
        while not member.assignment():
            assert time.monotonic() < deadline, "never assigned"
            member.poll(0.2)
        d = as_json(broker, "group", "describe", "live")
        assert d["state"] == "Stable" and len(d["members"]) == 1
        assert d["members"][0]["assignment"] == [{"topic": "busy", "partitions": [0]}]
        refused = sluice(broker, "group", "seek", "live", "--topic", "busy", "--to", "earliest")
        assert refused.returncode != 0
        assert "empty group" in refused.stderr and "1 members" in refused.stderr, refused.stderr
    finally:
        member.close()


def test_an_unreachable_broker_is_an_error_within_seconds():
    nobody = f"127.0.0.1:{free_port()}"
    # The default request timeout for two commands, a shorter one for the others. They run
    # side by side: each waits out its own timeout.
    commands = [(("topic", "list"), None), (("produce", "x"), "a\n"),
                (("topic", "create", "x", "--timeout-s", "3"), None),
                (("consume", "x", "-n", "1", "--timeout-s", "3"), None),
                (("group", "describe", "g", "--timeout-s", "3"), None),
                (("cluster", "health", "--timeout-s", "3"), None)]

    def timed(command):
        args, stdin = command
        started = time.monotonic()
        p = sluice(nobody, *args, stdin=stdin, timeout=60)
        return args, p, time.monotonic() - started
    with concurrent.futures.ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(timed, commands))
    for args, p, took in results:
        assert p.returncode not in (0, 3), (args, p.stdout)
        assert took < 15, (args, took)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("sluice: "), (args, p.stderr)
        assert "refused" in lines[0].lower() or "down" in lines[0].lower(), (args, lines[0])


def test_cluster_info_and_health_of_one_broker(broker):
    info = as_json(broker, "cluster", "info")
    assert [b["id"] for b in info["brokers"]] == [0]
    assert info["brokers"][0]["address"] == broker.bootstrap
    assert info["controller"] == 0 and info["cluster_id"]
    assert info["versions"]["librdkafka"]
    p = sluice(broker, "cluster", "health", "--format", "json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["healthy"] is True
    # Without --brokers: $SLUICE_BROKERS.
    env = dict(os.environ, SLUICE_BROKERS=broker.bootstrap)
    p = subprocess.run([str(BINARY), "cluster", "info", "--format", "json"], env=env,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["brokers"][0]["address"] == broker.bootstrap


@pytest.mark.timeout(120)
def test_health_names_a_lost_broker_and_its_partitions(tmp_path):
    c = Cluster(tmp_path, voters=1, brokers=1).start()
    try:
        c.wait_for_brokers({1, 2})
        c.create_topic(1, "both", 2, 2)
        wait_until(lambda: sluice(c.nodes[1], "cluster", "health").returncode == 0, 30, "a fresh cluster healthy",
                   every_s=0.5)
        c.nodes[2].kill()
        seen = []

        def reported():
            p = sluice(c.nodes[1], "cluster", "health", "--format", "json")
            assert p.returncode in (0, 3), p.stderr
            seen.append(json.loads(p.stdout))
            h = seen[-1]
            # Each of the topic's partitions has a replica on node 2: it is reported under-
            # replicated once node 2 is fenced, or leaderless when node 2 was its last in-sync
            # replica (a loaded machine may fence node 1 for a moment too). `__consumer_offsets`
            # was created once one broker was live, min(3, voters): it may be reported too.
            named = {(x["topic"], x["partition"]) for x in h["under_replicated"] + h["leaderless"]}
            return p.returncode == 3 and h["offline_brokers"] == [2] and {("both", 0), ("both", 1)} <= named
        wait_until(reported, 60, "node 2 and its partitions reported", state=lambda: seen[-1], every_s=0.5)
        h = seen[-1]
        assert h["healthy"] is False and h["unreachable_brokers"] == []
        table = sluice(c.nodes[1], "cluster", "health").stdout
        assert "healthy: no" in table and "offline brokers: 2" in table
    finally:
        c.stop()


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_healthz_and_readyz(make_broker, tmp_path):
    config, addr = metrics_config()
    make_broker(config=config)
    assert get(f"http://{addr}/healthz")[0] == 200
    assert get(f"http://{addr}/readyz") == (200, "ready\n")
    # A node of a cluster whose other voters never come: it serves, but is not registered.
    config, addr = metrics_config()
    lonely = Cluster(tmp_path / "c", voters=3)
    node = lonely.nodes[1]
    node.config = config + node.config
    node.start()
    try:
        assert get(f"http://{addr}/healthz")[0] == 200
        status, body = get(f"http://{addr}/readyz")
        assert status == 503 and "not registered" in body, body
    finally:
        node.kill()


def test_help_has_examples_and_completions_are_generated():
    for cmd in (["topic", "create"], ["produce"], ["consume"], ["group", "seek"], ["cluster", "health"],
                ["user", "set"], ["user", "delete"]):
        p = subprocess.run([str(BINARY), *cmd, "--help"], capture_output=True, text=True, timeout=10)
        assert p.returncode == 0 and "sluice " in p.stdout and "Example" in p.stdout, (cmd, p.stdout)
    p = subprocess.run([str(BINARY), "completions", "bash"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "_sluice" in p.stdout


def test_client_settings_pass_through_to_librdkafka(broker):
    """-X reaches every client: a custom client id works, a bad key and a TLS client against a
    plaintext port are refused with librdkafka's reason."""
    assert "PARTITIONS" in ok(broker, "topic", "list", "-X", "client.id=ops-script")
    bad = sluice(broker, "topic", "list", "-X", "no.such.setting=1")
    assert bad.returncode != 0 and "no.such.setting" in bad.stderr, bad.stderr
    tls = sluice(broker, "topic", "list", "-X", "security.protocol=ssl", "--timeout-s", "3")
    assert tls.returncode != 0 and len(tls.stderr.strip().splitlines()) == 1, tls.stderr
    malformed = sluice(broker, "topic", "list", "-X", "novalue")
    assert malformed.returncode == 2 and "KEY=VALUE" in malformed.stderr


def test_produce_takes_bytes_and_consume_ends_quietly_when_its_reader_goes(broker):
    import ck
    ok(broker, "topic", "create", "raw", "-p", "1")
    values = [bytes([0xff, 0xfe, i]) + b"\x00\x01" for i in range(5)]
    p = subprocess.run([str(BINARY), "produce", "raw", "--brokers", broker.bootstrap, "--key-separator", "\t"],
                       input=b"".join(b"k%d\t" % i + v + b"\n" for i, v in enumerate(values)),
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr
    got = ck.consume_to_end(broker.bootstrap, "raw", [0])[0]
    assert [(k, v) for _, k, v, _, _ in got] == [(b"k%d" % i, v) for i, v in enumerate(values)]
    # A line over the bound is refused, not buffered.
    p = subprocess.run([str(BINARY), "produce", "raw", "--brokers", broker.bootstrap],
                       input=b"x" * (2 << 20), capture_output=True, timeout=30)
    assert p.returncode != 0 and b"over" in p.stderr
    # `| head -c 1`: the reader leaves after one byte; consume stops, without an error, at its
    # next write (more records than a pipe's buffer holds, so there is one).
    ok(broker, "topic", "create", "many", "-p", "1")
    ok(broker, "produce", "many", stdin="".join(f"record {i}\n" for i in range(20_000)))
    pipe = subprocess.run(f"'{BINARY}' consume many --brokers {broker.bootstrap} --from earliest | head -c 1",
                          shell=True, capture_output=True, timeout=30, executable="/bin/bash")
    assert pipe.returncode == 0 and b"panicked" not in pipe.stderr and pipe.stderr == b"", pipe.stderr
