"""Training throughput of the real training loop (collect + PPO update) per algorithm / actor / env / E, as a table.

What one row measures, in a fresh Python process (so its memory high-water mark and RNG state are its own):
an `Experiment` is built from the config, then warm-up iterations run untimed, then each timed iteration does
what `Experiment.run()` does per update (`collect()`, the diagnostics when due, `algo.update()`, the
live-component audit) and is followed by one more `algo.update()` on the same filled buffer: the *compute
floor*, i.e. the update's forward + backward passes and optimiser steps with no collection. Interleaving the
floor with the end-to-end iterations puts both under the same machine load, so `e2e / floor` (time per env step
end to end over update-only time per env step) stays meaningful on a shared machine.

- env-steps/s (e2e) = T x E / median over iterations of (collect + update [+ diagnostics]) seconds.
- peak RSS = `resource.getrusage(RUSAGE_SELF).ru_maxrss` of the row's process (imports included).
- A row with `gemm_floor` (speed_vs_peers.py's eager rows) also reports `gemm_s`: the update's matrix multiplies
  alone (`gemm_floor_s`), timed after the timed iterations and after peak RSS is read.
- Benchmarks run with `diagnostics.every=0 diagnostics.audit_updates=0`, except the `+diag` row, which keeps
  the defaults (every update: per-agent KL, gradient cosine, SND; audit after 3 updates) to show their cost.
- MAPPO reference hyperparameters: rollout_length 25, ppo_epoch 10, one mini-batch, hidden 64,64.

    python benchmarks/throughput.py                       # standard matrix, ~20 min on 2 cores
    python benchmarks/throughput.py --quick --only 'mappo/*/1024,hyper-id/*/1024'
    python benchmarks/throughput.py --baseline HEAD~1 --only 'mappo/vmas*'   # before/after, interleaved
    hypermappo bench --quick                               # same code, through the CLI

Writes benchmarks/results/<name>.{json,md} (default name `throughput`) and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parents[1]

# observation contexts as benchmarks/ablation.py runs them: 16-wide attention encoder and hypernetwork, rank-1
# increments (since issue 17 also the config defaults for an obs context; the former defaults, 64-wide and full
# rank, are the hyper-obs-last-wide row)
LEAN_OBS = ["hyper.obs_embed_dim=16", "hyper.hidden=16", "hyper.rank=1"]
# MAPPO reference hyperparameters; diagnostics off (the +diag row turns them back on)
BASE = ["rollout_length=25", "ppo.ppo_epoch=10", "ppo.num_mini_batch=1", "model.hidden_sizes=[64,64]",
        "diagnostics.every=0", "diagnostics.audit_updates=0", "log.tensorboard=false", "log.progress=false"]
# rows are eager (ppo.compile=auto stays off at the default 100k env steps; each row records `compiled`) unless
# they say ppo.compile=on: issue 17's compiled rows at the main point and at JaxMARL's settings
COMPILED = ["ppo.compile=on"]
DEFAULT_DIAG = ["diagnostics.every=1", "diagnostics.audit_updates=3"]
VARIANTS = {
    "mappo": ["algo=mappo", "actor=mlp"],
    "ippo": ["algo=ippo", "actor=mlp"],
    "hyper-id": ["algo=mappo", "actor=hyper", "hyper.context=[agent_id]"],
    "hyper-obs-last": ["algo=mappo", "actor=hyper", "hyper.context=[obs]", "hyper.layers=last", *LEAN_OBS],
    "hyper-obs-all": ["algo=mappo", "actor=hyper", "hyper.context=[obs]", "hyper.layers=all", *LEAN_OBS],
}
# other forms of the observation context, at the main point only
OBS_LAST = ["algo=mappo", "actor=hyper", "hyper.context=[obs]", "hyper.layers=last"]
EXTRA_OBS = {
    "hyper-obs-last-1head": ([*OBS_LAST, *LEAN_OBS, "hyper.attention_heads=1", "hyper.mlp_layers=1"],
                             "single-head attention, one hypernetwork layer"),
    "hyper-obs-last-mean": ([*OBS_LAST, *LEAN_OBS, "hyper.obs_aggregation=mean"], "mean-pooled instead of attention"),
    "hyper-obs-last-wide": ([*OBS_LAST, "hyper.obs_embed_dim=64", "hyper.hidden=64", "hyper.rank=0"],
                            "64-wide, full rank, 4 heads, 2 layers: the config defaults before issue 17"),
}
# issue 18: accumulated increments (hyper.output=accumulate, a recurrent weight state trained on chunks; T=25 is one
# chunk or five) against the same hypernetwork with increments and MAPPO, at the main point only. Full rank keeps the
# accumulated code (hidden + 1 floats per agent), low rank the generated weights themselves (64 x 5 + 5 for the head)
ACCUMULATE = ["hyper.output=accumulate", "ppo.data_chunk_length=25"]
LEAN_FULL = ["hyper.obs_embed_dim=16", "hyper.hidden=16"]  # LEAN_OBS at full rank
EXTRA_ACCUMULATE = {
    "hyper-id-last": (["algo=mappo", "actor=hyper", "hyper.context=[agent_id]", "hyper.layers=last"],
                      "increment, agent-id context, last layer"),
    "hyper-accum-id-last": (["algo=mappo", "actor=hyper", "hyper.context=[agent_id]", "hyper.layers=last",
                             *ACCUMULATE], "accumulate, agent-id context, last layer: 1-float state (step count)"),
    "hyper-obs-last-r0": ([*OBS_LAST, *LEAN_FULL], "increment, as hyper-obs-last at full rank"),
    "hyper-accum-obs-last-r0": ([*OBS_LAST, *LEAN_FULL, *ACCUMULATE], "accumulate, as hyper-obs-last-r0: 17-float state"),
    "hyper-accum-obs-last-r0-c5": ([*OBS_LAST, *LEAN_FULL, *ACCUMULATE[:1], "ppo.data_chunk_length=5"],
                                   "as hyper-accum-obs-last-r0 with chunks of 5"),
    "hyper-accum-obs-last": ([*OBS_LAST, *LEAN_OBS, *ACCUMULATE],
                             "accumulate, as hyper-obs-last (rank 1): 325-float state"),
    "hyper-obs-defaults": (["algo=mappo", "actor=hyper", "hyper.context=[obs]"],
                           "increment, hyper.context=obs, every other key at its default (lean since issue 17)"),
}
# issue 18: the hypernetwork critic (critic.arch=hyper: per-agent increments from the agent id) vs the mappo row
EXTRA_CRITIC = {
    "mappo-hcritic": (["algo=mappo", "actor=mlp", "critic.arch=hyper"], "MAPPO with the hypernetwork critic"),
    "hyper-id-hcritic": (["algo=mappo", "actor=hyper", "hyper.context=[agent_id]", "critic.arch=hyper"],
                         "hyper-id with the hypernetwork critic"),
}
ENVS = ["mpe:simple_spread", "vmas:simple_spread", "staghunt", "matrix:climbing", "mpe2:simple_spread_v3"]
NUM_ENVS = [16, 128, 1024]
SMALL_E_ONLY = {"mpe2:simple_spread_v3": 16}  # one Python env per copy: slow, and ~2 GB of envs at E=1024
MAIN = ("mappo", "vmas:simple_spread", 1024)  # the row the must-show checks are about
# JaxMARL IPPO-FF on MPE simple_spread: 16 envs x 128 steps, 4 epochs x 4 mini-batches, 64x64 tanh MLP
JAXMARL = ["algo=ippo", "actor=mlp", "rollout_length=128", "ppo.ppo_epoch=4", "ppo.num_mini_batch=4",
           "model.activation=tanh"]
JAXMARL_SPS = 45_000  # JaxMARL's compiled figure on a 2-core CPU like ours (design.md)
# issue 14: two learned groups (one per hunter: own actor, critic, optimisers, buffer) vs the one-group row
TWO_GROUPS = ("mappo-2groups", "staghunt", 1024)
TWO_GROUPS_OVERRIDES = ["groups=[{name: h0, agents: [0]}, {name: h1, agents: [1]}]"]
# issue 15: the co-player model (action head, episode memory) next to MAPPO; the issue asks <= 1.3x MAPPO's time
COPLAYER = {"mappo-coplayer": (["coplayer.enabled=true"], "co-player model: Bayesian goal belief (the default)"),
            "mappo-coplayer-fed": (["coplayer.enabled=true", "coplayer.feed=policy"],
                                   "as mappo-coplayer, goal posteriors and predicted moves appended to the actor's "
                                   "input"),
            "mappo-coplayer-gru": (["coplayer.enabled=true", "coplayer.model=gru"],
                                   "co-player model: GRU predictor, action head, trained 1 pass")}
# the same rows where the learner (slot 0) trains against a population of scripted partners (slot 1, a member drawn
# per env at every episode start), as in the co-player benchmark's training: here member heads have members
POPULATION = ("groups=[{name: learner, agents: [0]}, {name: partner, agents: [1], kind: population, sample: episode, "
              "members: [{policy: staghunt_stag}, {policy: staghunt_hare}, {policy: staghunt_follow}, {policy: random}, "
              "{policy: staghunt_stag, params: {eps: 0.3}}, {policy: staghunt_hare, params: {eps: 0.3}}, "
              "{policy: staghunt_follow, params: {eps: 0.3}}]}]")
COPLAYER_POP = {"mappo-pop": ([], "MAPPO, the learner against a population of 7 scripted partners"),
                "mappo-coplayer-pop": (["coplayer.enabled=true"], "as mappo-coplayer, against that population"),
                "mappo-coplayer-members-pop": (["coplayer.enabled=true", "coplayer.member_heads=true"],
                                               "as mappo-coplayer-pop, with member heads (one read-out per member)"),
                "mappo-coplayer-h128-pop": (["coplayer.enabled=true", "coplayer.hidden=128"],
                                            "as mappo-coplayer-pop, a goal network of 128 units (the default is 64)")}
COPLAYER_AT = [("staghunt", 1024)]  # the Bayesian model needs public actions (mpe does not declare them)
# the same rows on the egocentric stag hunt the co-player benchmark uses (9x9 windows: 329 features, and the goal
# policies read the partner's re-centred window)
EGOCENTRIC = "env_kwargs={observation: partial, view_radius: 4}"
# issue 16: MADDPG at its default maddpg.* settings (a gradient step of batch 1024 per 100 env steps), without the
# warm-up so every timed update is steady state; Box actions as BenchMARL runs VMAS tasks (benchmarks/peers/)
MADDPG = ["algo=maddpg", "actor=mlp", "maddpg.warmup_steps=0"]
MADDPG_ENVS = ["mpe:simple_spread", "vmas:simple_spread"]
MADDPG_CONTINUOUS = ("maddpg-continuous", "vmas:simple_spread", [16, 128])


def case(variant: str, env: str, num_envs: int, threads: int, overrides: list[str], note: str = "",
         diag: bool = False) -> dict:
    """A row; its overrides replace BASE's value of the same key (e.g. JaxMARL's rollout_length, ppo.compile=on)."""
    extra = [*overrides, *(DEFAULT_DIAG if diag else [])]
    given = {o.split("=", 1)[0] for o in extra}
    base = [o for o in BASE if o.split("=", 1)[0] not in given]
    return {"variant": variant, "env": env, "num_envs": num_envs, "threads": threads, "diag": diag,
            "overrides": [*base, *extra], "note": note, "key": f"{variant}/{env}/{num_envs}"}


def standard_cases(threads: int, num_envs: list[int] = NUM_ENVS) -> list[dict]:
    cases = []
    for env in ENVS:
        for e in num_envs:
            if env in SMALL_E_ONLY and e > SMALL_E_ONLY[env]:
                continue
            for name, overrides in VARIANTS.items():
                cases.append(case(name, env, e, threads, overrides))
    v, env, e = MAIN
    for name, (overrides, note) in {**EXTRA_OBS, **EXTRA_ACCUMULATE, **EXTRA_CRITIC}.items():
        cases.append(case(name, env, e, threads, overrides, note=note))
    if threads != 1:
        for name in ("mappo", "hyper-id", "hyper-obs-last"):
            cases.append(case(name, env, e, 1, VARIANTS[name], note="1 torch thread"))
    name, g_env, g_e = TWO_GROUPS
    cases.append(case(name, g_env, g_e, threads, [*VARIANTS["mappo"], *TWO_GROUPS_OVERRIDES],
                      note="two learner groups, one per hunter (vs mappo: the one-group row)"))
    for c_env, c_e in COPLAYER_AT:
        for name, (overrides, note) in COPLAYER.items():
            cases.append(case(name, c_env, c_e, threads, [*VARIANTS["mappo"], *overrides], note=note))
        for name, (overrides, note) in COPLAYER_POP.items():
            cases.append(case(name, c_env, c_e, threads, [*VARIANTS["mappo"], POPULATION, *overrides], note=note))
        cases.append(case("mappo-ego", c_env, c_e, threads, [*VARIANTS["mappo"], EGOCENTRIC],
                          note="egocentric windows (staghunt/egocentric's observation)"))
        for name in ("mappo-coplayer", "mappo-coplayer-fed"):
            overrides, note = COPLAYER[name]
            cases.append(case(f"{name}-ego", c_env, c_e, threads, [*VARIANTS["mappo"], *overrides, EGOCENTRIC],
                              note=f"{note}; egocentric windows"))
    for m_env in MADDPG_ENVS:
        for m_e in num_envs:
            cases.append(case("maddpg", m_env, m_e, threads, MADDPG))
    name, c_env, c_es = MADDPG_CONTINUOUS
    for m_e in c_es:
        cases.append(case(name, c_env, m_e, threads, [*MADDPG, "env_kwargs={continuous_actions: true}"],
                          note="Box actions"))
    cases.append(case(f"{v}+diag", env, e, threads, VARIANTS[v], diag=True,
                      note="default diagnostics (every update) and audit"))
    cases.append(case("ippo-jaxmarl", "mpe:simple_spread", 16, threads, JAXMARL,
                      note="JaxMARL IPPO settings: T=128, 4 epochs x 4 mini-batches, tanh"))
    cases.append(case("ippo-jaxmarl-noln", "mpe:simple_spread", 16, threads,
                      [*JAXMARL, "model.layer_norm=false", "model.feature_norm=false"],
                      note="as ippo-jaxmarl without LayerNorm (JaxMARL's network has none)"))
    cases += compiled_cases(threads)
    return cases


def compiled_cases(threads: int) -> list[dict]:
    """ppo.compile=on next to the eager rows of the same settings (compile time excluded from env-steps/s)."""
    v, env, e = MAIN
    cases = [case(f"{name}-compiled", env, e, threads, [*VARIANTS[name], *COMPILED], note="ppo.compile=on")
             for name in ("mappo", "hyper-id", "hyper-obs-last")]
    cases.append(case("ippo-jaxmarl-compiled", "mpe:simple_spread", 16, threads, [*JAXMARL, *COMPILED],
                      note="as ippo-jaxmarl, ppo.compile=on"))
    # the goal belief beside compiled MAPPO (a real-length run of either compiles: ppo.compile=auto), each compared
    # with the compiled MAPPO row of the same observation
    for c_env, c_e in COPLAYER_AT:
        cases.append(case("mappo-ego-compiled", c_env, c_e, threads, [*VARIANTS["mappo"], EGOCENTRIC, *COMPILED],
                          note="egocentric windows, ppo.compile=on"))
        for name in ("mappo-coplayer", "mappo-coplayer-fed"):
            overrides, note = COPLAYER[name]
            cases.append(case(f"{name}-ego-compiled", c_env, c_e, threads,
                              [*VARIANTS["mappo"], *overrides, EGOCENTRIC, *COMPILED],
                              note=f"{note}; egocentric windows, ppo.compile=on"))
        for name in ("mappo-pop", "mappo-coplayer-pop", "mappo-coplayer-h128-pop"):  # against the population, compiled
            overrides, note = COPLAYER_POP[name]
            cases.append(case(f"{name}-compiled", c_env, c_e, threads,
                              [*VARIANTS["mappo"], POPULATION, *overrides, *COMPILED], note=f"{note}; ppo.compile=on"))
    return cases


# ---------------------------------------------------------------------------------------------- worker side


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux reports KiB


def clock() -> tuple[float, float]:
    """(wall, process CPU) seconds: CPU time is what a row costs regardless of how busy the machine is. On a GPU
    the queued work is waited for first, so that a phase's seconds are its own."""
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter(), time.process_time()


def started_run(c: dict, run_dir: str):
    """The Experiment of case `c` (see `case`) in `run_dir`, its envs reset: ready for `collect_and_update`."""
    from hypermappo.config import build_config
    from hypermappo.experiment import Experiment

    cfg = build_config(None, [f"env={c['env']}", f"num_envs={c['num_envs']}", f"torch_threads={c['threads']}",
                              *c["overrides"], f"run_dir={run_dir}"])
    exp = Experiment(cfg, quiet=True)
    exp._start_episodes()
    return exp


def collect_and_update(exp) -> tuple[float, float]:
    """Wall seconds of one rollout's collection and of the primary learner's update on it (no diagnostics)."""
    learner = exp.primary
    t0 = time.perf_counter()
    exp.collect()
    t1 = time.perf_counter()
    learner.algo.update(learner.buffer, learner.batch_generator)
    return t1 - t0, time.perf_counter() - t1


def train_iteration(exp) -> list[tuple[float, float, float]]:
    """One update of `Experiment.run()` (collect, diagnostics when due, update, audit) -> seconds of
    (collect, update, diagnostics), as [wall, process CPU]."""
    cfg = exp.cfg
    learning = [g for g in exp.groups if g.learning]  # policy groups: one learner unless `groups` says otherwise
    t0 = clock()
    for g in learning:
        g.learner.actor.eval(), g.learner.critic.eval()
    exp.collect()
    t1 = clock()
    every = cfg.diagnostics.every
    due = every and (exp.update + 1) % every == 0
    for g in learning:
        g.learner.actor.train(), g.learner.critic.train()
        if due:
            g.learner.diagnostics.before_update(g.learner.buffer, g.learner.algo.recurrent)
    t2 = clock()
    losses = [g.learner.algo.update(g.learner.buffer, g.learner.batch_generator) for g in learning]
    for g, group_losses in zip(learning, losses):
        if g.learner.coplayer is not None:  # the co-player model's own step, as in Experiment.run()
            group_losses.update(g.learner.coplayer.update())
    t3 = clock()
    for g in learning:
        if due:
            g.learner.diagnostics.after_update(g.learner.buffer, g.learner.algo.recurrent)
        g.learner.updates_done += 1
    exp.update += 1
    for g, group_losses in zip(learning, losses):
        exp._audit(g, group_losses)
    t4 = clock()
    return [(t1[i] - t0[i], t3[i] - t2[i], (t2[i] - t1[i]) + (t4[i] - t3[i])) for i in (0, 1)]


GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def gemm_floor_s(algo, buf, generator, rounds: int = 3) -> tuple[float, int]:
    """(seconds, count) of the matrix multiplies of one update alone: the GEMMs an eager update calls (recorded with
    their shapes by torch.profiler) replayed back to back on random tensors of those shapes, median of `rounds`.
    No compiler removes these (compiled graphs call the same ATen GEMMs), so collection + this bounds what a
    compiled update can reach."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        algo.update(buf, generator)
    calls, tensors = [], {}  # one random tensor per distinct shape, shared by the calls (memory stays small)
    for e in prof.events():
        shapes = e.input_shapes[:3 if "add" in e.name else 2]  # (bias,) matrix, matrix
        if e.name in GEMMS and all(shapes[-2:]):
            args = [tensors.setdefault(tuple(sh), torch.randn(sh)) for sh in shapes]
            calls.append((getattr(torch, e.name.split("::")[1]), args))
    if not calls:  # e.g. a compiled update: its C++ calling code calls the products past ATen's dispatcher
        raise RuntimeError("gemm_floor_s: the profiler saw no matrix multiply in this update (is it compiled? the "
                           "floor replays an eager update's GEMMs)")
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for fn, args in calls:
            fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(calls)


def measure(c: dict, warmup: int, iters: int, min_seconds: float, max_seconds: float) -> dict:
    """Runs in the worker process; see the module docstring for what is timed."""
    import torch

    rss_imports = peak_rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        exp = started_run(c, f"{tmp}/run")
        cfg = exp.cfg
        warm_s = []  # ppo.compile: compiling happens in the first of these
        for _ in range(warmup):
            w0 = time.perf_counter()
            train_iteration(exp)
            warm_s.append(time.perf_counter() - w0)
        setup_s = time.perf_counter() - t0
        collect, update, diag, floor = [], [], [], []
        cpu_e2e, cpu_floor = [], []
        start = time.perf_counter()
        while True:  # at least `iters` updates and `min_seconds`, unless a row is so slow it hits `max_seconds`
            (c_s, u_s, d_s), cpu = train_iteration(exp)
            collect.append(c_s), update.append(u_s), diag.append(d_s), cpu_e2e.append(sum(cpu))
            f0 = clock()
            for g in exp.groups:  # the floor: update only, same batch
                if g.learning and g.learner.off_policy:  # as many gradient steps as the update just ran, uncounted
                    algo = g.learner.algo
                    done = algo.gradient_steps
                    algo.update(g.learner.buffer, g.learner.batch_generator, steps=algo.last_steps)
                    algo.gradient_steps, algo.last_steps = done, algo.last_steps
                elif g.learning:
                    g.learner.algo.update(g.learner.buffer, g.learner.batch_generator)
            f1 = clock()
            floor.append(f1[0] - f0[0]), cpu_floor.append(f1[1] - f0[1])
            elapsed = time.perf_counter() - start
            if (len(collect) >= iters and elapsed >= min_seconds) or elapsed >= max_seconds:
                break
        gemm, rss = None, peak_rss_mb()  # peak RSS of the training itself, before any GEMM replay
        if c.get("gemm_floor"):  # the update's matrix multiplies alone (first learner), after the timed updates
            L = next(g.learner for g in exp.groups if g.learning)
            gemm = gemm_floor_s(L.algo, L.buffer, L.batch_generator)
        exp.logger.close()
        exp.env.close()
    steps = cfg.rollout_length * cfg.num_envs
    e2e = [a + b + d for a, b, d in zip(collect, update, diag)]
    med = statistics.median
    return {
        **{k: c[k] for k in ("key", "variant", "env", "num_envs", "threads", "diag", "note")},
        "num_agents": exp.spec.num_agents, "rollout_length": cfg.rollout_length, "ppo_epoch": cfg.ppo.ppo_epoch,
        "num_mini_batch": cfg.ppo.num_mini_batch, "iterations": len(e2e), "warmup": warmup, "setup_s": setup_s,
        "collect_s": med(collect), "update_s": med(update), "diag_s": med(diag), "e2e_s": med(e2e),
        "floor_s": med(floor), "e2e_sps": steps / med(e2e), "floor_sps": steps / med(floor),
        "train_sps_excl_diag": steps / med([a + b for a, b in zip(collect, update)]),
        "e2e_over_floor": med(e2e) / med(floor), "cpu_e2e_s": med(cpu_e2e), "cpu_floor_s": med(cpu_floor),
        "cpu_sps": steps / med(cpu_e2e), "cpu_e2e_over_floor": med(cpu_e2e) / med(cpu_floor),
        "peak_rss_mb": rss, "rss_after_imports_mb": rss_imports, "compiled": exp.compiled,
        # compile time = the first update's excess over a steady one (excluded from e2e_sps, as JaxMARL's figures
        # exclude jit); sps_incl_compile = env steps of every update run / their wall time, compile included
        "compile_s": max(0.0, warm_s[0] - med(e2e)) if warm_s else None,
        "sps_incl_compile": steps * (len(warm_s) + len(e2e)) / (sum(warm_s) + sum(e2e)),
        "gemm_s": gemm[0] if gemm else None, "gemm_calls": gemm[1] if gemm else None,
        "all_e2e_s": e2e, "all_floor_s": floor, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
    }


# ---------------------------------------------------------------------------------------------- parent side


def run_worker(c: dict, warmup: int, iters: int, min_seconds: float, max_seconds: float, timeout: float,
               src: str | None, extra_env: dict | None = None) -> dict:
    """One row in a fresh process; `src` puts another source tree (a baseline) first on the import path,
    `extra_env` sets (a str value) or unsets (None) variables of that process's environment only."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(c), str(warmup), str(iters),
           str(min_seconds), str(max_seconds)]
    env = dict(os.environ)
    for k, v in (extra_env or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    env["OMP_NUM_THREADS"] = str(c["threads"])
    if src:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:
        tail = e.stderr.decode(errors="replace")[-4000:] if isinstance(e.stderr, bytes) else (e.stderr or "")[-4000:]
        return {**c, "skipped": f"timed out after {timeout:.0f} s", "stderr_tail": tail}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        err = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}, no output"])[-1]
        return {**c, "skipped": err[:200], "stderr_tail": done.stderr[-4000:]}
    row = json.loads(lines[-1])
    if env.get("TORCH_LOGS") and done.stderr.strip():  # asked for torch's own logs: keep their end
        row["stderr_tail"] = done.stderr[-4000:]
        # and every distinct reason Inductor gave for running a graph without a CUDA graph (perf hints)
        row["cudagraph_skips"] = sorted({ln.strip()[:300] for ln in done.stderr.splitlines()
                                         if "skipping cudagraphs" in ln})
    return row


def switch_pairs(c: dict, var: str, rounds: int, label) -> list[dict]:
    """A row in fresh processes with the environment switch `var`=1 and =0 alternately, `rounds` pairs: per pair
    both rows' collect / update seconds, env-steps/s and compile seconds, and the ratios (0 over 1 for the update,
    1 over 0 for env-steps/s). `label(pair)` prints a line per pair."""
    pairs = []
    try:
        for r in range(rounds):
            pair = {}
            for flag in ("1", "0"):
                os.environ[var] = flag
                row = run_worker(c, 2, 3, 4.0, 90.0, 900.0, None)
                if "skipped" in row:
                    raise SystemExit(f"{var}={flag}: {row['skipped']}")
                pair[flag] = {k: row[k] for k in ("collect_s", "update_s", "e2e_sps", "compile_s")}
            pairs.append({"round": r + 1, "on": pair["1"], "off": pair["0"],
                          "update_off_over_on": pair["0"]["update_s"] / pair["1"]["update_s"],
                          "sps_on_over_off": pair["1"]["e2e_sps"] / pair["0"]["e2e_sps"]})
            print(label(pairs[-1]), flush=True)
    finally:
        os.environ.pop(var, None)
    return pairs


def pair_line(label: str, sps: bool = False):
    """switch_pairs' `label` for an A/B of a kernel: one line per pair (update ms with / without, and the ratio)."""
    def line(p: dict) -> str:
        text = (f"{label} round {p['round']}: update {p['on']['update_s'] * 1e3:,.0f} ms with the kernel, "
                f"{p['off']['update_s'] * 1e3:,.0f} ms without ({p['update_off_over_on']:.2f}x)")
        return text + (f"; env-steps/s {p['sps_on_over_off']:.2f}x" if sps else "")
    return line


def pair_summary(pairs: list[dict]) -> dict:
    """Medians over switch_pairs' pairs: update ms with (`on_ms`) and without (`off_ms`) the switch, and the
    within-pair ratios as "median [min-max]" (`update`: without / with, `sps`: env-steps/s with / without)."""
    return {"on_ms": statistics.median(p["on"]["update_s"] for p in pairs) * 1e3,
            "off_ms": statistics.median(p["off"]["update_s"] for p in pairs) * 1e3,
            "update": span([p["update_off_over_on"] for p in pairs]),
            "sps": span([p["sps_on_over_off"] for p in pairs])}


def export_baseline(ref: str, dest: Path) -> str:
    """`git archive REF src` into dest; returns the src directory to put on PYTHONPATH."""
    data = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], check=True, capture_output=True).stdout
    tar_path = dest / "src.tar"
    tar_path.write_bytes(data)
    with tarfile.open(tar_path) as tar:
        tar.extractall(dest, filter="data")
    return str(dest / "src")


def machine() -> dict:
    import torch

    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or platform.machine()
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average_start": [round(x, 1) for x in os.getloadavg()]}


def write_results(name: str, data: dict, text: str, echo: bool = True) -> None:
    """benchmarks/results/NAME.json (the figures) and NAME.md (the table), and (echo) the table printed."""
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=1))
    (out / f"{name}.md").write_text(text)
    if echo:
        print(text)


def span(values: list[float]) -> str:
    """A ratio's median over rounds and its range: `1.23x [1.10-1.40]`."""
    return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


def measure_rows(rows: list[tuple], measure, rounds: int, threads: int) -> list[dict]:
    """`measure(*row, rounds=, threads=)` for each row in turn, each result printed as it comes (without its raw
    per-round `times`)."""
    results = []
    for row in rows:
        r = measure(*row, rounds=rounds, threads=threads)
        results.append(r)
        print(json.dumps({k: r[k] for k in r if k != "times"}), flush=True)
    return results


def fmt(x: float) -> str:
    return f"{x:,.0f}"


def add_relative(rows: list[dict]) -> None:
    """Each row's rate relative to MAPPO's in the same run, same env / E / threads. With --repeat: the median over
    rounds of the ratio within a round (row and reference measured minutes apart, not a whole pass apart), and its
    range over rounds."""
    ok = {(r["variant"], r["env"], r["num_envs"], r["threads"]): r for r in rows if "skipped" not in r}
    for r in rows:
        base = "mappo-ego" if r["variant"].endswith("-ego") else "mappo"  # the same observation
        if r["variant"].endswith(("-pop", "-pop-compiled")):  # the same partners (a population), the same path
            base = "mappo-pop-compiled" if r["variant"].endswith("-compiled") else "mappo-pop"
        if r["variant"].endswith("-ego-compiled"):  # and the same path (the co-player rows beside compiled MAPPO)
            base = "mappo-ego-compiled"
        ref = ok.get((base, r["env"], r["num_envs"], r["threads"]))
        if "skipped" in r or not ref:
            continue
        r["vs_mappo"] = r["e2e_sps"] / ref["e2e_sps"]
        pairs = [(a, b) for a, b in zip(r.get("repeats_e2e_sps", []), ref.get("repeats_e2e_sps", [])) if a and b]
        if len(pairs) > 1:
            ratios = sorted(a / b for a, b in pairs)
            r["vs_mappo"] = statistics.median(ratios)
            r["vs_mappo_rounds"] = ratios
        cpu = [(b / a) for a, b in zip(r.get("repeats_cpu_sps", []), ref.get("repeats_cpu_sps", [])) if a and b]
        if len(cpu) > 1:  # CPU time per env step relative to the reference's, paired within each round
            r["cpu_vs_mappo_rounds"] = sorted(cpu)


def checks(rows: list[dict], threads: int) -> list[dict]:
    """The must-show items, evaluated on this run's rows."""
    v, env, e = MAIN
    ok = {(r["variant"], r["env"], r["num_envs"], r["threads"]): r for r in rows if "skipped" not in r}
    main = ok.get((v, env, e, threads))
    out = []
    name, g_env, g_e = TWO_GROUPS
    r = ok.get((name, g_env, g_e, threads))
    if r and "vs_mappo" in r:
        out.append({"check": f"{name} {g_env} E={g_e}: >= 0.8x the one-group row", "value": r["vs_mappo"],
                    "passed": r["vs_mappo"] >= 0.8,
                    "shown": f"{fmt(r['e2e_sps'])} env-steps/s = {r['vs_mappo']:.2f}x one group (needs >= 0.8x)"})
    for c_env, c_e in COPLAYER_AT:  # judged on CPU time per env step (wall time on a busy machine is its load's)
        for name, base in [(n, "mappo") for n in COPLAYER] + [
                (f"{n}-ego{c}", f"mappo-ego{c}") for n in ("mappo-coplayer", "mappo-coplayer-fed")
                for c in ("", "-compiled")] + [(n, "mappo-pop") for n in COPLAYER_POP if n != "mappo-pop"] + [
                (f"{n}-compiled", "mappo-pop-compiled") for n in ("mappo-coplayer-pop", "mappo-coplayer-h128-pop")]:
            ref = ok.get((base, c_env, c_e, threads))
            r = ok.get((name, c_env, c_e, threads))
            if r and ref:
                rounds = r.get("cpu_vs_mappo_rounds")
                # with --repeat: the median over rounds of the ratio within a round (both rows minutes apart, not a
                # whole pass apart: the machine's drift between passes is not the model's cost)
                ratio = statistics.median(rounds) if rounds else ref["cpu_sps"] / r["cpu_sps"]
                spread = f", per-round range {rounds[0]:.2f}-{rounds[-1]:.2f}x" if rounds else ""
                out.append({"check": f"{name} {c_env} E={c_e}: CPU time per env step <= 1.3x MAPPO's",
                            "value": ratio, "passed": ratio <= 1.3,
                            "shown": f"{fmt(r['cpu_sps'])} vs MAPPO's {fmt(ref['cpu_sps'])} env-steps per CPU-s "
                                     f"(median rows); {ratio:.2f}x MAPPO's CPU time"
                                     f"{' (median of per-round ratios' + spread + ')' if rounds else ''} (needs <= 1.3x); "
                                     f"wall: {1 / r['vs_mappo']:.2f}x"})
    if main is None:
        return out
    out.append({"check": f"{v} {env} E={e}: >= 10,000 env-steps/s end to end", "value": main["e2e_sps"],
                "passed": main["e2e_sps"] >= 10_000, "shown": f"{fmt(main['e2e_sps'])} env-steps/s"})
    out.append({"check": f"{v} {env} E={e}: e2e time per env step <= 1.6x the update-only floor",
                "value": main["e2e_over_floor"], "passed": main["e2e_over_floor"] <= 1.6,
                "shown": f"{main['e2e_over_floor']:.2f}x (floor {fmt(main['floor_sps'])} env-steps/s)"})
    for h in ("hyper-id", "hyper-obs-last", "hyper-obs-last-1head", "hyper-obs-last-mean"):
        r = ok.get((h, env, e, threads))
        if r:
            out.append({"check": f"{h} {env} E={e}: >= 1/1.5 of MAPPO's rate", "value": r["vs_mappo"],
                        "passed": r["vs_mappo"] >= 1 / 1.5,
                        "shown": f"{fmt(r['e2e_sps'])} env-steps/s = {r['vs_mappo']:.2f}x MAPPO (needs >= 0.67x)"
                                 + (f"; median of per-round ratios, range {r['vs_mappo_rounds'][0]:.2f}-"
                                    f"{r['vs_mappo_rounds'][-1]:.2f}" if "vs_mappo_rounds" in r else "")})
    out.append({"check": f"{v} {env} E={e}: peak memory <= 2 GB", "value": main["peak_rss_mb"],
                "passed": main["peak_rss_mb"] <= 2048, "shown": f"{main['peak_rss_mb']:,.0f} MB peak RSS"})
    return out


def markdown(rows: list[dict], meta: dict, must: list[dict], baseline: dict | None) -> str:
    head = (f"{meta['date']}; CPU: {meta['cpu']}, {meta['cores']} cores; torch {meta['torch']} (CPU), "
            f"{meta['threads']} torch thread(s) unless noted; Python {meta['python']}; load average "
            f"{meta['load_average_start']} at start, {meta['load_average_end']} at end (shared machine: compare rows "
            f"of one run, not absolute figures across machines).")
    how = ("Each row: a fresh process runs the real `Experiment` (`collect()` + `algo.update()`), "
           f"{meta['warmup']} warm-up update(s), then at least {meta['iters']} timed updates and "
           f"{meta['min_seconds']:.0f} s (fewer if a row passes --max-seconds), each followed by one "
           "update-only pass over the same buffer (the *floor*: forward + backward + optimiser steps, no "
           "collection). Figures are medians over the timed updates. `e2e/floor` = end-to-end time per env step "
           "over floor time per env step. T=25, 10 epochs, 1 mini-batch, hidden 64,64, diagnostics off unless "
           "noted. `env-steps per CPU-s`: the same rate per second of the process's CPU time, which a busy machine "
           "does not inflate (for 1 thread, about what an idle core would give). Peak RSS: the row's process "
           "high-water mark (imports included).")
    if any(r["variant"].startswith("maddpg") for r in rows):
        how += (" `maddpg` rows: T=25 steps per update, then the gradient steps due (default maddpg.* settings: one "
                "of batch 1024 per 100 env steps, replay 200k; no warm-up, so every timed update learns); their floor "
                "is the same number of gradient steps without collection.")
    if meta.get("repeat", 1) > 1:
        how += (f" Repeated: {meta['repeat']} rounds, each running every row once in a fresh process; a row shows "
                "its median round, and `vs MAPPO` is the median over rounds of the ratio to MAPPO's row of the same "
                "round (the check lines give the range).")
    lines = ["# Training throughput", "", head, "", how, "", f"Reproduce: `{meta['command']}`", ""]
    cols = ["variant", "env", "E", "thr", "env-steps/s", "collect ms", "update ms", "collect %",
            "floor env-steps/s", "e2e/floor", "vs MAPPO", "env-steps per CPU-s", "peak RSS MB"]
    if baseline:
        cols += [f"before ({baseline['ref']})", "speed-up", "speed-up (CPU-s)"]
    lines += ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(cols) - 3)) + "|"]
    for r in rows:
        name = r["variant"] + (f" ({r['note']})" if r.get("note") else "")
        if "skipped" in r:
            lines.append(f"| {name} | {r['env']} | {r['num_envs']} | {r['threads']} | skipped: {r['skipped']} |"
                         + " |" * (len(cols) - 5))
            continue
        t = r["e2e_s"]
        cells = [name, r["env"], str(r["num_envs"]), str(r["threads"]), fmt(r["e2e_sps"]),
                 f"{1e3 * r['collect_s']:,.0f}", f"{1e3 * (r['update_s'] + r['diag_s']):,.0f}"
                 + (f" (diag {1e3 * r['diag_s']:,.0f})" if r["diag"] else ""),
                 f"{100 * r['collect_s'] / t:.0f}", fmt(r["floor_sps"]), f"{r['e2e_over_floor']:.2f}",
                 f"{r['vs_mappo']:.2f}" if "vs_mappo" in r else "", fmt(r["cpu_sps"]), f"{r['peak_rss_mb']:,.0f}"]
        if baseline:
            b = r.get("before")
            b = b if b and "skipped" not in b else None
            cells += [fmt(b["e2e_sps"]) if b else "", f"{r['e2e_sps'] / b['e2e_sps']:.2f}x" if b else "",
                      f"{r['cpu_sps'] / b['cpu_sps']:.2f}x" if b else ""]
        lines.append("| " + " | ".join(cells) + " |")
    diag = [r for r in rows if r.get("diag") and "skipped" not in r]
    for r in diag:
        lines += ["", (f"Diagnostics cost ({r['key']}): {fmt(r['e2e_sps'])} env-steps/s with them vs "
                      f"{fmt(r['train_sps_excl_diag'])} without their time (the `train_sps` column of metrics.csv "
                      f"excludes it); {1e3 * r['diag_s']:,.0f} ms per update.")]
    compiled = [r for r in rows if r.get("compiled") and "skipped" not in r]
    if compiled:
        lines += ["", "Compiled rows (ppo.compile=on): compile time (the first update's excess over a steady one; "
                      "excluded from env-steps/s) and env-steps/s over every update the row ran, compile included: "
                  + "; ".join(f"{r['variant']} {r['compile_s']:.1f} s, {fmt(r['sps_incl_compile'])}" for r in compiled)
                  + "."]
    jax = [r for r in rows if r["variant"].startswith("ippo-jaxmarl") and "skipped" not in r]
    for r in jax:
        lines += ["", (f"{r['variant']}: {fmt(r['e2e_sps'])} env-steps/s = {r['e2e_sps'] / JAXMARL_SPS:.2f}x "
                      f"JaxMARL's compiled IPPO (~{fmt(JAXMARL_SPS)} env-steps/s on a similar 2-core CPU).")]
    if must:
        lines += ["", "Checks:", ""]
        lines += [f"- {'PASS' if m['passed'] else 'FAIL'}: {m['check']}: {m['shown']}" for m in must]
    return "\n".join(lines) + "\n"


def _env_counts(text: str) -> list[int]:
    try:
        counts = [int(x) for x in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected positive integers separated by commas, e.g. 128,256")
    return counts


def parse_args(argv: list[str] | None, prog: str | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="1 warm-up and >= 2 timed updates / 1 s per row (default: 2 warm-up, >= 5 timed / 4 s)")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads per row (default 0 = the library's default: the cores this process may use, "
                        "at most 4); the main E=1024 rows are also run with 1")
    p.add_argument("--only", metavar="GLOBS",
                   help="comma-separated globs on VARIANT/ENV/E, e.g. 'mappo/vmas*/1024,hyper-*/*/128'")
    p.add_argument("--num-envs", metavar="E,E,...", type=_env_counts, default=NUM_ENVS,
                   help=f"numbers of envs of the matrix (default {','.join(map(str, NUM_ENVS))})")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="config override applied to every row (repeatable)")
    p.add_argument("--baseline", metavar="GIT_REF",
                   help="also run every row on GIT_REF's src/ (git archive), interleaved, and report speed-ups")
    p.add_argument("--repeat", type=int, default=1, help="run every row this many times, keep the median")
    p.add_argument("--max-seconds", type=float, default=90.0, help="stop a row's timed updates after this long")
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per row before giving up on it")
    p.add_argument("--out", type=Path, default=RESULTS, help="directory for the json + md")
    p.add_argument("--name", default="throughput", help="file name stem of the outputs")
    return p.parse_args(argv)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        c, warmup, iters = json.loads(argv[1]), int(argv[2]), int(argv[3])
        print(json.dumps(measure(c, warmup, iters, float(argv[4]), float(argv[5]))))
        return 0
    args = parse_args(argv, prog)
    warmup, iters, min_s = (1, 2, 1.0) if args.quick else (2, 5, 4.0)
    from hypermappo.experiment import resolve_threads

    args.threads = resolve_threads(args.threads)
    cases = standard_cases(args.threads, args.num_envs)
    if args.only:
        globs = [g.strip() for g in args.only.split(",") if g.strip()]
        cases = [c for c in cases if any(fnmatch.fnmatch(c["key"], g) for g in globs)]
    for c in cases:
        c["overrides"] += args.extra
    meta = {**machine(), "threads": args.threads, "warmup": warmup, "iters": iters, "min_seconds": min_s,
            "repeat": args.repeat,
            "extra_overrides": args.extra,
            "command": (prog or "python benchmarks/throughput.py") + "".join(" " + shlex.quote(a) for a in argv)}
    tmp = tempfile.TemporaryDirectory() if args.baseline else None
    baseline = {"ref": args.baseline, "src": export_baseline(args.baseline, Path(tmp.name))} if tmp else None
    # --repeat runs the whole list of rows once per round, so a row and its MAPPO reference are measured minutes
    # apart at most, and their ratio can be taken round by round (see add_relative)
    mine = {c["key"] + str(c["threads"]) + str(c["diag"]): [] for c in cases}
    before = {k: [] for k in mine}
    for i in range(args.repeat):
        for c in cases:
            key = c["key"] + str(c["threads"]) + str(c["diag"])
            order = [None, baseline["src"]] if baseline and i % 2 else [baseline["src"], None] if baseline else [None]
            for src in order:  # alternate which goes first, so drifting load does not favour one side
                r = run_worker(c, warmup, iters, min_s, args.max_seconds, args.timeout, src)
                (before if src else mine)[key].append(r)
            r = mine[key][-1]
            status = r.get("skipped") or (f"{fmt(r['e2e_sps'])} env-steps/s, e2e/floor {r['e2e_over_floor']:.2f}, "
                                          f"peak {r['peak_rss_mb']:,.0f} MB")
            if baseline and "skipped" not in r and "skipped" not in before[key][-1]:
                b = before[key][-1]
                status += (f", before {fmt(b['e2e_sps'])} ({r['e2e_sps'] / b['e2e_sps']:.2f}x wall, "
                           f"{r['cpu_sps'] / b['cpu_sps']:.2f}x CPU)")
            rnd = f" [round {i + 1}/{args.repeat}]" if args.repeat > 1 else ""
            print(f"{c['key']} t{c['threads']}{' +diag' if c['diag'] else ''}{rnd}: {status}", file=sys.stderr,
                  flush=True)
    rows = []
    for key, results in mine.items():
        row = _median_row(results)
        if baseline:
            row["before"] = _median_row(before[key])
        rows.append(row)
    if tmp:
        tmp.cleanup()
    meta["load_average_end"] = [round(x, 1) for x in os.getloadavg()]
    add_relative(rows)
    must = checks(rows, args.threads)
    text = markdown(rows, meta, must, baseline and {"ref": baseline["ref"]})
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rows": rows, "checks": must}, indent=2))
    (args.out / f"{args.name}.md").write_text(text)
    return 0


def _median_row(rows: list[dict]) -> dict:
    ok = sorted((r for r in rows if "skipped" not in r), key=lambda r: r["e2e_sps"])
    if not ok:
        return rows[0]
    row = dict(ok[len(ok) // 2])
    if len(rows) > 1:
        row["repeats_e2e_sps"] = [r.get("e2e_sps") for r in rows]
        row["repeats_cpu_sps"] = [r.get("cpu_sps") for r in rows]
    return row


if __name__ == "__main__":
    sys.exit(main())
