"""The C++ compiler the test suite gives Inductor (tests/cxx_quick, set as CXX by tests/conftest.py): -O1 in place of
-O3 over Inductor's generated kernels only, every other argument passed through unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

QUICK = Path(__file__).with_name("cxx_quick")
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="the wrapper is a bash script")


def compile_args(tmp_path: Path, *args: str) -> list[str]:
    """The arguments the wrapper hands the real compiler (a script here that prints them, one per line)."""
    fake = tmp_path / "fake_cxx"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    fake.chmod(0o755)
    out = subprocess.run([str(QUICK), *args], env={**os.environ, "HYPERMAPPO_TEST_REAL_CXX": str(fake)},
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_inductor_kernels_are_built_at_o1_and_everything_else_as_given(tmp_path):
    inductor = ["k.cpp", "-D", "TORCH_INDUCTOR_CPP_WRAPPER", "-O3", "-DNDEBUG", "-ffp-contract=off", "-o", "k b.so"]
    assert compile_args(tmp_path, *inductor) == [a if a != "-O3" else "-O1" for a in inductor]
    other = ["kernel.c", "-O3", "-march=native", "-o", "kernel.so"]
    assert compile_args(tmp_path, *other) == other


def test_the_suite_hands_inductor_the_wrapper_unless_told_to_keep_o3():
    if os.environ.get("HYPERMAPPO_TEST_FULL_OPT") == "1":
        assert os.environ.get("CXX") != str(QUICK)
    elif shutil.which("g++"):
        assert os.environ["CXX"] == str(QUICK) and os.environ["HYPERMAPPO_TEST_REAL_CXX"]
