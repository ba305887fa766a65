"""What an agent's death does to its learning targets: `ppo.death=episode` or `agent`.

- `episode` (the MAPPO reference, SMAC runner): a dead agent stays in the episode. It receives the
  team reward of every later step, its GAE trace is cut only when its env's episode ends
  (terminated or truncated), and its critic input is death-masked (zero state, own id kept; see
  `models/critic.py`). Dead steps still carry no loss weight: `active` weights the policy, value
  and entropy terms and the advantage statistics. So team reward earned after an agent died
  reaches the advantages of what it did while alive.
- `agent`: an agent's trace ends at its own death (`done`), dead slots get reward 0 (the VecEnv
  contract). Right for envs whose agents have their own rewards.
- `auto`: `episode` when the env declares a team reward (`EnvSpec.team_reward`), else `agent`.

Truncation (time limit) with `ppo.bootstrap_truncated`: `episode` bootstraps every agent from
V(final state) — a dead agent's V is its death-masked value of the team's future, which the time
limit does not end; `agent` bootstraps only agents alive at the end (a dead agent's trace already
ended at its death, nothing follows it). Without deaths both modes give identical numbers.
"""

from __future__ import annotations

import torch

# resolving `auto` for an env is a config question (the critic needs it too, and models sit below algos)
from hypermappo.config import DEATH_MODES, resolve_death

__all__ = ["DEATH_MODES", "bootstrap_mask", "resolve_death", "team_reward", "transition_targets"]


def team_reward(reward: torch.Tensor, acted: torch.Tensor) -> torch.Tensor:
    """reward [E, N] of one step, acted [E, N] (alive when acting) -> the team's reward [E].

    With a team reward every agent that acted got the same reward, so the max over them is it
    exactly (0 where nobody acted)."""
    best = reward.masked_fill(~acted, float("-inf")).amax(-1)  # [E]
    return torch.where(acted.any(-1), best, torch.zeros_like(best))


def transition_targets(mode: str, reward: torch.Tensor, done: torch.Tensor, acted: torch.Tensor,
                       episode_end: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's (reward [E, N], trace end [E, N]) for the rollout buffer, before any bootstrap.

    reward / done [E, N] from the env, acted [E, N] (alive when acting), episode_end [E]."""
    if mode == "agent":
        return reward, done
    dead_reward = team_reward(reward, acted).unsqueeze(-1)  # [E, 1]
    return torch.where(acted, reward, dead_reward), episode_end.unsqueeze(-1).expand_as(done)


def bootstrap_mask(mode: str, truncated: torch.Tensor, final_active: torch.Tensor) -> torch.Tensor:
    """[E, N]: which agents get gamma * V(final state) added at a truncation (see module docstring)."""
    if mode == "agent":
        return truncated.unsqueeze(-1) & final_active
    return truncated.unsqueeze(-1).expand_as(final_active)
