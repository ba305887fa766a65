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
            policy (coplayer.feed=policy); on request (--variants) gru-fed, hyper-belief (the belief as Hyper-MAPPO's
            context), subgoal-fed (OMG's subgoal inference fed to the policy). Memory on: the belief's prior (the
            recurrent models' memory) carried over the K episodes; off: reset.
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

from hypermappo.report.adaptation_curves import (  # noqa: E402
    curve_summary,
    normalised_return,
    paired_difference,
    scale_is_resolved,
)

# A member is "rule" or "rule@key=value@..." (params); held-out variants pursue the zoo's goals by moves of their own
# (another path to the same target, the tag rules' other target) with some noise, so no training member is one of them.
GAMES = {
    "hop": {"preset": "staghunt/hop", "coplayers": [1, 2, 3],
            "zoo": {"stag": "staghunt_stag", "hare": "staghunt_hare", "follow": "staghunt_follow",
                    "random": "random"},
            "held_out": {"stag~": "staghunt_stag@path=cols@eps=0.1", "hare~": "staghunt_hare@path=rows@eps=0.1",
                         "follow~": "staghunt_follow@path=cols@eps=0.1"}},
    "hop_snowdrift": {"preset": "staghunt/hop_snowdrift", "coplayers": [1, 2, 3],
                      "zoo": {"drift": "staghunt_stag", "follow": "staghunt_follow", "random": "random"},
                      "held_out": {"drift~": "staghunt_stag@path=cols@eps=0.1",
                                   "follow~": "staghunt_follow@path=rows@eps=0.1"}},
    # zero-sum: MPE simple_tag, the focal learner a prey (its reward is its own) among 3 predators and another prey
    # drawn per slot (each rule chases in a predator seat and flees in a prey seat)
    "tag": {"preset": "mpe/simple_tag_coplayers", "focal": [3], "coplayers": [0, 1, 2, 4],
            "zoo": {"nearest": "tag_nearest", "intercept": "tag_intercept", "target": "tag_target",
                    "random": "random"},
            "held_out": {"nearest~": "tag_nearest@eps=0.2", "intercept~": "tag_intercept@eps=0.2",
                         "target1~": "tag_target@target=1@eps=0.2"}},
    # the coin game (2 players, general-sum): one co-player
    "coingame": {"preset": "coingame/default", "coplayers": [1],
                 "zoo": {"cooperative": "coin_cooperative", "selfish": "coin_selfish", "random": "random"},
                 "held_out": {"cooperative~": "coin_cooperative@path=cols@eps=0.1",
                              "selfish~": "coin_selfish@path=cols@eps=0.1"}},
}
PROTOCOLS = {
    # variants: the focal learner trains against the whole zoo; held out are new co-players with the zoo's goals
    "variants": "new co-players pursuing the zoo's goals by moves of their own",
    # types: leave one goal-directed type out of the zoo and evaluate against it (a goal no co-player pursued in
    # training: a best response the focal learner may never have needed)
    "types": "leave-one-type-out",
}
VARIANTS = {"mappo": [], "belief-fed": ["coplayer.enabled=true", "coplayer.feed=policy"],
            # the belief updated on the goal model's own policies (the online correction sharpens predictions only)
            "belief-fed-model-evidence": ["coplayer.enabled=true", "coplayer.feed=policy",
                                          "coplayer.goal_evidence=model"],
            # more of the grid, on request (--variants): the recurrent model fed, the belief as Hyper-MAPPO's context
            "gru-fed": ["coplayer.enabled=true", "coplayer.model=gru", "coplayer.feed=policy",
                        "coplayer.memory=persistent", "coplayer.epochs=10"],
            "hyper-belief": ["coplayer.enabled=true", "actor=hyper", "hyper.context=[coplayer]"],
            # OMG's subgoal inference (a CVAE over the co-players' future states) fed to the policy
            "subgoal-fed": ["coplayer.enabled=true", "coplayer.model=subgoal", "coplayer.feed=policy",
                            "coplayer.epochs=5"]}
# few-shot training: each draw of co-players plays 10 consecutive episodes (the population's episodes_per_draw), so
# the learner meets, in training, what held-out adaptation asks of it: the same partners episode after episode, with
# the belief carried from one to the next (per-episode draws reset it at almost every episode start)
FEW_SHOT = 10
for _v in ("mappo", "belief-fed", "belief-fed-model-evidence"):
    VARIANTS[f"{_v}-fewshot"] = VARIANTS[_v]
EPISODES_PER_DRAW = {v: FEW_SHOT for v in VARIANTS if v.endswith("-fewshot")}
DEFAULT_VARIANTS = "mappo,belief-fed"
EPISODES_SHOWN = (1, 3)  # and K


def _env():
    return {**os.environ, "PYTHONPATH": SRC[0], "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": ""}


def _member(spec: str) -> str:
    """"rule@k=v@..." -> a population member entry {policy: rule, params: {k: v}}."""
    name, *params = spec.split("@")
    if not params:
        return f"{{policy: {name}}}"
    return f"{{policy: {name}, params: {{{', '.join(p.replace('=', ': ') for p in params)}}}}}"


def train(game: str, members: list[str], overrides: list[str], run_dir: Path, episodes_per_draw: int = 1) -> None:
    listed = ", ".join(_member(m) for m in members)
    groups = (f"groups=[{{name: focal, agents: {GAMES[game].get('focal', [0])}}}, {{name: coplayers, agents: "
              f"{GAMES[game]['coplayers']}, kind: population, draw: slot, episodes_per_draw: {episodes_per_draw}, "
              f"members: [{listed}]}}]")
    preset = GAMES[game]["preset"]
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", preset, groups, *overrides, f"run_dir={run_dir}",
           "torch_threads=1", "log.tensorboard=false", "--quiet"]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=_env())


def budget(args, seed: int) -> list[str]:
    return [f"seed={seed}", f"total_env_steps={args.steps}", f"num_envs={args.num_envs}"]


GRID_RULES = ("staghunt_stag", "staghunt_hare", "staghunt_follow", "coin_cooperative", "coin_selfish")


def zoo_of(game: str, zoo_path: str = "larger") -> dict:
    """The game's training zoo; `zoo_path=any`: its grid rules take every shortest way to their target
    (`path=any`) instead of one fixed habit."""
    zoo = GAMES[game]["zoo"]
    if zoo_path == "larger":
        return zoo
    return {n: (f"{m}@path={zoo_path}" if m.split("@")[0] in GRID_RULES else m) for n, m in zoo.items()}


def folds(game: str, protocol: str, zoo_path: str = "larger") -> dict:
    """{fold: (the focal learner's training members, the held-out co-player)} of a protocol."""
    zoo = zoo_of(game, zoo_path)
    if protocol == "variants":
        return {name: (list(zoo.values()), member) for name, member in GAMES[game]["held_out"].items()}
    return {name: ([m for n, m in zoo.items() if n != name], zoo[name]) for name in zoo if name != "random"}


def _runs(args, game: str) -> Path:
    return Path(args.runs) / game if args.protocol == "variants" else Path(args.runs) / game / "types"


def oracle_run(game: str, fold: str, seed: int, args) -> Path:
    run_dir = _runs(args, game) / f"oracle_{fold}_s{seed}"
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        train(game, [folds(game, args.protocol, args.zoo_path)[fold][1]], budget(args, seed), run_dir)
    return run_dir


def focal_dir(game: str, variant: str, fold: str, seed: int, args) -> Path:
    """The variants protocol trains one focal learner per variant and seed (the whole zoo) for every fold."""
    if args.protocol == "variants":
        return _runs(args, game) / f"{variant}_zoo_s{seed}"
    return _runs(args, game) / f"{variant}_minus_{fold}_s{seed}"


def focal_train(game: str, variant: str, fold: str, seed: int, args) -> Path:
    run_dir = focal_dir(game, variant, fold, seed, args)
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)
        t = time.time()
        train(game, folds(game, args.protocol, args.zoo_path)[fold][0], [*VARIANTS[variant], *budget(args, seed)],
              run_dir, EPISODES_PER_DRAW.get(variant, 1))
        print(f"[trained] {game} {variant} {run_dir.name}: {time.time() - t:.0f}s", flush=True)
    return run_dir


def focal_eval(game: str, variant: str, fold: str, seed: int, args) -> Path:
    """The held-out evaluation of a trained focal learner against `fold`, normalised by its oracle."""
    run_dir = focal_dir(game, variant, fold, seed, args)
    out = run_dir / f"heldout_{fold}"
    if (out / "adaptation.json").exists():
        return run_dir
    mix = "+".join([f"scripted:{folds(game, args.protocol, args.zoo_path)[fold][1]}"] * len(GAMES[game]["coplayers"]))
    cmd = [sys.executable, "-m", "hypermappo.cli", "adapt", str(run_dir), "--held-out", "--partners", mix,
           "--oracles", str(oracle_run(game, fold, seed, args)), "--episodes", str(args.k), "--num-envs",
           str(args.eval_envs), "--memory",
           "both" if any(o.startswith("coplayer.enabled") for o in VARIANTS[variant]) else "on", "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=_env())
    return run_dir


def collect(game: str, args, seeds: list[int]) -> dict:
    """{variant: {memory: {"curves": [runs, K], "pairs": [(seed, fold)], "bounds": [...]}}} of finished runs."""
    out: dict = {}
    for variant in args.variants:
        for memory in (True, False):
            curves, pairs, bounds, raw, steps, subgoal_hits = [], [], [], [], [], []
            for seed in seeds:
                for fold in folds(game, args.protocol, args.zoo_path):
                    path = focal_dir(game, variant, fold, seed, args) / f"heldout_{fold}" / "adaptation.json"
                    if not path.exists():
                        continue
                    report = json.loads(path.read_text())
                    # without a co-player model memory changes nothing: its one result stands for both settings
                    hits = [r for r in report["results"] if r["memory"] == memory] or report["results"]
                    r = hits[0]
                    assert r["training_episodes"] == 0, f"{path}: the held-out mix was met in training"
                    b = r["bounds"]  # normalised here by the library's current rule, from the stored bounds
                    curves.append(normalised_return(r["return"]["mean"], b["random"], b["oracle"],
                                                    resolved=scale_is_resolved(b)).tolist())
                    raw.append(r["return"]["mean"])
                    bounds.append(r["bounds"])
                    pairs.append((seed, fold))
                    steps.append(r.get("recognise", {}).get("recognised"))
                    subgoal_hits.append(r.get("subgoal_hit"))
            if curves:
                out.setdefault(variant, {})[memory] = {"curves": curves, "returns": raw, "pairs": pairs,
                                                       "bounds": bounds, "recognised": steps, "subgoal_hit": subgoal_hits}
    return out


def _common_pairs(a: dict, b: dict) -> list[tuple]:
    """The (seed, fold) pairs two collected results both have, sorted."""
    return sorted(set(map(tuple, a["pairs"])) & set(map(tuple, b["pairs"])))


def _paired_rows(d: dict, key: str, pairs: list[tuple]) -> np.ndarray:
    """d[key]'s rows [len(pairs), K] in the order of `pairs` (each a (seed, fold) of d)."""
    index = {tuple(p): i for i, p in enumerate(d["pairs"])}
    return np.array([d[key][index[p]] for p in pairs], dtype=float)


def baseline_lines(game: str, data: dict, args, seeds: list[int]) -> list[str]:
    """Paired (seed, fold) differences from the same variants trained against the zoo of one-habit rules
    (--baseline-runs, --zoo-path larger) and evaluated against the same held-out co-players, memory on: the
    belief's recognition in episodes 1 and K, the normalised return in episodes 1, 3 and K."""
    base = collect(game, argparse.Namespace(**{**vars(args), "runs": args.baseline_runs, "zoo_path": "larger"}), seeds)
    lines = []
    for variant, per in data.items():
        new, old = per.get(True), base.get(variant, {}).get(True)
        if not (new and old):
            continue
        common = _common_pairs(new, old)
        if not common:
            continue
        cells = []
        for key, what in (("recognised", "settles on the goal"), ("curves", "normalised return")):
            if any(x is None for d in (new, old) for x in d[key]):
                continue
            a, b = _paired_rows(new, key, common), _paired_rows(old, key, common)
            for k in sorted({0, min(2, args.k - 1), args.k - 1} if key == "curves" else {0, args.k - 1}):
                d = paired_difference(a[:, k], b[:, k])
                fewer = f", {d['runs']} with a scale" if d["runs"] < len(common) else ""
                cells.append(f"{what} ep {k + 1} {d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}{fewer}]")
        lines.append(f"- {variant}, memory on, zoo of every shortest way minus zoo of one habit (same seeds, folds and "
                     f"oracles, {len(common)} pairs): " + "; ".join(cells))
    return lines


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
        lines += [f"### {GAMES[game]['preset']}: normalised held-out return (IQM [95% CI] over seeds x folds; "
                  f"held out: {PROTOCOLS[args.protocol]}, folds {', '.join(folds(game, args.protocol, args.zoo_path))})", "",
                  f"| variant | memory | {head} | ep K - ep 1 (mean, 95% CI) | runs with a scale |",
                  "|---|---|" + "---|" * len(shown) + "---|---|"]
        for variant, per in results[game].items():
            for memory, d in per.items():
                c = np.array(d["curves"], dtype=float)
                gain = paired_difference(c[:, -1], c[:, 0])
                lines.append(f"| {variant} | {'on' if memory == 'True' else 'off'} | "
                             + " | ".join(_cell(d["summary"], k) for k in shown)
                             + f" | {gain['mean']:+.3f} [{gain['ci'][0]:+.3f}, {gain['ci'][1]:+.3f}] | "
                             f"{int(np.isfinite(c).all(1).sum())} of {len(c)} |")
        plain = results[game].get("mappo", {}).get("True")
        lines.append("")
        for variant in [v for v in results[game] if v != "mappo"]:
            fed = results[game][variant].get("True")
            if not (fed and plain):
                continue
            common = _common_pairs(fed, plain)
            a, b = _paired_rows(fed, "curves", common), _paired_rows(plain, "curves", common)
            if len(common):
                k3 = min(2, K - 1)
                d = paired_difference(a[:, k3], b[:, k3])
                lines += [f"- {variant} (memory on) minus MAPPO, normalised return at episode {k3 + 1}: "
                          f"{d['mean']:+.3f} (95% CI {d['ci'][0]:+.3f} to {d['ci'][1]:+.3f}, {d['runs']} "
                          f"seed x fold pairs)"]
        sub_on = data.get("subgoal-fed", {}).get(True)
        if sub_on and all(h is not None for h in sub_on["subgoal_hit"]):
            hit = np.array([h["by_episode"] for h in sub_on["subgoal_hit"]], dtype=float)  # [runs, K]
            chance = np.array([h["chance_by_episode"] for h in sub_on["subgoal_hit"]], dtype=float)
            now = [h["now"] for h in sub_on["subgoal_hit"] if "now" in h]
            lines.append(f"- subgoal-fed, memory on: subgoal hit ratio against the held-out co-players, episode 1 "
                         f"{hit[:, 0].mean():.2f}, episode K {hit[:, -1].mean():.2f} (a random co-player state: "
                         f"{chance.mean():.2f}" + (f"; the co-player's own present state, as if it stayed: "
                                                   f"{np.mean(now):.2f}" if now else "") + ")")
        for variant, per in data.items():  # every variant with a goal belief
            for memory in (True, False):
                d = per.get(memory)
                if d and d["recognised"] and all(r is not None for r in d["recognised"]):
                    rec = np.array(d["recognised"], dtype=float)  # [runs, K]
                    gain = paired_difference(rec[:, -1], rec[:, 0])
                    lines.append(f"- {variant}, memory {'on' if memory else 'off'}: fraction of episodes in which the "
                                 f"belief settles on the held-out co-players' true goal, episode 1 "
                                 f"{np.nanmean(rec[:, 0]):.2f}, episode K {np.nanmean(rec[:, -1]):.2f} (K - 1: "
                                 f"{gain['mean']:+.3f}, 95% CI {gain['ci'][0]:+.3f} to {gain['ci'][1]:+.3f})")
        if args.baseline_runs:
            lines += baseline_lines(game, data, args, seeds)
        bounds = [b for per in data.values() for d in per.values() for b in d["bounds"]]
        unresolved = sorted({f"{f} (seed {sd})" for per in data.values() for d in per.values()
                             for (sd, f), b in zip(d["pairs"], d["bounds"]) if not scale_is_resolved(b)})
        if unresolved:
            lines.append(f"- no scale (the oracle does not beat a random focal player by 2 standard errors and a tenth "
                         f"of its return), left out of the normalised figures: {', '.join(unresolved)}")
        # the raw returns behind the ratios, per fold (mean over seeds): where there is no scale, these are the result
        lines += ["", "Episode returns of the focal seat per held-out co-player (mean over seeds), memory on:", "",
                  "| fold | random | oracle | " + " | ".join(f"{v} ep {k + 1}" for v in data for k in (0, K - 1))
                  + " |", "|---|---|---|" + "---|" * (2 * len(data))]
        for fold in folds(game, args.protocol, args.zoo_path):
            cells, lower, upper = [], [], []
            for per in data.values():
                d = per.get(True) or next(iter(per.values()))
                rows = [np.array(r) for (_, f), r in zip(d["pairs"], d["returns"]) if f == fold]
                lower += [b["random"] for (_, f), b in zip(d["pairs"], d["bounds"]) if f == fold]
                upper += [b["oracle"] for (_, f), b in zip(d["pairs"], d["bounds"]) if f == fold]
                cells += [f"{np.mean([r[k] for r in rows]):.2f}" if rows else "" for k in (0, K - 1)]
            if lower:
                lines.append(f"| {fold} | {np.mean(lower):.2f} | {np.mean(upper):.2f} | " + " | ".join(cells) + " |")
        lines.append("")
        lines += [f"- bounds (mean over runs): random {np.mean([b['random'] for b in bounds]):.2f}, oracle "
                  f"{np.mean([b['oracle'] for b in bounds]):.2f} (episode return of the focal seat)", ""]
    cpu = platform.processor() or "unknown CPU"
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    lines += [f"Produced {time.strftime('%Y-%m-%d')} by `python benchmarks/hop_adaptation.py --games "
              f"{','.join(args.games)} --protocol {args.protocol} --variants {','.join(args.variants)} --seeds "
              f"{','.join(map(str, seeds))} "
              f"--steps {args.steps} --num-envs "
              f"{args.num_envs} --k {K} --eval-envs {args.eval_envs}"
              + (f" --zoo-path {args.zoo_path}" if args.zoo_path != "larger" else "") + f"`; {cpu}. {args.note}".rstrip()]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"meta": {"games": args.games, "seeds": seeds, "steps": args.steps,
                                                             "protocol": args.protocol, "zoo_path": args.zoo_path,
                                                             "num_envs": args.num_envs, "K": K, "zoo": GAMES,
                                                             "variants": VARIANTS,
                                                             "episodes_per_draw": EPISODES_PER_DRAW},
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
        for variant, per in per_variant.items():  # a colour per variant, the same in every panel; memory off dashed
            i = list(VARIANTS).index(variant)
            for memory, d in per.items():
                s = d["summary"]
                on = memory == "True"
                label = f"{variant}" + (f", memory {'on' if on else 'off'}" if variant != "mappo" else "")
                if variant == "mappo" and not on:
                    continue
                ax.plot(x, s["iqm"], marker="o" if on else None, ls="-" if on else "--", color=f"C{i}", label=label)
                if on:
                    ax.fill_between(x, [c[0] for c in s["iqm_ci"]], [c[1] for c in s["iqm_ci"]], color=f"C{i}",
                                    alpha=0.12)
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
    p.add_argument("--protocol", default="variants", choices=sorted(PROTOCOLS),
                   help="variants (default): held-out co-players pursue the zoo's goals by moves of their own; "
                        "types: leave one goal-directed type of the zoo out")
    p.add_argument("--zoo-path", default="larger", choices=["larger", "any"],
                   help="the zoo's grid rules walk by one habit (larger: along the larger gap) or by every "
                        "shortest way at random (any)")
    p.add_argument("--baseline-runs", help="runs of the same variants trained against the one-habit zoo "
                                           "(--zoo-path larger): paired differences in the table's notes")
    p.add_argument("--steps", type=int, default=300_000, help="training env steps per run (focal and oracle)")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--k", type=int, default=10, help="consecutive held-out episodes")
    p.add_argument("--eval-envs", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_hop_adaptation"))
    p.add_argument("--out", help="results file stem (default benchmarks/results/hop_adaptation, _types for types)")
    p.add_argument("--note", default="")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--src", help="source tree the runs import (default: this checkout's src; a snapshot lets the "
                                 "tree change meanwhile)")
    args = p.parse_args()
    if args.src:
        SRC[0] = str(Path(args.src).resolve())
    args.games = [g for g in args.games.split(",") if g]
    if args.out is None:
        stem = "hop_adaptation" + ("" if args.protocol == "variants" else "_types")
        args.out = str(ROOT / "benchmarks" / "results" / stem)
    unknown = [g for g in args.games if g not in GAMES]
    if unknown:
        p.error(f"--games {unknown[0]!r} is not one of {sorted(GAMES)}")
    args.variants = [v for v in args.variants.split(",") if v]
    if [v for v in args.variants if v not in VARIANTS]:
        p.error(f"--variants {[v for v in args.variants if v not in VARIANTS][0]!r} is not one of {sorted(VARIANTS)}")
    seeds = [int(s) for s in args.seeds.split(",")]
    if not args.report_only:
        # seed by seed (a cut run still leaves whole seeds): every training run (oracles and focal learners, each
        # directory once), then the held-out evaluations
        with ThreadPoolExecutor(args.workers) as pool:
            for s in seeds:
                jobs = [(oracle_run, (g, f, s, args)) for g in args.games for f in folds(g, args.protocol, args.zoo_path)]
                focal = {focal_dir(g, v, f, s, args): (focal_train, (g, v, f, s, args))
                         for g in args.games for v in args.variants for f in folds(g, args.protocol, args.zoo_path)}
                list(pool.map(lambda job: job[0](*job[1]), [*focal.values(), *jobs]))
                list(pool.map(lambda job: focal_eval(*job, args),
                              [(g, v, f, s) for g in args.games for v in args.variants
                               for f in folds(g, args.protocol, args.zoo_path)]))
    report(args, seeds)


if __name__ == "__main__":
    main()
