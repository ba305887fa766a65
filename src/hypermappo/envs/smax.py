"""SMAX (JaxMARL's StarCraft-like micromanagement, heuristic enemy) behind the `VecEnv` contract: `smax:3m`.

Map names are SMAC's as JaxMARL knows them (`smax:3m`, `smax:2s3z`, `smax:8m`, `smax:5m_vs_6m`,
`smax:smacv2_5_units`, ...); the N agent slots are the allied units, the enemy team is JaxMARL's
`HeuristicEnemySMAX`. All E envs step in ONE jitted, vmapped JAX call per `step()`, auto-reset included
(per env, inside that call); results reach torch through DLPack without copying, with no Python loop over
envs or agents.

Optional extra (JAX ~400 MB). jaxmarl 0.2.0's declared dependency gymnax pins gymnasium < 1.4, which
conflicts with ours, and SMAX never imports gymnax, so install jaxmarl without its dependencies:
    pip install "jax[cpu]" chex jaxtyping msgpack rich
    pip install --no-deps flax jaxmarl==0.2.0
(SMAX itself needs jax, jaxtyping, flax.struct and flax's import-time deps msgpack, rich, absl-py (via chex),
pyyaml, typing_extensions; chex and matplotlib are needed only for a full `import jaxmarl`.)

kwargs: `seed` (default 0); `jax_cache_dir`: JAX's persistent compilation cache, used unless JAX already has
one configured (default `~/.cache/hypermappo/jax`, None = off); anything else goes to `HeuristicEnemySMAX` /
`SMAX`, e.g. `max_steps` (default 100), `enemy_shoots`, `attack_mode`, `won_battle_bonus`,
`walls_cause_death`, `observation_type`. Only discrete actions (`action_type="discrete"`). The first
`reset()` for a given map, kwargs and E compiles the step (10-40 s on 2 busy CPU cores; seconds once cached).

Mapping onto the contract:
- Actions are re-indexed so that action 0 is SMAX's "stop" (SMAX index 4), the only action of a dead
  unit: ours 0 = stop, 1-4 = SMAX's moves 0-3, 5.. = attack enemy 0.. (same as SMAX).
- A unit that dies has `done = 1` on that step and keeps that step's reward; afterwards `active = 0`,
  zero observation, only action 0 available, reward 0. (SMAX itself gives dead units the team reward;
  the contract's "dead slots count 0" drops it, so the per-slot mean reward is lower while units are dead;
  `spec.team_reward` is True, so `ppo.death=auto` trains with SMAX's own convention, see `algos/death.py`.)
- `terminated` = one team wiped out; `truncated` = `max_steps` steps played with both teams alive. (SMAX
  itself checks its limit before counting the step and so plays max_steps + 1 steps; the bridge ends the
  episode after exactly max_steps.)
- `state` = SMAX's world state (every unit's health, position, cooldown, type, team; dead units zeroed).
- `extras["battle_won"]` [E] bool: the episode that ended at this step was won (valid where episode_done).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
import types

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv
from hypermappo.errors import UserError

_NUM_MOVES = 4  # SMAX moves 0-3, then 4 = stop, then one attack action per enemy
_SMAX_STOP = 4

_INSTALL = 'pip install "jax[cpu]" chex jaxtyping msgpack rich && pip install --no-deps flax jaxmarl==0.2.0'


def _import_smax():
    """jaxmarl's SMAX classes, without importing all of jaxmarl.

    `import jaxmarl` imports every JaxMARL environment (12-16 s here, storm and jaxnav alone take 8 s, and it
    prints to stdout); SMAX needs only `jaxmarl.environments.{multi_agent_env,spaces,smax}`. So the two parent
    packages are stand-ins (plain modules with the real `__path__`) while SMAX is imported, then removed from
    `sys.modules`: a later `import jaxmarl` runs normally and reuses the SMAX modules already loaded.
    """
    if "jaxmarl.environments.smax" not in sys.modules:
        spec = importlib.util.find_spec("jaxmarl")
        if spec is None or not spec.submodule_search_locations:
            raise UserError(f"smax envs need JaxMARL, which is not installed; install: {_INSTALL}")
        root = next(iter(spec.submodule_search_locations))
        stand_ins = []
        for name, path in (("jaxmarl", root), ("jaxmarl.environments", os.path.join(root, "environments"))):
            if name not in sys.modules:
                module = types.ModuleType(name)
                module.__path__ = [path]
                sys.modules[name] = module
                stand_ins.append(name)
        try:
            importlib.import_module("jaxmarl.environments.smax")
        except ImportError as e:
            raise UserError(f"smax envs need JaxMARL and its JAX dependencies ({e}); install: {_INSTALL}") from None
        finally:
            for name in stand_ins:
                del sys.modules[name]
    smax = sys.modules["jaxmarl.environments.smax"]
    maps = sorted(sys.modules["jaxmarl.environments.smax.smax_env"].MAP_NAME_TO_SCENARIO)
    return smax.HeuristicEnemySMAX, smax.map_name_to_scenario, maps


class _SmaxProgram:
    """One SMAX configuration and its jitted, vmapped step, shared by every SmaxVecEnv built with it: jit
    traces per function object, so sharing saves re-tracing SMAX (seconds) for each new env batch."""

    def __init__(self, env):
        import jax
        import jax.numpy as jnp

        self.env = env
        agents = self.agents = list(env.agents)  # allies only
        n = self.n = len(agents)
        n_actions = self.n_actions = int(env.num_ally_actions)
        # ours -> SMAX action index: 0 -> stop, 1..4 -> moves 0..3, 5.. -> attacks (unchanged)
        ours_to_smax = np.array([_SMAX_STOP, *range(_NUM_MOVES), *range(_NUM_MOVES + 1, n_actions)], np.int32)
        ours_to_smax_j = jnp.asarray(ours_to_smax)

        def outputs(state, obs_dict):
            """One env's arrays for a state: obs [N, obs_dim], world state [S], alive [N], available [N, A]."""
            alive = state.state.unit_alive[:n]
            obs = jnp.stack([obs_dict[a] for a in agents]) * alive[:, None]
            avail = jnp.stack(list(env.get_avail_actions(state).values()))[:, ours_to_smax].astype(bool)
            return obs.astype(jnp.float32), obs_dict["world_state"].astype(jnp.float32), alive, avail

        def reset_one(key):
            obs_dict, state = env.reset(key)
            # strong dtypes, as step() returns them: a weak-typed leaf would make jit compile step() twice
            state = jax.tree.map(lambda x: jnp.array(x, dtype=x.dtype), state)
            return state, outputs(state, obs_dict)

        def step_one(key, state, actions, force_reset):  # actions [N] int32 (our indices), force_reset bool
            key, step_key, reset_key = jax.random.split(key, 3)
            alive_before = state.state.unit_alive[:n]
            smax_actions = ours_to_smax_j[actions]
            obs_dict, state, rewards, dones, _ = env.step_env(
                step_key, state, {a: smax_actions[i] for i, a in enumerate(agents)})
            reward = jnp.stack([rewards[a] for a in agents]).astype(jnp.float32) * alive_before  # dead slots get 0
            step_out = outputs(state, obs_dict)  # the episode going on: obs, world state, alive, available
            final_obs, final_ws, final_alive, _ = step_out
            # SMAX tests its step limit before counting the step, so its episodes last max_steps + 1 steps;
            # ending them here at max_steps makes `max_steps` (and spec.episode_limit) the true length
            time_up = state.state.step >= env.max_steps
            episode_done = dones["__all__"] | time_up | force_reset
            allies_wiped = ~state.state.unit_alive[:n].any()
            enemies_wiped = ~state.state.unit_alive[n:].any()
            terminated = episode_done & (allies_wiped | enemies_wiped)
            truncated = episode_done & ~terminated
            won = episode_done & enemies_wiped & ~allies_wiped
            done = episode_done | (alive_before & ~final_alive)  # [N]: the episode ended or the unit died now
            reset_state, reset_out = reset_one(reset_key)  # computed for every env, kept where it ended
            state = jax.tree.map(lambda r, s: jnp.where(episode_done, r, s), reset_state, state)
            obs, ws, alive, avail = (jnp.where(episode_done, r, s) for r, s in zip(reset_out, step_out))
            return key, state, (obs, ws, alive, avail, reward, done, terminated, truncated, won,
                                final_obs, final_ws, final_alive)

        # One jitted call per step for all E envs; the env state never leaves JAX. reset() is the same call
        # with force_reset on a blank state, so XLA compiles one function per E, not two (compiling is the
        # slow part, 10-30 s on 2 busy CPU cores; JAX's persistent compilation cache skips it in later runs).
        self.step_all = jax.jit(jax.vmap(step_one), donate_argnums=(0, 1))
        self.state_shapes = jax.eval_shape(lambda k: reset_one(k)[0], jax.random.PRNGKey(0))  # one env's state

    def blank_state(self, num_envs: int):
        """An all-zeros state pytree for E envs, only there to be replaced by a forced reset."""
        import jax
        import jax.numpy as jnp

        return jax.tree.map(lambda x: jnp.zeros((num_envs, *x.shape), x.dtype), self.state_shapes)


_PROGRAMS: dict = {}


def _program(map_name: str, smax_kwargs: dict) -> _SmaxProgram:
    heuristic_smax, map_name_to_scenario, maps = _import_smax()
    if map_name not in maps:
        close = difflib.get_close_matches(map_name, maps, n=4, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise UserError(f"unknown SMAX map {map_name!r} in smax:{map_name}; {hint}known: {', '.join(maps)}")
    if smax_kwargs.get("action_type", "discrete") != "discrete":
        raise UserError("smax envs support only discrete actions (action_type='discrete')")
    try:
        key = (map_name, tuple(sorted(smax_kwargs.items())))
        hash(key)
    except TypeError:  # e.g. array-valued kwargs: build without sharing
        key = None
    if key in _PROGRAMS:
        return _PROGRAMS[key]
    try:
        env = heuristic_smax(scenario=map_name_to_scenario(map_name), **smax_kwargs)
    except TypeError as e:
        raise UserError(f"env_kwargs: {e}") from None
    program = _SmaxProgram(env)
    if key is not None:
        _PROGRAMS[key] = program
    return program


class SmaxVecEnv(VecEnv):
    """E SMAX battles on one map, allies controlled by the policy, enemies by JaxMARL's heuristic."""

    def __init__(self, map_name: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 jax_cache_dir: str | None = "~/.cache/hypermappo/jax", **smax_kwargs):
        import jax
        import jax.numpy as jnp

        if jax_cache_dir and not jax.config.jax_compilation_cache_dir:  # never override the user's JAX setting
            jax.config.update("jax_compilation_cache_dir", os.path.expanduser(jax_cache_dir))
        self.jax, self.jnp = jax, jnp
        self.program = _program(map_name, smax_kwargs)
        self.num_envs, self.device = num_envs, torch.device(device)
        self.seed = seed
        self.n = n = self.program.n
        env = self.program.env
        self.keys = None  # [E, 2] one PRNG key per env
        self.state = None  # SMAX state pytree, leaves [E, ...]
        self.spec = EnvSpec(
            num_agents=n, obs_dim=int(env.obs_size), state_dim=int(env.state_size),
            observation_space=gym.spaces.Box(-1.0, 1.0, (int(env.obs_size),), np.float32),
            action_space=gym.spaces.Discrete(self.program.n_actions), has_available_actions=True,
            episode_limit=int(env.max_steps), agent_names=self.program.agents, can_render=False,
            can_save_state=False, team_reward=True,
        )
        self.tracker = EpisodeTracker(num_envs, n, self.device)
        self._no_force = jnp.zeros((num_envs,), bool)

    def _torch(self, x) -> torch.Tensor:
        return torch.from_dlpack(x).to(self.device)

    def reset(self, seed: int | None = None) -> EnvStep:
        if seed is None:  # a fresh but reproducible stream for every seedless reset
            seed, self.seed = self.seed, self.seed + 1
        jax, jnp, e = self.jax, self.jnp, self.num_envs
        keys = jax.random.split(jax.random.PRNGKey(seed), e)  # [E, 2] one key per env
        self.keys, self.state, out = self.program.step_all(keys, self.program.blank_state(e),
                                                           jnp.zeros((e, self.n), jnp.int32), jnp.ones((e,), bool))
        obs, ws, alive, avail = out[:4]
        self.tracker.reset_all()
        e, n = self.num_envs, self.n
        false_e = torch.zeros(e, dtype=torch.bool, device=self.device)
        return EnvStep(obs=self._torch(obs), state=self._torch(ws), active=self._torch(alive),
                       reward=torch.zeros(e, n, device=self.device),
                       done=torch.zeros(e, n, dtype=torch.bool, device=self.device), terminated=false_e,
                       truncated=false_e.clone(), available_actions=self._torch(avail), episode_done=false_e.clone())

    def step(self, actions: torch.Tensor) -> EnvStep:
        if self.state is None:
            raise RuntimeError("call reset() before step()")
        actions = self.jnp.asarray(actions.detach().to("cpu", torch.int32).numpy())  # [E, N]
        self.keys, self.state, out = self.program.step_all(self.keys, self.state, actions, self._no_force)
        (obs, ws, alive, avail, reward, done, terminated, truncated, won,
         final_obs, final_ws, final_alive) = (self._torch(x) for x in out)
        episode_done = terminated | truncated
        ep_ret, ep_len = self.tracker.update(reward, episode_done)
        return EnvStep(obs=obs, state=ws, active=alive, reward=reward, done=done, terminated=terminated,
                       truncated=truncated, available_actions=avail, final_obs=final_obs, final_state=final_ws,
                       final_active=final_alive, episode_done=episode_done, episode_return=ep_ret,
                       episode_length=ep_len, extras={"battle_won": won})


def make(name: str, num_envs: int, device: torch.device, **kwargs) -> SmaxVecEnv:
    if not name:
        raise UserError("smax needs a map name, e.g. smax:3m")
    return SmaxVecEnv(name, num_envs, device, **kwargs)
