"""Kafka Connect in distributed mode against Sluice (4.3.1, from tests/kafka/connect/libs: the
file connectors' 4.4.0 jar is not on the Maven mirror CI reaches, see its pom): a group of two workers (their config,
offset and status topics compacted, as Connect checks), the FileStreamSource connector with
exactly-once source support (`exactly.once.source.support=enabled`: a transactional producer
per task, zombie tasks fenced through the AdminClient) and the FileStreamSink connector reading
read_committed. A worker is restarted while lines flow: the sink file must end equal to the
source file, nothing lost or doubled."""
import json
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest

import kafka_tools
from broker import free_port
from waiting import wait_until

pytestmark = pytest.mark.skipif(not (kafka_tools.CONNECT_LIBS / ".installed").exists(),
                                reason="scripts/kafka-install has not run")

SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


class Worker:
    def __init__(self, root: Path, name: str, bootstrap: str):
        self.root, self.name, self.port = root, name, free_port()
        self.props = root / f"{name}.properties"
        self.props.write_text("\n".join([
            f"bootstrap.servers={bootstrap}", "group.id=connect-cluster",
            "key.converter=org.apache.kafka.connect.storage.StringConverter",
            "value.converter=org.apache.kafka.connect.storage.StringConverter",
            "config.storage.topic=connect-configs", "offset.storage.topic=connect-offsets",
            "status.storage.topic=connect-status", "config.storage.replication.factor=1",
            "offset.storage.replication.factor=1", "status.storage.replication.factor=1",
            f"listeners=http://127.0.0.1:{self.port}", "rest.advertised.host.name=127.0.0.1",
            f"rest.advertised.port={self.port}", "exactly.once.source.support=enabled",
            # Sinks read only what source transactions committed.
            "consumer.isolation.level=read_committed",
            # A worker that left gets its tasks back at once when it rejoins; others take them
            # after 5 s (Connect's default waits 5 minutes).
            "scheduled.rebalance.max.delay.ms=5000", "offset.flush.interval.ms=1000", ""]))
        self.proc = None
        self.starts = 0

    def start(self):
        self.starts += 1
        log = open(self.root / f"{self.name}-{self.starts}.log", "w")
        self.log_path = Path(log.name)
        self.proc = subprocess.Popen(
            kafka_tools.java_command("org.apache.kafka.connect.cli.ConnectDistributed", self.props, heap_mb=384,
                                     libs=kafka_tools.CONNECT_LIBS),
            stdout=log, stderr=subprocess.STDOUT)
        wait_until(self.serving, 120, f"worker {self.name}'s REST API", state=lambda: self.log_path.read_text()[-2000:])
        return self

    def serving(self) -> bool:
        try:
            return "version" in self.get("/")
        except OSError:
            return False

    def get(self, path):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as r:
            return json.loads(r.read())

    def put(self, path, body):
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=json.dumps(body).encode(),
                                         method="PUT", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.loads(r.read())

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def workers(make_broker, tmp_path):
    broker = make_broker()
    made = [Worker(tmp_path, n, broker.bootstrap) for n in ("a", "b")]
    try:
        yield broker, made
    finally:
        for w in made:
            if w.proc and w.proc.poll() is None:
                w.proc.kill()


def running(worker, name):
    try:
        s = worker.get(f"/connectors/{name}/status")
    except OSError:
        return False
    return s["connector"]["state"] == "RUNNING" and len(s["tasks"]) == 1 and s["tasks"][0]["state"] == "RUNNING"


def test_file_connectors_exactly_once_through_a_worker_restart(workers, tmp_path):
    broker, (a, b) = workers
    a.start()
    b.start()
    source, sink = tmp_path / "source.txt", tmp_path / "sink.txt"
    source.write_text("")
    a.put("/connectors/lines-in/config", {"connector.class": SOURCE, "tasks.max": "1", "file": str(source),
                                          "topic": "connect-lines", "exactly.once.support": "required",
                                          "transaction.boundary": "poll"})
    a.put("/connectors/lines-out/config", {"connector.class": SINK, "tasks.max": "1", "file": str(sink),
                                           "topics": "connect-lines"})
    for name in ("lines-in", "lines-out"):
        wait_until(lambda: running(b, name), 120, f"{name} running",
                   state=lambda: (a.log_path.read_text()[-3000:], b.log_path.read_text()[-3000:]))

    def append(first, count):
        with source.open("a") as f:
            for i in range(first, first + count):
                f.write(f"line {i:05d} {'x' * (i % 50)}\n")

    def copied():
        return sink.exists() and sink.read_text() == source.read_text()

    append(0, 500)
    wait_until(copied, 60, "the first 500 lines copied")
    # A worker restarts while more lines are written: its tasks stop, move or come back.
    a.stop()
    append(500, 300)
    a.start()
    append(800, 200)
    wait_until(lambda: running(a, "lines-in") and running(a, "lines-out"), 120, "both connectors running again")
    wait_until(copied, 90, "all 1000 lines copied exactly",
               state=lambda: (len(sink.read_text().splitlines()), len(source.read_text().splitlines())))
    assert len(sink.read_text().splitlines()) == 1000

    # Connect made its topics compacted (it checks), and the source's offsets went through
    # transactions (a transactional id per task, Connect's naming).
    for topic in ("connect-configs", "connect-offsets", "connect-status"):
        out = kafka_tools.run("kafka-configs", "--bootstrap-server", broker.bootstrap, "--describe",
                              "--entity-type", "topics", "--entity-name", topic).stdout
        assert "cleanup.policy=compact" in out, (topic, out)
    listed = kafka_tools.run("kafka-transactions", "--bootstrap-server", broker.bootstrap, "list").stdout
    assert "connect-cluster-lines-in-0" in listed, listed
