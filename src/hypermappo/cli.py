"""The `hypermappo` command line: train, resume, eval, presets, config (and more as they land).

User mistakes (unknown preset or key, bad value, missing checkpoint) print one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hypermappo.errors import UserError

EXAMPLES = {
    "train": """examples:
  hypermappo train mpe/simple_spread
  hypermappo train mpe/simple_spread algo=ippo seed=3 total_env_steps=200000 run_dir=runs/x
  hypermappo train staghunt/default actor=rnn model.hidden_sizes=128,128 ppo.lr_actor=5e-4""",
    "resume": """examples:
  hypermappo resume runs/x""",
    "eval": """examples:
  hypermappo eval runs/x --episodes 100
  hypermappo eval runs/x/checkpoints/ckpt_0000100.pt --stochastic
  hypermappo eval runs/x --render episode.gif""",
    "presets": "examples:\n  hypermappo presets",
    "config": """examples:
  hypermappo config mpe/simple_spread algo=ippo      # print the effective config
  hypermappo config --keys                           # every key with its type, default and help""",
}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hypermappo", description="MAPPO, IPPO and Hyper-MAPPO for multi-agent RL.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name, help):
        return sub.add_parser(name, help=help, description=help, epilog=EXAMPLES.get(name),
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    t = add("train", "train from a preset with key=value overrides")
    t.add_argument("preset", help="preset name under configs/ (see `hypermappo presets`) or a YAML path")
    t.add_argument("overrides", nargs="*", help="config overrides key=value (dotted keys for nesting)")
    t.add_argument("--quiet", action="store_true", help="no progress line")

    r = add("resume", "continue a run from its last checkpoint")
    r.add_argument("run_dir")
    r.add_argument("--quiet", action="store_true")

    e = add("eval", "evaluate a run's latest checkpoint (or a given checkpoint file)")
    e.add_argument("target", help="RUN_DIR or a checkpoint file")
    e.add_argument("--episodes", type=int, default=100)
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    e.add_argument("--render", metavar="OUT", help="write one rendered episode to OUT (.gif or .mp4)")
    e.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the run's seed)")

    add("presets", "list the presets under configs/")
    c = add("config", "print the effective config of a preset + overrides, or every key")
    c.add_argument("preset", nargs="?")
    c.add_argument("overrides", nargs="*")
    c.add_argument("--keys", action="store_true", help="list every config key with type, default and help")
    return p


def cmd_train(args) -> int:
    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    cfg = build_config(args.preset, args.overrides)
    exp = Experiment(cfg, quiet=args.quiet)
    print(f"hypermappo train: env={cfg.env} algo={cfg.algo} actor={cfg.actor} seed={cfg.seed} "
          f"E={cfg.num_envs} T={cfg.rollout_length} steps={cfg.total_env_steps:,} -> {exp.run_dir}")
    summary = exp.run()
    _print_summary(exp.run_dir, summary)
    return 0


def cmd_resume(args) -> int:
    from hypermappo.experiment import resume

    summary = resume(Path(args.run_dir), quiet=args.quiet)
    _print_summary(Path(args.run_dir), summary)
    return 0


def _print_summary(run_dir: Path, summary: dict) -> None:
    print(f"done: {summary['env_steps']:,} env steps in {summary['wall_s']:.1f}s ({summary['train_sps']:.0f} sps), "
          f"eval return {summary['eval_return_mean']:.3f} ± {summary['eval_return_std']:.3f} "
          f"over {summary['eval_episodes']} episodes")
    print(f"run directory: {run_dir}  (metrics.csv, summary.json, config.yaml, checkpoints/)")


def cmd_eval(args) -> int:
    from hypermappo.evaluate_cli import run_eval

    result = run_eval(Path(args.target), args.episodes, not args.stochastic, args.render, args.seed)
    print(json.dumps(result, indent=2))
    return 0


def cmd_presets(args) -> int:
    from hypermappo.config import list_presets

    for name in list_presets():
        print(name)
    return 0


def cmd_config(args) -> int:
    import dataclasses

    import yaml

    from hypermappo.config import Config, build_config, to_dict

    if args.keys:
        def walk(obj, prefix=""):
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                if dataclasses.is_dataclass(v):
                    walk(v, prefix + f.name + ".")
                else:
                    extra = f" (one of {f.metadata['choices']})" if f.metadata.get("choices") else ""
                    print(f"{prefix + f.name:32s} = {v!r:24}  {f.metadata.get('help', '')}{extra}")
        walk(Config())
        return 0
    cfg = build_config(args.preset, args.overrides)
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    return 0


COMMANDS = {"train": cmd_train, "resume": cmd_resume, "eval": cmd_eval, "presets": cmd_presets, "config": cmd_config}


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"hypermappo {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
