"""TLS against plaintext, in one run, on one broker (issue 19).

A broker (2 shards) with a PLAINTEXT and a SASL_SSL listener (SCRAM-SHA-512; a certificate made
here with openssl). Per round, on each listener in turn: `sluice bench` produces N records of
1 KiB (acks=all, 2 producers, 8 partitions), then consumes them (2 consumers). Reported: each
phase's throughput and the broker's CPU (utime+stime, every thread) per GiB, as medians of the
rounds, and TLS over plaintext as ratios. Then TLS handshakes per second: one client opening
and closing TLS connections as fast as it can for a few seconds, with the broker's CPU per
handshake.

Usage: perf/run --tls [--records N] [--rounds R]
"""
import argparse
import datetime
import os
import platform
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path

from cost import GIB, measured
from matrix import BINARY, ROOT, bench, cpu_model, cpu_seconds, free_port, head_commit, listening, publish

USER, PASSWORD = "perf", "perf-secret"


def certificates(d: Path):
    def openssl(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=perf-ca")
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "key.pem", "-out", "s.csr",
            "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", "s.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "cert.pem", "-days", "2", "-extfile", "san.ext")


def start(work: Path):
    plain, secure = free_port(), free_port()
    config = work / "sluice.toml"
    config.write_text(
        f'data_dir = "{work}/data"\nshards = 2\n'
        f'[[listeners]]\nname = "plain"\naddress = "127.0.0.1:{plain}"\nsecurity_protocol = "PLAINTEXT"\n'
        f'[[listeners]]\nname = "tls"\naddress = "127.0.0.1:{secure}"\nsecurity_protocol = "SASL_SSL"\n'
        f'[tls]\ncert_file = "{work}/cert.pem"\nkey_file = "{work}/key.pem"\n'
        f'[sasl]\nbootstrap_users = [{{ name = "{USER}", password = "{PASSWORD}" }}]\n')
    proc = subprocess.Popen([str(BINARY), "serve", "--config", str(config)],
                            stdout=open(work / "broker.log", "w"), stderr=subprocess.STDOUT)
    listening(proc, plain, "sluice did not start: see broker.log")
    listening(proc, secure, "sluice did not start: see broker.log")
    time.sleep(1)  # the bootstrap user
    return proc, plain, secure


def secured(work: Path) -> list[str]:
    """The bench's client settings for the SASL_SSL listener."""
    return ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512", f"sasl.username={USER}",
            f"sasl.password={PASSWORD}", f"ssl.ca.location={work}/ca.pem"]


def one_round(pid, bootstrap, work, records, extra, topic) -> dict:
    cpu_p, prod = measured([pid], lambda: bench(bootstrap, topic, work / "p.json", mode="produce", count=records,
                                              producers=2, partitions=8, message_size=1024, acks="all",
                                              client_config=extra))
    cpu_c, cons = measured([pid], lambda: bench(bootstrap, topic, work / "c.json", mode="consume", count=records,
                                              consumers=2, client_config=extra, **{"from": "earliest"}))
    assert prod and prod["errors"] == 0 and prod["records"] >= records, prod
    assert cons and cons["records"] >= records, cons
    return {"produce_rec_s": prod["records_per_sec"], "consume_rec_s": cons["records_per_sec"],
            "produce_s_per_gib": cpu_p / (prod["bytes"] / GIB), "fetch_s_per_gib": cpu_c / (cons["bytes"] / GIB)}


def handshakes(pid, port, work, seconds=5.0) -> tuple[float, float]:
    """TLS handshakes per second from one client, and broker CPU ms per handshake."""
    ctx = ssl.create_default_context(cafile=str(work / "ca.pem"))
    before, n, start = cpu_seconds(pid), 0, time.monotonic()
    while time.monotonic() - start < seconds:
        with socket.create_connection(("127.0.0.1", port)) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                n += 1
    elapsed = time.monotonic() - start
    return n / elapsed, (cpu_seconds(pid) - before) * 1000 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out-dir", default=str(ROOT / "perf" / "results"))
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sluice-tls-"))
    certificates(work)
    proc, plain, secure = start(work)
    runs = {"plaintext": [], "SASL_SSL": []}
    try:
        for r in range(a.rounds):
            order = [("plaintext", plain, []), ("SASL_SSL", secure, secured(work))]
            for name, port, extra in (order if r % 2 == 0 else order[::-1]):
                topic = f"tls-{name.lower()}-{r}"
                runs[name].append(one_round(proc.pid, f"127.0.0.1:{port}", work, a.records, extra, topic))
        rate, cpu_ms = handshakes(proc.pid, secure, work)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    med = {name: {k: sorted(x[k] for x in rs)[len(rs) // 2] for k in rs[0]} for name, rs in runs.items()}
    write(a, med, rate, cpu_ms)


def write(a, med, rate, cpu_ms):
    commit = head_commit()
    cpu = cpu_model()
    p, t = med["plaintext"], med["SASL_SSL"]
    lines = [
        f"# TLS against plaintext, {datetime.date.today().isoformat()}, commit {commit}", "",
        f"- Command: `perf/run --tls --records {a.records} --rounds {a.rounds}`",
        f"- Machine: `nproc` = {os.cpu_count()}, {cpu}, kernel `{platform.release()}`; broker and clients share it.",
        "- One broker (2 shards), two listeners: PLAINTEXT and SASL_SSL (SCRAM-SHA-512, rustls, RSA 2048).",
        "  1 KiB records, acks=all, 2 producers over 8 partitions, then 2 consumers; medians of the rounds,",
        "  listeners alternating first. Broker CPU: utime+stime of the process, from /proc.", "",
        "| listener | produce rec/s | consume rec/s | produce CPU s/GiB | fetch CPU s/GiB |",
        "|---|---|---|---|---|",
    ]
    for name, m in med.items():
        lines.append(f"| {name} | {m['produce_rec_s']:,.0f} | {m['consume_rec_s']:,.0f} | "
                     f"{m['produce_s_per_gib']:.3f} | {m['fetch_s_per_gib']:.3f} |")
    lines += [
        f"| TLS / plaintext | {t['produce_rec_s'] / p['produce_rec_s']:.2f}× | "
        f"{t['consume_rec_s'] / p['consume_rec_s']:.2f}× | {t['produce_s_per_gib'] / p['produce_s_per_gib']:.2f}× | "
        f"{t['fetch_s_per_gib'] / p['fetch_s_per_gib']:.2f}× |", "",
        f"TLS handshakes (one Python client, TLS 1.3, connect-handshake-close in a loop for 5 s): "
        f"{rate:,.0f} per second, broker CPU {cpu_ms:.2f} ms per handshake.", "",
    ]
    out = Path(a.out_dir) / f"{datetime.date.today().isoformat()}-tls.md"
    publish(lines, out)


if __name__ == "__main__":
    main()
