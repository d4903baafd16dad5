"""A FUSE file system that loses what was not synced, for power-loss tests (in the spirit of
Jepsen's LazyFS). Run as `python lazyfs.py BACKING MOUNT LOG [SYNC_DELAY_MS]`.

Every file operation passes through to BACKING, except that written bytes stay in this
process's memory until the file is fsynced or fdatasynced: reads see them, the backing file
does not. `mkdir MOUNT/.lazyfs-crash-<anything>` is the power cut: every unsynced write is
dropped (the mkdir fails with ECANCELED once that is done) and LOG gets a line
`crash: dropped N bytes in M files`. Stop every process using the mount before the cut, as
power loss would, and start them again after it.

Names are as lazy as POSIX allows: a create, mkdir, rename, unlink or rmdir reaches BACKING at
once, but lasts a cut only once the directory holding the name (both directories, for a
rename) was fsynced after it; the cut undoes the others, newest first (a removed file is kept
aside in a trash directory beside BACKING until then). So a file that was created and fsynced
but whose directory never was is gone after a cut, as it may be on a real file system. Size
changes (truncate) last at once.
"""
import errno
import os
import shutil
import sys
import threading
import time

from fuse import FUSE, FuseOSError, Operations

CRASH_PREFIX = "/.lazyfs-crash"


class LazyFS(Operations):
    def __init__(self, backing: str, log_path: str, sync_delay_ms: int = 0):
        self.backing = backing
        # A slow disk: each fsync and fdatasync (of a file or a directory) first waits this long.
        self.sync_delay_s = sync_delay_ms / 1000
        self.log_path = log_path
        self.mutex = threading.Lock()
        # path -> [(offset, bytes)] written since the path's last sync, in write order.
        self.pending: dict[str, list[tuple[int, bytes]]] = {}
        # Name changes not yet durable, oldest first: [directories still to be fsynced, undo].
        self.names: list[tuple[set[str], callable]] = []
        self.trash = backing.rstrip("/") + ".trash"
        os.makedirs(self.trash, exist_ok=True)
        self.trashed = 0

    def _real(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _log(self, line: str):
        with open(self.log_path, "a") as f:
            f.write(line + "\n")

    # --- the lazy part ----------------------------------------------------------------------

    def _pending_end(self, path: str) -> int:
        return max((off + len(data) for off, data in self.pending.get(path, [])), default=0)

    def getattr(self, path, fh=None):
        st = os.lstat(self._real(path))
        attrs = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                             "st_atime", "st_mtime", "st_ctime")}
        with self.mutex:
            attrs["st_size"] = max(attrs["st_size"], self._pending_end(path))
        return attrs

    def read(self, path, size, offset, fh):
        with self.mutex:
            end = max(os.fstat(fh).st_size, self._pending_end(path))
            size = max(0, min(size, end - offset))
            buf = bytearray(os.pread(fh, size, offset).ljust(size, b"\0"))
            for off, data in self.pending.get(path, []):
                lo, hi = max(off, offset), min(off + len(data), offset + size)
                if lo < hi:
                    buf[lo - offset:hi - offset] = data[lo - off:hi - off]
            return bytes(buf)

    def write(self, path, data, offset, fh):
        with self.mutex:
            self.pending.setdefault(path, []).append((offset, bytes(data)))
        return len(data)

    def fsync(self, path, datasync, fh):
        time.sleep(self.sync_delay_s)
        with self.mutex:
            for off, data in self.pending.pop(path, []):
                os.pwrite(fh, data, off)
            os.fsync(fh)

    def truncate(self, path, length, fh=None):
        with self.mutex:
            writes = []
            for off, data in self.pending.get(path, []):
                if off < length:
                    writes.append((off, data[:length - off]))
            if path in self.pending:
                self.pending[path] = writes
            os.truncate(self._real(path), length)

    def crash(self) -> None:
        with self.mutex:
            files = len(self.pending)
            dropped = sum(len(d) for writes in self.pending.values() for _, d in writes)
            self.pending.clear()
            undone = len(self.names)
            for _, undo in reversed(self.names):
                undo()
            self.names.clear()
        self._log(f"crash: dropped {dropped} bytes in {files} files, undid {undone} name changes")

    # --- lazy names -------------------------------------------------------------------------

    def _note(self, paths, undo):
        """A name change under the directories of `paths`, undone at a cut unless they are all
        fsynced first. The caller holds the mutex."""
        self.names.append(({os.path.dirname(p) for p in paths}, undo))

    def _keep_aside(self, path: str) -> str:
        """A hard link to the file at `path` in the trash, to restore it from."""
        self.trashed += 1
        kept = os.path.join(self.trash, str(self.trashed))
        os.link(self._real(path), kept)
        return kept

    def _restore(self, kept: str, path: str):
        return lambda: os.path.lexists(kept) and os.link(kept, self._real(path))

    def _remove(self, path: str):
        def undo():
            real = self._real(path)
            if os.path.isdir(real) and not os.path.islink(real):
                shutil.rmtree(real, ignore_errors=True)
            elif os.path.lexists(real):
                os.unlink(real)
        return undo

    # --- names: straight through, pending writes follow them --------------------------------

    def rename(self, old, new):
        with self.mutex:
            real_new = self._real(new)
            replaced = self._keep_aside(new) if os.path.isfile(real_new) else None
            os.rename(self._real(old), real_new)
            moved = self.pending.pop(old, None)
            self.pending.pop(new, None)
            if moved is not None:
                self.pending[new] = moved

            def undo():
                os.rename(real_new, self._real(old))
                if replaced is not None:
                    os.link(replaced, real_new)
            self._note([old, new], undo)

    def unlink(self, path):
        with self.mutex:
            kept = self._keep_aside(path)
            os.unlink(self._real(path))
            self.pending.pop(path, None)
            self._note([path], self._restore(kept, path))

    def mkdir(self, path, mode):
        if path.startswith(CRASH_PREFIX):
            self.crash()
            raise FuseOSError(errno.ECANCELED)
        with self.mutex:
            os.mkdir(self._real(path), mode)
            self._note([path], self._remove(path))

    def rmdir(self, path):
        with self.mutex:
            mode = os.stat(self._real(path)).st_mode
            os.rmdir(self._real(path))
            self._note([path], lambda: os.mkdir(self._real(path), mode))

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._real(path))

    def create(self, path, mode, fi=None):
        with self.mutex:
            self.pending.pop(path, None)
            new = not os.path.lexists(self._real(path))
            fd = os.open(self._real(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)
            if new:
                self._note([path], self._remove(path))
            return fd

    def open(self, path, flags):
        # Read and write through one descriptor whatever the caller asked: the kernel checks
        # the caller's access mode, and fsync must be able to write the pending bytes.
        with self.mutex:
            if flags & os.O_TRUNC:
                self.pending.pop(path, None)
            return os.open(self._real(path), os.O_RDWR | (flags & os.O_TRUNC))

    def release(self, path, fh):
        os.close(fh)  # a close syncs nothing

    def flush(self, path, fh):
        return 0

    def fsyncdir(self, path, datasync, fh):
        time.sleep(self.sync_delay_s)
        with self.mutex:
            fd = os.open(self._real(path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            for dirs, _ in self.names:
                dirs.discard(path)
            self.names = [n for n in self.names if n[0]]

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def utimens(self, path, times=None):
        os.utime(self._real(path), times)

    def statfs(self, path):
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def access(self, path, amode):
        if not os.access(self._real(path), amode):
            raise FuseOSError(errno.EACCES)


def main():
    backing, mount, log_path = sys.argv[1:4]
    sync_delay_ms = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    # No attribute or name caching in the kernel: after a cut, sizes must come from here.
    FUSE(LazyFS(backing, log_path, sync_delay_ms), mount, foreground=True, nothreads=False,
         attr_timeout=0, entry_timeout=0, negative_timeout=0)


if __name__ == "__main__":
    main()
