"""Issue 38: rolling upgrades. A cluster of the previous release (built once from its tag's
commit by scripts/previous-release) is replaced node by node with this build under an acks=all
load and a consumer group, one node goes back to the previous release and forward again (a
downgrade before finalising), and then `metadata.version` is raised (UpdateFeatures, KIP-584):
refused while any registered broker runs the previous release, taken once all run this one,
never lowered again. At the new level in-sync changes carry partition epochs. Clients see no
error and lose nothing throughout."""
import subprocess
from pathlib import Path

import pytest
from broker import BINARY, ROOT
from history import History
from test_replication import (GroupReader, all_in_sync, create_replicated, finish_without_client_errors,
                              make_cluster)  # noqa: F401
from waiting import wait_until

import peer  # noqa: E402  (Kafka 4.4's own tools)
import protocol  # Kafka's own schemas: any request at any version (on the path by conftest)

PREVIOUS = ROOT / "target" / "previous" / "v0.1.0" / "sluice"
METADATA_VERSION = "metadata.version"
INVALID_UPDATE_VERSION = 95


def finalized(port: int) -> dict:
    """The features node `port` says are finalised: {name: level}."""
    with protocol.Connection("127.0.0.1", port, timeout_s=5) as c:
        r = c.send("ApiVersions", 3, {"ClientSoftwareName": "upgrade-test", "ClientSoftwareVersion": "1"})
    return {f["Name"]: f["MaxVersionLevel"] for f in r["FinalizedFeatures"]}


def update_features(port: int, level: int) -> tuple[int, str | None]:
    """UpdateFeatures v1 raising metadata.version to `level` through node `port`."""
    with protocol.Connection("127.0.0.1", port, timeout_s=30) as c:
        r = c.send("UpdateFeatures", 1, {"timeoutMs": 30000, "FeatureUpdates": [
            {"Feature": METADATA_VERSION, "MaxVersionLevel": level, "UpgradeType": 1}],
            "ValidateOnly": False})
    return r["ErrorCode"], r["ErrorMessage"]


def replace(cluster, node: int, binary: Path, h: History):
    """Stops node `node`, starts it on `binary` with the same data dir, and waits until it is
    back in sync and the load has moved on."""
    n = cluster.nodes[node]
    before = len(h.acked)
    assert n.stop() == 0, "a clean exit after SIGTERM"
    n.binary = binary
    n.start()
    wait_until(lambda: all_in_sync(cluster, "upgrade", 1), 60, f"node {node} on {binary} back in sync")
    wait_until(lambda: len(h.acked) > before + 300, 60, f"acknowledgements after node {node}'s restart")


@pytest.mark.timeout(600)
def test_a_rolling_upgrade_from_the_previous_release_under_load(make_cluster):
    assert PREVIOUS.exists(), f"{PREVIOUS} is missing: run scripts/previous-release (scripts/test does)"
    old = subprocess.run([PREVIOUS, "--version"], capture_output=True, text=True, check=True).stdout
    new = subprocess.run([BINARY, "--version"], capture_output=True, text=True, check=True).stdout
    assert old != new, (old, new)
    cluster = make_cluster(3, start=False)
    for n in cluster.nodes.values():
        n.binary = PREVIOUS
    cluster.start()
    create_replicated(cluster, "upgrade", 1, 2)
    assert METADATA_VERSION not in finalized(cluster.nodes[1].port), "the previous release knows no levels"
    bootstrap = ",".join(n.bootstrap for n in cluster.nodes.values())
    h = History(bootstrap, "upgrade")
    h.thread.start()
    reader = GroupReader(bootstrap, "upgrade", "upgraders")
    wait_until(lambda: len(h.acked) > 300 and len(reader.got) > 0, 60, "load flowing")

    replace(cluster, 1, BINARY, h)
    # A new node runs at the level the cluster is at, beside nodes that know no levels.
    assert finalized(cluster.nodes[1].port)[METADATA_VERSION] == 1
    # Refused whichever node is the active controller: this build's (two brokers say no levels)
    # or the previous release's (it cannot read the operation).
    code, message = update_features(cluster.nodes[1].port, 2)
    assert code == INVALID_UPDATE_VERSION and "an older Sluice" in message, (code, message)
    replace(cluster, 2, BINARY, h)
    replace(cluster, 3, BINARY, h)
    # A downgrade before finalising: node 3 goes back to the previous release, and forward.
    replace(cluster, 3, PREVIOUS, h)
    # Refused by a controller of this build (a broker that says no levels), or by the previous
    # release's node when it is the active controller (it cannot read the operation).
    wait_until(lambda: update_features(cluster.nodes[1].port, 2)[0] == INVALID_UPDATE_VERSION, 30,
               "the controller refusing the level while a node runs the previous release",
               state=lambda: update_features(cluster.nodes[1].port, 2))
    code, message = update_features(cluster.nodes[1].port, 2)
    assert "an older Sluice" in message or "supports 1..=1" in message, message
    replace(cluster, 3, BINARY, h)

    # Every node runs this build: the level is raised (once each has told the controller).
    wait_until(lambda: update_features(cluster.nodes[2].port, 2)[0] == 0, 30, "metadata.version 2 finalised")
    wait_until(lambda: all(finalized(n.port).get(METADATA_VERSION) == 2 for n in cluster.live()), 30,
               "every node serving metadata.version 2")
    code, message = update_features(cluster.nodes[1].port, 1)
    assert code == INVALID_UPDATE_VERSION and "cannot be lowered" in message, (code, message)
    # Kafka's own kafka-features tool sees the level, and is refused a downgrade with the reason.
    features = ["org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", cluster.nodes[3].bootstrap]
    described = peer.java(*features, "describe", timeout=60).stdout
    assert "Feature: metadata.version" in described and "FinalizedVersionLevel: UNKNOWN 2" in described, described
    lowered = subprocess.run(["java", "-cp", f"{peer.LIBS}/*", *features, "downgrade", "--feature",
                              "metadata.version=1"], capture_output=True, text=True, timeout=60)
    assert lowered.returncode != 0 and "cannot be lowered from 2 to 1" in lowered.stdout + lowered.stderr, lowered
    # At the new level, in-sync changes carry partition epochs: a restart shrinks and grows
    # the in-sync set again under load.
    replace(cluster, 2, BINARY, h)
    assert any("upgrade-0 in sync" in line and "at partition epoch" in line
               for n in cluster.nodes.values() for line in n.log().splitlines()), "an epoch-checked change"
    finish_without_client_errors(cluster, h, reader, bootstrap, "upgrade")
