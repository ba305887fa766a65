"""mpe2's physics (`_mpe_utils/core.py` World.step + SimpleEnv._set_action) batched over E envs in torch.

Why a general world: simple, simple_adversary, simple_push, simple_tag and simple_world_comm differ only
in their entities (size, movable, collide, accel, max_speed) and in their observation / reward code; the
physics is one. Every tensor is laid out [entity, xy, E] (env index last, see mpe_torch.py for why) and a
step costs a fixed number of tensor ops whatever E and the number of entities.

Reproduced from mpe2 1.1.1: agents are the first A entities (mpe2's `world.entities` = agents +
landmarks); action decoding (discrete: `action % 5` moves 0 no-op, 1 left, 2 right, 3 down, 4 up and,
for a speaking agent, `action // 5` picks the one-hot message; continuous: the action is clipped to
[0, 1] (mpe2's ClipOutOfBoundsWrapper), u = (a2 - a1, a4 - a3), message = a[5:5 + dim_c]); control
force = accel (default 5) x u; a soft contact force between every pair of colliding entities,
contact_force * delta / |delta| * softplus(-(|delta| - size_a - size_b) / margin) * margin, pushing
only movable ones; integration position += old velocity * dt, then velocity = velocity * (1 - damping)
+ force / mass * dt, then velocity rescaled to max_speed when faster; comm state = the message
(silent agents: zeros).
Not reproduced: motor / communication noise (u_noise, c_noise: None in every mpe2 scenario), scripted
agents (action_callback: unused by mpe2's scenarios), movable landmarks get no special care beyond the
same integration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DT = 0.1
DAMPING = 0.25
CONTACT_FORCE = 1e2
CONTACT_MARGIN = 1e-3
DEFAULT_ACCEL = 5.0  # SimpleEnv._set_action's sensitivity when Agent.accel is None
MOVE_ACTIONS = 5  # no-op, left, right, down, up
_DIRECTIONS = [[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]]  # discrete move -> unit u


@dataclass
class Entity:
    """Static properties of one mpe2 entity (core.Entity / core.Agent defaults)."""

    size: float = 0.05
    movable: bool = False
    collide: bool = True
    max_speed: float | None = None
    accel: float | None = None  # agents only; None -> DEFAULT_ACCEL
    mass: float = 1.0
    silent: bool = True  # agents only


class World:
    """E copies of one mpe2 world: `num_agents` agents (entities[:A]) then landmarks, all on `device`."""

    def __init__(self, entities: list[Entity], num_agents: int, num_envs: int, device: torch.device,
                 dim_c: int = 0, continuous_actions: bool = False):
        M, A, E, dev = len(entities), num_agents, num_envs, device
        self.num_entities, self.num_agents, self.num_envs, self.device = M, A, E, dev
        self.dim_c, self.continuous_actions = dim_c, continuous_actions
        self.pos = torch.zeros(M, 2, E, device=dev)  # [M, 2, E]
        self.vel = torch.zeros(M, 2, E, device=dev)  # [M, 2, E], stays 0 for immovable entities
        self.comm = torch.zeros(A, max(dim_c, 0), E, device=dev)  # [A, dim_c, E] agents' utterances

        def column(values) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32, device=dev)

        self.size = column([e.size for e in entities])  # [M]
        self.movable = column([float(e.movable) for e in entities]).view(M, 1, 1)  # [M, 1, 1]
        self.inv_mass = column([1.0 / e.mass for e in entities]).view(M, 1, 1)  # [M, 1, 1]
        self.max_speed = column([e.max_speed if e.max_speed is not None else float("inf") for e in entities])  # [M]
        self.has_max_speed = bool(torch.isfinite(self.max_speed).any())
        self.max_speed = self.max_speed.view(M, 1)  # [M, 1]
        self.accel = column([e.accel if e.accel is not None else DEFAULT_ACCEL for e in entities[:A]]).view(A, 1, 1)
        speakers = [i for i, e in enumerate(entities[:A]) if not e.silent]
        self.speakers = torch.tensor(speakers, dtype=torch.long, device=dev)  # [S]
        self.num_speakers = len(speakers)
        # every colliding pair a < b where at least one side can be pushed (mpe2 loops over all pairs)
        pairs = [(a, b) for a in range(M) for b in range(a + 1, M)
                 if entities[a].collide and entities[b].collide and (entities[a].movable or entities[b].movable)]
        self.pair_a = torch.tensor([a for a, _ in pairs], dtype=torch.long, device=dev)  # [P]
        self.pair_b = torch.tensor([b for _, b in pairs], dtype=torch.long, device=dev)  # [P]
        self.pair_min_dist = (self.size[self.pair_a] + self.size[self.pair_b]).view(-1, 1)  # [P, 1]
        self.directions = torch.tensor(_DIRECTIONS, device=dev).T.contiguous()  # [2, 5]

    # ------------------------------------------------------------------ actions
    def decode(self, actions: torch.Tensor, action_sizes: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Agent actions -> (control u [A, 2, E] before accel, utterances [S, dim_c, E] of the speakers).

        Discrete actions [E, A] int (an action beyond the agent's own `action_sizes` [A] acts as 0, as the
        PettingZoo adapter sends); continuous [E, A, D] float, clipped to [0, 1].
        """
        A, E = self.num_agents, self.num_envs
        if self.continuous_actions:
            a = actions.to(self.device, torch.float32).clamp(0.0, 1.0).permute(1, 2, 0)  # [A, D, E]
            u = a[:, 2:5:2] - a[:, 1:5:2]  # [A, 2, E]: (a2 - a1, a4 - a3)
            said = a.index_select(0, self.speakers)[:, MOVE_ACTIONS:MOVE_ACTIONS + self.dim_c]  # [S, dim_c, E]
            return u, said
        a = actions.to(self.device, torch.long).T  # [A, E]
        if action_sizes is not None:
            a = torch.where(a < action_sizes.view(A, 1), a, 0)
        u = self.directions.index_select(1, (a % MOVE_ACTIONS).reshape(-1)).view(2, A, E).transpose(0, 1)  # [A, 2, E]
        message = a.index_select(0, self.speakers) // MOVE_ACTIONS  # [S, E]
        said = F.one_hot(message, self.dim_c).float().transpose(1, 2) if self.num_speakers else \
            torch.zeros(0, self.dim_c, E, device=self.device)  # [S, dim_c, E]
        return u, said

    # ------------------------------------------------------------------ physics
    def contact_force(self) -> torch.Tensor:
        """Sum of soft contact forces on every entity [M, 2, E] at the current positions."""
        force = torch.zeros_like(self.pos)  # [M, 2, E]
        if self.pair_a.numel() == 0:
            return force
        delta = self.pos.index_select(0, self.pair_a) - self.pos.index_select(0, self.pair_b)  # [P, 2, E]
        dist = torch.addcmul(delta[:, 0] * delta[:, 0], delta[:, 1], delta[:, 1]).sqrt_()  # [P, E]
        penetration = F.softplus((self.pair_min_dist - dist) / CONTACT_MARGIN)  # [P, E], in margins
        scale = penetration.mul_(CONTACT_MARGIN * CONTACT_FORCE).div_(dist).unsqueeze(1)  # [P, 1, E]
        on_a = delta * scale  # [P, 2, E], pushes a away from b
        force.index_add_(0, self.pair_a, on_a)
        force.index_add_(0, self.pair_b, on_a.neg())
        return force

    def step(self, actions: torch.Tensor, action_sizes: torch.Tensor | None = None) -> None:
        """One mpe2 world step for all E envs."""
        A = self.num_agents
        u, said = self.decode(actions, action_sizes)
        force = self.contact_force()  # [M, 2, E], from the positions before the move
        force[:A].addcmul_(u, self.accel)
        force.mul_(self.movable).mul_(self.inv_mass)
        self.pos.add_(self.vel, alpha=DT)  # old velocity first, as mpe2
        self.vel.mul_(1.0 - DAMPING).add_(force, alpha=DT)
        if self.has_max_speed:
            vx, vy = self.vel[:, 0], self.vel[:, 1]  # [M, E]
            speed = torch.addcmul(vx * vx, vy, vy).sqrt_()  # [M, E]
            too_fast = speed > self.max_speed  # [M, E]
            scale = torch.where(too_fast, self.max_speed / speed, torch.ones_like(speed))  # [M, E]
            self.vel.mul_(scale.unsqueeze(1))
        if self.num_speakers:
            self.comm.index_copy_(0, self.speakers, said)

    # ------------------------------------------------------------------ geometry helpers
    def relative(self, viewers: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
        """pos[seen[v, k]] - pos[viewers[v]]: [V, K, 2, E] for index tensors viewers [V], seen [V, K]."""
        V, K = seen.shape
        others = self.pos.index_select(0, seen.reshape(-1)).view(V, K, 2, self.num_envs)
        return others - self.pos.index_select(0, viewers).unsqueeze(1)

    @staticmethod
    def norm(rel: torch.Tensor) -> torch.Tensor:
        """Euclidean length over the xy dimension (dim -2) of [..., 2, E] -> [..., E]."""
        x, y = rel.select(-2, 0), rel.select(-2, 1)
        return torch.addcmul(x * x, y, y).sqrt_()
