"""Broker CPU time per GiB produced and per GiB fetched, with fetch.zero_copy on and off, in one
run: for each mode a fresh broker takes a `sluice bench` produce load, then a consume load that
reads it all back; the broker's utime+stime comes from /proc/<pid>/stat around each phase.
Modes alternate, rounds repeat, and the report gives each figure and the on/off ratio.

The produce path has no switch (it is always copy-free); `--baseline-binary` adds a third mode,
an older build of the broker, so that an ingest change is measured in the same run too.

    .venv/bin/python perf/zero_copy.py [--count N] [--message-size BYTES] [--rounds R]
                                       [--baseline-binary PATH] [--out FILE]
"""
import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path

from matrix import BINARY, bench, cpu_seconds, free_port, head_commit, start_sluice

GIB = 1 << 30


def scrape(addr: str, name: str) -> int:
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=5).read().decode()
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def one(work: Path, mode: str, a) -> dict:
    run = work / f"{mode}-{time.monotonic_ns()}"
    run.mkdir()
    config = run / "sluice.toml"
    metrics = f"127.0.0.1:{free_port()}"
    text = f'metrics_listen = "{metrics}"\n'
    if mode != "baseline":
        text += f"[fetch]\nzero_copy = {str(mode == 'on').lower()}\n"
    config.write_text(text)
    binary = Path(a.baseline_binary) if mode == "baseline" else BINARY
    proc, bootstrap = start_sluice(run / "data", run / "broker.log", config, binary)
    try:
        topic = "zc"
        c0 = cpu_seconds(proc.pid)
        p = bench(bootstrap, topic, run / "produce.json", mode="produce", count=a.count,
                  message_size=a.message_size, partitions=a.partitions, producers=2, acks="1")
        c1 = cpu_seconds(proc.pid)
        c = bench(bootstrap, topic, run / "consume.json", mode="consume", count=a.count,
                  message_size=a.message_size, partitions=a.partitions, consumers=1)
        c2 = cpu_seconds(proc.pid)
        sendfile = scrape(metrics, "sluice_sendfile_bytes_total")
        copied = scrape(metrics, "sluice_sendfile_copied_bytes_total")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert p and c and p["errors"] == 0 and c["errors"] == 0 and c["records"] >= a.count, (p, c)
    return {
        "produce_cpu_s_per_gib": (c1 - c0) / (p["bytes"] / GIB),
        "consume_cpu_s_per_gib": (c2 - c1) / (c["bytes"] / GIB),
        "produce_mb_per_sec": p["mb_per_sec"],
        "consume_mb_per_sec": c["mb_per_sec"],
        "sendfile_share": sendfile / max(1, sendfile + copied),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=1_000_000)
    ap.add_argument("--message-size", type=int, default=1024)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-binary", default=None)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-zc-"))
    modes = ["on", "off"] + (["baseline"] if a.baseline_binary else [])
    results = {m: [] for m in modes}
    for r in range(a.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            results[mode].append(one(work, mode, a))
            print(f"round {r} {mode}: {results[mode][-1]}", flush=True)
    keys = ["produce_cpu_s_per_gib", "consume_cpu_s_per_gib", "produce_mb_per_sec", "consume_mb_per_sec",
            "sendfile_share"]
    med = {m: {k: statistics.median(x[k] for x in results[m]) for k in keys} for m in results}
    commit = head_commit()
    lines = [
        f"# Zero-copy fetch: broker CPU per GiB, on vs off ({datetime.date.today()}, {commit})", "",
        "Command: `.venv/bin/python perf/zero_copy.py " + " ".join(
            f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if k != "out" and v is not None) + "`",
        f"Machine: nproc {os.cpu_count()}, kernel {platform.release()}.", "",
        f"Each round: a fresh broker (default config but `fetch.zero_copy`), `sluice bench` produce of "
        f"{a.count} x {a.message_size} B records (acks=1, 2 producers, {a.partitions} partitions), then "
        f"consume of all of them (1 consumer). Broker CPU = utime+stime from /proc. Medians of "
        f"{a.rounds} rounds per mode, modes alternating. sendfile_share: the fraction of fetched "
        f"record bytes sent by sendfile (the rest were copied while a full socket drained).", "",
    ]
    head = "| figure | zero_copy = true | zero_copy = false | on/off |"
    rule = "|---|---|---|---|"
    if a.baseline_binary:
        head += f" baseline ({a.baseline_binary}) | on/baseline |"
        rule += "---|---|"
    lines += [head, rule]
    for k in keys:
        on, off = med["on"][k], med["off"][k]
        row = f"| {k} | {on:.3f} | {off:.3f} | {on / off if off else float('nan'):.3f} |"
        if a.baseline_binary:
            base = med["baseline"][k]
            row += f" {base:.3f} | {on / base if base else float('nan'):.3f} |"
        lines.append(row)
    lines += ["", "Every round:", ""]
    for m in modes:
        for x in results[m]:
            lines.append(f"- {m}: " + ", ".join(f"{k} {x[k]:.3f}" for k in keys))
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
