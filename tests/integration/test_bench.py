"""`sluice bench` against a real broker, in each mode, and against a port nobody listens on."""
import json
import subprocess

from broker import BINARY, free_port


def bench(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    p = subprocess.run([str(BINARY), "bench", *args, "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "records/s" in p.stdout and "latency p99.99" in p.stdout, p.stdout
    return json.loads(out.read_text())


def check_figures(r):
    assert r["records"] > 0 and r["bytes"] > 0
    assert r["records_per_sec"] > 0 and r["mb_per_sec"] > 0
    assert r["errors"] == 0
    lat = r["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["p99_9"] <= lat["p99_99"] <= lat["max"], lat
    assert r["nproc"] >= 1 and r["kernel"] and r["sluice_version"] and "bench" in r["command"]


def test_each_mode(tmp_path, broker):
    b = broker.bootstrap
    produced = bench(tmp_path, "produce", "--bootstrap", b, "--topic", "bench", "--mode", "produce",
                     "--duration", "3", "--warmup", "1", "--producers", "2", "--partitions", "4",
                     "--message-size", "512", "--acks", "all", "--keys", "random")
    check_figures(produced)
    assert produced["mode"] == "produce"

    consumed = bench(tmp_path, "consume", "--bootstrap", b, "--topic", "bench", "--mode", "consume",
                     "--count", "20000", "--consumers", "2")
    check_figures(consumed)
    assert consumed["records"] >= 20000

    e2e = bench(tmp_path, "e2e", "--bootstrap", b, "--topic", "bench-e2e", "--mode", "e2e", "--duration", "3",
                "--rate", "3000", "--producers", "2", "--consumers", "2", "--partitions", "4", "--compression", "lz4")
    check_figures(e2e)
    # Every record acknowledged in e2e mode was received, exactly once.
    assert e2e["e2e_missing"] == 0 and e2e["e2e_duplicates"] == 0
    assert e2e["records"] >= 3000 * 2  # ~3000/s for 3 s, minus what the start-up ate


def test_count_mode_produces_exactly_count(tmp_path, broker):
    r = bench(tmp_path, "count", "--bootstrap", broker.bootstrap, "--topic", "counted", "--count", "5000",
              "--acks", "1", "--compression", "zstd")
    assert r["records"] == 5000


def test_unreachable_broker_is_a_clear_error(tmp_path):
    port = free_port()  # nothing listens there
    p = subprocess.run([str(BINARY), "bench", "--bootstrap", f"127.0.0.1:{port}", "--topic", "t", "--duration", "1"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert f"cannot reach a broker at 127.0.0.1:{port}" in p.stderr, p.stderr
