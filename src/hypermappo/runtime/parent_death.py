"""Worker processes die with the process that started them, even when it is killed with SIGKILL.

A sweep's runs (and a run's subprocess env workers) otherwise outlive a `kill -9` of their parent,
re-parented to init, and race whatever is started next on the same run directories. On Linux the
kernel sends the worker a signal when its parent exits (PR_SET_PDEATHSIG); a parent that exited
before the worker set it is caught by checking right after. A forkserver's child is the child of
the forkserver, which lives on as long as any of its children do, so there a thread waits for the
process that asked for the child (its sentinel pipe closes when it exits) instead.
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Get `sig` when this process's parent exits (Linux); send it now if the parent is already gone.

    In a multiprocessing child the parent is the process that created it, also when a forkserver forked it."""
    if not sys.platform.startswith("linux"):
        return
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    if prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        return
    parent = mp.parent_process()
    if parent is None:  # not a multiprocessing child (e.g. a Ray worker): the OS parent
        if os.getppid() == 1:
            os.kill(os.getpid(), sig)
        return
    if not (parent.is_alive() and _running(parent.pid)):
        os.kill(os.getpid(), sig)
    elif parent.pid != os.getppid():  # forked by a forkserver, which outlives the creator while we live
        threading.Thread(target=_signal_when_gone, args=(parent, sig), name="die-with-parent", daemon=True).start()


def _signal_when_gone(parent, sig: int) -> None:
    parent.join()  # returns when the creator's end of the sentinel pipe closes: it exited, however
    os.kill(os.getpid(), sig)


def _running(pid: int) -> bool:
    """pid exists and is not a zombie (a SIGKILLed parent stays a zombie until its own parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
