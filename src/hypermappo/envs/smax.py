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

kwargs: `seed` (default 0), anything else goes to `HeuristicEnemySMAX` / `SMAX`, e.g. `max_steps`
(default 100), `enemy_shoots`, `attack_mode`, `won_battle_bonus`, `walls_cause_death`,
`observation_type`. Only discrete actions (`action_type="discrete"`).

Mapping onto the contract:
- Actions are re-indexed so that action 0 is SMAX's "stop" (SMAX index 4), the only action of a dead
  unit: ours 0 = stop, 1-4 = SMAX's moves 0-3, 5.. = attack enemy 0.. (same as SMAX).
- A unit that dies has `done = 1` on that step and keeps that step's reward; afterwards `active = 0`,
  zero observation, only action 0 available, reward 0. (SMAX itself gives dead units the team reward;
  the contract's "dead slots count 0" drops it, so the per-slot mean reward is lower while units are dead.)
- `terminated` = one team wiped out; `truncated` = SMAX's step limit reached with both teams alive.
- `state` = SMAX's world state (every unit's health, position, cooldown, type, team; dead units zeroed).
- `extras["battle_won"]` [E] bool: the episode that ended at this step was won (valid where episode_done).
"""

from __future__ import annotations

import contextlib
import difflib
import io

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, VecEnv
from hypermappo.errors import UserError

_NUM_MOVES = 4  # SMAX moves 0-3, then 4 = stop, then one attack action per enemy
_SMAX_STOP = 4

_INSTALL = 'pip install "jax[cpu]" chex jaxtyping msgpack rich && pip install --no-deps flax jaxmarl==0.2.0'


def _import_smax():
    """jaxmarl's SMAX classes; jaxmarl prints while importing, which is kept off our stdout."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            from jaxmarl.environments.smax import HeuristicEnemySMAX, map_name_to_scenario
            from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO
    except ImportError as e:
        raise UserError(f"smax envs need JaxMARL ({e}); install: {_INSTALL}") from None
    return HeuristicEnemySMAX, map_name_to_scenario, sorted(MAP_NAME_TO_SCENARIO)


class SmaxVecEnv(VecEnv):
    """E SMAX battles on one map, allies controlled by the policy, enemies by JaxMARL's heuristic."""

    def __init__(self, map_name: str, num_envs: int, device: torch.device | str = "cpu", seed: int = 0,
                 **smax_kwargs):
        import jax
        import jax.numpy as jnp

        heuristic_smax, map_name_to_scenario, maps = _import_smax()
        if map_name not in maps:
            close = difflib.get_close_matches(map_name, maps, n=4, cutoff=0.5)
            hint = f"did you mean {', '.join(close)}? " if close else ""
            raise UserError(f"unknown SMAX map {map_name!r} in smax:{map_name}; {hint}known: {', '.join(maps)}")
        if smax_kwargs.get("action_type", "discrete") != "discrete":
            raise UserError("smax envs support only discrete actions (action_type='discrete')")
        try:
            env = heuristic_smax(scenario=map_name_to_scenario(map_name), **smax_kwargs)
        except TypeError as e:
            raise UserError(f"env_kwargs: {e}") from None
        self.jax, self.jnp = jax, jnp
        self.smax = env
        self.num_envs, self.device = num_envs, torch.device(device)
        self.seed = seed
        agents = list(env.agents)  # allies only
        n, n_actions = len(agents), env.num_ally_actions
        self.n = n
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
            return state, outputs(state, obs_dict)

        def step_one(key, state, actions):  # actions [N] int32, our indices
            key, step_key, reset_key = jax.random.split(key, 3)
            alive_before = state.state.unit_alive[:n]
            smax_actions = ours_to_smax_j[actions]
            obs_dict, state, rewards, dones, _ = env.step_env(
                step_key, state, {a: smax_actions[i] for i, a in enumerate(agents)})
            reward = jnp.stack([rewards[a] for a in agents]).astype(jnp.float32) * alive_before  # dead slots get 0
            step_out = outputs(state, obs_dict)  # the episode going on: obs, world state, alive, available
            final_obs, final_ws, final_alive, _ = step_out
            episode_done = dones["__all__"]
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

        # one jitted call per step for all E envs; the env state never leaves JAX
        self._reset_all = jax.jit(jax.vmap(reset_one))
        self._step_all = jax.jit(jax.vmap(step_one), donate_argnums=(0, 1))
        self.keys = None
        self.state = None

        self.spec = EnvSpec(
            num_agents=n, obs_dim=int(env.obs_size), state_dim=int(env.state_size),
            observation_space=gym.spaces.Box(-1.0, 1.0, (int(env.obs_size),), np.float32),
            action_space=gym.spaces.Discrete(n_actions), has_available_actions=True,
            episode_limit=int(env.max_steps), agent_names=agents, can_render=False, can_save_state=False,
        )
        self.tracker = EpisodeTracker(num_envs, n, self.device)

    def _torch(self, x) -> torch.Tensor:
        return torch.from_dlpack(x).to(self.device)

    def reset(self, seed: int | None = None) -> EnvStep:
        if seed is None:  # a fresh but reproducible stream for every seedless reset
            seed, self.seed = self.seed, self.seed + 1
        jax = self.jax
        keys = jax.random.split(jax.random.PRNGKey(seed), self.num_envs + 1)
        self.keys = keys[1:]  # [E, 2] one key per env
        self.state, (obs, ws, alive, avail) = self._reset_all(jax.random.split(keys[0], self.num_envs))
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
        self.keys, self.state, out = self._step_all(self.keys, self.state, actions)
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
