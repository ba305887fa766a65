"""MADDPG (Lowe et al. 2017): deterministic actors, centralised critics Q_i(s, a_1..a_K), target networks.

Driven by the same experiment loop as MAPPO: every env step of a collect goes into a `ReplayBuffer`
(`storage/replay.py`), and `update` then runs the gradient steps that are due: one per
`maddpg.update_interval` env steps once `maddpg.warmup_steps` env steps were seen (counted over the
whole run, so resume and the loop's granularity change nothing). One gradient step, all K agents of the
group in batched calls (no loop over agents):

- critic: y_i = r_i + gamma * (1 - terminal_i) * Q'_i(s', mu'(o'_1..o'_K)), loss mean over alive agents of
  (Q_i(s, a_1..a_K) - y_i)^2. Each agent's Q regresses on its own reward, so mixed games work per agent.
- actor: maximise Q_i(s, a_1..mu_i(o_i)..a_K): agent i's own action from its actor, the others' from the
  replay sample; Q_i of every agent from one critic call on a [B, K, K*A] joint-action input.
- discrete actions: straight-through Gumbel-softmax (one-hot forward, softmax gradient, temperature
  `maddpg.gumbel_temperature`); exploration samples the same Gumbel-perturbed argmax. Continuous (Box):
  the actor's mean with Gaussian noise (`maddpg.noise_std` x half the Box range), clipped to the bounds.
- targets: Polyak averaging with `maddpg.tau` after every gradient step.
- dead agents (`active = 0` when acting): no critic loss, no actor loss, and their action enters every
  critic input as zeros, so nothing they "do" reaches a gradient; an agent's own death ends its target
  (terminal), a time limit does not (bootstrapped from the final observation).

The actor is the MAPPO MLP actor (`actor=mlp`, shared or per-agent weights): its policy head's output are
the logits (or Box means), so evaluation's deterministic action (`dist.mode()`) is the greedy MADDPG action.
"""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo.algos.adam import adam
from hypermappo.algos.mappo import masked_mean
from hypermappo.algos.norms import grad_norm
from hypermappo.errors import NonFiniteError, UserError
from hypermappo.models.agent_layers import AgentLinear, AgentMLP
from hypermappo.models.critic import critic_input, input_dim, resolve_input
from hypermappo.models.distributions import MASKED_LOGIT


def gumbel_softmax_st(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits [..., A] -> a one-hot sample [..., A] whose gradient is that of softmax((logits + g) / temperature).

    The forward value is exactly one-hot: y_hard + (y_soft - y_soft.detach()) adds an exact zero."""
    u = torch.rand_like(logits).clamp_(1e-20, 1.0)
    y_soft = torch.softmax((logits - torch.log(-torch.log(u))) / temperature, -1)
    y_hard = F.one_hot(y_soft.argmax(-1), logits.shape[-1]).to(logits.dtype)
    return y_hard + (y_soft - y_soft.detach())


@torch.no_grad()
def polyak_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * source, for every parameter (buffers are copied)."""
    t = list(target.parameters())
    torch._foreach_mul_(t, 1.0 - tau)
    torch._foreach_add_(t, list(source.parameters()), alpha=tau)
    for tb, sb in zip(target.buffers(), source.buffers()):
        tb.copy_(sb)


def action_size(space: gym.Space) -> int:
    """Width of one agent's action in the critic input: one-hot for Discrete, the vector for Box."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box):
        return int(np.prod(space.shape))
    raise UserError(f"algo=maddpg supports Discrete and Box action spaces, got {space}")


class QCritic(nn.Module):
    """Q_i(s, a_1..a_K) for all K agents of a group in one call (critic.input picks s, as for MAPPO)."""

    hidden_size = 0

    def __init__(self, spec, cfg):
        super().__init__()
        m, c = cfg.model, cfg.critic
        self.mode = resolve_input(cfg.algo, c.input)
        share = m.share_params if c.share_params == "auto" else c.share_params == "on"
        groups = 1 if share else spec.num_agents
        in_dim = input_dim(self.mode, spec) + spec.num_agents * action_size(spec.action_space)
        self.trunk = AgentMLP(in_dim, c.hidden_sizes or m.hidden_sizes, groups, m.activation, m.layer_norm,
                              m.feature_norm, m.hidden_gain())
        self.head = AgentLinear(self.trunk.out_dim, 1, groups, gain=1.0)

    def forward(self, obs: torch.Tensor, state: torch.Tensor, joint: torch.Tensor) -> torch.Tensor:
        """obs [B, K, D], state [B, S], joint actions [B, K, A] (the same for every agent) or [B, K, K, A]
        (row i: the joint action agent i's Q is asked about) -> Q [B, K]."""
        x = critic_input(self.mode, obs, state)  # [B, K, C]
        if joint.dim() == x.dim() + 1:
            a = joint.flatten(-2)  # [B, K, K*A]
        else:
            a = joint.flatten(-2).unsqueeze(-2).expand(*x.shape[:-1], -1)  # [B, K, K*A]
        features, _ = self.trunk(torch.cat([x, a], -1))
        return self.head(features).squeeze(-1)


class MADDPG:
    def __init__(self, actor: nn.Module, critic: QCritic, cfg, spec):
        self.actor, self.critic, self.cfg = actor, critic, cfg
        c = cfg.maddpg
        space = spec.action_space
        self.discrete = isinstance(space, gym.spaces.Discrete)
        self.action_dim = action_size(space)
        device = next(critic.parameters()).device
        if not self.discrete:
            low, high = (torch.as_tensor(b, dtype=torch.float32, device=device).flatten() for b in (space.low, space.high))
            if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
                raise UserError(f"algo=maddpg needs a Box action space with finite bounds (exploration noise is "
                                f"scaled to them), got {space}")
            self.low, self.high, self.half_range = low, high, (high - low) / 2  # [A] each
        self.target_actor = copy.deepcopy(actor).requires_grad_(False)
        self.target_critic = copy.deepcopy(critic).requires_grad_(False)
        device = next(actor.parameters()).device  # foreach on CPU, fused + capturable on CUDA (algos/adam.py)
        self.actor_opt = adam(actor.parameters(), device, lr=c.lr_actor)
        self.critic_opt = adam(critic.parameters(), device, lr=c.lr_critic)
        self.gradient_steps = 0  # over the whole run (checkpointed)
        self.last_steps = 0  # gradient steps of the latest `update` call
        self.recurrent = False
        self.after_backward = None  # the experiment loop's hook (MAPPO's live-component audit); unused here

    # ------------------------------------------------------------------ actions

    def head_output(self, actor, obs: torch.Tensor, available: torch.Tensor | None) -> torch.Tensor:
        """obs [..., K, D] -> (masked) logits or Box means [..., K, A], before any masking for the regulariser."""
        features, _ = actor.trunk(actor.actor_input(obs))
        return actor.head(features)

    def _masked(self, out: torch.Tensor, available: torch.Tensor | None) -> torch.Tensor:
        return out if available is None or not self.discrete else out.masked_fill(~available, MASKED_LOGIT)

    @torch.no_grad()
    def explore(self, obs: torch.Tensor, available: torch.Tensor | None) -> torch.Tensor:
        """Env actions [E, K] (Discrete: Gumbel-max sample) or [E, K, A] (Box: mean + clipped Gaussian noise)."""
        out = self._masked(self.head_output(self.actor, obs, available), available)
        if self.discrete:
            u = torch.rand_like(out).clamp_(1e-20, 1.0)
            return (out - torch.log(-torch.log(u))).argmax(-1)
        noise = torch.randn_like(out) * (self.cfg.maddpg.noise_std * self.half_range)
        return torch.maximum(torch.minimum(out + noise, self.high), self.low)

    def policy_action(self, out: torch.Tensor, available: torch.Tensor | None) -> torch.Tensor:
        """Differentiable action vector [..., K, A] from head output: straight-through Gumbel-softmax one-hot, or
        the Box mean clipped to the bounds with the gradient of the unclipped mean (straight through)."""
        if self.discrete:
            return gumbel_softmax_st(self._masked(out, available), self.cfg.maddpg.gumbel_temperature)
        return out + (torch.maximum(torch.minimum(out, self.high), self.low) - out).detach()

    def stored_action(self, actions: torch.Tensor) -> torch.Tensor:
        """Env actions from the buffer [B, K] / [B, K, A] -> critic action vectors [B, K, A]."""
        if self.discrete:
            return F.one_hot(actions.long(), self.action_dim).float()
        return actions.float().reshape(*actions.shape[:2], self.action_dim)

    # ------------------------------------------------------------------ learning

    def due_steps(self, buffer) -> int:
        """Gradient steps owed: one per `update_interval` env steps after `warmup_steps`, minus those done."""
        c = self.cfg.maddpg
        return max(0, max(0, buffer.pushed - c.warmup_steps) // c.update_interval - self.gradient_steps)

    def update(self, buffer, generator: torch.Generator, steps: int | None = None) -> dict:
        """Run the gradient steps that are due (or `steps` of them); -> mean losses over them (NaN if none)."""
        steps = self.due_steps(buffer) if steps is None else steps
        self.last_steps = steps
        totals = None
        for _ in range(steps):
            m = self.gradient_step(buffer.sample(self.cfg.maddpg.batch_size, generator))
            totals = m if totals is None else {k: totals[k] + v for k, v in m.items()}
        self.gradient_steps += steps
        names = ("critic_loss", "actor_loss", "q_mean", "critic_grad_norm", "actor_grad_norm")
        means = torch.stack([totals[k] for k in names]).div(steps).tolist() if totals else [float("nan")] * 5
        return {**dict(zip(names, means)), "gradient_steps": self.gradient_steps}

    def gradient_step(self, b: dict) -> dict:
        """One critic and one actor step on a replay sample b (fields [B, K, ...]), then the target updates."""
        c = self.cfg.maddpg
        active, available = b["active"], b.get("available")  # [B, K], [B, K, A]
        alive = active.unsqueeze(-1).float()  # [B, K, 1]
        with torch.no_grad():
            next_out = self.head_output(self.target_actor, b["next_obs"], b.get("next_available"))
            next_a = self.policy_action(next_out, b.get("next_available")) * b["next_active"].unsqueeze(-1).float()
            q_next = self.target_critic(b["next_obs"], b["next_state"], next_a)  # [B, K]
            target = b["reward"] + c.gamma * torch.where(b["terminal"], 0.0, q_next)  # [B, K]
        replay_a = self.stored_action(b["actions"]) * alive  # [B, K, A], dead agents' actions are zeros
        q = self.critic(b["obs"], b["state"], replay_a)  # [B, K]
        critic_loss = masked_mean((q - target) ** 2, active)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_norm = grad_norm(self.critic.parameters(), c.max_grad_norm)
        self._check_finite("critic", critic_loss, critic_norm)
        self.critic_opt.step()

        out = self.head_output(self.actor, b["obs"], available)  # [B, K, A]
        own = self.policy_action(out, available) * alive  # [B, K, A]
        K = own.shape[1]
        eye = torch.eye(K, dtype=torch.bool, device=own.device).unsqueeze(-1)  # [K, K, 1]: row i, slot j == i
        joint = torch.where(eye, own.unsqueeze(1), replay_a.unsqueeze(1))  # [B, K, K, A]
        self.critic.requires_grad_(False)
        q_pi = self.critic(b["obs"], b["state"], joint)  # [B, K]: Q_i with agent i's own action from its actor
        self.critic.requires_grad_(True)
        reg = (out * out).mean(-1)  # [B, K] keeps logits / means small (the original MADDPG's 1e-3 term)
        actor_loss = -masked_mean(q_pi, active) + c.logit_reg * masked_mean(reg, active)
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_norm = grad_norm(self.actor.parameters(), c.max_grad_norm)
        self._check_finite("actor", actor_loss, actor_norm)
        self.actor_opt.step()

        polyak_update(self.target_actor, self.actor, c.tau)
        polyak_update(self.target_critic, self.critic, c.tau)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(),
                "q_mean": masked_mean(q.detach(), active), "critic_grad_norm": critic_norm.detach(),
                "actor_grad_norm": actor_norm.detach()}

    @staticmethod
    def _check_finite(name: str, loss: torch.Tensor, norm: torch.Tensor) -> None:
        if not bool(torch.isfinite(loss + norm)):
            raise NonFiniteError(f"non-finite MADDPG {name} loss ({float(loss)}) or gradient norm ({float(norm)})")

    def state_dict(self) -> dict:
        return {"target_actor": self.target_actor.state_dict(), "target_critic": self.target_critic.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "gradient_steps": self.gradient_steps}

    def load_state_dict(self, sd: dict) -> None:
        self.target_actor.load_state_dict(sd["target_actor"])
        self.target_critic.load_state_dict(sd["target_critic"])
        self.actor_opt.load_state_dict(sd["actor_opt"])
        self.critic_opt.load_state_dict(sd["critic_opt"])
        self.gradient_steps = sd["gradient_steps"]
