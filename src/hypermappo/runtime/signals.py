"""SIGINT / SIGTERM during a run: the first one stops it after the current update (which is checkpointed), a second
one aborts at once.

`StopSignals.installed` holds the handler for the life of `Experiment.run`; the loop reads `received` after each update.
Handlers can only be installed in the main thread: elsewhere the caller's handling stays as it was.

One signal often reaches a run more than once: GNU `timeout` sends it to the run and then to the run's process
group, a sweep passes on the Ctrl-C the terminal already sent to its runs, a forkserver's exit sends its children
their death signal. So the same signal again within `REPEAT_S` of the first is that signal, not a second one.
A signal sent to the process group also reaches the run's child processes: while the compiled path compiles,
`shield_children` keeps the compilers Inductor starts (and any child started meanwhile) from getting SIGINT /
SIGTERM, so they finish, and the update with them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
REPEAT_S = 1.0  # the same signal again within this many seconds of the first: one delivery that reached us twice


class StopSignals:
    """`received`: the first SIGINT / SIGTERM (None until one came); a second one raises `abort(signum)` from the
    handler, i.e. wherever the main thread is."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.received: int | None = None
        self.received_at = 0.0  # time.monotonic() when the first came
        self.abort: Callable[[int], BaseException] | None = None
        self.shielded = False
        self._receiver: threading.Event | None = None  # set: the receiver thread (see shield_children) ends

    @contextlib.contextmanager
    def installed(self, abort: Callable[[int], BaseException]):
        """The handler while the block runs (main thread only), the previous handlers after it. `abort` is held only
        meanwhile: an Experiment passing its own method stays free of a reference cycle (its run directory lock is
        released as soon as the last reference to it goes)."""
        previous = {}
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                handler = signal.getsignal(signum)
                previous[signum] = signal.SIG_DFL if handler is None else handler  # None: installed outside Python
                signal.signal(signum, self.handle)
        self.abort = abort
        try:
            yield self
        finally:
            self.shield_children(False)
            if self._receiver is not None:
                self._receiver.set()
                self._receiver = None
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.abort = None

    def handle(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self.received is None:
            self.received, self.received_at = signum, now
            if not self.quiet:  # os.write: print() is not safe inside a signal handler
                os.write(2, f"\n{name}: stopping after this update and saving a checkpoint "
                            f"({name} again aborts at once)\n".encode())
            return
        if signum == self.received and now - self.received_at < REPEAT_S:
            return  # the first one again: sent to this process and to its process group, or passed on by a parent
        raise self.abort(signum)

    def shield_children(self, on: bool) -> None:
        """While on, the child processes the main thread starts (and those of threads it starts meanwhile) begin with
        SIGINT / SIGTERM blocked, as a signal mask is inherited, so a signal sent to the whole process group (Ctrl-C,
        `timeout`, Slurm) does not kill them: Inductor's compilers finish, and the update with them. This process
        still gets the signal: a receiver thread that blocks neither takes it for the handler, which runs in the main
        thread as always. Main thread only; off again when `installed` ends."""
        if threading.current_thread() is not threading.main_thread() or on == self.shielded:
            return
        if on:
            if self._receiver is None:  # started before the mask changes, so it keeps both signals unblocked
                self._receiver = threading.Event()
                threading.Thread(target=self._receiver.wait, name="stop-signal-receiver", daemon=True).start()
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        else:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        self.shielded = on
