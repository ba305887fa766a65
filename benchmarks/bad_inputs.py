"""Malformed invocations of the real CLI: every one must end in exit code 2 with a one-line error.

Runs `python -m hypermappo.cli ...` in a subprocess per case (train / resume / eval / sweep / compare /
config with bad presets, keys, values, env strings and kwargs, run directories and checkpoint paths), each
in its own empty working directory, and records the exit code, the stderr line(s), whether a traceback
appeared and whether anything was left behind (a run directory in the working directory, or a change to
the fixture runs the case points at). Prints a markdown table, writes benchmarks/results/bad_inputs.md
and exits 1 if any case gave a traceback, exit code 0, more than one line of error or a leftover.

    python benchmarks/bad_inputs.py                # all cases, 2 at a time
    python benchmarks/bad_inputs.py --workers 1 --keep   # keep the temp dir to look at
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bad_inputs.md"
TINY = ["total_env_steps=16", "num_envs=2", "rollout_length=4", "eval_episodes=1", "checkpoint_interval=0",
        "log.tensorboard=false", "log.progress=false", "diagnostics.every=0", "diagnostics.audit_updates=0",
        "torch_threads=1"]
P = "matrix/climbing"


def cases(fx: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(what is wrong, CLI arguments); `fx` holds the fixture paths (a finished run, odd files, ...)."""
    done, ckpt = str(fx["done"]), str(fx["ckpt"])
    t = ["train", P, *TINY]  # the case's own keys replace these (see `_without_shadowed`)
    return [_without_shadowed(what, argv) for what, argv in [
        # train: presets
        ("unknown preset", ["train", "nope/nope", *TINY]),
        ("override where the preset goes", ["train", "seed=1"]),
        ("preset YAML that does not parse", ["train", str(fx["bad_yaml"])]),
        ("preset YAML that is a list", ["train", str(fx["list_yaml"])]),
        ("preset YAML with an unknown key", ["train", str(fx["unknown_yaml"])]),
        ("no preset", ["train"]),
        # train: keys
        ("unknown key", [*t, "foo=1"]),
        ("bare key gamma", [*t, "gamma=0.9"]),
        ("bare key lr", [*t, "lr=1e-3"]),
        ("bare key hidden_sizes", [*t, "hidden_sizes=[32]"]),
        ("a section as a key", [*t, "ppo=1"]),
        ("not key=value", [*t, "seed"]),
        ("key given twice", [*t, "seed=1", "seed=2"]),
        ("dead key: hyper.* with actor=mlp", [*t, "hyper.hidden=32"]),
        ("dead key: rnn_hidden without a GRU", [*t, "model.rnn_hidden=32"]),
        ("dead key: data_chunk_length, nothing recurrent", [*t, "ppo.data_chunk_length=2"]),
        ("dead key: target without alpha", [*t, "actor=hyper", "hyper.target=hard"]),
        ("dead key: target_interval with polyak", [*t, "actor=hyper", "hyper.context=obs", "hyper.alpha=0.1",
                                                    "hyper.target=polyak", "hyper.target_interval=3"]),
        ("dead key: obs_embed_dim without obs context", [*t, "actor=hyper", "hyper.obs_embed_dim=8"]),
        # train: the compiled step (issue 17)
        ("compile: unknown value", [*t, "ppo.compile=yes"]),
        ("compile on with a GRU actor", [*t, "actor=rnn", "ppo.data_chunk_length=2", "ppo.compile=on"]),
        ("hyper.rank below auto (-1)", [*t, "actor=hyper", "hyper.rank=-2"]),
        ("negative micro-batch size", [*t, "ppo.micro_batch_size=-1"]),
        ("micro-batches with a GRU actor", [*t, "actor=rnn", "ppo.data_chunk_length=2", "ppo.micro_batch_size=64"]),
        # train: values
        ("nan learning rate", [*t, "ppo.lr_actor=nan"]),
        ("inf learning rate", [*t, "ppo.lr_critic=inf"]),
        ("-inf alpha", [*t, "actor=hyper", "hyper.context=obs", "hyper.alpha=-inf"]),
        ("inf int", [*t, "total_env_steps=inf"]),
        ("clip out of (0, 1)", [*t, "ppo.clip=5"]),
        ("gamma > 1", [*t, "ppo.gamma=1.5"]),
        ("negative gae_lambda", [*t, "ppo.gae_lambda=-0.1"]),
        ("negative entropy_coef", [*t, "ppo.entropy_coef=-1"]),
        ("target_tau 0", [*t, "actor=hyper", "hyper.context=obs", "hyper.alpha=0.1", "hyper.target=polyak",
                          "hyper.target_tau=0"]),
        ("negative seed", [*t, "seed=-1"]),
        ("zero envs", [*t, "num_envs=0"]),
        ("int as text", [*t, "num_envs=abc"]),
        ("fractional int", [*t, "num_envs=2.5"]),
        ("bad boolean", [*t, "log.tensorboard=maybe"]),
        ("bad choice", [*t, "actor=transformer"]),
        ("bad list element", [*t, "model.hidden_sizes=[64,abc]"]),
        ("empty hidden sizes", [*t, "model.hidden_sizes=[]"]),
        ("zero width", [*t, "model.hidden_sizes=[0]"]),
        ("unclosed list", [*t, "model.hidden_sizes=[64,"]),
        ("bad hyper.context", [*t, "actor=hyper", "hyper.context=[obs,foo]"]),
        ("heads do not divide the width", [*t, "actor=hyper", "hyper.context=obs", "hyper.attention_heads=3"]),
        ("more mini-batches than samples", [*t, "ppo.num_mini_batch=100000"]),
        ("centralised critic on obs", [*t, "critic.input=obs"]),
        ("eval_at_steps not a list of ints", [*t, "eval_at_steps=abc"]),
        ("unknown device", [*t, "device=tpu"]),
        ("cuda on a CPU machine", [*t, "device=cuda"]),
        ("chunk length does not divide T (found in init)", [*t, "actor=rnn", "ppo.data_chunk_length=3"]),
        # train: env strings and kwargs
        ("unknown env family", [*t, "env=nope"]),
        ("unknown mpe scenario", [*t, "env=mpe:nope"]),
        ("unknown matrix game", [*t, "env=matrix:nope"]),
        ("empty env", [*t, "env="]),
        ("env_kwargs not a mapping", [*t, "env_kwargs=notadict"]),
        ("env_kwargs unclosed", [*t, "env_kwargs={N: 3"]),
        ("unknown env kwarg", [*t, "env_kwargs={foo: 1}"]),
        ("env kwarg of the wrong type", [*t, "env=mpe:simple_spread", "env_kwargs={N: abc}"]),
        ("env kwarg out of range", [*t, "env=mpe:simple_spread", "env_kwargs={N: 0}"]),
        ("matrix episode_length 0", [*t, "env_kwargs={episode_length: 0}"]),
        ("staghunt negative grid", [*t, "env=staghunt", "env_kwargs={grid_size: -3}"]),
        # train: run directories
        ("run_dir holds a finished run", [*t, f"run_dir={done}"]),
        ("run_dir is a file", [*t, f"run_dir={fx['file']}"]),
        ("run_dir under a file", [*t, f"run_dir={fx['file']}/run"]),
        # resume
        ("resume: missing dir", ["resume", str(fx["missing"])]),
        ("resume: a file", ["resume", str(fx["file"])]),
        ("resume: finished run", ["resume", done]),
        ("resume: empty dir", ["resume", str(fx["empty"])]),
        ("resume: config.yaml, no checkpoint", ["resume", str(fx["no_ckpt"])]),
        ("resume: corrupt config.yaml", ["resume", str(fx["bad_config"])]),
        ("resume: config.yaml with a bad value", ["resume", str(fx["bad_value_config"])]),
        # eval
        ("eval: missing path", ["eval", str(fx["missing"])]),
        ("eval: text file as checkpoint", ["eval", str(fx["fake_ckpt"])]),
        ("eval: checkpoint outside a run", ["eval", str(fx["lone_ckpt"])]),
        ("eval: run without checkpoints", ["eval", str(fx["no_ckpt"])]),
        ("eval: --episodes 0", ["eval", done, "--episodes", "0"]),
        ("eval: --episodes abc", ["eval", done, "--episodes", "abc"]),
        ("eval: --render .txt", ["eval", ckpt, "--render", "out.txt"]),
        ("eval: --seed -1", ["eval", done, "--episodes", "1", "--seed", "-1"]),
        # sweep
        ("sweep: unknown preset", ["sweep", "nope", "seed=1,2", "--dry-run"]),
        ("sweep: key twice", ["sweep", P, "seed=1", "seed=2", "--dry-run"]),
        ("sweep: empty range", ["sweep", P, "seed=3..1", "--dry-run"]),
        ("sweep: unbalanced brackets", ["sweep", P, "model.hidden_sizes=[64", "--dry-run"]),
        ("sweep: nan in a grid", ["sweep", P, "ppo.lr_actor=nan,1e-3", "--dry-run"]),
        ("sweep: --workers 0", ["sweep", P, "seed=1,2", "--workers", "0"]),
        ("sweep: key no run reads", ["sweep", P, "hyper.hidden=8,16", "--dry-run"]),
        ("sweep: run_dir", ["sweep", P, "run_dir=x", "--dry-run"]),
        ("sweep: --out is a file", ["sweep", P, *TINY, "seed=1,2", "--out", str(fx["file"])]),
        ("sweep: bare key", ["sweep", P, "gamma=0.9,0.99", "--dry-run"]),
        # compare
        ("compare: missing dir", ["compare", str(fx["missing"]), "--out", "report"]),
        ("compare: a file", ["compare", str(fx["file"]), "--out", "report"]),
        ("compare: empty dir", ["compare", str(fx["empty"]), "--out", "report"]),
        ("compare: unknown group-by key", ["compare", done, "--group-by", "nope.key", "--out", "report"]),
        ("compare: unknown metric", ["compare", done, "--metric", "nope", "--out", "report"]),
        # config and the command itself
        ("config: unknown preset", ["config", "nope"]),
        ("config: bare key", ["config", "gamma=0.9"]),
        ("config: nan", ["config", P, "ppo.clip=nan"]),
        ("config: dead key", ["config", P, "model.rnn_hidden=8"]),
        ("unknown command", ["frobnicate"]),
        ("unknown option", ["train", P, "--fast"]),
    ]]


def _without_shadowed(what: str, argv: list[str]) -> tuple[str, list[str]]:
    """Drop the TINY overrides whose key the case sets itself (else the case is only a duplicate key)."""
    if what == "key given twice":
        return what, argv
    keys = [a.split("=", 1)[0] for a in argv if "=" in a]
    return what, [a for a in argv if not (a in TINY and keys.count(a.split("=", 1)[0]) > 1)]


def make_fixtures(base: Path, env: dict) -> dict[str, Path]:
    fx = {"missing": base / "does_not_exist", "file": base / "a_file.txt", "empty": base / "empty_dir",
          "done": base / "finished_run", "no_ckpt": base / "run_without_checkpoint",
          "bad_config": base / "run_with_corrupt_config", "bad_value_config": base / "run_with_bad_value",
          "fake_ckpt": base / "fake_run" / "checkpoints" / "ckpt_0000001.pt", "lone_ckpt": base / "lone" / "c.pt",
          "bad_yaml": base / "bad.yaml", "list_yaml": base / "list.yaml", "unknown_yaml": base / "unknown.yaml"}
    fx["file"].write_text("not a run\n")
    fx["empty"].mkdir()
    fx["bad_yaml"].write_text("ppo: {clip: [\n")
    fx["list_yaml"].write_text("- a\n- b\n")
    fx["unknown_yaml"].write_text("env: matrix:climbing\nppo: {clipp: 0.1}\n")
    subprocess.run([sys.executable, "-m", "hypermappo.cli", "train", P, *TINY, f"run_dir={fx['done']}", "--quiet"],
                   check=True, env=env, cwd=base, stdout=subprocess.DEVNULL)
    fx["ckpt"] = sorted((fx["done"] / "checkpoints").glob("ckpt_*.pt"))[-1]
    fx["no_ckpt"].mkdir()
    shutil.copy(fx["done"] / "config.yaml", fx["no_ckpt"] / "config.yaml")
    fx["bad_config"].mkdir()
    (fx["bad_config"] / "config.yaml").write_text("ppo: [\n")
    shutil.copytree(fx["done"], fx["bad_value_config"])
    (fx["bad_value_config"] / "summary.json").unlink()
    text = (fx["bad_value_config"] / "config.yaml").read_text()
    (fx["bad_value_config"] / "config.yaml").write_text(text.replace("clip: 0.2", "clip: 7.0"))
    fx["fake_ckpt"].parent.mkdir(parents=True)
    fx["fake_ckpt"].write_text("not a checkpoint")
    shutil.copy(fx["done"] / "config.yaml", fx["fake_ckpt"].parent.parent / "config.yaml")
    fx["lone_ckpt"].parent.mkdir()
    shutil.copy(fx["ckpt"], fx["lone_ckpt"])
    return fx


def snapshot(paths: list[Path]) -> dict:
    out = {}
    for p in paths:
        for q in [p, *p.rglob("*")] if p.is_dir() else [p]:
            st = q.stat() if q.exists() else None
            out[str(q)] = (st.st_size, st.st_mtime_ns) if st else None
    return out


def run_case(i: int, what: str, argv: list[str], base: Path, fixtures: list[Path], env: dict) -> dict:
    cwd = base / "cases" / f"{i:03d}"
    cwd.mkdir(parents=True)
    touched = [f for f in fixtures if any(str(f) in a for a in argv)]
    before = snapshot(touched)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "hypermappo.cli", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    left = sorted(str(p.relative_to(cwd)) for p in cwd.iterdir())
    changed = [k for k, v in snapshot(touched).items() if before.get(k) != v]
    traceback = "Traceback" in proc.stderr
    ok = proc.returncode == 2 and len(lines) == 1 and not traceback and not left and not changed
    return {"i": i, "what": what, "argv": argv, "code": proc.returncode, "stderr": lines, "traceback": traceback,
            "leftover": left + changed, "ok": ok, "seconds": time.perf_counter() - t0}


def table(rows: list[dict], base: Path) -> str:
    def cell(s: str) -> str:
        return s.replace(str(base) + "/", "").replace(str(base), "<tmp>").replace("|", "\\|").replace("\n", " ")

    out = ["| # | case | command | exit | stderr | traceback | leftover | ok |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        argv = [a for a in r["argv"] if a not in TINY]
        err = " / ".join(r["stderr"])[:220]
        out.append(f"| {r['i']} | {cell(r['what'])} | `{cell(' '.join(argv))}` | {r['code']} | {cell(err)} | "
                   f"{'yes' if r['traceback'] else ''} | {cell(', '.join(r['leftover']))} | "
                   f"{'ok' if r['ok'] else 'FAIL'} |")
    return "\n".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--keep", action="store_true", help="keep the temp directory")
    p.add_argument("--only", help="run only cases whose description contains this text")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hypermappo_bad_inputs_")).resolve()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "OMP_NUM_THREADS": "1"}
    try:
        fx = make_fixtures(base, env)
        todo = [(what, argv) for what, argv in cases(fx) if not args.only or args.only in what]
        fixture_paths = [v for v in fx.values()]
        with ThreadPoolExecutor(args.workers) as pool:
            rows = list(pool.map(lambda ia: run_case(ia[0], *ia[1], base, fixture_paths, env), enumerate(todo, 1)))
        md = table(rows, base)
        passed = sum(r["ok"] for r in rows)
        summary = (f"{passed}/{len(rows)} malformed invocations ended in exit code 2 with a one-line error, no "
                   f"traceback and nothing left behind")
        print(md)
        print(f"\n{summary}")
        if not args.only:
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            RESULTS.write_text(f"# Malformed CLI invocations (`python benchmarks/bad_inputs.py`)\n\n{summary}.\n\n"
                               f"{md}\n")
            print(f"wrote {RESULTS}")
        return 0 if passed == len(rows) else 1
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
