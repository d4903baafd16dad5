"""Partitions spread over shards; one connection reaches them all through the mesh."""
import os
import re
from pathlib import Path

import ck
import pytest
from records import check_partition, expected_by_partition


def owners(broker, topic):
    """{partition: shard} from the broker's 'opened partition' log lines."""
    found = {}
    for shard, p in re.findall(rf"shard (\d+): opened partition {re.escape(topic)}-(\d+) ", broker.log()):
        assert int(p) not in found or found[int(p)] == int(shard), f"partition {p} opened by two shards"
        found[int(p)] = int(shard)
    return found


def test_cross_shard_produce_and_consume(make_broker):
    broker = make_broker(shards=4)
    ck.create_topic(broker.bootstrap, "xs", 8)
    own = owners(broker, "xs")
    assert sorted(own) == list(range(8))
    # The default hash spreads a topic's partitions evenly: two per shard.
    assert sorted(own.values()) == [0, 0, 1, 1, 2, 2, 3, 3]
    # One producer connection writes to all eight partitions, so at least six are forwarded.
    ck.produce(broker.bootstrap, "xs", 4000, 8, extra={"connections.max.idle.ms": 0})
    got = ck.consume(broker.bootstrap, "xs", range(8), 4000)
    want = expected_by_partition(4000, 8)
    for p in range(8):
        check_partition(got[p], want[p], f"xs[{p}]")
    # Each shard's partitions live in their own directories and hold their own records.
    for p in range(8):
        seg = broker.data_dir / f"xs-{p}" / "00000000000000000000.log"
        assert seg.stat().st_size > 0


def test_pinned_topic(make_broker):
    config = '[[sharding.pin]]\ntopic = "pinned"\nshards = [3]\n'
    broker = make_broker(shards=4, config=config)
    ck.create_topic(broker.bootstrap, "pinned", 4)
    assert set(owners(broker, "pinned").values()) == {3}
    ck.produce(broker.bootstrap, "pinned", 400, 4)
    got = ck.consume(broker.bootstrap, "pinned", range(4), 400)
    assert sum(len(v) for v in got.values()) == 400


def shard_threads(broker) -> dict[int, list[set[int]]]:
    """{shard: the CPUs each of its threads may run on, oldest thread first}, from /proc: the
    executor's thread, then its blocking thread (same name; recompression, journal making)."""
    found = {}
    tasks = sorted((Path("/proc") / str(broker.proc.pid) / "task").iterdir(), key=lambda t: int(t.name))
    for task in tasks:
        name = (task / "comm").read_text().strip()
        if m := re.fullmatch(r"shard-(\d+)-\d+", name):
            allowed = re.search(r"Cpus_allowed_list:\s*(\S+)", (task / "status").read_text()).group(1)
            cpus = set()
            for part in allowed.split(","):
                lo, _, hi = part.partition("-")
                cpus.update(range(int(lo), int(hi or lo) + 1))
            found.setdefault(int(m.group(1)), []).append(cpus)
    return found


def shard_cpus(broker) -> dict[int, set[int]]:
    """{shard: the CPUs its executor's thread may run on}."""
    return {shard: threads[0] for shard, threads in shard_threads(broker).items()}


def blocking_cpus(broker) -> dict[int, set[int]]:
    """{shard: the CPUs its blocking thread may run on}: any of the broker's."""
    return {shard: threads[1] for shard, threads in shard_threads(broker).items()}


def test_shards_are_pinned_by_default_and_placed_by_the_kernel_when_asked(make_broker):
    online = set(os.sched_getaffinity(0))
    pinned = make_broker(shards=2)
    assert shard_cpus(pinned) == {0: {0 % len(online)}, 1: {1 % len(online)}}
    assert blocking_cpus(pinned) == {0: online, 1: online}
    placed = make_broker(shards=2, config="pin_shards = false\n")
    assert shard_cpus(placed) == {0: online, 1: online}
    # Unpinned shards still own their partitions and forward to each other.
    ck.create_topic(placed.bootstrap, "placed", 4)
    assert sorted(owners(placed, "placed").values()) == [0, 0, 1, 1]
    ck.produce(placed.bootstrap, "placed", 2000, 4)
    got = ck.consume(placed.bootstrap, "placed", range(4), 2000)
    want = expected_by_partition(2000, 4)
    for p in range(4):
        check_partition(got[p], want[p], f"placed[{p}]")
    fenced = make_broker(shards=2, config="pin_shards = false\ncpus = [0]\n")
    assert shard_cpus(fenced) == {0: {0}, 1: {0}}
    assert blocking_cpus(fenced) == {0: {0}, 1: {0}}


def test_shards_stay_on_the_cpus_the_broker_was_started_on(make_broker):
    """Started under `taskset` (or a container's cpuset), the broker pins its shards among the
    CPUs it was given, never outside them."""
    online = sorted(os.sched_getaffinity(0))
    if len(online) < 2:
        pytest.skip("needs two CPUs")
    given = {online[-1]}
    os.sched_setaffinity(0, given)  # the broker inherits it
    try:
        pinned = make_broker(shards=2)
        placed = make_broker(shards=2, config="pin_shards = false\n")
    finally:
        os.sched_setaffinity(0, online)
    assert shard_cpus(pinned) == {0: given, 1: given}
    assert shard_cpus(placed) == {0: given, 1: given}
    ck.create_topic(pinned.bootstrap, "given", 2)
    ck.produce(pinned.bootstrap, "given", 200, 2)
    assert sum(len(v) for v in ck.consume(pinned.bootstrap, "given", range(2), 200).values()) == 200
