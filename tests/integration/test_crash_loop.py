"""The standing durability test: scripts/crash-loop at 20 cycles of load, SIGKILL, restart."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_crash_loop_20_cycles():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "crash-loop"), "--cycles", "20"],
                       capture_output=True, text=True, timeout=900)
    out = p.stdout
    assert p.returncode == 0, out[-4000:] + p.stderr[-2000:]
    assert "cycle 20/20" in out and "none lost or duplicated" in out, out[-2000:]
