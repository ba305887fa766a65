"""A stand-in for torch.compile in a training subprocess (tests/test_faults.py): compiling a function runs a child
process, as Inductor runs the C++ compiler, and fails when that child is killed (as a killed g++ fails the compile);
the function then runs eagerly. `python -c "import slow_compile; slow_compile.main()" train ...` trains with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

COMPILER_S = float(os.environ.get("SLOW_COMPILE_S", "3"))
STARTED = os.environ.get("SLOW_COMPILE_STARTED")  # a file touched when the first compiler child starts


def compile(fn=None, **kwargs):  # noqa: A001 - torch.compile's name
    if fn is None:
        return lambda f: compile(f, **kwargs)
    state = {"compiled": False}

    def compiled(*args, **kw):
        if not state["compiled"]:
            if STARTED and not Path(STARTED).exists():
                Path(STARTED).touch()
            subprocess.run(["sleep", str(COMPILER_S)], check=True)  # CalledProcessError when a signal kills it
            state["compiled"] = True
        return fn(*args, **kw)

    return compiled


def main() -> None:
    torch.compile = compile
    from hypermappo.cli import main as cli_main

    sys.exit(cli_main(sys.argv[1:]))
