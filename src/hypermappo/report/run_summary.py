"""A run's summary.json: what it trained, how far, how fast, how it evaluated, and whether it finished."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def run_summary(cfg, status: str, env_steps: int, updates: int, wall: float, eval_stats: dict | None,
                recent_returns, extra: dict, groups: dict | None = None) -> dict:
    """`status` is "finished" or "failed: <why>" (then no evaluation numbers); `groups`: per policy group its kind,
    slots, phase, recent and evaluated return (runs with groups only)."""
    summary = {
        "status": status,
        "algo": cfg.algo, "actor": cfg.actor, "env": cfg.env, "seed": cfg.seed,
        "env_steps": env_steps, "updates": updates, "wall_s": wall,
        "train_sps": env_steps / max(wall, 1e-9),
        "eval_return_mean": eval_stats["return_mean"] if eval_stats else None,
        "eval_return_std": eval_stats["return_std"] if eval_stats else None,
        "eval_episodes": eval_stats["episodes"] if eval_stats else 0,
        "episode_return_recent": float(np.mean(recent_returns)) if recent_returns else None,
        **extra,
    }
    if eval_stats:
        summary.update({f"eval_{k}": v for k, v in eval_stats.items() if k not in
                        ("return_mean", "return_std", "episodes", "returns", "group_returns")})
    if groups is not None:
        summary["groups"] = groups
    return summary


def write(run_dir: Path, summary: dict) -> None:
    (Path(run_dir) / "summary.json").write_text(json.dumps(summary, indent=2))
