"""Polling for a condition the broker reaches on its own time (rebalances, retention passes)."""
import time


def wait_until(pred, timeout_s=60, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
