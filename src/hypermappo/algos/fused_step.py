"""ppo.compile's PPO mini-batch step as one graph: loss, gradients, clipping and both Adam steps.

Why: at small batches (JaxMARL's IPPO settings: 16 envs x 128 steps, 4 epochs x 4 mini-batches of 1,536 agent
samples) the arithmetic of a mini-batch step is about a millisecond, while driving it from Python as separate
pieces (the mini-batch gather, a compiled loss forward / backward, a compiled clipping graph, torch.optim's Adam
graphs, zero_grad and the glue between them) cost 3-4x that: every compiled call pays its guards and wrappers.
Here the whole step is one torch.compile call with static shapes.

Same maths as `MAPPO.update`'s eager step: the loss is `MAPPO.loss` (through `torch.func.functional_call`),
gradients come from `torch.func.grad`, each network's gradients are clipped to `ppo.max_grad_norm` as
`clip_grad_norm_` does, and Adam is `torch.optim.Adam`'s update on the optimiser's own state tensors (so
checkpoints, resume and the eager path read and write the same state). Parameters the loss does not reach are
left to themselves, as torch.optim skips a parameter without a gradient. A non-finite loss or gradient norm
leaves every weight and optimiser state as it was (a select inside the graph) and the caller raises, as the
eager path raises before its step. Learning rates enter as a tensor, so `ppo.lr_decay` does not recompile.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.algos import micro_batch
from hypermappo.algos.adam import step_tensor
from hypermappo.algos.norms import clip_coefficient, global_norm
from hypermappo.compile import cuda_graphs


class _LossOf(nn.Module):
    """actor + critic as one module whose forward is MAPPO.loss: what functional_call swaps parameters into."""

    def __init__(self, algo):
        super().__init__()
        self.actor, self.critic = algo.actor, algo.critic
        self._algo = [algo]  # a list: the algorithm is not a submodule (its optimisers are no parameters)

    def forward(self, batch: dict, adv_mean: torch.Tensor, adv_std: torch.Tensor):
        return self._algo[0].loss(batch, adv_mean, adv_std)


class FusedMinibatchStep:
    """Callable `(batch, adv_mean, adv_std, lrs) -> (stats [K], finite, pre-clip grads)`; see the module
    docstring. `batch`: the mini-batch's [B, N, ...] fields, contiguous rows (`storage.rollout.shuffled_minibatches`:
    indices handed to the graph would put a gather in every kernel)."""

    def __init__(self, algo, compile_fn):
        self.algo = algo
        self.module = _LossOf(algo)
        self.stat_names: list[str] | None = None  # known after the first call
        # found once, eagerly: [(optimiser, param group, [(name, parameter) the loss reaches])] in optimiser order
        self.plan: list[tuple] | None = None
        self.compile_fn = compile_fn
        self.compiled = compile_fn(self.step)
        self.compiled_block = self.compiled_apply = None  # micro-batch blocks' graphs, compiled when first needed
        self.compiled_steps = None  # consecutive mini-batch steps unrolled in one graph, compiled when first needed

    def trained(self):
        """(name, parameter) of every parameter the loss reaches, in the plan's order."""
        return [named for _, _, group_params in self.plan for named in group_params]

    def prepare(self, batch: dict, adv_mean, adv_std) -> None:
        """Once: which parameters get a gradient (eager autograd on the first mini-batch), and Adam's state for
        them, created as torch.optim.Adam creates it (step 0, zero moments)."""
        actor_loss, value_loss, stats = self.module(batch, adv_mean, adv_std)
        names = {id(p): n for n, p in self.module.named_parameters()}
        opts = (self.algo.actor_opt, self.algo.critic_opt)
        params = [p for opt in opts for g in opt.param_groups for p in g["params"]]
        grads = torch.autograd.grad(actor_loss + self.algo.cfg.ppo.value_coef * value_loss, params,
                                    allow_unused=True)
        used = {id(p) for p, g in zip(params, grads) if g is not None}
        self.plan, self.shared_step = adam_plan(opts, names, used)
        self.stat_names = [*stats, "grad_norm_actor", "grad_norm_critic"]

    def __call__(self, batch: dict, adv_mean, adv_std, lrs: torch.Tensor, clean: torch.Tensor,
                 blocks: list[slice] | None = None):
        """`blocks`: micro-batch row blocks of the mini-batch (algos/micro_batch.py); None or one block: one graph
        for the whole step, else a graph per block (its gradients, accumulated) and one for clipping and Adam.
        `clean`: whether every earlier step of the update was finite (a bool tensor); if not, nothing moves."""
        if self.plan is None:
            self.prepare(batch, adv_mean, adv_std)
        if blocks is None or len(blocks) == 1:
            return self.compiled(batch, adv_mean, adv_std, lrs, clean)
        if self.compiled_block is None:
            self.compiled_block, self.compiled_apply = self.compile_fn(self.block_step), self.compile_fn(self.apply)
        grads = {n: torch.zeros_like(q) for n, q in self.trained()}
        losses = batch["active"].new_zeros(len(self.stat_names), dtype=torch.float32)
        weights = micro_batch.block_weights({"active": batch["active"]}, blocks)
        for rows, weight in zip(blocks, weights):
            part = {k: v[rows] for k, v in batch.items()}
            grads, losses = self.compiled_block(part, adv_mean, adv_std, weight, grads, losses)
        return self.compiled_apply(grads, losses, lrs, clean)

    def gradients(self, batch: dict, adv_mean, adv_std, weight):
        """(gradients of weight x the loss, [actor loss, value loss, *stats]) on a [B, N, ...] batch."""
        p = self.algo.cfg.ppo
        params = {n: q.detach() for n, q in self.trained()}

        def objective(ps):
            actor_loss, value_loss, stats = torch.func.functional_call(self.module, ps, (batch, adv_mean, adv_std))
            return weight * (actor_loss + p.value_coef * value_loss), (actor_loss, value_loss, stats)

        grads, (actor_loss, value_loss, stats) = torch.func.grad(objective, has_aux=True)(params)
        return grads, torch.stack([actor_loss.detach(), value_loss.detach(), *(v.detach() for v in stats.values())])

    def step(self, batch: dict, adv_mean, adv_std, lrs: torch.Tensor, clean: torch.Tensor):
        """The whole mini-batch step as one graph."""
        grads, losses = self.gradients(batch, adv_mean, adv_std, 1.0)
        return self.apply(grads, losses, lrs, clean)

    def run_steps(self, batches: list[dict], adv_mean, adv_std, lrs: torch.Tensor, clean: torch.Tensor):
        """`step` on each of `batches` (equal shapes) in turn, unrolled in one graph: one call's wrappers and guards
        (~0.2-0.3 ms, as much as a small step's kernels) instead of one per mini-batch. -> (stats [M, K], finite [M],
        each step's pre-clip gradients). As the eager loop raises at the first non-finite step, no step after one
        moves anything; the caller names the first."""
        if self.plan is None:
            self.prepare(batches[0], adv_mean, adv_std)
        if self.compiled_steps is None:
            self.compiled_steps = self.compile_fn(self.steps)
        return self.compiled_steps(batches, adv_mean, adv_std, lrs, clean)

    def steps(self, batches: list[dict], adv_mean, adv_std, lrs: torch.Tensor, clean: torch.Tensor):
        """The graph of `run_steps`."""
        stats, finite, grads = [], [], []
        for batch in batches:
            step_grads, losses = self.gradients(batch, adv_mean, adv_std, 1.0)
            step_stats, step_finite, pre_clip = self.apply(step_grads, losses, lrs, clean)
            clean = clean & step_finite
            stats.append(step_stats)
            finite.append(step_finite)
            grads.extend(pre_clip)
        return torch.stack(stats), torch.stack(finite), grads

    def block_step(self, batch: dict, adv_mean, adv_std, weight, grads: dict, losses: torch.Tensor):
        """One micro-batch block: its share-weighted gradients and losses added to the running sums."""
        block_grads, block_losses = self.gradients(batch, adv_mean, adv_std, weight)
        return {n: g + block_grads[n] for n, g in grads.items()}, losses + weight * block_losses

    def apply(self, grads: dict, losses: torch.Tensor, lrs: torch.Tensor, clean: torch.Tensor | None = None):
        """Clipping and Adam from the mini-batch's gradients and [actor loss, value loss, *stats]. `clean`: whether
        every earlier step of the graph was finite (None: there is none); if not, nothing moves."""
        p = self.algo.cfg.ppo
        trained = self.trained()
        actor_loss, value_loss = losses[0], losses[1]
        stats = dict(zip(self.stat_names[:-2], losses[2:].unbind()))
        with torch.no_grad():
            # global-norm clipping per network, as clip_grad_norm_ (norm of the per-tensor norms, coef clamped at 1)
            norms, clipped = {}, dict(grads)
            for net in ("actor", "critic"):
                keys = [n for n, _ in trained if n.startswith(net + ".")]
                total = global_norm(grads[n] for n in keys) if keys else lrs.new_zeros(())
                norms[net] = total
                if p.max_grad_norm > 0 and keys:
                    coef = clip_coefficient(total, p.max_grad_norm)
                    clipped.update({n: grads[n] * coef for n in keys})
            finite = torch.isfinite(torch.stack([actor_loss.detach(), value_loss.detach(), norms["actor"],
                                                 norms["critic"]])).all()
            move = finite if clean is None else finite & clean
            # Adam; nothing moves unless every checked quantity is finite
            adam_apply(self.plan, self.shared_step, clipped, lrs, move)
            values = [*(v.detach() for v in stats.values()), norms["actor"], norms["critic"]]
            return torch.stack(values), finite, [grads[n] for n, _ in trained]

    def set_grads(self, grads: list[torch.Tensor]) -> None:
        """Pre-clip gradients into `.grad` (the live-component audit reads them there, as after a backward)."""
        for (_, q), g in zip(self.trained(), grads):
            q.grad = g


def adam_plan(opts, names: dict, used: set) -> tuple[list[tuple], list[bool]]:
    """[(optimiser, param group, [(name, parameter) with id in `used`])] in optimiser order, and per group whether its
    parameters share one step count. Adam's state of each planned parameter is created as torch.optim.Adam creates
    it (step 0, zero moments) where it has none yet. `names`: id(parameter) -> the name its gradient goes by."""
    plan = [(opt, group, [(names[id(p)], p) for p in group["params"] if id(p) in used])
            for opt in opts for group in opt.param_groups]
    for opt, _, group_params in plan:
        for _, p in group_params:
            if not opt.state[p]:
                opt.state[p] = {"step": step_tensor(opt, p), "exp_avg": torch.zeros_like(p),
                                "exp_avg_sq": torch.zeros_like(p)}
            if cuda_graphs.active(p.device):  # written in place by the update's graphs: static for CUDA graphs
                cuda_graphs.mark_static(opt.state[p].values())
    # per group: whether its parameters share one step count (they do unless a checkpoint or warm start gave some a
    # count of their own; they step together from here on): then the bias corrections are computed once for the
    # group, not once per parameter, a graph about a seventh smaller to compile
    shared = [len({float(opt.state[p]["step"]) for _, p in group_params}) <= 1 for opt, _, group_params in plan]
    return plan, shared


def adam_apply(plan: list[tuple], shared_step: list[bool], grads: dict, lrs: torch.Tensor, move: torch.Tensor) -> None:
    """torch.optim.Adam's update (amsgrad off) of every parameter of `plan` (`adam_plan`) from `grads` (name ->
    gradient), in place on the parameters and the optimiser's own state tensors, inside a graph; group i's learning
    rate is lrs[i]. Nothing moves unless `move` (a bool tensor)."""
    for i, (opt, group, group_params) in enumerate(plan):
        beta1, beta2 = group["betas"]

        def counts(old, i=i, beta1=beta1, beta2=beta2):  # the count after this step (kept unless `move`), and its
            step = old + 1  # two bias corrections
            return torch.where(move, step, old), (1 - beta2 ** step).sqrt(), lrs[i] / (1 - beta1 ** step)

        # once for a group whose counts agree, else per parameter
        shared = counts(opt.state[group_params[0][1]]["step"]) if shared_step[i] and group_params else None
        for name, q in group_params:
            state, g = opt.state[q], grads[name]
            if group["weight_decay"]:
                g = g + group["weight_decay"] * q
            moved_step, root2, rate = shared or counts(state["step"])
            exp_avg = state["exp_avg"].lerp(g, 1 - beta1)
            exp_avg_sq = state["exp_avg_sq"] * beta2 + (1 - beta2) * g * g
            denom = exp_avg_sq.sqrt() / root2 + group["eps"]
            new = q - rate * exp_avg / denom
            q.copy_(torch.where(move, new, q))
            state["exp_avg"].copy_(torch.where(move, exp_avg, state["exp_avg"]))
            state["exp_avg_sq"].copy_(torch.where(move, exp_avg_sq, state["exp_avg_sq"]))
            state["step"].copy_(moved_step)
