"""The one-line progress bar a training run redraws on stderr after every update (`log.progress`)."""

from __future__ import annotations

import sys

import numpy as np


def progress_line(env_steps: int, total: int, sps: float, recent_returns, eval_return: float | None = None) -> str:
    """`[####----] steps/total  sps  return(100)  ETA  eval`: recent_returns is the last 100 episodes' returns."""
    eta = (total - env_steps) / max(sps, 1e-9)
    recent = f"{np.mean(recent_returns):8.2f}" if recent_returns else f"{'-':>8}"  # no episode ended yet
    frac = env_steps / total
    bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
    msg = f"\r[{bar}] {env_steps:>10,}/{total:,} steps  {sps:7.0f} sps  return(100) {recent}  ETA {eta:5.0f}s"
    if eval_return is not None:
        msg += f"  eval {eval_return:.2f}"
    return msg


def show(msg: str) -> None:
    print(msg, end="", file=sys.stderr, flush=True)


def end_line() -> None:
    """Close the redrawn line, so that what is printed next starts on a line of its own."""
    print(file=sys.stderr, flush=True)
