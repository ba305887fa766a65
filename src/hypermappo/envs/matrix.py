"""Repeated matrix games, batched in torch: the smallest envs that still show coordination.

Every step each agent picks one of A actions and all get the payoff of the joint action. The
observation is the previous joint action, one-hot per agent (zeros at the first step), plus the
normalised step count. Two-player games come from a payoff table; the *specialisation game*
(`matrix:specialisation`, n agents, n actions, reward = fraction of distinct actions chosen) is
computed, so n can be anything.

Env strings: `matrix:stag_hunt`, `matrix:prisoners_dilemma`, `matrix:matching_pennies`
(zero-sum, per-agent rewards of opposite sign), `matrix:climbing`, `matrix:penalty`,
`matrix:specialisation` (kwarg `n_agents`, default 4). kwargs: `episode_length` (default 25),
`penalty` (penalty game's k, default -10).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv
from hypermappo.errors import UserError

# payoffs[a0, a1] = (reward agent 0, reward agent 1)
_STAG_HUNT = [[(4, 4), (0, 3)], [(3, 0), (2, 2)]]  # action 0 = stag, 1 = hare
_PRISONERS = [[(3, 3), (0, 5)], [(5, 0), (1, 1)]]  # action 0 = cooperate, 1 = defect
_PENNIES = [[(1, -1), (-1, 1)], [(-1, 1), (1, -1)]]
_CLIMBING = [[11, -30, 0], [-30, 7, 6], [0, 0, 5]]  # Claus & Boutilier 1998, shared reward


def _penalty(k: float):
    return [[10, 0, k], [0, 2, 0], [k, 0, 10]]


def payoff_table(game: str, penalty: float = -10.0) -> torch.Tensor:
    """[A, A, 2] payoff tensor of a two-player game."""
    if game == "stag_hunt":
        t = _STAG_HUNT
    elif game == "prisoners_dilemma":
        t = _PRISONERS
    elif game == "matching_pennies":
        t = _PENNIES
    elif game in ("climbing", "penalty"):
        shared = _CLIMBING if game == "climbing" else _penalty(penalty)
        t = [[(v, v) for v in row] for row in shared]
    else:
        raise UserError(f"unknown matrix game {game!r}; expected one of {GAMES}")
    return torch.tensor(t, dtype=torch.float32)


GAMES = ["stag_hunt", "prisoners_dilemma", "matching_pennies", "climbing", "penalty", "specialisation"]


class MatrixGameVecEnv(VecEnv):
    def __init__(self, game: str, num_envs: int, device: torch.device, episode_length: int = 25,
                 n_agents: int = 4, penalty: float = -10.0):
        if game not in GAMES:
            raise UserError(f"unknown matrix game {game!r}; expected one of {GAMES}")
        if episode_length < 1:
            raise UserError(f"episode_length must be >= 1, got {episode_length}")
        self.game, self.num_envs, self.device = game, num_envs, device
        if game == "specialisation":
            if n_agents < 2:
                raise UserError(f"n_agents must be >= 2 for the specialisation game, got {n_agents}")
            self.n, self.a = n_agents, n_agents
            self.payoff = None
        else:
            self.payoff = payoff_table(game, penalty).to(device)
            self.n, self.a = 2, self.payoff.shape[0]
        self.episode_length = episode_length
        obs_dim = self.n * self.a + 1
        self.spec = EnvSpec(
            num_agents=self.n, obs_dim=obs_dim, state_dim=obs_dim,
            observation_space=gym.spaces.Box(0.0, 1.0, (obs_dim,), np.float32),
            action_space=gym.spaces.Discrete(self.a), episode_limit=episode_length,
            agent_names=[f"agent_{i}" for i in range(self.n)], can_save_state=True, public_actions=True,
            team_reward=game in ("climbing", "penalty", "specialisation"),  # shared-payoff games
        )
        self.t = torch.zeros(num_envs, dtype=torch.long, device=device)
        self.last = torch.zeros(num_envs, obs_dim - 1, device=device)  # one-hot last joint action
        self.tracker = EpisodeTracker(num_envs, self.n, device)

    def _obs(self):
        frac = (self.t.float() / self.episode_length).unsqueeze(-1)
        state = torch.cat([self.last, frac], -1)  # [E, obs_dim]
        return state.unsqueeze(1).expand(-1, self.n, -1).contiguous(), state

    def _reward(self, actions: torch.Tensor) -> torch.Tensor:
        if self.payoff is None:  # fraction of distinct actions chosen, shared by all
            onehot = torch.nn.functional.one_hot(actions, self.a)  # [E, N, A]
            distinct = (onehot.sum(1) > 0).sum(-1).float() / self.n  # [E]
            return distinct.unsqueeze(-1).expand(-1, self.n)
        return self.payoff[actions[:, 0], actions[:, 1]]  # [E, 2]

    def reset(self, seed: int | None = None) -> EnvStep:
        self.t.zero_()
        self.last.zero_()
        self.tracker.reset_all()
        obs, state = self._obs()
        e, n = self.num_envs, self.n
        z = torch.zeros(e, dtype=torch.bool, device=self.device)
        return EnvStep(obs=obs, state=state, active=torch.ones(e, n, dtype=torch.bool, device=self.device),
                       reward=torch.zeros(e, n, device=self.device),
                       done=torch.zeros(e, n, dtype=torch.bool, device=self.device),
                       terminated=z, truncated=z.clone(), episode_done=z.clone())

    def step(self, actions: torch.Tensor) -> EnvStep:
        actions = actions.long().to(self.device)
        reward = self._reward(actions)
        self.t += 1
        self.last = torch.nn.functional.one_hot(actions, self.a).float().flatten(1)
        final_obs, final_state = self._obs()
        truncated = self.t >= self.episode_length
        ep_ret, ep_len = self.tracker.update(reward, truncated)
        # auto-reset the finished envs only
        self.t = torch.where(truncated, 0, self.t)
        self.last = self.last * (~truncated).unsqueeze(-1)
        obs, state = self._obs()
        e, n = self.num_envs, self.n
        return EnvStep(obs=obs, state=state, active=torch.ones(e, n, dtype=torch.bool, device=self.device),
                       reward=reward, done=truncated.unsqueeze(-1).expand(-1, n).clone(),
                       terminated=torch.zeros_like(truncated), truncated=truncated,
                       final_obs=final_obs, final_state=final_state,
                       final_active=torch.ones(e, n, dtype=torch.bool, device=self.device),
                       episode_done=truncated, episode_return=ep_ret, episode_length=ep_len)

    def get_state(self) -> dict:
        return {"t": self.t.clone(), "last": self.last.clone(), "tracker": self.tracker.state_dict()}

    def set_state(self, state: dict) -> None:
        self.t.copy_(state["t"])
        self.last.copy_(state["last"])
        self.tracker.load_state_dict(state["tracker"])


def make(name: str, num_envs: int, device: torch.device, **kwargs) -> MatrixGameVecEnv:
    if not name:
        raise UserError(f"matrix needs a game name, e.g. matrix:climbing; expected one of {GAMES}")
    return MatrixGameVecEnv(name, num_envs, device, **kwargs)
