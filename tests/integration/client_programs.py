"""What the tests of other languages' clients share (tests/java, tests/go: programs that print
one JSON object per run): running a program, reading a topic back as text, and the checks on
an idempotent producer's records (key `k<i>`, value `v<i>`)."""
import json
import subprocess

import ck


def run_json(command: list, timeout: float = 180) -> dict:
    """Runs `command` to completion; the JSON object on the last line it printed."""
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command[-3:]} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


def read_text(bootstrap, topic, partitions, isolation="read_committed"):
    """Every record of `topic` as text: (key, value, partition, offset)."""
    return [(k.decode(), v.decode(), p, o)
            for p, o, k, v, _ in ck.read_everything(bootstrap, topic, partitions, isolation)]


def acked_is_the_log(acked, bootstrap, topic, partitions):
    """An idempotent producer's acknowledgements [key, partition, offset] are exactly the log,
    gapless from 0, each value `v<i>` for key `k<i>`. The log, as `read_text` reads it."""
    log = read_text(bootstrap, topic, partitions)
    assert sorted(map(tuple, acked)) == sorted((k, p, o) for k, _, p, o in log)
    assert all(v == "v" + k[1:] for k, v, _, _ in log)
    for p in range(partitions):
        offsets = [o for _, _, q, o in log if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p} has gaps: {offsets[:10]}"
    return log


def log_ends(topic, log) -> dict:
    """Each non-empty partition's end offset, as a group that read `log` commits it."""
    ends = {}
    for _, _, p, o in log:
        ends[f"{topic}-{p}"] = max(ends.get(f"{topic}-{p}", 0), o + 1)
    return ends
