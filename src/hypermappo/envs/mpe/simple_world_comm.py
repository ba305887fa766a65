"""mpe2 `simple_world_comm_v3` batched in torch: simple_tag with food, forests that hide agents, and a
leader adversary who sees everything and speaks to the others.

Reproduced (checked against mpe2 1.1.1 in tests/test_env_mpe_suite.py): agents `leadadversary_0`,
`adversary_0` .. (size 0.075, accel 3, max speed 1.0), `agent_0` .. (size 0.045, accel 4, max speed
1.3), all colliding; only the leader speaks (dim_c 4: its Discrete space is 5 moves x 4 messages = 20,
the others' 5 are padded and masked by `available_actions`; continuous Box(9) vs Box(5), the others
ignore dims 5-8). Landmarks in mpe2's order: obstacles (size 0.2, colliding), food (0.03), forests
(0.3), all immovable, starting uniform in [-0.9, 0.9]^2; agents in [-1, 1]^2, at rest.
Observation of agent i: [vel, pos, landmark - pos for every landmark, other agents - pos (zeros when
hidden), then for adversaries: other good agents' vel (zeros when hidden), in-forest flags (+1 / -1
per forest), the leader's message (4); for good agents: in-forest flags, other good agents' vel].
Agent j is hidden from i unless i is the leader, or both are in one same forest, or neither is in any
forest ("in" = distance < sum of sizes). Rewards: good agent -5 per touching adversary, -2 x
simple_tag's boundary penalty, +2 per food touched, -0.05 x distance to the nearest food; adversary
-0.1 x distance to the nearest good agent, +5 per touching (good, adversary) pair. Truncation after
max_cycles.
Not reproduced: mpe2's numpy RNG (torch.Generator from reset(seed); `set_world` copies an mpe2 start),
benchmark_data.

Env strings: `mpe:simple_world_comm` (alias `_v3`). kwargs: num_good (2), num_adversaries (4, leader
included), num_obstacles (1), num_food (2), num_forests (2), max_cycles (25), continuous_actions (False).
"""

from __future__ import annotations

import torch

from hypermappo.envs.mpe._scenario import WorldScenarioEnv, check_count
from hypermappo.envs.mpe._world import Entity
from hypermappo.envs.mpe.simple_tag import boundary_penalty

DIM_C = 4
ADVERSARY_SIZE, GOOD_SIZE, FOOD_SIZE, FOREST_SIZE = 0.075, 0.045, 0.03, 0.3


class SimpleWorldCommVecEnv(WorldScenarioEnv):
    scenario = "simple_world_comm"

    def __init__(self, num_envs: int, device="cpu", *, num_good: int = 2, num_adversaries: int = 4,
                 num_obstacles: int = 1, num_food: int = 2, num_forests: int = 2, max_cycles: int = 25,
                 continuous_actions: bool = False):
        G = check_count(self.scenario, "num_good", num_good, 1)
        V = check_count(self.scenario, "num_adversaries", num_adversaries, 1)
        Lo = check_count(self.scenario, "num_obstacles", num_obstacles, 0)
        F = check_count(self.scenario, "num_food", num_food, 1)
        Fo = check_count(self.scenario, "num_forests", num_forests, 0)
        A, L = V + G, Lo + F + Fo
        adversaries = [Entity(size=ADVERSARY_SIZE, movable=True, accel=3.0, max_speed=1.0, silent=i > 0)
                       for i in range(V)]
        good = [Entity(size=GOOD_SIZE, movable=True, accel=4.0, max_speed=1.3) for _ in range(G)]
        landmarks = ([Entity(size=0.2) for _ in range(Lo)] + [Entity(size=FOOD_SIZE, collide=False) for _ in range(F)]
                     + [Entity(size=FOREST_SIZE, collide=False) for _ in range(Fo)])
        names = ["leadadversary_0"] + [f"adversary_{i}" for i in range(V - 1)] + [f"agent_{i}" for i in range(G)]
        colors = ([[0.65, 0.15, 0.15]] + [[0.95, 0.45, 0.45]] * (V - 1) + [[0.45, 0.95, 0.45]] * G
                  + [[0.25, 0.25, 0.25]] * Lo + [[0.15, 0.15, 0.65]] * F + [[0.6, 0.9, 0.6]] * Fo)
        base = 4 + 2 * L + 2 * (A - 1) + Fo
        self.n_adversaries, self.n_good, self.n_food, self.n_forests = V, G, F, Fo
        self._setup(num_envs, device, entities=adversaries + good + landmarks, agent_names=names,
                    spawn_range=[1.0] * A + [0.9] * L, obs_sizes=[base + 2 * G + DIM_C] * V + [base + 2 * (G - 1)] * G,
                    max_cycles=max_cycles, continuous_actions=continuous_actions, dim_c=DIM_C, colors=colors)
        dev = self.device

        def index(rows) -> torch.Tensor:
            return torch.tensor(rows, dtype=torch.long, device=dev).view(len(rows), -1)

        self._viewers = torch.arange(A, device=dev)
        self._landmarks = index([list(range(A, A + L))] * A)  # [A, L]
        self._others = index([[j for j in range(A) if j != i] for i in range(A)])  # [A, A-1]
        self._food = index([list(range(A + Lo, A + Lo + F))] * G)  # [G, F]
        self._forests = index([list(range(A + L - Fo, A + L))] * A)  # [A, Fo]
        self._forest_reach = torch.tensor([e.size + FOREST_SIZE for e in adversaries + good], device=dev).view(A, 1, 1)
        self._good_of_adversary = index([list(range(V, A))] * V)  # [V, G]
        self._good_of_good = index([[j for j in range(V, A) if j != i] for i in range(V, A)])  # [G, G-1]
        self._is_leader = torch.zeros(A, 1, 1, dtype=torch.bool, device=dev)  # [A, 1, 1]
        self._is_leader[0] = True

    def _visible(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(in_forest [A, Fo, E] bool, visible [A, A, E] bool: agent j shown to agent i)."""
        w = self.world
        if self.n_forests == 0:
            A, E = self.num_agents, self.num_envs
            return torch.zeros(A, 0, E, dtype=torch.bool, device=self.device), \
                torch.ones(A, A, E, dtype=torch.bool, device=self.device)
        in_forest = w.norm(w.relative(self._viewers, self._forests)) < self._forest_reach  # [A, Fo, E]
        same_forest = (in_forest.unsqueeze(1) & in_forest.unsqueeze(0)).any(2)  # [A, A, E]
        outside = ~in_forest.any(1)  # [A, E]
        visible = same_forest | (outside.unsqueeze(1) & outside.unsqueeze(0)) | self._is_leader
        return in_forest, visible

    def _observe_groups(self) -> list[torch.Tensor]:
        w, V, G, E = self.world, self.n_adversaries, self.n_good, self.num_envs
        A = V + G
        in_forest, visible = self._visible()
        landmark_rel = w.relative(self._viewers, self._landmarks).flatten(1, 2)  # [A, 2L, E]
        shown = visible.gather(1, self._others.unsqueeze(-1).expand(-1, -1, E))  # [A, A-1, E]
        other_rel = (w.relative(self._viewers, self._others) * shown.unsqueeze(2)).flatten(1, 2)  # [A, 2(A-1), E]
        forest_flags = in_forest.float().mul_(2).sub_(1)  # [A, Fo, E]: +1 in, -1 out

        def good_vel(viewers: slice, seen: torch.Tensor) -> torch.Tensor:
            """Velocities of the good agents `seen` [n, k] by `viewers`, zero when hidden: [n, 2k, E]."""
            n, k = seen.shape
            vel = w.vel.index_select(0, seen.reshape(-1)).view(n, k, 2, E)
            return (vel * visible[viewers].gather(1, seen.unsqueeze(-1).expand(-1, -1, E)).unsqueeze(2)).view(n, 2 * k, E)

        own = torch.cat([w.vel[:A], w.pos[:A], landmark_rel, other_rel], 1)  # [A, base - Fo, E]
        leader_says = w.comm[:1].expand(V, -1, -1)  # [V, 4, E]
        adversaries = torch.cat([own[:V], good_vel(slice(0, V), self._good_of_adversary), forest_flags[:V],
                                 leader_says], 1)
        good = torch.cat([own[V:], forest_flags[V:], good_vel(slice(V, A), self._good_of_good)], 1)
        return [adversaries, good]

    def _reward(self) -> torch.Tensor:
        w, V, G = self.world, self.n_adversaries, self.n_good
        rel = w.pos[V:V + G].unsqueeze(0) - w.pos[:V].unsqueeze(1)  # [V, G, 2, E]
        dist = w.norm(rel)  # [V, G, E]
        touching = (dist < ADVERSARY_SIZE + GOOD_SIZE).float()  # [V, G, E]
        food_dist = w.norm(w.relative(self._viewers[V:], self._food))  # [G, F, E]
        good = (touching.sum(0).mul_(-5.0) - 2 * boundary_penalty(w.pos[V:V + G])
                + 2 * (food_dist < GOOD_SIZE + FOOD_SIZE).float().sum(1) - 0.05 * food_dist.amin(1))  # [G, E]
        adversary = 5 * touching.sum((0, 1)).unsqueeze(0) - 0.1 * dist.amin(1)  # [V, E]
        return torch.cat([adversary, good], 0)  # [A, E]


def make(num_envs: int, device="cpu", **kwargs) -> SimpleWorldCommVecEnv:
    return SimpleWorldCommVecEnv(num_envs, device, **kwargs)
