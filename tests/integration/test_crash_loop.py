"""The standing durability test: scripts/crash-loop at 20 cycles of load, SIGKILL, restart, and
10 more with a power cut after each SIGKILL."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_crash_loop_20_cycles():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "crash-loop"), "--cycles", "20"],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout
    assert p.returncode == 0, out[-4000:] + p.stderr[-2000:]
    assert "cycle 20/20" in out and "none lost or duplicated" in out, out[-2000:]


def test_power_loss_loop_10_cycles():
    """The same loop on a disk that loses every unsynced write, with a power cut after each
    SIGKILL (tests/integration/lazyfs.py; skipped where FUSE cannot mount)."""
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "crash-loop"), "--cycles", "10", "--power-loss"],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout
    if p.returncode == 77:
        pytest.skip(out.strip())
    assert p.returncode == 0, out[-4000:] + p.stderr[-2000:]
    assert "cycle 10/10" in out and "none lost or duplicated" in out, out[-2000:]
    lost = int(out.split(" unsynced bytes lost to power cuts")[0].rsplit(" ", 1)[-1])
    assert lost > 0, f"no cut took anything, so the loop tested nothing:\n{out[-2000:]}"
