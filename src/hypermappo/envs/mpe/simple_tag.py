"""mpe2 `simple_tag_v3` batched in torch: slower adversaries chase faster good agents among obstacles.

Reproduced (checked against mpe2 1.1.1 in tests/test_env_mpe_suite.py): agents `adversary_0` ..
`adversary_{A-1}` (size 0.075, accel 3, max speed 1.0) then `agent_0` .. (size 0.05, accel 4, max speed
1.3), all silent and colliding; obstacles `landmark k` (size 0.2, immovable, colliding) start uniform in
[-0.9, 0.9]^2, agents in [-1, 1]^2, at rest. Observation of every agent: [vel (2), pos (2),
obstacle_k - pos (2 per obstacle), other agents - pos in index order, velocities of the other *good*
agents] (good agents see one velocity fewer: zero-padded at the end). Rewards (per agent, collision =
distance < sum of sizes): good agent -10 per adversary touching it, minus sum over x, y of
bound(|coordinate|) (0 below 0.9, 10 (x - 0.9) below 1, else min(exp(2x - 2), 10)); every adversary +10
per touching (good, adversary) pair. Truncation after max_cycles.
Not reproduced: mpe2's numpy RNG (torch.Generator from reset(seed); `set_world` copies an mpe2 start),
curriculum, terminate_on_success, partial observability (num_*_neighbors), benchmark_data.

Env strings: `mpe:simple_tag` (alias `_v3`). kwargs: num_good (1), num_adversaries (3), num_obstacles (2),
max_cycles (25), continuous_actions (False).

Goal labels (this library's, for co-player models; `spec.goal_names` = `chase_0` .. `chase_{G-1}`, then `flee_left`,
`flee_right`, `flee_down`, `flee_up`): `extras["goal_event"]` [E, A] int64 in every EnvStep says, for the step just
taken, which prey each adversary went for and which way each prey fled:
- adversary v: `chase_g` for the good agent g it touches (the nearest one when several), else for the one it came
  nearest to by more than APPROACH (0.02) in this step, else -1;
- good agent g: `flee_<direction>` of its displacement's larger axis when an adversary was within THREAT (0.6)
  before the step and it moved more than 0.01, else -1;
- -1 at reset. Moves are public (`spec.public_actions`): every agent's move shows up as the acceleration of a body
  the others see, as in the gridworlds where co-player models read the others' last moves.
"""

from __future__ import annotations

import torch

from hypermappo.envs.mpe._scenario import WorldScenarioEnv, check_count
from hypermappo.envs.mpe._world import Entity

FLEE_NAMES = ("flee_left", "flee_right", "flee_down", "flee_up")  # the prey's goals, after the chase_g goals
APPROACH = 0.02  # an adversary coming this much nearer to a prey in one step is going for it
THREAT = 0.6  # a prey with an adversary this near is fleeing
MOVED = 0.01  # a prey that moved less than this did not flee anywhere


def tag_goal_names(num_good: int) -> list[str]:
    return [f"chase_{g}" for g in range(num_good)] + list(FLEE_NAMES)


def flee_goal(delta: torch.Tensor, num_good: int) -> torch.Tensor:
    """delta [..., 2] (a displacement or an intended move) -> the flee goal index of its larger axis [...]."""
    x, y = delta.unbind(-1)
    direction = torch.where(x.abs() >= y.abs(), torch.where(x < 0, 0, 1), torch.where(y < 0, 2, 3))
    return num_good + direction


def goal_events(before: torch.Tensor, after: torch.Tensor, V: int, touch: float) -> torch.Tensor:
    """Agents' positions before and after a step [E, A, 2] (V adversaries first) -> goal_event [E, A] long."""
    G = before.shape[1] - V
    gap_before = torch.cdist(before[:, :V], before[:, V:])  # [E, V, G]
    gap_after = torch.cdist(after[:, :V], after[:, V:])
    touching = gap_after < touch
    nearest = gap_after.argmin(-1)  # [E, V]
    closing = gap_before - gap_after  # [E, V, G]
    best = closing.argmax(-1)
    chase = torch.where(touching.any(-1), nearest,
                        torch.where(closing.amax(-1) > APPROACH, best, -1))  # [E, V]
    threatened = gap_before.amin(1) < THREAT  # [E, G]
    moved = after[:, V:] - before[:, V:]  # [E, G, 2]
    flee = torch.where(threatened & (moved.norm(dim=-1) > MOVED), flee_goal(moved, G), -1)  # [E, G]
    return torch.cat([chase, flee], 1).long()


def boundary_penalty(pos: torch.Tensor) -> torch.Tensor:
    """mpe2's bound() summed over x and y: pos [A, 2, E] -> [A, E]."""
    x = pos.abs()
    ramp = (x - 0.9) * 10
    wall = torch.exp(2 * x - 2).clamp_(max=10.0)
    return torch.where(x < 0.9, torch.zeros_like(x), torch.where(x < 1.0, ramp, wall)).sum(1)


class SimpleTagVecEnv(WorldScenarioEnv):
    scenario = "simple_tag"

    def __init__(self, num_envs: int, device="cpu", *, num_good: int = 1, num_adversaries: int = 3,
                 num_obstacles: int = 2, max_cycles: int = 25, continuous_actions: bool = False):
        G = check_count(self.scenario, "num_good", num_good, 1)
        V = check_count(self.scenario, "num_adversaries", num_adversaries, 1)
        L = check_count(self.scenario, "num_obstacles", num_obstacles, 0)
        A = V + G
        adversaries = [Entity(size=0.075, movable=True, accel=3.0, max_speed=1.0) for _ in range(V)]
        good = [Entity(size=0.05, movable=True, accel=4.0, max_speed=1.3) for _ in range(G)]
        obstacles = [Entity(size=0.2) for _ in range(L)]
        names = [f"adversary_{i}" for i in range(V)] + [f"agent_{i}" for i in range(G)]
        colors = [[0.85, 0.35, 0.35]] * V + [[0.35, 0.85, 0.35]] * G + [[0.25, 0.25, 0.25]] * L
        base = 4 + 2 * L + 2 * (A - 1)
        self.n_adversaries, self.n_good = V, G
        self._setup(num_envs, device, entities=adversaries + good + obstacles, agent_names=names,
                    spawn_range=[1.0] * A + [0.9] * L, obs_sizes=[base + 2 * G] * V + [base + 2 * (G - 1)] * G,
                    max_cycles=max_cycles, continuous_actions=continuous_actions, dim_c=2, colors=colors)
        dev = self.device
        self._viewers = torch.arange(A, device=dev)
        seen = [[A + k for k in range(L)] + [j for j in range(A) if j != i] for i in range(A)]
        self._seen = torch.tensor(seen, dtype=torch.long, device=dev)  # [A, L + A - 1]
        good_ids = range(V, A)
        good_others = [[j for j in good_ids if j != i] for i in good_ids]
        self._good_others = torch.tensor(good_others, dtype=torch.long, device=dev)  # [G, G-1]
        self._pair_min = torch.tensor([[0.075 + 0.05]], device=dev)  # adversary-good touching distance
        self.spec.goal_names = tag_goal_names(G)
        self.spec.public_actions = True
        self._last_pos = None  # [E, A, 2] every agent's position at the last observation (goal labels)

    def _positions(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, :, 2:4].clone()  # every agent's observation starts with its velocity, then its position

    def _start_step(self):
        s = super()._start_step()
        self._last_pos = self._positions(s.obs)
        s.extras["goal_event"] = torch.full((self.num_envs, self.num_agents), -1, dtype=torch.long, device=self.device)
        return s

    def step(self, actions: torch.Tensor):
        s = super().step(actions)
        if self._last_pos is None:  # a state set from outside (set_state) before any step
            self._last_pos = self._positions(s.final_obs)
        s.extras["goal_event"] = goal_events(self._last_pos, self._positions(s.final_obs), self.n_adversaries,
                                             0.075 + 0.05)
        self._last_pos = self._positions(s.obs)
        return s

    def set_state(self, state: dict) -> None:
        super().set_state(state)
        self._last_pos = self._positions(self._observe())

    def _observe_groups(self) -> list[torch.Tensor]:
        w, V, G, E = self.world, self.n_adversaries, self.n_good, self.num_envs
        rel = w.relative(self._viewers, self._seen).flatten(1, 2)  # [A, 2(L + A - 1), E]
        own = torch.cat([w.vel[: V + G], w.pos[: V + G], rel], 1)  # [A, base, E]
        good_vel = w.vel[V:V + G].reshape(1, 2 * G, E)  # [1, 2G, E]
        adversaries = torch.cat([own[:V], good_vel.expand(V, -1, -1)], 1)  # [V, base + 2G, E]
        other_good_vel = w.vel.index_select(0, self._good_others.reshape(-1)).view(G, 2 * (G - 1), E)
        good = torch.cat([own[V:], other_good_vel], 1)  # [G, base + 2(G - 1), E]
        return [adversaries, good]

    def _touching(self) -> torch.Tensor:
        """[V, G, E] bool: adversary v and good agent g collide (distance < sum of sizes)."""
        w, V, G = self.world, self.n_adversaries, self.n_good
        rel = w.pos[V:V + G].unsqueeze(0) - w.pos[:V].unsqueeze(1)  # [V, G, 2, E]
        return w.norm(rel) < self._pair_min.unsqueeze(-1)

    def _reward(self) -> torch.Tensor:
        V, G = self.n_adversaries, self.n_good
        touching = self._touching().float()  # [V, G, E]
        good = touching.sum(0).mul_(-10.0).sub_(boundary_penalty(self.world.pos[V:V + G]))  # [G, E]
        adversary = touching.sum((0, 1)).mul_(10.0).unsqueeze(0).expand(V, -1)  # [V, E]
        return torch.cat([adversary, good], 0)  # [A, E]


def make(num_envs: int, device="cpu", **kwargs) -> SimpleTagVecEnv:
    return SimpleTagVecEnv(num_envs, device, **kwargs)
