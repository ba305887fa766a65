"""Shared machinery of the batched MPE communication scenarios (speaker_listener, reference, crypto).

Why a base class: the three scenarios differ only in their world, observations and rewards; the
episode bookkeeping (step counter, auto-reset of finished envs, EpisodeTracker, padding to agent
slots, mpe2's `state()`, get/set_state, rendering) is the same and lives here once.

What is reproduced from mpe2 1.1.1 (`_mpe_utils/simple_env.py`, `core.py`):
- action decoding of an agent that moves AND speaks: discrete -> one Discrete(5 * dim_c) action,
  movement = a % 5, message = a // 5; continuous -> Box(0, 1, (5 + dim_c,)), clipped to [0, 1] like
  mpe2's ClipOutOfBoundsWrapper, movement force = 5 x (a2 - a1, a4 - a3), message = a[5:].
  Silent agents send nothing (their comm state is zeros); unmovable agents only speak.
- comm state: an agent's utterance (one-hot in discrete mode, the raw clipped vector in continuous
  mode) becomes its `state.c` in the world step, without noise (c_noise is None in these scenarios).
- integration of movable agents without collisions (none of these scenarios' entities collide):
  position moves with the old velocity, then velocity = 0.75 * velocity + force * dt (mass 1).
- `state()` = the agents' unpadded observations concatenated; episodes end by truncation only.

The world is a dict of named [E, ...] tensors (`self.world`), so get_state / set_state / set_world
work for every scenario without scenario code.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.mpe._world import _DIRECTIONS as _DISCRETE_DIRECTIONS
from hypermappo.envs.mpe._world import DAMPING, DT
from hypermappo.envs.mpe._world import DEFAULT_ACCEL as SENSITIVITY
from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv
from hypermappo.errors import UserError

MOVE_ACTIONS = 5  # no-op, left, right, down, up


def movement_force(move: torch.Tensor, continuous: bool) -> torch.Tensor:
    """Control force [..., 2] from a discrete move index [...] or the first 5 continuous entries [..., 5+]."""
    if continuous:
        return (move[..., 2:5:2] - move[..., 1:5:2]) * SENSITIVITY  # (a2 - a1, a4 - a3)
    directions = torch.tensor(_DISCRETE_DIRECTIONS, device=move.device) * SENSITIVITY  # [5, 2]
    return directions[move]


def integrate(pos: torch.Tensor, vel: torch.Tensor, force: torch.Tensor) -> None:
    """mpe2's World.integrate_state without collisions, in place: pos, vel, force [..., 2], mass 1."""
    pos.add_(vel, alpha=DT)
    vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)


def one_hot(index: torch.Tensor, size: int) -> torch.Tensor:
    """float one-hot [..., size] of an int64 index [...] (mpe2's discrete utterance)."""
    return torch.eye(size, device=index.device)[index]


def uniform(shape: tuple[int, ...], generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Uniform in [-1, 1), mpe2's start positions."""
    return torch.rand(shape, generator=generator, device=device) * 2 - 1


class CommVecEnv(VecEnv):
    """E copies of one communication scenario; subclasses fill in the scenario hooks below.

    Subclass attributes: `agent_names`, `obs_sizes` (unpadded, per agent), `action_sizes` (discrete
    Discrete(n) per agent), `continuous_sizes` (Box dims per agent), `team_reward`, `world_shapes`
    (name -> (shape after E, dtype)).
    """

    scenario: str
    agent_names: list[str]
    obs_sizes: list[int]
    action_sizes: list[int]
    continuous_sizes: list[int]
    team_reward: bool = False
    world_shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *, max_cycles: int = 25,
                 continuous_actions: bool = False):
        if not isinstance(max_cycles, int) or max_cycles < 1:
            raise UserError(f"{self.scenario}: max_cycles must be an int >= 1, got {max_cycles!r}")
        if not isinstance(continuous_actions, bool):
            raise UserError(f"{self.scenario}: continuous_actions must be true or false, got {continuous_actions!r}")
        self.num_envs, self.device = num_envs, torch.device(device)
        self.max_cycles, self.continuous_actions = max_cycles, continuous_actions
        E, N, dev = num_envs, len(self.agent_names), self.device
        obs_dim = max(self.obs_sizes)
        sizes = self.continuous_sizes if continuous_actions else self.action_sizes
        if continuous_actions:  # one Box slot of the widest agent; a narrower agent reads its first entries
            action_space: gym.Space = gym.spaces.Box(0.0, 1.0, (max(sizes),), np.float32)
        else:
            action_space = gym.spaces.Discrete(max(sizes))
        masked = not continuous_actions and len(set(sizes)) > 1
        self.spec = EnvSpec(
            num_agents=N, obs_dim=obs_dim, state_dim=sum(self.obs_sizes),
            observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            action_space=action_space, has_available_actions=masked, episode_limit=max_cycles,
            agent_names=list(self.agent_names), can_render=True, can_save_state=True, team_reward=self.team_reward,
        )
        # [E, N, A] padded discrete actions an agent cannot take are unavailable (constant: nobody dies)
        available = torch.arange(max(sizes)) < torch.tensor(sizes).unsqueeze(1)  # [N, A]
        self._available = available.to(dev).expand(E, N, -1) if masked else None
        # state = each agent's unpadded observation, concatenated: positions in the flat padded [N * obs_dim]
        keep = torch.arange(obs_dim) < torch.tensor(self.obs_sizes).unsqueeze(1)  # [N, obs_dim]
        self._state_index = keep.flatten().nonzero().squeeze(1).to(dev)  # [state_dim]
        self.world = {name: torch.zeros(E, *shape, dtype=dtype, device=dev)
                      for name, (shape, dtype) in self.world_shapes.items()}
        self.t = torch.zeros(E, dtype=torch.long, device=dev)  # [E] steps taken in the current episode
        self.tracker = EpisodeTracker(E, N, dev)
        self.generator = torch.Generator(device=dev)
        self.generator.seed()  # unseeded reset() -> fresh randomness, like mpe2
        self._active = torch.ones(E, N, dtype=torch.bool, device=dev)  # nobody dies in MPE
        self._no_end = torch.zeros(E, dtype=torch.bool, device=dev)

    # ------------------------------------------------------------------ scenario hooks
    def _spawn(self, k: int) -> dict[str, torch.Tensor]:
        """World values [k, ...] of k fresh episodes, drawn from self.generator (comm state zero)."""
        raise NotImplementedError

    def _act(self, actions: torch.Tensor) -> None:
        """Apply one step's actions ([E, N] int64 or [E, N, D] float, already clipped) to self.world."""
        raise NotImplementedError

    def _observe(self) -> torch.Tensor:
        """Padded observations [E, N, obs_dim] of the current world."""
        raise NotImplementedError

    def _reward(self) -> torch.Tensor:
        """Rewards [E, N] of the current world (after the step)."""
        raise NotImplementedError

    def _render_entities(self, env_index: int) -> list[tuple[np.ndarray, float, np.ndarray]]:
        """(position [2], radius, rgb uint8 [3]) of every entity to draw, in drawing order."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared bookkeeping
    def _respawn(self, env_ids: torch.Tensor | None) -> None:
        k = self.num_envs if env_ids is None else env_ids.numel()
        fresh = self._spawn(k)
        for name, value in self.world.items():
            if env_ids is None:
                value.copy_(fresh[name])
            else:
                value[env_ids] = fresh[name]

    def _state(self, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(self.num_envs, -1).index_select(1, self._state_index)  # [E, state_dim]

    def _start_step(self) -> EnvStep:
        E, N = self.num_envs, self.spec.num_agents
        obs = self._observe()
        return EnvStep(obs=obs, state=self._state(obs), active=self._active.clone(),
                       reward=torch.zeros(E, N, device=self.device),
                       done=torch.zeros(E, N, dtype=torch.bool, device=self.device),
                       terminated=self._no_end.clone(), truncated=self._no_end.clone(),
                       available_actions=self._available_now(), episode_done=self._no_end.clone())

    def _available_now(self) -> torch.Tensor | None:
        return None if self._available is None else self._available.clone()

    def reset(self, seed: int | None = None) -> EnvStep:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._respawn(None)
        self.t.zero_()
        self.tracker.reset_all()
        return self._start_step()

    def set_world(self, **values) -> EnvStep:
        """Put every env in the given world (e.g. copied from mpe2) without touching step counters.

        Keyword names are `world_shapes`' keys, values [E, ...] tensors or arrays; omitted ones keep
        their value. Returns the EnvStep of that world with zero reward, as `reset()` would.
        """
        unknown = sorted(set(values) - set(self.world))
        if unknown:
            raise UserError(f"{self.scenario}.set_world: unknown {unknown}; expected some of {sorted(self.world)}")
        for name, value in values.items():
            value = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
            self.world[name].copy_(value.to(self.world[name].dtype))
        return self._start_step()

    def step(self, actions: torch.Tensor) -> EnvStep:
        actions = actions.to(self.device)
        if self.continuous_actions:
            actions = actions.to(torch.float32).clamp(0.0, 1.0)  # [E, N, D], mpe2's ClipOutOfBoundsWrapper
        else:
            actions = actions.to(torch.long)  # [E, N]
        self._act(actions)
        final_obs = self._observe()  # [E, N, obs_dim]
        reward = self._reward()  # [E, N]
        self.t += 1
        truncated = self.t >= self.max_cycles  # [E]
        ep_return, ep_length = self.tracker.update(reward, truncated)
        E, N = self.num_envs, self.spec.num_agents
        final_state = self._state(final_obs)
        if truncated.any():  # auto-reset only the finished envs
            ended = truncated.nonzero().squeeze(1)  # [k]
            self._respawn(ended)
            self.t[ended] = 0
            obs = self._observe()
        else:
            obs = final_obs.clone()
        return EnvStep(obs=obs, state=self._state(obs), active=self._active.clone(), reward=reward,
                       done=truncated.unsqueeze(1).expand(E, N).clone(), terminated=self._no_end.clone(),
                       truncated=truncated, available_actions=self._available_now(), final_obs=final_obs,
                       final_state=final_state, final_active=self._active.clone(), episode_done=truncated.clone(),
                       episode_return=ep_return, episode_length=ep_length)

    def get_state(self) -> dict:
        return {"world": {k: v.clone() for k, v in self.world.items()}, "t": self.t.clone(),
                "rng": self.generator.get_state(), "tracker": self.tracker.state_dict()}

    def set_state(self, state: dict) -> None:
        for name, value in self.world.items():
            value.copy_(state["world"][name])
        self.t.copy_(state["t"])
        self.generator.set_state(state["rng"])
        self.tracker.load_state_dict(state["tracker"])

    def render(self, env_index: int = 0, size: int = 400) -> np.ndarray:
        """RGB frame [size, size, 3] uint8 of one env, drawn like mpe2 (camera fits all entities, y up).

        Instead of mpe2's text line "<agent> sends <letter>", every speaking agent's current utterance
        is a row of `dim_c` grey squares at the bottom left (darker = larger entry), one row per speaker.
        """
        entities = self._render_entities(env_index)
        cam_range = max(float(np.abs(p).max()) + r for p, r, _ in entities)
        pixels_per_unit = size / 2 * 0.9 / cam_range
        frame = np.full((size, size, 3), 255, dtype=np.uint8)  # [H, W, 3]
        ys, xs = np.mgrid[0:size, 0:size]  # [H, W] pixel rows / columns
        for (x, y), radius, rgb in entities:
            cx, cy = size / 2 + x * pixels_per_unit, size / 2 - y * pixels_per_unit
            r = max(radius * pixels_per_unit, 2.0)
            d = np.sqrt((xs - cx) ** 2 + (ys - cy) ** 2)  # [H, W]
            frame[d <= r] = rgb
            frame[(d <= r) & (d > r - 1.5)] = 0  # black border
        cell = max(size // 40, 3)
        for row, message in enumerate(self._messages(env_index)):  # [dim_c] each
            top = size - (row + 1) * (cell + 2) - 2
            for k, value in enumerate(np.clip(message, 0.0, 1.0)):
                left = 4 + k * (cell + 2)
                frame[top:top + cell, left:left + cell] = np.uint8(255 - 200 * value)
                frame[top:top + cell, [left, left + cell - 1]] = 0
                frame[[top, top + cell - 1], left:left + cell] = 0
        return frame

    def _messages(self, env_index: int) -> list[np.ndarray]:
        """Utterances [dim_c] of the speaking agents of one env, in agent order (for render)."""
        comm = self.world["comm"][env_index].detach().cpu().numpy()
        return list(comm.reshape(-1, comm.shape[-1]))
