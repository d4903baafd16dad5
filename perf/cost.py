"""The cost of a byte, against this machine's own limits measured in the same run.

1. `sluice probe`: memcpy and CRC32C speed on one core, 4 KiB write + fdatasync latency on
   the data dir's file system, and the kernel's floors over loopback TCP: a sender's CPU per GiB
   of sendfile (fetch), a receiver's per GiB of recv + CRC32C + write + fdatasync (produce),
   through the page cache and with O_DIRECT; and what waking a sleeping thread costs, across
   two cores and within one.
2. A fresh broker (2 shards): 1,000,000 records of 1 KiB produced with acks=all by 2 producers
   over 8 partitions, then all of them consumed by 2 consumers. Broker CPU (utime+stime of the
   process, every thread, from /proc) per GiB produced and per GiB fetched.
3. The limits those are compared with: producing a GiB needs at least one copy out of the
   socket, one CRC32C pass and one copy into the page cache (2/memcpy + 1/crc32c seconds per
   GiB); fetching one needs one copy (1/memcpy). And the floors above, which add what the
   kernel's TCP and file paths cost besides the copies.
4. Cost per record: 1,000,000 records of 100 B, acks=1, broker CPU per million records, and,
   with --compare-binary or --tansu, the same for the other broker in the same run.
   --compare-config FILE runs the other Sluice (this build unless --compare-binary) with that
   config file, to weigh a setting against the defaults.
   --compare-to kafka measures Apache Kafka 4.4 (one KRaft node, 1 GiB heap) the same way, with
   its defaults and durable (`log.flush.interval.messages=1`), its CPU the JVM's utime+stime
   (every thread) and its resident memory after the runs beside Sluice's.
   --cluster measures three nodes of each (perf/sluice_cluster.py, Kafka's three KRaft nodes),
   the topics at replication factor 3, broker CPU and memory summed over the nodes; --pin as
   perf/matrix.py's.

Usage: perf/run --cost [--records N] [--compare-binary PATH] [--compare-config FILE]
                       [--compare-name NAME] [--tansu PATH] [--compare-to kafka] [--cluster]
                       [--pin BROKER_CPUS:CLIENT_CPUS]
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

from matrix import (BINARY, KAFKA_CONFIGS, ROOT, bench, cpu_model, cpu_seconds, free_port, head_commit,
                    listening, pin, publish, resident_mib, run_kind, sharing, start_kafka, start_sluice, taskset)

GIB = 1 << 30


def probe(work: Path) -> dict:
    out = work / "probe.json"
    subprocess.run([str(BINARY), "probe", "--dir", str(work), "--json", str(out)], check=True)
    return json.loads(out.read_text())


def measured(pids: list[int], run) -> tuple[float, dict]:
    """Broker CPU seconds (every node's process together) spent while `run()` runs, and its report."""
    before = sum(cpu_seconds(pid) for pid in pids)
    report = run()
    return sum(cpu_seconds(pid) for pid in pids) - before, report


def cost_per_byte(pids: list[int], bootstrap: str, work: Path, records: int, replicas: int) -> dict:
    topic = "cost-1k"
    cpu_p, prod = measured(pids, lambda: bench(bootstrap, topic, work / "p.json", mode="produce", count=records,
                                               producers=2, partitions=8, message_size=1024, acks="all",
                                               replication_factor=replicas))
    cpu_f, cons = measured(pids, lambda: bench(bootstrap, topic, work / "c.json", mode="consume", count=records,
                                               consumers=2, **{"from": "earliest"}))
    assert prod and prod["errors"] == 0 and prod["records"] >= records, prod
    assert cons and cons["records"] >= records, cons
    return {"produce_s_per_gib": cpu_p / (prod["bytes"] / GIB), "fetch_s_per_gib": cpu_f / (cons["bytes"] / GIB),
            "produce_bytes": prod["bytes"], "fetch_bytes": cons["bytes"]}


def cost_per_record(pids: list[int], bootstrap: str, work: Path, records: int, replicas: int) -> float:
    cpu, r = measured(pids, lambda: bench(bootstrap, "cost-100b", work / "r.json", mode="produce", count=records,
                                          producers=2, partitions=8, message_size=100, acks="1",
                                          replication_factor=replicas))
    assert r and r["errors"] == 0, r
    return cpu / (r["records"] / 1e6)


def wakeup_row(limits: dict) -> str:
    across, same = limits["wakeup_across_cores"], limits["wakeup_same_core"]
    cells = ["-", "-"] if across is None else [f"{across['wall_us']:.1f}", f"{across['cpu_us']:.1f}"]
    cells += [f"{same['wall_us']:.1f}", f"{same['cpu_us']:.1f}"]
    return "| " + " | ".join(cells) + " |"


def start_tansu(path: str, work: Path):
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    # Its default storage is in memory: it never writes to disk.
    proc = subprocess.Popen([path, "broker", "--listener-url", url, "--advertised-listener-url", url, "--silent"],
                            stdout=open(work / "tansu.log", "w"), stderr=subprocess.STDOUT)
    return listening(proc, port, "tansu did not start: see tansu.log")


def process_started(start):
    """A starter of one broker process: (pids, bootstrap, stop)."""
    def started():
        proc, bootstrap = start()

        def stop():
            proc.terminate()
            proc.wait(timeout=30)
        return [proc.pid], bootstrap, stop
    return started


def cluster_started(root: Path, start):
    """A starter of a fresh cluster (Kafka's or Sluice's, `start(root)`): (pids, bootstrap, stop)."""
    def started():
        shutil.rmtree(root, ignore_errors=True)
        cluster = start(root)
        return cluster.pids(), cluster.bootstrap(), cluster.stop
    return started


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--compare-binary")
    ap.add_argument("--compare-config")
    ap.add_argument("--compare-name", default="other")
    ap.add_argument("--tansu", help="a tansu binary (in-memory storage) to compare cost per record with")
    ap.add_argument("--compare-to", choices=["kafka"], help="kafka: Kafka 4.4, with its defaults and durable")
    ap.add_argument("--rounds", type=int, default=3, help="runs per broker (each figure: the median)")
    ap.add_argument("--cluster", action="store_true", help="three nodes of each broker, topics at RF 3")
    ap.add_argument("--pin", metavar="BROKER_CPUS:CLIENT_CPUS", help="brokers on some CPUs, the load generator on others")
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    if a.cluster and (a.compare_binary or a.compare_config or a.tansu):
        ap.error("--cluster compares with --compare-to kafka only")
    pin(a.pin)
    nodes = 3 if a.cluster else 1
    work = Path(tempfile.mkdtemp(prefix="sluice-cost-"))
    limits = probe(work)
    byte_runs, record_runs, memory = {}, {}, {}
    if a.cluster:
        from sluice_cluster import SluiceCluster
        starters = [("sluice", cluster_started(work / "sluice", lambda root: SluiceCluster(
            root, free_port, command_prefix=taskset("broker")).start()))]
    else:
        starters = [("sluice", process_started(lambda: start_sluice(work / "data-sluice", work / "sluice.log")))]
    if a.compare_binary or a.compare_config:
        other = Path(a.compare_binary) if a.compare_binary else BINARY
        config = Path(a.compare_config) if a.compare_config else None
        starters.append((a.compare_name, process_started(lambda: start_sluice(
            work / "data-other", work / "other.log", config=config, binary=other))))
    if a.tansu:
        starters.append(("tansu", process_started(lambda: start_tansu(a.tansu, work))))
    if a.compare_to == "kafka":
        starters += [(name, cluster_started(work / name, lambda root, c=configs: start_kafka(root, c, nodes)))
                     for name, configs in KAFKA_CONFIGS.items()]
    for round_ in range(a.rounds):
        # Alternate the order, so that no broker always runs on a warmer or cooler machine.
        order = starters if round_ % 2 == 0 else list(reversed(starters))
        for name, start in order:
            pids, bootstrap, stop = start()
            try:
                if name != "tansu":
                    byte_runs.setdefault(name, []).append(cost_per_byte(pids, bootstrap, work, a.records, nodes))
                record_runs.setdefault(name, []).append(cost_per_record(pids, bootstrap, work, a.records, nodes))
                memory.setdefault(name, []).append(sum(resident_mib(pid) for pid in pids))
            finally:
                stop()
            shutil.rmtree(work / "data-sluice", ignore_errors=True)
            shutil.rmtree(work / "data-other", ignore_errors=True)
    shutil.rmtree(work, ignore_errors=True)
    record_cost = {name: sorted(v)[len(v) // 2] for name, v in record_runs.items()}
    byte_cost = {name: {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
                 for name, runs in byte_runs.items()}
    resident = {name: sorted(v)[len(v) // 2] for name, v in memory.items()}
    write(a, limits, byte_cost, record_cost, resident)


def write(a, limits, byte_cost, record_cost, resident):
    memcpy, crc = limits["memcpy_gib_per_s"], limits["crc32c_gib_per_s"]
    produce_limit = 2 / memcpy + 1 / crc
    fetch_limit = 1 / memcpy
    commit = head_commit()
    cpu = cpu_model()
    lines = [
        f"# Cost per byte and per record, {datetime.date.today().isoformat()}, commit {commit}", "",
        f"- Command: `perf/run --cost --records {a.records}"
        + (f" --compare-binary {a.compare_binary}" if a.compare_binary else "")
        + (f" --compare-config {a.compare_config}" if a.compare_config else "")
        + (f" --compare-name {a.compare_name}" if a.compare_binary or a.compare_config else "")
        + (" --tansu PATH" if a.tansu else "") + (" --compare-to kafka" if a.compare_to else "")
        + (" --cluster" if a.cluster else "") + (f" --pin {a.pin}" if a.pin else "")
        + f" --rounds {a.rounds}`",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu}, kernel `{platform.release()}`; "
        + sharing("broker and clients share it."),
        "- Broker CPU is utime+stime of the broker process (every thread), from /proc"
        + ("; three nodes of each broker, the topics at replication factor 3, CPU and memory the sum"
           " over the three nodes." if a.cluster else "."), "",
        "## This machine's limits (sluice probe, same run)", "",
        "| memcpy | CRC32C | 4 KiB write+fdatasync p50 | p99 | overwriting p50 | p99 |",
        "|---|---|---|---|---|---|",
        f"| {memcpy:.2f} GiB/s | {crc:.2f} GiB/s | {limits['fdatasync_4k_p50_ms']:.3f} ms | "
        f"{limits['fdatasync_4k_p99_ms']:.3f} ms | {limits['fdatasync_4k_overwrite_p50_ms']:.3f} ms | "
        f"{limits['fdatasync_4k_overwrite_p99_ms']:.3f} ms |", "",
        "Floors over loopback TCP, CPU s/GiB of the thread doing the work (least of 3 rounds):", "",
        "| fetch: sendfile | produce: recv + CRC32C + write + fdatasync | the same with O_DIRECT |",
        "|---|---|---|",
        f"| {limits['fetch_floor_s_per_gib']:.3f} | {limits['produce_floor_s_per_gib']:.3f} | "
        f"{limits['produce_floor_direct_s_per_gib']:.3f} |", "",
        "Waking a sleeping thread (eventfd ping-pong; a hop between idle shards pays one each way):", "",
        "| across two cores: wall µs | CPU µs | within one core: wall µs | CPU µs |",
        "|---|---|---|---|",
        wakeup_row(limits), "",
        f"## Broker CPU per GiB (1 KiB records: produce acks=all, 2 producers, 8 partitions; then consumed;"
        f" median of {a.rounds} runs per broker)", "",
        "| broker | | broker CPU s/GiB | this machine's limit s/GiB | multiple of the limit | multiple of the floor |",
        "|---|---|---|---|---|---|",
    ]
    produce_floor, fetch_floor = limits["produce_floor_s_per_gib"], limits["fetch_floor_s_per_gib"]
    for name, c in byte_cost.items():
        produce, fetch = c["produce_s_per_gib"], c["fetch_s_per_gib"]
        lines += [
            f"| {name} | produce | {produce:.3f} | {produce_limit:.3f} (2 copies + 1 CRC32C) | "
            f"{produce / produce_limit:.2f}× | {produce / produce_floor:.2f}× |",
            f"| {name} | fetch | {fetch:.3f} | {fetch_limit:.3f} (1 copy) | "
            f"{fetch / fetch_limit:.2f}× | {fetch / fetch_floor:.2f}× |",
        ]
    lines += ["",
        f"## Broker CPU per million 100 B records (acks=1, 2 producers, 8 partitions, {a.records:,} records;"
        f" median of {a.rounds} runs per broker, alternating)", "",
        "| broker | CPU s per million records | ratio to sluice |", "|---|---|---|",
    ]
    base = record_cost["sluice"]
    for name, v in record_cost.items():
        lines.append(f"| {name} | {v:.3f} | {v / base:.2f} |")
    lines += ["", "Resident memory (VmRSS) after each broker's runs, median: " + ", ".join(
        f"{n} {m:,.0f} MiB" for n, m in resident.items()) + ".", ""]
    if a.compare_to == "kafka":
        lines += [f"Kafka: {'three KRaft nodes' if a.cluster else 'one KRaft node'} in combined mode, 1 GiB heap"
                  f"{' each' if a.cluster else ''} (kafka-server-start.sh's default);"
                  " `kafka` its defaults (acknowledges before any fsync), `kafka-durable` with"
                  " `log.flush.interval.messages=1` (every acknowledged write fsynced, like Sluice).", ""]
    out = Path(a.out_dir) / f"{datetime.date.today().isoformat()}-{commit}-cost{run_kind(a)}.md"
    publish(lines, out)


if __name__ == "__main__":
    main()
