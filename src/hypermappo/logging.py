"""Run logging: `metrics.csv` always (one row per update), TensorBoard by default, W&B opt-in.

The CSV is the contract other tooling reads. Its columns are fixed by the first row; on resume
the file is cut back to the rows the checkpoint knew about, so a killed run never leaves
duplicate or half-written rows behind.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path


class RunLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: bool = False,
                 wandb_project: str = "hypermappo", config: dict | None = None, resume_rows: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        self.columns: list[str] | None = None
        self.rows = 0
        if resume_rows is not None and self.path.exists():
            self._truncate(resume_rows)
        elif self.path.exists():
            self.path.unlink()
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=resume_rows)
        self.wandb = None
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                from hypermappo.errors import UserError

                raise UserError("log.wandb=true needs the wandb package: pip install wandb") from None
            self.wandb = wb.init(project=wandb_project, config=config, dir=str(run_dir), resume="allow")

    def _truncate(self, rows: int) -> None:
        with self.path.open(newline="") as f:
            lines = list(csv.reader(f))
        if not lines:
            return
        self.columns = lines[0]
        kept = lines[1:rows + 1]
        with self.path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns)
            w.writerows(kept)
        self.rows = len(kept)

    def log(self, row: dict) -> None:
        if self.columns is None:
            self.columns = list(row)
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.columns)
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([_fmt(row.get(c)) for c in self.columns])
        self.rows += 1
        step = int(row.get("env_steps", self.rows))
        if self.tb is not None:
            for k, v in row.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                    self.tb.add_scalar(k, v, step)
        if self.wandb is not None:
            self.wandb.log({k: v for k, v in row.items() if isinstance(v, (int, float))}, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return "" if math.isnan(v) else repr(v)
    return str(v)


def read_metrics(run_dir: Path) -> list[dict]:
    with (Path(run_dir) / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))
