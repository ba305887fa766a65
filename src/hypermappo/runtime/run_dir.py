"""A fresh run's directory: claimed (refused when it holds anything, created, locked) and given back on a failed start.

`train` claims RUN_DIR before it builds anything: a directory that holds files (another run, finished or in progress)
is refused without touching it; otherwise it is created (with checkpoints/) and locked (run_lock.py) for the life of
the run. When the start fails after the claim (e.g. an env kwarg the env does not take), `RunDirClaim.undo` removes
what the claim created: the run directory and the parents it created while they are empty, or, for a directory that
existed empty, only what was put into it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from hypermappo.errors import UserError
from hypermappo.runtime.run_lock import LOCK_FILE, RunDirLock, holder


class RunDirClaim:
    """What claiming `run_dir` would create, recorded before anything is created (`take` claims it)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.created = missing_ancestor(self.run_dir)  # the outermost directory claiming would create (None: exists)
        self.existed_empty = self.run_dir.is_dir()
        self.taken = False

    def take(self) -> RunDirLock:
        """Refuse a directory that holds anything, else create it (with checkpoints/) and return its lock."""
        d = self.run_dir
        check_not_under_a_file(d)
        if d.is_dir() and any(p.name != LOCK_FILE for p in d.iterdir()):  # refused without touching anything
            pid = holder(d)
            if pid is not None:  # a run in progress there is named as such
                raise UserError(f"run_dir {d} is being trained by another process (pid {pid})")
            raise UserError(f"run_dir {str(d)!r} already exists and is not empty; pick another run_dir, or "
                            f"`hypermappo resume {d}` to continue it")
        d.mkdir(parents=True, exist_ok=True)
        lock = RunDirLock(d)
        if any(p.name != LOCK_FILE for p in d.iterdir()):  # filled by another process since the check above
            lock.release()
            raise UserError(f"run_dir {str(d)!r} already exists and is not empty; pick another run_dir, or "
                            f"`hypermappo resume {d}` to continue it")
        (d / "checkpoints").mkdir(parents=True, exist_ok=True)
        self.taken = True  # from here on, undo() removes what this claim created
        return lock

    def undo(self) -> None:
        """Give the claim back: delete the run directory if claiming created it, and the parents it created while they
        are empty (another run may have started in one since); for a run directory that existed (empty, or claiming
        would have refused it), only what was put into it."""
        if not self.taken:
            return
        run_dir, created = self.run_dir, self.created
        if created is None:
            if self.existed_empty and run_dir.is_dir():
                for child in run_dir.iterdir():
                    shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
            return
        shutil.rmtree(run_dir, ignore_errors=True)
        created = created.absolute()
        for parent in run_dir.absolute().parents:
            if parent != created and created not in parent.parents:
                break
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break


def check_not_under_a_file(run_dir: Path) -> None:
    for p in [run_dir, *run_dir.parents]:
        if p.exists() and not p.is_dir():
            raise UserError(f"run_dir {str(run_dir)!r}: {str(p)!r} is a file, not a directory; pick another run_dir")


def missing_ancestor(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist yet (None when `path` exists)."""
    if path.exists():
        return None
    missing = path
    for parent in path.absolute().parents:
        if parent.exists():
            break
        missing = parent
    return missing
