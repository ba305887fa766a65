"""A rollout's finished episodes, kept on the device until its end.

Per env step the done flags and the episode returns (the env's, each policy group's, and the env's per-episode
extras) are appended as they are; the rollout's end selects the finished episodes' values once. The per-step
alternative, `if done.any(): returns.append(ret[done])`, reads the device every step (a stall of a GPU's queue).
The values come out in the same order (step-major, env-minor), so the statistics are the same to the bit."""

from __future__ import annotations

import torch


class EpisodeLog:
    def __init__(self):
        self.clear()

    def clear(self) -> None:
        """Forget what was added (a rollout that stopped part-way)."""
        self.done: list[torch.Tensor] = []
        self.returns: list[torch.Tensor] = []
        self.extras: dict[str, tuple[list, list]] = {}  # name -> (done flags, values) of the steps that had it
        self.groups: dict[str, list[torch.Tensor]] = {}

    def add(self, done: torch.Tensor, returns: torch.Tensor, extras: dict, group_returns: dict | None = None) -> None:
        """done [E] bool; returns [E]; extras: the env's [E] per-episode statistics (others are skipped); group
        returns: name -> [E]. Copied: an env may update its tensors in place."""
        self.done.append(done.clone())
        self.returns.append(returns.clone())
        for k, v in extras.items():
            if v.dim() == 1:  # per-agent extras such as goal_event [E, N] are no episode statistics
                flags, values = self.extras.setdefault(k, ([], []))
                flags.append(self.done[-1])
                values.append(v.to(torch.float32, copy=True))
        for name, r in (group_returns or {}).items():
            self.groups.setdefault(name, []).append(r.clone())

    def finish(self) -> tuple[torch.Tensor | None, dict[str, torch.Tensor | None], dict[str, torch.Tensor]]:
        """(returns of the finished episodes, per group the same, per extra its finished episodes' values), on the
        CPU; None where no episode ended. Clears."""
        if not self.done:
            return None, {}, {}
        done = torch.stack(self.done)  # [T, E]
        finished = done.sum().item()  # the one sync
        returns = torch.stack(self.returns)[done].cpu() if finished else None
        groups = {name: torch.stack(rs)[done].cpu() if finished else None for name, rs in self.groups.items()}
        extras = {}
        for k, (flags, values) in self.extras.items():
            chosen = torch.stack(values)[torch.stack(flags)].cpu() if finished else None
            if chosen is not None and chosen.numel():
                extras[k] = chosen
        self.clear()
        return returns, groups, extras
