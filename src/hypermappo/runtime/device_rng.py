"""Random generators that live where the run's tensors live.

A mini-batch permutation drawn on the CPU and copied to a GPU is a pageable host-to-device copy in every update,
one more place where the host waits for the device. A generator made on the run's device draws the permutation
there (`torch.randperm(..., generator=g, device=g.device)`). On the CPU nothing changes: the generator is the same
Mersenne twister as before, so a CPU run's draws, and every CPU test's digests, are what they were.

A CUDA generator's state (Philox: seed and offset) differs in size from a CPU one's; a checkpoint holding the
other kind cannot be restored into it, and says so in one line rather than failing inside torch."""

from __future__ import annotations

import torch

from hypermappo.errors import UserError


def device_generator(seed: int, device) -> torch.Generator:
    """A generator on `device` (CPU: the CPU generator), seeded with `seed`."""
    device = torch.device(device)
    return torch.Generator(device=device).manual_seed(seed)


def restore(generator: torch.Generator, state: torch.Tensor, what: str) -> None:
    """`generator.set_state(state)`, with a one-line error when the state was saved from a generator of another
    device type (a run resumed on another device: its draws cannot continue where they stopped)."""
    state = state.cpu()
    expected = generator.get_state().numel()
    if state.numel() != expected:
        raise UserError(f"resume: the checkpoint's {what} generator state has {state.numel()} bytes, a "
                        f"{generator.device.type} generator's has {expected}: the run was saved on another device "
                        f"type (resume it on the device it ran on)")
    generator.set_state(state)
