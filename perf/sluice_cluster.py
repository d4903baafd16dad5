"""Sluice nodes on 127.0.0.1 for the benchmarks: each `sluice serve` with its own Kafka port, RPC
port and data dir, every node a voter, production timing defaults (1 s heartbeats, 9 s broker
sessions, as Kafka's KRaft). The counterpart of tests/kafka/peer.py's KafkaCluster, with the
same shape (`nodes`, each with `node_id`, `port`, `kill()`, `stop()`; `bootstrap()`, `pids()`,
`stop()`), so that perf/matrix.py and perf/failover.py drive either the same way."""
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target" / "release" / "sluice"
sys.path.insert(0, str(ROOT / "tests" / "kafka"))
from peer import NodeProcess, wait_listed  # noqa: E402

START_TIMEOUT_S = 60


class SluiceNode(NodeProcess):
    def __init__(self, root: Path, node_id: int, port: int, rpc_port: int, voters: str, shards: int,
                 command_prefix=()):
        self.node_id, self.port, self.rpc_port = node_id, port, rpc_port
        self.data_dir = root / f"node-{node_id}"
        self.log_path = root / f"node-{node_id}.log"
        self.args = [*command_prefix, str(BINARY), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(self.data_dir),
                     "--shards", str(shards), "--node-id", str(node_id), "--rpc-listen", f"127.0.0.1:{rpc_port}",
                     "--voters", voters]
        self.proc: subprocess.Popen | None = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT)


class SluiceCluster:
    """`command_prefix` goes before each node's command (a benchmark's `taskset -c CPUS`)."""

    def __init__(self, root: Path, free_port, nodes: int = 3, shards: int = 1, command_prefix=()):
        root.mkdir(parents=True, exist_ok=True)
        ids = list(range(1, nodes + 1))
        rpc = {i: free_port() for i in ids}
        voters = ",".join(f"{i}@127.0.0.1:{rpc[i]}" for i in ids)
        self.nodes = [SluiceNode(root, i, free_port(), rpc[i], voters, shards, command_prefix) for i in ids]

    def start(self) -> "SluiceCluster":
        for n in self.nodes:
            n.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S):
        wait_listed(self.nodes, timeout_s, lambda n: f"see {n.log_path}")

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.nodes if n.alive()]

    def stop(self):
        for n in self.nodes:
            n.stop()
