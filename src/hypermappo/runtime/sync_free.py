"""Whether collection runs without a host synchronisation per env step (`HYPERMAPPO_SYNC_FREE`: auto, 0 or 1).

On a GPU every read of a device value (`.item()`, `bool(t.any())`, boolean indexing) waits for the queue to drain,
so per-step checks and branches cost a stall each. Sync-free collection (auto: on CUDA) checks env outputs for
non-finite values on the device and reads the record once per rollout (nonfinite_watch.py), bootstraps truncated
episodes with a mask instead of a branch on "did any env truncate", and asks the env for branch-free auto-resets
where it has them (`VecEnv.sync_free`). On a CPU a sync costs nothing and the per-step path is kept: its env resets
draw random numbers only for the envs that ended, so runs keep their reference digests."""

from __future__ import annotations

import os

import torch

from hypermappo.errors import UserError

VAR = "HYPERMAPPO_SYNC_FREE"


def decide(device: torch.device) -> tuple[bool, str]:
    """(on, the run header's line)."""
    flag = os.environ.get(VAR, "auto")
    if flag not in ("auto", "0", "1"):
        raise UserError(f"{VAR}={flag!r}: expected auto, 0 or 1")
    on = device.type == "cuda" if flag == "auto" else flag == "1"
    why = f"{VAR}={flag}" if flag != "auto" else f"auto: device {device.type}"
    if on:
        return True, f"host syncs in collection: once per rollout ({why})"
    return False, f"host syncs in collection: per env step ({why}; a sync costs nothing on a CPU)"
