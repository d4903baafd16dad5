"""Controller measurements of a 3-node cluster on this machine (issue 15), with the production
defaults (100 ms Raft tick: elections after 1-2 s of silence; 1 s heartbeats; 9 s sessions):

1. Metadata write latency: N CreateTopics (1 partition, 3 replicas), one at a time, sent as raw
   Kafka requests to the active controller and, separately, to a node that forwards them.
   Answered once committed by a quorum and installed on the answering node's shards.
2. Controller failover: SIGKILL the active controller, then send CreateTopics to a survivor
   every 20 ms until one commits; the time from the kill to that commit. The killed node is
   restarted and rejoins before the next trial.

Usage: perf/cluster.py [--writes N] [--trials N] [--out perf/results/DATE-cluster.json]"""
import argparse
import json
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import kafka_wire as kw  # noqa: E402
from cluster import metadata_v1  # noqa: E402
from matrix import BINARY, free_port, listening  # noqa: E402


def create_topic(port: int, name: str, replicas: int = 3) -> int:
    """The error code of one CreateTopics v2 sent to the node on `port` (-1: no answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=15) as s:
            s.sendall(kw.create_topics_v2(name, 1, replicas))
            return kw.create_topics_v2_result(kw.read_response(s))[0]
    except OSError:
        return -1


class Node:
    def __init__(self, root: Path, node_id: int, voters: str, rpc_port: int):
        self.node_id, self.rpc_port = node_id, rpc_port
        self.port = free_port()
        self.data_dir = root / f"node-{node_id}"
        self.log = root / f"node-{node_id}.log"
        self.args = [str(BINARY), "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir",
                     str(self.data_dir), "--shards", "1", "--node-id", str(node_id), "--rpc-listen",
                     f"127.0.0.1:{rpc_port}", "--voters", voters]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        listening(self.proc, self.port, f"node {self.node_id} did not start: see {self.log}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def percentile(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def summary(ms):
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 2), "p99_ms": round(percentile(ms, 99), 2),
            "max_ms": round(max(ms), 2)}


def wait_for_three(nodes, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            views = [metadata_v1(n.port) for n in nodes.values()]
            if all(set(v.brokers) == {1, 2, 3} for v in views) and \
                    len({v.controller_id for v in views}) == 1 and views[0].controller_id > 0:
                return views[0].controller_id
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("the cluster did not form")


def write_latency(nodes, writes):
    controller = wait_for_three(nodes)
    other = next(i for i in nodes if i != controller)
    out = {}
    for label, node in (("to the controller", controller), ("forwarded", other)):
        ms = []
        for i in range(writes):
            t0 = time.perf_counter()
            code = create_topic(nodes[node].port, f"w-{node}-{i}")
            ms.append((time.perf_counter() - t0) * 1000)
            assert code == 0, f"CreateTopics failed with {code}"
        out[label] = summary(ms)
        print(f"CreateTopics {label}: {out[label]}", flush=True)
    return out


def failover(nodes, trials):
    ms = []
    for trial in range(trials):
        controller = wait_for_three(nodes)
        survivor = next(i for i in nodes if i != controller)
        nodes[controller].kill()
        t0 = time.perf_counter()
        while create_topic(nodes[survivor].port, f"f-{trial}") != 0:
            time.sleep(0.02)
        ms.append((time.perf_counter() - t0) * 1000)
        print(f"trial {trial}: controller {controller} killed, next write committed after {ms[-1]:.0f} ms",
              flush=True)
        nodes[controller].start()
    return summary(ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writes", type=int, default=200)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sluice-perf-cluster-"))
    rpc = {i: free_port() for i in (1, 2, 3)}
    voters = ",".join(f"{i}@127.0.0.1:{rpc[i]}" for i in (1, 2, 3))
    nodes = {i: Node(root, i, voters, rpc[i]) for i in (1, 2, 3)}
    try:
        for n in nodes.values():
            n.start()
        report = {
            "machine": {"cpus": len(__import__("os").sched_getaffinity(0)), "platform": platform.platform()},
            "command": " ".join(sys.argv),
            "create_topics": write_latency(nodes, args.writes),
            "failover": failover(nodes, args.trials),
        }
    finally:
        for n in nodes.values():
            n.kill()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=2))
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
