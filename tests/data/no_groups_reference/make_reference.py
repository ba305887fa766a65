"""Regenerates the reference metrics of test_groups.py::test_no_groups_reproduces_the_pre_groups_metrics.

The stored CSVs were written by this script at commit 9c9789b (before policy groups existed); rerunning it
on a later commit only tells whether that commit still matches, it must not be used to refresh the files.
Run from the repository root: PYTHONPATH=src python tests/data/no_groups_reference/make_reference.py
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TINY = ["num_envs=4", "rollout_length=10", "ppo.ppo_epoch=2", "eval_episodes=4", "torch_threads=1",
        "log.tensorboard=false", "log.progress=false", "total_env_steps=160", "checkpoint_interval=2",
        "ppo.num_mini_batch=2", "eval_interval=2"]
CASES = {
    "staghunt_mlp": ("staghunt/default", ["model.hidden_sizes=[16,16]"]),
    "staghunt_rnn": ("staghunt/default", ["model.hidden_sizes=[16,16]", "actor=rnn", "ppo.data_chunk_length=5"]),
    "staghunt_hyper": ("staghunt/default", ["model.hidden_sizes=[16,16]", "actor=hyper", "hyper.hidden=16",
                                            "hyper.context=[obs,history]", "hyper.obs_embed_dim=16",
                                            "hyper.history_hidden=16", "ppo.data_chunk_length=5", "hyper.alpha=0.1",
                                            "hyper.beta=0.05", "hyper.target=hard",
                                            "hyper.layers=all", "hyper.rank=0"]),  # the defaults when recorded
    "climbing_mlp": ("matrix/climbing", ["model.hidden_sizes=[16,16]"]),
}


def checkpoint_digest(run: Path) -> dict:
    """The final checkpoint's top-level keys and a SHA-256 of its actor / critic / algo tensors (bit for bit)."""
    ckpt = torch.load(sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=False)
    h = hashlib.sha256()

    def feed(tree):
        if torch.is_tensor(tree):
            h.update(tree.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(tree, dict):
            for k in sorted(tree, key=str):
                h.update(str(k).encode())
                feed(tree[k])
        elif isinstance(tree, (list, tuple)):
            for v in tree:
                feed(v)
        else:
            h.update(repr(tree).encode())

    feed({k: ckpt[k] for k in ("actor", "critic", "algo", "actor_h", "critic_h", "reset_mask", "prev_obs")})
    return {"keys": sorted(ckpt), "sha256": h.hexdigest()}


def run_case(name: str, out_dir: Path) -> Path:
    from hypermappo import config as config_mod
    from hypermappo.experiment import Experiment

    preset, overrides = CASES[name]
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = config_mod.build_config(preset, [*TINY, *overrides])
    run = out_dir / name
    Experiment(cfg, run, quiet=True).run()
    return run / "metrics.csv"


if __name__ == "__main__":
    digests = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            metrics = run_case(case, Path(tmp))
            shutil.copy(metrics, HERE / f"{case}.csv")
            digests[case] = checkpoint_digest(metrics.parent)
            print("wrote", HERE / f"{case}.csv", file=sys.stderr)
    (HERE / "checkpoints.json").write_text(json.dumps(digests, indent=1) + "\n")
