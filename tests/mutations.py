"""Mutation check of the test suite: apply small plausible bugs one at a time and see a test catch each.

    python tests/mutations.py                 # every mutation, prints a table, exits 1 if any survives
    python tests/mutations.py --list          # names only
    python tests/mutations.py gae_on_normalised_values value_clip_min   # just these
    python tests/mutations.py --out benchmarks/results/mutations.md

Each mutation is a (file, exact old text, new text) edit plus the test files that should catch it (run with
`pytest -x`, so a mutation is *killed* when any of them fails). The source tree is copied to a temporary directory
for every mutation: the working tree is never modified. The old text must occur exactly once in the file, so
a mutation whose target code moved is reported as STALE (fix its text) instead of silently passing.
A baseline run of all the listed test files without any mutation must pass first.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Mutation:
    name: str
    file: str  # relative to the repo root
    old: str
    new: str
    tests: tuple[str, ...]  # pytest targets (files or node ids) expected to catch it
    why: str = ""


M = Mutation
MUTATIONS: list[Mutation] = []  # filled below


def _copy_tree(dst: Path) -> None:
    for name in ("src", "tests", "configs", "benchmarks"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__", "results", "*.pyc"))
    for name in ("pyproject.toml",):
        shutil.copy2(ROOT / name, dst / name)


def _pytest(workdir: Path, targets: tuple[str, ...], timeout: float) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(workdir / "src"), "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *targets],
                           cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timeout", time.monotonic() - t0
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    failed = next((ln for ln in lines if ln.startswith("FAILED") or ln.startswith("ERROR")), lines[-1] if lines else "")
    return p.returncode, failed, time.monotonic() - t0


def run(mutations: list[Mutation], timeout: float) -> list[dict]:
    results = []
    with tempfile.TemporaryDirectory(prefix="hypermappo_mut_") as tmp:
        base = Path(tmp) / "tree"
        _copy_tree(base)
        targets = tuple(sorted({t for m in mutations for t in m.tests}))
        code, line, secs = _pytest(base, targets, timeout * 3)
        print(f"baseline ({len(targets)} targets): exit {code} in {secs:.0f}s  {line}", flush=True)
        if code != 0:
            raise SystemExit(f"baseline failed without any mutation: {line}")
        for m in mutations:
            path = base / m.file
            original = path.read_text()
            count = original.count(m.old)
            if count != 1:
                results.append({"name": m.name, "status": "STALE", "detail": f"old text found {count} times in {m.file}"})
                print(f"{m.name:45s} STALE ({count} matches)", flush=True)
                continue
            path.write_text(original.replace(m.old, m.new))
            try:
                code, line, secs = _pytest(base, m.tests, timeout)
            finally:
                path.write_text(original)
            status = "killed" if code != 0 else "SURVIVED"
            results.append({"name": m.name, "status": status, "detail": line, "seconds": round(secs, 1),
                            "file": m.file, "tests": ", ".join(m.tests)})
            print(f"{m.name:45s} {status:8s} {secs:5.0f}s  {line[:110]}", flush=True)
    return results


def table(results: list[dict]) -> str:
    rows = ["| mutation | file | status | caught by |", "|---|---|---|---|"]
    for r in results:
        rows.append(f"| {r['name']} | {r.get('file', '')} | {r['status']} | {r['detail'].replace('|', '/')[:140]} |")
    killed = sum(r["status"] == "killed" for r in results)
    rows.append(f"\n{killed} of {len(results)} mutations killed")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="run only these mutations")
    p.add_argument("--list", action="store_true")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per mutation run")
    p.add_argument("--out", type=Path, help="also write the table (markdown) here")
    args = p.parse_args(argv)
    by_name = {m.name: m for m in MUTATIONS}
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:45s} {m.file}  <- {m.why}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        p.error(f"unknown mutation(s): {', '.join(unknown)}")
    chosen = [by_name[n] for n in args.names] if args.names else MUTATIONS
    results = run(chosen, args.timeout)
    text = table(results)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("# Mutation check\n\n`python tests/mutations.py`\n\n" + text + "\n")
    return 0 if all(r["status"] == "killed" for r in results) else 1


# --------------------------------------------------------------------------- the mutations

MAPPO = "src/hypermappo/algos/mappo.py"
EXP = "src/hypermappo/experiment.py"
ROLL = "src/hypermappo/storage/rollout.py"
HYPER = "src/hypermappo/models/hyper.py"

if __name__ == "__main__":
    sys.exit(main())
