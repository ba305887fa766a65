"""Non-finite env outputs found without a host synchronisation per env step (collection on a GPU).

The per-step check (experiment.py) reads one fused sum back every step: free on a CPU, a stall of the GPU's queue
on CUDA. Here each step records on the device, per checked quantity, how many elements are non-finite, the flat
index of the first and its value; the rollout's end reads every record at once (one sync), and the first step and
quantity with a non-finite element are reported as the per-step check reports them."""

from __future__ import annotations

import torch


def bad_summaries(x: torch.Tensor) -> torch.Tensor:
    """Per x[k] of a [K, ...] stack: [count of non-finite elements, flat index of the first (0 if none), its value]
    as float64 [K, 3], on x's device."""
    flat = x.reshape(x.shape[0], -1)
    bad = ~torch.isfinite(flat)
    first = bad.to(torch.uint8).argmax(1, keepdim=True)  # [K, 1] the first maximum: the first non-finite element
    value = flat.gather(1, first).squeeze(1)  # not flat[first]: a tensor index is read on the host
    return torch.stack([bad.sum(1).to(torch.float64), first.squeeze(1).to(torch.float64), value.to(torch.float64)], 1)


def unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


class NonFiniteWatch:
    """The checks of one rollout: `watch` per step (device ops only), `first` once at its end."""

    def __init__(self):
        self.rows: list[torch.Tensor] = []  # per `watch` call: [Q, 3]
        self.entries: list[tuple[int, str, tuple[int, ...]]] = []  # (step, quantity, shape) per row, in check order

    def watch(self, t: int, quantities) -> None:
        """(name, tensor) pairs of step t, in the order the per-step check looks at them."""
        self.watch_steps(t, [(name, x.unsqueeze(0)) for name, x in quantities])

    def watch_steps(self, t: int, quantities) -> None:
        """(name, [K, ...] tensor) pairs of steps t .. t + K - 1 stacked (a graph's chunk of steps): recorded as K
        `watch` calls in step order would record them."""
        rows = torch.stack([bad_summaries(x) for _, x in quantities], 1)  # [K, Q, 3]
        self.rows.append(rows.reshape(-1, 3))
        self.entries += [(t + k, name, tuple(x.shape[1:])) for k in range(rows.shape[0]) for name, x in quantities]

    def first(self) -> tuple[int, str, list[int], float, int] | None:
        """(step, quantity, index, value, count) of the first non-finite element recorded, or None; clears."""
        rows, entries = self.rows, self.entries
        self.rows, self.entries = [], []
        if not rows:
            return None
        for (t, name, shape), (count, first, value) in zip(entries, torch.cat(rows).tolist()):  # the one sync
            if count > 0:
                return t, name, unravel(int(first), shape), value, int(count)
        return None
