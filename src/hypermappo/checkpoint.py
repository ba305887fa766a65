"""Checkpoint files: durable write, CRC sidecar, verify, fall back to the newest intact one, read.

A run keeps its checkpoints as RUN_DIR/checkpoints/ckpt_<update>.pt (the newest `CHECKPOINTS_KEPT`), each with a
sidecar `ckpt_*.pt.crc32` holding its size and CRC-32. A checkpoint is written to a temp file, on disk before the
rename makes it visible, and older ones go only after the new one is complete, so a kill at any moment leaves an
intact one. Reading one verifies it (size, checksum, loadable, the keys `Experiment` writes, finite weights);
`newest_intact` walks a run's checkpoints newest first and returns the first that verifies, with why each newer
one was rejected. What a checkpoint holds is `Experiment.checkpoint_state`'s business, not this module's.
"""

from __future__ import annotations

import io
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import torch

from hypermappo.errors import UserError

CHECKPOINTS_KEPT = 2
# what `Experiment` reads back on resume: a checkpoint without one of these is not one of ours
CHECKPOINT_KEYS = ("update", "env_steps", "wall_s", "logger_rows", "actor", "critic", "algo", "rng", "env_state",
                   "last_step", "actor_h", "critic_h", "reset_mask", "recent_returns", "diagnostics", "summary_extra",
                   "prev_obs")


def floating_tensors(tree, prefix: str = ""):
    """(dotted name, tensor) for every floating-point tensor in nested dicts / lists / tuples."""
    if isinstance(tree, torch.Tensor):
        if tree.is_floating_point():
            yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from floating_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from floating_tensors(v, f"{prefix}.{i}" if prefix else str(i))


def first_nonfinite(tree) -> str | None:
    """Name of the first floating tensor in `tree` holding a NaN or an infinity, or None (exact; for checkpoints)."""
    for name, t in floating_tensors(tree):
        if not bool(torch.isfinite(t).all()):
            return name
    return None


def shapes(state_dict: dict) -> dict:
    """Tensor shapes of a state dict (extra state such as counters: its type), to tell a checkpoint of another config."""
    return {k: tuple(v.shape) if torch.is_tensor(v) else type(v).__name__ for k, v in state_dict.items()}


def checksum_path(ckpt: Path) -> Path:
    return ckpt.with_name(ckpt.name + ".crc32")


def checkpoint_files(run_dir: Path, newest_first: bool = False) -> list[Path]:
    """RUN_DIR/checkpoints/ckpt_*.pt, oldest first (newest first with `newest_first`)."""
    return sorted((Path(run_dir) / "checkpoints").glob("ckpt_*.pt"), reverse=newest_first)


def write_durably(path: Path, data) -> None:
    """Write `data` to `path` via a temp file, on disk before the rename makes it visible."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_checkpoint(ckdir: Path, update: int, state: dict) -> Path:
    """`state` as ckdir/ckpt_<update>.pt with its size + CRC-32 sidecar, atomically (temp file + rename); then the
    oldest ones beyond `CHECKPOINTS_KEPT` go (only after the new one is complete). Returns the new file."""
    ckdir.mkdir(parents=True, exist_ok=True)
    path = ckdir / f"ckpt_{update:07d}.pt"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getbuffer()
    write_durably(checksum_path(path), f"{len(data)} {zlib.crc32(data):08x}\n".encode())
    write_durably(path, data)  # on disk before the rename makes it the latest checkpoint
    for old in sorted(ckdir.glob("ckpt_*.pt"))[:-CHECKPOINTS_KEPT]:
        old.unlink()
        checksum_path(old).unlink(missing_ok=True)
    return path


def _reason(error: BaseException) -> str:
    """`Type: first line of the message` of an exception raised while unpickling."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0].strip() if lines else '(no message)'}"


def read_checkpoint(path: Path, device) -> dict:
    """Load a checkpoint after checking it against its sidecar (size first: a truncated file costs a stat).

    Raises ValueError naming what is wrong. Checkpoints without a sidecar (older runs) are only loaded.
    """
    marker = checksum_path(path)
    if marker.exists():
        size, crc = marker.read_text().split()
        actual = path.stat().st_size
        if actual != int(size):
            raise ValueError(f"truncated: {actual} of {size} bytes")
        data = path.read_bytes()
        if f"{zlib.crc32(data):08x}" != crc:
            raise ValueError("checksum mismatch")
        source = io.BytesIO(data)
    else:
        source = path
    try:
        sd = torch.load(source, map_location=device, weights_only=False)
    except Exception as e:  # noqa: BLE001 - any failure to unpickle means the file is unusable
        raise ValueError(f"does not load ({_reason(e)})") from None
    if not isinstance(sd, dict):
        raise ValueError(f"holds a {type(sd).__name__}, not a checkpoint dict")
    missing = [k for k in CHECKPOINT_KEYS if k not in sd]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}")
    bad = first_nonfinite({"actor": sd["actor"], "critic": sd["critic"], "algo": sd["algo"]})
    if bad:
        raise ValueError(f"non-finite {bad}")
    return sd


def newest_intact(run_dir: Path, device, accept: Callable[[dict], None] | None = None
                  ) -> tuple[Path | None, dict | None, list[tuple[Path, str]]]:
    """(path, contents, rejected) of the newest checkpoint of `run_dir` that `read_checkpoint` verifies and
    `accept(contents)` (when given; it raises ValueError to reject one) takes; `rejected` lists each newer one with
    why. (None, None, rejected) when none is intact (rejected is empty when there is none at all)."""
    rejected = []
    for path in checkpoint_files(run_dir, newest_first=True):
        try:
            sd = read_checkpoint(path, device)
            if accept is not None:
                accept(sd)
        except (ValueError, OSError) as e:
            rejected.append((path, str(e)))
            continue
        return path, sd, rejected
    return None, None, rejected


def reasons(rejected: list[tuple[Path, str]]) -> str:
    """`name: why; name: why` for `newest_intact`'s rejected checkpoints."""
    return "; ".join(f"{p.name}: {why}" for p, why in rejected)


def set_aside(path: Path) -> Path:
    """Take an unusable checkpoint out of the rotation, kept for inspection as `*.pt.corrupt` (its sidecar goes)."""
    corrupt = path.with_name(path.name + ".corrupt")
    path.rename(corrupt)
    checksum_path(path).unlink(missing_ok=True)
    return corrupt


def latest_checkpoint(run_dir: Path) -> Path:
    """The newest checkpoint file of `run_dir` (unverified); UserError when there is none."""
    ckpts = checkpoint_files(run_dir)
    if not ckpts:
        raise UserError(f"{run_dir}: no checkpoint to resume from (expected checkpoints/ckpt_*.pt)")
    return ckpts[-1]
