"""Polling for a condition the broker reaches on its own time (rebalances, retention passes).
Every wait in the tests goes through here: a condition, a bound, and what to say on a timeout."""
import time


def wait_until(pred, timeout_s=60, what="condition", state=None, every_s=0.1):
    """Polls `pred` every `every_s` until it is true. `state`, when given, says in the failure
    where things stood (a callable: its value is read only on the timeout). `pred` may raise to
    fail at once (a process that exited, an error no retry fixes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}" + (f": {state()}" if state else ""))
