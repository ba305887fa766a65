"""hyper.init_from=RUN_DIR: start a Hyper-MAPPO actor from another run's hypernetwork (hyper.init_base: and its base
weights), e.g. one pre-trained on the specialisation game or with fewer agents.

The source run's config.yaml says what it trained; its newest checkpoint that verifies (size, checksum, keys,
finite values: `checkpoint.read_checkpoint`) is loaded. Every tensor loaded must exist on both sides with the same
shape, else one line names the tensor: a partial load would be a different network without saying so. The source
run directory is only read (an unusable checkpoint there is skipped, not renamed). Only a fresh run warm-starts; a
resumed one continues from its own checkpoint."""

from __future__ import annotations

from pathlib import Path

import torch

from hypermappo.errors import UserError


def newest_intact_checkpoint(run_dir: Path, device) -> tuple[Path, dict]:
    """(path, contents) of the newest checkpoint of `run_dir` that `read_checkpoint` accepts."""
    from hypermappo.checkpoint import newest_intact, reasons

    path, sd, rejected = newest_intact(run_dir, device)
    if sd is not None:
        return path, sd
    why = reasons(rejected) if rejected else f"no checkpoints/ckpt_*.pt in {run_dir}"
    raise UserError(f"hyper.init_from: {str(run_dir)!r} has no intact checkpoint to load ({why})")


def _loaded_keys(actor, init_base: bool) -> list[str]:
    """The actor's state-dict keys a warm start sets: the hypernetwork, plus the base weights with init_base (not the
    target hypernetwork, which is synced from the loaded one, nor the update counter)."""
    keys = []
    for k in actor.state_dict():
        if k.startswith("hyper."):
            keys.append(k)
        elif init_base and not k.startswith("target.") and k != "_extra_state":
            keys.append(k)
    return keys


@torch.no_grad()
def warm_start(actor, cfg, device) -> dict:
    """Load cfg.hyper.init_from into `actor` (a HyperActor) in place; returns what was loaded (for summary.json)."""
    from hypermappo.config import from_run_dir

    h = cfg.hyper
    run_dir = Path(h.init_from)
    if not run_dir.is_dir():
        raise UserError(f"hyper.init_from: expected a run directory, got {h.init_from!r} (not a directory)")
    source_cfg = from_run_dir(run_dir)
    if source_cfg.actor != "hyper":
        raise UserError(f"hyper.init_from: {h.init_from!r} trained actor={source_cfg.actor!r}, which has no "
                        f"hypernetwork to load (expected a run with actor=hyper)")
    if (source_cfg.hyper.output == "full") != (h.output == "full"):
        raise UserError(f"hyper.init_from: {h.init_from!r} generated hyper.output={source_cfg.hyper.output!r}, "
                        f"this run hyper.output={h.output!r}: full weights and increments do not mean the same")
    path, sd = newest_intact_checkpoint(run_dir, device)
    source, own = sd["actor"], actor.state_dict()
    keys = _loaded_keys(actor, h.init_base)
    extra = [k for k in source if k.startswith("hyper.") and k not in own]
    for k in keys:
        if k not in source:
            raise UserError(f"hyper.init_from: tensor actor.{k} of this config is not in {path} "
                            f"(the source run's network differs; compare its config.yaml)")
    mismatched = [k for k in keys if tuple(source[k].shape) != tuple(own[k].shape)]
    if mismatched:
        k, more = mismatched[0], mismatched[1:]
        rest = f" and {len(more) - 3} more" if len(more) > 3 else ""
        also = f" (also mismatched: {', '.join(f'actor.{m}' for m in more[:3])}{rest})" if more else ""
        raise UserError(f"hyper.init_from: tensor actor.{k} has shape {tuple(source[k].shape)} in {path} but "
                        f"{tuple(own[k].shape)} in this config{also}")
    if extra:
        raise UserError(f"hyper.init_from: tensor actor.{extra[0]} of {path} has no place in this config's "
                        f"hypernetwork (the source run's network differs; compare its config.yaml)")
    actor.load_state_dict({**own, **{k: source[k] for k in keys}})
    if actor.target is not None:  # the target starts as a copy of the loaded hypernetwork, as at a fresh init
        actor.target.load_state_dict(actor.hyper.state_dict())
    return {"from": str(run_dir), "checkpoint": path.name, "update": int(sd["update"]),
            "loaded": "hypernetwork + base weights" if h.init_base else "hypernetwork"}
