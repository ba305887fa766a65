"""Policy evaluation on fresh envs: one complete episode per env, all envs in parallel.

Evaluation envs are seeded from the run's seed plus a fixed offset, so every evaluation of a run
(and of every run with that seed) sees the same starting states and curves compare like for like.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hypermappo.envs.registry import make_env

EVAL_SEED_OFFSET = 1_000_003


@torch.no_grad()
def evaluate_policy(cfg, actor, episodes: int, deterministic: bool = True, device=None, render_env: int | None = None,
                    max_steps: int = 100_000, progress: Callable[[int, int], None] | None = None) -> dict:
    """Run `episodes` episodes (one per env) with the actor; returns mean/std return and env extras.

    With `render_env=i`, also returns the RGB frames of env i's episode under "frames".
    `progress(episodes_done, steps)` is called after every env step (for a progress line).
    """
    device = device or torch.device(cfg.device)
    kwargs = dict(cfg.env_kwargs)
    if render_env is not None and cfg.env.split(":")[0] in ("mpe2", "pettingzoo"):
        kwargs.setdefault("render_mode", "rgb_array")
    env = make_env(cfg.env, episodes, device, **kwargs)
    was_training = actor.training
    actor.eval()
    s = env.reset(seed=cfg.seed + EVAL_SEED_OFFSET)
    n = env.spec.num_agents
    hidden = torch.zeros(episodes, n, actor.hidden_size, device=device) if actor.hidden_size else None
    reset = torch.ones(episodes, n, dtype=torch.bool, device=device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=device)
    returns = torch.zeros(episodes, device=device)
    lengths = torch.zeros(episodes, dtype=torch.long, device=device)
    extras: dict[str, torch.Tensor] = {}
    frames = []
    steps = 0
    while not finished.all() and steps < max_steps:
        if render_env is not None and not finished[render_env]:
            frames.append(env.render(render_env))
        out = actor(s.obs, s.available_actions, hidden, reset, active=s.active)
        actions = out.dist.mode() if deterministic else out.dist.sample()
        s = env.step(actions)
        steps += 1
        newly = s.episode_done & ~finished
        if newly.any():
            returns = torch.where(newly, s.episode_return, returns)
            lengths = torch.where(newly, s.episode_length, lengths)
            for k, v in s.extras.items():
                extras[k] = torch.where(newly, v.float(), extras.get(k, torch.zeros_like(v, dtype=torch.float32)))
            finished |= newly
        hidden, reset = out.hidden, s.done
        if progress is not None:
            progress(int(finished.sum()), steps)
    env.close()
    actor.train(was_training)
    result = {
        "return_mean": float(returns.mean()),
        "return_std": float(returns.std()) if episodes > 1 else 0.0,
        "episodes": episodes,
        "length_mean": float(lengths.float().mean()),
        "returns": returns.cpu().tolist(),
        **{k: float(v.mean()) for k, v in extras.items()},
    }
    if render_env is not None:
        result["frames"] = frames
    return result
