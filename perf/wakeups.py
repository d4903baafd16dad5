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
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import ck  # noqa: E402
import kafka_wire as kw  # noqa: E402
from matrix import cpu_seconds  # noqa: E402
from broker import Broker, free_port  # noqa: E402
from confluent_kafka import Producer  # noqa: E402
from metrics import total  # noqa: E402

POLLERS = 1000
POLLED_PARTITIONS = 1000


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


def unpark(socks: list, metrics: str):
    for s in socks:
        s.close()
    deadline = time.monotonic() + 30
    while total(metrics, "sluice_parked_operations") > 0 and time.monotonic() < deadline:
        time.sleep(0.1)


def measure(name: str, binary: Path, appends: int, cycles: int) -> list:
    """`cycles` pairs of (CPU µs per append without polls, with 1,000 parked), each pair taken
    back to back so that the machine's drift between pairs cancels out."""
    metrics_port = free_port()
    work = Path(tempfile.mkdtemp(prefix="sluice-wakeups-"))
    b = Broker(work / "data", shards=2, binary=binary,
               config=f'metrics_listen = "127.0.0.1:{metrics_port}"\nmax_connections_per_ip = 5000\n')
    b.start()
    metrics = f"127.0.0.1:{metrics_port}"
    pairs = []
    try:
        ck.create_topic(b.bootstrap, "polled", POLLED_PARTITIONS)
        ck.create_topic(b.bootstrap, "hot", 1)
        for _ in range(cycles):
            quiet = appends_cpu(b, appends)
            socks = park_polls(b, metrics)
            busy = appends_cpu(b, appends)
            assert total(metrics, "sluice_parked_operations") >= POLLERS, "the polls stayed parked"
            unpark(socks, metrics)
            pairs.append((quiet * 1e6, busy * 1e6))
            print(f"{name}: {quiet * 1e6:.0f} µs/append without polls, {busy * 1e6:.0f} with {POLLERS} parked",
                  flush=True)
    finally:
        b.stop()
        shutil.rmtree(work, ignore_errors=True)
    return pairs


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", action="append", required=True, help="NAME=PATH of a sluice binary")
    ap.add_argument("--appends", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds per binary")
    ap.add_argument("--cycles", type=int, default=3, help="(without, with) pairs per round")
    a = ap.parse_args()
    binaries = [tuple(b.split("=", 1)) for b in a.binary]
    pairs = {name: [] for name, _ in binaries}
    for r in range(a.rounds):
        order = binaries if r % 2 == 0 else list(reversed(binaries))
        for name, path in order:
            pairs[name] += measure(name, Path(path), a.appends, a.cycles)
    print(f"\nmachine: nproc={os.cpu_count()} kernel={os.uname().release}; {a.appends} appends per measure, "
          f"{a.rounds} rounds of {a.cycles} pairs per broker")
    print("| broker | CPU µs/append, no polls (median) | with 1,000 polls parked (median) | added by the polls (median of pairs) |")
    print("|---|---|---|---|")
    for name, _ in binaries:
        ps = pairs[name]
        print(f"| {name} | {median([q for q, _ in ps]):.0f} | {median([b for _, b in ps]):.0f} | "
              f"{median([b - q for q, b in ps]):+.0f} |")


if __name__ == "__main__":
    main()
