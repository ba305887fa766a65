"""Pair two partner-inference results pages of `coplayer_adaptation.py` run by run: the same game, seed and held-out
partner, one co-player setting in each (e.g. the goal network's width before and after a default changed).

    python benchmarks/coplayer_paired_pages.py --base coplayer_default_staghunt_five_seeds_inference \
        coplayer_default_five_seeds_inference --new coplayer_default_h64_two_seeds_inference \
        --name coplayer_width_default_paired

A learner that does not read the belief trains the same whatever the co-player model is (its seeds and the
co-player's are separate streams), so the two pages' runs differ only in the co-player model where the learner's
returns agree; the page counts the pairs whose returns are equal and pairs only those. Differences are new minus
base, per fold and over all pairs, with a 95% bootstrap CI over the pairs.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from coplayer_adaptation import _bootstrap_ci  # noqa: E402
from throughput import machine, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METRICS = {"action_acc": "held-out action accuracy", "goal_acc_from5": "held-out goal accuracy from step 5",
           "nll": "held-out NLL", "seen_scripted_acc": "in-distribution, scripted partners",
           "seen_learned_acc": "in-distribution, the frozen learner"}


def load(spec: str) -> tuple[dict, str]:
    """`PAGE[:VARIANT]` (a results name or a path to its _inference.json) -> ({(game, seed, fold): row}, label)."""
    page, _, variant = spec.partition(":")
    variant = variant or "bayes"
    path = Path(page) if page.endswith(".json") else RESULTS / f"{page}.json"
    if not path.exists():
        raise SystemExit(f"coplayer_paired_pages: {path} not found (expected a partner-inference page's .json)")
    results = json.loads(path.read_text())["results"]
    rows = {(game, r["seed"], r["held_out"]): r for game, by_variant in results.items()
            for r in by_variant.get(variant, [])}
    if not rows:
        raise SystemExit(f"coplayer_paired_pages: no {variant!r} rows in {path}")
    return rows, f"{path.stem}:{variant}"


def finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, nargs="+", help="PAGE[:VARIANT] ..., the reference runs (pages of "
                                                             "different games merged)")
    p.add_argument("--new", required=True, help="PAGE[:VARIANT], the runs compared with them")
    p.add_argument("--name", required=True, help="results page to write (benchmarks/results/NAME.md/.json)")
    p.add_argument("--note", default="", help="text appended to the page")
    args = p.parse_args()
    base, labels = {}, []
    for spec in args.base:
        rows, label = load(spec)
        base.update(rows)
        labels.append(label)
    base_label = " + ".join(labels)
    new, new_label = load(args.new)
    keys = sorted(set(base) & set(new))
    same = [k for k in keys if base[k].get("return_end") == new[k].get("return_end")]
    lines = [f"### {new_label} minus {base_label}, paired run by run", "",
             f"{len(keys)} runs in both pages; {len(same)} of them with the same learner (equal final returns), "
             f"paired here.", ""]
    results: dict = {"pairs": [list(k) for k in same], "by_game": {}}
    for game in sorted({k[0] for k in same}):
        ks = [k for k in same if k[0] == game]
        folds = sorted({k[2] for k in ks})
        lines += [f"**{game}** ({len({k[1] for k in ks})} seeds)", "",
                  "| held-out partner | " + " | ".join(f"{m}: base -> new" for m in ("action acc", "goal acc from 5"))
                  + " |", "|---|---|---|"]
        for f in folds:
            fk = [k for k in ks if k[2] == f]
            cells = []
            for m in ("action_acc", "goal_acc_from5"):
                b = [base[k][m] for k in fk if finite(base[k].get(m))]
                n = [new[k][m] for k in fk if finite(new[k].get(m))]
                cells.append(f"{np.mean(b):.3f} -> {np.mean(n):.3f}" if b and n else "n/a")
            lines.append(f"| {f} | " + " | ".join(cells) + " |")
        lines.append("")
        out = {}
        for m, what in METRICS.items():
            d = np.array([new[k][m] - base[k][m] for k in ks if finite(new[k].get(m)) and finite(base[k].get(m))])
            if d.size == 0:
                continue
            lo, hi = _bootstrap_ci(d) if d.size > 1 else (float(d[0]), float(d[0]))
            out[m] = {"mean": float(d.mean()), "ci": [lo, hi], "pairs": int(d.size)}
            lines.append(f"- {what}: {d.mean():+.4f} (95% bootstrap CI {lo:+.4f} to {hi:+.4f}, {d.size} pairs)")
        results["by_game"][game] = out
        lines.append("")
    shown = ["--base", *args.base, "--new", args.new, "--name", args.name]
    lines += [f"`{shlex.join(['python', 'benchmarks/coplayer_paired_pages.py', *shown])}`; machine: "
              f"{machine()['cpu']}. {args.note}"]
    write_results(args.name, {"meta": {"args": vars(args), "machine": machine()}, "results": results},
                  "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
