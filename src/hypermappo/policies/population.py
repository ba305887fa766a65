"""A population of partner policies acting for one group's K slots, one member per env, selected per env.

Members are scripted rules (with params) and / or frozen learned actors from run directories. Every member acts
for all E envs with one batched call per step and each env keeps the actions of the member playing there
(`partner_id[e]`), so the cost is one call per member, never a loop over envs. Used by population groups in
training (policies/groups.py), by their evaluation (evaluate_groups) and by the held-out-partner evaluation
(adaptation.py), each with a `PopulationState` of its own (frozen members' recurrent state for its E envs).

Config (a `groups:` entry):

    - name: partner
      agents: [1]
      kind: population
      members:                     # scripted: policy (+ params); frozen: run_dir (+ group)
        - {policy: staghunt_stag}
        - {policy: random}
        - {run_dir: runs/partner, group: b}
      sample: episode              # episode: each env draws a new member whenever its episode ends
                                   # fixed: each env keeps one member for the whole run (balanced over envs)
      draw: env                    # env: one member plays all the group's slots of an env (partner_id [E])
                                   # slot: each slot draws its own member, so a K-slot group plays a mix of
                                   # co-players drawn independently per env and per episode (partner_id [E, K])
      episodes_per_draw: 1         # sample: episode: each draw plays this many consecutive episodes in its env
                                   # before the next (few-shot training: the learner meets the same partners
                                   # episode after episode, as in held-out adaptation, and a carried belief pays)

Draws use the group's own generator seeded from the run seed, and are saved in checkpoints. Each group counts the
episodes every member played (`member_episodes`, on the device, in checkpoints and summary.json): the run's own
record of who it trained against, which held-out evaluation checks its held-out partners against.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hypermappo.policies.specs import MEMBER_KEYS, SAMPLE_MODES, member_entry  # noqa: F401 - their old home

GOAL_NOT_GIVEN = -2  # in a population's goals: the member playing there writes none (co-player labels: hindsight)


def initial_members(num_envs: int, num_members: int, sample: str, generator: torch.Generator,
                    slots: int | None = None) -> torch.Tensor:
    """partner_id at the start, int64: [E] (one member per env) or, with `slots` = K, [E, K] (one per slot, drawn
    independently): uniform draws (sample=episode) or a balanced shuffled split over the cells (fixed)."""
    shape = (num_envs,) if slots is None else (num_envs, slots)
    cells = num_envs * (1 if slots is None else slots)
    if sample == "fixed":
        return (torch.arange(cells) % num_members)[torch.randperm(cells, generator=generator)].view(shape)
    return torch.randint(num_members, shape, generator=generator)


def resample_ended(partner_id: torch.Tensor, ended: torch.Tensor, num_members: int,
                   generator: torch.Generator) -> torch.Tensor:
    """A fresh uniform member for each env whose episode just ended (ended [E] bool; every slot of the env draws
    anew when partner_id is [E, K]); the others keep theirs."""
    if not bool(ended.any()):
        return partner_id
    draws = torch.randint(num_members, partner_id.shape, generator=generator).to(partner_id.device)  # [E(, K)]
    return torch.where(ended.view(-1, *([1] * (partner_id.dim() - 1))), draws, partner_id)


def count_member_episodes(counts: torch.Tensor, partner_id: torch.Tensor, ended: torch.Tensor) -> torch.Tensor:
    """counts [M] + the episodes that just ended (ended [E]) per member playing there (per slot for [E, K] ids);
    on the device, no host sync: a one-hot sum rather than bincount (whose output size is data-dependent)."""
    hits = torch.nn.functional.one_hot(partner_id.view(partner_id.shape[0], -1), counts.shape[0])  # [E, K, M]
    return counts + (hits * ended.view(-1, 1, 1)).sum((0, 1)).to(counts.dtype)


@dataclass
class PopulationState:
    """Frozen members' recurrent state for E envs: hidden[m] [E, K, H] (None for scripted / feed-forward)."""

    hidden: list
    reset: torch.Tensor  # [E, K] bool: start of an episode (or of a new member) in the next act


class Population:
    """The members of a population (policies/groups.Phase entries, kind scripted or frozen) for K slots."""

    def __init__(self, members: list, env_spec, slots: torch.Tensor, device):
        from hypermappo.policies.loaded import load_frozen_actor
        from hypermappo.policies.scripted import get_scripted

        self.members, self.slots, self.device = members, slots, device
        self.fns = [get_scripted(m.policy) if m.kind == "scripted" else None for m in members]
        self.actors = [load_frozen_actor(m, env_spec, device) if m.kind == "frozen" else None for m in members]
        self.record_probs = False  # keep the frozen members' move distributions of the last act (`policy_probs`)
        self.policy_probs = None

    def __len__(self) -> int:
        return len(self.members)

    def describe(self) -> list[str]:
        return [m.describe() for m in self.members]

    def new_state(self, num_envs: int) -> PopulationState:
        K = self.slots.numel()
        hidden = [torch.zeros(num_envs, K, a.hidden_size, device=self.device) if a is not None and a.hidden_size
                  else None for a in self.actors]
        return PopulationState(hidden, torch.ones(num_envs, K, dtype=torch.bool, device=self.device))

    @torch.no_grad()
    def act(self, step, env, state: PopulationState, partner_id: torch.Tensor, generator: torch.Generator,
            deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions [E, K] (env e gets member partner_id[e]'s, or slot k of env e member partner_id[e, k]'s when the
        ids are [E, K]) and the goals [E, K] the members playing there wrote
        into ScriptedContext.goal (-1: no goal this step; GOAL_NOT_GIVEN where the member writes none, e.g. a
        frozen actor; None when no member wrote one). Frozen members sample unless `deterministic`; the move
        distribution they sampled from is left in `self.policy_probs` when `record_probs` (held-out evaluation
        scores the best possible prediction of a sampling partner with it)."""
        from hypermappo.policies.scripted import ScriptedContext

        index = self.slots
        obs = step.obs[:, index]  # [E, K, obs_dim]
        E, K = obs.shape[:2]
        actions = goal = policy_probs = None
        for m, (member, fn, actor) in enumerate(zip(self.members, self.fns, self.actors)):
            here = (partner_id == m).view(E, -1)  # [E, 1] or [E, K]
            member_goal = None
            if fn is not None:
                ctx = ScriptedContext(env, self.slots, generator, member.params)
                a = fn(step, ctx)  # [E, K]
                member_goal = ctx.goal
            else:
                avail = None if step.available_actions is None else step.available_actions[:, index]
                out = actor(obs, avail, state.hidden[m], state.reset, active=step.active[:, index])
                state.hidden[m] = out.hidden
                a = out.dist.mode() if deterministic else out.dist.sample()
                if self.record_probs and hasattr(out.dist, "logp_all"):  # its own move distribution (discrete)
                    probs = out.dist.logp_all.exp()  # [E, K, A]
                    if policy_probs is None:
                        policy_probs = torch.full_like(probs, torch.nan)
                    policy_probs = torch.where(here.unsqueeze(-1), probs, policy_probs)
            if actions is None:
                actions = torch.zeros((E, K, *a.shape[2:]), dtype=a.dtype, device=a.device)
            here_a = here.view(E, here.shape[1], *([1] * (a.dim() - 2)))
            actions = torch.where(here_a, a.to(actions.dtype), actions)
            if member_goal is not None:
                if goal is None:
                    goal = torch.full((E, K), GOAL_NOT_GIVEN, dtype=torch.long, device=a.device)
                goal = torch.where(here, member_goal.to(goal.device), goal)
        self.policy_probs = policy_probs  # [E, K, A] where a frozen member played this step (NaN elsewhere) or None
        return actions, goal

    def observe(self, state: PopulationState, done: torch.Tensor) -> None:
        """done [E, K]: the frozen members' recurrent state restarts there at the next act."""
        state.reset = done
