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
def play_episodes(cfg, episodes: int, act: Callable, device=None, render_env: int | None = None,
                  max_steps: int = 100_000, progress: Callable[[int, int], None] | None = None,
                  after_step: Callable | None = None) -> dict:
    """One episode per env on `episodes` fresh evaluation envs; `act(env, step) -> actions` chooses every slot's
    action (it keeps any recurrent state itself), `after_step(step, finished)` sees each step before envs that
    just ended are marked finished. Returns mean/std return, lengths and env extras (and env `render_env`'s
    frames under "frames"); `progress(episodes_done, steps)` is called after every env step."""
    device = device or torch.device(cfg.device)
    kwargs = dict(cfg.env_kwargs)
    if render_env is not None and cfg.env.split(":")[0] in ("mpe2", "pettingzoo"):
        kwargs.setdefault("render_mode", "rgb_array")
    env = make_env(cfg.env, episodes, device, **kwargs)
    s = env.reset(seed=cfg.seed + EVAL_SEED_OFFSET)
    finished = torch.zeros(episodes, dtype=torch.bool, device=device)
    returns = torch.zeros(episodes, device=device)
    lengths = torch.zeros(episodes, dtype=torch.long, device=device)
    extras: dict[str, torch.Tensor] = {}
    frames = []
    steps = 0
    while not finished.all() and steps < max_steps:
        if render_env is not None and not finished[render_env]:
            frames.append(env.render(render_env))
        s = env.step(act(env, s))
        steps += 1
        if after_step is not None:
            after_step(s, finished)
        newly = s.episode_done & ~finished
        if newly.any():
            returns = torch.where(newly, s.episode_return, returns)
            lengths = torch.where(newly, s.episode_length, lengths)
            for k, v in s.extras.items():
                if v.dim() != 1:  # per-agent extras such as goal_event [E, N] are no episode statistics
                    continue
                extras[k] = torch.where(newly, v.float(), extras.get(k, torch.zeros_like(v, dtype=torch.float32)))
            finished |= newly
        if progress is not None:
            progress(int(finished.sum()), steps)
    env.close()
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


@torch.no_grad()
def evaluate_policy(cfg, actor, episodes: int, deterministic: bool = True, device=None, render_env: int | None = None,
                    max_steps: int = 100_000, progress: Callable[[int, int], None] | None = None) -> dict:
    """Run `episodes` episodes (one per env) with the actor acting for every slot (see `play_episodes`)."""
    device = device or torch.device(cfg.device)
    was_training = actor.training
    actor.eval()
    state = {"hidden": None, "reset": None}

    def act(env, s):
        if state["reset"] is None:  # first step: recurrent state of the shape of the envs' batch
            n = env.spec.num_agents
            state["hidden"] = torch.zeros(episodes, n, actor.hidden_size, device=device) if actor.hidden_size else None
            state["reset"] = torch.ones(episodes, n, dtype=torch.bool, device=device)
        out = actor(s.obs, s.available_actions, state["hidden"], state["reset"], active=s.active)
        state["hidden"] = out.hidden
        state["actions"] = out.dist.mode() if deterministic else out.dist.sample()
        return state["actions"]

    def after_step(s, finished):
        state["reset"] = s.done
        if hasattr(actor, "observe"):  # an actor with a belief over the others' goals sees everyone's moves
            actor.observe(state["actions"], s)

    try:
        return play_episodes(cfg, episodes, act, device, render_env, max_steps, progress, after_step)
    finally:
        actor.train(was_training)
        if hasattr(actor, "done"):
            actor.done()
