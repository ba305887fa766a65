"""Benchmark: held-out-partner adaptation with and without a co-player model (stag hunt and coin game).

Protocol, per game:
  partners   stag hunt (staghunt/egocentric, 5x5, shared team reward): stag (scripted staghunt_stag), hare
             (staghunt_hare), follower (staghunt_follow), random, learned (group b of a self-play run of two
             learner groups, trained first, frozen). Coin game: cooperative (coin_cooperative), selfish
             (coin_selfish), random, learned (the same self-play recipe).
  folds      leave-one-out: the learner (slot 0) trains against a population group (slot 1) of all partners but
             one, a member drawn per env at every episode start (`kind: population, sample: episode`), then is
             evaluated against the held-out one.
  variants   see VARIANTS: MAPPO; MAPPO + co-player model as an auxiliary loss only; MAPPO + co-player model fed
             to the policy; Hyper-MAPPO with the co-player belief as the hypernetwork context.
  held-out   `hypermappo adapt` (src/hypermappo/adaptation.py): E envs each play K = 10 consecutive episodes
             against the held-out partner, no updates, learner actions = the policy's mode; co-player memory
             carried across episodes (memory on) or restarted every episode (memory off).
  reported   per variant and memory setting, mean over folds then mean ± std over seeds: the learner's held-out
             return in episode 1, episode K and the mean over the K episodes; the co-player model's action and goal
             accuracy (when the variant has one). Plots: return per episode index 1..K (adaptation curve) and
             accuracy per episode index.

    python benchmarks/coplayer_adaptation.py --games staghunt --seeds 0,1,2 --steps 100000
    python benchmarks/coplayer_adaptation.py --report-only
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
SRC = [str(ROOT / "src")]  # the source the runs use (--src: a snapshot, so the tree can change meanwhile)

GAMES = {
    "staghunt": {"preset": "staghunt/egocentric",
                 "partners": {"stag": "scripted:staghunt_stag", "hare": "scripted:staghunt_hare",
                              "follower": "scripted:staghunt_follow", "random": "scripted:random",
                              "learned": "LEARNED"},
                 # in every training population, never held out: each goal keeps a (noisy) pursuer in training, so
                 # a held-out partner is a new partner with a known goal (HOP's setting), not a goal nobody showed
                 "train_also": {"stag~": "scripted:staghunt_stag@eps=0.3", "hare~": "scripted:staghunt_hare@eps=0.3",
                                "follower~": "scripted:staghunt_follow@eps=0.3"}},
    "snowdrift": {"preset": "staghunt/snowdrift",
                  "partners": {"drift": "scripted:staghunt_stag", "hare": "scripted:staghunt_hare",
                               "follower": "scripted:staghunt_follow", "random": "scripted:random",
                               "learned": "LEARNED"},
                  "train_also": {"drift~": "scripted:staghunt_stag@eps=0.3", "hare~": "scripted:staghunt_hare@eps=0.3",
                                 "follower~": "scripted:staghunt_follow@eps=0.3"}},
    "coingame": {"preset": str(ROOT / "benchmarks" / "coingame.yaml"),
                 "partners": {"cooperative": "scripted:coin_cooperative", "selfish": "scripted:coin_selfish",
                              "random": "scripted:random", "learned": "LEARNED"},
                 "train_also": {"cooperative~": "scripted:coin_cooperative@eps=0.3",
                                "selfish~": "scripted:coin_selfish@eps=0.3"}},
}
# per variant: the learner group's settings (inside its groups entry) and run-level overrides. The co-player
# model (models/coplayer.py) predicts the partner's next action and goal (staghunt: stag / hare; coin game: own /
# other coin) from the learner's own observations; its memory persists across episodes while the partner stays
# the same (reset when the population draws another member).
COPLAYER = ["coplayer.enabled=true", "coplayer.model=gru", "coplayer.action_weight=1.0", "coplayer.goal_weight=1.0",
            "coplayer.memory=persistent"]
VARIANTS = {
    # partner inference: the Bayesian goal belief with nothing but coplayer.enabled=true (its defaults are what is
    # judged), and the recurrent predictor with enough optimisation to converge (10 passes per rollout)
    "bayes": ("actor: mlp", ["coplayer.enabled=true"]),
    # ablation: the goal policies read the learner's observation as is, not each co-player's own view
    "bayes-own-view": ("actor: mlp", ["coplayer.enabled=true", "coplayer.view=own"]),
    # the belief over (population member, goal): one read-out of the goal policies per training partner
    "bayes-members": ("actor: mlp", ["coplayer.enabled=true", "coplayer.member_heads=true"]),
    # hindsight-labelled pairs (the learner's own, a frozen learner's) weighed 0.05 instead of 0.25 against a scripted
    # partner's own goal: do other hunters' ways to a goal blur the goal policies' account of a rule?
    "bayes-hw05": ("actor: mlp", ["coplayer.enabled=true", "coplayer.hindsight_weight=0.05"]),
    # ablations of coplayer.symmetries (default: a scripted partner's moves in the game's reflections): the replay as
    # it is; every sample reflected, a frozen learner's too
    "bayes-nosym": ("actor: mlp", ["coplayer.enabled=true", "coplayer.symmetries=off"]),
    "bayes-symall": ("actor: mlp", ["coplayer.enabled=true", "coplayer.symmetries=all"]),
    # the goal predicted as the goal pursued now: the belief times a read-out of the state (coplayer.goal_readout)
    "bayes-goal-readout": ("actor: mlp", ["coplayer.enabled=true", "coplayer.goal_readout=state"]),
    # the goal network at 128 units, its width before the default became 64 (its products are most of the model's
    # cost per env step); the earlier pages' bayes-h64 is today's bayes
    "bayes-h128": ("actor: mlp", ["coplayer.enabled=true", "coplayer.hidden=128"]),
    # the same learner, the games' noisy pursuers (train_also) walking every shortest way to their goal (path=any,
    # ZOO_PATH) instead of the rules' one habit: goal policies that learn the goal, not the habit
    "bayes-any-zoo": ("actor: mlp", ["coplayer.enabled=true"]),
    "gru": ("actor: mlp", [*COPLAYER, "coplayer.epochs=10"]),
    "mappo": ("actor: mlp", []),
    "mappo+cpm-aux": ("actor: mlp", COPLAYER),
    "mappo+cpm-fed": ("actor: mlp", [*COPLAYER, "coplayer.feed=policy"]),
    "hyper+cpm-context": ("actor: hyper, hyper: {context: [coplayer], layers: last, hidden: 32, mlp_layers: 1}",
                          COPLAYER),
}
ZOO_PATH = {"bayes-any-zoo": "any"}  # variant -> the `path` of its training population's noisy pursuers
COMMON = ["checkpoint_interval=0", "log.tensorboard=false", "log.progress=false", "diagnostics.every=0",
          "torch_threads=1", "eval_interval=0", "eval_episodes=32"]


def member(spec: str) -> str:
    """A partner spec (scripted:NAME or RUN#GROUP) as a population member mapping in YAML flow style."""
    if spec.startswith("scripted:"):
        name, *params = spec[len("scripted:"):].split("@")
        settings = ", ".join(f"{k}: {v}" for k, v in (p.split("=", 1) for p in params))
        return f"{{policy: {name}" + (f", params: {{{settings}}}}}" if settings else "}")
    run_dir, _, group = spec.partition("#")
    return f"{{run_dir: '{run_dir}', group: {group}}}"


def train(cmd_overrides: list[str], preset: str, run_dir: Path, env_extra: dict) -> None:
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", preset, *cmd_overrides, f"run_dir={run_dir}", *COMMON]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1", **env_extra})


# a frozen learner from an earlier point of training: self-play stopped at this fraction of --partner-steps (its own
# seed). Never in any training population: the fold that holds out `learned` is also evaluated against it, so the
# held-out frozen learners are one at the end of training and one early in it
EARLY_FRACTION, EARLY_SEED = 0.2, 101


def learned_partner(game: str, args, early: bool = False) -> Path:
    """Self-play of two learner groups (seed 100); its group b, frozen, is the `learned` partner (`early`: the
    shorter self-play whose group b is the `learned-early` partner)."""
    run_dir = Path(args.runs) / game / ("learned_partner_early" if early else "learned_partner")
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        t = time.time()
        steps = int(args.partner_steps * EARLY_FRACTION) if early else args.partner_steps
        train(["groups=[{name: a, agents: [0]}, {name: b, agents: [1]}]", f"seed={EARLY_SEED if early else 100}",
               f"total_env_steps={steps}", f"num_envs={args.num_envs}"], preset_of(game), run_dir, {})
        print(f"[done] {game} learned partner{' (early)' if early else ''} in {time.time() - t:.0f}s", flush=True)
    return run_dir


def preset_of(game: str) -> str:
    return GAMES[game]["preset"]


def partners_of(game: str, args) -> dict:
    learned = f"{Path(args.runs) / game / 'learned_partner'}#b"
    return {name: (learned if spec == "LEARNED" else spec) for name, spec in GAMES[game]["partners"].items()}


def run_one(game: str, variant: str, held_out: str, seed: int, args) -> Path:
    """Train against the population without `held_out`, then the held-out evaluation (K episodes, memory on/off)."""
    partners = partners_of(game, args)
    run_dir = Path(args.runs) / game / f"{variant}_minus_{held_out}_s{seed}"
    result = run_dir / "heldout" / "adaptation.json"
    early_result = run_dir / "heldout_early" / "adaptation.json"
    if held_out == "learned" and result.exists() and not early_result.exists() and not (args.fresh or args.reeval):
        evaluate_early(game, run_dir, args)  # evaluated before the early learner joined the zoo
        return run_dir
    if result.exists() and not (args.fresh or args.reeval):
        return run_dir
    t = time.time()
    if not (run_dir / "summary.json").exists() or args.fresh:  # else: trained, only its evaluation is missing
        shutil.rmtree(run_dir, ignore_errors=True)
        also = GAMES[game].get("train_also", {}) if not args.goal_held_out else {}
        if variant in ZOO_PATH:
            also = {name: f"{spec}@path={ZOO_PATH[variant]}" for name, spec in also.items()}
        members = ", ".join([member(spec) for name, spec in partners.items() if name != held_out]
                            + [member(spec) for spec in also.values()])
        learner, overrides = VARIANTS[variant]
        groups = (f"groups=[{{name: learner, agents: [0], {learner}}}, {{name: partner, agents: [1], "
                  f"kind: population, sample: episode, members: [{members}]}}]")
        train([groups, *overrides, f"seed={seed}", f"total_env_steps={args.steps}", f"num_envs={args.num_envs}"],
              preset_of(game), run_dir, {})
    t_train = time.time() - t
    if args.train_only:
        print(f"[trained] {game} {variant} -{held_out} seed {seed}: {t_train:.0f}s", flush=True)
        return run_dir
    cmd = [sys.executable, "-m", "hypermappo.cli", "adapt", str(run_dir), "--partners", partners[held_out],
           "--episodes", str(args.k), "--num-envs", str(args.eval_envs),
           # without a co-player model nothing crosses episodes: memory on and off are the same (test_adaptation)
           "--memory", "both" if any(o.startswith("coplayer.enabled=true") for o in VARIANTS[variant][1]) else "on",
           "--out", str(run_dir / "heldout")]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1"})
    if held_out == "learned":  # the frozen learner from early in training, held out as well
        evaluate_early(game, run_dir, args)
    if any(o.startswith("coplayer.enabled=true") for o in VARIANTS[variant][1]):  # in-distribution: the partners
        seen = [spec for name, spec in partners.items() if name != held_out and name != "random"]  # trained with
        cmd = [sys.executable, "-m", "hypermappo.cli", "adapt", str(run_dir), "--partners", *seen, "--episodes",
               str(args.k), "--num-envs", str(args.eval_envs), "--memory", "on", "--out", str(run_dir / "seen")]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                       env={**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1"})
    (run_dir / "heldout" / "timing.json").write_text(json.dumps({"train_s": t_train,
                                                                 "eval_s": time.time() - t - t_train}))
    print(f"[done] {game} {variant} -{held_out} seed {seed}: train {t_train:.0f}s, eval "
          f"{time.time() - t - t_train:.0f}s", flush=True)
    return run_dir


def evaluate_early(game: str, run_dir: Path, args) -> None:
    """The held-out evaluation of a run that never met a frozen learner against the early one."""
    early = Path(args.runs) / game / "learned_partner_early"
    cmd = [sys.executable, "-m", "hypermappo.cli", "adapt", str(run_dir), "--partners", f"{early}#b", "--episodes",
           str(args.k), "--num-envs", str(args.eval_envs), "--memory", "both", "--out", str(run_dir / "heldout_early")]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1"})


def collect(game: str, args, seeds: list[int]) -> dict:
    """{variant: {memory: {metric: [seeds] (mean over folds), curves: [seeds, K]}}} from the held-out results."""
    out = {}
    for variant in VARIANTS:
        per_memory = {}
        for memory in (True, False):
            seeds_ret, seeds_act, seeds_goal, seeds_step, folds_done = [], [], [], [], set()
            for seed in seeds:
                curves, act, goal, step = [], [], [], []
                paths = [Path(args.runs) / game / f"{variant}_minus_{h}_s{seed}" / "heldout" / "adaptation.json"
                         for h in GAMES[game]["partners"]]
                if not all(p.exists() for p in paths):
                    continue  # a seed counts only with every leave-one-out fold evaluated
                for held_out, path in zip(GAMES[game]["partners"], paths):
                    folds_done.add(held_out)
                    results = json.loads(path.read_text())["results"]
                    if len(results) == 1 and not memory:
                        continue  # no co-player model: evaluated once (memory changes nothing)
                    r = next(x for x in results if x["memory"] == memory)
                    curves.append(r["return"]["mean"])
                    if "action_accuracy" in r:
                        act.append(r["action_accuracy"]["by_episode"])
                        step.append(r["action_accuracy"]["by_step"])
                    if "goal_accuracy" in r:
                        goal.append(r["goal_accuracy"]["by_episode"])
                if curves:
                    seeds_ret.append(np.mean(curves, 0))
                    seeds_act.append(np.nanmean(act, 0) if act else None)
                    seeds_goal.append(np.nanmean(goal, 0) if goal else None)
                    seeds_step.append(np.nanmean(step, 0) if step else None)
            if seeds_ret:
                per_memory[memory] = {"return": np.array(seeds_ret), "folds": sorted(folds_done),
                                      "action_accuracy": None if any(a is None for a in seeds_act)
                                      else np.array(seeds_act),
                                      "goal_accuracy": None if any(g is None for g in seeds_goal)
                                      else np.array(seeds_goal),
                                      "action_accuracy_by_step": None if any(x is None for x in seeds_step)
                                      else np.array(seeds_step)}
        if per_memory:
            out[variant] = per_memory
    return out


def _ms(x: np.ndarray | None) -> str:
    if x is None:
        return "n/a"
    return f"{np.mean(x):.2f} ± {np.std(x, ddof=1) if x.size > 1 else 0.0:.2f}"


def report(args, seeds: list[int]) -> None:
    results, lines = {}, []
    for game in args.games:
        data = collect(game, args, seeds)
        if not data:
            continue
        results[game] = data
        lines += [f"### {game}: held-out partners (leave-one-out), K = {args.k} consecutive episodes", "",
                  "| variant | co-player memory | return ep 1 | return ep K | return mean 1..K | action acc | "
                  "goal acc | seeds | folds |", "|---|---|---|---|---|---|---|---|---|"]
        for variant, per_memory in data.items():
            for memory, d in per_memory.items():
                if d["action_accuracy"] is None and not memory:
                    continue  # no co-player model: memory on and off are the same run (one row)
                ret = d["return"]  # [seeds, K]
                act = d["action_accuracy"]
                goal = d["goal_accuracy"]
                label = ("on" if memory else "off") if d["action_accuracy"] is not None else "n/a (no model)"
                lines.append(f"| {variant} | {label} | {_ms(ret[:, 0])} | {_ms(ret[:, -1])} | "
                             f"{_ms(ret.mean(1))} | {_ms(None if act is None else np.nanmean(act, 1))} | "
                             f"{_ms(None if goal is None else np.nanmean(goal, 1))} | {ret.shape[0]} | "
                             f"{len(d['folds'])} |")
        lines.append("")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"games": args.games, "seeds": seeds, "total_env_steps": args.steps, "num_envs": args.num_envs,
            "partner_steps": args.partner_steps, "K": args.k, "eval_envs": args.eval_envs,
            "variants": VARIANTS, "partners": {g: GAMES[g]["partners"] for g in args.games}}
    jsonable = {g: {v: {("on" if m else "off"): {k: (x.tolist() if isinstance(x, np.ndarray) else x)
                                                 for k, x in d.items()} for m, d in pm.items()}
                    for v, pm in data.items()} for g, data in results.items()}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": jsonable}, indent=2))
    text = "\n".join(lines) + "\n" + args.note
    out.with_suffix(".md").write_text(text)
    print(text)
    plot(results, args, out.with_suffix(".png"))


def plot(results: dict, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(results)
    if not games:
        return
    fig, axes = plt.subplots(3, len(games), figsize=(6 * len(games), 10), squeeze=False)
    k = np.arange(1, args.k + 1)
    for col, game in enumerate(games):
        ax_r, ax_a, ax_s = axes[0, col], axes[1, col], axes[2, col]
        for i, (variant, per_memory) in enumerate(results[game].items()):
            colour = f"C{i}"
            for memory, d in per_memory.items():
                if d["action_accuracy"] is None and not memory:
                    continue  # no co-player model: one curve
                style = "-" if memory else "--"
                ret = d["return"]
                ax_r.plot(k, ret.mean(0), style, color=colour, label=f"{variant}, memory {'on' if memory else 'off'}")
                if ret.shape[0] > 1:
                    ax_r.fill_between(k, ret.mean(0) - ret.std(0), ret.mean(0) + ret.std(0), color=colour, alpha=0.1)
                by_step = d["action_accuracy_by_step"]
                if by_step is not None:
                    ax_s.plot(np.arange(1, by_step.shape[1] + 1), np.nanmean(by_step, 0), style, color=colour,
                              label=f"{variant}, memory {'on' if memory else 'off'}")
                for name, marker in (("action_accuracy", "o"), ("goal_accuracy", "s")):
                    if d[name] is not None:
                        ax_a.plot(k, np.nanmean(d[name], 0), style, marker=marker, ms=3, color=colour,
                                  label=f"{variant} {name.split('_')[0]}, memory {'on' if memory else 'off'}")
        ax_r.set_title(f"{game}: held-out return per consecutive episode")
        ax_r.set_xlabel("episode index k")
        ax_r.set_ylabel("learner return")
        ax_r.legend(fontsize=7)
        ax_a.set_title(f"{game}: co-player model accuracy on held-out partners")
        ax_a.set_xlabel("episode index k")
        ax_a.set_ylabel("accuracy")
        if ax_a.lines:
            ax_a.legend(fontsize=6)
        ax_s.set_title(f"{game}: action accuracy per step (mean over episodes 1..K)")
        ax_s.set_xlabel("step of the episode")
        ax_s.set_ylabel("action accuracy")
        if ax_s.lines:
            ax_s.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", default="staghunt,coingame")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--steps", type=int, default=100_000, help="training env steps per run")
    p.add_argument("--partner-steps", type=int, default=300_000, help="env steps of the learned partner's self-play")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--k", type=int, default=10, help="consecutive held-out episodes")
    p.add_argument("--eval-envs", type=int, default=32, help="envs in parallel in the held-out evaluation")
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_coplayer_adaptation"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "coplayer_adaptation"))
    p.add_argument("--note", default="", help="text appended to the results file (budget, machine load, cuts)")
    p.add_argument("--src", help="source tree the runs import (default: this checkout's src)")
    p.add_argument("--folds", default="", help="only these held-out partners (comma-separated; default: all)")
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--train-only", action="store_true", help="train what is missing, evaluate nothing")
    p.add_argument("--reeval", action="store_true", help="redo the held-out evaluation of trained runs")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--merge", default="",
                   help="inference pages (their .json, comma-separated) whose rows join this report's where it has no "
                        "row of that seed and held-out partner (seeds trained in another session)")
    p.add_argument("--goal-held-out", action="store_true",
                   help="train without the games' noisy variants (train_also): a held-out partner's goal may then be "
                        "one that no training partner pursued")
    args = p.parse_args()
    args.games = [g for g in args.games.split(",") if g]
    args.merge = [m for m in args.merge.split(",") if m]
    if args.src:
        SRC[0] = str(Path(args.src).resolve())
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = [v for v in args.variants.split(",") if v]
    if not args.report_only:
        for game in args.games:
            learned_partner(game, args)
            if "learned" in GAMES[game]["partners"]:
                learned_partner(game, args, early=True)
        folds = [f for f in args.folds.split(",") if f]
        jobs = [(g, v, h, s) for s in seeds for g in args.games for v in variants for h in GAMES[g]["partners"]
                if not folds or h in folds]
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda job: run_one(*job, args), jobs))
    if args.train_only:  # nothing evaluated: the results files at --out stay as they are
        return
    if args.folds:  # the returns table averages over every fold: a subset would overwrite it with an empty one
        print(f"[skip] the returns report (--folds {args.folds}: it needs every fold); the inference report follows")
    else:
        report(args, seeds)
    inference_report(args, seeds)


# ----------------------------------------------------------------------------- partner inference (accuracy)
EARLY = 5  # "the first steps of an episode"


def _first_steps(r: dict, name: str) -> np.ndarray:
    """[K] mean accuracy over the first EARLY steps of each episode index."""
    cells = np.array(r[name]["by_episode_step"], dtype=float)  # [K, T]
    return np.nanmean(cells[:, :EARLY], 1)


def _bootstrap_ci(x: np.ndarray, n: int = 10_000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    means = rng.choice(x, (n, x.size), replace=True).mean(1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def convergence(run_dir: Path) -> dict:
    """From a run's metrics.csv: the learner's mean episode return and the belief's online action accuracy over
    the second and the last sixth of training (is the budget enough for both to level off?)."""
    import csv

    path = run_dir / "metrics.csv"
    if not path.exists():
        return {}
    rows = list(csv.DictReader(path.open()))
    steps = max((float(r["env_steps"]) for r in rows), default=0.0)  # the run's budget
    out = {}
    for name, key in (("return", "learner/episode_return_mean"), ("online_acc", "learner/coplayer_action_acc")):
        for part, (lo, hi) in (("mid", (2 / 6, 3 / 6)), ("end", (5 / 6, 1.0))):
            xs = [float(r[key]) for r in rows if r.get(key) and lo * steps < float(r["env_steps"]) <= hi * steps]
            out[f"{name}_{part}"] = float(np.mean(xs)) if xs else float("nan")
    return out


def folds_of(game: str) -> list[str]:
    """The held-out partners reported: every partner of the zoo, plus the early frozen learner (evaluated in the
    fold that holds out `learned`)."""
    folds = list(GAMES[game]["partners"])
    return folds + ["learned-early"] if "learned" in folds else folds


def inference_rows(game: str, variant: str, args, seeds: list[int]) -> dict | None:
    """Per (seed, held-out partner): the held-out and in-distribution accuracies of one model variant."""
    rows = []
    for seed in seeds:
        for held_out in folds_of(game):
            run_dir = Path(args.runs) / game / f"{variant}_minus_{held_out.removesuffix('-early')}_s{seed}"
            path = run_dir / ("heldout_early" if held_out.endswith("-early") else "heldout") / "adaptation.json"
            if not path.exists():
                continue
            results = {r["memory"]: r for r in json.loads(path.read_text())["results"]}
            on, off = results.get(True), results.get(False)
            if on is None or "action_accuracy" not in on:
                continue
            row = {"seed": seed, "held_out": held_out, "action_acc": on["action_accuracy"]["overall"],
                   "goal_acc_from5": float(np.nanmean(np.array(on["goal_accuracy"]["by_step"], dtype=float)[EARLY - 1:]))
                   if "goal_accuracy" in on else float("nan"),
                   "nll": on["action_nll"]["overall"] if "action_nll" in on else float("nan"),
                   # the oracle's goal belief on the same labels (where its rules are the env's goals): what the
                   # labels allow when the goal policies are exact
                   "oracle_goal_from5": float(np.nanmean(np.array(on["oracle_goal_accuracy"]["by_step"],
                                                                  dtype=float)[EARLY - 1:]))
                   if "oracle_goal_accuracy" in on else float("nan")}
            for base in ("repeat", "frequent", "oracle", "policy"):
                key = f"{base}_action_accuracy"
                row[f"{base}_acc"] = on[key]["overall"] if key in on else float("nan")
            # the best any predictor can do: a frozen learner's own move distribution's mode (it samples its moves);
            # a scripted rule's: the oracle, whose goal policies are the rules themselves
            row["ceiling_acc"] = row["policy_acc"] if np.isfinite(row["policy_acc"]) else row["oracle_acc"]
            first_on = _first_steps(on, "action_accuracy")
            row["first5_ep1"], row["first5_later_on"] = float(first_on[0]), float(np.nanmean(first_on[1:]))
            row["by_step"] = on["action_accuracy"]["by_step"]
            row["by_episode"] = on["action_accuracy"]["by_episode"]
            if "oracle_action_accuracy" in on:
                row["oracle_by_step"] = on["oracle_action_accuracy"]["by_step"]
            if off is not None:
                row["first5_later_off"] = float(np.nanmean(_first_steps(off, "action_accuracy")[1:]))
            row.update(convergence(run_dir))
            seen = run_dir / "seen" / "adaptation.json"
            if seen.exists() and not held_out.endswith("-early"):
                seen_results = json.loads(seen.read_text())["results"]
                for kind, pick in (("scripted", True), ("learned", False)):
                    mine = [r for r in seen_results if r["source"].startswith("scripted:") == pick]
                    for key, name in (("acc", "action_accuracy"), ("ceiling", "policy_action_accuracy"),
                                      ("goal", "goal_accuracy")):
                        xs = [r[name]["overall"] for r in mine if name in r]
                        if xs:
                            row[f"seen_{kind}_{key}"] = float(np.nanmean(xs))
            rows.append(row)
    return rows or None


def merged_rows(game: str, per: dict, pages: list[str]) -> dict:
    """`per` ({variant: rows or None}) with the rows of earlier inference pages (their .json) added where this run has
    no row of that (seed, held-out partner): one table over seeds trained in several sessions, each row as its own
    run measured it (runs are deterministic: a seed run again gives its row again, to the last digit)."""
    for page in pages:
        for v, rows in json.loads(Path(page).read_text())["results"].get(game, {}).items():
            if v not in per:
                continue
            have = {(r["seed"], r["held_out"]) for r in per[v] or []}
            per[v] = sorted([*(per[v] or []), *(r for r in rows if (r["seed"], r["held_out"]) not in have)],
                            key=lambda r: (r["seed"], r["held_out"]))
    return per


def paired_lines(per: dict) -> list[str]:
    """Each variant minus `bayes` on the same seed and held-out partner (the same trained partners and draws):
    held-out action and goal accuracy, and the in-distribution accuracy against the frozen learner, with bootstrap
    CIs (a fold whose goal accuracy is undefined, no labelled step, is left out of that line)."""
    if "bayes" not in per:
        return []
    base = {(r["seed"], r["held_out"]): r for r in per["bayes"]}
    lines = []
    for v, rows in per.items():
        if v == "bayes":
            continue
        for key, what in (("action_acc", "held-out action accuracy"),
                          ("goal_acc_from5", "held-out goal accuracy from step 5"),
                          ("seen_learned_acc", "in-distribution accuracy against the frozen learner")):
            d = np.array([r[key] - base[(r["seed"], r["held_out"])][key] for r in rows
                          if (r["seed"], r["held_out"]) in base and key in r
                          and key in base[(r["seed"], r["held_out"])]], dtype=float)
            d = d[np.isfinite(d)]
            if d.size > 1:
                lo, hi = _bootstrap_ci(d)
                lines.append(f"- {v} minus bayes, {what}: {d.mean():+.3f} (95% bootstrap CI {lo:+.3f} to {hi:+.3f}, "
                             f"{d.size} seed x fold pairs)")
    return lines


def inference_report(args, seeds: list[int]) -> None:
    models = [v for v in ("bayes", "bayes-members", "bayes-own-view", "bayes-goal-readout", "bayes-any-zoo", "bayes-h128",
                          "gru")
              if v in VARIANTS]
    lines, out_json = [], {}
    for game in args.games:
        per = {v: inference_rows(game, v, args, seeds) for v in models}
        per = {v: r for v, r in merged_rows(game, per, args.merge).items() if r}
        if not per:
            continue
        out_json[game] = per
        folds = folds_of(game)
        # the goal accuracy of the Bayesian model, and of its goal read-out where that was run
        goal_cols = [v for v in per if v in ("bayes", "bayes-goal-readout", "bayes-any-zoo")] or ["bayes"]
        lines += [f"### {game}: action-prediction accuracy against held-out partners (leave-one-out, memory on, "
                  f"mean over the K = {args.k} episodes)", "",
                  "| held-out partner | " + " | ".join(f"{v} ({len({r['seed'] for r in rows})} seeds)"
                                                       for v, rows in per.items()) + " | repeat last | most frequent | "
                  "oracle (Bayes over the env's rules) | ceiling | " +
                  "".join(f"goal acc from step 5 ({v}) | " for v in goal_cols) + "goal acc from step 5 (oracle) |",
                  "|---|" + "---|" * (len(per) + 5 + len(goal_cols))]
        ref = per.get("bayes") or next(iter(per.values()))
        for h in folds + ["mean"]:
            def cell(rows, key, h=h):
                xs = np.array([r.get(key, np.nan) for r in rows if h == "mean" or r["held_out"] == h], dtype=float)
                return f"{np.nanmean(xs):.2f} ± {np.nanstd(xs):.2f}" if np.isfinite(xs).any() else "n/a"
            lines.append(f"| {h} | " + " | ".join(cell(rows, "action_acc") for rows in per.values()) +
                         f" | {cell(ref, 'repeat_acc')} | {cell(ref, 'frequent_acc')} | {cell(ref, 'oracle_acc')} | "
                         f"{cell(ref, 'ceiling_acc')} | " +
                         "".join(f"{cell(per[v], 'goal_acc_from5') if v in per else 'n/a'} | " for v in goal_cols) +
                         f"{cell(ref, 'oracle_goal_from5')} |")
        lines.append("")
        for v, rows in per.items():
            seen_s = np.array([r.get("seen_scripted_acc", np.nan) for r in rows], dtype=float)
            seen_l = np.array([r.get("seen_learned_acc", np.nan) for r in rows], dtype=float)
            nll = np.array([r["nll"] for r in rows], dtype=float)
            predictable = np.array([r["action_acc"] for r in rows if r["held_out"] != "random"], dtype=float)
            oracle = np.array([r["oracle_acc"] for r in rows if r["held_out"] != "random"], dtype=float)
            ceiling = np.array([r["ceiling_acc"] for r in rows], dtype=float)
            acc_all = np.array([r["action_acc"] for r in rows], dtype=float)
            if predictable.size:  # (a run of the random fold alone has no predictable held-out partner)
                lines.append(f"- {v}: held-out action accuracy over the partners that can be predicted (every fold "
                             f"but random, whose ceiling is 0.2): {np.nanmean(predictable):.2f} (oracle "
                             f"{np.nanmean(oracle):.2f}); over every fold {np.nanmean(acc_all):.2f} of a ceiling of "
                             f"{np.nanmean(ceiling):.2f} ({np.nanmean(acc_all) / np.nanmean(ceiling):.0%}); "
                             f"held-out NLL {np.nanmean(nll):.3f} (uniform: ln 5 = 1.609)")
            else:
                lines.append(f"- {v}: held-out (the random mover only) action accuracy {np.nanmean(acc_all):.2f}, "
                             f"NLL {np.nanmean(nll):.3f} (uniform: ln 5 = 1.609)")
            seen_c = np.array([r.get("seen_learned_ceiling", np.nan) for r in rows], dtype=float)
            seen_g = np.array([r.get("seen_learned_goal", np.nan) for r in rows], dtype=float)
            learned = (f"the frozen learner {np.nanmean(seen_l):.2f} [{np.nanmin(seen_l):.2f}-{np.nanmax(seen_l):.2f}] "
                       f"over {int(np.isfinite(seen_l).sum())} runs (its own mode, the ceiling: "
                       f"{np.nanmean(seen_c):.2f}; goal accuracy {np.nanmean(seen_g):.2f})"
                       if np.isfinite(seen_l).any() else "no frozen learner")
            lines.append(f"  - in-distribution (its training partners, memory on): the scripted ones but random "
                         f"{np.nanmean(seen_s):.2f}, {learned} (it samples its moves: see the oracle's row for the "
                         f"learned fold)")
            ret_mid = np.array([r.get("return_mid", np.nan) for r in rows], dtype=float)
            ret_end = np.array([r.get("return_end", np.nan) for r in rows], dtype=float)
            acc_mid = np.array([r.get("online_acc_mid", np.nan) for r in rows], dtype=float)
            acc_end = np.array([r.get("online_acc_end", np.nan) for r in rows], dtype=float)
            if np.isfinite(ret_end).any():
                lines.append(f"  - budget: the learner's return over the 3rd and the last 6th of training "
                             f"{np.nanmean(ret_mid):.1f} -> {np.nanmean(ret_end):.1f} "
                             f"({np.nanmean((ret_end - ret_mid) / np.abs(ret_mid)):+.0%} per run, mean); the "
                             f"belief's online action accuracy {np.nanmean(acc_mid):.2f} -> {np.nanmean(acc_end):.2f}")
            d_on = np.array([r["first5_later_on"] - r["first5_ep1"] for r in rows])
            d_mem = np.array([r["first5_later_on"] - r.get("first5_later_off", np.nan) for r in rows], dtype=float)
            d_mem = d_mem[~np.isnan(d_mem)]
            if d_on.size > 1:
                lo, hi = _bootstrap_ci(d_on)
                lines.append(f"  - first {EARLY} steps, episodes 2..K minus episode 1 (memory on): {d_on.mean():+.3f} "
                             f"(95% bootstrap CI {lo:+.3f} to {hi:+.3f}, {d_on.size} seed x fold pairs)")
            if d_mem.size > 1:
                lo, hi = _bootstrap_ci(d_mem)
                lines.append(f"  - first {EARLY} steps of episodes 2..K, memory on minus off: {d_mem.mean():+.3f} "
                             f"(95% CI {lo:+.3f} to {hi:+.3f})")
        lines += paired_lines(per)
        lines.append("")
    if not lines:
        return
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    name = out.name.replace("coplayer_adaptation", "coplayer_inference")
    out = out.with_name(name if name != out.name else name + "_inference")
    seeds = sorted({r["seed"] for per in out_json.values() for rows in per.values() for r in rows})
    meta = {"games": args.games, "seeds": seeds, "merged": args.merge,
            "total_env_steps": args.steps, "num_envs": args.num_envs, "K": args.k,
            "eval_envs": args.eval_envs, "partners": {g: GAMES[g]["partners"] for g in args.games},
            "variants": {v: VARIANTS[v] for v in models}}
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": out_json}, indent=2))
    text = "\n".join(lines) + "\n" + args.note
    out.with_suffix(".md").write_text(text)
    print(text)
    plot_inference(out_json, args, out.with_suffix(".png"))


def plot_inference(data: dict, args, path: Path) -> None:
    """Held-out action accuracy per step of the episode and per episode index, per game and model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not data:
        return
    fig, axes = plt.subplots(2, len(data), figsize=(6 * len(data), 8), squeeze=False)
    for col, (game, per) in enumerate(data.items()):
        for i, (variant, rows) in enumerate(per.items()):
            steps = np.nanmean(np.array([r["by_step"] for r in rows], dtype=float), 0)
            axes[0, col].plot(np.arange(1, steps.size + 1), steps, color=f"C{i}", label=variant)
            eps = np.nanmean(np.array([r["by_episode"] for r in rows], dtype=float), 0)
            axes[1, col].plot(np.arange(1, eps.size + 1), eps, "o-", color=f"C{i}", label=variant)
        oracle = [r["oracle_by_step"] for rows in per.values() for r in rows if "oracle_by_step" in r]
        if oracle:
            o = np.nanmean(np.array(oracle, dtype=float), 0)
            axes[0, col].plot(np.arange(1, o.size + 1), o, "k--", label="oracle")
        axes[0, col].set_title(f"{game}: held-out action accuracy per step (episodes 1..K)")
        axes[0, col].set_xlabel("step of the episode")
        axes[1, col].set_title(f"{game}: held-out action accuracy per episode index (memory on)")
        axes[1, col].set_xlabel("episode index k")
        for ax in axes[:, col]:
            ax.set_ylabel("accuracy")
            ax.set_ylim(0, 1)
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
