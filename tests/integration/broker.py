"""Starts `sluice serve` as a real process on a free port with its own data dir."""
import os
import random
import resource
import signal
import socket
import subprocess
from pathlib import Path

from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
# SLUICE_BINARY runs the tests against another build (one with a planted bug, to see a test fail).
BINARY = Path(os.environ.get("SLUICE_BINARY", ROOT / "target" / "release" / "sluice"))


_GIVEN_PORTS = set()


def _ephemeral_ports() -> range:
    try:
        low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def _worker_ports() -> range:
    """This test process's share of ports 10000-30000: the whole of it, or under pytest-xdist
    (scripts/test runs two workers) the worker's own slice, so that two workers never hand out
    the same port between its check and the broker's bind."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    width = 20_000 // max(workers, 1)
    return range(10_000 + worker * width, 10_000 + (worker + 1) * width)


def free_port() -> int:
    """A port nobody holds now, outside the kernel's ephemeral range, and never given twice in
    this process. glommio binds with SO_REUSEPORT, so a clash would go unnoticed; and a port
    from the ephemeral range (what binding port 0 returns) can be taken by any client's
    outgoing connection before the broker binds it (seen: an RPC listener's EADDRINUSE)."""
    ephemeral = _ephemeral_ports()
    ports = _worker_ports()
    while True:
        port = random.choice(ports)
        if port in _GIVEN_PORTS or port in ephemeral:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN_PORTS.add(port)
        return port


class Broker:
    def __init__(self, data_dir: Path, shards: int = 2, extra_args=(), config: str | None = None,
                 nofile: int | None = None, binary: Path = BINARY, work_dir: Path | None = None):
        """`work_dir`: where the broker's log and config file go (default: beside the data dir;
        a test whose data dir is on a disk that loses unsynced writes keeps them elsewhere)."""
        self.data_dir = Path(data_dir)
        self.work_dir = Path(work_dir) if work_dir is not None else self.data_dir.parent
        self.binary = Path(binary)
        # The broker's descriptor limit (soft and hard), as `ulimit -n` would set it.
        self.nofile = nofile
        self.shards = shards
        self.extra_args = list(extra_args)
        self.config = config
        self.port = free_port()
        self.proc = None
        self.log_path = self.work_dir / f"broker-{self.port}.log"
        self.starts = 0
        # Extra environment for the process (SLUICE_FAULT_HOOKS=1 for the cut-link hook).
        self.env = {}

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 20.0):
        self.launch()
        wait_until(self.serving, timeout_s, f"the broker to start in {timeout_s} s", state=self.log, every_s=0.05)
        return self

    def serving(self) -> bool:
        """Whether every shard of this start listens and the port accepts a connection. Raises
        RuntimeError if the process exited."""
        if self.proc.poll() is not None:
            sockets = subprocess.run(["ss", "-tanp"], capture_output=True, text=True).stdout
            mine = [line for line in sockets.splitlines() if f":{self.port} " in line]
            raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}\nsockets: {mine}")
        if self.log().count("serving") < self.shards * self.starts:
            return False
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def launch(self):
        """Starts the process and returns at once (`start` also waits until it serves)."""
        args = [str(self.binary), "serve", "--data-dir", str(self.data_dir), "--shards", str(self.shards)]
        # A config with [[listeners]] names its own (@PORT@ stands for this broker's port, where
        # its PLAINTEXT listener goes); otherwise --listen gives the one listener.
        if self.config is None or "[[listeners]]" not in self.config:
            args += ["--listen", self.bootstrap]
        if self.config is not None:
            cfg = self.work_dir / f"sluice-{self.port}.toml"
            cfg.write_text(self.config.replace("@PORT@", str(self.port)))
            args += ["--config", str(cfg)]
        args += self.extra_args
        self.starts += 1
        log = open(self.log_path, "a")
        log.write(f"\n==== start {self.starts} ====\n")
        log.flush()
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"), RUST_BACKTRACE="1", **self.env)
        limit = self.nofile

        def set_limit():
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=set_limit)
        return self

    def kill(self):
        """SIGKILL: no flush, no clean shutdown."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def freeze(self, timeout_s: float = 10.0):
        """SIGSTOP, and wait until every thread has stopped: kill(2) returns before the signal
        takes effect, and a broker thread still running may serve a request sent meanwhile
        (seen under load: a "frozen" leader committed a produce sent after the SIGSTOP)."""
        self.proc.send_signal(signal.SIGSTOP)
        wait_until(self._all_threads_stopped, timeout_s, f"broker {self.proc.pid} to stop")

    def _all_threads_stopped(self) -> bool:
        states = []
        for stat in Path(f"/proc/{self.proc.pid}/task").glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except OSError:
                continue  # a thread that just ended
        return bool(states) and all(state in ("T", "t") for state in states)

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM and wait: the broker must finish requests and flush."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            return self.proc.wait(timeout=timeout_s)
        return self.proc.returncode if self.proc else 0

    def restart(self):
        self.kill()
        return self.start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def assert_no_panic(self):
        text = self.log()
        assert "panicked" not in text, text[-5000:]
