"""The oracle goal model: the env's own scripted rules as the goal-conditioned co-player policies (an upper bound).

For an env with scripted rules per goal (`ORACLE_GOALS`), pi(a | g) is the rule's action for that slot in the
current env state, mixed with a uniform floor, and one more goal is "uniform" (random play). Plugged into the same
`GoalBelief` as the learned model, it shows what the Bayesian belief reaches when the goal policies are exact:
the ceiling that a learned model is measured against. It reads the env's state, so it is an evaluation tool,
never an input to a policy.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# env class name -> the scripted rules, one per modelled goal (a "uniform" goal is added)
ORACLE_GOALS = {
    "StagHuntVecEnv": ["staghunt_stag", "staghunt_hare", "staghunt_follow"],
    "CoinGameVecEnv": ["coin_cooperative", "coin_selfish"],
}
# envs whose oracle rules pursue the env's goal_names in order (and "uniform" is the "other" goal): the oracle's
# goal belief is then scored against the same goal labels as a learned model's (the coin game's rules are kinds
# of partner, cooperative and selfish, not its goals own_coin / other_coin)
NAMED_GOALS = {"StagHuntVecEnv"}


class OracleGoalPolicy:
    """Duck-types models.coplayer_goal.GoalPolicy for `GoalBelief`: call `set_step(step)` before each `begin`."""

    def __init__(self, env, floor: float = 0.05):
        from hypermappo.errors import UserError
        from hypermappo.policies.scripted import get_scripted

        name = type(env).__name__
        if name not in ORACLE_GOALS:
            raise UserError(f"oracle goal model: no scripted goal rules for env {name}; expected one of "
                            f"{sorted(ORACLE_GOALS)}")
        self.env, self.floor = env, floor
        self.rules = [get_scripted(r) for r in ORACLE_GOALS[name]]
        self.n_slots, self.n_actions = env.spec.num_agents, int(env.spec.action_space.n)
        self.n_goals = len(self.rules) + 1
        self.step = None
        self.generator = torch.Generator().manual_seed(0)  # the rules here are deterministic; ScriptedContext needs one

    def set_step(self, step) -> None:
        self.step = step

    def all_coplayers(self, obs: torch.Tensor, prev: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """-> log pi [E, K, N, G, A]: each rule's move for every slot, the same for every observer k."""
        from hypermappo.policies.scripted import ScriptedContext

        A, floor = self.n_actions, self.floor
        everyone = torch.arange(self.n_slots, device=obs.device)
        moves = torch.stack([rule(self.step, ScriptedContext(self.env, everyone, self.generator, {}))
                             for rule in self.rules], -1)  # [E, N, G - 1]
        hit = F.one_hot(moves.long(), A).float()  # [E, N, G - 1, A]
        logp = ((1 - floor) * hit + floor / A).log()
        uniform = torch.full_like(logp[..., :1, :], -math.log(A))
        out = torch.cat([logp, uniform], -2)  # [E, N, G, A]
        return out.unsqueeze(1).expand(-1, slots.numel(), -1, -1, -1)

    def coplayer_log_probs(self, obs: torch.Tensor, prev: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """-> log pi [E, K, N - 1, G, A]: `all_coplayers` at each observer's co-players (`coplayer_seats` order)."""
        from hypermappo.models.coplayer_goal import coplayer_seats

        seat = coplayer_seats(slots, self.n_slots)
        k = torch.arange(slots.numel(), device=obs.device).unsqueeze(-1)
        return self.all_coplayers(obs, prev, slots)[:, k, seat]
