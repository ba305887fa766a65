"""A trained run's policy for some agent slots: the one way `eval`, `crossplay`, `adapt`, frozen groups and a
population's frozen members load a trained actor.

`load_policy(source)` reads a run directory (or one checkpoint file in it) and returns the run's config (a learner
group's own config with `group`), the checkpoint it chose and the actor built for the slots it acts for, loaded with
that checkpoint's verified weights (`checkpoint.read_checkpoint`). Which checkpoint: `latest` (the newest file, which
must verify; eval) or `newest_intact` (the newest that verifies and loads; crossplay, frozen groups). Without
`env_spec` the actor acts for every slot of the run's env and, when it reads a co-player belief, comes back wrapped
with its co-player model (`algos/coplayer.acting_actor`), so that it acts as in training's evaluation. With `env_spec`
(a frozen group's slots) it comes back alone, without gradients, in eval mode: a belief is computed over the whole
env, so a policy that reads one cannot act for a group's slots and is refused.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from hypermappo.errors import UserError
from hypermappo.policies.specs import group_specs, widened_spec

CHOICES = ("latest", "newest_intact")


@dataclass
class LoadedPolicy:
    cfg: object  # the config the actor was built with: the run's, or its learner group's (`group`)
    actor: torch.nn.Module  # what acts: the actor, wrapped with its co-player model when it reads a belief
    checkpoint: Path  # the checkpoint file its weights came from
    run_dir: Path


def load_policy(source: Path | str, *, group: str = "", checkpoint: str = "latest", env_spec=None, device=None,
                command: str = "eval", where: str | None = None) -> LoadedPolicy:
    """The policy of run directory (or checkpoint file) `source`; see the module docstring.

    `device`: where its weights go (None: the run's device, the CPU where there is no CUDA; the returned config then
    says which). Errors are one-line UserErrors opened by `command`, or by `where` (default `command: RUN_DIR`) where
    they concern the run rather than one file. `newest_intact` notes skipped checkpoints on stderr when no
    `env_spec` is given (a frozen group skips them silently)."""
    from hypermappo import config as config_mod
    from hypermappo.checkpoint import checkpoint_files, latest_checkpoint

    if checkpoint not in CHOICES:
        raise ValueError(f"checkpoint: {checkpoint!r} is not one of {CHOICES}")
    source = Path(source)
    if source.is_dir():
        run_dir = source
        candidates = checkpoint_files(run_dir, newest_first=True) if checkpoint == "newest_intact" else \
            [latest_checkpoint(run_dir)]
    elif source.is_file():
        run_dir, candidates = source.parent.parent, [source]
        if not (run_dir / "config.yaml").exists():
            raise UserError(f"{command}: {str(source)!r} is not inside a run directory (expected "
                            f"RUN_DIR/checkpoints/ckpt_*.pt next to RUN_DIR/config.yaml)")
    else:
        raise UserError(f"{command}: {str(source)!r} is neither a run directory nor a checkpoint file")
    where = where or f"{command}: {run_dir}"
    cfg = config_mod.from_run_dir(run_dir)
    if env_spec is None and cfg.groups and not group and command != "eval":
        raise UserError(f"{command}: {str(run_dir)!r} is a run with policy groups; {command} plays runs without "
                        f"groups (evaluate it with `hypermappo eval`)")
    if device is None:
        cfg.device = "cpu" if not torch.cuda.is_available() else cfg.device
        device = cfg.device
    acfg = _group_config(cfg, group, run_dir) if group else cfg
    if not candidates and env_spec is None:
        latest_checkpoint(run_dir)  # one line: no checkpoint at all
    builder = _Builder(acfg, group, run_dir, env_spec, device, where)
    rejected = []
    for ckpt in candidates:
        try:
            actor = builder.load(_read(ckpt, device))
        except _Unusable as e:
            if len(candidates) == 1 and env_spec is None:  # eval of one file; a frozen group names the run
                raise UserError(e.message(command, ckpt)) from None
            rejected.append(f"{ckpt.name}: {e.why}")
            continue
        if rejected and env_spec is None:
            print(f"{command}: {run_dir}: skipped {'; '.join(rejected)}; using {ckpt.name}", file=sys.stderr,
                  flush=True)
        return LoadedPolicy(acfg, actor, ckpt, run_dir)
    raise UserError(f"{where}: no intact checkpoint ({'; '.join(rejected) or 'none there'})")


def load_frozen_actor(phase, env_spec, device) -> torch.nn.Module:
    """A frozen group's (or population member's) actor: `phase.run_dir`'s newest intact checkpoint, its learner group
    `phase.group` if named, for the group's slots (`env_spec`), without grads, in eval mode."""
    run_dir = Path(phase.run_dir)
    return load_policy(run_dir, group=phase.group, checkpoint="newest_intact", env_spec=env_spec, device=device,
                       command="frozen", where=f"frozen run_dir {str(run_dir)!r}").actor


class _Unusable(Exception):
    """A checkpoint file this policy cannot be loaded from, and why."""

    def __init__(self, why: str, verified: bool):
        super().__init__(why)
        self.why, self.verified = why, verified  # verified: it failed verification (else: not a checkpoint of it)

    def message(self, command: str, ckpt: Path) -> str:
        return f"{command}: {ckpt} is unusable ({self.why})" if self.verified else f"{command}: {str(ckpt)!r} is {self.why}"


def _not_ours(e: BaseException) -> _Unusable:
    reason = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
    return _Unusable(f"not a checkpoint of this run ({type(e).__name__}: {reason})", verified=False)


def _read(ckpt: Path, device) -> dict:
    """Checkpoint `ckpt`, verified (size, checksum, keys, finite weights)."""
    from hypermappo.checkpoint import read_checkpoint

    try:
        return read_checkpoint(ckpt, device)
    except ValueError as e:  # failed verification: truncated, checksum, missing keys, non-finite weights
        raise _Unusable(str(e), verified=True) from None
    except Exception as e:  # noqa: BLE001 - not a checkpoint at all
        raise _not_ours(e) from None


def _group_config(cfg, group: str, run_dir: Path):
    """The config learner group `group` of run `cfg` was built with."""
    spec = next((s for s in group_specs(cfg) if s.name == group and s.learns), None)
    if spec is None:
        learners = [s.name for s in group_specs(cfg) if s.learns] if cfg.groups else []
        raise UserError(f"frozen group {group!r}: run {str(run_dir)!r} has no learner group of that name "
                        f"(its learner groups: {learners})")
    return spec.cfg


class _Builder:
    """The actor for checkpoint contents (their group's learner entry with `group`): built once, for `env_spec`'s
    slots (alone, frozen) or for the whole env of the run (wrapped with its co-player model when it reads a belief;
    the env is built for its spec, and the actor, before any checkpoint is read, as `eval` always did)."""

    def __init__(self, cfg, group: str, run_dir: Path, env_spec, device, where: str):
        from hypermappo.models.actor import build_actor
        from hypermappo.models.coplayer import belief_dim

        self.cfg, self.group, self.run_dir, self.env_spec, self.device, self.where = cfg, group, run_dir, env_spec, \
            device, where
        self.actor = None
        if env_spec is None:
            from hypermappo.envs.registry import make_env

            self.spec = make_env(cfg.env, 1, cfg.device, **cfg.env_kwargs).spec
            extra = belief_dim(cfg, self.spec)  # an actor reading a co-player belief is wider
            self.actor = build_actor(cfg.actor, widened_spec(self.spec, extra), cfg)
        elif belief_dim(cfg, env_spec):
            raise UserError(f"{where}: its actor reads a co-player belief (coplayer.feed / hyper.context), which is "
                            f"computed over the whole env; a frozen group plays an actor without one")

    def load(self, sd: dict) -> torch.nn.Module:
        from hypermappo.algos.coplayer import acting_actor
        from hypermappo.models.actor import build_actor

        state = sd
        if self.group:
            groups = sd.get("groups") or {}
            if self.group not in groups or groups[self.group].get("learner") is None:
                raise UserError(f"frozen group {self.group!r}: run {str(self.run_dir)!r} has no learner group of that "
                                f"name (its learner groups: {[g for g, v in groups.items() if v.get('learner')]})")
            state = groups[self.group]["learner"]
        if self.env_spec is None:
            try:
                self.actor.load_state_dict(state["actor"])
            except Exception as e:  # noqa: BLE001 - a checkpoint of another config
                raise _not_ours(e) from None
            return acting_actor(self.cfg, self.spec, self.actor, state)
        spec = self.env_spec  # a group's slots: the actor alone, built once the checkpoint is read
        actor = build_actor(self.cfg.actor, spec, self.cfg).to(self.device)
        try:
            actor.load_state_dict(state["actor"])
        except RuntimeError as e:
            first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
            raise UserError(f"{self.where}: its actor does not fit this group's {spec.num_agents} agent(s) / "
                            f"observation size ({first})") from None
        actor.requires_grad_(False)
        return actor.eval()
