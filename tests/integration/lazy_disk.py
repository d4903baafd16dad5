"""A disk that loses power: a lazyfs.py mount whose unsynced writes `cut()` drops."""
import errno
import os
import subprocess
import sys
from pathlib import Path

from waiting import wait_until

DAEMON = Path(__file__).with_name("lazyfs.py")


class CannotMount(RuntimeError):
    """FUSE cannot mount here (not root, no /dev/fuse, or no libfuse2)."""


class LazyDisk:
    def __init__(self, work: Path, sync_delay_ms: int = 0):
        """`sync_delay_ms`: how long each fsync waits first (a slow disk)."""
        self.sync_delay_ms = sync_delay_ms
        self.backing = work / "backing"
        self.mount = work / "mount"
        self.log = work / "lazyfs.log"
        self.cuts = 0
        self.proc = None

    def start(self) -> "LazyDisk":
        """Mounts it, or raises CannotMount saying why."""
        self.backing.mkdir(parents=True)
        self.mount.mkdir(parents=True)
        self.proc = subprocess.Popen([sys.executable, str(DAEMON), str(self.backing), str(self.mount), str(self.log),
                                      str(self.sync_delay_ms)],
                                     stdout=subprocess.DEVNULL, stderr=open(self.log.with_suffix(".err"), "w"))
        def mounted():
            if self.proc.poll() is not None:
                raise CannotMount("the FUSE daemon exited")
            return os.path.ismount(self.mount)
        try:
            wait_until(mounted, 10, "the FUSE mount", every_s=0.05)
        except (CannotMount, AssertionError):
            self.stop()
            raise CannotMount(f"cannot mount a FUSE file system here: "
                              f"{self.log.with_suffix('.err').read_text()[-300:]} (needs root, /dev/fuse and libfuse2)")
        return self

    def cut(self) -> int:
        """The power cut: every unsynced write is lost. Stop every process using the disk
        first. Returns the bytes lost."""
        self.cuts += 1
        try:
            os.mkdir(self.mount / f".lazyfs-crash-{self.cuts}")
            raise AssertionError("the cut was not made")
        except OSError as e:
            assert e.errno == errno.ECANCELED, e
        line = self.log.read_text().splitlines()[-1]
        assert line.startswith("crash: dropped "), line
        return int(line.split()[2])

    def stop(self):
        if self.proc is None:
            return
        subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None
