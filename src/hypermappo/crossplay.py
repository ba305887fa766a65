"""`hypermappo crossplay`: every pairing of row policies x column policies in one env -> returns table + heat-map.

A policy is a run directory (its actor, loaded with the run's own config from its newest intact checkpoint) or
`scripted:NAME` (a registered scripted policy or `module.path:function`, with optional settings
`scripted:NAME@key=value@key=value`, values read as YAML, e.g. `scripted:fixed@action=0`). Row policies act for
the row slots, column policies for the column slots (on a two-agent env: slot 0 and slot 1 by default).

Each pairing plays on `num_envs` envs in parallel until `episodes` episodes have finished (the first ones to
finish count; with the default num_envs = episodes that is one episode per env). Every pairing starts from the same
env seed, so they face the same start states. Actions are the actor's mode unless `stochastic`. A policy acts for
all its slots with one batched call per step. Return = the library's episode return (sum over steps of the mean
reward over all agents); the row / column side returns average over that side's slots only.
"""

from __future__ import annotations

import copy
import csv
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

from hypermappo.envs.registry import make_env, split_env_string
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import UserError
from hypermappo.policies.scripted import ScriptedContext, get_scripted
from hypermappo.report.stats import bootstrap_ci

SCRIPTED_PREFIX = "scripted:"


@dataclass
class LearnedPolicy:
    """A run's actor acting for some slots: it sees every slot's observation (as in training) and its actions
    for the other slots are discarded."""

    label: str
    source: str
    cfg: object
    actor: torch.nn.Module
    checkpoint: Path
    hidden: torch.Tensor | None = None
    reset: torch.Tensor | None = None

    def start(self, env, slots: torch.Tensor, seed: int, deterministic: bool) -> None:
        e, n = env.num_envs, env.spec.num_agents
        self.slots, self.deterministic = slots, deterministic
        self.actor.eval()
        self.hidden = torch.zeros(e, n, self.actor.hidden_size, device=env.device) if self.actor.hidden_size else None
        self.reset = torch.ones(e, n, dtype=torch.bool, device=env.device)

    @torch.no_grad()
    def act(self, step: EnvStep) -> torch.Tensor:
        out = self.actor(step.obs, step.available_actions, self.hidden, self.reset, active=step.active)
        actions = out.dist.mode() if self.deterministic else out.dist.sample()  # [E, N, ...]
        self.hidden = out.hidden
        return actions[:, self.slots]

    def observe(self, step: EnvStep) -> None:
        self.reset = step.done


@dataclass
class ScriptedPolicy:
    label: str
    name: str
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        self.fn = get_scripted(self.name)  # unknown names fail before anything runs

    def start(self, env, slots: torch.Tensor, seed: int, deterministic: bool) -> None:
        self.ctx = ScriptedContext(env, slots, torch.Generator().manual_seed(seed), dict(self.params))

    def act(self, step: EnvStep) -> torch.Tensor:
        actions = self.fn(step, self.ctx)
        expected = (step.obs.shape[0], self.ctx.slots.numel())
        if not isinstance(actions, torch.Tensor) or tuple(actions.shape[:2]) != expected:
            got = tuple(actions.shape) if isinstance(actions, torch.Tensor) else type(actions).__name__
            raise UserError(f"scripted policy {self.name!r} returned actions of shape {got}; "
                            f"expected {expected} (envs, slots)")
        return actions

    def observe(self, step: EnvStep) -> None:
        pass


def parse_scripted(spec: str) -> ScriptedPolicy:
    """`scripted:NAME[@key=value...]` -> ScriptedPolicy."""
    name, *settings = spec[len(SCRIPTED_PREFIX):].split("@")
    if not name:
        raise UserError(f"{spec!r} names no scripted policy; expected scripted:NAME, e.g. scripted:random")
    params = {}
    for item in settings:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UserError(f"{spec!r}: setting {item!r} is not key=value")
        try:
            params[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise UserError(f"{spec!r}: value {value!r} of {key} is not valid YAML") from None
    return ScriptedPolicy(spec, name, params)


def load_policies(specs: list[str]) -> dict[str, object]:
    """Every distinct policy spec -> its policy (run directories loaded once)."""
    from hypermappo.policies.loaded import load_policy

    policies = {}
    for spec in dict.fromkeys(specs):
        if spec.startswith(SCRIPTED_PREFIX):
            policies[spec] = parse_scripted(spec)
        else:
            loaded = load_policy(Path(spec), checkpoint="newest_intact", command="crossplay")
            policies[spec] = LearnedPolicy(spec, spec, loaded.cfg, loaded.actor, loaded.checkpoint)
    names = [Path(s.rstrip("/")).name for s in policies if not s.startswith(SCRIPTED_PREFIX)]
    for spec, policy in policies.items():  # run directories by name when the names are unambiguous
        short = Path(spec.rstrip("/")).name
        if isinstance(policy, LearnedPolicy) and names.count(short) == 1:
            policy.label = short
    return policies


def resolve_env(env_arg: str | None, learned: list[LearnedPolicy]) -> tuple[str, dict, str]:
    """(env string, env kwargs, where they came from); every run must have been trained on exactly that env."""
    if env_arg is None:
        if not learned:
            raise UserError("--env is needed when no run directory is given (a preset such as "
                            "staghunt/egocentric or an env string such as matrix:stag_hunt)")
        env, kwargs, source = learned[0].cfg.env, dict(learned[0].cfg.env_kwargs), f"run {learned[0].source}"
    elif "/" in env_arg or env_arg.endswith((".yaml", ".yml")):
        from hypermappo.config import build_config

        cfg = build_config(env_arg)
        env, kwargs, source = cfg.env, dict(cfg.env_kwargs), f"preset {env_arg}"
    else:
        split_env_string(env_arg)  # unknown backends fail here
        env, kwargs, source = env_arg, {}, f"--env {env_arg}"
    for policy in learned:
        if (policy.cfg.env, dict(policy.cfg.env_kwargs)) != (env, kwargs):
            raise UserError(f"run {policy.source} was trained on env={policy.cfg.env} env_kwargs="
                            f"{dict(policy.cfg.env_kwargs)}; expected env={env} env_kwargs={kwargs} ({source})")
    return env, kwargs, source


def parse_slots(text: str | None, flag: str, n: int) -> list[int] | None:
    if text is None:
        return None
    try:
        slots = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise UserError(f"{flag} {text!r} is invalid; expected comma-separated slot indices, e.g. 0,1") from None
    if not slots or any(not 0 <= s < n for s in slots) or len(set(slots)) != len(slots):
        raise UserError(f"{flag} {text!r} is invalid; expected distinct slot indices in 0..{n - 1}")
    return slots


def check_slots(row_slots: list[int] | None, col_slots: list[int] | None, n: int) -> tuple[list[int], list[int]]:
    """Both sides' slots: disjoint and together every slot (default on two agents: 0 vs 1)."""
    if row_slots is None and col_slots is None and n == 2:
        return [0], [1]
    if row_slots is None or col_slots is None:
        raise UserError(f"this env has {n} agent slots; give both --row-slots and --col-slots, "
                        f"e.g. --row-slots 0 --col-slots {','.join(map(str, range(1, n)))}")
    if set(row_slots) & set(col_slots) or len(row_slots) + len(col_slots) != n:
        raise UserError(f"--row-slots {row_slots} and --col-slots {col_slots} must split the slots "
                        f"0..{n - 1} between them (each slot on exactly one side)")
    return row_slots, col_slots


@torch.no_grad()
def play(env, sides: list[tuple[object, list[int]]], episodes: int, seed: int, deterministic: bool,
         max_steps: int = 1_000_000) -> dict:
    """Run the policies of `sides` (each with its slots) until `episodes` episodes finished; returns per-episode
    returns [episodes] (all agents), side_returns [episodes, sides] and env extras [episodes] each."""
    e, n, dev = env.num_envs, env.spec.num_agents, env.device
    torch.manual_seed(seed)  # stochastic actor sampling
    step = env.reset(seed=seed)
    side_weights = torch.zeros(n, len(sides), device=dev)  # [N, S]: reward of slot i counts 1/K_s for its side s
    sides = [(copy.copy(policy), slots) for policy, slots in sides]  # own slots / hidden state when a policy plays itself
    for s, (policy, slots) in enumerate(sides):
        policy.start(env, torch.tensor(slots, device=dev), seed + s, deterministic)
        side_weights[slots, s] = 1.0 / len(slots)
    running = torch.zeros(e, len(sides), device=dev)  # [E, S] side returns of the current episodes
    returns, side_returns, extras = [], [], {}
    finished = steps = 0
    while finished < episodes:
        if steps >= max_steps:
            raise RuntimeError(f"crossplay: {finished} of {episodes} episodes finished after {steps} steps")
        actions = None
        for policy, slots in sides:
            a = policy.act(step)  # [E, K, ...]
            if actions is None:
                actions = a.new_zeros((e, n, *a.shape[2:]))  # [E, N, ...]
            actions[:, slots] = a.to(actions.dtype)
        step = env.step(actions)
        steps += 1
        for policy, _ in sides:
            policy.observe(step)
        running += step.reward @ side_weights
        done = step.episode_done
        if bool(done.any()):
            returns.append(step.episode_return[done])
            side_returns.append(running[done])
            for k, v in step.extras.items():
                if v.dim() != 1:  # per-agent extras such as goal_event [E, N] are no episode statistics
                    continue
                extras.setdefault(k, []).append(v[done].float())
            running = running * (~done).unsqueeze(-1)
            finished += int(done.sum())
    return {"returns": torch.cat(returns)[:episodes].cpu().numpy(),
            "side_returns": torch.cat(side_returns)[:episodes].cpu().numpy(),
            "extras": {k: torch.cat(v)[:episodes].cpu().numpy() for k, v in extras.items()},
            "steps": steps}


def crossplay(rows: list[str], cols: list[str], out: Path, env_arg: str | None = None, row_slots: str | None = None,
              col_slots: str | None = None, episodes: int = 100, num_envs: int | None = None,
              deterministic: bool = True, seed: int = 0, quiet: bool = False) -> dict:
    """Play every (row, col) pairing; write crossplay.csv, crossplay.md and crossplay.png to `out`."""
    if episodes < 1:
        raise UserError(f"--episodes must be >= 1, got {episodes}")
    if num_envs is not None and num_envs < 1:
        raise UserError(f"--num-envs must be >= 1, got {num_envs}")
    if seed < 0:
        raise UserError(f"--seed must be >= 0, got {seed}")
    policies = load_policies(rows + cols)
    learned = [p for p in policies.values() if isinstance(p, LearnedPolicy)]
    env_name, env_kwargs, _ = resolve_env(env_arg, learned)
    device = torch.device(learned[0].cfg.device) if learned else torch.device("cpu")
    env = make_env(env_name, num_envs or episodes, device, **env_kwargs)
    n = env.spec.num_agents
    sides = check_slots(parse_slots(row_slots, "--row-slots", n), parse_slots(col_slots, "--col-slots", n), n)
    results = []
    start = time.perf_counter()
    for i, r in enumerate(rows):
        for j, c in enumerate(cols):
            t = time.perf_counter()
            played = play(env, [(policies[r], sides[0]), (policies[c], sides[1])], episodes, seed, deterministic)
            ret = played["returns"]
            low, high = bootstrap_ci(ret)
            row = {"row": policies[r].label, "col": policies[c].label, "episodes": len(ret),
                   "return_mean": float(ret.mean()), "return_std": float(ret.std()), "ci_low": low, "ci_high": high,
                   "row_return_mean": float(played["side_returns"][:, 0].mean()),
                   "col_return_mean": float(played["side_returns"][:, 1].mean()),
                   **{f"{k}_mean": float(v.mean()) for k, v in played["extras"].items()}}
            results.append(row)
            if not quiet:
                print(f"crossplay: [{i * len(cols) + j + 1}/{len(rows) * len(cols)}] {row['row']} x {row['col']}: "
                      f"return {row['return_mean']:.2f} ± {row['return_std']:.2f} ({time.perf_counter() - t:.1f}s)",
                      file=sys.stderr, flush=True)
    env.close()
    info = {"env": env_name, "env_kwargs": env_kwargs, "row_slots": sides[0], "col_slots": sides[1],
            "episodes": episodes, "deterministic": deterministic, "seed": seed,
            "rows": [policies[r].label for r in rows], "cols": [policies[c].label for c in cols],
            "checkpoints": {p.label: str(p.checkpoint) for p in learned}, "wall_s": time.perf_counter() - start}
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "crossplay.csv", out / "crossplay.md", out / "crossplay.png"]
    write_csv(results, files[0])
    files[1].write_text(markdown(results, info))
    heatmap(results, info, files[2])
    return {"results": results, "info": info, "files": files}


def write_csv(results: list[dict], path: Path) -> None:
    keys = list(dict.fromkeys(k for r in results for k in r))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(results)


def _cell(r: dict) -> str:
    ci = f" [{r['ci_low']:.2f}, {r['ci_high']:.2f}]" if not math.isnan(r["ci_low"]) else ""
    return f"{r['return_mean']:.2f}{ci}"


def _grid_table(results: list[dict], info: dict, cell) -> list[str]:
    by = {(r["row"], r["col"]): r for r in results}
    lines = ["| row \\ col | " + " | ".join(info["cols"]) + " |", "|---|" + "---|" * len(info["cols"])]
    for row in info["rows"]:
        lines.append(f"| {row} | " + " | ".join(cell(by[row, col]) for col in info["cols"]) + " |")
    return lines


def markdown(results: list[dict], info: dict) -> str:
    mode = "deterministic (mode) actions" if info["deterministic"] else "sampled actions"
    kwargs = f" {info['env_kwargs']}" if info["env_kwargs"] else ""
    lines = [f"Cross-play on `{info['env']}`{kwargs}: rows act for slots {info['row_slots']}, columns for slots "
             f"{info['col_slots']}; {info['episodes']} episodes per pairing, {mode}, env seed {info['seed']} "
             f"(the same start states for every pairing).", "",
             "Mean episode return (sum over steps of the mean reward over all agents) [95% bootstrap CI over episodes]:",
             "", *_grid_table(results, info, _cell), "",
             "Row side / column side return (each side's mean reward over its own slots, summed over steps):", "",
             *_grid_table(results, info, lambda r: f"{r['row_return_mean']:.2f} / {r['col_return_mean']:.2f}")]
    for key in [k for k in results[0] if k.endswith("_mean") and k not in
                ("return_mean", "row_return_mean", "col_return_mean")]:
        lines += ["", f"{key[:-5].replace('_', ' ')} per episode:", "",
                  *_grid_table(results, info, lambda r, key=key: f"{r[key]:.2f}")]
    if info["checkpoints"]:
        lines += ["", "Checkpoints: " + ", ".join(f"{k} = `{v}`" for k, v in info["checkpoints"].items())]
    return "\n".join(lines) + "\n"


def heatmap(results: list[dict], info: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by = {(r["row"], r["col"]): r["return_mean"] for r in results}
    values = np.array([[by[r, c] for c in info["cols"]] for r in info["rows"]])  # [rows, cols]
    fig, ax = plt.subplots(figsize=(1.2 + 1.9 * len(info["cols"]), 1.2 + 0.7 * len(info["rows"])))
    im = ax.imshow(values, cmap="viridis", aspect="auto")
    middle = (np.nanmax(values) + np.nanmin(values)) / 2
    for (i, j), v in np.ndenumerate(values):
        ax.text(j, i, f"{v:.1f}", ha="center", va="center", color="black" if v > middle else "white", fontsize=10)
    ax.set_xticks(range(len(info["cols"])), info["cols"], rotation=20, ha="right")
    ax.set_yticks(range(len(info["rows"])), info["rows"])
    ax.set_xlabel(f"column policy (slots {info['col_slots']})")
    ax.set_ylabel(f"row policy (slots {info['row_slots']})")
    ax.set_title(f"cross-play on {info['env']}: mean episode return ({info['episodes']} episodes)", fontsize=10)
    fig.colorbar(im, ax=ax)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
