"""The `hypermappo` command line: train, resume, eval, sweep, compare, crossplay, adapt, presets, config.

Exit codes (each failure prints one line on stderr, no traceback):
  0    done
  1    an unexpected exception (a bug: its traceback is printed); one raised by the library's own code while
       it called the env (e.g. compiling the collection graph) is one line, "hypermappo internal error in
       MODULE: ...", with its traceback in RUN_DIR/error.log
  2    a user mistake: unknown preset or key, bad value, missing or no intact checkpoint
  3    non-finite values (NaN / inf) in env rewards / observations / state, a loss, a gradient norm,
       the evaluation return or the weights; the last checkpoint stays finite and summary.json says
       "status": "failed: non-finite ..." (`resume` refuses such a run: it would fail the same way)
  4    the env raised (in this process or in a worker); traceback in RUN_DIR/error.log;
       `hypermappo resume RUN_DIR` continues from the last checkpoint
  130  SIGINT (Ctrl-C), 143  SIGTERM: the first one finishes the current update, saves a checkpoint and
       prints `hypermappo resume RUN_DIR`; a second one aborts at once (the last checkpoint stays)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hypermappo.errors import RunFailed, RunInterrupted, UserError

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
    "sweep": """grid syntax (one argument per key):
  key=v1,v2         one run per value (commas inside [...], {...} or quotes do not split)
  key=a..b          the integers a..b inclusive, e.g. seed=1..5 (mixes with commas: seed=1..3,10)
  key=[64,64]       one list value; key=[64,64],[128,128] is a grid over two list values
  key=v             the same override for every run
quote arguments holding [ ] { } for the shell: 'model.hidden_sizes=[64,64],[128,128]'.
runs go to OUT/<varied keys>, e.g. OUT/algo=ippo,seed=3; re-running a sweep skips finished runs and
resumes interrupted ones.

examples:
  hypermappo sweep staghunt/default algo=mappo,ippo seed=1..5 --workers 2
  hypermappo sweep mpe/simple_spread 'model.hidden_sizes=[64,64],[128,128]' seed=1..3 --out runs/sweep_width
  hypermappo sweep matrix/climbing actor=mlp,rnn seed=1..10 --ray             # Ray on this machine
  hypermappo sweep matrix/climbing actor=mlp,rnn seed=1..10 --ray-address ray://head:10001""",
    "compare": """examples:
  hypermappo compare runs/sweep_staghunt_default                 # a sweep directory: all its runs
  hypermappo compare runs/a_s1 runs/a_s2 runs/b_s1 runs/b_s2 --group-by algo,actor --out report/
  hypermappo compare runs/sweep_width --group-by model.hidden_sizes --metric episode_return_mean""",
    "crossplay": """policies: a run directory (its actor from the newest intact checkpoint) or scripted:NAME, with
settings as scripted:NAME@key=value@... (values in YAML; quote lists for the shell), e.g. 'scripted:fixed@action=0',
'scripted:matrix_mixed@probs=[0.3,0.7]'. Writes OUT/crossplay.csv, crossplay.md and crossplay.png.

examples:
  hypermappo crossplay --rows runs/a runs/b scripted:staghunt_stag --cols scripted:staghunt_stag scripted:staghunt_hare \\
      scripted:staghunt_follow --row-slots 0 --col-slots 1 --episodes 100 --out report/crossplay
  hypermappo crossplay --env matrix:stag_hunt --rows scripted:fixed@action=0 scripted:fixed@action=1 \\
      --cols scripted:fixed@action=0 scripted:fixed@action=1""",
    "adapt": """partners: scripted:NAME[@key=value...], RUN_DIR or RUN_DIR#GROUP (a learner group of that run, frozen);
A+B+C: a mix, one partner per partner slot (4-player games such as staghunt/hop).
Writes OUT/adaptation.json and adaptation.md: the learner's return in each of K consecutive episodes per partner.

With --oracles (one run per partner, trained against it alone with the same budget): normalised returns,
0 = a random player in the learner's seats, 1 = the oracle. --held-out: refuse partners the run trained with.

examples:
  hypermappo adapt runs/x --partners scripted:staghunt_follow runs/partner#b --episodes 10 --num-envs 64
  hypermappo adapt runs/hop --held-out --oracles runs/hop_oracle --episodes 10 \\
      --partners scripted:staghunt_stag@eps=0.2+scripted:staghunt_hare@eps=0.2+scripted:random""",
    "presets": "examples:\n  hypermappo presets",
    "config": """examples:
  hypermappo config mpe/simple_spread algo=ippo      # print the effective config
  hypermappo config --keys                           # every key with its type, default and help""",
}


class _Parser(argparse.ArgumentParser):
    """Usage mistakes on one line, like every other user error (the usage is in --help)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hypermappo", description="MAPPO, IPPO and Hyper-MAPPO for multi-agent RL.",
                epilog="exit codes: 0 done, 1 bug (traceback), 2 user mistake, 3 non-finite values "
                       "(NaN / inf), 4 the env raised, 130 / 143 SIGINT / SIGTERM (checkpoint saved)",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def add(name, help):
        return sub.add_parser(name, help=help, description=help, epilog=EXAMPLES.get(name),
                              formatter_class=argparse.RawDescriptionHelpFormatter)

    t = add("train", "train from a preset with key=value overrides")
    t.add_argument("preset", help="preset name under configs/ (see `hypermappo presets`) or a YAML path")
    t.add_argument("overrides", nargs="*", help="config overrides key=value (dotted keys for nesting)")
    t.add_argument("--quiet", action="store_true", help="no progress line")
    t.add_argument("--allow-unused-keys", action="store_true",
                   help="do not stop on keys this config does not read (a sweep's runs use it for keys only some "
                        "of its runs read)")

    r = add("resume", "continue a run from its last checkpoint")
    r.add_argument("run_dir")
    r.add_argument("--quiet", action="store_true")

    e = add("eval", "evaluate a run's latest checkpoint (or a given checkpoint file)")
    e.add_argument("target", help="RUN_DIR or a checkpoint file")
    e.add_argument("--episodes", type=int, default=100)
    e.add_argument("--stochastic", action="store_true", help="sample actions instead of taking the mode")
    e.add_argument("--render", metavar="OUT", help="write one rendered episode to OUT (.gif or .mp4)")
    e.add_argument("--seed", type=int, default=None, help="evaluation seed (default: the run's seed)")
    e.add_argument("--quiet", action="store_true", help="no progress line")

    s = add("sweep", "train every point of a grid of overrides, in parallel; skips finished runs")
    s.add_argument("preset", help="preset name under configs/ or a YAML path")
    s.add_argument("grid", nargs="*", metavar="key=VALUES", help="grid axes and fixed overrides (syntax below)")
    s.add_argument("--out", type=Path, help="sweep directory (default: runs/sweep_<preset>)")
    s.add_argument("--workers", type=int, help="runs at a time (default: CPU count); with --ray: Ray's CPUs")
    s.add_argument("--ray", action="store_true", help="run the grid as Ray tasks on a Ray instance started here")
    s.add_argument("--ray-address", metavar="ADDR", help="run the grid as Ray tasks on the Ray cluster at ADDR")
    s.add_argument("--dry-run", action="store_true", help="list the runs and their state, run nothing")

    m = add("compare", "learning curves and a final-performance table of runs grouped by variant")
    m.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories or sweep directories")
    m.add_argument("--group-by", metavar="KEYS", help="comma-separated config keys defining a variant "
                                                      "(default: the keys that differ between runs, except seed)")
    m.add_argument("--out", type=Path, default=Path("report"), help="output directory (default: report/)")
    m.add_argument("--metric", default="eval_return_mean", help="final-score column of metrics.csv")

    x = add("crossplay", "play every pairing of row x column policies (run directories or scripted) in one env")
    x.add_argument("--rows", nargs="+", required=True, metavar="POLICY", help="row policies: RUN_DIR or scripted:NAME")
    x.add_argument("--cols", nargs="+", required=True, metavar="POLICY", help="column policies: RUN_DIR or scripted:NAME")
    x.add_argument("--env", help="preset (e.g. staghunt/egocentric) or env string (e.g. matrix:stag_hunt); default: "
                                 "the first run's env. Every run must have been trained on this env")
    x.add_argument("--row-slots", metavar="I,J", help="agent slots the row policy acts for (default on 2 agents: 0)")
    x.add_argument("--col-slots", metavar="I,J", help="agent slots the column policy acts for (default on 2 agents: 1)")
    x.add_argument("--episodes", type=int, default=100, help="episodes per pairing (default 100)")
    x.add_argument("--num-envs", type=int, help="envs in parallel (default: --episodes, one episode each)")
    x.add_argument("--stochastic", action="store_true", help="sample learned actions instead of taking the mode")
    x.add_argument("--seed", type=int, default=0, help="env and scripted-policy seed (default 0)")
    x.add_argument("--out", type=Path, default=Path("report/crossplay"), help="output directory (default: report/crossplay)")
    x.add_argument("--quiet", action="store_true", help="no per-pairing progress lines")

    a = add("adapt", "held-out-partner evaluation: K consecutive episodes per partner, no updates")
    a.add_argument("run_dir", help="a run trained with a partner group (e.g. kind: population)")
    a.add_argument("--partners", nargs="+", required=True, metavar="PARTNER", help="held-out partners (see below)")
    a.add_argument("--episodes", type=int, default=10, help="consecutive episodes K per partner (default 10)")
    a.add_argument("--num-envs", type=int, default=64, help="envs in parallel, each playing K episodes (default 64)")
    a.add_argument("--memory", choices=("on", "off", "both"), default="both",
                   help="co-player memory across episodes: on, off or both (default both)")
    a.add_argument("--group", help="the partner group of the run (default: its one non-learning group)")
    a.add_argument("--stochastic", action="store_true", help="sample the learner's actions instead of the mode")
    a.add_argument("--seed", type=int, default=None, help="env seed (default: the run's evaluation seed)")
    a.add_argument("--out", type=Path, default=Path("report/adaptation"), help="output directory")
    a.add_argument("--held-out", action="store_true",
                   help="refuse a partner the run met in training (its own records say which it met)")
    a.add_argument("--oracles", nargs="+", metavar="RUN_DIR",
                   help="per partner, a run trained against it alone with the same budget: adds normalised returns")

    add("presets", "list the presets under configs/")
    add("bench", "training throughput table (benchmarks/throughput.py; `hypermappo bench --help` for its options)")
    c = add("config", "print the effective config of a preset + overrides, or every key")
    c.add_argument("preset", nargs="?")
    c.add_argument("overrides", nargs="*")
    c.add_argument("--keys", action="store_true", help="list every config key with type, default and help")
    return p


def cmd_train(args) -> int:
    from hypermappo.experiment import Experiment
    from hypermappo.run_config import build_config

    cfg = build_config(args.preset, args.overrides, allow_unused=args.allow_unused_keys)
    if cfg.seeds:
        return _train_seeds(cfg, args.quiet)
    exp = Experiment(cfg, quiet=args.quiet)
    per_update = cfg.num_envs * cfg.rollout_length
    trained = exp.updates_total * per_update  # whole rollouts: total_env_steps rounded up
    plan = f"{exp.updates_total:,} updates of {per_update:,}"
    steps = f"{cfg.total_env_steps:,} ({trained:,} trained: {plan})" if trained != cfg.total_env_steps else \
        f"{trained:,} ({plan})"
    print(f"hypermappo train: env={cfg.env} algo={cfg.algo} actor={cfg.actor} seed={cfg.seed} "
          f"E={cfg.num_envs} T={cfg.rollout_length} steps={steps} -> {exp.run_dir}")
    for note in [*exp.compile_notes, *([exp.collect_note] if exp.collect_note else []), *exp.coplayer_notes, exp.sync_note,
                 *exp.micro_notes, *exp.chunk_notes]:
        print(note)
    summary = exp.run()
    _print_summary(exp.run_dir, summary)
    return 0


def _train_seeds(cfg, quiet: bool) -> int:
    """`seeds=`: the seeds as one batched run (seed_batch.py), one run directory each."""
    from hypermappo.seed_batch import SeedBatch

    batch = SeedBatch(cfg, quiet=quiet)
    first = batch.exps[0]
    print(f"hypermappo train: env={cfg.env} algo={cfg.algo} actor={cfg.actor} seeds={cfg.seeds} batched "
          f"(E={cfg.num_envs} per seed, {len(cfg.seeds) * cfg.num_envs} in all) T={cfg.rollout_length} "
          f"{first.updates_total:,} updates -> {', '.join(str(e.run_dir) for e in batch.exps)}")
    print("seeds: eager, one vmapped actor and critic call for every seed per step (each seed equals its run alone "
          "up to float rounding)")
    for exp, summary in zip(batch.exps, batch.run()):
        print(f"seed {exp.cfg.seed}:")
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

    result = run_eval(Path(args.target), args.episodes, not args.stochastic, args.render, args.seed, args.quiet)
    print(json.dumps(result, indent=2))
    return 0


def cmd_sweep(args) -> int:
    from hypermappo.sweep import sweep

    return sweep(args.preset, args.grid, args.out, args.workers, args.ray, args.ray_address, args.dry_run, main=main)


def cmd_compare(args) -> int:
    from hypermappo.report.compare import compare

    group_by = [k.strip() for k in args.group_by.split(",") if k.strip()] if args.group_by else None
    result = compare(args.runs, args.out, group_by, args.metric)
    print((args.out / "final.md").read_text(), end="")
    print("wrote " + ", ".join(str(p) for p in result["files"]))
    return 0


def cmd_crossplay(args) -> int:
    from hypermappo.crossplay import crossplay

    result = crossplay(args.rows, args.cols, args.out, args.env, args.row_slots, args.col_slots, args.episodes,
                       args.num_envs, not args.stochastic, args.seed, args.quiet)
    print((args.out / "crossplay.md").read_text(), end="")
    print("wrote " + ", ".join(str(p) for p in result["files"]))
    return 0


def cmd_adapt(args) -> int:
    from hypermappo.adaptation import adapt

    memory = {"on": (True,), "off": (False,), "both": (True, False)}[args.memory]
    adapt(args.run_dir, args.partners, args.episodes, args.num_envs, memory, args.group, args.seed,
          not args.stochastic, args.out, held_out=args.held_out, oracles=args.oracles)
    print((args.out / "adaptation.md").read_text(), end="")
    print(f"wrote {args.out / 'adaptation.json'}, {args.out / 'adaptation.md'}")
    return 0


def cmd_presets(args) -> int:
    from hypermappo.config import list_presets

    for name in list_presets():
        print(name)
    return 0


def cmd_config(args) -> int:
    import dataclasses

    import yaml

    from hypermappo.config import Config, to_dict
    from hypermappo.run_config import build_config

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
    if args.preset and "=" in args.preset and not Path(args.preset).exists():  # `config key=v`: no preset
        args.preset, args.overrides = None, [args.preset, *args.overrides]
    cfg = build_config(args.preset, args.overrides)
    print(yaml.safe_dump(to_dict(cfg), sort_keys=False), end="")
    return 0


COMMANDS = {"train": cmd_train, "resume": cmd_resume, "eval": cmd_eval, "sweep": cmd_sweep, "compare": cmd_compare,
            "crossplay": cmd_crossplay, "adapt": cmd_adapt, "presets": cmd_presets, "config": cmd_config}


def cmd_bench(argv: list[str]) -> int:
    """Runs benchmarks/throughput.py of this source checkout, with its own options."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"
    if not path.exists():
        raise UserError(f"bench needs a source checkout: {path} not found")
    spec = importlib.util.spec_from_file_location("hypermappo_bench_throughput", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(argv, prog="hypermappo bench")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the benchmark parses its own options
        try:
            return cmd_bench(argv[1:])
        except UserError as e:
            print(f"hypermappo bench: error: {e}", file=sys.stderr)
            return 2
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # key=value arguments after an option (`train P --quiet seed=1`) are overrides too
    listed = next((name for name in ("overrides", "grid") if hasattr(args, name)), None)
    unknown = [a for a in extra if not listed or "=" not in a or a.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if extra:
        getattr(args, listed).extend(extra)
    if not args.command:
        parser.print_help()
        return 2
    try:
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"hypermappo {args.command}: error: {e}", file=sys.stderr)
        return 2
    except RunFailed as e:
        print(f"hypermappo {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except RunInterrupted as e:
        print(f"hypermappo {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
