"""BenchMARL's MAPPO on VMAS simple_spread at the MAPPO paper's settings: env-steps/s of its own training loop.

Runs in the peer virtualenv (benchmarks/peers/benchmarl_maddpg.sh creates it), never the project's:
    /work/peers/benchmarl/bin/python benchmarks/peers/benchmarl_mappo.py --batches 5
Settings (as this library's `mappo/vmas:simple_spread/1024` row): 1024 envs x 25 steps per batch (25,600 frames),
10 epochs of ONE mini-batch (the whole batch), discrete actions, 64x64 MLP (BenchMARL's default activation, Tanh),
shared actor parameters and BenchMARL's MAPPO defaults otherwise; evaluation, loggers and checkpoints off.
Timing: a callback stamps the end of every batch's training; the figure is the median time between stamps after
the first (which includes set-up), so it covers collection + training of one batch each.
Prints one JSON line.
"""

import argparse
import json
import os
import statistics
import time

import torch
from benchmarl_common import timing_config

STAMPS: list[float] = []


def make_stamp_callback(base):
    global StampCallback  # module level, so BenchMARL can pickle the callback with its run

    class StampCallback(base):
        def on_train_end(self, training_td, group):
            STAMPS.append(time.perf_counter())

    StampCallback.__qualname__ = "StampCallback"
    return StampCallback


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=5, help="batches of 25,600 frames (the first is not timed)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--steps", type=int, default=25)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from benchmarl.algorithms import MappoConfig
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.experiment.callback import Callback
    from benchmarl.models.mlp import MlpConfig

    frames = args.num_envs * args.steps
    cfg = timing_config(ExperimentConfig.get_from_yaml(), frames * args.batches)
    cfg.on_policy_collected_frames_per_batch = frames
    cfg.on_policy_n_envs_per_worker = args.num_envs
    cfg.on_policy_n_minibatch_iters = 10
    cfg.on_policy_minibatch_size = frames
    cfg.prefer_continuous_actions = False
    model = MlpConfig.get_from_yaml()
    model.num_cells = [64, 64]
    Stamp = make_stamp_callback(Callback)
    exp = Experiment(task=VmasTask.SIMPLE_SPREAD.get_from_yaml(), algorithm_config=MappoConfig.get_from_yaml(),
                     model_config=model, critic_model_config=model, seed=0, config=cfg, callbacks=[Stamp()])
    stamps = STAMPS
    t = time.perf_counter()
    exp.run()
    wall = time.perf_counter() - t
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    print(json.dumps({"library": "benchmarl", "algo": "MAPPO", "env": "vmas simple_spread", "frames_per_batch": frames,
                      "num_envs": args.num_envs, "epochs": cfg.on_policy_n_minibatch_iters, "minibatch": frames,
                      "sps": frames / statistics.median(gaps) if gaps else None,
                      "sps_batches": [frames / g for g in gaps], "wall_s": wall,
                      "sps_incl_setup": frames * args.batches / wall, "activation": str(model.activation_class),
                      "num_cells": model.num_cells, "threads": args.threads, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
