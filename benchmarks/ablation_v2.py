"""Ablation v2: can the Hyper-MAPPO variants be told apart from MAPPO (and each other) on tasks that need it?

benchmarks/ablation.py stopped at 500k steps of simple_spread, where every variant sits at ~-18 with
overlapping CIs. This grid uses two tasks built to separate them:

  spec     the specialisation game (`matrix/specialisation`, n agents pick one of n actions, team
           reward = fraction of distinct actions; normalised score 1 = everyone has their own action). Score:
           the final policy's evaluation return / episode length (deterministic actions).
  switch   the stag hunt with a scripted partner that hunts the stag until `--switch-step`, then hares
           (`staghunt/egocentric`, the setup of benchmarks/switch_partner.py; the learner group is slot 0 alone, so
           shared vs separate MAPPO and an agent-id context are the same network there). Score: the learner's
           training return over the last 10 updates.

Variants (the `hyper` ones are actor=hyper; `+reg` adds the regularisers hyper.alpha=0.1 (smoothness; with an
agent-id context it needs the Polyak target, hyper.target=polyak) and hyper.beta=0.05 (KL alignment)):
  mappo_shared     one shared network + one-hot agent id in the input (MAPPO as usually run)
  mappo_separate   separate parameters per agent (one batched network)
  mappo_hcritic    mappo_shared with the hypernetwork critic (critic.arch=hyper)
  hyper_id         context agent_id (HyperMARL's actor)
  hyper_attn       context obs, attention over all agents' observations
  hyper_gru        context obs + history (attention + a GRU over the agent's observations)
  hyper_accum      accumulated increments: hyper.output=accumulate, theta_t = theta_{t-1} + delta_t (context obs)
  each hyper_* also as hyper_*_reg.
Measured per run: the score; the mean per-agent KL between consecutive policies per update (diagnostics
kl_sum / N, every `--diag-every` updates); SND (system neural diversity) of the final diagnosed update.
Per variant: mean with a 95% percentile-bootstrap CI over seeds and the IQM with its CI
(hypermappo.report.stats); per variant vs mappo_shared: the difference of means and its bootstrap CI (seeds
resampled independently per arm) -- "significant" means that CI excludes 0.

    python benchmarks/ablation_v2.py --tasks spec --variants mappo_shared,mappo_separate,hyper_id --seeds 0,1,2,3,4
    python benchmarks/ablation_v2.py --report-only        # table + plot from the finished runs
Runs are resumable: a run with a summary.json is not rerun.

The v3 grid (specialisation game at n = 16 with ppo.gamma=0, the switching-partner stag hunt; the docs'
benchmark page "Ablation v3"):

    python benchmarks/ablation_v2.py --tasks spec --n 16 --spec-steps 150000 --spec-gamma 0 --diag-every 10 \
        --grad-cos-samples 1 --variants mappo_shared,mappo_separate,hyper_id,hyper_id_attn,hyper_id_gru,\
hyper_id_accum,hyper_id_reg,hyper_id_attn_reg,hyper_id_gru_reg,hyper_id_accum_reg --runs runs/ablation_v3
    python benchmarks/ablation_v2.py --tasks switch --switch-steps 600000 --switch-step 150000 --variants \
        mappo_shared,hyper_id,hyper_attn,hyper_accum,hyper_gru,hyper_id_reg,hyper_attn_reg,hyper_accum_reg,\
hyper_gru_reg --runs runs/ablation_v3
    python benchmarks/ablation_v2.py --report-only --n 16 --spec-steps 150000 --spec-gamma 0 --switch-steps 600000 \
        --switch-step 150000 --runs runs/ablation_v3 --out benchmarks/results/ablation_v3

With the preset's gamma 0.99, separate-parameter MAPPO at n = 16 stayed at the random-team level (0.64-0.67) in two
probes (E = 256 through 420k env steps; E = 64 through 90k); the game's reward at a step does not depend on
earlier actions, so gamma = 0 is unbiased there, and with it separate-parameter MAPPO converges (1.0) by ~100k env
steps.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
HYPER_LR = 1e-3  # as benchmarks/specialisation.py (config default 1e-4)
REG_OBS = ["hyper.alpha=0.1", "hyper.beta=0.05"]
REG_ID = ["hyper.alpha=0.1", "hyper.target=polyak", "hyper.beta=0.05"]  # static context: smoothness needs a target
VARIANTS = {
    "mappo_shared": ["actor=mlp", "model.share_params=true", "model.agent_id=true"],
    "mappo_separate": ["actor=mlp", "model.share_params=false"],
    "mappo_hcritic": ["actor=mlp", "model.share_params=true", "model.agent_id=true", "critic.arch=hyper"],
    "hyper_id": ["actor=hyper", "hyper.context=[agent_id]", f"hyper.lr={HYPER_LR}"],
    "hyper_attn": ["actor=hyper", "hyper.context=[obs]", "hyper.obs_aggregation=attention", f"hyper.lr={HYPER_LR}"],
    "hyper_gru": ["actor=hyper", "hyper.context=[obs,history]", "hyper.obs_aggregation=attention",
                  f"hyper.lr={HYPER_LR}"],
    "hyper_accum": ["actor=hyper", "hyper.context=[obs]", "hyper.output=accumulate", "hyper.obs_aggregation=own",
                    f"hyper.lr={HYPER_LR}"],
}
# the specialisation game gives every agent the same observation, so an observation-only context yields the same
# weights for all agents; these add the agent id to it (on the one-learner stag hunt the id is a constant)
for _name in ("hyper_attn", "hyper_gru", "hyper_accum"):
    VARIANTS[f"hyper_id_{_name[6:]}"] = [o.replace("hyper.context=[", "hyper.context=[agent_id,") for o in VARIANTS[_name]]
for _name in ("hyper_id", "hyper_attn", "hyper_gru", "hyper_accum", "hyper_id_attn", "hyper_id_gru", "hyper_id_accum"):
    VARIANTS[f"{_name}_reg"] = VARIANTS[_name] + (REG_ID if _name == "hyper_id" else REG_OBS)
REFERENCE = "mappo_shared"
TASKS = {"spec": "matrix/specialisation", "switch": "staghunt/egocentric"}
WINDOW = 10  # updates averaged for the switch task's final score
PLATEAU = 0.1  # fraction of training in each of the two windows compared by the plateau check


def run_note(args, tasks: list[str]) -> str:
    """The report's opening paragraph: the grid as actually run (from the command's options), for `tasks`."""
    gamma = f"ppo.gamma={args.spec_gamma}" if args.spec_gamma is not None else "the preset's ppo.gamma (0.99)"
    prior = (f" Rows marked \"prior run\" are entries of {args.prior} ({args.prior_label}) for variants whose config "
             "is unchanged since." if args.prior else "")
    parts = []
    if "spec" in tasks:
        parts.append(f"Specialisation game: n = {args.n}, E = {args.num_envs}, {args.spec_steps:,} env steps, {gamma}, "
                     "5 epochs x 2 mini-batches; score = deterministic evaluation return / episode length.")
    if "switch" in tasks:
        parts.append(f"Stag hunt: a scripted partner hunts the stag until {args.switch_step:,} env steps, then hares; "
                     f"{args.switch_steps:,} env steps, E = {args.switch_envs}; score = the learner's training return "
                     f"over the last {WINDOW} updates.")
    return ("# Ablation v2: Hyper-MAPPO variants vs MAPPO on the specialisation game and the switching-partner stag "
            "hunt\n\n" + " ".join(parts) +
            f" Seeds: {args.seeds}.{prior} `sig.` = the 95% bootstrap CI of the difference of means excludes 0; nothing "
            f"else is claimed. `plateau` = the change of the training curve between the last {PLATEAU:.0%} of updates "
            f"and the {PLATEAU:.0%} before them, mean over seeds [95% bootstrap CI]: a CI that contains 0 means no "
            "detectable rise or fall at the end of training (the budget was long enough for that variant).\n")


def _groups_override(variant_overrides: list[str], switch_step: int) -> str:
    """The switch task: the variant's keys become the learner group's overrides (slot 0); slot 1 is scripted."""
    learner: dict[str, object] = {}
    for o in variant_overrides:
        key, value = o.split("=", 1)
        section, _, name = key.rpartition(".")
        if section:
            learner.setdefault(section, {})[name] = value  # type: ignore[index]
        else:
            learner[key] = value
    body = ", ".join(f"{k}: {{{', '.join(f'{n}: {v}' for n, v in vals.items())}}}" if isinstance(vals, dict)
                     else f"{k}: {vals}" for k, vals in learner.items())
    return (f"groups=[{{name: learner, agents: [0], {body}}}, "
            f"{{name: partner, agents: [1], kind: scripted, policy: staghunt_stag, "
            f"switch: [{{at_step: {switch_step}, kind: scripted, policy: staghunt_hare}}]}}]")


def run_overrides(task: str, variant: str, seed: int, args, run_dir: Path) -> list[str]:
    common = [f"seed={seed}", f"run_dir={run_dir}", "checkpoint_interval=0", "log.tensorboard=false",
              "log.progress=false", "torch_threads=1", f"diagnostics.every={args.diag_every}",
              f"diagnostics.grad_cos_samples={args.grad_cos_samples}"]
    if task == "spec":
        return [*VARIANTS[variant], f"env_kwargs={{n_agents: {args.n}, episode_length: 10}}", "rollout_length=10",
                f"num_envs={args.num_envs}", f"total_env_steps={args.spec_steps}", "ppo.ppo_epoch=5",
                "ppo.num_mini_batch=2", "eval_episodes=100", "eval_interval=0",
                *([f"ppo.gamma={args.spec_gamma}"] if args.spec_gamma is not None else []), *common]
    # the learner has one agent: model.share_params / agent_id change nothing, drop them from the group entry
    learner = [o for o in VARIANTS[variant] if not o.startswith(("model.share_params", "model.agent_id"))]
    if any("history" in o or "accumulate" in o for o in learner):
        learner.append("ppo.data_chunk_length=25")  # recurrent training: chunks must divide rollout_length 25
    return [_groups_override(learner, args.switch_step), f"total_env_steps={args.switch_steps}",
            f"num_envs={args.switch_envs}", "eval_interval=0", "eval_episodes=32", *common]


def run_one(task: str, variant: str, seed: int, args) -> None:
    run_dir = Path(args.runs) / task / f"{variant}_s{seed}"
    if (run_dir / "summary.json").exists():
        return
    if run_dir.exists():
        shutil.rmtree(run_dir)
    cmd = [sys.executable, "-m", "hypermappo.cli", "train", TASKS[task], *run_overrides(task, variant, seed, args,
                                                                                       run_dir)]
    t = time.time()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    res = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    status = "done" if res.returncode == 0 else f"FAILED ({res.stderr.strip().splitlines()[-1:]})"
    print(f"[{status}] {task} {variant} seed {seed} in {time.time() - t:.0f}s", flush=True)


# ------------------------------------------------------------------------------------------- reading

def read_run(run_dir: Path, task: str) -> dict | None:
    if not (run_dir / "summary.json").exists():
        return None
    summary = json.loads((run_dir / "summary.json").read_text())
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    prefix = "learner/" if task == "switch" else ""
    train = [r for r in rows if r.get(f"{prefix}episode_return_mean")]
    steps = np.array([int(r["env_steps"]) for r in train])
    ret = np.array([float(r[f"{prefix}episode_return_mean"]) for r in train])
    kl_cols = [k for k in rows[0] if k.startswith(f"{prefix}kl_agent_")]
    diag = [r for r in rows if r.get(f"{prefix}kl_sum")]
    kl = float(np.mean([float(r[f"{prefix}kl_sum"]) / len(kl_cols) for r in diag])) if diag else float("nan")
    snd = float(diag[-1][f"{prefix}snd"]) if diag and diag[-1].get(f"{prefix}snd") else float("nan")
    if task == "spec":
        score = summary["eval_return_mean"] / 10.0  # episode_length 10 -> [0, 1]
        curve = ret / 10.0
    else:
        score, curve = float(ret[-WINDOW:].mean()), ret
    diag_every = yaml.safe_load((run_dir / "config.yaml").read_text())["diagnostics"]["every"]
    return {"score": score, "kl": kl, "snd": snd, "steps": steps, "curve": curve, "wall_s": summary.get("wall_s"),
            "plateau": plateau_change(curve), "diag_every": diag_every}


def plateau_change(curve: np.ndarray) -> float:
    """Mean of the last PLATEAU of a training curve minus the mean of the PLATEAU before it (NaN if too short)."""
    w = int(len(curve) * PLATEAU)
    if w < 2:
        return float("nan")
    return float(curve[-w:].mean() - curve[-2 * w:-w].mean())


def not_run_reasons(task: str, missing: list[str]) -> dict[str, list[str]]:
    """{reason: variants} for the variants a report has no runs of."""
    reasons: dict[str, list[str]] = {}
    for v in missing:
        if task == "switch" and (v == "mappo_separate" or v.startswith("hyper_id_") and v != "hyper_id_reg"):
            why = ("one learning agent: the same network as mappo_shared / the hyper_* variant, whose agent id is a "
                   "constant")
        elif task == "spec" and v.startswith(("hyper_attn", "hyper_gru", "hyper_accum")):
            why = ("every agent observes the same thing in this game, so an observation-only context gives every agent "
                   "the same weights: deterministic score 1/n by construction (measured at n = 8, ablation_v2.md); "
                   "cut for compute")
        else:
            why = "cut for compute"
        reasons.setdefault(why, []).append(v)
    return reasons


def prior_tables(args) -> dict:
    """{task: {variant: entry}} of an earlier run's JSON, for the variants named by --prior-variants only: those
    whose resolved config this code leaves unchanged (an observation context's size defaults changed on 2026-11-24,
    so its earlier runs are not comparable)."""
    if not args.prior:
        return {}
    tables = json.loads(Path(args.prior).read_text())["tables"]
    keep = set(args.prior_variants.split(","))
    return {task: {v: e for v, e in t.items() if v in keep} for task, t in tables.items()}


def diff_ci(a: np.ndarray, b: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap CI of mean(a) - mean(b), each arm's seeds resampled independently."""
    rng = np.random.default_rng(seed)
    da = a[rng.integers(0, a.size, (resamples, a.size))].mean(1)
    db = b[rng.integers(0, b.size, (resamples, b.size))].mean(1)
    d = da - db
    return float(np.quantile(d, 0.025)), float(np.quantile(d, 0.975))


def report(args) -> None:
    from hypermappo.report.stats import summarize

    out = Path(args.out)
    present = [t for t in TASKS if any((Path(args.runs) / t).glob("*/summary.json")) or t in prior_tables(args)]
    tables, curves, lines = {}, {}, [run_note(args, present)]
    for task in TASKS:
        rows = {}
        for variant in VARIANTS:
            runs = [r for s in range(args.max_seed + 1)
                    if (r := read_run(Path(args.runs) / task / f"{variant}_s{s}", task)) is not None]
            if runs:
                rows[variant] = runs
        prior = prior_tables(args).get(task, {})
        if not rows and not prior:
            continue
        ref = (np.array([r["score"] for r in rows[REFERENCE]]) if REFERENCE in rows
               else np.array(prior.get(REFERENCE, {}).get("per_seed", [])))
        table = {}
        for variant in VARIANTS:  # variants not run here: the prior run's entry (same config), scores per seed
            if variant in prior and variant not in rows:
                entry = {k: v for k, v in prior[variant].items() if k != "diff_vs_ref"}
                x = np.array(entry["per_seed"])
                if variant != REFERENCE and ref.size >= 2 and x.size >= 2:
                    lo, hi = diff_ci(x, ref)
                    entry["diff_vs_ref"] = {"mean": float(x.mean() - ref.mean()), "ci": [lo, hi],
                                            "significant": bool(lo > 0 or hi < 0)}
                table[variant] = {**entry, "source": f"prior run ({args.prior_label})"}
        for variant, runs in rows.items():
            x = np.array([r["score"] for r in runs])
            entry = {**summarize(x), "per_seed": x.tolist(),
                     "kl_per_agent_per_update": summarize([r["kl"] for r in runs]),
                     "snd_final": summarize([r["snd"] for r in runs]),
                     "plateau": summarize([r["plateau"] for r in runs]),
                     "wall_s_mean": float(np.mean([r["wall_s"] for r in runs])),
                     "env_steps": int(runs[0]["steps"][-1]) if runs[0]["steps"].size else 0}
            if variant != REFERENCE and ref.size >= 2 and x.size >= 2:
                lo, hi = diff_ci(x, ref)
                entry["diff_vs_ref"] = {"mean": float(x.mean() - ref.mean()), "ci": [lo, hi],
                                        "significant": bool(lo > 0 or hi < 0)}
            table[variant] = entry
        tables[task] = table
        curves[task] = {v: rs for v, rs in rows.items()}
        every = sorted({r["diag_every"] for runs in rows.values() for r in runs})
        lines += [f"### {task}: {TASKS[task]}" + (f", n = {args.n}" if task == "spec" else ""), "",
                  f"Diagnostics (per-agent KL, SND) every {', '.join(map(str, every))} updates in these runs.", "",
                  "| variant | seeds | env steps | final score mean [95% CI] | IQM [95% CI] | vs mappo_shared: "
                  "diff [95% CI] | per-agent KL / update | final SND | plateau [95% CI] | wall s/run |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        table = {v: table[v] for v in VARIANTS if v in table}
        for variant, e in table.items():
            d = e.get("diff_vs_ref")
            dtxt = (f"{d['mean']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]{' **sig.**' if d['significant'] else ''}"
                    if d else "reference" if variant == REFERENCE else "n/a")
            k, s = e["kl_per_agent_per_update"], e["snd_final"]
            name = f"{variant} (prior run)" if "source" in e else variant
            pl = e.get("plateau")
            ptxt = f"{pl['mean']:+.3f} [{pl['ci_low']:+.3f}, {pl['ci_high']:+.3f}]" if pl else "–"
            lines.append(f"| {name} | {e['n']} | {e['env_steps']:,} | {e['mean']:.3f} [{e['ci_low']:.3f}, "
                         f"{e['ci_high']:.3f}] | {e['iqm']:.3f} [{e['iqm_ci_low']:.3f}, {e['iqm_ci_high']:.3f}] | "
                         f"{dtxt} | {k['mean']:.2e} | {s['mean']:.3f} | {ptxt} | {e['wall_s_mean']:.0f} |")
        pairs = []  # every pair of variants: is the difference of mean final scores significant?
        names = list(table)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                xa, xb = np.array(table[a]["per_seed"]), np.array(table[b]["per_seed"])
                if xa.size < 2 or xb.size < 2:
                    continue
                lo, hi = diff_ci(xa, xb)
                pairs.append({"a": a, "b": b, "diff": float(xa.mean() - xb.mean()), "ci": [lo, hi],
                              "significant": bool(lo > 0 or hi < 0)})
        table["_pairs"] = pairs
        lines += ["", "Pairwise difference of mean final scores (a - b) [95% bootstrap CI]:", ""]
        lines += [f"- {p['a']} - {p['b']}: {p['diff']:+.3f} [{p['ci'][0]:+.3f}, {p['ci'][1]:+.3f}] -> "
                  f"{'significant' if p['significant'] else 'not significant'}" for p in pairs]
        missing = [v for v in VARIANTS if v not in table]
        if missing:
            lines += ["", f"Not run for {task}: " + "; ".join(f"{', '.join(vs)} ({why})"
                                                           for why, vs in not_run_reasons(task, missing).items()) + "."]
        lines.append("")
    load = os.getloadavg()
    lines += [f"Machine: 2 shared CPU cores, each run 1 torch thread, at most 2 runs in parallel; load average at "
              f"report time {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1 / 5 / 15 min; other jobs share the "
              "cores), so wall s/run is only a rough cost. Per-agent KL = kl_sum / N averaged over the diagnosed "
              "updates; SND at the last diagnosed update. Reproduce: `python benchmarks/ablation_v2.py` with the options in "
              "ablation_v2.json's meta."]
    meta = {k: v for k, v in vars(args).items() if k not in ("report_only",)}
    meta["variants"] = VARIANTS
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "tables": tables}, indent=2))
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(curves, out.with_suffix(".png"))


def plot(curves: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hypermappo.report.stats import bootstrap_curve_ci

    fig, axes = plt.subplots(1, len(curves), figsize=(7 * len(curves), 4.5), squeeze=False)
    for ax, (task, rows) in zip(axes[0], curves.items()):
        for variant, runs in rows.items():
            n = min(r["curve"].size for r in runs)
            c = np.stack([r["curve"][:n] for r in runs])  # [seeds, updates]
            steps = runs[0]["steps"][:n]
            lo, hi = bootstrap_curve_ci(c)
            ax.plot(steps, c.mean(0), label=f"{variant} ({len(runs)})", lw=1.2,
                    ls="-" if variant.startswith("mappo") else "--")
            ax.fill_between(steps, lo, hi, alpha=0.15)
        ax.set_xlabel("env steps")
        ax.set_ylabel("training return / episode length" if task == "spec" else "learner training return")
        ax.set_title(f"{task}: mean over seeds, 95% bootstrap band")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="spec,switch")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--seeds", default="0,1,2,3,4")
    p.add_argument("--n", type=int, default=8, help="agents in the specialisation game")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--spec-steps", type=int, default=120_000)
    p.add_argument("--spec-gamma", type=float, default=None,
                   help="ppo.gamma for the specialisation game (default: the preset's 0.99). Its reward at a step does "
                        "not depend on earlier actions, so 0 is unbiased there and far less noisy: at n = 16 MAPPO "
                        "stays at the random-team level with 0.99 and converges with 0")
    p.add_argument("--switch-steps", type=int, default=300_000)
    p.add_argument("--switch-step", type=int, default=150_000)
    p.add_argument("--switch-envs", type=int, default=64)
    p.add_argument("--diag-every", type=int, default=4, help="diagnostics (per-agent KL, SND) every this many updates")
    p.add_argument("--grad-cos-samples", type=int, default=128, help="gradient-cosine samples (not reported here)")
    p.add_argument("--workers", type=int, default=2, help="runs in parallel (one torch thread each)")
    p.add_argument("--max-seed", type=int, default=9, help="report: read seeds 0..max-seed that finished")
    p.add_argument("--runs", default=str(ROOT / "runs" / "ablation_v2"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ablation_v2"))
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--prior", help="an earlier run's ablation_v2 JSON: its entries stand in for variants with no run "
                                   "in --runs (scores per seed, KL / SND as summarised then)")
    p.add_argument("--prior-variants", default="mappo_shared,mappo_separate,mappo_hcritic,hyper_id,hyper_id_reg",
                   help="which of the prior run's variants to use (configs unchanged since)")
    p.add_argument("--prior-label", default="2026-11-23")
    args = p.parse_args()
    if not args.report_only:
        unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
        if unknown:
            raise SystemExit(f"--variants: unknown {unknown}; expected some of {list(VARIANTS)}")
        jobs = [(t, v, int(s)) for s in args.seeds.split(",") for t in args.tasks.split(",")
                for v in args.variants.split(",")]
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda job: run_one(*job, args), jobs))
    report(args)


if __name__ == "__main__":
    main()
