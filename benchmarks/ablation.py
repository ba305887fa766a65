"""Hyper-MAPPO ablation grid on MPE simple_spread and the stag hunt, with non-stationarity diagnostics.

Variants: MAPPO shared, MAPPO separate parameters, Hyper-MAPPO with agent-id context, with
observations + attention (last layer generated), with observations + attention + GRU history
(last layer generated); each without and with the regularisers (alpha 0.1 smoothness with a
hard-synced target hypernetwork, K = 10, and beta 0.05 KL alignment; MAPPO variants can only
take the alignment term). Per (env, variant): final evaluation return (mean and 95% bootstrap
CI over seeds), mean per-agent KL per update (kl_sum / N), final SND, and wall time per env step
relative to MAPPO shared in the same benchmark run.

    python benchmarks/ablation.py                           # 3 seeds, default budgets
    python benchmarks/ablation.py --steps-spread 2000000 --steps-staghunt 1000000 --seeds 0,1,2,3,4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from hypermappo.logging import read_metrics
from hypermappo.report.stats import bootstrap_ci

ROOT = Path(__file__).resolve().parents[1]

# per-sample (observation) contexts: a 16-wide encoder and hypernetwork generating a rank-1 increment keep the
# cost per env step within 1.5x of MAPPO (benchmarks/throughput.py); the 64-wide full-rank default is ~3.5x
LEAN_OBS = ["hyper.obs_embed_dim=16", "hyper.hidden=16", "hyper.rank=1"]  # + history_hidden=16 with history
REGULARISERS_HYPER = ["hyper.alpha=0.1", "hyper.beta=0.05", "hyper.target=hard", "hyper.target_interval=10"]
VARIANTS = {
    "mappo_shared": ["actor=mlp"],
    "mappo_separate": ["actor=mlp", "model.share_params=false"],
    "hyper_id": ["actor=hyper", "hyper.context=agent_id", "hyper.lr=1e-3"],
    "hyper_obs_attn": ["actor=hyper", "hyper.context=obs", "hyper.layers=last", "hyper.lr=1e-3", *LEAN_OBS],
    "hyper_obs_attn_gru": ["actor=hyper", "hyper.context=obs,history", "hyper.layers=last", "hyper.lr=1e-3",
                           "ppo.data_chunk_length=25", *LEAN_OBS, "hyper.history_hidden=16"],
}
# the egocentric stag hunt: MAPPO finds the stag in 3/3 seeds there (1/3 with the default absolute-position
# observations), so differences between variants are not drowned by which equilibrium a seed lands in
ENVS = {"spread": "mpe/simple_spread", "staghunt": "staghunt/egocentric"}


def variants() -> dict[str, list[str]]:
    out = {}
    for name, ov in VARIANTS.items():
        out[name] = ov
        reg = REGULARISERS_HYPER if name.startswith("hyper") else ["hyper.beta=0.05"]
        out[name + "+reg"] = ov + reg
    return out


def run_one(env_key: str, variant: str, overrides: list[str], seed: int, args) -> dict:
    run_dir = Path(args.runs) / env_key / f"{variant}_s{seed}"
    steps = args.steps_spread if env_key == "spread" else args.steps_staghunt
    if not (run_dir / "summary.json").exists():
        if run_dir.exists():
            import shutil
            shutil.rmtree(run_dir)
        cmd = [sys.executable, "-m", "hypermappo.cli", "train", ENVS[env_key], *overrides, f"seed={seed}",
               f"total_env_steps={steps}", *([f"num_envs={args.num_envs}"] if args.num_envs else []),
               f"run_dir={run_dir}", "eval_interval=0",
               f"eval_episodes={args.eval_episodes}", "checkpoint_interval=0", "log.tensorboard=false",
               "torch_threads=1", "--quiet"]
        t = time.time()
        res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
        if res.returncode:
            print(f"[fail] {env_key} {variant} s{seed}: {res.stderr.strip().splitlines()[-1:]}", flush=True)
            return {"env": env_key, "variant": variant, "seed": seed, "failed": True}
        print(f"[done] {env_key} {variant} s{seed} in {time.time() - t:.0f}s", flush=True)
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = read_metrics(run_dir)
    kl = [float(r["kl_sum"]) for r in rows if r.get("kl_sum")]
    n_agents = sum(1 for k in rows[0] if k.startswith("kl_agent_")) or 1
    return {"env": env_key, "variant": variant, "seed": seed, "final": summary["eval_return_mean"],
            "kl_per_agent": float(np.mean(kl)) / n_agents if kl else float("nan"),
            "snd": float(rows[-1]["snd"]) if rows[-1].get("snd") else float("nan"),
            "sps": summary["train_sps"], "run_dir": str(run_dir),
            "curve": [(int(r["env_steps"]), float(r["episode_return_mean"])) for r in rows
                      if r.get("episode_return_mean")]}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--envs", default="spread,staghunt")
    p.add_argument("--variants", default=",".join(variants()))
    p.add_argument("--steps-spread", type=int, default=500_000)
    p.add_argument("--steps-staghunt", type=int, default=400_000)
    p.add_argument("--num-envs", type=int, default=0, help="parallel envs per run (0 = the preset's)")
    p.add_argument("--eval-episodes", type=int, default=100)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs", default=str(ROOT / "runs" / "bench_ablation"))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ablation"))
    args = p.parse_args()
    all_variants = variants()
    chosen = [v for v in args.variants.split(",")]
    unknown = [v for v in chosen if v not in all_variants]
    if unknown:
        sys.exit(f"unknown variants {unknown}; expected some of {list(all_variants)}")
    jobs = [(e, v, all_variants[v], int(s)) for s in args.seeds.split(",") for e in args.envs.split(",")
            for v in chosen]
    with ThreadPoolExecutor(args.workers) as pool:
        results = [r for r in pool.map(lambda j: run_one(*j, args), jobs) if not r.get("failed")]

    lines = []
    for env_key in args.envs.split(","):
        steps = args.steps_spread if env_key == "spread" else args.steps_staghunt
        base = [r["sps"] for r in results if r["env"] == env_key and r["variant"] == "mappo_shared"]
        base_sps = float(np.mean(base)) if base else float("nan")
        lines += [(f"\n**{ENVS[env_key]}** ({steps:,} env steps per run, {args.num_envs or 'preset'} envs, "
                   f"{args.eval_episodes} deterministic eval episodes)\n"),
                  ("| variant | seeds | final return (mean [95% CI]) | KL per agent per update | SND | "
                   "time per env step vs MAPPO shared |"), "|---|---|---|---|---|---|"]
        for v in chosen:
            rs = [r for r in results if r["env"] == env_key and r["variant"] == v]
            if not rs:
                continue
            finals = np.array([r["final"] for r in rs])
            lo, hi = bootstrap_ci(finals) if len(finals) > 1 else (finals[0], finals[0])
            rel = base_sps / float(np.mean([r["sps"] for r in rs]))
            lines.append(f"| {v} | {len(rs)} | {finals.mean():.2f} [{lo:.2f}, {hi:.2f}] | "
                         f"{np.mean([r['kl_per_agent'] for r in rs]):.4f} | {np.mean([r['snd'] for r in rs]):.3f} | "
                         f"{rel:.2f}× |")
    lines += ["", (f"KL per agent per update: mean over updates of kl_sum / N (policy change per update). SND: System "
                   f"Neural Diversity at the last update (0 for actors that cannot tell agents apart on a shared "
                   f"observation pool: shared MAPPO and observation contexts). Time per env step: from each run's "
                   f"train_sps with {args.workers} runs in parallel (indicative; the side-by-side cost is "
                   f"benchmarks/results/throughput.md).")]
    md = "\n".join(lines)
    print(md)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(md + "\n")
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results}, indent=2))
    plot(results, args, out.with_suffix(".png"))
    print(f"saved {out.with_suffix('.md')}, .json and .png")


def plot(results, args, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = args.envs.split(",")
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs), 4.2), squeeze=False)
    for ax, env_key in zip(axes[0], envs):
        for v in args.variants.split(","):
            rs = [r for r in results if r["env"] == env_key and r["variant"] == v]
            if not rs:
                continue
            n = min(len(r["curve"]) for r in rs)
            steps = np.array([s for s, _ in rs[0]["curve"][:n]])
            ys = np.array([[y for _, y in r["curve"][:n]] for r in rs])
            k = max(1, n // 30)  # light smoothing for readability: a moving average that shrinks at the ends
            counts = np.convolve(np.ones(n), np.ones(k), mode="same")  # (zero padding would bend them to 0)
            ys = np.stack([np.convolve(y, np.ones(k), mode="same") / counts for y in ys])
            ax.plot(steps, ys.mean(0), label=v, linestyle="--" if v.endswith("+reg") else "-")
        ax.set_title(ENVS[env_key])
        ax.set_xlabel("env steps")
        ax.set_ylabel("training episode return (mean over seeds)")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
