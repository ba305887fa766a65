"""This library's training step, eager and compiled, beside BenchMARL's MAPPO and JaxMARL's IPPO at their settings.

Interleaved rounds: each round runs every row once, each in a fresh process, in this order, so a slow or fast phase
of a shared machine hits every row of the round; a ratio is taken within a round and the median over rounds is
reported (with the range).

  paper   MAPPO on VMAS simple_spread at the MAPPO paper's settings (E = 1024, T = 25, 10 epochs, 1 mini-batch,
          discrete, 64x64): ours eager (its update-only floor from the same process), ours with ppo.compile=on,
          ours compiled with BenchMARL's network (Tanh, no LayerNorm, critic on the concatenated observations),
          Hyper-MAPPO compiled (agent-id context; observation context with the last layer generated, the lean
          defaults), BenchMARL MAPPO (benchmarks/peers/benchmarl_mappo.py).
  jaxmarl IPPO on MPE simple_spread at JaxMARL's IPPO settings (16 envs x 128 steps, 4 epochs x 4 mini-batches,
          tanh): ours eager and compiled (our batched torch MPE), ours compiled without LayerNorm (JaxMARL's network
          has none; ours has the MAPPO reference's by default), JaxMARL IPPO-FF (benchmarks/peers/jaxmarl_ippo.py).

Env-steps/s exclude compilation for every library (JaxMARL's first jitted call, our first update's excess over a
steady one; BenchMARL compiles nothing), as JaxMARL's own figures do; the compile seconds and the rate over every
update run, compile included, are reported beside them. Peers run in their own virtualenvs:

    bash benchmarks/peers/benchmarl_maddpg.sh     # BenchMARL + VMAS (/work/peers/benchmarl)
    bash benchmarks/peers/jaxmarl_ippo.sh         # JAX + JaxMARL (/work/peers/jaxmarl)
    python benchmarks/speed_vs_peers.py --rounds 3

Writes benchmarks/results/speed_vs_peers.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from throughput import JAXMARL, VARIANTS, case, fmt, machine, run_worker  # noqa: E402

RESULTS = HERE / "results"
PEERS = {"benchmarl": (Path(os.environ.get("BENCHMARL_VENV", "/work/peers/benchmarl")), "benchmarl_maddpg.sh",
                       HERE / "peers" / "benchmarl_mappo.py"),
         "jaxmarl": (Path(os.environ.get("JAXMARL_VENV", "/work/peers/jaxmarl")), "jaxmarl_ippo.sh",
                     HERE / "peers" / "jaxmarl_ippo.py")}


def ours(name: str, env: str, e: int, threads: int, overrides: list[str], setting: str, gemm: bool = False) -> dict:
    """`gemm`: also time the update's matrix multiplies alone (throughput.gemm_floor_s), after the timed updates."""
    c = case(name, env, e, threads, overrides)
    c["gemm_floor"] = gemm
    return {"setting": setting, "row": name, "kind": "ours", "case": c}


NO_LN = ["model.layer_norm=false", "model.feature_norm=false"]
# BenchMARL's MAPPO network (benchmarks/peers/benchmarl_mappo.py): Tanh, no LayerNorm, and a shared centralised critic
# on all agents' observations concatenated (ours then runs it once per env, as torchrl's MultiAgentMLP does)
BENCHMARL_NET = ["model.activation=tanh", *NO_LN, "critic.input=obs_concat"]
STEPS_PER_UPDATE = {"paper": 1024 * 25, "jaxmarl": 16 * 128}  # env steps per update (peers report only the rate)


def rows(threads: int) -> list[dict]:
    on = ["ppo.compile=on"]
    lean = ["hyper.context=[obs]"]  # the lean defaults of an observation context (last layer, 16 wide, rank 1)
    return [
        ours("mappo eager", "vmas:simple_spread", 1024, threads, VARIANTS["mappo"], "paper", gemm=True),
        ours("mappo compiled", "vmas:simple_spread", 1024, threads, [*VARIANTS["mappo"], *on], "paper"),
        # like for like: BenchMARL's network (ours has the MAPPO reference's ReLU, LayerNorms and state + agent-id critic)
        ours("mappo compiled, BenchMARL's network", "vmas:simple_spread", 1024, threads,
             [*VARIANTS["mappo"], *BENCHMARL_NET, *on], "paper"),
        ours("hyper-id compiled", "vmas:simple_spread", 1024, threads, [*VARIANTS["hyper-id"], *on], "paper"),
        ours("hyper-obs compiled", "vmas:simple_spread", 1024, threads, ["algo=mappo", "actor=hyper", *lean, *on],
             "paper"),
        {"setting": "paper", "row": "BenchMARL MAPPO", "kind": "benchmarl", "args": ["--threads", str(threads)]},
        ours("ippo eager", "mpe:simple_spread", 16, threads, JAXMARL, "jaxmarl", gemm=True),
        ours("ippo compiled", "mpe:simple_spread", 16, threads, [*JAXMARL, *on], "jaxmarl"),
        # like for like: JaxMARL's IPPO network has no LayerNorm (ours has the MAPPO reference's by default)
        ours("ippo compiled, no LayerNorm", "mpe:simple_spread", 16, threads, [*JAXMARL, *NO_LN, *on], "jaxmarl"),
        {"setting": "jaxmarl", "row": "JaxMARL IPPO-FF", "kind": "jaxmarl", "args": []},
    ]


def run_peer(kind: str, args: list[str], threads: int, timeout: float) -> dict:
    venv, recipe, script = PEERS[kind]
    python = venv / "bin" / "python"
    if not python.exists():
        return {"skipped": f"no {kind} virtualenv at {venv}: run `bash benchmarks/peers/{recipe}` first"}
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    if kind == "jaxmarl" and threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    try:
        done = subprocess.run([str(python), str(script), *args], capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"skipped": (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1][:200]}
    return json.loads(lines[-1])


def measure_round(spec: list[dict], threads: int, timeout: float) -> dict:
    out = {}
    for r in spec:
        if r["kind"] == "ours":
            m = run_worker(r["case"], 2, 5, 4.0, 60.0, timeout, None)
            res = {"skipped": m["skipped"]} if "skipped" in m else {
                "sps": m["e2e_sps"], "floor_sps": m["floor_sps"], "compile_s": m.get("compile_s"),
                "collect_ms": 1000 * m["collect_s"], "update_ms": 1000 * m["update_s"],
                "gemm_ms": 1000 * m["gemm_s"] if m.get("gemm_s") else None, "gemm_calls": m.get("gemm_calls"),
                "sps_incl_compile": m.get("sps_incl_compile"), "peak_rss_mb": m["peak_rss_mb"],
                "compiled": m.get("compiled")}
        else:
            res = run_peer(r["kind"], r["args"], threads, timeout)
        out[r["row"]] = res
        shown = "skipped: " + res["skipped"] if "skipped" in res else f"{fmt(res['sps'])} env-steps/s"
        print(f"  {r['row']}: {shown}", flush=True)
    return out


def ratio(rounds: list[dict], num: str, den: str, key_den: str = "sps") -> list[float]:
    vals = []
    for rd in rounds:
        a, b = rd.get(num, {}), rd.get(den, {})
        if a.get("sps") and b.get(key_den):
            vals.append(a["sps"] / b[key_den])
    return sorted(vals)


def span(vals: list[float]) -> str:
    return "–" if not vals else f"{statistics.median(vals):.2f}× [{vals[0]:.2f}–{vals[-1]:.2f}]"


def markdown(spec, rounds, meta) -> str:
    lines = ["# Training step vs BenchMARL and JaxMARL at their settings (compile excluded)", "",
             f"{meta['date']}; CPU: {meta['cpu']}, {meta['cores']} cores, {meta['threads']} thread(s) per process; "
             f"torch {meta['torch']}; peers: {meta['peer_versions']}. Load average before each round: "
             f"{', '.join(meta['load_before'])}; after the last: {meta['load_end']}. {len(rounds)} interleaved rounds, "
             "each row in a fresh process; figures are medians over rounds [min–max]; ratios are taken within a "
             "round.", "", f"Reproduce: `{meta['command']}`", "",
             "| setting | row | env-steps/s (compile excluded) | collect + update ms per update | compile s | "
             "env-steps/s incl. compile | peak RSS MB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in spec:
        got = [rd[r["row"]] for rd in rounds if "skipped" not in rd[r["row"]]]
        if not got:
            skipped = rounds[0][r["row"]].get("skipped", "?") if rounds else "?"
            lines.append(f"| {r['setting']} | {r['row']} | skipped: {skipped} | | | | |")
            continue
        sps = sorted(g["sps"] for g in got)
        comp = [g["compile_s"] for g in got if g.get("compile_s") is not None]
        incl = [g["sps_incl_compile"] for g in got if g.get("sps_incl_compile")]
        rss = [g["peak_rss_mb"] for g in got if g.get("peak_rss_mb")]
        split = [(g["collect_ms"], g["update_ms"]) for g in got if g.get("collect_ms") is not None]
        split_cell = (f"{statistics.median(c for c, _ in split):.0f} + {statistics.median(u for _, u in split):.0f}"
                      if split else f"{1000 * STEPS_PER_UPDATE[r['setting']] / statistics.median(sps):.0f} in all")
        cells = [r["setting"], r["row"], f"{fmt(statistics.median(sps))} [{fmt(sps[0])}–{fmt(sps[-1])}]", split_cell,
                 f"{statistics.median(comp):.1f}" if comp else "–", fmt(statistics.median(incl)) if incl else "–",
                 f"{statistics.median(rss):,.0f}" if rss else "–"]
        lines.append("| " + " | ".join(cells) + " |")
    pairs = [("MAPPO compiled / BenchMARL MAPPO (paper settings)", "mappo compiled", "BenchMARL MAPPO", "sps"),
             ("MAPPO compiled, BenchMARL's network (Tanh, no LayerNorm, concatenated-obs critic) / BenchMARL MAPPO",
              "mappo compiled, BenchMARL's network", "BenchMARL MAPPO", "sps"),
             ("MAPPO eager / BenchMARL MAPPO", "mappo eager", "BenchMARL MAPPO", "sps"),
             ("MAPPO compiled / this library's eager update-only floor (same round)", "mappo compiled", "mappo eager",
              "floor_sps"),
             ("MAPPO compiled / MAPPO eager", "mappo compiled", "mappo eager", "sps"),
             ("Hyper-MAPPO agent-id compiled / MAPPO compiled", "hyper-id compiled", "mappo compiled", "sps"),
             ("Hyper-MAPPO obs (lean defaults) compiled / MAPPO compiled", "hyper-obs compiled", "mappo compiled", "sps"),
             ("IPPO compiled / JaxMARL IPPO-FF (JaxMARL's settings)", "ippo compiled", "JaxMARL IPPO-FF", "sps"),
             ("IPPO compiled, no LayerNorm (JaxMARL's network) / JaxMARL IPPO-FF", "ippo compiled, no LayerNorm",
              "JaxMARL IPPO-FF", "sps"),
             ("IPPO eager / JaxMARL IPPO-FF", "ippo eager", "JaxMARL IPPO-FF", "sps"),
             ("IPPO compiled / IPPO eager", "ippo compiled", "ippo eager", "sps")]
    lines += ["", "Ratios (median over rounds [range]):", ""]
    lines += [f"- {label}: {span(ratio(rounds, num, den, key))}" for label, num, den, key in pairs]
    lines += ["", "The matrix multiplies alone (an update's GEMMs replayed back to back in the eager row's process, "
              "as the eager update runs them: MKL) and what they leave reachable with MKL's products (median over "
              "rounds). Compiling removes none of them; but the compiled graphs send the forward and input-gradient "
              "products of 32,768 rows or more to oneDNN (src/hypermappo/compile/onednn_gemm.py) and the weight gradients "
              "of 8,192 rows or more to a C kernel (src/hypermappo/compile/weight_grad.py), each where a timed probe on "
              "this CPU finds it faster (src/hypermappo/compile/probe.py), so at E = 1024 the compiled row can pass "
              "this bound:", ""]
    lines += gemm_bounds(rounds)
    return "\n".join(lines) + "\n"


def gemm_bounds(rounds: list[dict]) -> list[str]:
    """Per setting: GEMM ms per update, and the best rate a compiled row could reach with its own collection time
    and nothing but GEMMs in its update, beside the target that rate is compared with."""
    out = []
    for setting, eager, compiled, peer in (("paper", "mappo eager", "mappo compiled", None),
                                           ("jaxmarl", "ippo eager", "ippo compiled", "JaxMARL IPPO-FF")):
        steps = STEPS_PER_UPDATE[setting]
        gemm, bound, floor_x, peer_x, calls = [], [], [], [], None
        for rd in rounds:
            e, c = rd.get(eager, {}), rd.get(compiled, {})
            if not e.get("gemm_ms") or not c.get("collect_ms"):
                continue
            calls = e.get("gemm_calls")
            gemm.append(e["gemm_ms"])
            best = steps / ((c["collect_ms"] + e["gemm_ms"]) / 1000)
            bound.append(best)
            floor_x.append(best / e["floor_sps"])
            if peer and rd.get(peer, {}).get("sps"):
                peer_x.append(best / rd[peer]["sps"])
        if not gemm:
            continue
        med = statistics.median
        text = (f"- {setting}: GEMMs {med(gemm):.0f} ms per update ({calls} calls) beside the compiled row's "
                f"collection: at most {fmt(med(bound))} env-steps/s = {med(floor_x):.2f}× the eager update-only floor")
        if peer_x:
            text += f" = {med(peer_x):.2f}× {peer}"
        out.append(text)
    return out


def peer_versions() -> str:
    out = []
    for kind, code in (("benchmarl", "import benchmarl, torch, torchrl, vmas; print('BenchMARL', "
                                     "getattr(benchmarl, '__version__', '?'), 'torch', torch.__version__, 'torchrl', "
                                     "torchrl.__version__, 'vmas', vmas.__version__)"),
                       ("jaxmarl", "import importlib.metadata as m, jax; print('JaxMARL', m.version('jaxmarl'), "
                                   "'jax', jax.__version__)")):
        python = PEERS[kind][0] / "bin" / "python"
        if python.exists():
            done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
            out.append(done.stdout.strip().splitlines()[-1] if done.returncode == 0 and done.stdout.strip()
                       else f"{kind}: version unknown")
        else:
            out.append(f"{kind}: not installed")
    return "; ".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--only", choices=["paper", "jaxmarl"], help="one setting only")
    p.add_argument("--name", default="speed_vs_peers")
    args = p.parse_args(argv)
    spec = [r for r in rows(args.threads) if not args.only or r["setting"] == args.only]
    m = machine()
    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu": m.get("cpu"), "cores": m.get("cores"),
            "torch": m.get("torch"), "threads": args.threads, "peer_versions": peer_versions(), "load_before": [],
            "command": "python benchmarks/speed_vs_peers.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    rounds = []
    for i in range(args.rounds):
        meta["load_before"].append("/".join(f"{x:.1f}" for x in os.getloadavg()))
        print(f"round {i + 1}/{args.rounds} (load {meta['load_before'][-1]})", flush=True)
        rounds.append(measure_round(spec, args.threads, args.timeout))
    meta["load_end"] = "/".join(f"{x:.1f}" for x in os.getloadavg())
    md = markdown(spec, rounds, meta)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.md").write_text(md)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"meta": meta, "rounds": rounds}, indent=1))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
