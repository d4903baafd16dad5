import subprocess
import sys
from pathlib import Path

import pytest

# tests/kafka's modules (Kafka's own request schemas, the Kafka peer) for every test module.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "kafka"))

from broker import Broker  # noqa: E402
from cluster import REPLICATED, Cluster  # noqa: E402
from lazy_disk import CannotMount, LazyDisk  # noqa: E402


@pytest.fixture
def make_broker(tmp_path):
    """Factory for brokers on free ports; every broker is stopped and checked for panics."""
    brokers = []

    def make(shards: int = 2, data_dir=None, **kwargs) -> Broker:
        """`data_dir`: default a fresh one in the test's temporary dir (the log beside it)."""
        b = Broker(data_dir or tmp_path / f"data-{len(brokers)}", shards=shards, work_dir=tmp_path, **kwargs)
        brokers.append(b)
        return b.start()

    yield make
    # Every broker is killed before any is checked, so a failed check leaves none running.
    for b in brokers:
        b.kill()
    for b in brokers:
        b.assert_no_panic()


@pytest.fixture
def broker(make_broker) -> Broker:
    return make_broker()


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One broker for a whole module, for modules whose clients are slow to start (JVMs):
    each test uses topics and groups of its own."""
    root = tmp_path_factory.mktemp("node")
    b = Broker(root / "data", shards=2, work_dir=root).start()
    yield b
    b.kill()
    b.assert_no_panic()


@pytest.fixture(scope="module")
def three(tmp_path_factory, request):
    """One three-node cluster for a whole module (as `node`), configured by the module's
    THREE_NODE_CONFIG (default REPLICATED)."""
    config = getattr(request.module, "THREE_NODE_CONFIG", REPLICATED)
    c = Cluster(tmp_path_factory.mktemp("three"), 3, config=config).start()
    try:
        c.wait_for_brokers({1, 2, 3})
        yield c
    finally:
        c.stop()


@pytest.fixture
def lazy_disk(tmp_path):
    """A mounted disk whose `cut()` loses every write not yet synced (lazyfs.py). Put the
    data dirs of a power-loss test on it; unmounted when the test ends."""
    try:
        disk = LazyDisk(tmp_path / "lazy").start()
    except CannotMount as e:
        pytest.skip(str(e))
    yield disk
    disk.stop()


def openssl(*args, cwd) -> str:
    """Runs openssl; what it printed."""
    return subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; the broker's certificate (127.0.0.1 and localhost); carol's client certificate
    signed by the CA; mallory's, self-signed; dave's, signed by the CA but of X.509 version 1."""
    d = tmp_path_factory.mktemp("pki")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
            "-days", "2", "-subj", "/CN=sluice-test-ca", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    (d / "client.ext").write_text("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    for name, subject, ext in [("server", "/CN=localhost", "server.ext"),
                               ("carol", "/O=acme/OU=eng/CN=carol", "client.ext")]:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}-key.pem", "-out",
                f"{name}.csr", "-subj", subject, cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", ext, cwd=d)
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "mallory-key.pem", "-out",
            "mallory.pem", "-days", "2", "-subj", "/CN=mallory", cwd=d)
    # Dave's is X.509 version 1, as the recipe in Kafka's security documentation makes one
    # (`openssl x509 -req` with no extensions), signed by the CA.
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "dave-key.pem", "-out", "dave.csr",
            "-subj", "/CN=dave", cwd=d)
    openssl("x509", "-req", "-in", "dave.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", "dave.pem", "-days", "2", cwd=d)
    return d
