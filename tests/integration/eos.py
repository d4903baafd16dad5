"""Runs tests/clients/eos_processor.py (an exactly-once consume-transform-produce loop) as its
own process and follows its progress: the records it committed, whether it is done, and its
last lines for a failure's message."""
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

PROCESSOR = Path(__file__).resolve().parent.parent / "clients" / "eos_processor.py"


class Processor:
    def __init__(self, bootstrap: str, source: str, dest: str, group: str, tid: str, total: int):
        self.lines = []
        self.committed = 0
        self.done = False
        self.proc = subprocess.Popen([sys.executable, str(PROCESSOR), bootstrap, source, dest, group, tid,
                                      str(total)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._follow, daemon=True)
        self.reader.start()

    def _follow(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            if line.startswith("{"):
                event = json.loads(line)
                self.committed += event.get("committed", 0)
                self.done |= event.get("done", False)

    def tail(self) -> str:
        return "".join(self.lines[-30:])

    def restarts(self) -> list:
        return [line for line in self.lines if '"restart"' in line]

    def wait_for_committed(self, at_least: int, timeout_s: float = 120):
        """Waits until it committed `at_least` records; fails if it exits first."""
        deadline = time.monotonic() + timeout_s
        while self.committed < at_least and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.committed >= at_least and self.proc.poll() is None, self.tail()

    def finish(self, timeout_s: float = 240):
        """Waits for it to process everything and exit cleanly."""
        assert self.proc.wait(timeout=timeout_s) == 0, self.tail()
        self.reader.join(10)
        assert self.done, self.tail()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
