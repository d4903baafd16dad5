"""Which kernel mechanism should the zero-copy fetch use? sendfile(2) against splice(2) through a
pipe (file -> pipe -> socket, the pair io_uring would link), in one run: the same cached file
sent over loopback TCP to a draining receiver, rounds alternating. The sending socket is
non-blocking and waits for writability with poll, as the broker's is. Reports the sending
thread's CPU per GiB and its throughput for each, and the ratio.

    python3 perf/sendfile_vs_splice.py [--mib 256] [--rounds 5] [--chunk-kib 1024]
"""
import argparse
import os
import select
import platform
import socket
import statistics
import tempfile
import threading
import time

GIB = 1 << 30


def drain(conn: socket.socket, total: int):
    left = total
    while left:
        n = len(conn.recv(min(left, 1 << 20)))
        if n == 0:
            raise ConnectionError("sender closed early")
        left -= n


def writable(sock):
    select.select([], [sock], [])


def send_sendfile(sock, fd, size, chunk):
    off = 0
    while off < size:
        try:
            off += os.sendfile(sock.fileno(), fd, off, min(chunk, size - off))
        except BlockingIOError:
            writable(sock)


def send_splice(sock, fd, size, chunk):
    r, w = os.pipe()
    try:
        off = 0
        while off < size:
            n = os.splice(fd, w, min(chunk, size - off), offset_src=off)
            off += n
            while n:
                try:
                    n -= os.splice(r, sock.fileno(), n)
                except BlockingIOError:
                    writable(sock)
    finally:
        os.close(r)
        os.close(w)


def one(path: str, size: int, chunk: int, how) -> tuple[float, float]:
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    cli.setblocking(False)
    conn, _ = srv.accept()
    t = threading.Thread(target=drain, args=(conn, size))
    t.start()
    fd = os.open(path, os.O_RDONLY)
    try:
        c0, w0 = time.thread_time(), time.monotonic()
        how(cli, fd, size, chunk)
        c1, w1 = time.thread_time(), time.monotonic()
    finally:
        os.close(fd)
    t.join()
    for s in (cli, conn, srv):
        s.close()
    return (c1 - c0) / (size / GIB), size / (w1 - w0) / (1 << 20)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--chunk-kib", type=int, default=1024)
    a = ap.parse_args()
    size, chunk = a.mib << 20, a.chunk_kib << 10
    with tempfile.NamedTemporaryFile(dir="/tmp") as f:
        f.write(os.urandom(1 << 20) * a.mib)
        f.flush()
        with open(f.name, "rb") as warm:  # into the page cache, as a tailing consumer's data is
            while warm.read(1 << 24):
                pass
        results = {"sendfile": [], "splice": []}
        for r in range(a.rounds):
            order = ["sendfile", "splice"] if r % 2 == 0 else ["splice", "sendfile"]
            for name in order:
                how = send_sendfile if name == "sendfile" else send_splice
                results[name].append(one(f.name, size, chunk, how))
    print(f"# sendfile vs splice over loopback TCP ({a.mib} MiB cached file, {a.chunk_kib} KiB per call, "
          f"{a.rounds} rounds, nproc {os.cpu_count()}, kernel {platform.release()})\n")
    print("| mechanism | sender CPU s/GiB (median) | MiB/s (median) |")
    print("|---|---|---|")
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in results.items()}
    for k, (cpu, mbs) in med.items():
        print(f"| {k} | {cpu:.3f} | {mbs:.0f} |")
    print(f"\nsendfile/splice: CPU {med['sendfile'][0] / med['splice'][0]:.3f}, "
          f"throughput {med['sendfile'][1] / med['splice'][1]:.3f}")
    for k, v in results.items():
        print(f"- {k}: " + ", ".join(f"{c:.3f} s/GiB {m:.0f} MiB/s" for c, m in v))


if __name__ == "__main__":
    main()
