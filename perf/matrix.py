"""The standard matrix behind perf/run: 1 KiB records; acks=1 and acks=all; 1, 4 and 16
producers; 1, 8 and 64 partitions; then an e2e run at half the measured peak. Each row runs
against Sluice and, with --compare-to (a running broker) or --compare-binary (another Sluice
build, started here on its own data dir), against the other broker right after it, so a ratio
compares two measurements taken seconds apart on the same machine. --compare-to kafka starts
Apache Kafka 4.4 (tests/kafka/peer.py, one KRaft node, Kafka's 1 GiB heap) twice: with its
defaults (it acknowledges before any fsync) and durable like Sluice
(`log.flush.interval.messages=1`: every acknowledged write fsynced). --rounds N runs the whole
matrix N times, alternating which broker goes first, and reports each row's median (by
records/s) per broker. Each broker's resident memory after the run is reported too.
--cluster runs three nodes of each broker (perf/sluice_cluster.py: one shard per node; Kafka
three KRaft nodes in combined mode) and every topic at replication factor 3.
--pin BROKER_CPUS:CLIENT_CPUS (taskset lists, e.g. 0:1 or 0-3:4-15) runs every broker process
on the first CPUs and the load generator on the others, so that a broker's throughput is not
its share of CPUs it contends for with the clients (Sluice then runs one shard per CPU it has)."""
import argparse
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BINARY = ROOT / "target" / "release" / "sluice"
sys.path.insert(0, str(ROOT / "tests" / "kafka"))
# The two Kafka configurations --compare-to kafka measures.
KAFKA_CONFIGS = {
    "kafka": {},
    "kafka-durable": {"log.flush.interval.messages": 1},
}
KAFKA_HEAP_MB = 1024  # kafka-server-start.sh's default (KAFKA_HEAP_OPTS=-Xmx1G -Xms1G)
# --pin: the CPUs (taskset lists) brokers and the load generator run on; unset, anywhere.
PINNED = {"broker": None, "client": None}


def pin(spec: str | None):
    """Sets PINNED from --pin's BROKER_CPUS:CLIENT_CPUS (nothing without one)."""
    if spec:
        PINNED["broker"], PINNED["client"] = spec.split(":")


def taskset(role: str) -> list[str]:
    """The command prefix that keeps a `role` ("broker" or "client") process on its CPUs."""
    return ["taskset", "-c", PINNED[role]] if PINNED[role] else []


def sharing(shared: str) -> str:
    """How brokers and the load generator share the machine, for a report's Machine line:
    the CPUs --pin gave each, else `shared`."""
    if PINNED["broker"]:
        return f"brokers on CPUs {PINNED['broker']}, the load generator on CPUs {PINNED['client']} (taskset)."
    return shared


def run_kind(a) -> str:
    """What tells a report's name apart by its kind of run (--vs-kafka writes several kinds
    into one directory)."""
    return ("-cluster" if a.cluster else "") + ("-pinned" if a.pin else "")


def head_commit() -> str:
    """The short hash of the checked-out commit, for a results file's name and header."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=ROOT).stdout.strip()


def publish(lines: list[str], out: Path):
    """Writes a results file and shows it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {out}")


def percentile(values, p):
    """The value at percentile `p` (0-100) of `values`: the nearest rank, at most the largest."""
    s = sorted(values)
    return s[min(len(s) - 1, int(len(s) * p / 100))]


def cpu_model() -> str:
    """This machine's CPU model, as /proc/cpuinfo names it."""
    return next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sluice(data_dir: Path, log_path: Path, config: Path | None = None, binary: Path = BINARY):
    port = free_port()
    args = [*taskset("broker"), str(binary), "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir)]
    if config is not None:
        args += ["--config", str(config)]
    proc = subprocess.Popen(args, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    return listening(proc, port, f"sluice did not start: see {log_path}")


def listening(proc, port: int, failure: str):
    """(proc, bootstrap) once the broker started as `proc` accepts on `port`; exits with
    `failure` if it does not within 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    sys.exit(failure)


def delete_topic(bootstrap, topic):
    """Deletes a row's topic once measured, so that a long run does not fill the disk (each row
    writes gigabytes)."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the deletion is answered
    try:
        admin.delete_topics([topic])[topic].result(timeout=30)
    except Exception as e:  # the row's figures stand; a leftover topic only costs disk
        print(f"cannot delete {topic} on {bootstrap}: {e}", file=sys.stderr)


def start_kafka(root: Path, configs: dict, nodes: int = 1):
    """Kafka 4.4 KRaft nodes (scripts/kafka-install puts it in tests/kafka/libs)."""
    from peer import KafkaCluster
    if not (ROOT / "tests" / "kafka" / "libs" / ".installed").exists():
        subprocess.run([str(ROOT / "scripts" / "kafka-install")], check=True)
    return KafkaCluster(root, nodes=nodes, configs=configs, heap_mb=KAFKA_HEAP_MB, free_port=free_port,
                        command_prefix=taskset("broker")).start()


def resident_mib(pid: int) -> float:
    """The resident memory of process `pid` (VmRSS), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (utime + stime, every thread) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench(bootstrap, topic, out: Path, **opts):
    args = [*taskset("client"), str(BINARY), "bench", "--bootstrap", bootstrap, "--topic", topic, "--json", str(out)]
    for k, v in opts.items():
        flag = f"--{k.replace('_', '-')}"
        if isinstance(v, list):  # a repeated flag, e.g. client_config=["KEY=VALUE", ...]
            args += [a for item in v for a in (flag, str(item))]
        else:
            args += [flag] if v is True else [flag, str(v)]
    print("+", " ".join(args), flush=True)
    p = subprocess.run(args, capture_output=True, text=True)
    if p.returncode not in (0, 2):  # 2: the run completed with errors, which are in the JSON
        print(p.stderr, file=sys.stderr)
        return None
    return json.loads(out.read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compare-to", help="HOST:PORT of another Kafka-compatible broker, or kafka: start Kafka 4.4 "
                    "with its defaults and durable (log.flush.interval.messages=1)")
    ap.add_argument("--compare-binary", help="another sluice binary to start and compare against")
    ap.add_argument("--compare-name", default="other")
    ap.add_argument("--cluster", action="store_true", help="three nodes of each broker, topics at RF 3")
    ap.add_argument("--pin", metavar="BROKER_CPUS:CLIENT_CPUS", help="brokers on some CPUs, the load generator on others")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--producers", default="1,4,16", help="the rows' producer counts")
    ap.add_argument("--partitions", default="1,8,64", help="the rows' partition counts")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    a.producer_counts = [int(x) for x in a.producers.split(",")]
    a.partition_counts = [int(x) for x in a.partitions.split(",")]
    pin(a.pin)

    work = Path(tempfile.mkdtemp(prefix="sluice-perf-"))
    kafkas = []  # started clusters, Sluice's with --cluster
    if a.cluster:
        from sluice_cluster import SluiceCluster
        kafkas.append(SluiceCluster(work / "sluice", free_port, command_prefix=taskset("broker")).start())
        procs, sluice = [], kafkas[0].bootstrap()
        pids = {"sluice": kafkas[0].pids()}
    else:
        proc, sluice = start_sluice(work / "data", work / "broker.log")
        procs, pids = [proc], {"sluice": [proc.pid]}
    targets = [("sluice", sluice)]
    nodes = 3 if a.cluster else 1
    memory = {}
    if a.compare_binary:
        other, other_addr = start_sluice(work / "data-other", work / "other.log", binary=Path(a.compare_binary))
        procs.append(other)
        targets.append((a.compare_name, other_addr))
    elif a.compare_to == "kafka":
        for name, configs in KAFKA_CONFIGS.items():
            kafkas.append(start_kafka(work / name, configs, nodes))
            targets.append((name, kafkas[-1].bootstrap()))
            pids[name] = kafkas[-1].pids()
    elif a.compare_to:
        targets.append((a.compare_name, a.compare_to))
    try:
        rows = run_rows(targets, a, work)
        peak = max((r["sluice"]["records_per_sec"] for r in rows if r["sluice"] and r["acks"] == "all"), default=0)
        e2e = {}
        for name, bootstrap in targets:
            e2e[name] = bench(bootstrap, f"perf-e2e-{int(time.time() * 1000)}", work / f"{name}-e2e.json", mode="e2e",
                              duration=a.duration, warmup=a.warmup, producers=4, consumers=4, partitions=8,
                              message_size=1024, acks="all", rate=int(peak / 2), replication_factor=nodes)
        memory = {name: sum(resident_mib(pid) for pid in ps) for name, ps in pids.items()}
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)
        for k in kafkas:
            k.stop()

    commit = head_commit()
    date = datetime.date.today().isoformat()
    out_dir = Path(a.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"{date}-{commit}{run_kind(a)}"
    write_markdown(stem.with_suffix(".md"), rows, e2e, targets, peak, a, commit, memory)
    plot(stem.with_suffix(".png"), rows)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {stem}.md and {stem}.png")


def run_rows(targets, a, work):
    """Every row of the matrix, `a.rounds` times; each row's median run per broker."""
    runs = {}
    for round_ in range(a.rounds):
        order = targets if round_ % 2 == 0 else list(reversed(targets))
        for acks in ["1", "all"]:
            for producers in a.producer_counts:
                for partitions in a.partition_counts:
                    for name, bootstrap in order:
                        topic = f"perf-{acks}-{partitions}-{int(time.time() * 1000)}"
                        r = bench(bootstrap, topic, work / f"{name}.json", mode="produce",
                                  duration=a.duration, warmup=a.warmup, producers=producers,
                                  partitions=partitions, message_size=1024, acks=acks,
                                  replication_factor=3 if a.cluster else 1)
                        delete_topic(bootstrap, topic)
                        runs.setdefault((acks, producers, partitions, name), []).append(r)
    rows = []
    for acks in ["1", "all"]:
        for producers in a.producer_counts:
            for partitions in a.partition_counts:
                row = {"acks": acks, "producers": producers, "partitions": partitions}
                for name, _ in targets:
                    done = sorted((r for r in runs[(acks, producers, partitions, name)] if r),
                                  key=lambda r: r["records_per_sec"])
                    row[name] = done[len(done) // 2] if done else None
                rows.append(row)
    return rows


def fmt(r, key):
    if r is None:
        return "failed"
    if key == "records_per_sec":
        return f"{r[key]:,.0f}"
    if key == "mb_per_sec":
        return f"{r[key]:.1f}"
    return f"{r['latency_ms'][key]:.2f}"


def command_options(a):
    out = " --cluster" if a.cluster else ""
    if a.pin:
        out += f" --pin {a.pin}"
    if a.compare_to == "kafka":
        out += " --compare-to kafka"
    elif a.compare_to:
        out += f" --compare-to {a.compare_to} --compare-name {a.compare_name}"
    if a.compare_binary:
        out += f" --compare-binary {a.compare_binary} --compare-name {a.compare_name}"
    if a.producers != "1,4,16" or a.partitions != "1,8,64":
        out += f" --producers {a.producers} --partitions {a.partitions}"
    if a.rounds != 1:
        out += f" --rounds {a.rounds} (each row: the median of {a.rounds} runs per broker by records/s)"
    return out


def write_markdown(path, rows, e2e, targets, peak, a, commit, memory=None):
    cpu = cpu_model()
    lines = [
        f"# sluice bench matrix, {datetime.date.today().isoformat()}, commit {commit}"
        + (": three nodes each, replication factor 3" if a.cluster else ""),
        "",
        f"- Command: `perf/run{command_options(a)}`"
        f" (each row: `sluice bench --mode produce --duration {a.duration} --warmup {a.warmup} --message-size 1024`)",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu}, kernel `{platform.release()}`; "
        + sharing("the broker and the load generator share it."),
        "- Latency is send to acknowledgement, in ms, for an open-loop producer at full speed: it is"
        " dominated by the client's own queue, so compare it between rows and brokers, not as a floor.",
        "",
    ]
    names = [n for n, _ in targets]
    others = names[1:]
    head = "| acks | producers | partitions | " + " | ".join(
        f"{n} rec/s | {n} MB/s | {n} p50 | {n} p99 | {n} p99.9" for n in names)
    head += "".join(f" | rec/s ratio {names[0]}/{o} | p99 ratio {names[0]}/{o}" for o in others)
    lines += [head + " |", "|" + "---|" * (3 + 5 * len(names) + 2 * len(others))]
    for r in rows:
        cells = [r["acks"], str(r["producers"]), str(r["partitions"])]
        for n in names:
            cells += [fmt(r[n], k) for k in ["records_per_sec", "mb_per_sec", "p50", "p99", "p99_9"]]
        for o in others:
            x, y = r[names[0]], r[o]
            cells.append(f"{x['records_per_sec'] / y['records_per_sec']:.2f}" if x and y and y["records_per_sec"] else "-")
            cells.append(f"{x['latency_ms']['p99'] / y['latency_ms']['p99']:.2f}" if x and y and y["latency_ms"]["p99"] else "-")
        lines.append("| " + " | ".join(cells) + " |")
    if memory:
        nodes = " (each the sum over its three nodes)" if a.cluster else ""
        lines += ["", f"Resident memory after the matrix and the e2e run (VmRSS){nodes}: " + ", ".join(
            f"{n} {m:,.0f} MiB" for n, m in memory.items()) + "."]
    lines += ["", f"## e2e at half the acks=all peak ({peak:,.0f} rec/s → --rate {int(peak / 2)})", "",
              "| broker | rec/s | p50 | p90 | p99 | p99.9 | max | missing |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = e2e.get(n)
        if r is None:
            lines.append(f"| {n} | failed | | | | | | |")
            continue
        l = r["latency_ms"]
        lines.append(f"| {n} | {r['records_per_sec']:,.0f} | {l['p50']:.2f} | {l['p90']:.2f} | {l['p99']:.2f} | "
                     f"{l['p99_9']:.2f} | {l['max']:.2f} | {r['e2e_missing']} |")
    lines.append("")
    path.write_text("\n".join(lines))


def plot(path, rows):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for acks, style in [("1", "--"), ("all", "-")]:
        for partitions in [1, 8, 64]:
            pts = [(r["producers"], r["sluice"]) for r in rows
                   if r["acks"] == acks and r["partitions"] == partitions and r["sluice"]]
            if not pts:
                continue
            xs = [p for p, _ in pts]
            label = f"acks={acks}, {partitions} part."
            ax1.plot(xs, [s["records_per_sec"] for _, s in pts], style, marker="o", label=label)
            ax2.plot(xs, [s["latency_ms"]["p99"] for _, s in pts], style, marker="o", label=label)
    ax1.set(xscale="log", xlabel="producers", ylabel="records/s", title="Throughput (1 KiB records)")
    ax2.set(xscale="log", yscale="log", xlabel="producers", ylabel="p99 latency (ms)", title="p99 send→ack")
    for ax in (ax1, ax2):
        ax.set_xticks([1, 4, 16], labels=["1", "4", "16"])
        ax.grid(True, alpha=0.3)
    ax1.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
