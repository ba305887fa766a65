"""Run control: claiming a fresh run directory (run_dir.py), its ownership lock (run_lock.py), SIGINT / SIGTERM during
a run (signals.py) and child processes that die with their parent (parent_death.py)."""
