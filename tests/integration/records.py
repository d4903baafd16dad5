"""Deterministic test records and the checks every round-trip test applies."""
import hashlib

BASE_TS_MS = 1_700_000_000_000


def record(i: int, partitions: int):
    """Record i: its partition, key, value, headers and timestamp, all derived from i."""
    value = hashlib.sha256(str(i).encode()).digest() * (1 + i % 7)
    headers = [("idx", str(i).encode()), ("h2", bytes([i % 256]) * (i % 5))]
    return {
        "partition": i % partitions,
        "key": f"key-{i}".encode(),
        "value": value,
        "headers": headers,
        "timestamp": BASE_TS_MS + i,
    }


def expected_by_partition(count: int, partitions: int):
    """Per partition, the records in send order (offset = position in this list)."""
    out = {p: [] for p in range(partitions)}
    for i in range(count):
        r = record(i, partitions)
        out[r["partition"]].append(r)
    return out


def check_partition(got, want, label: str):
    """got: list of (offset, key, value, headers, timestamp). Offsets contiguous from 0 and
    every field byte-equal to what was sent."""
    assert len(got) == len(want), f"{label}: {len(got)} records, expected {len(want)}"
    for n, (g, w) in enumerate(zip(got, want)):
        offset, key, value, headers, ts = g
        assert offset == n, f"{label}: offset {offset} at position {n}"
        assert key == w["key"], f"{label}@{n}: key {key!r} != {w['key']!r}"
        assert value == w["value"], f"{label}@{n}: value differs"
        assert list(headers) == w["headers"], f"{label}@{n}: headers {headers!r} != {w['headers']!r}"
        assert ts == w["timestamp"], f"{label}@{n}: timestamp {ts} != {w['timestamp']}"
