"""BenchMARL's MADDPG on VMAS simple_spread at BenchMARL's default settings: env-steps/s of `Experiment.run()`.

Runs in the peer virtualenv (benchmarks/peers/benchmarl_maddpg.sh), never the project's:
    /work/peers/benchmarl/bin/python benchmarks/peers/benchmarl_maddpg.py --frames 12000
Prints one JSON line: frames, wall seconds, env-steps/s (collection + training, BenchMARL's own loop; evaluation,
loggers and checkpoints off), and the settings used.
"""

import argparse
import json
import os
import time

import torch
from benchmarl_common import timing_config


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--frames", type=int, default=12_000, help="total env steps (BenchMARL: max_n_frames)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from benchmarl.algorithms import MaddpgConfig
    from benchmarl.environments import VmasTask
    from benchmarl.experiment import Experiment, ExperimentConfig
    from benchmarl.models.mlp import MlpConfig

    cfg = timing_config(ExperimentConfig.get_from_yaml(), args.frames)
    exp = Experiment(task=VmasTask.SIMPLE_SPREAD.get_from_yaml(), algorithm_config=MaddpgConfig.get_from_yaml(),
                     model_config=MlpConfig.get_from_yaml(), critic_model_config=MlpConfig.get_from_yaml(), seed=0,
                     config=cfg)
    t = time.perf_counter()
    exp.run()
    wall = time.perf_counter() - t
    print(json.dumps({"frames": args.frames, "wall_s": wall, "env_steps_per_s": args.frames / wall,
                      "frames_per_batch": cfg.off_policy_collected_frames_per_batch,
                      "n_envs": cfg.off_policy_n_envs_per_worker, "optimizer_steps_per_batch":
                      cfg.off_policy_n_optimizer_steps, "train_batch_size": cfg.off_policy_train_batch_size,
                      "threads": args.threads, "pid": os.getpid()}))


if __name__ == "__main__":
    main()
