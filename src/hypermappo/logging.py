"""Run logging: `metrics.csv` always (one row per update), TensorBoard by default, W&B opt-in.

The CSV is the contract other tooling reads. Its columns are those of the first row; a key that
first appears later (evaluation, periodic diagnostics) extends the header, and the file is
rewritten once, atomically. On resume the file is cut back to the rows the checkpoint knew
about, so a killed run never leaves duplicate or half-written rows behind, and TensorBoard
hides the events logged after that point. W&B continues the same run (its id is kept in the run
directory); steps W&B already has are not logged twice.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path


class RunLogger:
    def __init__(self, run_dir: Path, tensorboard: bool = True, wandb: bool = False,
                 wandb_project: str = "hypermappo", config: dict | None = None, resume_rows: int | None = None):
        self.path = Path(run_dir) / "metrics.csv"
        self.columns: list[str] | None = None
        self.rows = 0
        last_step = -1  # TensorBoard step (env_steps) of the last row kept
        if resume_rows is not None and self.path.exists():
            last_step = self._truncate(resume_rows)
        elif self.path.exists():
            self.path.unlink()
        self.tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # events are logged at env_steps, so purge by env_steps, not by row count
            purge = last_step + 1 if resume_rows is not None else None
            self.tb = SummaryWriter(str(Path(run_dir) / "tb"), purge_step=purge)
        self.wandb = None
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                from hypermappo.errors import UserError

                raise UserError("log.wandb=true needs the wandb package: pip install wandb") from None
            id_file = Path(run_dir) / "wandb_run_id"  # a resumed run continues the same W&B run
            run_id = id_file.read_text().strip() if id_file.exists() else wb.util.generate_id()
            id_file.write_text(run_id)
            self.wandb = wb.init(project=wandb_project, config=config, dir=str(run_dir), id=run_id, resume="allow")

    def _truncate(self, rows: int) -> int:
        """Keep the header and the first `rows` rows; returns the env_steps of the last kept row (-1: none)."""
        with self.path.open(newline="") as f:
            lines = list(csv.reader(f))
        if not lines:
            return -1
        self.columns = lines[0]
        kept = lines[1:rows + 1]
        self._write_all(kept)
        self.rows = len(kept)
        if not kept or "env_steps" not in self.columns:
            return len(kept) - 1
        return int(kept[-1][self.columns.index("env_steps")])

    def _write_all(self, rows: list[list[str]]) -> None:
        """Rewrite the whole file (header + rows) via a temp file, so a kill never leaves it half-written."""
        tmp = self.path.with_suffix(".csv.tmp")
        with tmp.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(self.columns)
            w.writerows(rows)
        os.replace(tmp, self.path)

    def log(self, row: dict) -> None:
        if self.columns is None:
            self.columns = list(row)
            self._write_all([])
        elif any(k not in self.columns for k in row):
            # a new column (e.g. the first evaluation): extend the header, pad the earlier rows
            with self.path.open(newline="") as f:
                old = list(csv.reader(f))[1:]
            self.columns += [k for k in row if k not in self.columns]
            self._write_all([r + [""] * (len(self.columns) - len(r)) for r in old])
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
