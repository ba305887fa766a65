"""Held-out-partner evaluation: K consecutive episodes against each partner left out of training, no updates.

A run trained with a partner group (typically a population, policies/population.py) is loaded from its newest
intact checkpoint; its partner group is replaced by one held-out partner at a time (a scripted rule or a frozen
learned actor), and its learner groups play K consecutive episodes against it in E envs at once. Nothing is
updated: what can change over the K episodes is only what the learner carries (its beliefs about the partner).
The learner's own recurrent state restarts every episode, as in training; `memory` says whether the learner's
co-player memory carries over episode boundaries (memory=True: the partner stays the same, so beliefs
accumulate) or restarts with every episode (memory=False).

Returned per partner and memory setting, over the E envs (mean and standard error of the mean):
  return[k]   the learner groups' episode return in the k-th consecutive episode, k = 1..K (sum over the episode
              of the mean reward over the learner slots): the few-shot adaptation curve
  team[k]     the env's episode return (mean over all agents)

    hypermappo adapt runs/x --partners scripted:staghunt_follow runs/partner#b --episodes 10 --num-envs 64
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from hypermappo.errors import UserError
from hypermappo.evaluation import EVAL_SEED_OFFSET

RUN_GROUP_SEP = "#"


def parse_partner(spec: str):
    """`scripted:NAME[@key=value...]`, `RUN_DIR` or `RUN_DIR#GROUP` -> a population member (groups.Phase)."""
    from hypermappo.crossplay import SCRIPTED_PREFIX, parse_scripted
    from hypermappo.policies.groups import Phase, _phase

    if spec.startswith(SCRIPTED_PREFIX):
        scripted = parse_scripted(spec)
        return _phase(f"partner {spec!r}", {"kind": "scripted", "policy": scripted.name, "params": scripted.params}, 0)
    run_dir, _, group = spec.partition(RUN_GROUP_SEP)
    if not (Path(run_dir) / "config.yaml").exists():
        raise UserError(f"partner {spec!r}: expected scripted:NAME[@key=value] or a run directory (RUN_DIR or "
                        f"RUN_DIR#GROUP); {run_dir!r} has no config.yaml")
    return Phase(0, "frozen", run_dir=run_dir, group=group)


def _label(member) -> str:
    if member.kind == "scripted":
        return member.policy + "".join(f"@{k}={v}" for k, v in member.params.items())
    return Path(member.run_dir).name + (f"#{member.group}" if member.group else "")


class HeldOutMatch:
    """A trained run's learner groups against one partner in `num_envs` evaluation envs."""

    def __init__(self, run_dir: Path, partner_group: str | None, num_envs: int, device):
        from hypermappo import config as config_mod
        from hypermappo.envs.registry import make_env
        from hypermappo.policies.groups import Phase, group_specs, load_frozen_actor, resolve_slots, sub_spec

        self.run_dir, self.device = Path(run_dir), device
        if not (self.run_dir / "config.yaml").exists():
            raise UserError(f"adapt: {str(run_dir)!r} is not a run directory (no config.yaml)")
        self.cfg = config_mod.from_run_dir(self.run_dir)
        if not self.cfg.groups:
            raise UserError(f"adapt: run {str(run_dir)!r} has no groups, so no partner slot to hand to a held-out "
                            f"partner; train with groups (a learner group and a partner group)")
        specs = group_specs(self.cfg)
        self.env = make_env(self.cfg.env, num_envs, device, **self.cfg.env_kwargs)
        slots = resolve_slots(specs, self.env.spec)
        fixed = [s.name for s in specs if not s.learns]
        if partner_group is None:
            if len(fixed) != 1:
                raise UserError(f"adapt: run {str(run_dir)!r} has {len(fixed)} non-learning groups {fixed}; name the "
                                f"partner group with --group")
            partner_group = fixed[0]
        names = [s.name for s in specs]
        if partner_group not in names:
            raise UserError(f"adapt: --group {partner_group!r} is not a group of run {str(run_dir)!r} (its groups: "
                            f"{names})")
        others = [s.name for s in specs if s.name != partner_group and not s.learns]
        if others:
            raise UserError(f"adapt: groups {others} neither learn nor are the partner group {partner_group!r}; "
                            f"held-out evaluation plays learner groups against one partner group")
        self.partner_slots = slots[names.index(partner_group)]
        self.partner_spec = sub_spec(self.env.spec, self.partner_slots)
        self.learners = []  # (slots [K] tensor, actor) of every learner group
        for spec, s in zip(specs, slots):
            if spec.name == partner_group:
                continue
            actor = load_frozen_actor(Phase(0, "frozen", run_dir=str(self.run_dir), group=spec.name),
                                      sub_spec(self.env.spec, s), device)
            self.learners.append((torch.tensor(s, dtype=torch.long, device=device), actor))

    @torch.no_grad()
    def play(self, partner, episodes: int, memory: bool, seed: int, deterministic: bool = True) -> dict:
        """`episodes` (K) consecutive episodes in every env against `partner` (a groups.Phase member).

        Returns {"return": [E, K], "team": [E, K]} tensors (learner-group and team return of episode k). Sampled
        actions (a frozen partner's, the learner's when not `deterministic`) draw from torch's global generator,
        seeded with `seed` here and restored afterwards: every memory setting faces the same partner draws."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._play(partner, episodes, memory, seed, deterministic)

    def _play(self, partner, episodes: int, memory: bool, seed: int, deterministic: bool) -> dict:
        from hypermappo.policies.population import Population

        E, K, device = self.env.num_envs, episodes, self.device
        population = Population([partner], self.partner_spec, torch.tensor(self.partner_slots, device=device), device)
        pstate = population.new_state(E)
        partner_id = torch.zeros(E, dtype=torch.long, device=device)
        generator = torch.Generator().manual_seed(seed + 1)
        hidden = [torch.zeros(E, len(s), a.hidden_size, device=device) if a.hidden_size else None
                  for s, a in self.learners]
        reset = [torch.ones(E, len(s), dtype=torch.bool, device=device) for s, _ in self.learners]
        learner_slots = torch.cat([s for s, _ in self.learners])  # [L]
        episode = torch.zeros(E, dtype=torch.long, device=device)  # index of the episode each env is playing
        running = torch.zeros(E, device=device)
        returns = torch.zeros(E, K, device=device)
        team = torch.zeros(E, K, device=device)
        rows = torch.arange(E, device=device)
        s = self.env.reset(seed=seed)
        while bool((episode < K).any()):
            actions = torch.zeros((E, self.env.spec.num_agents), dtype=torch.long, device=device)
            for i, (slots, actor) in enumerate(self.learners):
                out = actor(s.obs[:, slots], None if s.available_actions is None else s.available_actions[:, slots],
                            hidden[i], reset[i], active=s.active[:, slots])
                hidden[i] = out.hidden
                actions[:, slots] = (out.dist.mode() if deterministic else out.dist.sample()).long()
            partner_actions, _ = population.act(s, self.env, pstate, partner_id, generator)
            actions[:, population.slots] = partner_actions.long()
            s = self.env.step(actions)
            for i, (slots, _) in enumerate(self.learners):
                reset[i] = s.done[:, slots]
            population.observe(pstate, s.done[:, population.slots])
            running = running + s.reward[:, learner_slots].mean(-1)
            ended = s.episode_done if s.episode_done is not None else s.done.all(-1)  # [E]
            if bool(ended.any()):
                record = ended & (episode < K)
                k = episode.clamp(max=K - 1)
                returns[rows[record], k[record]] = running[record]
                team[rows[record], k[record]] = s.episode_return[record]
                running = torch.where(ended, 0.0, running)
                episode = episode + ended.long()
        self.memory = memory  # the co-player memory setting (no learner state crosses episodes without one)
        return {"return": returns, "team": team}


def _curve(x: torch.Tensor) -> dict:
    """x [E, K] -> per-episode-index mean and standard error over the E envs."""
    E = x.shape[0]
    sem = x.std(0) / math.sqrt(E) if E > 1 else torch.zeros(x.shape[1])
    return {"mean": x.mean(0).tolist(), "sem": sem.tolist()}


def adapt(run_dir, partners: list[str], episodes: int = 10, num_envs: int = 64, memory=(True, False),
          partner_group: str | None = None, seed: int | None = None, deterministic: bool = True,
          out: Path | None = None, device: str = "cpu") -> dict:
    """Held-out evaluation of one run against each partner in `partners`, for each memory setting; written to
    OUT/adaptation.json and OUT/adaptation.md when `out` is given."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise UserError(f"adapt: --episodes {episodes!r} is invalid; expected consecutive episodes K >= 1")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise UserError(f"adapt: --num-envs {num_envs!r} is invalid; expected an env count >= 1")
    if not partners:
        raise UserError("adapt: --partners is empty; expected scripted:NAME or run directories")
    members = [parse_partner(p) for p in partners]
    match = HeldOutMatch(Path(run_dir), partner_group, num_envs, torch.device(device))
    seed = match.cfg.seed + EVAL_SEED_OFFSET if seed is None else seed
    results = []
    for spec, member in zip(partners, members):
        for mem in memory:
            played = match.play(member, episodes, mem, seed, deterministic)
            results.append({"partner": _label(member), "source": spec, "memory": bool(mem),
                            "return": _curve(played["return"]), "team_return": _curve(played["team"])})
    report = {"run_dir": str(run_dir), "env": match.cfg.env, "episodes": episodes, "num_envs": num_envs,
              "seed": seed, "deterministic": deterministic, "results": results}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "adaptation.json").write_text(json.dumps(report, indent=2))
        (out / "adaptation.md").write_text(markdown(report))
    return report


def markdown(report: dict) -> str:
    K = report["episodes"]
    head = "| partner | memory | " + " | ".join(f"ep {k}" for k in range(1, K + 1)) + " |"
    lines = [f"Held-out partners of {report['run_dir']} ({report['env']}): learner return per consecutive episode, "
             f"mean over {report['num_envs']} envs", "", head, "|" + "---|" * (K + 2)]
    for r in report["results"]:
        cells = " | ".join(f"{m:.2f}" for m in r["return"]["mean"])
        lines.append(f"| {r['partner']} | {'on' if r['memory'] else 'off'} | {cells} |")
    return "\n".join(lines) + "\n"
