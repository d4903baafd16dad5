"""Runs tests/clients/eos_processor.py (an exactly-once consume-transform-produce loop) as its
own process and follows its progress: the records it committed, whether it is done, and its
last lines for a failure's message.

With `stall_s`, a processor that commits nothing for that long is killed and started again, as
a liveness probe would: librdkafka can hang in `send_offsets_to_transaction` once the broker
it cached as the group coordinator leaves the metadata (its issues #5456 and #5511), which a
killed node does. The new instance fences the old one, so exactly-once still holds, and a
broker that stays stuck fails the test all the same."""
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from waiting import wait_until

PROCESSOR = Path(__file__).resolve().parent.parent / "clients" / "eos_processor.py"
# Starts of a stalled processor a run allows.
MAX_STARTS = 4


class Processor:
    def __init__(self, bootstrap: str, source: str, dest: str, group: str, tid: str, total: int,
                 stall_s: float | None = None):
        self.args = [sys.executable, str(PROCESSOR), bootstrap, source, dest, group, tid, str(total)]
        self.stall_s = stall_s
        self.lines = []
        self.committed = 0
        self.last_progress = time.monotonic()
        self.done = False
        self.starts = 0
        self._start()

    def _start(self):
        self.starts += 1
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._follow, args=(self.proc,), daemon=True)
        self.reader.start()

    def _follow(self, proc):
        for line in proc.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                event = json.loads(line)
                if event.get("committed"):
                    self.committed += event["committed"]
                    self.last_progress = time.monotonic()
                self.done |= event.get("done", False)

    def tail(self) -> str:
        return "".join(self.lines[-30:])

    def restarts(self) -> list:
        return [line for line in self.lines if '"restart"' in line or "stalled" in line]

    def stalls(self) -> str:
        """What it printed around each stall (the stacks of the stalled instance)."""
        at = [i for i, line in enumerate(self.lines) if line.startswith("-- stalled")]
        return "".join("".join(self.lines[max(i - 5, 0):i + 40]) for i in at)

    def wait_for_committed(self, at_least: int, timeout_s: float = 120):
        """Waits until it committed `at_least` records; fails if it exits first."""
        def committed():
            assert self.proc.poll() is None, self.tail()
            return self.committed >= at_least
        wait_until(committed, timeout_s, f"{at_least} records committed", state=self.tail, every_s=0.05)

    def finish(self, timeout_s: float = 240):
        """Waits for it to process everything and exit cleanly (restarting it where it stalls)."""
        def exited():
            stalled = self.stall_s is not None and time.monotonic() - self.last_progress > self.stall_s
            if self.proc.poll() is None and stalled and self.starts < MAX_STARTS:
                self._restart_stalled()
            return self.proc.poll() is not None
        wait_until(exited, timeout_s, f"the processor to finish in {timeout_s} s", state=self.tail)
        assert self.proc.returncode == 0, self.tail()
        self.reader.join(10)
        assert self.done, self.tail()

    def _restart_stalled(self):
        """Has the stalled instance print its stacks (faulthandler, on SIGUSR1), then kills it and
        starts another."""
        self.lines.append(f"-- stalled for {self.stall_s} s; its stacks, then killed and started again\n")
        dumped_from = len(self.lines)
        self.proc.send_signal(signal.SIGUSR1)
        try:
            wait_until(lambda: any("most recent call first" in line for line in self.lines[dumped_from:]), 5,
                       "the stalled processor's stacks")
        except AssertionError:
            self.lines.append("-- (no stacks came within 5 s)\n")
        self.stop()
        self.last_progress = time.monotonic()
        self._start()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
