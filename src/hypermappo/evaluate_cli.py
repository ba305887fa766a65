"""`hypermappo eval`: load a checkpoint, evaluate it, optionally render one episode to GIF/MP4."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import torch

from hypermappo import config as config_mod
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError
from hypermappo.evaluation import evaluate_policy
from hypermappo.policies.loaded import load_policy


def load_actor(target: Path, command: str = "eval", newest_intact: bool = False):
    """RUN_DIR (latest checkpoint) or a checkpoint file -> (config, acting actor, checkpoint path), through the one
    seam for a trained run's policy (policies/loaded.py).

    With `newest_intact` (crossplay), a run directory's newer unusable checkpoints are skipped with a note
    on stderr and the newest one that loads is used; errors name `command`."""
    policy = load_policy(target, checkpoint="newest_intact" if newest_intact else "latest", command=command)
    return policy.cfg, policy.actor, policy.checkpoint


def _has_config(target: Path) -> bool:
    return ((target if target.is_dir() else target.parent.parent) / "config.yaml").exists()


def _eval_groups(target: Path, cfg, episodes: int, deterministic: bool, render: str | None, seed: int | None) -> dict:
    """A run with policy groups: every group plays the phase its checkpoint was in (learners' and frozen actors'
    modes, scripted rules); returns the all-agents return and each group's (`policies/groups.evaluate_groups`)."""
    from hypermappo.checkpoint import latest_checkpoint, read_checkpoint
    from hypermappo.policies.groups import build_groups, evaluate_groups

    ckpt = latest_checkpoint(target) if target.is_dir() else target
    if seed is not None:
        cfg = dataclasses.replace(cfg, seed=seed)
    cfg.device = "cpu" if not torch.cuda.is_available() else cfg.device
    device = torch.device(cfg.device)
    try:
        sd = read_checkpoint(ckpt, cfg.device)
    except ValueError as e:
        raise UserError(f"eval: {ckpt} is unusable ({e})") from None
    env = make_env(cfg.env, 1, device, **cfg.env_kwargs)
    groups = build_groups(cfg, env, device)
    for g in groups:
        g.load_state_dict(sd["groups"][g.name], with_episode_state=False)
    try:
        result = evaluate_groups(cfg, groups, episodes, deterministic, device, render_env=0 if render else None)
    except NotImplementedError as e:
        raise UserError(f"eval --render: env {cfg.env!r} cannot render ({e})") from None
    env.close()
    result.pop("returns", None)
    out = {"checkpoint": str(ckpt), "env": cfg.env, "deterministic": deterministic, **result}
    if render:
        frames = out.pop("frames")
        write_video(frames, Path(render))
        out["render"], out["frames"] = render, len(frames)
    return out


class EvalProgress:
    """The progress line of `eval` on stderr, like training's: episodes done / total, env steps, elapsed time.

    Redrawn when an episode ends or every 0.5 s, so a long episode still shows that it is moving."""

    def __init__(self, episodes: int, render: str | None):
        self.episodes, self.render = episodes, render
        self.start = self.last_draw = time.perf_counter()
        self.state = (0, 0)

    def __call__(self, done: int, steps: int) -> None:
        now = time.perf_counter()
        redraw = done != self.state[0] or now - self.last_draw >= 0.5
        self.state = (done, steps)
        if redraw:
            self.last_draw = now
            self.draw()

    def draw(self) -> None:
        done, steps = self.state
        msg = (f"\reval: {done:,}/{self.episodes:,} episodes done  {steps:,} env steps"
               f"  elapsed {time.perf_counter() - self.start:.1f}s")
        if self.render:
            msg += f"  (recording env 0 for {self.render})"
        print(msg, end="", file=sys.stderr, flush=True)

    def message(self, text: str) -> None:
        print(f"eval: {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.draw()
        print(file=sys.stderr, flush=True)


def run_eval(target: Path, episodes: int, deterministic: bool, render: str | None, seed: int | None,
             quiet: bool = False) -> dict:
    """Evaluate; unless `quiet`, a progress line on stderr (stdout stays the JSON result)."""
    if episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {episodes}")
    if seed is not None and seed < 0:
        raise UserError(f"--seed must be >= 0, got {seed}")
    if render and Path(render).suffix.lower() not in (".gif", ".mp4"):
        raise UserError(f"--render {render!r}: expected a .gif or .mp4 file name")
    cfg = config_mod.from_run_dir(target if target.is_dir() else target.parent.parent) \
        if (target.is_dir() or target.is_file()) and _has_config(target) else None
    if cfg is not None and cfg.groups:
        return _eval_groups(target, cfg, episodes, deterministic, render, seed)
    cfg, actor, ckpt = load_actor(target)
    if seed is not None:
        cfg = dataclasses.replace(cfg, seed=seed)
    progress = None if quiet else EvalProgress(episodes, render)
    try:
        result = evaluate_policy(cfg, actor, episodes, deterministic, torch.device(cfg.device),
                                 render_env=0 if render else None, progress=progress)
    except NotImplementedError as e:
        if not render:
            raise
        raise UserError(f"eval --render: env {cfg.env!r} cannot render ({e})") from None
    if progress:
        progress.close()
    result.pop("returns", None)
    out = {"checkpoint": str(ckpt), "env": cfg.env, "deterministic": deterministic, **result}
    if render:
        frames = out.pop("frames")
        if not frames:
            raise UserError(f"eval --render: env {cfg.env!r} produced no frames")
        if progress:
            progress.message(f"writing {len(frames)} frames to {render}")
        write_video(frames, Path(render))
        out["render"] = render
        out["frames"] = len(frames)
    return out


def write_video(frames: list, path: Path, fps: int = 8) -> None:
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".gif":
        imageio.mimsave(path, frames, duration=1000 / fps, loop=0)
    else:
        imageio.mimsave(path, frames, fps=fps)
