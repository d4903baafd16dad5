"""Polling for a condition the broker reaches on its own time (rebalances, retention passes)."""
import time


def wait_until(pred, timeout_s=60, what="condition", state=None):
    """`state`, when given, says in the failure where things stood (a callable: its value is
    read only on the timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f": {state()}" if state else ""))
