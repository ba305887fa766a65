"""Run control: a run directory's ownership lock (run_lock.py) and child processes that die with their parent
(parent_death.py)."""
