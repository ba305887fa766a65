"""ppo.micro_batch_size: a large mini-batch's loss and gradients computed in row blocks that stay in cache.

Why: at the MAPPO paper's settings (E = 1024, T = 25, one mini-batch) a mini-batch is 76,800 agent samples; each
of its 64-wide activations is 19.6 MB, so every LayerNorm, ReLU and loss kernel of the forward and backward pass
streams it from memory (this machine: ~32 GB/s from DRAM, 75-170 GB/s from its 32 MB L3). In blocks of a few
thousand rows the same kernels read what the block's previous kernel just wrote.

Same maths: every PPO loss term is a mean over the loss mask (alive agents, and only the drawn ones with
`ppo.minibatch_over=agents`), so the whole mini-batch's loss is the sum over blocks of each block's loss times its
share of the mask; gradients add up the same way (float rounding aside). A loss term whose mean is over another
mask would not split this way: Hyper-MAPPO's smoothness term with a per-sample context (`hyper.alpha` > 0) is
one, so there micro-batches are off, as they are for recurrent networks (they train on sequence chunks).
"""

from __future__ import annotations

import math

import torch

from hypermappo.config import PER_SAMPLE_CONTEXTS, _recurrent, algos_used


def blocker(cfg) -> str | None:
    """Why a (group) config's mini-batches cannot be split into micro-batches; None = they can."""
    if _recurrent(cfg):
        return "a recurrent network trains on sequence chunks"
    if cfg.actor == "hyper" and cfg.hyper.alpha > 0 and any(c in PER_SAMPLE_CONTEXTS for c in cfg.hyper.context):
        return ("hyper.alpha > 0 with a per-sample context (the smoothness term is a mean over consecutive alive "
                "steps, not over the loss mask)")
    if cfg.ppo.minibatch_over == "agents" and cfg.ppo.num_mini_batch > 1:
        return "ppo.minibatch_over=agents draws mini-batches of varying size"
    return None


def unused_keys(cfg) -> dict[str, str]:
    """`ppo.micro_batch_size` set where micro-batches are off -> {key: one-line error}, as config.unused_keys
    reports the keys nothing reads (run_config.unused_keys merges both)."""
    size = cfg.ppo.micro_batch_size
    if not size or not algos_used(cfg) - {"maddpg"}:  # 0 = off; maddpg-only runs: config reports every ppo.* key
        return {}
    reason = blocker(cfg)
    if reason is None:
        return {}
    return {"ppo.micro_batch_size": f"ppo.micro_batch_size={size!r} has no effect: micro-batches are off here: "
                                    f"{reason}; use 0"}


def describe(cfg, rows: int, num_agents: int) -> str:
    """The run-header line for a learner whose rollout has `rows` (t, env) rows of `num_agents` agents: its
    mini-batches' micro-batch blocks, or why there are none."""
    size = cfg.ppo.micro_batch_size
    if size == 0:
        return "micro-batches: off (ppo.micro_batch_size=0)"
    reason = blocker(cfg)
    if reason:
        return f"micro-batches: off ({reason})"
    per = math.ceil(rows / cfg.ppo.num_mini_batch)
    blocks = row_blocks(per, num_agents, size)
    samples = per * num_agents
    if len(blocks) == 1:
        return f"micro-batches: none needed (a mini-batch is {samples:,} agent samples <= ppo.micro_batch_size={size:,})"
    biggest = max(block_sizes(per, blocks)) * num_agents
    return (f"micro-batches: each mini-batch of {samples:,} agent samples in {len(blocks)} row blocks of <= "
            f"{biggest:,} (ppo.micro_batch_size={size:,}), gradients accumulated")


def row_blocks(rows: int, num_agents: int, size: int) -> list[slice]:
    """Row slices of a [rows, N, ...] mini-batch, each of at most `size` agent samples (rows x N); [slice(None)]
    when the whole fits. Blocks are of equal size where a divisor of `rows` allows it (one compiled graph for
    all of them), else equal but for a smaller last one."""
    if size <= 0 or rows * num_agents <= size:
        return [slice(None)]
    per = max(1, size // num_agents)  # rows per block at most
    k = math.ceil(rows / per)
    for blocks in range(k, 2 * k + 1):  # an exact split into at most twice the fewest blocks
        if rows % blocks == 0:
            step = rows // blocks
            return [slice(i, i + step) for i in range(0, rows, step)]
    return [slice(i, min(i + per, rows)) for i in range(0, rows, per)]


def block_sizes(rows: int, blocks: list[slice]) -> tuple[int, ...]:
    """The number of rows in each of `blocks` of a `rows`-row mini-batch."""
    return tuple(len(range(rows)[b]) for b in blocks)


def loss_mask(batch: dict) -> torch.Tensor:
    """The agents a PPO loss term averages over (MAPPO.loss): alive ones, and only the drawn ones when drawn."""
    return batch["active"] & batch["selected"] if "selected" in batch else batch["active"]


def block_weights(batch: dict, blocks: list[slice]) -> list[torch.Tensor]:
    """Each block's share of the mini-batch's loss mask (they sum to 1, or are all 0 for an all-dead batch)."""
    mask = loss_mask(batch)
    total = mask.sum().clamp(min=1).float()
    return [mask[b].sum().float() / total for b in blocks]
