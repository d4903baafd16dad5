"""The `sluice serve` contract: flags, config validation, clean shutdown."""
import subprocess

from broker import BINARY, free_port


def run_serve(tmp_path, config_text, *extra):
    cfg = tmp_path / "c.toml"
    cfg.write_text(config_text)
    return subprocess.run([str(BINARY), "serve", "--config", str(cfg), "--data-dir", str(tmp_path / "d"),
                           "--listen", f"127.0.0.1:{free_port()}", *extra],
                          capture_output=True, text=True, timeout=30)


def test_unknown_key_stops_startup(tmp_path):
    p = run_serve(tmp_path, "[log]\nsegmnt_bytes = 5\n")
    assert p.returncode != 0
    assert "segmnt_bytes" in p.stderr


def test_bad_value_stops_startup(tmp_path):
    p = run_serve(tmp_path, "[log]\nsegment_bytes = 12\n")
    assert p.returncode != 0
    assert "log.segment_bytes" in p.stderr
    p = run_serve(tmp_path, "shards = \"many\"\n")
    assert p.returncode != 0
    assert "shards" in p.stderr


def test_flags_override_file(tmp_path, make_broker):
    broker = make_broker(shards=3, config="shards = 1\n")
    assert broker.log().count("serving") == 3


def test_sigterm_flushes_and_exits_zero(broker):
    import ck
    ck.create_topic(broker.bootstrap, "bye", 1)
    ck.produce(broker.bootstrap, "bye", 100, 1, extra={"acks": "1"})
    assert broker.stop() == 0
    assert (broker.data_dir / "bye-0" / ".clean_shutdown").exists()
    broker.start()
    got = ck.consume_to_end(broker.bootstrap, "bye", [0])
    assert len(got[0]) == 100


def test_default_data_dir_is_dot_data(tmp_path):
    """The README's command: no --data-dir, so data goes to ./data of the working directory."""
    import socket

    import ck
    from waiting import wait_until

    port = free_port()
    log = open(tmp_path / "broker.log", "w")
    proc = subprocess.Popen([str(BINARY), "serve", "--listen", f"127.0.0.1:{port}", "--shards", "2"],
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    try:
        def serving():
            assert proc.poll() is None, (tmp_path / "broker.log").read_text()
            return (tmp_path / "broker.log").read_text().count("serving") >= 2
        wait_until(serving, 20, "both shards serving", state=(tmp_path / "broker.log").read_text)
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        ck.create_topic(f"127.0.0.1:{port}", "here", 1)
        ck.produce(f"127.0.0.1:{port}", "here", 10, 1)
        assert (tmp_path / "data" / "here-0").is_dir()
    finally:
        proc.terminate()
        assert proc.wait(timeout=15) == 0
