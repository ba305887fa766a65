"""hypermappo: MAPPO, IPPO and Hyper-MAPPO for multi-agent RL research, fast on a laptop CPU."""

import os as _os

from hypermappo.compile import DEFAULT_CACHE as _DEFAULT_CACHE

# Inductor writes its cache directory into this variable the first time anything imports torch._inductor (its
# default is under /tmp); set ours before any module here can do that. A directory the user chose wins.
_os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(_DEFAULT_CACHE))

__version__ = "0.1.0"
