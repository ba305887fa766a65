"""Building the library's small C kernels (agent_attention.c, act_norm.c) with the system C compiler, cached.

Each kernel is compiled on first use for its compile-time settings and kept under `$HYPERMAPPO_CACHE` (default
~/.cache/hypermappo) as a shared library named by a digest of its source, compiler and flags, so a changed kernel
or flag rebuilds and parallel runs publish the file atomically. A kernel that cannot be built gives the reason as a
string, and its caller takes its PyTorch path instead.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

import torch

FLAGS = ["-O3", "-std=gnu11", "-shared", "-fPIC"]


def cache_dir() -> Path:
    root = os.environ.get("HYPERMAPPO_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
        / "hypermappo"
    return Path(root) / "kernels"


def cpu_identity() -> bytes:
    """What a `-march=native` build depends on (a cache shared between machines must not hand one CPU's build to
    another): the CPU's model and feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        import platform

        return platform.processor().encode()
    return "\n".join(dict.fromkeys(ln for ln in lines if ln.startswith(("model name", "flags")))).encode()


def build(source: Path, stem: str, flags: list[str]) -> ctypes.CDLL | str:
    """Compile `source` with `flags` (or load the cached build); the reason as a string when it cannot. OpenMP is
    tried first (it shares torch's libgomp); without it the kernel runs on one thread."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        return "no C compiler found (set CC)"
    text = source.read_bytes()
    for header in re.findall(rb'#include "([^"]+)"', text):  # local headers: a change to one rebuilds
        if (source.parent / header.decode()).exists():
            text += (source.parent / header.decode()).read_bytes()
    native = cpu_identity() if "-march=native" in flags else b""
    reason = "unknown error"
    for openmp in (["-fopenmp"], []):
        all_flags = FLAGS + flags + openmp
        digest = hashlib.sha256(text + native + " ".join([compiler, *all_flags]).encode()).hexdigest()[:16]
        path = cache_dir() / f"{stem}_{digest}.so"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")  # parallel runs may build at once: publish atomically
            try:
                result = subprocess.run([compiler, *all_flags, str(source), "-o", str(tmp), "-lm"],
                                        capture_output=True, text=True)
            except OSError as e:
                return f"cannot run the C compiler {compiler!r}: {e.strerror or e}"
            if result.returncode != 0:
                tmp.unlink(missing_ok=True)
                reason = (result.stderr.strip().splitlines() or ["unknown error"])[-1]
                continue
            os.replace(tmp, path)
        return ctypes.CDLL(str(path))
    return f"{compiler} failed: {reason}"


_LOADED: dict[tuple, ctypes.CDLL | str] = {}  # (source, stem, flags) -> the loaded library or why not, per process


def load(source: Path, stem: str, flags: list[str], restypes: dict[str, type | None]) -> ctypes.CDLL | str:
    """`build`, once per process for these arguments, with its functions' return types set (`restypes`: name ->
    ctypes type, None for void): every kernel module's loader, so each says only its source, flags and functions."""
    key = (str(source), stem, tuple(flags))
    if key not in _LOADED:
        lib = build(source, stem, flags)
        if not isinstance(lib, str):
            for name, restype in restypes.items():
                getattr(lib, name).restype = restype
        _LOADED[key] = lib
    return _LOADED[key]


def ptr(t, offset: int = 0) -> ctypes.c_void_p:
    """t's data, or `offset` elements on (one group's part of a grouped operand)."""
    return ctypes.c_void_p(t.data_ptr() + offset * t.element_size())


# The kernels' torch ops, defined with torch.library's low-level API rather than `torch.library.custom_op`: a
# custom_op differentiates itself through an autograd.Function of its own that torch.func refuses to run, and the
# one-graph compiled step takes its gradients with torch.func.grad (algos/fused_step.py). Here an op has no
# autograd formula; its caller's autograd.Function (with a separate `setup_context`, the form torch.func runs) is it.
_OPS = torch.library.Library("hypermappo", "FRAGMENT")


def _refuse_autograd(op):
    """A forward op's Autograd kernel: below autograd as it is, but an error if anything would differentiate it
    other than through its autograd.Function (a silent fallthrough gives zero gradients, e.g. where a compiler
    inlines the Function's forward)."""
    def kernel(keyset, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            raise RuntimeError(f"{op.name()} is differentiated only through its autograd.Function")
        return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)
    return kernel


def define_op(name: str, schema: str, cpu, fake, backward_op: bool = False):
    """The op `hypermappo::<name><schema>`: `cpu` computes it (calling a C kernel), `fake` gives shapes only (for
    tracing); a forward op refuses other differentiation (see `_refuse_autograd`), a backward op falls through
    autograd (no second derivative). Returns the op's default overload."""
    _OPS.define(name + schema)
    op = getattr(torch.ops.hypermappo, name).default
    _OPS.impl(name, cpu, "CPU")
    if backward_op:
        _OPS.impl(name, torch.library.fallthrough_kernel, "Autograd")
    else:
        _OPS.impl(name, _refuse_autograd(op), "Autograd", with_keyset=True)
    torch.library.register_fake(op, fake, lib=_OPS)
    return op
