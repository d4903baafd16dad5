"""Measures the broker CPU that parked fetch long polls cost: an idle broker for 10 s, then the
same broker holding 1,000 parked fetches (max_wait 60 s, on empty partitions) for 10 s. CPU is
utime+stime of the broker process from /proc, so it counts every thread.

Usage: .venv/bin/python perf/parked_polls.py   (after cargo build --release)"""
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
from metrics import total  # noqa: E402

PARKED = 1000
WINDOW_S = 10.0


def measure(pid: int) -> float:
    start = cpu_seconds(pid)
    time.sleep(WINDOW_S)
    return cpu_seconds(pid) - start


def main():
    metrics_port = free_port()
    work = Path(tempfile.mkdtemp(prefix="sluice-parked-polls-"))
    b = Broker(work / "data", shards=2, config=f'metrics_listen = "127.0.0.1:{metrics_port}"\n')
    b.start()
    metrics = f"127.0.0.1:{metrics_port}"
    try:
        ck.create_topic(b.bootstrap, "idle", 8)
        idle = measure(b.proc.pid)
        socks = []
        for i in range(PARKED):
            s = socket.create_connection(("127.0.0.1", b.port))
            s.sendall(kw.request(1, 4, i, kw.fetch_v4("idle", i % 8, 0, 60_000)))
            socks.append(s)
        deadline = time.monotonic() + 30
        while total(metrics, "sluice_parked_operations") < PARKED and time.monotonic() < deadline:
            time.sleep(0.1)
        parked = total(metrics, "sluice_parked_operations")
        busy = measure(b.proc.pid)
        for s in socks:
            s.close()
    finally:
        b.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"machine: nproc={os.cpu_count()} kernel={os.uname().release}")
    print(f"idle broker, {WINDOW_S:.0f} s: {idle:.3f} CPU s ({100 * idle / WINDOW_S:.2f}% of one core)")
    print(f"{parked} parked fetches, {WINDOW_S:.0f} s: {busy:.3f} CPU s ({100 * busy / WINDOW_S:.2f}% of one core)")
    print(f"difference: {busy - idle:+.3f} CPU s over {WINDOW_S:.0f} s")


if __name__ == "__main__":
    main()
