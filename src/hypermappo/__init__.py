"""hypermappo: MAPPO, IPPO and Hyper-MAPPO for multi-agent RL research, fast on a laptop CPU."""

__version__ = "0.1.0"
