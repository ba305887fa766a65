"""The one vectorised multi-agent environment interface every backend implements.

A `VecEnv` holds E environments with N agent *slots* each and speaks tensors on one device.
Everything the trainer needs comes back from `reset()` / `step()` as an `EnvStep`.

Conventions (the contract other code relies on):
- Shapes: obs `[E, N, obs_dim]`, state `[E, state_dim]`, available actions `[E, N, A]` (bool),
  reward `[E, N]`, done / active `[E, N]` (bool), terminated / truncated `[E]` (bool).
- Auto-reset: an env whose episode ends in `step()` is reset inside that same call, on its own,
  without touching the other envs. The returned `obs` / `state` / `active` /
  `available_actions` for that env already belong to the *new* episode; the last observation and
  state of the finished episode are in `final_obs` / `final_state` (used to bootstrap values on
  truncation). `reward`, `done`, `terminated`, `truncated` describe the step just taken.
- Death: an agent that dies mid-episode has `done = 1` on the step it dies (it receives that
  step's reward), and from the next observation on it is a padded slot: zero observation,
  `active = 0`, only action 0 ("no-op") available, reward 0, until its env resets.
- `done[e, n]` is 1 when agent n's trajectory ended at this step: it died, or env e terminated or
  was truncated. Values are bootstrapped from `final_obs` only for agents alive at a truncation.
- Episode return = sum over the episode's steps of the mean over the N agent slots of their
  rewards (dead slots count 0). `episode_return` / `episode_length` are valid where
  `episode_done` is 1. Every backend gets this bookkeeping from `EpisodeTracker`.
- Team reward: `spec.team_reward = True` says every agent alive at a step gets the same reward,
  the team's. The trainer then (`ppo.death=episode`, the default for such envs) hands that reward
  to the dead slots of the env too (`algos/death.py`); the env itself still gives dead slots 0.
- Heterogeneous agents: observations are zero-padded at the end to the largest agent's size;
  Discrete action spaces of different sizes are padded to the largest, and the padded actions
  are reported unavailable in `available_actions`. Obs / action spaces are Gymnasium spaces and
  describe one (padded) agent slot.
- Actions passed to `step()`: Discrete -> int64 `[E, N]`; MultiDiscrete -> int64 `[E, N, k]`;
  Box -> float32 `[E, N, d]`; MultiBinary -> float32 `[E, N, d]` of 0/1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields

import gymnasium as gym
import torch

from hypermappo.errors import UserError


@dataclass
class EnvSpec:
    """Static description of a batch of envs, the same for every env in it."""

    num_agents: int
    obs_dim: int
    state_dim: int
    observation_space: gym.spaces.Box  # one padded agent slot
    action_space: gym.spaces.Space  # one agent slot (Discrete / MultiDiscrete / Box / MultiBinary)
    has_available_actions: bool = False  # False: every action always available, field is None
    episode_limit: int = 0  # max steps per episode (0 = unknown)
    agent_names: list[str] = field(default_factory=list)
    can_render: bool = False
    can_save_state: bool = False  # True when get_state/set_state capture the envs exactly
    team_reward: bool = False  # every alive agent gets the same (team) reward at every step
    # discrete goals the env labels (e.g. ["hare", "stag"]); empty = none. Such an env puts
    # `extras["goal_event"]`: [E, N] int64 in every EnvStep, the goal index an agent completed (caught,
    # collected) in the step just taken, -1 when none: hindsight goal labels for learned co-players.
    goal_names: list[str] = field(default_factory=list)
    # every agent sees the others' last actions (as in gridworlds where moves are visible): co-player models may
    # read them and the Bayesian goal belief is updated on them (coplayer.model=bayes needs it)
    public_actions: bool = False
    # observation features that only say which agent is observing (e.g. a one-hot own id): models of the others
    # read the observation without them, so a behaviour learnt from one seat is recognised from another
    identity_features: list[int] = field(default_factory=list)
    # `view(obs [..., D], rel [...] long) -> [..., D]`: the observation co-player (i + rel) mod N would have, as far
    # as observer i's own observation `obs` shows it (rel 0: obs itself). Models of the others read the world from
    # the co-player's position through it, so "walk to the nearest hare" is the same function for every hunter,
    # the observer's own included. None: the env gives no such view (models read the observer's observation)
    coplayer_view: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # transformations of the world under which the game's rules are unchanged (envs/symmetry.py: a grid's
    # reflections), each its own inverse and commuting with the others: models of the others learn from their
    # samples in every one of them (coplayer.symmetries). Empty: none declared
    symmetries: list = field(default_factory=list)
    # set by the library, not by envs: the observation's last `belief_dim` features are a co-player belief
    # appended for the actor (coplayer.feed / hyper.context=[coplayer]), not the env's observation
    belief_dim: int = 0


@dataclass
class EnvStep:
    """What `reset()` and `step()` return; see the module docstring for the semantics."""

    obs: torch.Tensor  # [E, N, obs_dim] float32
    state: torch.Tensor  # [E, state_dim] float32
    active: torch.Tensor  # [E, N] bool, alive in `obs`
    reward: torch.Tensor  # [E, N] float32, reward of the step just taken (zeros after reset)
    done: torch.Tensor  # [E, N] bool
    terminated: torch.Tensor  # [E] bool
    truncated: torch.Tensor  # [E] bool
    available_actions: torch.Tensor | None = None  # [E, N, A] bool
    final_obs: torch.Tensor | None = None  # [E, N, obs_dim], valid where terminated|truncated
    final_state: torch.Tensor | None = None  # [E, state_dim], same
    final_active: torch.Tensor | None = None  # [E, N] bool: alive at the end of the episode
    episode_done: torch.Tensor | None = None  # [E] bool (= terminated | truncated)
    episode_return: torch.Tensor | None = None  # [E] float32, valid where episode_done
    episode_length: torch.Tensor | None = None  # [E] int64, valid where episode_done
    extras: dict = field(default_factory=dict)  # backend-specific per-env stats, e.g. capture rate

    def to(self, device: torch.device | str) -> EnvStep:
        kw = {}
        for f in fields(self):
            v = getattr(self, f.name)
            kw[f.name] = v.to(device) if isinstance(v, torch.Tensor) else v
        return EnvStep(**kw)


class EpisodeTracker:
    """Running per-env episode return / length, shared by all backends so the definition is one."""

    def __init__(self, num_envs: int, num_agents: int, device: torch.device | str = "cpu"):
        self.num_agents = num_agents
        self.returns = torch.zeros(num_envs, device=device)
        self.lengths = torch.zeros(num_envs, dtype=torch.long, device=device)

    def update(self, reward: torch.Tensor, episode_done: torch.Tensor):
        """reward [E, N], episode_done [E] -> (finished returns [E], finished lengths [E])."""
        self.returns += reward.sum(-1) / self.num_agents
        self.lengths += 1
        ret, length = self.returns.clone(), self.lengths.clone()
        keep = (~episode_done).to(self.returns.dtype)
        self.returns *= keep
        self.lengths *= keep.long()
        return ret, length

    def reset_all(self):
        self.returns.zero_()
        self.lengths.zero_()

    def state_dict(self) -> dict:
        return {"returns": self.returns.clone(), "lengths": self.lengths.clone()}

    def load_state_dict(self, sd: dict):
        self.returns.copy_(sd["returns"])
        self.lengths.copy_(sd["lengths"])


class VecEnv:
    """Base class: E envs x N agent slots. Subclasses implement `reset`, `step` (and optionally
    `render`, `get_state` / `set_state`, `close`)."""

    spec: EnvSpec
    num_envs: int
    device: torch.device

    def reset(self, seed: int | None = None) -> EnvStep:
        raise NotImplementedError

    def step(self, actions: torch.Tensor) -> EnvStep:
        raise NotImplementedError

    def render(self, env_index: int = 0):
        """An RGB frame (H, W, 3) uint8 numpy array of env `env_index`."""
        raise NotImplementedError(f"{type(self).__name__} cannot render")

    def get_state(self) -> dict:
        """Everything needed to continue exactly (only when spec.can_save_state)."""
        raise NotImplementedError(f"{type(self).__name__} cannot save its state")

    def set_state(self, state: dict) -> None:
        raise NotImplementedError(f"{type(self).__name__} cannot restore its state")

    # sync-free collection (runtime/sync_free.py) sets this on envs that can auto-reset without reading the device:
    # a batched torch env then resets its finished envs with masks, drawing new starts for every env (so its random
    # stream differs from the per-step path's, which draws only for the envs that ended); others ignore it
    sync_free: bool = False

    def compile_step(self, compile_fn) -> None:
        """ppo.compile: a batched torch env replaces the branch-free core of its step by `compile_fn(core)`;
        others keep stepping eagerly."""

    def step_parts(self):
        """A batched torch env's step as (core, finish), with `step(a) == finish(*core(a))`: `core` is branch-free
        and traceable as part of a larger graph (collect_step.py puts it in one with the policy), `finish` runs
        eagerly (auto-resets) and returns the EnvStep. None: the env has no such split."""
        return None

    def steps_without_end(self) -> int | None:
        """How many of the next steps surely end no episode (None: the env cannot tell). Where `step_parts` splits
        the step, collection runs such steps several to a graph call (collect_step.py), continuing each with
        `carry` instead of `finish`."""
        return None

    def carry(self, *core_outputs):
        """(obs, state, active, available_actions, done) of the next EnvStep from `core`'s outputs, for a step that
        `steps_without_end` promised ends no episode: `finish` without its auto-reset branch, traceable."""
        raise NotImplementedError(f"{type(self).__name__} has no carry (steps_without_end is None)")

    def carried(self, steps: int) -> None:
        """`steps` steps ran as `core` + `carry` inside a graph (collect_step.py): an env that keeps counts on the host
        (for `steps_without_end`) moves them on here."""

    def close(self) -> None:
        pass


def save_tensor_state(env, keys: tuple[str, ...]) -> dict:
    """get_state of a batched env whose exact state is the tensors named `keys` plus its EpisodeTracker."""
    state = {k: getattr(env, k).clone() for k in keys}
    state["tracker"] = env.tracker.state_dict()
    state["seeded"] = env._seeded
    return state


def load_tensor_state(env, keys: tuple[str, ...], state: dict, env_name: str) -> None:
    """set_state counterpart of `save_tensor_state`: shapes are checked (a one-line UserError names the tensor)."""
    for k in keys:
        value = torch.as_tensor(state[k])
        current = getattr(env, k)
        if value.shape != current.shape:
            raise UserError(f"{env_name}: set_state got {k} of shape {tuple(value.shape)}; "
                            f"expected {tuple(current.shape)}")
        setattr(env, k, value.to(device=env.device, dtype=current.dtype).clone())
    env.tracker.load_state_dict(state["tracker"])
    env._seeded = bool(state.get("seeded", True))


def seed_block_size(env, seeds: list[int]) -> int:
    """The envs per seed block of `env` split into len(seeds) blocks (a one-line UserError where they do not split)."""
    if not seeds or env.num_envs % len(seeds):
        raise UserError(f"{type(env).__name__}: {env.num_envs} envs do not split into {len(seeds)} equal seed blocks")
    return env.num_envs // len(seeds)


class StreamSeedBlocks:
    """Seed blocks (seed_batch.py: several seeds' envs in one env) of a batched env whose envs each draw from their own
    counter-based stream, keyed by `_stream_keys(seed, index)`: block b's envs are keyed as the envs of an env of the
    block's size reset with seeds[b] alone, so they draw what those draw. Mixed in before TensorState."""

    blocks: list[int] | None = None

    def reset_blocks(self, seeds: list[int]) -> EnvStep:
        size = seed_block_size(self, seeds)
        index = torch.arange(size, device=self.device) + self.env_offset
        self.rng_key = torch.cat([self._stream_keys(int(seed), index) for seed in seeds])
        self.rng_counter.zero_()
        self._seeded = True
        self.blocks = list(seeds)
        return self.reset()  # no seed: the streams as keyed here

    def block_state(self, block: int) -> dict:
        """`get_state` of seed block `block` as the state of an env of that block's envs alone."""
        size = self.num_envs // len(self.blocks)
        rows = slice(block * size, (block + 1) * size)  # only the block's rows are copied (it is taken every update)
        state = {k: getattr(self, k)[rows].clone() for k in self._STATE_KEYS}
        state["tracker"] = {n: x[rows].clone() for n, x in self.tracker.state_dict().items()}
        state["seeded"] = self._seeded
        return state


class TensorState:
    """get_state / set_state / observe of a batched env whose exact state is the tensors named `_STATE_KEYS` plus its
    EpisodeTracker (`save_tensor_state`); the env gives `_observe()` -> (obs, state). Mixed in before VecEnv."""

    _STATE_KEYS: tuple[str, ...] = ()
    _STATE_NAME = "env"  # the env as a set_state error names it

    def get_state(self) -> dict:
        return save_tensor_state(self, self._STATE_KEYS)

    def set_state(self, state: dict) -> None:
        load_tensor_state(self, self._STATE_KEYS, state, self._STATE_NAME)

    def observe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(obs, state) of the current positions, e.g. after set_state."""
        return self._observe()
