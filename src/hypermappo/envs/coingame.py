"""The coin game (Lerer & Peysakhovich 2017; Foerster et al. 2018, LOLA) batched in torch: a general-sum
social dilemma where taking every coin pays the taker but hurts the other player more.

Rules (env string `coingame`):
- An S x S grid (`grid_size`, default 3) holds two players, red (agent 0, `red`) and blue (agent 1, `blue`),
  and `n_coins` coins (default 1, as in the papers), each red or blue. At reset players and coins get distinct
  random cells and every coin a random colour. Players may share a cell.
- Actions, Discrete(5): 0 stay, 1 up (row - 1), 2 down, 3 left (column - 1), 4 right; walls block moves.
  (LOLA's version wraps around the edges and has no "stay"; here the grid has walls so the stag hunt's grid
  rules and scripted walkers apply unchanged.) All actions are always available; nobody dies.
- Order within a step: players move; every player standing on a coin picks it up (both do when both stand
  on it); each pick pays the picker `pick_reward` (default 1.0) and, when the coin has the *other* player's
  colour, costs that coin's owner `other_penalty` (default 2.0). Picked coins respawn on a random cell free
  of players and other coins, with a fresh random colour.
  So picking only your own coins is the cooperative outcome (+1 per coin for its owner), taking every coin
  the selfish one (each player's expected reward per coin is 1/2 - 1/2 * 2 < 0 when both do it).
- Episodes are truncated after `episode_length` steps (default 50; LOLA used 150).
- Observations (egocentric in colour, as in LOLA): four S x S channels, flattened -- own position, the other
  player's position, coins of my colour (count), coins of the other's colour -- then the elapsed fraction of
  the episode. Global state: red position, blue position, red coins, blue coins, elapsed fraction.
- Goal labels (`spec.goal_names = ["own_coin", "other_coin"]`, relative to the agent, so that "goes for the
  other's coins" is one label for both players): `extras["goal_event"]` [E, 2] int64 in every EnvStep is 0
  when the agent picked a coin of its own colour this step, 1 for the other's colour, -1 for none (and at
  reset). The scripted rules `coin_cooperative` / `coin_selfish` write their target into ScriptedContext.goal.
- `extras["own_coins"]`, `extras["other_coins"]` ([E] int64): coins picked by their owner / by the other
  player in the episode that ended at this step (valid where `episode_done`).

Randomness: per-env counter-based streams keyed by `(seed, env_offset + e)`, as in the stag hunt, so env e's
trajectory does not depend on the batch it is in. Also `CoinGameParallelEnv`: one env as a PettingZoo env.
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch

from hypermappo.envs.parallel_view import BatchedParallelEnv
from hypermappo.envs.staghunt import _GOLDEN32, _MASK32, _MOVES, _check_float, _check_int, _hash32
from hypermappo.envs.symmetry import COLS_FLIPPED, ROWS_FLIPPED, Symmetry, flip_planes
from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, StreamSeedBlocks, TensorState, VecEnv
from hypermappo.errors import UserError

GOAL_NAMES = ("own_coin", "other_coin")
OWN_GOAL, OTHER_GOAL = 0, 1
AGENT_NAMES = ("red", "blue")  # agent i owns coins of colour i
_ENV = "coingame"  # names the env in error messages


def coin_view(obs: torch.Tensor, rel: torch.Tensor, *, cells: int) -> torch.Tensor:
    """EnvSpec.coplayer_view: the other player's observation, exact (swap the players' channels and the coin
    colours' channels: observations are egocentric in colour)."""
    c = cells
    swapped = torch.cat([obs[..., c:2 * c], obs[..., :c],  # the players
                         obs[..., 3 * c:4 * c], obs[..., 2 * c:3 * c], obs[..., 4 * c:]], -1)  # the coins' colours
    return torch.where((rel == 0).unsqueeze(-1), obs, swapped)


def coin_reflections(size: int) -> list[Symmetry]:
    """EnvSpec.symmetries: the grid reflected top to bottom and left to right (its four S x S channels flipped;
    walls, respawns and the scripted rules are symmetric alike)."""
    planes = partial(flip_planes, start=0, planes=4, height=size, width=size)
    return [Symmetry("flip_rows", partial(planes, dim=-2), ROWS_FLIPPED),
            Symmetry("flip_cols", partial(planes, dim=-1), COLS_FLIPPED)]


class CoinGameVecEnv(StreamSeedBlocks, TensorState, VecEnv):
    """E coin games stepped together with tensor ops (rules in the module docstring)."""

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *, grid_size: int = 3, n_coins: int = 1,
                 pick_reward: float = 1.0, other_penalty: float = 2.0, episode_length: int = 50, env_offset: int = 0):
        self.num_envs = _check_int("num_envs", num_envs, 1, env=_ENV)
        self.device = torch.device(device)
        self.size = _check_int("grid_size", grid_size, 2, env=_ENV)
        self.n_cells = self.size * self.size
        self.n_coins = _check_int("n_coins", n_coins, 1, env=_ENV)
        if 2 + self.n_coins > self.n_cells:
            raise UserError(f"coingame: 2 players + n_coins={self.n_coins} coins do not fit on a "
                            f"{self.size}x{self.size} grid; expected n_coins <= {self.n_cells - 2}")
        self.pick_reward = _check_float("pick_reward", pick_reward, env=_ENV)
        self.other_penalty = _check_float("other_penalty", other_penalty, env=_ENV)
        self.episode_length = _check_int("episode_length", episode_length, 1, env=_ENV)
        self.env_offset = _check_int("env_offset", env_offset, 0, env=_ENV)

        e, c, dev = self.num_envs, self.n_coins, self.device
        self._moves = torch.tensor(_MOVES, dtype=torch.long, device=dev)  # [5, 2]
        self._ids = torch.arange(2, device=dev)  # [2] player i owns colour i
        self._cell_one_hot = torch.eye(self.n_cells, device=dev)  # [cells, cells]; indexing beats F.one_hot's checks
        self._colour_one_hot = torch.eye(2, device=dev)  # [2, 2]
        # agent i's observation channels, taken from the state's [red, blue, red coins, blue coins]
        self._channel_order = torch.tensor([[0, 1, 2, 3], [1, 0, 3, 2]], device=dev)  # [2, 4]
        self._draw_offsets = (torch.arange(1, self.n_cells + c + 1, dtype=torch.long, device=dev) * _GOLDEN32) & _MASK32
        obs_dim, state_dim = 4 * self.n_cells + 1, 4 * self.n_cells + 1
        self.spec = EnvSpec(
            num_agents=2, obs_dim=obs_dim, state_dim=state_dim,
            observation_space=gym.spaces.Box(0.0, 1.0, (obs_dim,), np.float32),
            action_space=gym.spaces.Discrete(len(_MOVES)), episode_limit=self.episode_length,
            agent_names=list(AGENT_NAMES), can_render=True, can_save_state=True, team_reward=False,
            goal_names=list(GOAL_NAMES), public_actions=True, coplayer_view=partial(coin_view, cells=self.n_cells),
            symmetries=coin_reflections(self.size),
        )
        self.players = torch.zeros(e, 2, 2, dtype=torch.long, device=dev)  # [E, 2, 2] (row, col)
        self.coins = torch.zeros(e, c, 2, dtype=torch.long, device=dev)  # [E, C, 2]
        self.coin_colour = torch.zeros(e, c, dtype=torch.long, device=dev)  # [E, C] 0 red, 1 blue
        self.t = torch.zeros(e, dtype=torch.long, device=dev)  # [E]
        self.own_coins = torch.zeros(e, dtype=torch.long, device=dev)  # [E] this episode
        self.other_coins = torch.zeros(e, dtype=torch.long, device=dev)  # [E] this episode
        self.rng_key = torch.zeros(e, dtype=torch.long, device=dev)  # [E]
        self.rng_counter = torch.zeros(e, dtype=torch.long, device=dev)  # [E]
        self.tracker = EpisodeTracker(e, 2, dev)
        self._seeded = False

    # ---------------------------------------------------------------- randomness (as in the stag hunt)
    def _seed_streams(self, seed: int) -> None:
        self.rng_key = self._stream_keys(seed, torch.arange(self.num_envs, device=self.device) + self.env_offset)
        self.rng_counter.zero_()
        self._seeded = True

    def _stream_keys(self, seed: int, global_index: torch.Tensor) -> torch.Tensor:
        """The stream keys [k] of the envs numbered `global_index` [k] under `seed`."""
        seed_mix = _hash32(_hash32(seed & _MASK32) ^ ((seed >> 32) & _MASK32))
        return _hash32(seed_mix + _hash32(global_index.long() ^ 0x165667B1))

    def _draw(self, take: torch.Tensor) -> torch.Tensor:
        """[E, cells + coins] random ints; only envs in `take` [E] advance their stream."""
        base = _hash32(self.rng_key ^ _hash32(self.rng_counter))  # [E]
        self.rng_counter += take.long()
        return _hash32(base.unsqueeze(-1) + self._draw_offsets)

    # ---------------------------------------------------------------- helpers
    def _cells(self, pos: torch.Tensor) -> torch.Tensor:
        return pos[..., 0] * self.size + pos[..., 1]

    def _positions(self, cells: torch.Tensor) -> torch.Tensor:
        return torch.stack([cells // self.size, cells % self.size], -1)

    def _place_all(self, envs: torch.Tensor) -> None:
        """Fresh episode for the envs in mask `envs` [E]: players and coins on distinct random cells."""
        rand = self._draw(envs)  # [E, cells + C]
        pos = self._positions(rand[:, :self.n_cells].topk(2 + self.n_coins, dim=-1).indices)  # [E, 2+C, 2]
        m = envs.view(-1, 1, 1)
        self.players = torch.where(m, pos[:, :2], self.players)
        self.coins = torch.where(m, pos[:, 2:], self.coins)
        self.coin_colour = torch.where(envs.unsqueeze(-1), rand[:, self.n_cells:] % 2, self.coin_colour)
        self.t = torch.where(envs, 0, self.t)
        self.own_coins = torch.where(envs, 0, self.own_coins)
        self.other_coins = torch.where(envs, 0, self.other_coins)

    def _respawn(self, picked: torch.Tensor) -> None:
        """Picked coins [E, C] move to distinct random cells free of players and other coins, new colours."""
        rand = self._draw(picked.any(-1))  # [E, cells + C]
        occupied = torch.zeros(self.num_envs, self.n_cells, dtype=torch.bool, device=self.device)
        occupied.scatter_(1, self._cells(self.players), True)
        occupied.scatter_(1, self._cells(self.coins), True)  # picked coins' cells hold a player anyway
        keys = torch.where(occupied, -1, rand[:, :self.n_cells])
        free_cells = keys.topk(self.n_coins, dim=-1).indices  # [E, C]; 2 + C <= cells leaves enough free
        rank = (picked.long().cumsum(-1) - 1).clamp(min=0)  # [E, C] k-th picked coin takes the k-th free cell
        new_pos = self._positions(free_cells.gather(1, rank))  # [E, C, 2]
        self.coins = torch.where(picked.unsqueeze(-1), new_pos, self.coins)
        self.coin_colour = torch.where(picked, rand[:, self.n_cells:] % 2, self.coin_colour)

    def _observe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(obs [E, 2, obs_dim], state [E, state_dim]) of the current positions."""
        e = self.num_envs
        players = self._cell_one_hot[self._cells(self.players)]  # [E, 2, cells]
        coin_cells = self._cell_one_hot[self._cells(self.coins)]  # [E, C, cells]
        by_colour = self._colour_one_hot[self.coin_colour].transpose(1, 2) @ coin_cells  # [E, 2, cells]
        grid = torch.cat([players, by_colour], 1)  # [E, 4, cells]: red, blue, red coins, blue coins
        elapsed = (self.t.float() / self.episode_length).unsqueeze(-1)  # [E, 1]
        state = torch.cat([grid.flatten(1), elapsed], -1)  # [E, state_dim]
        own_view = grid[:, self._channel_order].flatten(2)  # [E, 2, 4 * cells]
        obs = torch.cat([own_view, elapsed.unsqueeze(1).expand(e, 2, 1)], -1)  # [E, 2, obs_dim]
        return obs, state

    # ---------------------------------------------------------------- VecEnv API
    def reset(self, seed: int | None = None) -> EnvStep:
        """Start every env afresh. seed=None keeps the streams running (fresh entropy the first time)."""
        if seed is not None:
            self._seed_streams(int(seed))
        elif not self._seeded:
            self._seed_streams(int(np.random.SeedSequence().entropy) & ((1 << 63) - 1))
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        self._place_all(everyone)
        self.tracker.reset_all()
        obs, state = self._observe()
        e, dev = self.num_envs, self.device
        no = torch.zeros(e, dtype=torch.bool, device=dev)
        zero = torch.zeros(e, dtype=torch.long, device=dev)
        return EnvStep(obs=obs, state=state, active=torch.ones(e, 2, dtype=torch.bool, device=dev),
                       reward=torch.zeros(e, 2, device=dev), done=torch.zeros(e, 2, dtype=torch.bool, device=dev),
                       terminated=no, truncated=no.clone(), episode_done=no.clone(),
                       extras={"own_coins": zero, "other_coins": zero.clone(),
                               "goal_event": torch.full((e, 2), -1, dtype=torch.long, device=dev)})

    def step(self, actions: torch.Tensor) -> EnvStep:
        if not self._seeded:
            raise RuntimeError("call reset() before step()")
        e, dev = self.num_envs, self.device
        actions = actions.to(dev).long().view(e, 2)
        self.players = (self.players + self._moves[actions]).clamp(0, self.size - 1)  # [E, 2, 2]

        on = (self.players.unsqueeze(2) == self.coins.unsqueeze(1)).all(-1)  # [E, 2, C] player i picks coin c
        own = self.coin_colour.unsqueeze(1) == self._ids.view(1, 2, 1)  # [E, 2, C] coin c has player i's colour
        foreign = (on & ~own).sum(1).float()  # [E, C] picks of coin c by the player it does not belong to
        owner_hit = (foreign.unsqueeze(-1) * self._colour_one_hot[self.coin_colour]).sum(1)  # [E, 2]
        reward = self.pick_reward * on.sum(-1).float() - self.other_penalty * owner_hit  # [E, 2]
        # coins sit on distinct cells, so a player picks at most one coin per step
        goal_event = torch.where((on & own).any(-1), OWN_GOAL, torch.where(on.any(-1), OTHER_GOAL, -1))  # [E, 2]
        self.own_coins += (on & own).sum((1, 2))
        self.other_coins += (on & ~own).sum((1, 2))
        picked = on.any(1)  # [E, C]
        if bool(picked.any()):  # skipping is exact: envs that pick nothing draw no numbers
            self._respawn(picked)
        self.t += 1

        terminated = torch.zeros(e, dtype=torch.bool, device=dev)
        truncated = self.t >= self.episode_length  # [E]
        ep_return, ep_length = self.tracker.update(reward, truncated)
        extras = {"own_coins": self.own_coins.clone(), "other_coins": self.other_coins.clone(),
                  "goal_event": goal_event}
        final_obs, final_state = self._observe()
        obs, state = final_obs, final_state
        if bool(truncated.any()):
            self._place_all(truncated)  # auto-reset only the finished envs
            obs, state = self._observe()
        everyone = torch.ones(e, 2, dtype=torch.bool, device=dev)
        return EnvStep(obs=obs, state=state, active=everyone, reward=reward,
                       done=truncated.unsqueeze(-1).expand(e, 2).clone(), terminated=terminated, truncated=truncated,
                       final_obs=final_obs, final_state=final_state, final_active=everyone.clone(),
                       episode_done=truncated.clone(), episode_return=ep_return, episode_length=ep_length,
                       extras=extras)

    _STATE_KEYS = ("players", "coins", "coin_colour", "t", "own_coins", "other_coins", "rng_key", "rng_counter")
    _STATE_NAME = "coingame"

    # ---------------------------------------------------------------- rendering
    def render(self, env_index: int = 0, cell_pixels: int = 32) -> np.ndarray:
        """[S*cell, S*cell, 3] uint8 frame of env `env_index` now."""
        if not 0 <= env_index < self.num_envs:
            raise UserError(f"coingame: render env_index={env_index} is out of range; expected 0..{self.num_envs - 1}")
        return self.frame_from_state(self._observe()[1][env_index], cell_pixels)

    def frame_from_state(self, state: torch.Tensor | np.ndarray, cell_pixels: int = 32) -> np.ndarray:
        """Frame of one global-state vector [state_dim]: coins as red / blue discs, players as red / blue
        squares with a dark border (red in the top-left corner of its cell, blue bottom-right)."""
        state = np.asarray(state.cpu() if isinstance(state, torch.Tensor) else state, dtype=np.float64)
        grid = state[:4 * self.n_cells].reshape(4, self.size, self.size)
        c = cell_pixels
        frame = np.full((self.size * c, self.size * c, 3), 235, dtype=np.uint8)
        frame[::c, :] = 150
        frame[:, ::c] = 150
        frame[-1, :] = 150
        frame[:, -1] = 150
        yy, xx = np.mgrid[0:c, 0:c] + 0.5
        disc = (yy - c / 2) ** 2 + (xx - c / 2) ** 2 <= (0.25 * c) ** 2
        colours = [(220, 40, 40), (40, 90, 220)]
        for colour in range(2):
            for r, col in zip(*np.nonzero(grid[2 + colour] > 0.5)):
                frame[r * c:(r + 1) * c, col * c:(col + 1) * c][disc] = colours[colour]
        side = max(3, int(0.38 * c))
        for player, (dy, dx) in enumerate([(0.06, 0.06), (0.56, 0.56)]):
            for r, col in zip(*np.nonzero(grid[player] > 0.5)):
                y0, x0 = r * c + int(dy * c), col * c + int(dx * c)
                frame[y0:y0 + side, x0:x0 + side] = (30, 30, 30)
                frame[y0 + 1:y0 + side - 1, x0 + 1:x0 + side - 1] = colours[player]
        return frame


class CoinGameParallelEnv(BatchedParallelEnv):
    """The coin game as a PettingZoo ParallelEnv (one env of `CoinGameVecEnv`). Episode-end infos: own_coins,
    other_coins; every step: goal_event (see `BatchedParallelEnv`)."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "name": "coingame_v0", "is_parallelizable": True}
    vec_class = CoinGameVecEnv


def make(name: str, num_envs: int, device: torch.device, **kwargs) -> CoinGameVecEnv:
    if name:
        raise UserError(f"coingame takes no variant name, got env='coingame:{name}'; expected env='coingame' with "
                        f"env_kwargs such as grid_size, n_coins, episode_length")
    return CoinGameVecEnv(num_envs, device, **kwargs)
