"""Where Inductor's compiled graphs, the CPU probes' answers and the record of compiled shapes are kept, unless
TORCHINDUCTOR_CACHE_DIR says otherwise, and how a JSON record beside the graphs is read and written.

Its own module so that decision.py (which sets it), probe.py and compiled_shapes.py (which store records beside it)
all read it without importing each other."""

from __future__ import annotations

import json
import os
from pathlib import Path

DEFAULT_CACHE = Path.home() / ".cache" / "hypermappo" / "inductor"


def cache_file(name: str) -> Path:
    """`name` inside the graph cache directory (so clearing the cache clears it too)."""
    return Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or DEFAULT_CACHE) / name


def read_record(path: Path) -> dict:
    """A JSON object stored by `write_record`; {} where there is none or it is unreadable."""
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def write_record(path: Path, data: dict) -> None:
    """Publish `data` at `path` atomically (parallel runs and compiles may write at once); a read-only cache keeps
    nothing, and the caller's answer holds for its own process only."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass
