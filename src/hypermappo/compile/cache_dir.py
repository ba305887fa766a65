"""Where Inductor's compiled graphs and the CPU probes' answers are kept, unless TORCHINDUCTOR_CACHE_DIR says otherwise.

Its own module so that decision.py (which sets it) and probe.py (which stores its answers beside it) both read it
without importing each other."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CACHE = Path.home() / ".cache" / "hypermappo" / "inductor"
