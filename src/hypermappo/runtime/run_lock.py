"""One process trains a run directory at a time: an exclusive `flock` on RUN_DIR/.lock.

`train` and `resume` hold it for the life of the run. The kernel drops it when the process exits,
however it exits, so a lock file left behind by a killed run never blocks its resume; a second
process that tries to train the same directory gets a one-line error instead of racing the first.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from hypermappo.errors import UserError

LOCK_FILE = ".lock"


class RunDirLock:
    """Taken on construction (UserError naming the holder's pid when another process has it)."""

    def __init__(self, run_dir: Path):
        self.fd: int | None = None
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            raise UserError(f"run_dir {str(run_dir)!r} is not a directory")
        fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise UserError(f"run_dir {run_dir} is being trained by another process (pid {holder})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Unlock (also for children forked while it was held, which share the lock) and close; idempotent."""
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        self.release()


def holder(run_dir: Path) -> str | None:
    """The pid (as written in the lock file) of the process training `run_dir`, or None when nobody is."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # conflicts only with a holder's exclusive lock
        return None
    except BlockingIOError:
        return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
