"""The differential conformance suite: every scenario (scenarios_*.py) runs once against Kafka
4.4 and once against Sluice, on the same client (tests/kafka/protocol.py, Kafka's own message
schemas), and the two normalised observations (side.normalise) must be equal, or differ only
at the paths known.py lists, each with its line in the README's conformance table."""
import re
from pathlib import Path

import pytest

import protocol
import scenarios_cluster  # noqa: F401  (registers its scenarios)
import scenarios_groups  # noqa: F401
import scenarios_produce_fetch  # noqa: F401
import scenarios_security  # noqa: F401
import scenarios_topics  # noqa: F401
import scenarios_transactions  # noqa: F401
import scenarios_versions  # noqa: F401
from known import KNOWN
from registry import CLUSTER, SCENARIOS, SECURE, in_order
from side import Side, normalise

README = Path(__file__).resolve().parents[2] / "README.md"


def differences(kafka, sluice, path="") -> list[tuple[str, object, object]]:
    if isinstance(kafka, dict) and isinstance(sluice, dict):
        out = []
        for k in list(kafka) + [k for k in sluice if k not in kafka]:
            out += differences(kafka.get(k, "<absent>"), sluice.get(k, "<absent>"), f"{path}.{k}")
        return out
    if isinstance(kafka, list) and isinstance(sluice, list) and len(kafka) == len(sluice):
        out = []
        for i, (a, b) in enumerate(zip(kafka, sluice)):
            out += differences(a, b, f"{path}[{i}]")
        return out
    return [] if kafka == sluice else [(path, kafka, sluice)]


def matches(path: str, pattern: str) -> bool:
    """A known.py path: exact, or a prefix ending in '*'."""
    return path == pattern or (pattern.endswith("*") and path.startswith(pattern[:-1]))


def observe(side: Side, name: str):
    """The scenario's normalised observation; a broker that closes the connection instead of
    answering (as both do for a version they do not serve) is observed as that."""
    try:
        return normalise(SCENARIOS[name](side))
    except protocol.Closed:
        return "<connection closed>"
    finally:
        side.close()


def sides(request, name: str) -> tuple[Side, Side]:
    """Kafka's and Sluice's side of the pair the scenario runs on."""
    if name in CLUSTER:
        pair = request.getfixturevalue("cluster_brokers")
        return tuple(Side(k, nodes[1], 1, nodes=nodes, stop_node=stop) for k, (nodes, stop) in pair.items())
    pair = request.getfixturevalue("secure_brokers" if name in SECURE else "brokers")
    return Side("kafka", *pair["kafka"]), Side("sluice", *pair["sluice"])


@pytest.mark.parametrize("name", in_order())
def test_scenario(request, name):
    kafka_side, sluice_side = sides(request, name)
    kafka = observe(kafka_side, name)
    sluice = observe(sluice_side, name)
    found = differences(kafka, sluice)
    report = "\n".join(f"  {p}: kafka {k!r:.300} sluice {s!r:.300}" for p, k, s in found)
    known = KNOWN.get(name)
    if known is None:
        assert not found, f"{name} differs from Kafka 4.4:\n{report}"
        return
    assert found, f"{name} no longer differs from Kafka: drop it from known.py and the README's table"
    unexplained = [(p, k, s) for p, k, s in found if not any(matches(p, g) for g in known.paths)]
    assert not unexplained, f"{name} differs beyond what known.py says ({known.readme}):\n{report}"


def test_every_known_difference_is_in_the_readme():
    text = re.sub(r"\s+", " ", README.read_text())
    for name, known in KNOWN.items():
        assert name in SCENARIOS, f"known.py names {name}, which is not a scenario"
        assert known.readme in text, f"the README's conformance table lacks {known.readme!r} ({name})"


def test_at_least_120_scenarios():
    assert len(SCENARIOS) >= 120, f"{len(SCENARIOS)} scenarios"
