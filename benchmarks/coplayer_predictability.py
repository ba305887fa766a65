"""Benchmark: how predictable is a held-out frozen learner from any policy that learnt the same game?

The co-player benchmark (coplayer_adaptation.py) holds out two frozen self-play learners per game (`learned`, and
`learned-early` from early in its self-play) and reports the goal belief's action accuracy against them beside a
ceiling: the partner's own most likely move under its own weights. This script measures what lies between: the
accuracy, at predicting the frozen partner's sampled moves, of
  - ceiling     the partner's own mode (its weights, its own observation),
  - teammate    the mode of the self-play teammate it was trained with (group a of the same run, fed the partner's
                observation): a policy that learnt *this* game beside *this* partner,
  - learner     the mode of each benchmark learner trained with that partner held out (`bayes_minus_learned_s*`,
                fed the partner's observation): the learner's own policy as a model of the partner (HOP's "self as a
                model of others"), per seed,
  - belief      the Bayesian goal belief's held-out accuracy, read from the runs' own `heldout*/adaptation.json`.
Rollouts: the benchmark learner at slot 0 acting by its mode (as `hypermappo adapt` does), the frozen partner at
slot 1 sampling its moves, E envs, `--steps` steps, one seed per learner.

    python benchmarks/coplayer_predictability.py --runs runs/bench_coplayer
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from hypermappo.envs.registry import make_env
from hypermappo.policies.loaded import load_policy

ROOT = Path(__file__).resolve().parents[1]
PARTNERS = {"learned": ("learned_partner", "heldout"), "learned-early": ("learned_partner_early", "heldout_early")}


@torch.no_grad()
def agreement(learner_run: Path, partner_run: Path, num_envs: int, steps: int, seed: int) -> dict[str, float]:
    me = load_policy(learner_run, group="learner", checkpoint="newest_intact", device="cpu")
    partner = load_policy(partner_run, group="b", checkpoint="newest_intact", device="cpu")
    teammate = load_policy(partner_run, group="a", checkpoint="newest_intact", device="cpu")
    env = make_env(me.cfg.env, num_envs, "cpu", **me.cfg.env_kwargs)
    torch.manual_seed(seed)
    s = env.reset(seed=seed)
    hits = {"ceiling": 0, "teammate": 0, "learner": 0}
    n = 0
    for _ in range(steps):
        own, theirs = s.obs[:, 0:1], s.obs[:, 1:2]
        d = partner.actor(theirs).dist
        move = d.sample()
        hits["ceiling"] += int((d.mode() == move).sum())
        hits["teammate"] += int((teammate.actor(theirs).dist.mode() == move).sum())
        hits["learner"] += int((me.actor(theirs).dist.mode() == move).sum())
        n += move.numel()
        s = env.step(torch.cat([me.actor(own).dist.mode(), move], 1))
    return {k: v / n for k, v in hits.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", default="runs/bench_coplayer")
    ap.add_argument("--games", default="staghunt,snowdrift,coingame")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200, help="env steps per rollout (8 episodes of 25)")
    ap.add_argument("--name", default="coplayer_predictability")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for game in args.games.split(","):
        base = Path(args.runs) / game
        learners = sorted(base.glob("bayes_minus_learned_s*"))
        for label, (partner_dir, heldout) in PARTNERS.items():
            if not (base / partner_dir / "summary.json").exists() or not learners:
                print(f"[skip] {game} {label}: no partner run or no bayes_minus_learned_s* learners under {base}")
                continue
            per_seed, belief = [], []
            for run in learners:
                seed = int(run.name.rsplit("_s", 1)[1])
                per_seed.append(agreement(run, base / partner_dir, args.num_envs, args.steps, 1000 + seed))
                result = run / heldout / "adaptation.json"
                if result.exists():
                    on = [r for r in json.loads(result.read_text())["results"] if r["memory"]]
                    belief.append(on[0]["action_accuracy"]["overall"])
            row = {"game": game, "partner": label, "seeds": len(per_seed),
                   **{k: statistics.mean(s[k] for s in per_seed) for k in ("ceiling", "teammate", "learner")},
                   "learner_min": min(s["learner"] for s in per_seed), "learner_max": max(s["learner"] for s in per_seed),
                   "belief": statistics.mean(belief) if belief else None}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = ROOT / "benchmarks" / "results"
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpu": cpu, "runs": args.runs,
            "num_envs": args.num_envs, "steps": args.steps}
    (out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    lines = ["# How predictable is a held-out frozen learner?\n",
             f"{meta['date']}; {cpu}; `python benchmarks/coplayer_predictability.py --runs {args.runs}`: rollouts of "
             f"{args.steps} steps x {args.num_envs} envs, the benchmark learner (slot 0, its mode) with the frozen "
             "partner (slot 1, sampling its moves). Accuracy at predicting the partner's sampled move: its own mode "
             "(ceiling), its self-play teammate's mode and the held-out benchmark learners' own mode, each fed the "
             "partner's observation, and the Bayesian goal belief's held-out accuracy (memory on, from the runs' "
             "`adaptation.json`). Learner: mean over seeds [min-max].\n",
             "| game | held-out partner | seeds | ceiling (its own mode) | its self-play teammate | the learner's own "
             "policy | goal belief (held out) |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        belief = f"{r['belief']:.2f}" if r["belief"] is not None else "n/a"
        lines.append(f"| {r['game']} | {r['partner']} | {r['seeds']} | {r['ceiling']:.2f} | {r['teammate']:.2f} | "
                     f"{r['learner']:.2f} [{r['learner_min']:.2f}-{r['learner_max']:.2f}] | {belief} |")
    (out / f"{args.name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
