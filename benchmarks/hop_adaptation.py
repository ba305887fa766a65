"""Few-shot adaptation to held-out co-players in HOP's games: normalised return per consecutive episode.

Protocol (per game, seed and fold; `hypermappo adapt --held-out --oracles`):
  games     staghunt/hop (4 hunters, 8x8, 1 stag, 4 hares, 35 steps) and staghunt/hop_snowdrift (4 players, 8x8,
            6 drifts, 50 steps); the focal learner on slot 0, three co-players on slots 1-3.
  zoo       scripted co-players: stag (walk to the nearest stag / drift and wait), hare (nearest hare), follow
            (nearest other player), random. Folds: leave one goal-directed type out; the focal learner trains
            against a per-slot mix drawn per env and episode from the rest (draw: slot), and is evaluated against
            three copies of the held-out type (HOP's "1 focal + 3 nearest-X"), which its own records show it never
            met.
  oracle    plain MAPPO trained against that held-out mix alone with the same budget (env steps, envs, rollout).
  variants  mappo: no co-player model; belief-fed: the Bayesian goal belief (coplayer.enabled=true) fed to the
            policy (coplayer.feed=policy). Memory on: the belief's prior carried over the K episodes; off: reset.
  metric    normalised return per episode k: (return_k - random) / (oracle - random), random = a uniformly random
            player in the focal seat against the same mix. IQM and 95% bootstrap CI over seeds x folds.

    python benchmarks/hop_adaptation.py --games hop,hop_snowdrift --seeds 0,1,2,3,4 --steps 300000
Writes benchmarks/results/hop_adaptation.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SRC = [str(ROOT / "src")]
sys.path.insert(0, SRC[0])

from hypermappo.report.adaptation_curves import curve_summary, paired_difference  # noqa: E402

GAMES = {
    "hop": {"preset": "staghunt/hop", "coplayers": [1, 2, 3],
            "zoo": {"stag": "staghunt_stag", "hare": "staghunt_hare", "follow": "staghunt_follow",
                    "random": "random"},
            "folds": ["stag", "hare", "follow"]},
    "hop_snowdrift": {"preset": "staghunt/hop_snowdrift", "coplayers": [1, 2, 3],
                      "zoo": {"drift": "staghunt_stag", "follow": "staghunt_follow", "random": "random"},
                      "folds": ["drift", "follow"]},
    # zero-sum: MPE simple_tag, the focal learner a predator among 2 predators and 2 prey drawn per slot (each rule
    # chases in a predator seat and flees in a prey seat)
    "tag": {"preset": "mpe/simple_tag_coplayers", "coplayers": [1, 2, 3, 4],
            "zoo": {"nearest": "tag_nearest", "intercept": "tag_intercept", "target": "tag_target",
                    "random": "random"},
            "folds": ["nearest", "intercept", "target"]},
    # the coin game (2 players, general-sum): one co-player; the stag-hunt presets' protocol unchanged
    "coingame": {"preset": "coingame/default", "coplayers": [1],
                 "zoo": {"cooperative": "coin_cooperative", "selfish": "coin_selfish", "random": "random"},
                 "folds": ["cooperative", "selfish"]},
}
VARIANTS = {"mappo": [], "belief-fed": ["coplayer.enabled=true", "coplayer.feed=policy"],
            # more of the grid, on request (--variants): the recurrent model fed, the belief as Hyper-MAPPO's context
            "gru-fed": ["coplayer.enabled=true", "coplayer.model=gru", "coplayer.feed=policy",
                        "coplayer.memory=persistent", "coplayer.epochs=10"],
            "hyper-belief": ["coplayer.enabled=true", "actor=hyper", "hyper.context=[coplayer]"]}
DEFAULT_VARIANTS = "mappo,belief-fed"
EPISODES_SHOWN = (1, 3)  # and K


def _env():
    return {**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": ""}


def train(game: str, members: list[str], overrides: list[str], run_dir: Path) -> None:
    listed = ", ".join(f"{{policy: {m}}}" for m in members)
    groups = (f"groups=[{{name: focal, agents: [0]}}, {{name: coplayers, agents: {GAMES[game]['coplayers']}, "
              f"kind: population, draw: slot, members: [{listed}]}}]")
    preset = GAMES[game]["preset"]
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", preset, groups, *overrides, f"run_dir={run_dir}",
           "torch_threads=1", "log.tensorboard=false", "--quiet"]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=_env())


def budget(args, seed: int) -> list[str]:
    return [f"seed={seed}", f"total_env_steps={args.steps}", f"num_envs={args.num_envs}"]


def oracle_run(game: str, fold: str, seed: int, args) -> Path:
    run_dir = Path(args.runs) / game / f"oracle_{fold}_s{seed}"
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        train(game, [GAMES[game]["zoo"][fold]], budget(args, seed), run_dir)
    return run_dir


def focal_run(game: str, variant: str, fold: str, seed: int, args) -> Path:
    """Train the focal learner without `fold`, then its held-out evaluation with normalised returns."""
    run_dir = Path(args.runs) / game / f"{variant}_minus_{fold}_s{seed}"
    out = run_dir / "heldout"
    if (out / "adaptation.json").exists():
        return run_dir
    t = time.time()
    zoo = GAMES[game]["zoo"]
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        train(game, [p for name, p in zoo.items() if name != fold],
              [*VARIANTS[variant], *budget(args, seed)], run_dir)
    t_train = time.time() - t
    oracle = oracle_run(game, fold, seed, args)
    mix = "+".join([f"scripted:{zoo[fold]}"] * len(GAMES[game]["coplayers"]))
    cmd = [sys.executable, "-m", "hypermappo.cli", "adapt", str(run_dir), "--held-out", "--partners", mix,
           "--oracles", str(oracle), "--episodes", str(args.k), "--num-envs", str(args.eval_envs),
           "--memory", "both" if any(o.startswith("coplayer.enabled") for o in VARIANTS[variant]) else "on",
           "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=_env())
    print(f"[done] {game} {variant} -{fold} seed {seed}: train {t_train:.0f}s, total {time.time() - t:.0f}s",
          flush=True)
    return run_dir


def collect(game: str, args, seeds: list[int]) -> dict:
    """{variant: {memory: {"curves": [runs, K], "pairs": [(seed, fold)], "bounds": [...]}}} of finished runs."""
    out: dict = {}
    for variant in args.variants:
        for memory in (True, False):
            curves, pairs, bounds, raw = [], [], [], []
            for seed in seeds:
                for fold in GAMES[game]["folds"]:
                    path = Path(args.runs) / game / f"{variant}_minus_{fold}_s{seed}" / "heldout" / "adaptation.json"
                    if not path.exists():
                        continue
                    report = json.loads(path.read_text())
                    # without a co-player model memory changes nothing: its one result stands for both settings
                    hits = [r for r in report["results"] if r["memory"] == memory] or report["results"]
                    r = hits[0]
                    assert r["training_episodes"] == 0, f"{path}: the held-out mix was met in training"
                    curves.append(r["normalised_return"])
                    raw.append(r["return"]["mean"])
                    bounds.append(r["bounds"])
                    pairs.append((seed, fold))
            if curves:
                out.setdefault(variant, {})[memory] = {"curves": curves, "returns": raw, "pairs": pairs,
                                                       "bounds": bounds}
    return out


def _cell(summary: dict, k: int) -> str:
    lo, hi = summary["iqm_ci"][k]
    return f"{summary['iqm'][k]:.2f} [{lo:.2f}, {hi:.2f}]"


def report(args, seeds: list[int]) -> None:
    K = args.k
    shown = sorted({k - 1 for k in EPISODES_SHOWN if k <= K} | {K - 1})
    lines, results = [], {}
    for game in args.games:
        data = collect(game, args, seeds)
        if not data:
            continue
        results[game] = {v: {str(m): {**d, "summary": curve_summary(np.array(d["curves"]))} for m, d in per.items()}
                         for v, per in data.items()}
        head = " | ".join(f"ep {k + 1}" + (" (K)" if k == K - 1 else "") for k in shown)
        lines += [f"### {GAMES[game]['preset']}: normalised held-out return (IQM [95% CI] over seeds x folds)", "",
                  f"| variant | memory | {head} | ep K - ep 1 (mean, 95% CI) | runs |",
                  "|---|---|" + "---|" * len(shown) + "---|---|"]
        for variant, per in results[game].items():
            for memory, d in per.items():
                c = np.array(d["curves"], dtype=float)
                gain = paired_difference(c[:, -1], c[:, 0])
                lines.append(f"| {variant} | {'on' if memory == 'True' else 'off'} | "
                             + " | ".join(_cell(d["summary"], k) for k in shown)
                             + f" | {gain['mean']:+.3f} [{gain['ci'][0]:+.3f}, {gain['ci'][1]:+.3f}] | {len(c)} |")
        fed, plain = results[game].get("belief-fed", {}).get("True"), results[game].get("mappo", {}).get("True")
        if fed and plain:
            common = sorted(set(map(tuple, fed["pairs"])) & set(map(tuple, plain["pairs"])))
            a = np.array([fed["curves"][list(map(tuple, fed["pairs"])).index(p)] for p in common])
            b = np.array([plain["curves"][list(map(tuple, plain["pairs"])).index(p)] for p in common])
            if len(common):
                k3 = min(2, K - 1)
                d = paired_difference(a[:, k3], b[:, k3])
                lines += ["", f"- belief-fed (memory on) minus MAPPO, normalised return at episode {k3 + 1}: "
                              f"{d['mean']:+.3f} (95% CI {d['ci'][0]:+.3f} to {d['ci'][1]:+.3f}, {d['runs']} "
                              f"seed x fold pairs)"]
        bounds = [b for per in data.values() for d in per.values() for b in d["bounds"]]
        lines += [f"- bounds (mean over runs): random {np.mean([b['random'] for b in bounds]):.2f}, oracle "
                  f"{np.mean([b['oracle'] for b in bounds]):.2f} (episode return of the focal seat)", ""]
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines += [f"Produced {time.strftime('%Y-%m-%d')} by `python benchmarks/hop_adaptation.py --games "
              f"{','.join(args.games)} --variants {','.join(args.variants)} --seeds {','.join(map(str, seeds))} "
              f"--steps {args.steps} --num-envs "
              f"{args.num_envs} --k {K} --eval-envs {args.eval_envs}`; {cpu}. {args.note}".rstrip()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"meta": {"games": args.games, "seeds": seeds, "steps": args.steps,
                                                             "num_envs": args.num_envs, "K": K, "zoo": GAMES,
                                                             "variants": VARIANTS},
                                                    "results": results}, indent=1))
    plot(results, out.with_suffix(".png"), K)
    print("\n".join(lines))


def plot(results: dict, path: Path, K: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not results:
        return
    fig, axes = plt.subplots(1, len(results), figsize=(5.5 * len(results), 3.8), squeeze=False)
    for ax, (game, per_variant) in zip(axes[0], results.items()):
        x = np.arange(1, K + 1)
        for variant, per in per_variant.items():
            for memory, d in per.items():
                s = d["summary"]
                label = f"{variant}" + (f", memory {'on' if memory == 'True' else 'off'}" if variant != "mappo" else "")
                if variant == "mappo" and memory == "False":
                    continue
                lo = [c[0] for c in s["iqm_ci"]]
                hi = [c[1] for c in s["iqm_ci"]]
                ax.plot(x, s["iqm"], marker="o", label=label)
                ax.fill_between(x, lo, hi, alpha=0.15)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.axhline(0.0, color="grey", lw=0.8, ls=":")
        ax.set_title(f"{GAMES[game]['preset']}: held-out co-players")
        ax.set_xlabel("consecutive episode k")
        ax.set_ylabel("normalised return (IQM, 95% CI)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="hop,hop_snowdrift")
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--variants", default=DEFAULT_VARIANTS, help=f"some of {sorted(VARIANTS)}")
    p.add_argument("--steps", type=int, default=300_000, help="training env steps per run (focal and oracle)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--k", type=int, default=10, help="consecutive held-out episodes")
    p.add_argument("--eval-envs", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_hop_adaptation"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "hop_adaptation"))
    p.add_argument("--note", default="")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    args.games = [g for g in args.games.split(",") if g]
    unknown = [g for g in args.games if g not in GAMES]
    if unknown:
        p.error(f"--games {unknown[0]!r} is not one of {sorted(GAMES)}")
    args.variants = [v for v in args.variants.split(",") if v]
    if [v for v in args.variants if v not in VARIANTS]:
        p.error(f"--variants {[v for v in args.variants if v not in VARIANTS][0]!r} is not one of {sorted(VARIANTS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.report_only:
        # seed by seed (a cut run still leaves whole seeds): the oracles first (each serves both variants)
        with ThreadPoolExecutor(args.workers) as pool:
            for s in seeds:
                list(pool.map(lambda job: oracle_run(*job, args),
                              [(g, f, s) for g in args.games for f in GAMES[g]["folds"]]))
                list(pool.map(lambda job: focal_run(*job, args),
                              [(g, v, f, s) for g in args.games for v in args.variants
                               for f in GAMES[g]["folds"]]))
    report(args, seeds)


if __name__ == "__main__":
    main()
