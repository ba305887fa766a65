"""One training run: collect -> returns -> update -> log -> evaluate -> checkpoint, for every env.

The loop is the same for all environments, algorithms and actor architectures (no per-env
runners). A collect step is one batched forward of actor and critic for all E envs x N agents.
Checkpoints hold everything needed to continue exactly: networks, optimisers, value
normaliser, every RNG state, the envs' own state when the backend can save it, the last env
step, recurrent states, counters and the logger position.

Faults stop a run loudly and never cost a good checkpoint:
- Non-finite values (NaN / inf) in the env's rewards, observations or state (checked every env
  step), in a loss or gradient norm (checked before every optimiser step), in the evaluation return
  or in the weights (checked before every checkpoint) raise `NonFiniteError`: no checkpoint is
  written, so none is rotated away, and summary.json gets `"status": "failed: non-finite ..."` with
  no evaluation numbers. Resuming would repeat the failure, so `resume` refuses such a run.
- An env that raises (in this process or in a worker process) raises `EnvFailure`; the traceback
  goes to RUN_DIR/error.log, no summary is written, and `resume` continues from the last checkpoint.
- SIGINT / SIGTERM: the first one lets the current update finish, saves a checkpoint and raises
  `RunInterrupted` (exit 130 / 143) naming `hypermappo resume RUN_DIR`; a second one aborts at once.
- Every checkpoint has a sidecar `ckpt_*.pt.crc32` (size and CRC-32). `resume` verifies the newest
  checkpoint (size, checksum, loadable, expected keys and shapes, finite weights), falls back to the
  newest intact one and sets the unusable ones aside as `*.pt.corrupt`.
"""

from __future__ import annotations

import ctypes
import io
import json
import math
import os
import random
import shutil
import signal
import sys
import threading
import time
import traceback
import zlib
from collections import deque
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from hypermappo import config as config_mod
from hypermappo.algos.death import bootstrap_mask, resolve_death, transition_targets
from hypermappo.algos.mappo import MAPPO
from hypermappo.diagnostics import DeadComponentError, Diagnostics, LiveComponentAudit
from hypermappo.envs.registry import make_env
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import EnvFailure, NonFiniteError, RunFailed, RunInterrupted, UserError
from hypermappo.evaluation import evaluate_policy
from hypermappo.logging import RunLogger
from hypermappo.models.actor import build_actor
from hypermappo.models.critic import Critic
from hypermappo.models.distributions import params_size
from hypermappo.run_lock import LOCK_FILE, RunDirLock
from hypermappo.storage.rollout import RolloutBuffer

CHECKPOINTS_KEPT = 2
# what `_load_checkpoint` reads: a checkpoint without one of these is not one of ours
CHECKPOINT_KEYS = ("update", "env_steps", "wall_s", "logger_rows", "actor", "critic", "algo", "rng", "env_state",
                   "last_step", "actor_h", "critic_h", "reset_mask", "recent_returns", "diagnostics", "summary_extra",
                   "prev_obs")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`, for one-line reports of exceptions from code we do not own."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0].strip() if lines else '(no message)'}"


def floating_tensors(tree, prefix: str = ""):
    """(dotted name, tensor) for every floating-point tensor in nested dicts / lists / tuples."""
    if isinstance(tree, torch.Tensor):
        if tree.is_floating_point():
            yield prefix, tree
    elif isinstance(tree, dict):
        for k, v in tree.items():
            yield from floating_tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            yield from floating_tensors(v, f"{prefix}.{i}" if prefix else str(i))


def first_nonfinite(tree) -> str | None:
    """Name of the first floating tensor in `tree` holding a NaN or an infinity, or None (exact; for checkpoints)."""
    for name, t in floating_tensors(tree):
        if not bool(torch.isfinite(t).all()):
            return name
    return None


def _shapes(state_dict: dict) -> dict:
    """Tensor shapes of a state dict (extra state such as counters: its type), to tell a checkpoint of another config."""
    return {k: tuple(v.shape) if torch.is_tensor(v) else type(v).__name__ for k, v in state_dict.items()}


def checksum_path(ckpt: Path) -> Path:
    return ckpt.with_name(ckpt.name + ".crc32")


def write_durably(path: Path, data) -> None:
    """Write `data` to `path` via a temp file, on disk before the rename makes it visible."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_checkpoint(path: Path, device) -> dict:
    """Load a checkpoint after checking it against its sidecar (size first: a truncated file costs a stat).

    Raises ValueError naming what is wrong. Checkpoints without a sidecar (older runs) are only loaded.
    """
    marker = checksum_path(path)
    if marker.exists():
        size, crc = marker.read_text().split()
        actual = path.stat().st_size
        if actual != int(size):
            raise ValueError(f"truncated: {actual} of {size} bytes")
        data = path.read_bytes()
        if f"{zlib.crc32(data):08x}" != crc:
            raise ValueError("checksum mismatch")
        source = io.BytesIO(data)
    else:
        source = path
    try:
        sd = torch.load(source, map_location=device, weights_only=False)
    except Exception as e:  # noqa: BLE001 - any failure to unpickle means the file is unusable
        raise ValueError(f"does not load ({one_line(e)})") from None
    if not isinstance(sd, dict):
        raise ValueError(f"holds a {type(sd).__name__}, not a checkpoint dict")
    missing = [k for k in CHECKPOINT_KEYS if k not in sd]
    if missing:
        raise ValueError(f"lacks {', '.join(missing)}")
    bad = first_nonfinite({"actor": sd["actor"], "critic": sd["critic"], "algo": sd["algo"]})
    if bad:
        raise ValueError(f"non-finite {bad}")
    return sd


class Experiment:
    def __init__(self, cfg, run_dir: Path | None = None, resume: bool = False, quiet: bool = False):
        """Builds everything; if that fails (a user error found only here, e.g. an env kwarg the env does not
        take), what this process created of the run directory is removed again."""
        run_dir = Path(run_dir or cfg.run_dir or default_run_dir(cfg))
        created = _missing_ancestor(run_dir)  # the outermost directory claiming would create (None: it exists)
        existed_empty = run_dir.is_dir()
        self._claimed = False
        if not resume:
            _check_not_under_a_file(run_dir)
        try:
            self._build(cfg, run_dir, resume, quiet)
        except BaseException:
            lock = getattr(self, "run_lock", None)
            if lock is not None:
                lock.release()  # a failed start holds no run directory
            if self._claimed:
                _remove_claim(run_dir, created, existed_empty)
            raise

    def _build(self, cfg, run_dir: Path, resume: bool, quiet: bool) -> None:
        self.cfg = cfg
        self.quiet = quiet
        self.run_dir = run_dir
        if resume:
            self.run_lock = RunDirLock(self.run_dir)  # held until the run ends: no second process trains it
            if (self.run_dir / "summary.json").exists():  # finished while this process waited to start
                self.run_lock.release()
                raise UserError(f"resume: {str(self.run_dir)!r} already finished (summary.json is there); "
                                f"nothing to resume")
        else:
            self._claim_run_dir()
            self._claimed = True
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device: {cfg.device!r} asked for, but this machine has no CUDA device")
        set_threads(cfg.torch_threads)
        keep_freed_memory()
        seed_everything(cfg.seed)

        self.last_checkpoint: Path | None = None  # newest checkpoint on disk (written or resumed from)
        self.last_checkpoint_update = -1
        self.stop_signal: int | None = None  # the first SIGINT / SIGTERM received by run()
        try:
            self.env = make_env(cfg.env, cfg.num_envs, self.device, **cfg.env_kwargs)
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - a third-party env's constructor
            raise EnvFailure(f"env {cfg.env!r} could not be built: {one_line(e)}") from e
        self.spec = self.env.spec
        self.actor = build_actor(cfg.actor, self.spec, cfg).to(self.device)
        self.critic = Critic(self.spec, cfg).to(self.device)
        self.death = resolve_death(cfg.ppo.death, self.spec)  # episode | agent (algos/death.py)
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
        self.summary_extra["death"] = self.death
        self.logger = RunLogger(self.run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project,
                                config_mod.to_dict(cfg), resume_rows=self.resume_rows)

    # ------------------------------------------------------------------ run directory

    def _claim_run_dir(self) -> None:
        d = self.run_dir
        d.mkdir(parents=True, exist_ok=True)
        self.run_lock = RunDirLock(d)  # first: a run in progress there is named as such
        if any(p.name != LOCK_FILE for p in d.iterdir()):
            self.run_lock.release()
            raise UserError(f"run_dir {str(d)!r} already exists and is not empty; pick another run_dir, or "
                            f"`hypermappo resume {d}` to continue it")
        (d / "checkpoints").mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ collection

    def _start_episodes(self) -> None:
        try:
            self.last = self.env.reset(seed=self.cfg.seed)
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the env's own failure, in this process or a worker
            raise self._env_failure(e, "in reset()") from e
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
            values, critic_h = self.critic(s.obs, s.state, self.critic_h, self.reset_mask, active=s.active)  # [E, N]
            buf.insert(t, obs=s.obs, state=s.state, available=s.available_actions, active=s.active,
                       reset=self.reset_mask, actions=actions, logp=out.dist.log_prob(actions), values=values,
                       dist_params=out.dist.params() if self.store_dist_params else None,
                       actor_h=self.actor_h, critic_h=self.critic_h,
                       prev_obs=self.prev_obs if self.store_prev_obs else None)
            self.prev_obs = s.obs
            nxt = self._env_step(actions, t)
            reward, dones = transition_targets(self.death, nxt.reward, nxt.done, s.active,
                                               nxt.terminated | nxt.truncated)  # [E, N] each
            if cfg.ppo.bootstrap_truncated and nxt.truncated.any():
                # time limit, not a real end: bootstrap from the value of the final observation
                self._check_final_observations(nxt, t)
                v_final, _ = self.critic(nxt.final_obs, nxt.final_state, critic_h, None, active=nxt.final_active)
                alive = bootstrap_mask(self.death, nxt.truncated, nxt.final_active)
                reward = reward + gamma * self.algo.value_norm.denormalize(v_final) * alive
            buf.insert(t, rewards=reward, dones=dones)
            if nxt.episode_done is not None and nxt.episode_done.any():
                done_idx = nxt.episode_done
                returns.append(nxt.episode_return[done_idx])
                for k, v in nxt.extras.items():
                    extras.setdefault(k, []).append(v[done_idx].float())
            self.reset_mask = dones
            self.actor_h, self.critic_h = out.hidden, critic_h
            s = nxt
        self.last = s
        last_values, _ = self.critic(s.obs, s.state, self.critic_h, self.reset_mask, active=s.active)
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

    def _env_step(self, actions: torch.Tensor, t: int) -> EnvStep:
        """env.step with its exceptions and non-finite outputs turned into one-line errors."""
        try:
            nxt = self.env.step(actions)
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the env's own failure, in this process or a worker
            raise self._env_failure(e, f"at {self._where(t)}") from e
        # one fused reduction and one sync per step: a NaN / inf anywhere makes the sum non-finite
        # (an overflowing sum of finite values is re-checked exactly and passes)
        if not math.isfinite(float(nxt.reward.sum() + nxt.obs.sum() + nxt.state.sum())):
            self._raise_if_nonfinite((("reward", nxt.reward), ("observation", nxt.obs), ("state", nxt.state)), t)
        return nxt

    def _check_final_observations(self, step: EnvStep, t: int) -> None:
        """At a truncation the critic reads the final observation / state of the truncated envs (only those rows)."""
        rows = step.truncated  # [E]
        final_obs = torch.where(rows[:, None, None], step.final_obs, 0.0)  # [E, N, obs_dim]
        final_state = torch.where(rows[:, None], step.final_state, 0.0)  # [E, state_dim]
        if not math.isfinite(float(final_obs.sum() + final_state.sum())):
            self._raise_if_nonfinite((("final observation", final_obs), ("final state", final_state)), t)

    def _where(self, t: int | None) -> str:
        """Position in training for messages: `update u, rollout step t, env step s`."""
        if t is None:
            return f"the start of update {self.update + 1}, env step {self.env_steps:,}"
        return f"update {self.update + 1}, rollout step {t + 1}, env step {self.env_steps + (t + 1) * self.cfg.num_envs:,}"

    def _raise_if_nonfinite(self, quantities, t: int | None) -> None:
        """Slow path: name the first non-finite env quantity ((name, [E, N, ...] or [E, state_dim]) pairs) and where."""
        names = self.spec.agent_names
        for quantity, x in quantities:
            bad = ~torch.isfinite(x)
            if not bad.any():
                continue
            index = bad.nonzero()[0].tolist()  # [env, agent slot, ...] ([env, feature] for state)
            where = f"env {index[0]}"
            if not quantity.endswith("state"):
                slot = index[1]
                where += f", agent slot {slot}" + (f" ({names[slot]})" if slot < len(names) else "")
            raise NonFiniteError(f"non-finite {quantity} ({x[tuple(index)].item()}) from env {self.cfg.env!r} "
                                 f"at {self._where(t)}: {where} (non-finite values: {int(bad.sum())})")

    def _env_failure(self, error: Exception, when: str) -> EnvFailure:
        """The env raised: its traceback (with a worker's, if any) to RUN_DIR/error.log, one line for the user."""
        log = self.run_dir / "error.log"
        log.write_text("".join(traceback.format_exception(error)))
        return EnvFailure(f"env {self.cfg.env!r} raised {one_line(error)} ({when}; traceback in {log})")

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict:
        """Train to the end; see the module docstring for how faults and signals stop it."""
        handlers = self._install_signal_handlers()
        try:
            return self._run()
        except RunFailed as e:
            raise self._stopped(e) from e
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)

    def _install_signal_handlers(self) -> dict:
        """First SIGINT / SIGTERM: stop after this update; returns the previous handlers (main thread only:
        elsewhere Python cannot install any, and the caller's handling stays as it was)."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous = {}
        for signum in STOP_SIGNALS:
            handler = signal.getsignal(signum)
            previous[signum] = signal.SIG_DFL if handler is None else handler  # None: installed outside Python
            signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.stop_signal is None:
            self.stop_signal = signum
            if not self.quiet:  # os.write: print() is not safe inside a signal handler
                os.write(2, f"\n{name}: stopping after this update and saving a checkpoint "
                            f"({name} again aborts at once)\n".encode())
            return
        kept = f"the last checkpoint ({self.last_checkpoint}) is unchanged" if self.last_checkpoint \
            else "no checkpoint was written"
        raise RunInterrupted(f"aborted by a second {name}; {kept}; continue with: hypermappo resume {self.run_dir}",
                             128 + signum)

    def _stop_for_signal(self) -> None:
        """After the first SIGINT / SIGTERM: checkpoint this update (if not done yet) and stop."""
        if self.last_checkpoint_update != self.update:
            self.save_checkpoint()
        name = signal.Signals(self.stop_signal).name
        self._end_progress_line()
        self.logger.close()
        self.env.close()
        raise RunInterrupted(f"interrupted by {name} after update {self.update} (env step {self.env_steps:,}); "
                             f"saved {self.last_checkpoint}; continue with: hypermappo resume {self.run_dir}",
                             128 + self.stop_signal)

    def _stopped(self, error: RunFailed) -> RunFailed:
        """Close what is open, record a non-finite failure in summary.json, and add where the last checkpoint is."""
        self._end_progress_line()
        for close in (self.logger.close, self.env.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - already failing; report the first fault, not this one
                pass
        kept = f"last checkpoint: {self.last_checkpoint}" if self.last_checkpoint else "no checkpoint was written"
        if isinstance(error, NonFiniteError):
            status = f"failed: {error}"
            self.write_summary(self.wall_before + time.perf_counter() - self.segment_start, None, status=status)
            return NonFiniteError(f"{error}; {kept} (finite); status in {self.run_dir / 'summary.json'}")
        return type(error)(f"{error}; {kept}; `hypermappo resume {self.run_dir}` continues from it")

    def _end_progress_line(self) -> None:
        if not self.quiet and self.cfg.log.progress:
            print(file=sys.stderr, flush=True)

    def _run(self) -> dict:
        cfg = self.cfg
        if self.last is None:
            self._start_episodes()
        if not math.isfinite(float(self.last.reward.sum() + self.last.obs.sum() + self.last.state.sum())):
            self._raise_if_nonfinite((("reward", self.last.reward), ("observation", self.last.obs),
                                      ("state", self.last.state)), None)
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
            try:
                losses = self.algo.update(self.buffer, self.batch_generator)
            except NonFiniteError as e:
                raise NonFiniteError(f"{e} of update {self.update + 1} (env step {self.env_steps:,}) on env "
                                     f"{cfg.env!r}") from None
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
                eval_stats = self._evaluate_checked()
                row.update({"eval_return_mean": eval_stats["return_mean"],
                            "eval_return_std": eval_stats["return_std"]})
            self.logger.log(row)
            self._progress(row, start, segment_steps0)
            if (cfg.checkpoint_interval and self.update % cfg.checkpoint_interval == 0) or last:
                self.save_checkpoint()
            if self.stop_signal is not None and not last:
                self._stop_for_signal()
        wall = self.wall_before + time.perf_counter() - start
        if not self.quiet and cfg.log.progress:
            print(file=sys.stderr)
        if eval_stats is None:  # resumed from the final checkpoint, killed before the summary was written
            eval_stats = self._evaluate_checked()
        summary = self.write_summary(wall, eval_stats)
        self.logger.close()
        self.env.close()
        self.run_lock.release()
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
            message = f"live-component audit after {self.update} updates: dead: {', '.join(result['dead'])}"
            self.write_summary(self.wall_before + time.perf_counter() - self.segment_start, None,
                               status=f"failed: {message}")
            raise DeadComponentError(f"{message} (details in {self.run_dir / 'summary.json'})")

    def _evaluate_checked(self) -> dict:
        """The loop's evaluation: the env's exceptions and a non-finite return stop the run."""
        try:
            stats = self.evaluate()
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the evaluation envs' own failure
            raise self._env_failure(e, f"in the evaluation after update {self.update}") from e
        if not math.isfinite(stats["return_mean"]):
            raise NonFiniteError(f"non-finite evaluation return ({stats['return_mean']}) after update {self.update} "
                                 f"(env step {self.env_steps:,}) on env {self.cfg.env!r}")
        return stats

    def evaluate(self, episodes: int | None = None, deterministic: bool = True) -> dict:
        return evaluate_policy(self.cfg, self.actor, episodes or self.cfg.eval_episodes, deterministic, self.device)

    def _progress(self, row: dict, start: float, steps0: int) -> None:
        if self.quiet or not self.cfg.log.progress:
            return
        elapsed = time.perf_counter() - start
        sps = (self.env_steps - steps0) / max(elapsed, 1e-9)
        total = self.updates_total * self.cfg.rollout_length * self.cfg.num_envs
        eta = (total - self.env_steps) / max(sps, 1e-9)
        recent = f"{np.mean(self.recent_returns):8.2f}" if self.recent_returns else f"{'-':>8}"  # no episode ended yet
        frac = self.env_steps / total
        bar = "#" * int(20 * frac) + "-" * (20 - int(20 * frac))
        msg = (f"\r[{bar}] {self.env_steps:>10,}/{total:,} steps  {sps:7.0f} sps  return(100) {recent}"
               f"  ETA {eta:5.0f}s")
        if "eval_return_mean" in row:
            msg += f"  eval {row['eval_return_mean']:.2f}"
        print(msg, end="", file=sys.stderr, flush=True)

    def write_summary(self, wall: float, eval_stats: dict | None, status: str = "finished") -> dict:
        """summary.json; `status` is "finished" or "failed: <why>" (then no evaluation numbers)."""
        summary = {
            "status": status,
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
                    "batch": self.batch_generator.get_state(),
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None},
            "env_state": env_state,
            "last_step": self.last if env_state is not None else None,
            "actor_h": self.actor_h, "critic_h": self.critic_h, "reset_mask": self.reset_mask,
            "recent_returns": list(self.recent_returns),
            "diagnostics": self.diagnostics.state_dict(), "summary_extra": self.summary_extra,
            "prev_obs": getattr(self, "prev_obs", None),
            # until the audit has run: its parameter snapshot and the loss terms seen so far
            "audit": self.audit.state_dict() if self.audit and self.update < self.cfg.diagnostics.audit_updates
            else None,
        }

    def save_checkpoint(self) -> Path:
        """Write atomically (temp file + rename) with its size + CRC-32 sidecar; older ones go only after the
        new one is complete. Weights with a NaN / inf are never written (so never rotate a good one away)."""
        bad = first_nonfinite({"actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
                               "algo": self.algo.state_dict()})
        if bad:
            raise NonFiniteError(f"non-finite {bad} before the checkpoint of update {self.update} "
                                 f"(env step {self.env_steps:,}) on env {self.cfg.env!r}")
        ckdir = self.run_dir / "checkpoints"
        ckdir.mkdir(parents=True, exist_ok=True)
        path = ckdir / f"ckpt_{self.update:07d}.pt"
        buffer = io.BytesIO()
        torch.save(self.checkpoint_state(), buffer)
        data = buffer.getbuffer()
        write_durably(checksum_path(path), f"{len(data)} {zlib.crc32(data):08x}\n".encode())
        write_durably(path, data)  # on disk before the rename makes it the latest checkpoint
        for old in sorted(ckdir.glob("ckpt_*.pt"))[:-CHECKPOINTS_KEPT]:
            old.unlink()
            checksum_path(old).unlink(missing_ok=True)
        self.last_checkpoint, self.last_checkpoint_update = path, self.update
        return path

    def _intact_checkpoint(self) -> tuple[Path, dict]:
        """The newest checkpoint that verifies (see `read_checkpoint`, plus the models' keys and shapes).

        Newer unusable ones are renamed `*.pt.corrupt` (kept for inspection, out of the rotation) and the
        choice is printed on one line; with none intact, a UserError lists why each was rejected.
        """
        ckpts = sorted((self.run_dir / "checkpoints").glob("ckpt_*.pt"), reverse=True)
        models = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict()}
        rejected = []
        for path in ckpts:
            try:
                sd = read_checkpoint(path, self.device)
                for name, model in models.items():
                    if _shapes(sd[name]) != _shapes(model):
                        raise ValueError(f"its {name} does not match this config's network")
            except (ValueError, OSError) as e:
                rejected.append((path, str(e)))
                continue
            for bad, _ in rejected:
                bad.rename(bad.with_name(bad.name + ".corrupt"))
                checksum_path(bad).unlink(missing_ok=True)
            skipped = "".join(f"{bad.name} is unusable ({why}), set aside as {bad.name}.corrupt; "
                              for bad, why in rejected)
            print(f"resume: {skipped}continuing from {path} (update {sd['update']}, env step {sd['env_steps']:,})",
                  file=sys.stderr, flush=True)
            return path, sd
        reasons = "; ".join(f"{p.name}: {why}" for p, why in rejected)
        raise UserError(f"{self.run_dir}: no intact checkpoint to resume from ({reasons})")

    def _load_checkpoint(self) -> None:
        path, sd = self._intact_checkpoint()
        self.last_checkpoint, self.last_checkpoint_update = path, sd["update"]
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
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        if sd.get("audit") is not None and self.audit is not None:
            self.audit.load_state_dict(sd["audit"])
        if sd["env_state"] is not None:
            self.env.set_state(sd["env_state"])
            self.last = sd["last_step"].to(self.device)
            self.actor_h, self.critic_h, self.reset_mask = sd["actor_h"], sd["critic_h"], sd["reset_mask"]
            self.prev_obs = sd["prev_obs"]
        else:
            # third-party envs cannot save their state: start fresh episodes from the saved RNG state
            try:
                self.last = self.env.reset(seed=self.cfg.seed + self.update)
            except (UserError, RunFailed):
                raise
            except Exception as e:  # noqa: BLE001 - the env's own failure
                raise self._env_failure(e, "in reset() on resume") from e
            self.prev_obs = torch.zeros_like(self.last.obs)
            E, N = self.cfg.num_envs, self.spec.num_agents
            self.reset_mask = torch.ones(E, N, dtype=torch.bool, device=self.device)
            self.actor_h = torch.zeros(E, N, self.actor.hidden_size, device=self.device) if self.actor.hidden_size \
                else None
            self.critic_h = torch.zeros(E, N, self.critic.hidden_size, device=self.device) \
                if self.critic.hidden_size else None


def _check_not_under_a_file(run_dir: Path) -> None:
    for p in [run_dir, *run_dir.parents]:
        if p.exists() and not p.is_dir():
            raise UserError(f"run_dir {str(run_dir)!r}: {str(p)!r} is a file, not a directory; pick another run_dir")


def _missing_ancestor(path: Path) -> Path | None:
    """The outermost of `path` and its parents that does not exist yet (None when `path` exists)."""
    if path.exists():
        return None
    missing = path
    for parent in path.absolute().parents:
        if parent.exists():
            break
        missing = parent
    return missing


def _remove_claim(run_dir: Path, created: Path | None, existed_empty: bool) -> None:
    """Undo a run directory claim: delete the run directory if this process created it, and the parents it
    created while they are empty (another run may have started in one since); for a run directory that
    existed (empty, or claiming would have refused it), only what was put into it."""
    if created is None:
        if existed_empty and run_dir.is_dir():
            for child in run_dir.iterdir():
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink(missing_ok=True)
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    created = created.absolute()
    for parent in run_dir.absolute().parents:
        if parent != created and created not in parent.parents:
            break
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break


def latest_checkpoint(run_dir: Path) -> Path:
    ckpts = sorted((Path(run_dir) / "checkpoints").glob("ckpt_*.pt"))
    if not ckpts:
        raise UserError(f"{run_dir}: no checkpoint to resume from (expected checkpoints/ckpt_*.pt)")
    return ckpts[-1]


def train(cfg, run_dir: Path | None = None, quiet: bool = False) -> dict:
    experiment = Experiment(cfg, run_dir, quiet=quiet)
    try:
        return experiment.run()
    finally:
        experiment.run_lock.release()


def resume(run_dir: Path, quiet: bool = False) -> dict:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"resume: {str(run_dir)!r} is not a directory")
    cfg = config_mod.from_run_dir(run_dir)
    latest_checkpoint(run_dir)  # fail early with a clear message
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        try:
            status = json.loads(summary_path.read_text()).get("status", "finished")
        except (ValueError, AttributeError):
            status = "finished"
        if str(status).startswith("failed"):
            raise UserError(f"resume: {str(run_dir)!r} stopped ({status}); resuming would repeat that. To retry "
                            f"from its last checkpoint anyway, delete {summary_path}")
        raise UserError(f"resume: {str(run_dir)!r} already finished (summary.json is there); nothing to resume")
    experiment = Experiment(cfg, run_dir, resume=True, quiet=quiet)
    try:
        return experiment.run()
    finally:
        experiment.run_lock.release()
