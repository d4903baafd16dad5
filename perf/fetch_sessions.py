"""What an incremental fetch session (KIP-227) saves an idle consumer: bytes on the wire per
fetch, and broker CPU per fetch, for a consumer of N partitions that has caught up (every fetch
finds nothing new), sessionless full fetches against incremental ones, in the same run.

Each fetch has max_wait 0, so the figures are the cost of the request itself, not of waiting.
CPU is utime+stime of the broker process from /proc over FETCHES fetches of each kind.

Usage: .venv/bin/python perf/fetch_sessions.py [PARTITIONS]   (after cargo build --release)"""
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
import ck  # noqa: E402
import kafka_wire as kw  # noqa: E402
from matrix import cpu_seconds  # noqa: E402
from broker import Broker  # noqa: E402

FETCHES = 2000


def fetch(sock, frame):
    sock.sendall(frame)
    response = kw.read_response(sock)
    return len(response) + 4, kw.fetch_v7_response(response)


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    work = Path(tempfile.mkdtemp(prefix="sluice-fetch-sessions-"))
    b = Broker(work / "data", shards=2)
    b.start()
    try:
        ck.create_topic(b.bootstrap, "fs", n)
        ck.produce(b.bootstrap, "fs", n, n)  # one record per partition: the consumer is at 1
        caught_up = [("fs", p, 1) for p in range(n)]
        with socket.create_connection(("127.0.0.1", b.port)) as s:
            full = kw.request(1, 7, 1, kw.fetch_v7(0, -1, caught_up))
            size, (error, _, parts) = fetch(s, full)
            assert error == 0 and len(parts) == n
            start = cpu_seconds(b.proc.pid)
            for _ in range(FETCHES):
                full_response, _ = fetch(s, full)
            full_cpu = cpu_seconds(b.proc.pid) - start
            _, (error, sid, parts) = fetch(s, kw.request(1, 7, 1, kw.fetch_v7(0, 0, caught_up)))
            assert error == 0 and sid != 0 and len(parts) == n
            start = cpu_seconds(b.proc.pid)
            for epoch in range(1, FETCHES + 1):
                incremental = kw.request(1, 7, 1, kw.fetch_v7(sid, epoch, []))
                inc_response, (error, _, parts) = fetch(s, incremental)
                assert error == 0 and not parts
            inc_cpu = cpu_seconds(b.proc.pid) - start
    finally:
        b.kill()
        shutil.rmtree(work, ignore_errors=True)
    print(f"partitions: {n}, fetches of each kind: {FETCHES}, nproc {os.cpu_count()}, kernel {os.uname().release}")
    print("| fetch | request bytes | response bytes | broker CPU per fetch |")
    print("|---|---|---|---|")
    print(f"| sessionless full | {len(full)} | {full_response} | {full_cpu / FETCHES * 1e6:.0f} µs |")
    print(f"| incremental (nothing new) | {len(incremental)} | {inc_response} | {inc_cpu / FETCHES * 1e6:.0f} µs |")
    print(f"| ratio incremental/full | {len(incremental) / len(full):.3f} | {inc_response / full_response:.3f} | "
          f"{inc_cpu / full_cpu:.2f} |")


if __name__ == "__main__":
    main()
