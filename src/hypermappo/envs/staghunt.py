"""Stag-hunt gridworld batched in torch: hunting a stag pays more but needs several hunters at once.

Rules (env string `staghunt`):
- An S x S grid (`grid_size`, default 5) holds `n_hunters` agents (default 2), `n_stags` stags
  (default 1) and `n_hares` hares (default 2). At reset every entity gets its own random cell.
  Hunters may share cells with each other and with prey.
- Actions, Discrete(5): 0 stay, 1 up (row - 1), 2 down, 3 left (column - 1), 4 right. Moves into a
  wall leave the hunter where it was. All actions are always available; nobody dies.
- Order within a step: hunters move; captures are checked; caught prey respawns; stags wander.
- A stag is caught when at least `stag_min_hunters` (default 2) hunters stand *on its cell* after
  the move (adjacency does not count). A hare is caught by one or more hunters on its cell.
- Rewards: with `shared_reward=True` (default) every hunter gets the team reward
  `stag_reward * stags caught + hare_reward * hares caught` (defaults 10.0 and 1.0). With
  `shared_reward=False` each hunter standing on a caught stag gets `stag_reward` and each hunter
  standing on a caught hare gets `hare_reward`; the others get nothing. A stag pays every hunter
  in it 10x what a hare pays its hunter, so hunting it together is the better joint outcome.
  Every hunter also pays `step_penalty` (default 0) each step.
- Snowdrift payoffs (`payoff="snowdrift"`, default `payoff="staghunt"`): a Markov snowdrift game. Clearing
  the snowdrift = catching the stag: one hunter can do it alone (`stag_min_hunters` defaults to 1), the benefit
  `stag_reward` (b) goes to *every* hunter, and the hunters on the caught stag share its cost `stag_cost` (c,
  default 6.0; 0 < c < b required) equally. Per stag caught by two hunters: T = b to the one who stayed away
  (temptation), R = b - c/2 to each of two catchers (reward), S = b - c to a lone catcher (sucker),
  P = 0 to all when nobody goes (punishment): T > R > S > P, the snowdrift ordering (the stag hunt's is
  R > T >= P > S) -- each hunter prefers the other to do the work, but doing it alone beats nobody doing it.
  Hares pay `hare_reward` to their catchers as with `shared_reward=False`; rewards are individual
  (`shared_reward` defaults to false and cannot be true). Preset: `hypermappo train staghunt/snowdrift`.
- Goal labels (`spec.goal_names = ["stag", "hare", "hunter"]`, "what a hunter is going for" by kind, since a
  caught prey respawns elsewhere and its slot says nothing lasting): `extras["goal_event"]` [E, H] int64 in
  every EnvStep is 0 for a hunter standing on a stag caught this step, 1 on a caught hare (0 when it caught
  both on one cell), 2 for a hunter that caught nothing and moved onto another hunter's cell, -1 otherwise
  (also at reset). The scripted rules `staghunt_stag` / `staghunt_hare` / `staghunt_follow` write their
  target kind into `ScriptedContext.goal`; for learned hunters the next goal_event is the label.
- Caught prey respawns on a uniformly random cell holding no hunter and no other prey
  (`respawn=True`, default) or disappears (`respawn=False`; the episode then *terminates* once all
  prey is gone). Each step every stag moves with probability `stag_move_prob` (default 0) one cell
  in a random direction (walls block it; it ignores hunters and other prey).
- Episodes are truncated after `episode_length` steps (default 25).
- Observations, `observation="full"` (default): own position, one-hot own id, all hunters'
  positions, prey positions (zero when gone), prey-present flags, elapsed fraction of the episode;
  positions divided by S - 1. `observation="partial"`: own position, one-hot id, elapsed fraction
  and an egocentric (2r+1)^2 window (`view_radius` r, default 2) of four channels, flattened:
  other hunters (count), stags (count), hares (count), outside-the-grid (1).
- Global state: all hunters' and prey positions, prey-present flags, elapsed fraction.
- `extras["stag_captures"]`, `extras["hare_captures"]` ([E] int64) count the captures of the
  episode that ended at this step (valid where `episode_done`).

Randomness: each env e has its own counter-based random stream (a 32-bit integer hash of a per-env
key and a per-env draw counter), keyed by `(seed, env_offset + e)` in `reset(seed)`. Auto-resets
and respawns draw from the same streams, so runs are reproducible, and env e's trajectory does not
depend on how many envs share its batch: env e of a batch equals a one-env batch with
`env_offset=e` under the same seed and actions (useful to split envs across processes).
A torch.Generator is not used because it cannot give each row of a batch its own stream.

Also `StagHuntParallelEnv`: the same game as a PettingZoo ParallelEnv (one env of the batch).
"""

from __future__ import annotations

import math
import numbers
from functools import partial
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F

from hypermappo.envs.parallel_view import BatchedParallelEnv
from hypermappo.envs.symmetry import COLS_FLIPPED, ROWS_FLIPPED, Symmetry, flip_planes, reflect_coordinates
from hypermappo.envs.vec import EnvSpec, EnvStep, EpisodeTracker, StreamSeedBlocks, TensorState, VecEnv
from hypermappo.errors import UserError

_MASK32 = 0xFFFFFFFF
_GOLDEN32 = 0x9E3779B9
GOAL_NAMES = ("stag", "hare", "hunter")  # goal indices of extras["goal_event"] / ScriptedContext.goal
STAG_GOAL, HARE_GOAL, HUNTER_GOAL = 0, 1, 2
# stay, up, down, left, right as (d_row, d_col)
_MOVES = [[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]]


def full_view(obs: torch.Tensor, rel: torch.Tensor, *, size: int, n_hunters: int) -> torch.Tensor:
    """EnvSpec.coplayer_view of `observation="full"`: hunter (i + rel) mod H's observation, exact (every position
    is in everyone's observation; only the leading own position differs)."""
    h = n_hunters
    me = obs[..., 2:2 + h].argmax(-1)  # the observer's id
    j = (me + rel) % h
    hunters = obs[..., 2 + h:2 + 3 * h].unflatten(-1, (h, 2))  # [..., H, 2]
    own = hunters.gather(-2, j[..., None, None].expand(*j.shape, 1, 2)).squeeze(-2)
    ids = F.one_hot(j, h).to(obs.dtype)
    return torch.cat([own, ids, obs[..., 2 + h:]], -1)


def staghunt_reflections(observation: str, size: int, n_hunters: int, n_prey: int, window: int) -> list[Symmetry]:
    """EnvSpec.symmetries: the grid reflected top to bottom and left to right. Walls, respawns, the stags' random
    steps and the scripted rules (ties between equal gaps go to rows either way) are symmetric alike. Observations:
    own position (row, col), then the one-hot id, then (full) every hunter's and prey's position, prey alive and the
    elapsed fraction, or (partial) the elapsed fraction and four W x W windows centred on the hunter."""
    if size < 2:
        return []
    h, p = n_hunters, n_prey
    out = []
    for name, axis, dim, moves in (("flip_rows", 0, -2, ROWS_FLIPPED), ("flip_cols", 1, -1, COLS_FLIPPED)):
        if observation == "full":
            hunters = [2 + h + 2 * i + axis for i in range(h)]
            prey = [2 + 3 * h + 2 * i + axis for i in range(p)]
            alive = [2 + 3 * h + 2 * p + i for i in range(p)]
            own = partial(reflect_coordinates, index=[axis, *hunters])
            fn = partial(_then, own, partial(reflect_coordinates, index=prey, present=alive))
        else:
            fn = partial(_then, partial(reflect_coordinates, index=[axis]),
                         partial(flip_planes, start=2 + h + 1, planes=4, height=window, width=window, dim=dim))
        out.append(Symmetry(name, fn, moves))
    return out


def _then(first, second, obs: torch.Tensor) -> torch.Tensor:
    return second(first(obs))


def window_view(obs: torch.Tensor, rel: torch.Tensor, *, size: int, n_hunters: int, radius: int) -> torch.Tensor:
    """EnvSpec.coplayer_view of `observation="partial"` with two hunters: the partner's window, re-centred from the
    observer's (the partner is the one count of the hunter channel; the observer becomes the partner's "other
    hunter"; the outside-the-grid channel follows from the partner's position). Exact where the observer's window
    covers the partner's (view_radius >= grid_size - 1, as in the egocentric presets); cells the observer cannot
    see read as empty. A partner out of sight: the observer's own observation."""
    h, r, w = n_hunters, radius, 2 * radius + 1
    ww, lead_dim = w * w, 2 + h + 1
    shape = obs.shape[:-1]
    o = obs.reshape(-1, obs.shape[-1]).contiguous()  # one copy: every op below reads rows
    b = o.shape[0]
    hunters = o[:, lead_dim:lead_dim + ww]
    at = hunters.argmax(-1)  # the partner's cell in the observer's window
    keep = (rel.reshape(-1) == 0) | (hunters.gather(1, at.unsqueeze(1)).squeeze(1) < 0.5)  # itself / out of sight
    # the partner's offset from the observer; 0 where the observation stays the observer's own (same arithmetic)
    dr = torch.where(keep, 0, at // w - r)
    dc = torch.where(keep, 0, at % w - r)
    steps = torch.arange(w, device=o.device)
    # stags and hares: new[a, b] = old[a + dr, b + dc], empty beyond the observer's window (gathered from the window
    # itself, cells beyond it masked: no padded copy of every row)
    rows, cols = dr.view(b, 1) + steps, dc.view(b, 1) + steps  # [B, W] in the observer's window
    inside = (((rows >= 0) & (rows < w)).unsqueeze(-1) & ((cols >= 0) & (cols < w)).unsqueeze(-2)).view(b, 1, ww)
    cell = (rows.clamp(0, w - 1).unsqueeze(-1) * w + cols.clamp(0, w - 1).unsqueeze(-2)).view(b, 1, ww)
    prey = o[:, lead_dim + ww:lead_dim + 3 * ww].gather(1, torch.cat([cell, cell + ww], 1).view(b, 2 * ww))
    prey = torch.where(inside.expand(b, 2, ww).reshape(b, 2 * ww), prey, 0.0)  # [B, 2 * W*W]
    # the observer, seen from the partner: at offset (-dr, -dc)
    me = F.one_hot((r - dr) * w + (r - dc), ww).to(o.dtype)
    me = torch.where(keep.unsqueeze(-1), hunters, me)
    # outside the grid, from the partner's absolute position
    pos = torch.round(o[:, :2] * (size - 1)).long() + torch.stack([dr, dc], -1)  # [B, 2]
    ar, ac = pos[:, :1] - r + steps, pos[:, 1:] - r + steps  # [B, W] absolute rows / columns of the window
    out_r, out_c = (ar < 0) | (ar >= size), (ac < 0) | (ac >= size)
    outside = (out_r.unsqueeze(-1) | out_c.unsqueeze(-2)).view(b, ww).to(o.dtype)
    ids = F.one_hot((o[:, 2:2 + h].argmax(-1) + torch.where(keep, 0, rel.reshape(-1))) % h, h).to(o.dtype)
    own = torch.where(keep.unsqueeze(-1), o[:, :2], pos.to(o.dtype) / (size - 1))
    view = torch.cat([own, ids, o[:, 2 + h:lead_dim], me, prey, outside], -1)
    return view.view(*shape, obs.shape[-1])


def _hash32(x: torch.Tensor | int) -> torch.Tensor | int:
    """A 32-bit integer mixer (Wellons' hash-prospector constants, both < 2^31 so int64 products
    never overflow). Works on Python ints and int64 tensors alike; output in [0, 2^32)."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x21F0AAAD) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x735A2D97) & _MASK32
    return x ^ (x >> 15)


def _check_int(name: str, value, minimum: int, env: str = "staghunt") -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise UserError(f"{env}: {name}={value!r} is invalid; expected an integer >= {minimum}")
    return int(value)


def _check_float(name: str, value, lo: float = -math.inf, hi: float = math.inf, env: str = "staghunt") -> float:
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value) and lo <= value <= hi
    if not ok:
        raise UserError(f"{env}: {name}={value!r} is invalid; expected a finite number in [{lo}, {hi}]")
    return float(value)


def _check_bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"staghunt: {name}={value!r} is invalid; expected true or false")
    return value


class StagHuntVecEnv(StreamSeedBlocks, TensorState, VecEnv):
    """E stag-hunt gridworlds stepped together with tensor ops (rules in the module docstring)."""

    def __init__(self, num_envs: int, device: torch.device | str = "cpu", *, grid_size: int = 5, n_hunters: int = 2,
                 n_stags: int = 1, n_hares: int = 2, stag_min_hunters: int | None = None, stag_reward: float = 10.0,
                 hare_reward: float = 1.0, shared_reward: bool | None = None, step_penalty: float = 0.0,
                 respawn: bool = True, stag_move_prob: float = 0.0, episode_length: int = 25,
                 observation: str = "full", view_radius: int = 2, env_offset: int = 0, payoff: str = "staghunt",
                 stag_cost: float | None = None):
        self.num_envs = _check_int("num_envs", num_envs, 1)
        self.device = torch.device(device)
        self.size = _check_int("grid_size", grid_size, 2)
        self.n_hunters = _check_int("n_hunters", n_hunters, 1)
        self.n_stags = _check_int("n_stags", n_stags, 0)
        self.n_hares = _check_int("n_hares", n_hares, 0)
        self.n_prey = self.n_stags + self.n_hares
        self.n_cells = self.size * self.size
        if self.n_prey < 1:
            raise UserError("staghunt: n_stags=0 and n_hares=0; expected at least one stag or hare")
        if self.n_hunters + self.n_prey > self.n_cells:
            raise UserError(f"staghunt: n_hunters + n_stags + n_hares = {self.n_hunters + self.n_prey} entities do not "
                            f"fit on a {self.size}x{self.size} grid; expected at most {self.n_cells}")
        if payoff not in ("staghunt", "snowdrift"):
            raise UserError(f"staghunt: payoff={payoff!r} is invalid; expected 'staghunt' or 'snowdrift'")
        self.payoff = payoff
        snowdrift = payoff == "snowdrift"
        if stag_min_hunters is None:
            stag_min_hunters = 1 if snowdrift else 2
        self.stag_min_hunters = _check_int("stag_min_hunters", stag_min_hunters, 1)
        if self.n_stags > 0 and self.stag_min_hunters > self.n_hunters:
            raise UserError(f"staghunt: stag_min_hunters={stag_min_hunters} can never be met; expected at most "
                            f"n_hunters={self.n_hunters}")
        self.stag_reward = _check_float("stag_reward", stag_reward)
        self.hare_reward = _check_float("hare_reward", hare_reward)
        if shared_reward is None:
            shared_reward = not snowdrift
        self.shared_reward = _check_bool("shared_reward", shared_reward)
        if snowdrift and self.shared_reward:
            raise UserError("staghunt: shared_reward=true with payoff='snowdrift' is invalid; snowdrift rewards are "
                            "individual, expected shared_reward=false (or unset)")
        if not snowdrift and stag_cost is not None:
            raise UserError(f"staghunt: stag_cost={stag_cost!r} only applies to payoff='snowdrift'; "
                            f"got payoff={payoff!r}")
        self.stag_cost = _check_float("stag_cost", 6.0 if stag_cost is None else stag_cost) if snowdrift else 0.0
        if snowdrift and not 0.0 < self.stag_cost < self.stag_reward:
            raise UserError(f"staghunt: stag_cost={self.stag_cost} with stag_reward={self.stag_reward} breaks the "
                            f"snowdrift ordering T > R > S > P; expected 0 < stag_cost < stag_reward")
        self.step_penalty = _check_float("step_penalty", step_penalty, 0.0)
        self.respawn = _check_bool("respawn", respawn)
        self.stag_move_prob = _check_float("stag_move_prob", stag_move_prob, 0.0, 1.0)
        self.episode_length = _check_int("episode_length", episode_length, 1)
        if observation not in ("full", "partial"):
            raise UserError(f"staghunt: observation={observation!r} is invalid; expected 'full' or 'partial'")
        self.observation = observation
        self.view_radius = _check_int("view_radius", view_radius, 1)
        self.env_offset = _check_int("env_offset", env_offset, 0)

        e, h, p, dev = self.num_envs, self.n_hunters, self.n_prey, self.device
        self._moves = torch.tensor(_MOVES, dtype=torch.long, device=dev)  # [5, 2]
        self._is_stag = torch.arange(p, device=dev) < self.n_stags  # [P], stags first, then hares
        self._hunters_needed = torch.where(self._is_stag, self.stag_min_hunters, 1)  # [P]
        self._prey_value = torch.where(self._is_stag, self.stag_reward, self.hare_reward).float()  # [P]
        self._hunter_ids = torch.eye(h, device=dev)  # [H, H] one-hot ids
        self._pos_scale = 1.0 / (self.size - 1)
        # per-draw offsets so one draw call yields k different numbers (k <= n_cells or 2 * n_stags)
        max_draw = max(self.n_cells, 2 * self.n_stags)
        self._draw_offsets = (torch.arange(1, max_draw + 1, dtype=torch.long, device=dev) * _GOLDEN32) & _MASK32

        window = 2 * self.view_radius + 1
        padded = self.size + 2 * self.view_radius
        self._window = window
        self._padded = padded
        outside = torch.ones(padded, padded, device=dev)
        outside[self.view_radius:self.view_radius + self.size, self.view_radius:self.view_radius + self.size] = 0
        self._outside = outside.flatten()  # [Q*Q], 1 outside the grid
        self._window_steps = torch.arange(window, device=dev)  # [W]

        shared_dim = 2 * h + 3 * p + 1
        if observation == "full":
            obs_dim, obs_high = 2 + h + shared_dim, 1.0
        else:
            obs_dim, obs_high = 2 + h + 1 + 4 * window * window, float(max(1, h - 1, self.n_stags, self.n_hares))
        self.spec = EnvSpec(
            num_agents=h, obs_dim=obs_dim, state_dim=shared_dim,
            observation_space=gym.spaces.Box(0.0, obs_high, (obs_dim,), np.float32),
            action_space=gym.spaces.Discrete(len(_MOVES)), episode_limit=self.episode_length,
            agent_names=[f"hunter_{i}" for i in range(h)], can_render=True, can_save_state=True,
            team_reward=self.shared_reward, goal_names=list(GOAL_NAMES), public_actions=True,
            identity_features=list(range(2, 2 + h)),  # the one-hot own id
            coplayer_view=(partial(full_view, size=self.size, n_hunters=h) if observation == "full" else
                           partial(window_view, size=self.size, n_hunters=h, radius=self.view_radius) if h == 2 else
                           None),  # a count window does not say which of several others is which
            symmetries=staghunt_reflections(observation, self.size, h, p, window),
        )

        self.hunters = torch.zeros(e, h, 2, dtype=torch.long, device=dev)  # [E, H, 2] (row, col)
        self.prey = torch.zeros(e, p, 2, dtype=torch.long, device=dev)  # [E, P, 2], stags then hares
        self.prey_alive = torch.ones(e, p, dtype=torch.bool, device=dev)  # [E, P]
        self.t = torch.zeros(e, dtype=torch.long, device=dev)  # [E] steps taken in this episode
        self.stag_captures = torch.zeros(e, dtype=torch.long, device=dev)  # [E] this episode
        self.hare_captures = torch.zeros(e, dtype=torch.long, device=dev)  # [E] this episode
        self.rng_key = torch.zeros(e, dtype=torch.long, device=dev)  # [E] per-env stream key
        self.rng_counter = torch.zeros(e, dtype=torch.long, device=dev)  # [E] draws taken so far
        self.tracker = EpisodeTracker(e, h, dev)
        self._seeded = False

    # ---------------------------------------------------------------- randomness
    def _seed_streams(self, seed: int) -> None:
        """Key env e's stream by (seed, env_offset + e); different seeds give unrelated streams."""
        self.rng_key = self._stream_keys(seed, torch.arange(self.num_envs, device=self.device) + self.env_offset)
        self.rng_counter.zero_()
        self._seeded = True

    def _stream_keys(self, seed: int, global_index: torch.Tensor) -> torch.Tensor:
        """The stream keys [k] of the envs numbered `global_index` [k] under `seed`."""
        seed_mix = _hash32(_hash32(seed & _MASK32) ^ ((seed >> 32) & _MASK32))
        return _hash32(seed_mix + _hash32(global_index.long() ^ 0x27D4EB2F))

    def _draw(self, k: int, take: torch.Tensor) -> torch.Tensor:
        """[E, k] random ints in [0, 2^32) from each env's stream; only envs where `take` [E] is
        set advance their counter, so an env's numbers do not depend on the other envs."""
        base = _hash32(self.rng_key ^ _hash32(self.rng_counter))  # [E]
        self.rng_counter += take.long()
        return _hash32(base.unsqueeze(-1) + self._draw_offsets[:k])  # [E, k]

    @staticmethod
    def _to_unit(x: torch.Tensor) -> torch.Tensor:
        """Random 32-bit ints -> float32 uniform in [0, 1) (24 bits, exact in float32)."""
        return (x >> 8).float() / float(1 << 24)

    # ---------------------------------------------------------------- helpers
    def _cells(self, pos: torch.Tensor) -> torch.Tensor:
        return pos[..., 0] * self.size + pos[..., 1]

    def _positions(self, cells: torch.Tensor) -> torch.Tensor:
        return torch.stack([cells // self.size, cells % self.size], -1)

    def _place_all(self, envs: torch.Tensor) -> None:
        """Fresh episode for the envs in mask `envs` [E]: every hunter and prey on its own random cell."""
        keys = self._draw(self.n_cells, envs)  # [E, C]
        cells = keys.topk(self.n_hunters + self.n_prey, dim=-1).indices  # [E, H+P] distinct random cells
        pos = self._positions(cells)  # [E, H+P, 2]
        m = envs.view(-1, 1, 1)
        self.hunters = torch.where(m, pos[:, :self.n_hunters], self.hunters)
        self.prey = torch.where(m, pos[:, self.n_hunters:], self.prey)
        self.prey_alive = self.prey_alive | envs.unsqueeze(-1)
        self.t = torch.where(envs, 0, self.t)
        self.stag_captures = torch.where(envs, 0, self.stag_captures)
        self.hare_captures = torch.where(envs, 0, self.hare_captures)

    def _respawn(self, caught: torch.Tensor) -> None:
        """Move each caught prey [E, P] to a distinct random cell free of hunters and other prey."""
        e = self.num_envs
        needs = caught.any(-1)  # [E]
        keys = self._draw(self.n_cells, needs)  # [E, C]
        occupied = torch.zeros(e, self.n_cells, dtype=torch.bool, device=self.device)
        occupied.scatter_(1, self._cells(self.hunters), True)
        staying = self.prey_alive & ~caught  # [E, P]
        prey_cells = torch.where(staying, self._cells(self.prey), self._cells(self.hunters[:, :1]))  # [E, P]
        occupied.scatter_(1, prey_cells, True)  # caught prey's cells hold a hunter, already occupied
        keys = torch.where(occupied, -1, keys)
        # n_hunters + n_prey <= n_cells, so each env has at least as many free cells as caught prey
        free_cells = keys.topk(self.n_prey, dim=-1).indices  # [E, P], best free cells first
        rank = (caught.long().cumsum(-1) - 1).clamp(min=0)  # [E, P] k-th caught prey takes k-th free cell
        new_pos = self._positions(free_cells.gather(1, rank))  # [E, P, 2]
        self.prey = torch.where(caught.unsqueeze(-1), new_pos, self.prey)

    def _move_stags(self) -> None:
        if self.stag_move_prob <= 0 or self.n_stags == 0:
            return
        everyone = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        rand = self._draw(2 * self.n_stags, everyone)  # [E, 2S]
        moving = self._to_unit(rand[:, :self.n_stags]) < self.stag_move_prob  # [E, S]
        direction = 1 + (rand[:, self.n_stags:] % 4)  # [E, S] in up/down/left/right
        step = self._moves[direction] * moving.unsqueeze(-1)  # [E, S, 2]
        stags = (self.prey[:, :self.n_stags] + step).clamp(0, self.size - 1)
        self.prey = torch.cat([stags, self.prey[:, self.n_stags:]], 1)

    def _observe(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(obs [E, H, obs_dim], state [E, state_dim]) of the current positions."""
        e, h = self.num_envs, self.n_hunters
        hunters = self.hunters.float() * self._pos_scale  # [E, H, 2]
        alive = self.prey_alive.float()  # [E, P]
        prey = self.prey.float() * self._pos_scale * alive.unsqueeze(-1)  # [E, P, 2]
        elapsed = (self.t.float() / self.episode_length).unsqueeze(-1)  # [E, 1]
        state = torch.cat([hunters.flatten(1), prey.flatten(1), alive, elapsed], -1)  # [E, state_dim]
        ids = self._hunter_ids.expand(e, h, h)
        if self.observation == "full":
            obs = torch.cat([hunters, ids, state.unsqueeze(1).expand(e, h, -1)], -1)
        else:
            obs = torch.cat([hunters, ids, elapsed.unsqueeze(1).expand(e, h, 1), self._windows()], -1)
        return obs, state

    def _windows(self) -> torch.Tensor:
        """[E, H, 4 * W * W] egocentric windows: other hunters, stags, hares, outside-the-grid."""
        e, h, c, q, w, r = self.num_envs, self.n_hunters, self.n_cells, self._padded, self._window, self.view_radius
        channel = torch.where(self._is_stag, 1, 2)  # [P] stags in channel 1, hares in channel 2
        index = torch.cat([self._cells(self.hunters), channel * c + self._cells(self.prey)], 1)  # [E, H+P]
        weight = torch.cat([torch.ones(e, h, device=self.device), self.prey_alive.float()], 1)  # [E, H+P]
        counts = torch.zeros(e, 3 * c, device=self.device).scatter_add_(1, index, weight)
        grid = F.pad(counts.view(e, 3, self.size, self.size), (r, r, r, r)).flatten(2)  # [E, 3, Q*Q]
        grid = torch.cat([grid, self._outside.expand(e, 1, q * q)], 1)  # [E, 4, Q*Q]
        # window of a hunter at (y, x) covers padded rows y..y+2r and columns x..x+2r
        rows = self.hunters[..., 0:1] + self._window_steps  # [E, H, W]
        cols = self.hunters[..., 1:2] + self._window_steps  # [E, H, W]
        flat = (rows.unsqueeze(-1) * q + cols.unsqueeze(-2)).view(e, 1, h * w * w)  # [E, 1, H*W*W]
        windows = grid.gather(2, flat.expand(e, 4, -1)).view(e, 4, h, w * w).transpose(1, 2)  # [E, H, 4, W*W]
        windows[:, :, 0, (w * w) // 2] -= 1  # a hunter does not see itself in the hunter channel
        return windows.flatten(2)

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
        e, h, dev = self.num_envs, self.n_hunters, self.device
        no = torch.zeros(e, dtype=torch.bool, device=dev)
        zero_counts = torch.zeros(e, dtype=torch.long, device=dev)
        return EnvStep(obs=obs, state=state, active=torch.ones(e, h, dtype=torch.bool, device=dev),
                       reward=torch.zeros(e, h, device=dev), done=torch.zeros(e, h, dtype=torch.bool, device=dev),
                       terminated=no, truncated=no.clone(), episode_done=no.clone(),
                       extras={"stag_captures": zero_counts, "hare_captures": zero_counts.clone(),
                               "goal_event": torch.full((e, h), -1, dtype=torch.long, device=dev)})

    def step(self, actions: torch.Tensor) -> EnvStep:
        if not self._seeded:
            raise RuntimeError("call reset() before step()")
        e, h, dev = self.num_envs, self.n_hunters, self.device
        actions = actions.to(dev).long().view(e, h)
        before = self.hunters
        self.hunters = (self.hunters + self._moves[actions]).clamp(0, self.size - 1)  # [E, H, 2]

        on_prey = (self.hunters.unsqueeze(2) == self.prey.unsqueeze(1)).all(-1) & self.prey_alive.unsqueeze(1)  # [E,H,P]
        caught = self.prey_alive & (on_prey.sum(1) >= self._hunters_needed)  # [E, P]
        catchers = on_prey & caught.unsqueeze(1)  # [E, H, P]
        if self.payoff == "snowdrift":
            stags, hares = catchers[..., :self.n_stags].float(), catchers[..., self.n_stags:].float()
            benefit = self.stag_reward * caught[:, :self.n_stags].sum(-1, keepdim=True).float()  # [E, 1] to everyone
            cost_share = (stags / stags.sum(1, keepdim=True).clamp(min=1)).sum(-1)  # [E, H] share of stags' costs
            reward = benefit - self.stag_cost * cost_share + self.hare_reward * hares.sum(-1)  # [E, H]
        elif self.shared_reward:
            team = (caught.float() * self._prey_value).sum(-1)  # [E]
            reward = team.unsqueeze(-1).expand(e, h).clone()
        else:
            reward = (catchers.float() * self._prey_value).sum(-1)  # [E, H]
        if self.step_penalty:
            reward = reward - self.step_penalty
        self.stag_captures += caught[:, :self.n_stags].sum(-1)
        self.hare_captures += caught[:, self.n_stags:].sum(-1)
        moved = (self.hunters != before).any(-1)  # [E, H]
        met = moved & ((self.hunters.unsqueeze(2) == self.hunters.unsqueeze(1)).all(-1).sum(-1) > 1)  # walked onto one
        goal_event = torch.where(catchers[..., :self.n_stags].any(-1), STAG_GOAL,
                                 torch.where(catchers[..., self.n_stags:].any(-1), HARE_GOAL,
                                             torch.where(met, HUNTER_GOAL, -1)))  # [E, H]

        if self.respawn:
            # skipping is exact: envs that catch nothing draw no numbers (sync-free collection never skips)
            if self.sync_free or bool(caught.any()):
                self._respawn(caught)
        else:
            self.prey_alive = self.prey_alive & ~caught
        self._move_stags()
        self.t += 1

        terminated = torch.zeros(e, dtype=torch.bool, device=dev) if self.respawn else ~self.prey_alive.any(-1)
        truncated = (self.t >= self.episode_length) & ~terminated
        ended = terminated | truncated  # [E]
        ep_return, ep_length = self.tracker.update(reward, ended)
        extras = {"stag_captures": self.stag_captures.clone(), "hare_captures": self.hare_captures.clone(),
                  "goal_event": goal_event}
        final_obs, final_state = self._observe()
        obs, state = final_obs, final_state
        if self.sync_free or bool(ended.any()):
            self._place_all(ended)  # auto-reset only the finished envs (masks: exact for the others too)
            obs, state = self._observe()
        return EnvStep(obs=obs, state=state, active=torch.ones(e, h, dtype=torch.bool, device=dev),
                       reward=reward, done=ended.unsqueeze(-1).expand(e, h).clone(),
                       terminated=terminated, truncated=truncated, final_obs=final_obs, final_state=final_state,
                       final_active=torch.ones(e, h, dtype=torch.bool, device=dev), episode_done=ended,
                       episode_return=ep_return, episode_length=ep_length, extras=extras)

    # the exact state (TensorState): positions (`prey` holds stags first, then hares), counters, random streams
    _STATE_KEYS = ("hunters", "prey", "prey_alive", "t", "stag_captures", "hare_captures", "rng_key", "rng_counter")
    _STATE_NAME = "staghunt"

    def render(self, env_index: int = 0, cell_pixels: int = 32) -> np.ndarray:
        """[S*cell, S*cell, 3] uint8 frame of env `env_index` now (see `draw_frame`)."""
        if not 0 <= env_index < self.num_envs:
            raise UserError(f"staghunt: render env_index={env_index} is out of range; expected 0..{self.num_envs - 1}")
        return self.draw_frame(self.hunters[env_index].cpu().numpy(), self.prey[env_index].cpu().numpy(),
                               self.prey_alive[env_index].cpu().numpy(), cell_pixels)

    def frame_from_state(self, state: torch.Tensor | np.ndarray, cell_pixels: int = 32) -> np.ndarray:
        """Frame of one global-state vector [state_dim], e.g. `final_state[e]` after an auto-reset."""
        state = np.asarray(state.cpu() if isinstance(state, torch.Tensor) else state, dtype=np.float64)
        h, p = self.n_hunters, self.n_prey
        positions = np.rint(state[:2 * (h + p)] * (self.size - 1)).astype(np.int64).reshape(h + p, 2)
        return self.draw_frame(positions[:h], positions[h:], state[2 * (h + p):2 * (h + p) + p] > 0.5, cell_pixels)

    def draw_frame(self, hunters: np.ndarray, prey: np.ndarray, alive: np.ndarray, cell_pixels: int = 32) -> np.ndarray:
        """Grid lines, brown stags (big discs), grey hares (small discs), hunters as coloured squares
        in different corners of their cell so that stacked hunters stay visible."""
        c, s = cell_pixels, self.size
        frame = np.full((s * c, s * c, 3), 235, dtype=np.uint8)
        frame[::c, :] = 150
        frame[:, ::c] = 150
        frame[-1, :] = 150
        frame[:, -1] = 150
        yy, xx = np.mgrid[0:c, 0:c] + 0.5
        for i in range(self.n_prey):
            if not alive[i]:
                continue
            stag = i < self.n_stags
            radius, colour = (0.42 * c, (139, 69, 19)) if stag else (0.2 * c, (120, 120, 120))
            disc = (yy - c / 2) ** 2 + (xx - c / 2) ** 2 <= radius ** 2
            r, col = prey[i]
            frame[r * c:(r + 1) * c, col * c:(col + 1) * c][disc] = colour
        palette = [(220, 40, 40), (40, 90, 220), (40, 170, 60), (230, 170, 0), (160, 60, 200), (0, 170, 170)]
        corners = [(0.08, 0.08), (0.08, 0.54), (0.54, 0.08), (0.54, 0.54)]
        side = max(2, int(0.38 * c))
        for i, (r, col) in enumerate(hunters):
            dy, dx = corners[i % 4]
            y0, x0 = r * c + int(dy * c), col * c + int(dx * c)
            frame[y0:y0 + side, x0:x0 + side] = palette[i % len(palette)]
        return frame


class StagHuntParallelEnv(BatchedParallelEnv):
    """The stag hunt as a PettingZoo ParallelEnv: one env of `StagHuntVecEnv`, so the rules live once.
    Episode-end infos: stag_captures, hare_captures; every step: goal_event (see `BatchedParallelEnv`)."""

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "name": "staghunt_v0", "is_parallelizable": True}
    vec_class = StagHuntVecEnv


def make(name: str, num_envs: int, device: torch.device, **kwargs) -> StagHuntVecEnv:
    if name:
        raise UserError(f"staghunt takes no variant name, got env='staghunt:{name}'; expected env='staghunt' with "
                        f"env_kwargs such as grid_size, n_hunters, n_stags, n_hares")
    return StagHuntVecEnv(num_envs, device, **kwargs)
