"""MAPPO (centralised critic) and IPPO (local critic): the PPO update, top to bottom.

Follows the MAPPO reference implementation (Yu et al.): clipped surrogate, entropy bonus,
value normalisation, clipped Huber value loss, advantage normalisation over *active* agents,
separate Adam optimisers and gradient-norm clipping for actor and critic. Dead agents
(`active = 0`) are removed from every loss term and statistic; what their death does to the
returns is `ppo.death` (`algos/death.py`), applied when the rollout is collected. IPPO is this same code with the
critic's input set to the agent's local observation (see `models/critic.py`). A NaN / inf in a loss
or gradient norm raises `NonFiniteError` before the optimiser step, so it never reaches the weights.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.algos import micro_batch
from hypermappo.algos.adam import adam
from hypermappo.algos.norms import grad_norm
from hypermappo.algos.value_norm import build_value_norm
from hypermappo.compile.decision import unroll_setting
from hypermappo.config import data_chunk_length
from hypermappo.errors import NonFiniteError
from hypermappo.runtime import sync_free
from hypermappo.storage.rollout import RolloutBuffer, shuffled_minibatches

# at most this many mini-batch steps unrolled in one compiled graph (HYPERMAPPO_STEPS_PER_GRAPH overrides it): each
# saves a call's wrappers and guards, and costs its share of compiling, more than linear in the steps. IPPO at
# JaxMARL's settings (E = 16, 16 mini-batch steps an update), 2-core AMD EPYC, empty graph cache: 333 s to compile
# with 4 steps per graph, 164 s with 1 (benchmarks/results/compile_cost_amd.md); what 4 save while running:
# compile_cost_unroll_amd.md. One is the default; runs that share a warm cache (sweeps of one shape) may set 4
STEPS_PER_GRAPH = 1


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def huber(error: torch.Tensor, delta: float) -> torch.Tensor:
    a = error.abs()
    return torch.where(a <= delta, 0.5 * error * error, delta * (a - 0.5 * delta))


class MAPPO:
    def __init__(self, actor: nn.Module, critic: nn.Module, cfg, compiled: bool = False):
        self.actor, self.critic, self.cfg = actor, critic, cfg
        p = cfg.ppo
        device = next(critic.parameters()).device  # foreach on CPU, fused + capturable on CUDA (algos/adam.py)
        self.actor_opt = adam(actor.optimizer_groups(p.lr_actor), device, lr=p.lr_actor, eps=p.adam_eps,
                              weight_decay=p.weight_decay)
        self.critic_opt = adam(critic.optimizer_groups(p.lr_critic), device, lr=p.lr_critic, eps=p.adam_eps,
                               weight_decay=p.weight_decay)
        for opt in (self.actor_opt, self.critic_opt):
            for group in opt.param_groups:
                group.setdefault("initial_lr", group["lr"])
        self.value_norm = build_value_norm(p.value_norm, critic.head).to(device)
        self.recurrent = actor.hidden_size > 0 or critic.hidden_size > 0
        # ppo.micro_batch_size (algos/micro_batch.py): large mini-batches in cache-sized row blocks, where exact
        self.micro_size = 0 if micro_batch.blocker(cfg) else p.micro_batch_size
        # called after every backward pass, before clipping and the step (the live-component audit, while it runs)
        self.after_backward = None
        # the compiled update reads its steps' finite flags once per update where a read waits for the device (on
        # CUDA: runtime/sync_free.py), after each step where it costs nothing
        self.read_once = sync_free.decide(device)[0]
        # and takes the advantages' mean and std by masks there, not by selecting the active ones (which reads their
        # count back); not on a CPU, where the selection costs no wait and keeps a run's statistics to the bit
        self.adv_by_masks = self.read_once and device.type != "cpu"
        # ppo.compile (compile/decision.py): each mini-batch step as one graph (`fused`), or where that cannot be, as three
        # (loss forward + backward, clipping, Adam; a float learning rate is a constant of that Adam graph, so with
        # ppo.lr_decay it stays eager). Same maths either way.
        self.compiled = compiled
        self._loss, self._clip, self._step = self.loss, self.clip_gradients, self.optimizer_step
        self.fused = None  # the whole mini-batch step as one graph (algos/fused_step.py), where shapes are static
        if compiled:
            from hypermappo.algos.fused_step import FusedMinibatchStep
            from hypermappo.compile import compile_fn

            # mini-batches of drawn agents vary in size: there the step stays three graphs (loss forward + backward,
            # clipping, Adam)
            if self.recurrent or (p.minibatch_over == "agents" and p.num_mini_batch > 1):
                self._loss, self._clip = compile_fn(self.loss), compile_fn(self.clip_gradients)
                if not p.lr_decay:
                    self._step = compile_fn(self.optimizer_step)
            else:
                self.fused = FusedMinibatchStep(self, compile_fn)

    # ------------------------------------------------------------------ returns

    @torch.no_grad()
    def compute_returns(self, buf: RolloutBuffer, last_values: torch.Tensor) -> None:
        """GAE on unnormalised values, then update the value normaliser on the active returns."""
        p = self.cfg.ppo
        values = self.value_norm.denormalize(buf.values)
        buf.compute_gae(values, self.value_norm.denormalize(last_values), p.gamma, p.gae_lambda)
        self.value_norm.update(buf.returns[buf.active])
        # re-express the stored predictions in the new normalised units, so value clipping
        # compares like with like (the reference code mixes old and new statistics here)
        buf.values.copy_(self.value_norm.normalize(values))

    # ------------------------------------------------------------------ update

    def set_lr_fraction(self, frac: float) -> None:
        for opt in (self.actor_opt, self.critic_opt):
            for group in opt.param_groups:
                group["lr"] = group["initial_lr"] * frac

    def evaluate(self, batch: dict):
        """Current policy / value on a mini-batch ([B, N, ...], or [L, B, N, ...] chunks)."""
        seq = "actor_h0" in batch or "critic_h0" in batch
        out = self.actor(batch["obs"], batch.get("available"), batch.get("actor_h0"), batch["reset"], sequence=seq,
                         active=batch["active"])
        values, _ = self.critic(batch["obs"], batch["state"], batch.get("critic_h0"), batch["reset"], sequence=seq,
                                active=batch["active"])
        return out, values

    def loss(self, batch: dict, adv_mean: torch.Tensor, adv_std: torch.Tensor):
        p = self.cfg.ppo
        # loss weight: alive agents (only the drawn ones with ppo.minibatch_over=agents)
        active = batch["active"] & batch["selected"] if "selected" in batch else batch["active"]
        out, values = self.evaluate(batch)
        logp = out.dist.log_prob(batch["actions"])
        entropy = masked_mean(out.dist.entropy(), active)

        # clipped surrogate on advantages normalised over active agents
        adv = batch["advantages"]
        if p.advantage_norm:
            adv = (adv - adv_mean) / (adv_std + 1e-5)
        logratio = logp - batch["logp"]
        ratio = logratio.exp()
        pg_loss1 = ratio * adv
        pg_loss2 = ratio.clamp(1 - p.clip, 1 + p.clip) * adv
        policy_loss = -masked_mean(torch.min(pg_loss1, pg_loss2), active)

        # value loss against normalised returns, optionally clipped around the old prediction
        old_values = batch["values"]
        targets = self.value_norm.normalize(batch["returns"])
        err = targets - values
        err_loss = huber(err, p.huber_delta) if p.huber else 0.5 * err * err
        if p.value_clip:
            clipped = old_values + (values - old_values).clamp(-p.clip, p.clip)
            err_c = targets - clipped
            err_c_loss = huber(err_c, p.huber_delta) if p.huber else 0.5 * err_c * err_c
            err_loss = torch.max(err_loss, err_c_loss)
        value_loss = masked_mean(err_loss, active)

        aux = self.actor.aux_losses(out, {**batch, "active": active} if "selected" in batch else batch)
        beta = self.cfg.hyper.beta
        if beta > 0:  # KL(pi_old || pi_new) from the stored behaviour-policy parameters
            aux["align_loss"] = beta * masked_mean(out.dist.kl_from_params(batch["dist_params"]), active)
        actor_loss = policy_loss - p.entropy_coef * entropy + sum(aux.values())
        with torch.no_grad():
            stats = {
                "approx_kl": masked_mean((ratio - 1) - logratio, active),
                "clip_frac": masked_mean(((ratio - 1).abs() > p.clip).float(), active),
                "ratio": masked_mean(ratio, active),
            }
        return actor_loss, value_loss, {"policy_loss": policy_loss, "value_loss": value_loss,
                                        "entropy": entropy, **stats, **aux}

    def advantage_stats(self, buf: RolloutBuffer) -> tuple[torch.Tensor, torch.Tensor]:
        """The mean and std of the rollout's advantages over its active samples (ppo.advantage_norm's)."""
        if self.adv_by_masks:  # no read of the device: the active samples' mean and std by masks
            return masked_mean_std(buf.advantages, buf.active)
        active_adv = buf.advantages[buf.active]
        adv_mean = active_adv.mean() if active_adv.numel() else active_adv.new_zeros(())
        adv_std = active_adv.std() if active_adv.numel() > 1 else active_adv.new_ones(())
        return adv_mean, adv_std

    def update(self, buf: RolloutBuffer, generator: torch.Generator | None = None) -> dict[str, float]:
        p = self.cfg.ppo
        adv_mean, adv_std = self.advantage_stats(buf)
        if self.fused is not None:
            return self._update_fused(buf, generator, adv_mean, adv_std)
        sums: dict[str, torch.Tensor] = {}
        n = 0
        for epoch in range(p.ppo_epoch):
            batches = (buf.chunks(p.num_mini_batch, data_chunk_length(self.cfg), generator, p.minibatch_over)
                       if self.recurrent else buf.minibatches(p.num_mini_batch, generator, p.minibatch_over))
            for minibatch, batch in enumerate(batches):
                self.actor_opt.zero_grad(set_to_none=True)
                self.critic_opt.zero_grad(set_to_none=True)
                actor_loss, value_loss, stats = self._backward(batch, adv_mean, adv_std)
                if self.after_backward is not None:
                    self.after_backward()
                stats["grad_norm_actor"], stats["grad_norm_critic"] = self._clip()
                checked = (actor_loss.detach(), value_loss.detach(), stats["grad_norm_actor"], stats["grad_norm_critic"])
                if not torch.isfinite(torch.stack([x.to(actor_loss.device) for x in checked])).all():  # one sync
                    raise nonfinite_step(stats, epoch, minibatch)
                self._step()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v.detach()
                n += 1
        return self._finish_update(buf, {k: float(v) / n for k, v in sums.items()})

    def _backward(self, batch: dict, adv_mean, adv_std):
        """A mini-batch's losses, with their gradients accumulated into .grad: in one pass, or in micro-batch row
        blocks each weighted by its share of the loss mask (algos/micro_batch.py), which sum to the same."""
        p = self.cfg.ppo
        blocks = micro_batch.row_blocks(batch["active"].shape[0], batch["active"].shape[1], self.micro_size)
        if len(blocks) == 1:
            actor_loss, value_loss, stats = self._loss(batch, adv_mean, adv_std)
            # actor and critic share no parameters, so one backward equals the reference's two
            (actor_loss + p.value_coef * value_loss).backward()
            return actor_loss, value_loss, stats
        actor_sum, value_sum, stat_sums = 0.0, 0.0, {}
        for rows, weight in zip(blocks, micro_batch.block_weights(batch, blocks)):
            actor_loss, value_loss, stats = self._loss({k: v[rows] for k, v in batch.items()}, adv_mean, adv_std)
            (weight * (actor_loss + p.value_coef * value_loss)).backward()
            actor_sum = actor_sum + weight * actor_loss.detach()
            value_sum = value_sum + weight * value_loss.detach()
            for k, v in stats.items():
                stat_sums[k] = stat_sums.get(k, 0.0) + weight * v.detach()
        return actor_sum, value_sum, stat_sums

    def _finish_update(self, buf: RolloutBuffer, metrics: dict[str, float]) -> dict[str, float]:
        """After the last mini-batch step: the actor's end-of-update hook, and explained variance beside the means."""
        self.actor.after_update()
        metrics["explained_variance"] = explained_variance(self.value_norm.denormalize(buf.values), buf.returns,
                                                           buf.active)
        return metrics

    def _update_fused(self, buf: RolloutBuffer, generator, adv_mean, adv_std) -> dict[str, float]:
        """`update` with each mini-batch step as one compiled graph (ppo.compile; algos/fused_step.py), or several
        consecutive equal-sized steps unrolled in one (`steps_per_graph`). No step reads a device value back: each
        graph is handed whether every earlier step was finite (`clean`, on the device) and moves nothing if not, and
        the steps' finite flags are read once, after the last step (on a GPU a read per step would wait for the
        device each time). A non-finite step raises then, naming the first, with the weights and Adam's state as
        the step before it left them, as the eager loop raises before that step. Where a read costs nothing (sync-free
        off: the CPU by default) each step's flag is read after it, as before."""
        p = self.cfg.ppo
        fields = buf.flat_fields()  # [T*E, N, ...]
        # on the weights' device: a host tensor handed to a CUDA graph's kernels is a launch error there
        lrs = torch.tensor([g["lr"] for opt in (self.actor_opt, self.critic_opt) for g in opt.param_groups],
                           device=buf.advantages.device)
        clean = torch.ones((), dtype=torch.bool, device=lrs.device)
        total, guarded, finites, where = None, set(), [], []
        for epoch in range(p.ppo_epoch):
            batches = shuffled_minibatches(fields, buf.minibatch_indices(p.num_mini_batch, generator))
            unroll = steps_per_graph(batches, buf.N, self.micro_size)
            for first in range(0, len(batches), unroll):
                rows = batches[first]["active"].shape[0]
                blocks = micro_batch.row_blocks(rows, buf.N, self.micro_size)
                # Dynamo's guards cost ~0.2 ms a call here (every parameter, optimiser state and config value they
                # read); inside one update nothing they check can change but the shapes (same modules, modes and
                # config), so they run on the update's first call of each shape, which recompiles if anything did
                # change, and on every step whose micro-batch blocks differ in size (the guards pick each block's
                # graph); skipped, they would run the graph of another shape
                sizes = micro_batch.block_sizes(rows, blocks)  # (rows,) for an unrolled group: all of one size
                with torch.compiler.set_stance(skip_guard_eval_unsafe=(unroll, sizes) in guarded
                                               and len(set(sizes)) == 1):
                    if unroll > 1:
                        stats, finite, grads = self.fused.run_steps(batches[first:first + unroll], adv_mean, adv_std,
                                                                    lrs, clean)
                        k = len(grads) // unroll
                        done = zip(stats.unbind(), finite.unbind(), (grads[i * k:(i + 1) * k] for i in range(unroll)))
                    else:
                        done = [self.fused(batches[first], adv_mean, adv_std, lrs, clean, blocks)]
                guarded.add((unroll, sizes))
                for minibatch, (stats, finite, grads) in enumerate(done, start=first):
                    if self.after_backward is not None:  # the audit reads pre-clip gradients from .grad
                        self.fused.set_grads(grads)
                        self.after_backward()
                    if self.read_once:
                        clean = clean & finite
                    elif not finite:  # a read per step (free on a CPU): raise at once, as the eager loop does
                        raise nonfinite_step(dict(zip(self.fused.stat_names, stats.unbind())), epoch, minibatch)
                    finites.append(finite)
                    where.append((epoch, minibatch, stats))
                    total = stats if total is None else total + stats  # (non-finite: it raises below instead)
        ok = torch.stack(finites)
        if not bool(ok.all()):  # the update's one read of the flags
            epoch, minibatch, stats = where[int((~ok).nonzero()[0, 0])]
            raise nonfinite_step(dict(zip(self.fused.stat_names, stats.unbind())), epoch, minibatch)
        return self._finish_update(buf, dict(zip(self.fused.stat_names, (total / len(finites)).tolist())))

    def clip_gradients(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Clip actor and critic gradients to ppo.max_grad_norm each; their norms before clipping."""
        max_norm = self.cfg.ppo.max_grad_norm
        return grad_norm(self.actor.parameters(), max_norm), grad_norm(self.critic.parameters(), max_norm)

    def optimizer_step(self) -> None:
        self.actor_opt.step()
        self.critic_opt.step()

    # ------------------------------------------------------------------ state

    def state_dict(self) -> dict:
        return {"actor_opt": self.actor_opt.state_dict(), "critic_opt": self.critic_opt.state_dict(),
                "value_norm": self.value_norm.state_dict() if isinstance(self.value_norm, nn.Module) else {}}

    def load_state_dict(self, sd: dict) -> None:
        self.actor_opt.load_state_dict(sd["actor_opt"])
        self.critic_opt.load_state_dict(sd["critic_opt"])
        if sd.get("value_norm"):
            self.value_norm.load_state_dict(sd["value_norm"])


def steps_per_graph(batches: list[dict], num_agents: int, micro_size: int) -> int:
    """How many consecutive mini-batch steps of an epoch one compiled graph runs: the largest divisor of their count
    up to STEPS_PER_GRAPH where all are of one size and none is split into micro-batch blocks, else 1."""
    rows = {b["active"].shape[0] for b in batches}
    if len(rows) > 1 or len(micro_batch.row_blocks(rows.pop(), num_agents, micro_size)) > 1:
        return 1
    most = unroll_setting() or STEPS_PER_GRAPH
    return max(d for d in range(1, most + 1) if len(batches) % d == 0)


def masked_mean_std(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The mean and (Bessel-corrected) standard deviation of `x[mask]` without selecting them (boolean indexing
    reads the mask's count back to the host: a wait for the device on a GPU); 0 and 1 where there are too few, as
    `MAPPO.update` takes them. Equal to `x[mask].mean()`, `x[mask].std()` to float rounding (summation order)."""
    m = mask.to(x.dtype)
    n = m.sum()
    mean = torch.where(n > 0, (x * m).sum() / n.clamp(min=1), torch.zeros_like(n))
    var = ((x - mean) ** 2 * m).sum() / (n - 1).clamp(min=1)
    return mean, torch.where(n > 1, var.sqrt(), torch.ones_like(n))


def nonfinite_step(stats: dict[str, torch.Tensor], epoch: int, minibatch: int) -> NonFiniteError:
    """The error of a PPO step whose loss or gradient norm is not finite (epoch and mini-batch counted from 0)."""
    return NonFiniteError(f"{nonfinite_term(stats)} in PPO epoch {epoch + 1}, mini-batch {minibatch + 1}")


def nonfinite_term(stats: dict[str, torch.Tensor]) -> str:
    """`non-finite <name> (<value>)` for the first loss term or gradient norm that is NaN / inf."""
    order = ["policy_loss", "value_loss", "entropy", *(k for k in stats if k.endswith("_loss")),
             "grad_norm_actor", "grad_norm_critic"]
    for name in dict.fromkeys(order):
        if name in stats and not torch.isfinite(stats[name]).all():
            return f"non-finite {name} ({stats[name].item()})"
    return "non-finite actor_loss"


def explained_variance(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> float:
    pred, target = pred[mask], target[mask]
    var = target.var() if target.numel() > 1 else torch.zeros(())
    if var <= 0:
        return float("nan")
    return float(1 - (target - pred).var() / var)
