"""What parked long polls cost each append: 1,000 consumers long-poll 1,000 partitions (one raw
Fetch v4 each, max_wait 60 s, parked on empty partitions) while a producer appends to one other
partition, one acks=all record at a time. Reports the broker's CPU (utime+stime from /proc, all
threads) per append, with and without the parked polls, for each broker binary given, in the
same run.

Before per-partition offset monitors, every fsync woke every fetch parked on the shard, and each
re-checked its partitions; after, an append wakes only the waiters of its own partition.

Usage: .venv/bin/python perf/wakeups.py --binary NAME=PATH [--binary NAME=PATH ...] [--appends N]
(each PATH a `sluice` release binary; the load is generated with confluent-kafka)."""
import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import ck  # noqa: E402
import kafka_wire as kw  # noqa: E402
from broker import Broker, free_port  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from metrics import total  # noqa: E402

POLLERS = 1000
POLLED_PARTITIONS = 1000


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def appends_cpu(broker: Broker, appends: int) -> float:
    """Broker CPU seconds per acks=all append to `hot`, one record in flight at a time."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce("hot", value=b"warm-up", partition=0)
    assert producer.flush(30) == 0
    start = cpu_seconds(broker.proc.pid)
    for i in range(appends):
        producer.produce("hot", value=b"x" * 100, partition=0)
        assert producer.flush(30) == 0
    return (cpu_seconds(broker.proc.pid) - start) / appends


def park_polls(broker: Broker, metrics: str) -> list:
    socks = []
    for i in range(POLLERS):
        s = socket.create_connection(("127.0.0.1", broker.port))
        s.sendall(kw.request(1, 4, i, kw.fetch_v4("polled", i % POLLED_PARTITIONS, 0, 60_000)))
        socks.append(s)
    deadline = time.monotonic() + 30
    while total(metrics, "sluice_parked_operations") < POLLERS and time.monotonic() < deadline:
        time.sleep(0.1)
    parked = total(metrics, "sluice_parked_operations")
    assert parked >= POLLERS, f"only {parked} polls parked"
    return socks


def measure(name: str, binary: Path, appends: int) -> dict:
    metrics_port = free_port()
    work = Path(tempfile.mkdtemp(prefix="sluice-wakeups-"))
    b = Broker(work / "data", shards=2, binary=binary,
               config=f'metrics_listen = "127.0.0.1:{metrics_port}"\nmax_connections_per_ip = 5000\n')
    b.start()
    metrics = f"127.0.0.1:{metrics_port}"
    try:
        ck.create_topic(b.bootstrap, "polled", POLLED_PARTITIONS)
        ck.create_topic(b.bootstrap, "hot", 1)
        quiet = appends_cpu(b, appends)
        socks = park_polls(b, metrics)
        busy = appends_cpu(b, appends)
        still = total(metrics, "sluice_parked_operations")
        for s in socks:
            s.close()
    finally:
        b.stop()
    return {"name": name, "quiet_us": quiet * 1e6, "busy_us": busy * 1e6, "still_parked": still}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True, help="NAME=PATH of a sluice binary")
    ap.add_argument("--appends", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per binary")
    a = ap.parse_args()
    binaries = [tuple(b.split("=", 1)) for b in a.binary]
    results = []
    for r in range(a.rounds):
        order = binaries if r % 2 == 0 else list(reversed(binaries))
        for name, path in order:
            res = measure(name, Path(path), a.appends)
            print(f"round {r + 1} {name}: {res['quiet_us']:.1f} µs/append without polls, "
                  f"{res['busy_us']:.1f} µs/append with {POLLERS} parked ({res['still_parked']} still parked)",
                  flush=True)
            results.append(res)
    print(f"\nmachine: nproc={os.cpu_count()} kernel={os.uname().release}; {a.appends} appends per measure")
    print("| broker | CPU µs/append, no polls | CPU µs/append, 1,000 polls parked | added by the polls |")
    print("|---|---|---|---|")
    for name, _ in binaries:
        mine = [r for r in results if r["name"] == name]
        quiet = sorted(r["quiet_us"] for r in mine)[len(mine) // 2]
        busy = sorted(r["busy_us"] for r in mine)[len(mine) // 2]
        print(f"| {name} | {quiet:.1f} | {busy:.1f} | {busy - quiet:+.1f} |")


if __name__ == "__main__":
    main()
