"""`make demo`: a short MAPPO vs Hyper-MAPPO comparison that ends with a plot and a table.

Runs the grid actor=mlp,hyper x seed=0,1 of the `demo/specialisation` preset (two runs at a
time), then `compare` groups them by actor and writes learning curves with 95% bootstrap CIs,
the final-performance table and the diagnostics. Re-running skips the runs already finished.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from hypermappo import cli
from hypermappo.errors import UserError
from hypermappo.report.compare import compare
from hypermappo.sweep import sweep

PRESET = "demo/specialisation"


def main(out: str = "runs/demo", report: str = "report/demo") -> int:
    start = time.time()
    code = sweep(PRESET, ["actor=mlp,hyper", "seed=0,1"], out=Path(out), workers=2, main=cli.main)
    if code:
        print("demo: some runs failed; see the logs in", out, file=sys.stderr)
        return code
    compare([Path(out)], Path(report), group_by=["actor"])
    report_dir = Path(report)
    print(f"\ndemo finished in {time.time() - start:.0f}s")
    for name in ("curves.png", "final.md", "final.csv", "diagnostics.png"):
        if (report_dir / name).exists():
            print(f"  {report_dir / name}")
    print(f"  runs: {out}/*/ (metrics.csv, summary.json, config.yaml)")
    print((report_dir / "final.md").read_text())
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:]))
    except UserError as e:
        print(f"demo: error: {e}", file=sys.stderr)
        sys.exit(2)
