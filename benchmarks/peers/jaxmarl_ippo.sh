#!/usr/bin/env bash
# Recipe: JaxMARL (the peer) in its own virtualenv, never the project's. JAX's CPU build from PyPI; JaxMARL
# itself with --no-deps (its requirements pin gymnasium < 1.4 and more than its MPE and our IPPO script need),
# then the few packages its MPE envs import.
#   bash benchmarks/peers/jaxmarl_ippo.sh          # creates $PEER_VENV (default /work/peers/jaxmarl)
# Then benchmarks/speed_vs_peers.py runs benchmarks/peers/jaxmarl_ippo.py with that venv's python.
set -euo pipefail
VENV="${PEER_VENV:-/work/peers/jaxmarl}"
test -x "$VENV/bin/python" || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "jax[cpu]" flax optax distrax chex jaxtyping matplotlib safetensors
"$VENV/bin/python" -m pip install -q --no-deps jaxmarl==0.2.0
"$VENV/bin/python" -c "import jax, jaxmarl, flax, optax; print('jax', jax.__version__, 'jaxmarl', getattr(jaxmarl, '__version__', '0.2.0'), 'flax', flax.__version__, 'optax', optax.__version__, 'devices', jax.devices())"
