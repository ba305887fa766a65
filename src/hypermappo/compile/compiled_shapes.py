"""Which learner shapes this machine's graph cache already holds: what `ppo.compile=auto` needs to price compiling.

Why: compiling from an empty cache takes minutes, from a warm one tens of seconds. On a 2-core AMD EPYC
(benchmarks/results/compile_cost_amd.md), MAPPO at the paper's settings (E = 1024) took 174 s to compile cold and 21 s
warm, for 0.71 s saved per update of 25,600 env steps: it pays back after 6.3M env steps cold, 0.8M warm. So `auto`
compiles a run of 1M env steps only where a run of the same shape has compiled in this cache before, and otherwise
from COLD_MIN_ENV_STEPS (decision.py).

A compiled run records its learner's shape here after its first update (`remember`): the config without what leaves
the graphs alone (seed, length, run directory, evaluation, checkpoints, logging, `ppo.compile` itself), the device
type, the torch version and a digest of this package's source (a changed source compiles anew). The record is a
JSON file inside the Inductor cache directory, so clearing the cache clears it too.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache
from pathlib import Path

from hypermappo.compile.cache_dir import cache_file, read_record, write_record

FILE = "hypermappo_compiled_shapes.json"
# config fields that do not change which graphs a learner compiles
UNRELATED = ("seed", "run_dir", "total_env_steps", "eval_interval", "eval_at_steps", "eval_episodes",
             "checkpoint_interval", "log")


def cache_path() -> Path:
    return cache_file(FILE)


@cache
def source_digest() -> str:
    """A digest of the package's Python and C sources: graphs traced from other code are other graphs."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".c", ".h")):
        h.update(str(path.relative_to(root)).encode() + path.read_bytes())
    return h.hexdigest()[:16]


def shape_key(cfg, device) -> str:
    """The learner config's key: equal for runs that compile the same graphs (seeds, lengths, run directories)."""
    import torch

    fields = dataclasses.asdict(cfg)
    for name in UNRELATED:
        fields.pop(name, None)
    fields["ppo"] = {k: v for k, v in fields["ppo"].items() if k != "compile"}
    blob = json.dumps([fields, torch.__version__, torch.device(device).type, source_digest()], sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def recorded(cfg, device) -> dict | None:
    """The record of an earlier compile of this shape in this cache ({"compile_s": ...}), or None."""
    entry = read_record(cache_path()).get(shape_key(cfg, device))
    ok = isinstance(entry, dict) and isinstance(entry.get("compile_s"), (int, float))
    return entry if ok else None  # a record damaged by hand counts as none


def remember(cfg, device, compile_s: float) -> None:
    """Record that this shape's graphs are now in the cache."""
    data = read_record(cache_path())
    data[shape_key(cfg, device)] = {"compile_s": round(compile_s, 1), "env": cfg.env, "num_envs": cfg.num_envs}
    write_record(cache_path(), data)
