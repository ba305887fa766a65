"""PettingZoo ParallelEnvs (mpe2 scenarios or your own) as a VecEnv, stepped in this process or in workers.

Env strings: `mpe2:<scenario>` (e.g. `mpe2:simple_spread_v3`; env kwargs go to
`mpe2.<scenario>.parallel_env(**kwargs)`) and `pettingzoo:<module>:<factory>` (imports `module` and
calls `factory(**kwargs)`, which must return a PettingZoo `ParallelEnv`).

How a ParallelEnv maps onto the VecEnv contract of `vec.py`:
- Agent slots are `env.possible_agents`, in that order; `spec.agent_names` lists them.
- Observations are flattened (`gymnasium.spaces.flatten`). Heterogeneous agents: an agent whose
  observation is smaller than the largest one is zero-padded at the end to `spec.obs_dim`.
- Discrete action spaces of different sizes are padded to the largest; the padded actions are
  reported unavailable (`has_available_actions`); should one reach the env anyway, action 0 is sent.
  Action masks are used when the env gives them, as `infos[agent]["action_mask"]` or as Dict
  observations `{"observation": ..., "action_mask": ...}`. Box / MultiDiscrete / MultiBinary action
  spaces must be the same for every agent.
- Death: an agent that leaves `env.agents`, or is terminated / truncated while others go on, has
  `done = 1` on that step and is a dead slot afterwards (zero obs, active 0, only action 0
  available, reward 0) until its env resets. The episode ends when no agent is left alive; it counts
  as truncated when an agent alive in the last step was truncated (a time limit), else as terminated.
  `final_active` marks the agents of the last step that were not terminated (those to bootstrap).
  An agent that joins `env.agents` mid-episode is active from its first observation on.
- Global state: `env.state()` when the env implements it, else the concatenation of the padded
  observations of all slots (dead slots zero), `[N * obs_dim]`.
- Seeding: `reset(seed)` seeds env i with `seed + i`; its k-th auto-reset uses `seed + i + k * E`,
  so a run is reproducible and does not depend on how the envs are split over workers.
- Our own kwargs (all others go to the env): `vectorizer` ("inprocess", the default, or
  "subprocess" for slow envs), `num_workers` (subprocess; default min(E, CPU count)), `start_method`
  (multiprocessing; default "fork" where available), `render_mode` ("rgb_array" makes `render(i)`
  work; envs are created without a render mode otherwise), `team_reward` (bool, default False: say True
  when every alive agent always gets the same reward, the team's; it sets `spec.team_reward`, so
  `ppo.death=auto` keeps dead agents in the episode with the team reward, see `algos/death.py`).
- Third-party env state cannot be saved: `spec.can_save_state` is False.
- Goal labels: an env with a non-empty attribute `goal_names` (list of str) labels goals; it sets
  `spec.goal_names`, and `infos[agent]["goal_event"]` (int goal index the agent completed in the step just
  taken; missing or -1: none) becomes `extras["goal_event"]` [E, N] int64 of every EnvStep (-1 at reset).

The vectorisers only talk to `SingleEnvAdapter`, so other backends (`gym_multiagent.py`) reuse them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import multiprocessing as mp
import os
import pickle
import pkgutil
import re
import signal
import traceback
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv
from hypermappo.errors import UserError
from hypermappo.runtime.parent_death import die_with_parent

VECTORIZERS = ("inprocess", "subprocess")
_EPISODE_LIMIT_ATTRIBUTES = ("max_cycles", "max_steps", "_max_episode_steps", "max_episode_steps", "episode_limit")


# ---------------------------------------------------------------------------------------------
# One env as N padded agent slots
# ---------------------------------------------------------------------------------------------


class SingleEnvAdapter:
    """One multi-agent env seen as N fixed agent slots of padded numpy arrays.

    The vectorisers only use `spec`, `reset`, `step`, `write_obs`, `render` and `close`, so any
    env family becomes a VecEnv by implementing `reset` / `step` on top of the helpers here
    (`_setup_slots`, `_write_agent_obs`, `_finish_step`), which keep the death / padding rules in one place.
    """

    spec: EnvSpec
    goal_event: np.ndarray | None = None  # [N] int64 goal completed in the last step (-1 none); None: no goal labels

    # --- to implement ---------------------------------------------------------------------
    def reset(self, seed: int | None) -> None:
        raise NotImplementedError

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        """actions [N] (or [N, k]) -> reward [N] float32, done [N] bool, env terminated, env truncated."""
        raise NotImplementedError

    def render(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} cannot render")

    def close(self) -> None:
        pass

    def env_state(self) -> np.ndarray | None:
        """The env's own global state [state_dim], or None to use the concatenated observations."""
        return None

    # --- shared helpers ----------------------------------------------------------------------
    def _setup_slots(self, agent_names: list[str], obs_spaces: list[gym.Space], action_spaces: list[gym.Space],
                     *, env_gives_masks: bool, episode_limit: int, can_render: bool, what: str) -> None:
        """Work out the padded slot layout from per-agent spaces; sets `spec` except `state_dim`."""
        n = len(agent_names)
        if n == 0:
            raise UserError(f"{what} has no agents")
        self.obs_spaces = obs_spaces
        self.obs_sizes = [int(gym.spaces.flatdim(s)) for s in obs_spaces]
        self.obs_is_box = [isinstance(s, gym.spaces.Box) for s in obs_spaces]
        obs_dim = max(self.obs_sizes)
        self.action_spaces = action_spaces
        discrete = [isinstance(s, gym.spaces.Discrete) for s in action_spaces]
        if all(discrete):
            self.action_sizes = [int(s.n) for s in action_spaces]
            self.action_starts = [int(s.start) for s in action_spaces]
            slot_action_space: gym.Space = gym.spaces.Discrete(max(self.action_sizes))
            padded = len(set(self.action_sizes)) > 1
            has_available_actions = padded or env_gives_masks
        elif any(discrete) or any(s != action_spaces[0] for s in action_spaces):
            raise UserError(f"{what}: agents' action spaces differ ({action_spaces}); only Discrete spaces of "
                            f"different sizes can be padded")
        elif not isinstance(action_spaces[0], gym.spaces.Box | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
            raise UserError(f"{what}: unsupported action space {action_spaces[0]}")
        else:
            self.action_sizes = None
            slot_action_space = action_spaces[0]
            has_available_actions = False
        self.spec = EnvSpec(
            num_agents=n, obs_dim=obs_dim, state_dim=n * obs_dim,
            observation_space=gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
            action_space=slot_action_space, has_available_actions=has_available_actions,
            episode_limit=int(episode_limit or 0), agent_names=[str(a) for a in agent_names],
            can_render=can_render, can_save_state=False,
        )
        num_actions = int(slot_action_space.n) if self.action_sizes else 1
        self.obs = np.zeros((n, obs_dim), np.float32)  # [N, obs_dim] latest observation, dead slots zero
        self.alive = np.zeros(n, bool)  # [N] slots that act in the next step
        self.shown = np.zeros(n, bool)  # [N] slots whose `obs` is valid (alive, or final_active after an end)
        self.env_masks = np.ones((n, num_actions), bool)  # [N, A] the env's own action masks
        self.padding_masks = np.ones((n, num_actions), bool)  # [N, A] False for padded actions
        if self.action_sizes:
            for i, size in enumerate(self.action_sizes):
                self.padding_masks[i, size:] = False
        self.noop_mask = np.zeros(num_actions, bool)  # [A] what a dead slot may do: action 0 only
        self.noop_mask[0] = True
        self.noop_actions = [self._noop(s) for s in action_spaces]

    @staticmethod
    def _noop(space: gym.Space):
        if isinstance(space, gym.spaces.Discrete):
            return int(space.start)
        if isinstance(space, gym.spaces.Box):
            return np.clip(np.zeros(space.shape, space.dtype), space.low, space.high)
        if isinstance(space, gym.spaces.MultiDiscrete):
            return np.asarray(space.start, space.dtype).copy()
        return np.zeros(space.shape, space.dtype)

    def _env_action(self, slot: int, action):
        """Slot action -> what agent `slot`'s own action space expects."""
        if self.action_sizes is not None:
            a = int(action)
            return (a if a < self.action_sizes[slot] else 0) + self.action_starts[slot]
        space = self.action_spaces[slot]
        return np.asarray(action, dtype=space.dtype).reshape(space.shape)

    def _write_agent_obs(self, slot: int, observation, action_mask=None) -> None:
        size = self.obs_sizes[slot]
        if self.obs_is_box[slot]:
            self.obs[slot, :size] = np.asarray(observation, np.float32).reshape(-1)
        else:
            self.obs[slot, :size] = gym.spaces.flatten(self.obs_spaces[slot], observation)
        if action_mask is not None and self.action_sizes is not None:
            self.env_masks[slot, :self.action_sizes[slot]] = np.asarray(action_mask).reshape(-1).astype(bool)

    def _start_episode(self, present: np.ndarray) -> None:
        """After a reset wrote the first observations: present [N] bool slots are alive."""
        self.alive = present.copy()
        self.shown = present.copy()
        self.obs[~self.shown] = 0.0

    def _finish_step(self, acted: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                     present: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Per-agent flags of the step just taken -> done [N], env terminated, env truncated.

        acted: slots alive before the step; terminated / truncated: the env's per-agent flags;
        present: slots still in the env after the step. Updates `alive`, `shown` and zeroes dead obs.
        """
        ended = acted & (terminated | truncated | ~present)
        alive_next = present & ~terminated & ~truncated
        if alive_next.any():
            self.alive, self.shown = alive_next, alive_next.copy()
            done, env_terminated, env_truncated = ended, False, False
        else:  # episode over; keep the last obs of agents that were not terminated (for bootstrapping)
            final_active = acted & ~terminated & (truncated | present)
            self.alive, self.shown = alive_next, final_active
            done = np.ones_like(ended)
            env_truncated = bool(final_active.any())
            env_terminated = not env_truncated
        self.obs[~self.shown] = 0.0
        return done, env_terminated, env_truncated

    def write_obs(self, obs_out: np.ndarray, state_out: np.ndarray, active_out: np.ndarray,
                  available_out: np.ndarray | None) -> None:
        """Copy the current observation into the caller's arrays ([N, obs_dim], [state_dim], [N], [N, A])."""
        obs_out[:] = self.obs
        state = self.env_state()
        state_out[:] = self.obs.reshape(-1) if state is None else state
        active_out[:] = self.shown
        if available_out is not None:
            available_out[:] = np.where(self.alive[:, None], self.padding_masks & self.env_masks, self.noop_mask)

    def _probe_state_dim(self) -> None:
        state = self.env_state()
        if state is not None:
            self.spec.state_dim = int(state.size)


def episode_limit_of(env) -> int:
    """The env's max episode length, read from the attribute names common envs use (0 when unknown)."""
    for obj in (env, getattr(env, "unwrapped", env)):
        spec = getattr(obj, "spec", None)
        if getattr(spec, "max_episode_steps", None):
            return int(spec.max_episode_steps)
        for name in _EPISODE_LIMIT_ATTRIBUTES:
            value = getattr(obj, name, None)
            if isinstance(value, int | np.integer) and value > 0:
                return int(value)
    return 0


class ParallelEnvAdapter(SingleEnvAdapter):
    """A PettingZoo ParallelEnv as N slots; slot order = `env.possible_agents`."""

    def __init__(self, env, *, can_render: bool = False, what: str = "env"):
        self.env = env
        self.agent_names = list(env.possible_agents)
        self.slot_of = {name: i for i, name in enumerate(self.agent_names)}
        obs_spaces = [env.observation_space(a) for a in self.agent_names]
        self.dict_obs = [isinstance(s, gym.spaces.Dict) and "observation" in s.spaces for s in obs_spaces]
        obs_spaces = [s["observation"] if d else s for s, d in zip(obs_spaces, self.dict_obs)]
        observations, infos = env.reset()  # a probe: some envs only answer state() / masks after a reset
        masks_in_infos = any(isinstance(infos.get(a), dict) and "action_mask" in infos[a] for a in self.agent_names)
        masks_in_obs = any(d and "action_mask" in env.observation_space(a).spaces
                           for a, d in zip(self.agent_names, self.dict_obs))
        self._setup_slots(self.agent_names, obs_spaces, [env.action_space(a) for a in self.agent_names],
                          env_gives_masks=masks_in_infos or masks_in_obs, episode_limit=episode_limit_of(env),
                          can_render=can_render, what=what)
        try:
            self.env.state()
            self.has_env_state = True
        except (NotImplementedError, AttributeError):
            self.has_env_state = False
        self._write_observations(observations, infos)
        self._start_episode(self._present())
        self._probe_state_dim()
        goal_names = list(getattr(env, "goal_names", None) or [])
        if goal_names:
            self.spec.goal_names = [str(g) for g in goal_names]
            self.goal_event = np.full(self.spec.num_agents, -1, np.int64)

    def env_state(self) -> np.ndarray | None:
        return np.asarray(self.env.state(), np.float32).reshape(-1) if self.has_env_state else None

    def _present(self) -> np.ndarray:
        present = np.zeros(self.spec.num_agents, bool)  # [N]
        for name in self.env.agents:
            present[self.slot_of[name]] = True
        return present

    def _write_observations(self, observations: dict, infos: dict) -> None:
        for name, o in observations.items():
            i = self.slot_of[name]
            mask = None
            if self.dict_obs[i]:
                mask, o = o.get("action_mask"), o["observation"]
            info = infos.get(name) if infos else None
            if isinstance(info, dict) and "action_mask" in info:
                mask = info["action_mask"]
            self._write_agent_obs(i, o, mask)

    def reset(self, seed: int | None) -> None:
        observations, infos = self.env.reset(seed=seed)
        if self.goal_event is not None:
            self.goal_event.fill(-1)
        self.obs.fill(0.0)
        self.env_masks.fill(True)
        self._write_observations(observations, infos)
        self._start_episode(self._present())

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool, bool]:
        n = self.spec.num_agents
        acted = self.alive.copy()  # [N]
        env_actions = {}
        for name in self.env.agents:  # the env expects an action from each agent it still holds
            i = self.slot_of[name]
            env_actions[name] = self._env_action(i, actions[i]) if acted[i] else self.noop_actions[i]
        observations, rewards, terminations, truncations, infos = self.env.step(env_actions)
        reward = np.zeros(n, np.float32)  # [N]
        terminated = np.zeros(n, bool)  # [N]
        truncated = np.zeros(n, bool)  # [N]
        for name, r in rewards.items():
            reward[self.slot_of[name]] = r
        for name, flag in terminations.items():
            terminated[self.slot_of[name]] = flag
        for name, flag in truncations.items():
            truncated[self.slot_of[name]] = flag
        reward *= acted
        if self.goal_event is not None:
            self.goal_event.fill(-1)
            for name, info in (infos or {}).items():
                if isinstance(info, dict) and info.get("goal_event") is not None and name in self.slot_of:
                    self.goal_event[self.slot_of[name]] = int(info["goal_event"])
        self._write_observations(observations, infos)
        done, env_terminated, env_truncated = self._finish_step(acted, terminated, truncated, self._present())
        return reward, done, env_terminated, env_truncated

    def render(self) -> np.ndarray:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


# ---------------------------------------------------------------------------------------------
# Batched layout: every EnvStep field of E envs in one flat float32 buffer (one copy to torch)
# ---------------------------------------------------------------------------------------------


class _BatchLayout:
    """Where each EnvStep field of E envs lives in one flat float32 buffer, field after field.

    Each field is a contiguous [E, ...] block, so one numpy->torch copy per step yields contiguous
    tensors, and per-env numpy views let adapters write in place.
    """

    def __init__(self, spec: EnvSpec, num_envs: int):
        n, d, s = spec.num_agents, spec.obs_dim, spec.state_dim
        shapes = {"obs": (n, d), "state": (s,), "active": (n,), "reward": (n,), "done": (n,),
                  "terminated": (1,), "truncated": (1,),
                  "final_obs": (n, d), "final_state": (s,), "final_active": (n,)}
        if spec.has_available_actions:
            shapes["available_actions"] = (n, int(spec.action_space.n))
        if spec.goal_names:
            shapes["goal_event"] = (n,)
        self.num_envs = num_envs
        self.blocks: dict[str, tuple[int, tuple[int, ...]]] = {}  # name -> (offset, per-env shape)
        offset = 0
        for name, shape in shapes.items():
            self.blocks[name] = (offset, shape)
            offset += num_envs * int(np.prod(shape))
        self.size = offset

    def fields(self, buffer):
        """name -> [E, ...] view of `buffer` (numpy array or torch tensor of length `size`)."""
        out = {}
        for name, (offset, shape) in self.blocks.items():
            length = self.num_envs * int(np.prod(shape))
            out[name] = buffer[offset:offset + length].reshape(self.num_envs, *shape)
        return out


class _EnvGroup:
    """Envs `first .. first + count - 1` of E stepped in a loop: what the in-process vectoriser and
    each worker process hold. Auto-resets and seeds its envs itself, so workers need no round trips."""

    def __init__(self, factory, first: int, count: int, total: int):
        self.adapters: list[SingleEnvAdapter] = []
        try:
            for _ in range(count):
                self.adapters.append(factory())
        except BaseException:
            self.close()
            raise
        self.spec = self.adapters[0].spec
        self.first, self.total = first, total
        self.layout = _BatchLayout(self.spec, count)
        self.buffer = np.zeros(self.layout.size, np.float32)
        fields = self.layout.fields(self.buffer)
        self.env_views = [{name: f[k] for name, f in fields.items()} for k in range(count)]
        self.base_seed: int | None = None
        self.episodes = [0] * count  # episodes started per env since the last reset(seed)

    def _episode_seed(self, k: int) -> int | None:
        """Env i's k-th episode is seeded with seed + i + k * E (None: the env's own RNG goes on)."""
        if self.base_seed is None:
            return None
        return int(self.base_seed) + self.first + k + self.episodes[k] * self.total

    def reset(self, seed: int | None) -> np.ndarray:
        self.base_seed = seed
        self.buffer.fill(0.0)
        for k, (adapter, v) in enumerate(zip(self.adapters, self.env_views)):
            self.episodes[k] = 0
            adapter.reset(self._episode_seed(k))
            adapter.write_obs(v["obs"], v["state"], v["active"], v.get("available_actions"))
            if "goal_event" in v:
                v["goal_event"][:] = -1
        return self.buffer

    def step(self, actions: np.ndarray) -> np.ndarray:
        """actions [count, N, ...] -> the filled buffer."""
        self.buffer.fill(0.0)
        for k, (adapter, v) in enumerate(zip(self.adapters, self.env_views)):
            reward, done, terminated, truncated = adapter.step(actions[k])
            v["reward"][:] = reward
            v["done"][:] = done
            v["terminated"][0] = terminated
            v["truncated"][0] = truncated
            if "goal_event" in v:
                v["goal_event"][:] = adapter.goal_event  # of the step just taken, before any auto-reset
            if terminated or truncated:
                adapter.write_obs(v["final_obs"], v["final_state"], v["final_active"], None)
                self.episodes[k] += 1
                adapter.reset(self._episode_seed(k))
            adapter.write_obs(v["obs"], v["state"], v["active"], v.get("available_actions"))
        return self.buffer

    def render(self, k: int) -> np.ndarray:
        return self.adapters[k].render()

    def close(self) -> None:
        for adapter in self.adapters:
            with contextlib.suppress(Exception):  # best effort: a broken env must not hide the real error
                adapter.close()


# ---------------------------------------------------------------------------------------------
# Subprocess vectoriser
# ---------------------------------------------------------------------------------------------


def _transferable(error: BaseException) -> BaseException:
    """The worker's exception with its traceback as a note, or a RuntimeError if it cannot be pickled."""
    if isinstance(error, UserError):
        return error
    tb = traceback.format_exc()
    try:
        error.add_note(f"in env worker process:\n{tb}")
        pickle.dumps(error)
        return error
    except (pickle.PicklingError, TypeError, AttributeError):
        return RuntimeError(f"env worker failed: {type(error).__name__}: {error}\n{tb}")


def _worker_main(conn, factory, first: int, count: int, total: int) -> None:
    """Loop of one worker process: build its envs, then answer (command, argument) messages.

    Ctrl-C reaches every process of the terminal's group: workers ignore it, so the trainer can finish its
    update on them and save; they stop when told to, when the main process goes away (EOF), or when it dies."""
    die_with_parent()  # a killed training process must not leave its env workers behind
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        group = _EnvGroup(factory, first, count, total)
        conn.send(("ok", group.spec))
    except BaseException as e:  # noqa: BLE001 - report any failure to the main process
        conn.send(("error", _transferable(e)))
        return
    try:
        while True:
            command, argument = conn.recv()
            if command == "close":
                group.close()
                conn.send(("ok", None))
                return
            try:
                if command == "step":
                    result = group.step(argument)
                elif command == "reset":
                    result = group.reset(argument)
                elif command == "render":
                    result = group.render(argument)
                else:
                    raise ValueError(f"unknown worker command {command!r}")
                conn.send(("ok", result))
            except Exception as e:  # noqa: BLE001
                conn.send(("error", _transferable(e)))
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # main process went away or Ctrl-C
        group.close()


class _WorkerPool:
    """Worker processes, each holding a contiguous block of envs, spoken to over pipes."""

    def __init__(self, factory, num_envs: int, num_workers: int | None, start_method: str | None):
        num_workers = max(1, min(num_envs, num_workers or os.cpu_count() or 1))
        if start_method is None:
            start_method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
        if start_method not in mp.get_all_start_methods():
            raise UserError(f"start_method {start_method!r} is not available here; use one of "
                            f"{mp.get_all_start_methods()}")
        context = mp.get_context(start_method)
        counts = [len(c) for c in np.array_split(np.arange(num_envs), num_workers)]
        self.blocks = []  # (first env, env count) per worker
        first = 0
        for count in counts:
            self.blocks.append((first, count))
            first += count
        self.connections, self.processes = [], []
        for first, count in self.blocks:
            parent_end, child_end = context.Pipe()
            process = context.Process(target=_worker_main, args=(child_end, factory, first, count, num_envs),
                                      daemon=True)
            process.start()
            child_end.close()
            self.connections.append(parent_end)
            self.processes.append(process)
        specs = [self._receive(w) for w in range(num_workers)]
        self.spec: EnvSpec = specs[0]
        self.layout = _BatchLayout(self.spec, num_envs)
        self.buffer = np.zeros(self.layout.size, np.float32)
        self.fields = self.layout.fields(self.buffer)
        self.worker_layouts = [_BatchLayout(self.spec, count) for _, count in self.blocks]

    def _receive(self, w: int):
        try:
            status, payload = self.connections[w].recv()
        except (EOFError, ConnectionResetError):
            self.close()
            raise RuntimeError(f"env worker {w} died (exit code {self.processes[w].exitcode})") from None
        if status == "error":
            self.close()
            raise payload
        return payload

    def _gather(self) -> np.ndarray:
        for w, ((first, count), layout) in enumerate(zip(self.blocks, self.worker_layouts)):
            for name, block in layout.fields(self._receive(w)).items():
                self.fields[name][first:first + count] = block
        return self.buffer

    def reset(self, seed: int | None) -> np.ndarray:
        for conn in self.connections:
            conn.send(("reset", seed))
        return self._gather()

    def step(self, actions: np.ndarray) -> np.ndarray:
        for conn, (first, count) in zip(self.connections, self.blocks):
            conn.send(("step", actions[first:first + count]))
        return self._gather()

    def render(self, env_index: int) -> np.ndarray:
        for w, (first, count) in enumerate(self.blocks):
            if first <= env_index < first + count:
                self.connections[w].send(("render", env_index - first))
                return self._receive(w)
        raise IndexError(env_index)

    def close(self) -> None:
        for conn, process in zip(self.connections, self.processes):
            try:
                if process.is_alive():
                    conn.send(("close", None))
                    if conn.poll(2.0):
                        conn.recv()
            except (OSError, EOFError):
                pass
            process.join(timeout=2.0)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1.0)
            conn.close()
        self.connections, self.processes = [], []


# ---------------------------------------------------------------------------------------------
# The VecEnv
# ---------------------------------------------------------------------------------------------


class AdapterVecEnv(VecEnv):
    """E envs behind `SingleEnvAdapter`s as one VecEnv, stepped in this process or in worker processes.

    `factory()` builds one adapter; it must be picklable for the subprocess vectoriser with the
    "spawn" / "forkserver" start methods.
    """

    def __init__(self, factory, num_envs: int, device: torch.device | str = "cpu", vectorizer: str = "inprocess",
                 num_workers: int | None = None, start_method: str | None = None, team_reward: bool = False):
        if not isinstance(team_reward, bool):
            raise UserError(f"team_reward must be true or false, got {team_reward!r}")
        if vectorizer not in VECTORIZERS:
            raise UserError(f"vectorizer must be one of {list(VECTORIZERS)}, got {vectorizer!r}")
        if num_workers is not None and (not isinstance(num_workers, int) or num_workers < 1):
            raise UserError(f"num_workers must be an integer >= 1, got {num_workers!r}")
        self.num_envs, self.device = num_envs, torch.device(device)
        self.vectorizer = vectorizer
        if vectorizer == "inprocess":
            self._envs: _EnvGroup | _WorkerPool = _EnvGroup(factory, 0, num_envs, num_envs)
        else:
            self._envs = _WorkerPool(factory, num_envs, num_workers, start_method)
        self.spec = dataclasses.replace(self._envs.spec, team_reward=team_reward)
        self.layout = _BatchLayout(self.spec, num_envs)
        self.tracker = EpisodeTracker(num_envs, self.spec.num_agents, self.device)
        self._closed = False

    def _fields(self, buffer: np.ndarray) -> dict[str, torch.Tensor]:
        batch = torch.from_numpy(buffer).to(self.device, copy=True)  # the one numpy -> torch copy per step
        return self.layout.fields(batch)

    def _available(self, f: dict) -> torch.Tensor | None:
        return f["available_actions"].bool() if self.spec.has_available_actions else None

    def _extras(self, f: dict) -> dict:
        return {"goal_event": f["goal_event"].long()} if "goal_event" in f else {}

    def reset(self, seed: int | None = None) -> EnvStep:
        f = self._fields(self._envs.reset(seed))
        self.tracker.reset_all()
        no = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)  # [E]
        return EnvStep(obs=f["obs"], state=f["state"], active=f["active"].bool(), reward=f["reward"],
                       done=f["done"].bool(), terminated=no, truncated=no.clone(), episode_done=no.clone(),
                       available_actions=self._available(f), extras=self._extras(f))

    def step(self, actions: torch.Tensor) -> EnvStep:
        if isinstance(self.spec.action_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete):
            actions_np = torch.as_tensor(actions).detach().to("cpu", torch.int64).numpy()  # [E, N] / [E, N, k]
        else:
            actions_np = torch.as_tensor(actions).detach().to("cpu", torch.float32).numpy()  # [E, N, d]
        f = self._fields(self._envs.step(actions_np))
        terminated = f["terminated"].view(-1).bool()  # [E]
        truncated = f["truncated"].view(-1).bool()  # [E]
        episode_done = terminated | truncated
        episode_return, episode_length = self.tracker.update(f["reward"], episode_done)
        return EnvStep(obs=f["obs"], state=f["state"], active=f["active"].bool(), reward=f["reward"],
                       done=f["done"].bool(), terminated=terminated, truncated=truncated,
                       available_actions=self._available(f), final_obs=f["final_obs"],
                       final_state=f["final_state"], final_active=f["final_active"].bool(),
                       episode_done=episode_done, episode_return=episode_return, episode_length=episode_length,
                       extras=self._extras(f))

    def render(self, env_index: int = 0) -> np.ndarray:
        if not self.spec.can_render:
            raise UserError("this env was created without render_mode='rgb_array'; pass env kwarg "
                            "render_mode='rgb_array' to render it")
        if not 0 <= env_index < self.num_envs:
            raise UserError(f"env_index must be in [0, {self.num_envs}), got {env_index}")
        frame = self._envs.render(env_index)
        return np.asarray(frame, np.uint8)

    def close(self) -> None:
        if not getattr(self, "_closed", True):
            self._closed = True
            self._envs.close()

    def __del__(self):
        with contextlib.suppress(Exception):  # interpreter shutdown may have torn down what close() needs
            self.close()


# ---------------------------------------------------------------------------------------------
# Env strings -> factories
# ---------------------------------------------------------------------------------------------


def pop_vectorizer_kwargs(kwargs: dict) -> dict:
    """Take our own kwargs (vectoriser choice) out of the env kwargs."""
    names = ("vectorizer", "num_workers", "start_method", "team_reward")
    return {name: kwargs.pop(name) for name in names if name in kwargs}


def load_function(module_name: str, function_name: str, env_string: str):
    """Import `module_name` and return its callable `function_name`, or raise a one-line UserError."""
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UserError(f"env {env_string!r}: cannot import module {module_name!r} ({e})") from None
    function = getattr(module, function_name, None)
    if function is None:
        raise UserError(f"env {env_string!r}: module {module_name!r} has no {function_name!r}")
    if not callable(function):
        raise UserError(f"env {env_string!r}: {module_name}.{function_name} is not callable")
    return function


@dataclass(frozen=True)
class ParallelEnvFactory:
    """Picklable recipe for one PettingZoo ParallelEnv adapter, so worker processes can build their own."""

    module: str
    function: str
    env_string: str
    kwargs: dict = field(default_factory=dict)
    render_mode: str | None = None

    def __call__(self) -> ParallelEnvAdapter:
        make_env = load_function(self.module, self.function, self.env_string)
        kwargs = dict(self.kwargs)
        if self.render_mode is not None:
            kwargs["render_mode"] = self.render_mode
        env = make_env(**kwargs)
        if not (hasattr(env, "possible_agents") and hasattr(env, "step") and hasattr(env, "reset")):
            raise UserError(f"env {self.env_string!r}: {self.module}.{self.function}() returned "
                            f"{type(env).__name__}, not a PettingZoo ParallelEnv")
        if hasattr(env, "agent_selection"):
            raise UserError(f"env {self.env_string!r}: {self.module}.{self.function}() returned an AEC env; "
                            f"wrap it with pettingzoo.utils.conversions.aec_to_parallel")
        return ParallelEnvAdapter(env, can_render=self.render_mode == "rgb_array", what=self.env_string)


def mpe2_scenarios() -> list[str]:
    import mpe2

    return sorted(m.name for m in pkgutil.iter_modules(mpe2.__path__) if re.fullmatch(r".+_v\d+", m.name))


def make_mpe2(name: str, num_envs: int, device: torch.device | str = "cpu", **kwargs) -> AdapterVecEnv:
    """`mpe2:<scenario>`, e.g. mpe2:simple_spread_v3."""
    scenarios = mpe2_scenarios()
    if name not in scenarios:
        close = difflib.get_close_matches(name, scenarios, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UserError(f"unknown mpe2 scenario {name!r}{hint}; expected one of {scenarios} "
                        f"(your own PettingZoo env: pettingzoo:<module>:<factory>)")
    return _make(f"mpe2.{name}", "parallel_env", f"mpe2:{name}", num_envs, device, kwargs)


def make_pettingzoo(name: str, num_envs: int, device: torch.device | str = "cpu", **kwargs) -> AdapterVecEnv:
    """`pettingzoo:<module>:<factory>`: any function returning a PettingZoo ParallelEnv."""
    module_name, _, function_name = name.rpartition(":")
    env_string = f"pettingzoo:{name}"
    if not module_name or not function_name:
        raise UserError(f"env {env_string!r}: expected pettingzoo:<module>:<factory>, "
                        f"e.g. pettingzoo:my_pkg.my_module:make_env")
    return _make(module_name, function_name, env_string, num_envs, device, kwargs)


def _make(module_name: str, function_name: str, env_string: str, num_envs: int, device, kwargs: dict):
    vectorizer_kwargs = pop_vectorizer_kwargs(kwargs)
    render_mode = kwargs.pop("render_mode", None)
    load_function(module_name, function_name, env_string)  # fail here, in one line, not in a worker
    factory = ParallelEnvFactory(module_name, function_name, env_string, dict(kwargs), render_mode)
    return AdapterVecEnv(factory, num_envs, device, **vectorizer_kwargs)
