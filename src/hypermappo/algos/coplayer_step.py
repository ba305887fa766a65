"""ppo.compile's step of the goal model (`coplayer.model=bayes`) as one graph: loss, gradients, clipping and Adam.

Why: the goal-conditioned policies take `coplayer.steps` (32) Adam steps on replay mini-batches of 512 samples
per update. Driven from Python as an eager forward, a backward, `clip_grad_norm_` and torch.optim's foreach Adam, a
step is ~3x its arithmetic; one graph call per step takes the 32 steps from ~190 to ~100 ms at E = 1024 on one
Intel Xeon thread (the co-player model's whole update ~280 -> ~195 ms).

Same maths as the eager step in `BayesCoplayer.update`: the loss is `BayesCoplayer.step_loss` (through
`torch.func.functional_call`), gradients come from `torch.func.grad`, clipped to `ppo.max_grad_norm` as
`clip_grad_norm_` does, and Adam is torch.optim.Adam's update on the optimiser's own state tensors
(`fused_step.adam_apply`), so checkpoints, resume and the eager path read and write the same state. A non-finite
loss or gradient norm moves nothing (the caller raises, as the eager path does). Only full mini-batches
(`coplayer.batch_size` samples) take the graph: while the replay holds fewer, the batch size changes every update
and each size would compile a graph of its own.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from hypermappo.algos.fused_step import adam_apply, adam_plan
from hypermappo.algos.norms import clip_coefficient, global_norm


class _StepLoss(nn.Module):
    """The goal model as the one module whose forward is `BayesCoplayer.step_loss`: what functional_call swaps
    parameters into."""

    def __init__(self, coplayer):
        super().__init__()
        self.model = coplayer.model
        self._coplayer = [coplayer]  # a list: the learner is not a submodule

    def forward(self, batch: dict, normed: torch.Tensor) -> torch.Tensor:
        return self._coplayer[0].step_loss(batch, normed)


class FusedGoalStep:
    """Callable `(batch, normed) -> (loss, pre-clip gradient norm)`: one Adam step of the goal model as one graph."""

    def __init__(self, coplayer, compile_fn):
        self.coplayer = coplayer
        self.module = _StepLoss(coplayer)
        self.plan = self.shared_step = None  # found on the first call (adam_plan)
        self.compiled = compile_fn(self.step)
        self.steps_run = 0

    def prepare(self, batch: dict, normed: torch.Tensor) -> None:
        """Once: which parameters get a gradient (eager autograd on the first batch), and Adam's state for them."""
        opt = self.coplayer.opt
        params = [p for g in opt.param_groups for p in g["params"]]
        grads = torch.autograd.grad(self.module(batch, normed), params, allow_unused=True)
        names = {id(p): n for n, p in self.module.named_parameters()}
        self.plan, self.shared_step = adam_plan((opt,), names, {id(p) for p, g in zip(params, grads) if g is not None})

    def __call__(self, batch: dict, normed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.plan is None:
            self.prepare(batch, normed)
        lrs = torch.tensor([g["lr"] for g in self.coplayer.opt.param_groups])
        self.steps_run += 1
        return self.compiled(batch, normed, lrs)

    def step(self, batch: dict, normed: torch.Tensor, lrs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The graph: the loss's gradients, global-norm clipping and Adam."""
        params = {n: q.detach() for _, _, group_params in self.plan for n, q in group_params}

        def objective(ps):
            loss = torch.func.functional_call(self.module, ps, (batch, normed))
            return loss, loss.detach()

        grads, loss = torch.func.grad(objective, has_aux=True)(params)
        with torch.no_grad():
            norm = global_norm(grads.values())
            max_norm = self.coplayer.cfg.ppo.max_grad_norm
            if max_norm > 0:
                coef = clip_coefficient(norm, max_norm)
                grads = {n: g * coef for n, g in grads.items()}
            move = torch.isfinite(loss + norm)
            adam_apply(self.plan, self.shared_step, grads, lrs, move)
        return loss, norm
