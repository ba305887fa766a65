"""One training run: collect -> returns -> update -> log -> evaluate -> checkpoint, for every env.

The loop is the same for all environments, algorithms and actor architectures (no per-env
runners). A collect step is one batched forward of actor and critic for all E envs x N agents.
Checkpoints hold everything needed to continue exactly: networks, optimisers, value
normaliser, every RNG state, the envs' own state when the backend can save it, the last env
step, recurrent states, counters and the logger position.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import random
import sys
import time
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from hypermappo import config as config_mod
from hypermappo.algos.mappo import MAPPO
from hypermappo.diagnostics import DeadComponentError, Diagnostics, LiveComponentAudit
from hypermappo.envs.registry import make_env
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import UserError
from hypermappo.evaluation import evaluate_policy
from hypermappo.logging import RunLogger
from hypermappo.models.actor import build_actor
from hypermappo.models.critic import Critic
from hypermappo.models.distributions import params_size
from hypermappo.storage.rollout import RolloutBuffer

CHECKPOINTS_KEPT = 2


def resolve_threads(n: int) -> int:
    """`torch_threads` as a count: 0 means the cores this process may use, at most 4 (more rarely pays
    for networks this small)."""
    if n > 0:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(4, cores))


def set_threads(n: int) -> None:
    torch.set_num_threads(resolve_threads(n))


def keep_freed_memory() -> None:
    """glibc only: serve large tensors from the heap and do not hand freed memory back to the OS.

    By default glibc gives each large tensor a fresh mmap and unmaps it on free, so every op's
    output in the update is page-faulted in again (~40,000 faults per update at E=1024, ~10% of its
    CPU time). Training reuses the same sizes every update, so keeping the memory costs no peak RSS.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return
    m_trim_threshold, m_mmap_max = -1, -4  # <malloc.h>
    mallopt(m_mmap_max, 0)
    mallopt(m_trim_threshold, 1 << 30)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def action_layout(space: gym.spaces.Space) -> tuple[tuple, torch.dtype]:
    """Per-agent action shape and dtype in the rollout buffer, following the VecEnv contract."""
    if isinstance(space, gym.spaces.Discrete):
        return (), torch.long
    if isinstance(space, gym.spaces.MultiDiscrete):
        return tuple(space.shape), torch.long
    if isinstance(space, (gym.spaces.Box, gym.spaces.MultiBinary)):
        return tuple(space.shape), torch.float32
    raise UserError(f"action space {space} is not supported; expected Discrete, MultiDiscrete, Box or MultiBinary")


def default_run_dir(cfg) -> Path:
    env = cfg.env.replace(":", "_").replace("/", "_").replace(".", "_")
    return Path("runs") / f"{env}_{cfg.algo}_{cfg.actor}_s{cfg.seed}_{time.strftime('%Y%m%d-%H%M%S')}"


class Experiment:
    def __init__(self, cfg, run_dir: Path | None = None, resume: bool = False, quiet: bool = False):
        self.cfg = cfg
        self.quiet = quiet
        self.run_dir = Path(run_dir or cfg.run_dir or default_run_dir(cfg))
        if not resume:
            self._claim_run_dir()
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device: {cfg.device!r} asked for, but this machine has no CUDA device")
        set_threads(cfg.torch_threads)
        keep_freed_memory()
        seed_everything(cfg.seed)

        self.env = make_env(cfg.env, cfg.num_envs, self.device, **cfg.env_kwargs)
        self.spec = self.env.spec
        self.actor = build_actor(cfg.actor, self.spec, cfg).to(self.device)
        self.critic = Critic(self.spec, cfg).to(self.device)
        self.algo = MAPPO(self.actor, self.critic, cfg)
        T, L = cfg.rollout_length, cfg.ppo.data_chunk_length
        if self.algo.recurrent and T % L:
            raise UserError(f"ppo.data_chunk_length: recurrent training needs rollout_length ({T}) to be a multiple "
                            f"of it, got {L}")
        self.batch_generator = torch.Generator().manual_seed(cfg.seed + 1)
        space = self.spec.action_space
        action_shape, action_dtype = action_layout(space)
        n_avail = int(space.n) if self.spec.has_available_actions else 0
        self.store_dist_params = True  # KL alignment and per-agent KL diagnostics need the behaviour policy
        self.store_prev_obs = getattr(self.actor, "needs_prev_obs", False)
        self.buffer = RolloutBuffer(T, cfg.num_envs, self.spec.num_agents, self.spec.obs_dim, self.spec.state_dim,
                                    action_shape, action_dtype, n_avail,
                                    params_size(space) if self.store_dist_params else 0,
                                    self.actor.hidden_size, self.critic.hidden_size, self.device,
                                    store_prev_obs=self.store_prev_obs)
        self.updates_total = max(1, math.ceil(cfg.total_env_steps / (T * cfg.num_envs)))
        self.update = 0
        self.env_steps = 0
        self.wall_before = 0.0  # wall time of earlier segments of a resumed run
        self.recent_returns: deque = deque(maxlen=100)
        self.last: EnvStep | None = None
        self.actor_h = self.critic_h = self.reset_mask = None
        self.summary_extra: dict = {}
        self.diagnostics = Diagnostics(self.actor, cfg, self.spec)
        self.audit = LiveComponentAudit(self.actor, self.critic, cfg) if cfg.diagnostics.audit_updates else None
        self.resume_rows = None
        self.segment_start = time.perf_counter()
        if resume:
            self._load_checkpoint()
        else:
            config_mod.save_yaml(cfg, self.run_dir / "config.yaml")
        self.summary_extra.update(self.actor.describe())  # this machine's, also on resume
        self.logger = RunLogger(self.run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project,
                                config_mod.to_dict(cfg), resume_rows=self.resume_rows)

    # ------------------------------------------------------------------ run directory

    def _claim_run_dir(self) -> None:
        d = self.run_dir
        if d.exists() and any(d.iterdir()):
            raise UserError(f"run_dir {str(d)!r} already exists and is not empty; pick another run_dir, or "
                            f"`hypermappo resume {d}` to continue it")
        (d / "checkpoints").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ collection

    def _start_episodes(self) -> None:
        self.last = self.env.reset(seed=self.cfg.seed)
        E, N = self.cfg.num_envs, self.spec.num_agents
        self.reset_mask = torch.ones(E, N, dtype=torch.bool, device=self.device)
        self.prev_obs = torch.zeros_like(self.last.obs)
        self.actor_h = torch.zeros(E, N, self.actor.hidden_size, device=self.device) if self.actor.hidden_size else None
        self.critic_h = (torch.zeros(E, N, self.critic.hidden_size, device=self.device)
                         if self.critic.hidden_size else None)

    @torch.no_grad()
    def collect(self) -> dict:
        """Fill the rollout buffer with T steps from all envs; returns episode statistics."""
        cfg, buf = self.cfg, self.buffer
        gamma = cfg.ppo.gamma
        s = self.last
        returns, extras = [], {}
        for t in range(cfg.rollout_length):
            out = self.actor(s.obs, s.available_actions, self.actor_h, self.reset_mask, active=s.active)
            actions = out.dist.sample()  # [E, N, ...]
            values, critic_h = self.critic(s.obs, s.state, self.critic_h, self.reset_mask)  # [E, N]
            buf.insert(t, obs=s.obs, state=s.state, available=s.available_actions, active=s.active,
                       reset=self.reset_mask, actions=actions, logp=out.dist.log_prob(actions), values=values,
                       dist_params=out.dist.params() if self.store_dist_params else None,
                       actor_h=self.actor_h, critic_h=self.critic_h,
                       prev_obs=self.prev_obs if self.store_prev_obs else None)
            self.prev_obs = s.obs
            nxt = self.env.step(actions)
            reward = nxt.reward
            if cfg.ppo.bootstrap_truncated and nxt.truncated.any():
                # time limit, not a real end: bootstrap from the value of the final observation
                v_final, _ = self.critic(nxt.final_obs, nxt.final_state, critic_h, None)
                alive = nxt.truncated.unsqueeze(-1) & nxt.final_active
                reward = reward + gamma * self.algo.value_norm.denormalize(v_final) * alive
            buf.insert(t, rewards=reward, dones=nxt.done)
            if nxt.episode_done is not None and nxt.episode_done.any():
                done_idx = nxt.episode_done
                returns.append(nxt.episode_return[done_idx])
                for k, v in nxt.extras.items():
                    extras.setdefault(k, []).append(v[done_idx].float())
            self.reset_mask = nxt.done
            self.actor_h, self.critic_h = out.hidden, critic_h
            s = nxt
        self.last = s
        last_values, _ = self.critic(s.obs, s.state, self.critic_h, self.reset_mask)
        self.algo.compute_returns(buf, last_values)
        self.env_steps += cfg.rollout_length * cfg.num_envs
        stats = {}
        if returns:
            r = torch.cat(returns).cpu()
            self.recent_returns.extend(r.tolist())
            stats["episode_return_mean"] = float(r.mean())
            stats["episodes"] = int(r.numel())
        else:
            stats["episode_return_mean"] = float("nan")
            stats["episodes"] = 0
        for k, vs in extras.items():
            stats[k] = float(torch.cat(vs).mean())
        return stats

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict:
        cfg = self.cfg
        if self.last is None:
            self._start_episodes()
        start = self.segment_start = time.perf_counter()
        segment_steps0 = self.env_steps
        eval_stats = None
        while self.update < self.updates_total:
            if cfg.ppo.lr_decay:
                self.algo.set_lr_fraction(1.0 - self.update / self.updates_total)
            t0 = time.perf_counter()
            self.actor.eval(), self.critic.eval()
            ep = self.collect()
            t1 = time.perf_counter()
            self.actor.train(), self.critic.train()
            every = cfg.diagnostics.every
            diag_due = every and (self.update + 1) % every == 0
            diag = self.diagnostics.before_update(self.buffer, self.algo.recurrent) if diag_due else {}
            auditing = self.audit is not None and self.update < cfg.diagnostics.audit_updates
            self.algo.after_backward = self.audit.observe_grads if auditing else None  # no cost after the audit
            t_update = time.perf_counter()
            losses = self.algo.update(self.buffer, self.batch_generator)
            t2 = time.perf_counter()
            if diag_due:
                diag.update(self.diagnostics.after_update(self.buffer, self.algo.recurrent))
            diag_s = (t_update - t1) + (time.perf_counter() - t2)  # diagnostics, excluded from train_sps
            self.update += 1
            self._audit(losses)
            row = {"update": self.update, "env_steps": self.env_steps, **ep,
                   "train_sps": cfg.rollout_length * cfg.num_envs / ((t1 - t0) + (t2 - t_update)),
                   "collect_s": t1 - t0, "update_s": t2 - t_update, "diagnostics_s": diag_s, **losses, **diag}
            last = self.update == self.updates_total
            steps_before = self.env_steps - cfg.rollout_length * cfg.num_envs
            milestone = any(steps_before < m <= self.env_steps for m in cfg.eval_at_steps)
            if (cfg.eval_interval and self.update % cfg.eval_interval == 0) or last or milestone:
                eval_stats = self.evaluate()
                row.update({"eval_return_mean": eval_stats["return_mean"],
                            "eval_return_std": eval_stats["return_std"]})
            self.logger.log(row)
            self._progress(row, start, segment_steps0)
            if (cfg.checkpoint_interval and self.update % cfg.checkpoint_interval == 0) or last:
                self.save_checkpoint()
        wall = self.wall_before + time.perf_counter() - start
        if not self.quiet and cfg.log.progress:
            print(file=sys.stderr)
        if eval_stats is None:  # resumed from the final checkpoint, killed before the summary was written
            eval_stats = self.evaluate()
        summary = self.write_summary(wall, eval_stats)
        self.logger.close()
        self.env.close()
        return summary

    def _audit(self, losses: dict) -> None:
        """Live-component audit: stop the run if an enabled module or loss term is dead."""
        if self.audit is None or self.update > self.cfg.diagnostics.audit_updates:
            return
        self.audit.observe(losses)
        if self.update < self.cfg.diagnostics.audit_updates:
            return
        result = self.audit.check(self.update)
        self.summary_extra["audit"] = result
        if not result["passed"]:
            self.write_summary(self.wall_before + time.perf_counter() - self.segment_start, None)
            raise DeadComponentError(f"live-component audit after {self.update} updates: dead: "
                                     f"{', '.join(result['dead'])} (details in {self.run_dir / 'summary.json'})")

    def evaluate(self, episodes: int | None = None, deterministic: bool = True) -> dict:
        return evaluate_policy(self.cfg, self.actor, episodes or self.cfg.eval_episodes, deterministic, self.device)

    def _progress(self, row: dict, start: float, steps0: int) -> None:
        if self.quiet or not self.cfg.log.progress:
            return
        elapsed = time.perf_counter() - start
        sps = (self.env_steps - steps0) / max(elapsed, 1e-9)
        total = self.updates_total * self.cfg.rollout_length * self.cfg.num_envs
        eta = (total - self.env_steps) / max(sps, 1e-9)
        recent = np.mean(self.recent_returns) if self.recent_returns else float("nan")
        frac = self.env_steps / total
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        msg = (f"\r[{bar}] {self.env_steps:>10,}/{total:,} steps  {sps:7.0f} sps  return(100) {recent:8.2f}"
               f"  ETA {eta:5.0f}s")
        if "eval_return_mean" in row:
            msg += f"  eval {row['eval_return_mean']:.2f}"
        print(msg, end="", file=sys.stderr, flush=True)

    def write_summary(self, wall: float, eval_stats: dict | None) -> dict:
        summary = {
            "algo": self.cfg.algo, "actor": self.cfg.actor, "env": self.cfg.env, "seed": self.cfg.seed,
            "env_steps": self.env_steps, "updates": self.update, "wall_s": wall,
            "train_sps": self.env_steps / max(wall, 1e-9),
            "eval_return_mean": eval_stats["return_mean"] if eval_stats else None,
            "eval_return_std": eval_stats["return_std"] if eval_stats else None,
            "eval_episodes": eval_stats["episodes"] if eval_stats else 0,
            "episode_return_recent": float(np.mean(self.recent_returns)) if self.recent_returns else None,
            **self.summary_extra,
        }
        if eval_stats:
            summary.update({f"eval_{k}": v for k, v in eval_stats.items() if k not in
                            ("return_mean", "return_std", "episodes", "returns")})
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    # ------------------------------------------------------------------ checkpoints

    def checkpoint_state(self) -> dict:
        env_state = self.env.get_state() if self.spec.can_save_state else None
        return {
            "update": self.update, "env_steps": self.env_steps,
            "wall_s": self.wall_before + time.perf_counter() - self.segment_start, "logger_rows": self.logger.rows,
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(), "algo": self.algo.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                    "batch": self.batch_generator.get_state()},
            "env_state": env_state,
            "last_step": self.last if env_state is not None else None,
            "actor_h": self.actor_h, "critic_h": self.critic_h, "reset_mask": self.reset_mask,
            "recent_returns": list(self.recent_returns),
            "diagnostics": self.diagnostics.state_dict(), "summary_extra": self.summary_extra,
            "prev_obs": getattr(self, "prev_obs", None),
        }

    def save_checkpoint(self) -> Path:
        """Write atomically (temp file + rename); older ones go only after the new one is complete."""
        ckdir = self.run_dir / "checkpoints"
        ckdir.mkdir(parents=True, exist_ok=True)
        path = ckdir / f"ckpt_{self.update:07d}.pt"
        tmp = path.with_suffix(".pt.tmp")
        with open(tmp, "wb") as f:
            torch.save(self.checkpoint_state(), f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the latest checkpoint
        os.replace(tmp, path)
        for old in sorted(ckdir.glob("ckpt_*.pt"))[:-CHECKPOINTS_KEPT]:
            old.unlink()
        return path

    def _load_checkpoint(self) -> None:
        path = latest_checkpoint(self.run_dir)
        sd = torch.load(path, map_location=self.device, weights_only=False)
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.algo.load_state_dict(sd["algo"])
        self.update, self.env_steps = sd["update"], sd["env_steps"]
        self.wall_before = sd["wall_s"]
        self.resume_rows = sd["logger_rows"]
        self.recent_returns.extend(sd["recent_returns"])
        self.diagnostics.load_state_dict(sd["diagnostics"])
        self.summary_extra = sd["summary_extra"]
        rng = sd["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        self.batch_generator.set_state(rng["batch"].cpu())
        if sd["env_state"] is not None:
            self.env.set_state(sd["env_state"])
            self.last = sd["last_step"].to(self.device)
            self.actor_h, self.critic_h, self.reset_mask = sd["actor_h"], sd["critic_h"], sd["reset_mask"]
            self.prev_obs = sd["prev_obs"]
        else:
            # third-party envs cannot save their state: start fresh episodes from the saved RNG state
            self.last = self.env.reset(seed=self.cfg.seed + self.update)
            self.prev_obs = torch.zeros_like(self.last.obs)
            E, N = self.cfg.num_envs, self.spec.num_agents
            self.reset_mask = torch.ones(E, N, dtype=torch.bool, device=self.device)
            self.actor_h = torch.zeros(E, N, self.actor.hidden_size, device=self.device) if self.actor.hidden_size \
                else None
            self.critic_h = torch.zeros(E, N, self.critic.hidden_size, device=self.device) \
                if self.critic.hidden_size else None


def latest_checkpoint(run_dir: Path) -> Path:
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("ckpt_*.pt"))
    if not ckpts:
        raise UserError(f"{run_dir}: no checkpoint to resume from (expected checkpoints/ckpt_*.pt)")
    return ckpts[-1]


def train(cfg, run_dir: Path | None = None, quiet: bool = False) -> dict:
    return Experiment(cfg, run_dir, quiet=quiet).run()


def resume(run_dir: Path, quiet: bool = False) -> dict:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"resume: {str(run_dir)!r} is not a directory")
    cfg = config_mod.from_run_dir(run_dir)
    latest_checkpoint(run_dir)  # fail early with a clear message
    if (run_dir / "summary.json").exists():
        raise UserError(f"resume: {str(run_dir)!r} already finished (summary.json is there); nothing to resume")
    return Experiment(cfg, run_dir, resume=True, quiet=quiet).run()
