"""MPE scenarios re-implemented batched in torch, step-for-step equal to mpe2 (`mpe:simple_spread`).

Why: mpe2 steps one env at a time in Python (~3,500 env-steps/s); this backend steps E envs with
a fixed number of tensor ops, so collecting MAPPO rollouts is no longer the bottleneck.

What is reproduced from mpe2 `simple_spread_v3` (mpe2 1.1.1, `_mpe_utils/core.py` and
`simple_env.py`), checked against it in `tests/test_env_mpe_torch.py`:
- physics: dt 0.1, damping 0.25, mass 1, action force = 5 x unit direction (discrete action
  0 no-op, 1 left, 2 right, 3 down, 4 up; continuous Box(0, 1, (5,)) -> (a2 - a1, a4 - a3),
  clipped to [0, 1] first like mpe2's ClipOutOfBoundsWrapper), soft agent-agent contact force
  100 * softplus(-(d - 0.3) / 1e-3) * 1e-3 along the centre line, landmarks do not collide,
  and mpe2's integration order: position moves with the *old* velocity, then
  velocity = 0.75 * velocity + force * dt.
- observation of agent i: [own vel (2), own pos (2), landmark_l - pos_i for every landmark (2L),
  pos_j - pos_i for every other agent j in index order (2(N-1)), their comm (2(N-1), always 0)].
- reward of agent i: (1 - local_ratio) * (-sum over landmarks of the distance to the nearest
  agent) + local_ratio * (-number of other agents closer than 0.3).
- state: the N observations concatenated (mpe2's `state()`); episodes end by truncation after
  `max_cycles` steps, never by termination.
Not reproduced: mpe2's numpy RNG for initial positions (this uses a torch.Generator; use
`set_world` to copy an mpe2 start state), curriculum / partial-observability options.

Env strings: `mpe:simple_spread` (alias `mpe:simple_spread_v3`). kwargs: N (3), local_ratio (0.5),
max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv, seed_block_size
from hypermappo.errors import UserError

SCENARIOS = ["simple_spread"]
_ALIASES = {"simple_spread": "simple_spread", "simple_spread_v3": "simple_spread"}

# mpe2 World / Entity constants
DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 1e2
CONTACT_MARGIN = 1e-3
SENSITIVITY = 5.0  # Agent.accel is None -> mpe2's default sensitivity
AGENT_SIZE = 0.15
LANDMARK_SIZE = 0.05  # Entity default; only used for drawing
DIM_C = 2  # communication channel width in the observation (agents are silent: always zeros)

# discrete action -> unit direction, as in SimpleEnv._set_action
_DISCRETE_DIRECTIONS = [[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]]

_AGENT_RGB = (np.array([0.35, 0.35, 0.85]) * 200).astype(np.uint8)
_LANDMARK_RGB = (np.array([0.25, 0.25, 0.25]) * 200).astype(np.uint8)


class SimpleSpreadVecEnv(VecEnv):
    """E copies of simple_spread with N agents and N landmarks on `device`.

    Internally the env index is the *last* dimension ([entity, xy, E]): every per-step reduction
    is then over a small outer dimension (agents, landmarks, x/y), which torch vectorises across
    envs; reducing a size-2 or size-3 innermost dimension is ~20x slower on CPU. Only the outputs
    are transposed to the contract's [E, ...] layout.
    """

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *, N: int = 3, local_ratio: float = 0.5,
                 max_cycles: int = 25, continuous_actions: bool = False):
        if not isinstance(N, int) or N < 1:
            raise UserError(f"simple_spread needs N >= 1 agents, got N={N!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise UserError(f"local_ratio must be in [0, 1], got {local_ratio}")
        if max_cycles < 1:
            raise UserError(f"max_cycles must be >= 1, got {max_cycles}")
        self.num_envs, self.device = num_envs, torch.device(device)
        self.n_agents = self.n_landmarks = N
        self.local_ratio, self.max_cycles = float(local_ratio), int(max_cycles)
        self.continuous_actions = bool(continuous_actions)
        obs_dim = 4 + 2 * self.n_landmarks + 2 * (N - 1) + DIM_C * (N - 1)  # = 6N
        if self.continuous_actions:
            action_space = gym.spaces.Box(0.0, 1.0, (5,), np.float32)
        else:
            action_space = gym.spaces.Discrete(5)
        self.spec = EnvSpec(
            num_agents=N, obs_dim=obs_dim, state_dim=N * obs_dim,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            action_space=action_space, episode_limit=self.max_cycles,
            agent_names=[f"agent_{i}" for i in range(N)], can_render=True, can_save_state=True,
        )
        E, L, dev = num_envs, self.n_landmarks, self.device
        self._pos = torch.zeros(N + L, 2, E, device=dev)  # [N + L, 2, E]: agents, then landmarks
        self._vel = torch.zeros(N, 2, E, device=dev)  # [N, 2, E]
        self.t = torch.zeros(E, dtype=torch.long, device=dev)  # [E] steps taken in the current episode
        # the same counts on the host, moved on by the eager part of each step (`_finish`, `carried`): how many steps
        # end no episode is then known without reading the device (steps_without_end, once per collection step)
        self._t_host = np.zeros(E, dtype=np.int64)  # numpy: host arithmetic, no tensor op
        self.tracker = EpisodeTracker(E, N, dev)
        self.generator = torch.Generator(device=dev)
        self.generator.seed()  # unseeded reset() -> fresh randomness, like mpe2
        self.blocks: list[torch.Generator] | None = None  # seed blocks (`reset_blocks`): one generator per block

        # constants, made once
        self._action_force_xy = torch.tensor(_DISCRETE_DIRECTIONS, device=dev).T * SENSITIVITY  # [2, 5]
        # what agent i sees, in observation order: every landmark, then every other agent by index
        seen = [[N + k for k in range(L)] + [j for j in range(N) if j != i] for i in range(N)]
        self._seen = torch.tensor(seen, dtype=torch.long, device=dev).flatten()  # [N * (L + N - 1)]
        self._comm = torch.zeros(N, N - 1, 2, E, device=dev)  # [N, N-1, 2, E]: other agents' comm, all silent
        self._active = torch.ones(E, N, dtype=torch.bool, device=dev)  # nobody dies in MPE
        self._no_end = torch.zeros(E, dtype=torch.bool, device=dev)

        # agent-agent geometry of the current positions, refreshed by _observe, used by the next step's forces
        self._other_rel = torch.zeros(N, N - 1, 2, E, device=dev)  # [N, N-1, 2, E], pos_j - pos_i
        self._other_dist = torch.ones(N, N - 1, E, device=dev)  # [N, N-1, E]
        self._observe()

    # ------------------------------------------------------------------ [E, ...] views of the world
    @property
    def agent_pos(self) -> torch.Tensor:
        """[E, N, 2] view."""
        return self._pos[: self.n_agents].permute(2, 0, 1)

    @property
    def landmark_pos(self) -> torch.Tensor:
        """[E, L, 2] view."""
        return self._pos[self.n_agents:].permute(2, 0, 1)

    @property
    def agent_vel(self) -> torch.Tensor:
        """[E, N, 2] view."""
        return self._vel.permute(2, 0, 1)

    # ------------------------------------------------------------------ core maths
    def _observe(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Observations of the current positions; also caches the agent-agent geometry for the forces.

        Returns obs [E, N, obs_dim], agent-landmark distances [N, L, E], agent-other distances [N, N-1, E].
        """
        E, N, L = self.num_envs, self.n_agents, self.n_landmarks
        agent_pos = self._pos[:N]  # [N, 2, E]
        seen = self._pos.index_select(0, self._seen).view(N, L + N - 1, 2, E)  # [N, L+N-1, 2, E]
        rel = seen - agent_pos.unsqueeze(1)  # [N, L+N-1, 2, E]: landmark_l - pos_i, then pos_j - pos_i
        rel_x, rel_y = rel[:, :, 0], rel[:, :, 1]  # [N, L+N-1, E] each
        dist = torch.addcmul(rel_x * rel_x, rel_y, rel_y).sqrt_()  # [N, L+N-1, E]
        parts = [self._vel.unsqueeze(1), agent_pos.unsqueeze(1), rel, self._comm]
        obs_by_agent = torch.cat(parts, dim=1)  # [N, obs_dim / 2, 2, E], mpe2's observation order
        obs = obs_by_agent.view(N * self.spec.obs_dim, E).T.contiguous().view(E, N, self.spec.obs_dim)
        # own copies: as views their strides would be whatever layout a compiled graph gave `rel` (Inductor writes it
        # inside the observation buffer), unlike an eager step's, and the next graph call would recompile for them
        self._other_rel, self._other_dist = rel[:, L:].contiguous(), dist[:, L:].contiguous()
        return obs, dist[:, :L], self._other_dist

    def _action_force(self, actions: torch.Tensor) -> torch.Tensor:
        """Agent control force [N, 2, E] from the actions, as mpe2's SimpleEnv._set_action."""
        if self.continuous_actions:
            a = actions.to(self.device, torch.float32).clamp(0.0, 1.0)  # [E, N, 5]
            return ((a[..., 2::2] - a[..., 1::2]) * SENSITIVITY).permute(1, 2, 0)  # [N, 2, E]: (a2 - a1, a4 - a3)
        index = actions.to(self.device, torch.long).T.reshape(-1)  # [N * E], agent-major
        return self._action_force_xy.index_select(1, index).view(2, self.n_agents, -1).transpose(0, 1)

    def _contact_force(self) -> torch.Tensor:
        """Sum of soft contact forces on each agent [N, 2, E], from the positions before the step."""
        dist = self._other_dist  # [N, N-1, E]
        penetration = F.softplus((2 * AGENT_SIZE - dist) / CONTACT_MARGIN)  # [N, N-1, E], in units of the margin
        magnitude_over_dist = penetration.mul_(CONTACT_MARGIN * CONTACT_FORCE).div_(dist)  # [N, N-1, E]
        # the force on i from j points from j to i, i.e. along -(pos_j - pos_i)
        return (magnitude_over_dist.unsqueeze(2) * self._other_rel).sum(1).neg_()  # [N, 2, E]

    def _reward(self, landmark_dist: torch.Tensor, other_dist: torch.Tensor) -> torch.Tensor:
        """mpe2's local_ratio mix of the shared coverage reward and each agent's collision count [E, N]."""
        coverage = landmark_dist.amin(0).sum(0)  # [E], sum over landmarks of the nearest agent's distance
        collisions = (other_dist < 2 * AGENT_SIZE).sum(1)  # [N, E]
        reward = collisions.float().mul_(-self.local_ratio).sub_(coverage * (1.0 - self.local_ratio))  # [N, E]
        return reward.T.contiguous()  # [E, N]

    def _spawn(self, env_ids: torch.Tensor | None) -> None:
        """New episode start for the envs `env_ids` (None = all): uniform positions in [-1, 1]^2, at rest."""
        pos = self._uniform_starts(env_ids) * 2 - 1  # [N+L, 2, k]
        if env_ids is None:
            self._pos.copy_(pos)
            self._vel.zero_()
        else:
            self._pos[:, :, env_ids] = pos
            self._vel[:, :, env_ids] = 0.0

    def _respawn(self, ended: torch.Tensor) -> None:
        """`_spawn` of the envs where `ended` [E] without reading it on the host: new starts drawn for every env,
        taken where an env ended (the others keep their positions, velocities and step counts)."""
        pos = self._uniform_starts(None) * 2 - 1
        self._pos.copy_(torch.where(ended, pos, self._pos))
        self._vel.masked_fill_(ended, 0.0)
        self.t.masked_fill_(ended, 0)

    def _start_step(self, obs: torch.Tensor) -> EnvStep:
        """The EnvStep of a fresh start (reward 0, nothing done)."""
        E, N = self.num_envs, self.n_agents
        return EnvStep(obs=obs, state=obs.reshape(E, -1).clone(), active=self._active.clone(),
                       reward=torch.zeros(E, N, device=self.device),
                       done=torch.zeros(E, N, dtype=torch.bool, device=self.device),
                       terminated=self._no_end.clone(), truncated=self._no_end.clone(),
                       episode_done=self._no_end.clone())

    # ------------------------------------------------------------------ VecEnv API
    def _uniform_starts(self, env_ids: torch.Tensor | None) -> torch.Tensor:
        """Uniform draws [N+L, 2, k] for the starts of the envs `env_ids` (sorted; None = all): one draw from the
        env's generator, or with seed blocks one per block from the block's own generator, of that block's envs
        only: block b then draws what an env of the block's size seeded with its seed alone would."""
        shape = (self._pos.shape[0], 2)
        if self.blocks is None:
            k = self.num_envs if env_ids is None else env_ids.numel()
            return torch.rand(*shape, k, generator=self.generator, device=self.device)
        size = self.num_envs // len(self.blocks)
        counts = [size] * len(self.blocks) if env_ids is None else \
            torch.bincount(env_ids // size, minlength=len(self.blocks)).tolist()  # ids from nonzero(): on the host
        return torch.cat([torch.rand(*shape, c, generator=g, device=self.device)
                          for g, c in zip(self.blocks, counts)], -1)

    def reset_blocks(self, seeds: list[int]) -> EnvStep:
        """`reset` of len(seeds) equal blocks of envs, block b seeded with seeds[b]: each block's episodes are those
        of an env of num_envs / len(seeds) envs reset with that seed (seed_batch.py: several seeds in one env)."""
        seed_block_size(self, seeds)
        self.blocks = [torch.Generator(device=self.device).manual_seed(int(seed)) for seed in seeds]
        return self.reset()

    def reset(self, seed: int | None = None) -> EnvStep:
        if seed is not None:
            self.generator.manual_seed(seed)
        self._spawn(None)
        self.t.zero_()
        self._t_host[:] = 0
        self.tracker.reset_all()
        obs, _, _ = self._observe()
        return self._start_step(obs)

    def set_world(self, agent_pos, agent_vel, landmark_pos) -> EnvStep:
        """Put every env in the given physical state (e.g. copied from mpe2) without touching step counters.

        agent_pos / agent_vel [E, N, 2], landmark_pos [E, L, 2]; tensors or arrays. Returns the
        EnvStep of that state with zero reward, as `reset()` would.
        """
        for view, value in ((self.agent_pos, agent_pos), (self.agent_vel, agent_vel), (self.landmark_pos, landmark_pos)):
            view.copy_(torch.as_tensor(value, dtype=torch.float32))
        obs, _, _ = self._observe()
        return self._start_step(obs)

    def _advance(self, actions: torch.Tensor):
        """The branch-free part of a step (physics, observations, rewards, time limit, episode stats): one graph
        when compiled (`compile_step`)."""
        N = self.n_agents
        force = self._contact_force().add_(self._action_force(actions))  # [N, 2, E], mass 1
        self._pos[:N].add_(self._vel, alpha=DT)  # mpe2 moves with the old velocity first
        self._vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)
        final_obs, landmark_dist, other_dist = self._observe()
        reward = self._reward(landmark_dist, other_dist)  # [E, N]
        self.t += 1
        truncated = self.t >= self.max_cycles  # [E]
        ep_return, ep_length = self.tracker.update(reward, truncated)
        return final_obs, reward, truncated, ep_return, ep_length

    def compile_step(self, compile_fn) -> None:
        self._advance = compile_fn(self._advance)

    def step_parts(self):
        # the class's `_advance`, not the instance's: compile_step may have put its own graph there, and the core
        # goes into a larger graph
        return type(self)._advance.__get__(self), self._finish

    def step(self, actions: torch.Tensor) -> EnvStep:
        return self._finish(*self._advance(actions))

    def steps_without_end(self) -> int:
        # the time limit is the only end (nobody dies): an env at step t ends at its (max_cycles - t)-th next step;
        # read from the host's copy of the counts (no device read: collection asks before every step)
        return self.max_cycles - 1 - int(self._t_host.max())

    def carried(self, steps: int) -> None:
        self._t_host += steps

    def carry(self, final_obs, reward, truncated, ep_return, ep_length):
        E, N = self.num_envs, self.n_agents
        return (final_obs, final_obs.reshape(E, -1), self._active.clone(), None,
                torch.zeros(E, N, dtype=torch.bool, device=self.device))

    def _finish(self, final_obs, reward, truncated, ep_return, ep_length) -> EnvStep:
        """The rest of a step after `_advance`: auto-reset of the finished envs (a branch), the EnvStep."""
        N, E = self.n_agents, self.num_envs
        self._t_host += 1  # as `_advance` moved `t` on; the envs that ended restart at 0, as below on the device
        self._t_host[self._t_host >= self.max_cycles] = 0
        final_state = final_obs.reshape(E, -1).clone()  # [E, N * obs_dim]
        if self.sync_free:  # masks, no branch on the device's values (VecEnv.sync_free)
            self._respawn(truncated)
            obs, _, _ = self._observe()
        elif truncated.any():  # auto-reset only the finished envs
            ended = truncated.nonzero().squeeze(1)  # [k]
            self._spawn(ended)
            self.t[ended] = 0
            obs, _, _ = self._observe()
        else:
            obs = final_obs.clone()
        return EnvStep(obs=obs, state=obs.reshape(E, -1).clone(), active=self._active.clone(), reward=reward,
                       done=truncated.unsqueeze(1).expand(E, N).clone(), terminated=self._no_end.clone(),
                       truncated=truncated, final_obs=final_obs, final_state=final_state,
                       final_active=self._active.clone(), episode_done=truncated.clone(),
                       episode_return=ep_return, episode_length=ep_length)

    def get_state(self) -> dict:
        def copy(view):
            return view.clone(memory_format=torch.contiguous_format)
        return {"agent_pos": copy(self.agent_pos), "agent_vel": copy(self.agent_vel),
                "landmark_pos": copy(self.landmark_pos), "t": self.t.clone(),
                "rng": self.generator.get_state(), "tracker": self.tracker.state_dict()}

    def block_state(self, block: int) -> dict:
        """`get_state` of seed block `block` (`reset_blocks`) as the state of an env of that block's envs alone."""
        size = self.num_envs // len(self.blocks)
        rows = slice(block * size, (block + 1) * size)  # only the block's rows are copied (it is taken every update)

        def copy(view):
            return view[rows].clone(memory_format=torch.contiguous_format)
        return {"agent_pos": copy(self.agent_pos), "agent_vel": copy(self.agent_vel),
                "landmark_pos": copy(self.landmark_pos), "t": copy(self.t), "rng": self.blocks[block].get_state(),
                "tracker": {"returns": self.tracker.returns[rows].clone(), "lengths": self.tracker.lengths[rows].clone()}}

    def set_state(self, state: dict) -> None:
        self.agent_pos.copy_(state["agent_pos"])
        self.agent_vel.copy_(state["agent_vel"])
        self.landmark_pos.copy_(state["landmark_pos"])
        self.t.copy_(state["t"])
        self._t_host[:] = state["t"].cpu().numpy()
        self.generator.set_state(state["rng"])
        self.tracker.load_state_dict(state["tracker"])
        self._observe()  # refresh the cached agent-agent geometry

    def render(self, env_index: int = 0, size: int = 400) -> np.ndarray:
        """RGB frame [size, size, 3] uint8 of one env, drawn like mpe2 (camera fits all entities, y up).

        Unlike mpe2 the camera also fits the circles' radii, so agents at the edge are not cut off.
        """
        agents = self.agent_pos[env_index].detach().cpu().numpy().astype(np.float64)  # [N, 2]
        landmarks = self.landmark_pos[env_index].detach().cpu().numpy().astype(np.float64)  # [L, 2]
        cam_range = max(float(np.abs(agents).max()) + AGENT_SIZE, float(np.abs(landmarks).max()) + LANDMARK_SIZE)
        pixels_per_unit = size / 2 * 0.9 / cam_range
        frame = np.full((size, size, 3), 255, dtype=np.uint8)  # [H, W, 3]
        ys, xs = np.mgrid[0:size, 0:size]  # [H, W] pixel rows / columns
        entities = [(p, AGENT_SIZE, _AGENT_RGB) for p in agents] + [(p, LANDMARK_SIZE, _LANDMARK_RGB) for p in landmarks]
        for (x, y), radius, rgb in entities:  # agents first, landmarks on top, as mpe2 draws them
            cx, cy = size / 2 + x * pixels_per_unit, size / 2 - y * pixels_per_unit
            r = max(radius * pixels_per_unit, 2.0)
            d = np.sqrt((xs - cx) ** 2 + (ys - cy) ** 2)  # [H, W]
            frame[d <= r] = rgb
            frame[(d <= r) & (d > r - 1.5)] = 0  # black border
        return frame


def make(name: str, num_envs: int, device: torch.device | str = "cpu", **kwargs) -> VecEnv:
    """Registry entry point: `mpe:<scenario>` -> a batched torch env (see the module docstring for kwargs)."""
    from hypermappo.envs import mpe

    scenario = _ALIASES.get(name)
    if scenario is None:
        base = name[:-3] if name[-3:-1] == "_v" and name[-1].isdigit() else name  # mpe2's `_v3` suffixes
        other = mpe.scenario_make(base)
        if other is not None:
            return other(num_envs, device, **kwargs)
        supported = sorted(SCENARIOS + mpe.scenario_modules())
        raise UserError(f"unknown mpe scenario {name!r}; supported: {', '.join(supported)} (e.g. mpe:simple_spread)")
    return SimpleSpreadVecEnv(num_envs, device, **kwargs)
