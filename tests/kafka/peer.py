"""Apache Kafka 4.4 as a peer for tests and benchmarks: one KRaft node in combined mode
(broker and controller), or three, each with its own ports and data dir, formatted with Kafka's
storage tool. The caller stops it (`stop()`, or `with KafkaCluster(...) as k:`); its data dirs
and logs live under the root the caller gave, which the caller removes.

Kafka itself is installed by scripts/kafka-install (Maven Central only) into tests/kafka/libs.

    with KafkaCluster(root, nodes=1, configs={"log.flush.interval.messages": 1}) as kafka:
        produce_to(kafka.bootstrap())
"""
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIBS = HERE / "libs"
LOG4J = HERE / "log4j2.properties"
# Kafka's own start script's JVM flags (kafka-run-class.sh, kafka-server-start.sh), with a
# heap the caller chooses: tests use a small one, benchmarks Kafka's default of 1 GiB.
JVM_FLAGS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
             "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
START_TIMEOUT_S = 90


class NotInstalled(Exception):
    pass


def installed() -> bool:
    return (LIBS / ".installed").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def java(main: str, *args, heap_mb: int = 256, **kwargs) -> subprocess.CompletedProcess:
    """Runs one of Kafka's main classes (a tool) to completion."""
    return subprocess.run(["java", f"-Xmx{heap_mb}m", f"-Dlog4j2.configurationFile={LOG4J}",
                           "-cp", f"{LIBS}/*", main, *args], check=True, capture_output=True, text=True,
                          **kwargs)


class NodeProcess:
    """A broker node's process, as tests and benchmarks signal it (Kafka's here, Sluice's in
    perf/sluice_cluster.py)."""
    proc: subprocess.Popen | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int):
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self):
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()

    def stop(self, timeout_s: float = 30):
        """SIGTERM: a controlled shutdown (leaderships move first); SIGKILL past timeout_s."""
        self.signal(signal.SIGTERM)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()


class KafkaNode(NodeProcess):
    def __init__(self, root: Path, node_id: int, port: int, controller_port: int, sasl_port: int | None = None):
        self.node_id = node_id
        self.port = port
        self.controller_port = controller_port
        # A SASL_PLAINTEXT listener for clients, beside the PLAINTEXT one the node's own
        # requests and the helper's readiness checks use.
        self.sasl_port = sasl_port
        self.dir = root / f"kafka-{node_id}"
        self.data_dir = self.dir / "data"
        self.properties = self.dir / "server.properties"
        self.log_path = self.dir / "kafka.log"
        self.proc: subprocess.Popen | None = None

    def write_properties(self, voters: str, configs: dict):
        sasl = f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}" if self.sasl_port else ""
        props = {
            "process.roles": "broker,controller",
            "node.id": self.node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}{sasl}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}{sasl}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "log.dirs": self.data_dir,
            **configs,
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def start(self, heap_mb: int, jvm_args=(), command_prefix=()):
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*command_prefix, "java", f"-Xmx{heap_mb}m", f"-Xms{heap_mb}m", *JVM_FLAGS, *jvm_args,
             f"-Dlog4j2.configurationFile={LOG4J}", f"-Dkafka.logs.dir={self.dir}",
             "-cp", f"{LIBS}/*", "kafka.Kafka", str(self.properties)],
            stdout=self.log_file, stderr=subprocess.STDOUT, start_new_session=True)

    def signal(self, sig: int):
        # The JVM's whole process group (the node runs in a session of its own).
        if self.alive():
            os.killpg(self.proc.pid, sig)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class KafkaCluster:
    """`nodes` KRaft nodes in combined mode, every one a voter; `configs` go into every node's
    server.properties over the defaults below (Kafka's, except what a small test cluster needs).
    With `sasl`, each node also has a SASL_PLAINTEXT listener (its mechanisms and JAAS
    settings are the caller's `configs`). `command_prefix` goes before each node's `java`
    (a benchmark's `taskset -c CPUS`)."""

    def __init__(self, root: Path, nodes: int = 1, configs: dict | None = None, heap_mb: int = 512,
                 free_port=_free_port, jvm_args=(), sasl: bool = False, command_prefix=()):
        if not installed():
            raise NotInstalled(f"Kafka is not installed in {LIBS}: run scripts/kafka-install")
        self.root = Path(root)
        self.heap_mb = heap_mb
        self.jvm_args = list(jvm_args)
        self.command_prefix = list(command_prefix)
        self.nodes = [KafkaNode(self.root, i + 1, free_port(), free_port(), free_port() if sasl else None)
                      for i in range(nodes)]
        replicas = min(3, nodes)
        self.configs = {
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min(2, replicas),
            "default.replication.factor": 1,
            "group.initial.rebalance.delay.ms": 0,
            **(configs or {}),
        }

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> "KafkaCluster":
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        cluster_id = random_cluster_id()
        for n in self.nodes:
            n.write_properties(voters, self.configs)
            java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(n.properties))
        for n in self.nodes:
            n.start(self.heap_mb, self.jvm_args, self.command_prefix)
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S):
        wait_listed(self.nodes, timeout_s, lambda n: n.log()[-4000:])

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.alive()]

    def stop(self):
        for n in self.nodes:
            n.signal(signal.SIGTERM)
        for n in self.nodes:
            n.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def random_cluster_id() -> str:
    """A cluster id in Kafka's form (a base64 UUID), without starting a JVM. Never one that
    starts with "-", as Kafka's Uuid.randomUuid never makes one: the storage tool would read it
    as an option and refuse to format (1 start in 64 failed so)."""
    import base64
    while True:
        made = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not made.startswith("-"):
            return made


def wait_listed(nodes, timeout_s: float, why):
    """Waits until every node answers Metadata naming every node as a broker (registered and
    unfenced) and a controller; `why(node)` tells where to look when one exits or never does."""
    from protocol import Connection
    deadline = time.monotonic() + timeout_s
    for n in nodes:
        while True:
            if not n.alive():
                raise RuntimeError(f"node {n.node_id} exited: {why(n)}")
            try:
                with Connection("127.0.0.1", n.port, timeout_s=2) as c:
                    meta = c.send("Metadata", 12, {"Topics": []})
                if len(meta["Brokers"]) == len(nodes) and meta["ControllerId"] >= 0:
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {n.node_id} not ready: {why(n)}")
            time.sleep(0.2)
