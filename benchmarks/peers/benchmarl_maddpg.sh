#!/usr/bin/env bash
# Recipe: BenchMARL (the peer) in its own virtualenv, never the project's. torch==2.13.0 (the project's pin) goes
# in first, then BenchMARL + VMAS with `-c` constraints so pip cannot replace that torch.
#   bash benchmarks/peers/benchmarl_maddpg.sh            # creates $PEER_VENV (default /work/peers/benchmarl)
# Then benchmarks/maddpg_vs_benchmarl.py runs benchmarks/peers/benchmarl_maddpg.py with that venv's python.
set -euo pipefail
VENV="${PEER_VENV:-/work/peers/benchmarl}"
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q torch==2.13.0
echo "torch==2.13.0" > "$VENV/peer-constraints.txt"
"$VENV/bin/python" -m pip install -q -c "$VENV/peer-constraints.txt" benchmarl vmas
"$VENV/bin/python" -c "import benchmarl, torch, torchrl, vmas; print('benchmarl', benchmarl.__version__ if hasattr(benchmarl, '__version__') else '?', 'torch', torch.__version__, 'torchrl', torchrl.__version__, 'vmas', vmas.__version__)"
