"""One training run: collect -> returns -> update -> log -> evaluate -> checkpoint, for every env.

The loop is the same for all environments, algorithms and actor architectures (no per-env
runners). A collect step is one batched forward of actor and critic for all E envs x N agents.
Checkpoints hold everything needed to continue exactly: networks, optimisers, value
normaliser, every RNG state, the envs' own state when the backend can save it, the last env
step, recurrent states, counters and the logger position.

Faults stop a run loudly and never cost a good checkpoint:
- Non-finite values (NaN / inf) in the env's rewards, observations or state (checked every env
  step; on a GPU recorded on the device and read once per rollout, runtime/sync_free.py), in a
  loss or gradient norm (checked before every optimiser step), in the evaluation return
  or in the weights (checked before every checkpoint) raise `NonFiniteError`: no checkpoint is
  written, so none is rotated away, and summary.json gets `"status": "failed: non-finite ..."` with
  no evaluation numbers. Resuming would repeat the failure, so `resume` refuses such a run.
- An env that raises (in this process or in a worker process) raises `EnvFailure`; the traceback
  goes to RUN_DIR/error.log, no summary is written, and `resume` continues from the last checkpoint.
  What the library's own code raises there (a compile error, or an exception whose innermost frame of
  this package is outside envs/) is `InternalFailure`, "hypermappo internal error in MODULE", instead.
- SIGINT / SIGTERM: the first one lets the current update finish, saves a checkpoint and raises
  `RunInterrupted` (exit 130 / 143) naming `hypermappo resume RUN_DIR`; a second one aborts at once.
- Every checkpoint has a sidecar `ckpt_*.pt.crc32` (size and CRC-32). `resume` verifies the newest
  checkpoint (size, checksum, loadable, expected keys and shapes, finite weights), falls back to the
  newest intact one and sets the unusable ones aside as `*.pt.corrupt` (checkpoint.py).
Run control lives in runtime/: the run directory's claim and lock (run_dir.py, run_lock.py), the signal
handling (signals.py) and the progress line (progress.py); checkpoint I/O in checkpoint.py; summary.json's content in
report/run_summary.py. What is left here is the loop.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import random
import signal
import sys
import time
import traceback
from collections import deque
from pathlib import Path

import numpy as np
import torch

from hypermappo import config as config_mod
from hypermappo.algos.death import bootstrap_mask, transition_targets
from hypermappo.checkpoint import (
    first_nonfinite,
    latest_checkpoint,
    newest_intact,
    reasons,
    set_aside,
    shapes,
    write_checkpoint,
)
from hypermappo.compile import (
    collect_step,
    compile_fn,
    compiled_shapes,
    cpu_kernels_report,
    cuda_graphs,
    linear_act_norm,
    weight_grad,
)
from hypermappo.diagnostics import DeadComponentError
from hypermappo.envs.registry import make_env
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import EnvFailure, InternalFailure, NonFiniteError, RunFailed, RunInterrupted, UserError
from hypermappo.evaluation import evaluate_policy
from hypermappo.kernels import act_norm
from hypermappo.logging import RunLogger
from hypermappo.policies.groups import build_groups, evaluate_groups
from hypermappo.report import run_summary
from hypermappo.runtime import progress, sync_free
from hypermappo.runtime.device_rng import restore
from hypermappo.runtime.nonfinite_watch import NonFiniteWatch
from hypermappo.runtime.run_dir import RunDirClaim
from hypermappo.runtime.run_lock import RunDirLock
from hypermappo.runtime.signals import StopSignals
from hypermappo.storage.episode_log import EpisodeLog


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


def default_run_dir(cfg) -> Path:
    env = cfg.env.replace(":", "_").replace("/", "_").replace(".", "_")
    return Path("runs") / f"{env}_{cfg.algo}_{cfg.actor}_s{cfg.seed}_{time.strftime('%Y%m%d-%H%M%S')}"


def one_line(error: BaseException) -> str:
    """`Type: first line of the message`, for one-line reports of exceptions from code we do not own (with the
    second line where the first only introduces it, as torch.compile's "backend='inductor' raised:" does)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = " ".join(lines[:2]) if len(lines) > 1 and lines[0].endswith(":") else (lines[0] if lines else "(no message)")
    return f"{type(error).__name__}: {text}"


PACKAGE = Path(__file__).resolve().parent
COMPILERS = ("torch._dynamo", "torch._inductor")  # their exceptions are compile failures: the library's, not the env's


def library_module(error: BaseException) -> str | None:
    """The module of this package to blame for `error`, raised where the env is called; None: the env's own.

    The library's: a torch.compile failure (an exception of Dynamo or Inductor anywhere in its chain, e.g.
    "InductorError" from a graph pass), or an exception whose innermost frame in this package is outside envs/ (the
    policy forward, buffer writes or a collection graph around the env's step). The env's: one whose innermost frame
    in this package is in envs/ (the adapters and batched envs, which call third-party env code and worker
    processes), or that never passed through this package."""
    chain, seen = [], set()
    e = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    compiling = any(type(x).__module__.startswith(COMPILERS) for x in chain)
    ours = []
    for frame in traceback.extract_tb(error.__traceback__):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(PACKAGE):
            ours.append(path)
    if not ours:
        return "torch.compile" if compiling else None
    innermost = ours[-1]
    if innermost.is_relative_to(PACKAGE / "envs") and not compiling:
        return None
    return ".".join(innermost.relative_to(PACKAGE.parent).with_suffix("").parts)


class Experiment:
    def __init__(self, cfg, run_dir: Path | None = None, resume: bool = False, quiet: bool = False):
        """Builds everything; if that fails (a user error found only here, e.g. an env kwarg the env does not
        take), what this process created of the run directory is removed again."""
        run_dir = Path(run_dir or cfg.run_dir or default_run_dir(cfg))
        claim = None if resume else RunDirClaim(run_dir)  # runtime/run_dir.py
        self.claim = claim  # a caller that builds several runs gives it back if a later one fails (seed_batch.py)
        try:
            self._build(cfg, run_dir, claim, quiet)
        except BaseException:
            lock = getattr(self, "run_lock", None)
            if lock is not None:
                lock.release()  # a failed start holds no run directory
            if claim is not None:
                claim.undo()
            raise

    def _build(self, cfg, run_dir: Path, claim: RunDirClaim | None, quiet: bool) -> None:
        self.cfg = cfg
        self.quiet = quiet
        self.run_dir = run_dir
        resume = claim is None
        if resume:
            self.run_lock = RunDirLock(self.run_dir)  # held until the run ends: no second process trains it
            if (self.run_dir / "summary.json").exists():  # finished while this process waited to start
                self.run_lock.release()
                raise UserError(f"resume: {str(self.run_dir)!r} already finished (summary.json is there); "
                                f"nothing to resume")
        else:
            self.run_lock = claim.take()
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise UserError(f"device: {cfg.device!r} asked for, but this machine has no CUDA device")
        set_threads(cfg.torch_threads)
        keep_freed_memory()
        seed_everything(cfg.seed)

        self.last_checkpoint: Path | None = None  # newest checkpoint on disk (written or resumed from)
        self.last_checkpoint_update = -1
        self.stop = StopSignals(quiet)  # SIGINT / SIGTERM while run() runs (runtime/signals.py)
        try:
            self.env = make_env(cfg.env, cfg.num_envs, self.device, **cfg.env_kwargs)
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - a third-party env's constructor
            raise EnvFailure(f"env {cfg.env!r} could not be built: {one_line(e)}") from e
        self.spec = self.env.spec
        # policy groups (policies/groups.py); no `groups` in the config: one learner group of all slots
        self.groups = build_groups(cfg, self.env, self.device)
        self.multi = bool(cfg.groups)  # per-group columns, checkpoint entries and summary
        self.primary = next(g.learner for g in self.groups if g.learner is not None)
        self.switching = any(len(g.phases) > 1 for g in self.groups)
        T = cfg.rollout_length
        self.updates_total = max(1, math.ceil(cfg.total_env_steps / (T * cfg.num_envs)))
        self.update = 0
        self.env_steps = 0
        self.wall_before = 0.0  # wall time of earlier segments of a resumed run
        self.recent_returns: deque = deque(maxlen=100)
        self.group_recent = {g.name: deque(maxlen=100) for g in self.groups}  # per-group returns (multi)
        self.last: EnvStep | None = None
        self.summary_extra: dict = {}
        self.resume_rows = None
        self.segment_start = time.perf_counter()
        if resume:
            self._load_checkpoint()
        else:
            config_mod.save_yaml(cfg, self.run_dir / "config.yaml")
            self._warm_start()
        self.summary_extra.update(self.actor.describe())  # this machine's, also on resume
        # ppo.compile (compile/decision.py): one line per distinct decision, for the run header and summary.json
        self.compile_notes = list(dict.fromkeys(g.learner.compile_note for g in self.groups if g.learner))
        self.compiled = any(g.learner.compiled for g in self.groups if g.learner)
        if self.compiled:  # a batched torch env's branch-free step core as a graph too (a no-op for others)
            self.env.compile_step(compile_fn)
        # ... or with the policy forward and the buffer writes, one graph per collection step (collect_step.py)
        self.collect_graph, self.collect_note = collect_step.build(self.groups, self.env, compile_fn) if self.compiled \
            else (None, None)
        if self.collect_note:
            self.summary_extra["collect"] = self.collect_note
        # a compiled learner's co-player model (algos/coplayer_bayes.py `compile`): which of its parts are graphs
        notes = (getattr(g.learner.coplayer, "graph_note", None) for g in self.groups if g.learner)
        self.coplayer_notes = list(dict.fromkeys(note for note in notes if note))
        if self.coplayer_notes:
            self.summary_extra["coplayer_graphs"] = "; ".join(self.coplayer_notes)
        self.summary_extra["compile"] = "; ".join(self.compile_notes)
        # collection without a host sync per env step (runtime/sync_free.py; auto: on CUDA)
        sync_free_on, self.sync_note = sync_free.decide(self.device)
        self.watch = NonFiniteWatch() if sync_free_on else None
        self.env.sync_free = sync_free_on
        self.episodes = EpisodeLog()
        self.summary_extra["host_sync"] = self.sync_note
        self.summary_extra["act_norm"] = act_norm.status()  # the hidden blocks' LayerNorm(act) kernel (kernels/act_norm.py)
        if self.compiled:  # the compiled graphs' weight-gradient kernel (weight_grad.py)
            self.summary_extra["weight_grad"] = weight_grad.status()
            self.summary_extra["linear_act_norm"] = linear_act_norm.status()
        # ppo.micro_batch_size (algos/micro_batch.py): whether large mini-batches run in row blocks, and why not
        self.micro_notes = list(dict.fromkeys(g.learner.micro_note for g in self.groups
                                              if g.learner and hasattr(g.learner, "micro_note")))
        if self.micro_notes:
            self.summary_extra["micro_batch"] = "; ".join(self.micro_notes)
        # ppo.data_chunk_length=auto (config.py): the chunk length a recurrent learner trains on, for the run header
        self.chunk_notes = list(dict.fromkeys(g.learner.chunk_note for g in self.groups
                                              if g.learner and getattr(g.learner, "chunk_note", None)))
        if self.chunk_notes:
            self.summary_extra["data_chunk_length"] = "; ".join(self.chunk_notes)
        self.first_update_s: list[float] = []  # wall time of this process's first two updates (compile time)
        self.summary_extra["death"] = self.death
        self.logger = RunLogger(self.run_dir, cfg.log.tensorboard, cfg.log.wandb, cfg.log.wandb_project,
                                config_mod.to_dict(cfg), resume_rows=self.resume_rows)

    # the one learner of a run without groups (the first learner group otherwise), under its pre-groups names
    actor = property(lambda self: self.primary.actor)
    critic = property(lambda self: self.primary.critic)
    algo = property(lambda self: self.primary.algo)
    buffer = property(lambda self: self.primary.buffer)
    batch_generator = property(lambda self: self.primary.batch_generator)
    diagnostics = property(lambda self: self.primary.diagnostics)
    audit = property(lambda self: self.primary.audit)
    actor_h = property(lambda self: self.primary.actor_h)
    critic_h = property(lambda self: self.primary.critic_h)
    reset_mask = property(lambda self: self.primary.reset_mask)
    prev_obs = property(lambda self: self.primary.prev_obs)
    death = property(lambda self: self.primary.death)
    store_prev_obs = property(lambda self: self.primary.store_prev_obs)
    store_dist_params = property(lambda self: self.primary.store_dist_params)

    def _warm_start(self) -> None:
        """hyper.init_from (see warm_start.py) for each learner that asks; the audit is rebuilt on the loaded actor
        (its target snapshot), so it still judges the warm-started run."""
        from hypermappo.diagnostics import LiveComponentAudit
        from hypermappo.warm_start import warm_start

        for g in self.groups:
            L = g.learner
            if L is None or L.cfg.actor != "hyper" or not L.cfg.hyper.init_from:
                continue
            info = warm_start(L.actor, L.cfg, self.device)
            if L.audit is not None:
                L.audit = LiveComponentAudit(L.actor, L.critic, L.cfg)
            if self.multi:
                self.summary_extra.setdefault("group_warm_start", {})[g.name] = info
            else:
                self.summary_extra["warm_start"] = info

    def _prefix(self, group, metrics: dict) -> dict:
        """Metric names of a group: `<group>/<name>` when groups are configured, else unchanged."""
        return {f"{group.name}/{k}": v for k, v in metrics.items()} if self.multi else metrics

    # ------------------------------------------------------------------ collection

    def _start_episodes(self) -> None:
        try:
            self.last = self.env.reset(seed=self.cfg.seed)
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the env's own failure, in this process or a worker
            raise self._env_failure(e, "in reset()") from e
        for g in self.groups:
            g.start(self.last)

    @torch.no_grad()
    def collect(self) -> dict:
        """Fill each learning group's rollout buffer with T steps from all envs; returns episode statistics.

        Per step, each group acts for its slots with one batched call and the actions are scattered into
        one [E, N, ...] tensor for env.step (a single group's actions go to the env as they are)."""
        self.episodes.clear()
        if self.collect_graph is not None and cuda_graphs.active(self.device):
            # tensors the collection graphs write in place keep their address: CUDA graphs can record them
            L = self.collect_graph.learner
            cuda_graphs.mark_static([*cuda_graphs.tensors_of(L.buffer), *cuda_graphs.tensors_of(self.env)])
        try:
            s = self._collect_steps()
        except Exception as e:
            # sync-free collection checks env outputs at the rollout's end: a non-finite value found there comes
            # before what it may have caused later in the rollout
            if self.watch is not None:
                self._raise_watched(e)
            raise
        if self.watch is not None:
            self._raise_watched(None)
        self.last = s
        for g in self.groups:
            if not g.learning:
                continue
            L = g.learner
            if L.off_policy:  # its replay buffer needs no returns
                continue
            last_values, _ = L.critic(g.take(s.obs), s.state, L.critic_h, L.reset_mask, active=g.take(s.active))
            L.algo.compute_returns(L.buffer, last_values)
        return self._rollout_stats()

    def _rollout_stats(self) -> dict:
        """After a rollout: count its env steps and return its finished episodes' statistics (read once)."""
        self.env_steps += self.cfg.rollout_length * self.cfg.num_envs
        stats = {}
        r, group_r, extras = self.episodes.finish()  # the finished episodes, read once (storage/episode_log.py)
        if r is not None:
            self.recent_returns.extend(r.tolist())
            stats["episode_return_mean"] = float(r.mean())
            stats["episodes"] = int(r.numel())
        else:
            stats["episode_return_mean"] = float("nan")
            stats["episodes"] = 0
        if self.multi:
            for g in self.groups:
                r = group_r.get(g.name)
                if r is not None:
                    self.group_recent[g.name].extend(r.tolist())
                stats[f"{g.name}/episode_return_mean"] = float(r.mean()) if r is not None else float("nan")
        for k, v in extras.items():
            stats[k] = float(v.mean())
        return stats

    def _collect_steps(self) -> EnvStep:
        """The rollout's T env steps (collect); returns the last EnvStep."""
        cfg = self.cfg
        s = self.last
        learning = [g for g in self.groups if g.learning]
        bootstrap = any(g.learner.off_policy or g.learner.cfg.ppo.bootstrap_truncated for g in learning)
        t = 0
        while t < cfg.rollout_length:
            if self.collect_graph is not None and self.collect_graph.chunk_fits(t):  # steps in which nothing ends
                s = self._collect_chunk(t, s)
                t += collect_step.CHUNK
                continue
            pending, parts = {}, []
            if self.collect_graph is not None:  # one group: its act and the env core in one graph, then the rest
                g = self.groups[0]
                nxt = self._env_step(None, t, core=self.collect_graph(t, s))
                g.learner.prev_obs = s.obs
                pending[g.name] = (None, None, s.active)  # no hidden states (feed-forward), acting slots
            else:
                for g in self.groups:
                    if g.learning:
                        actions, pending[g.name] = self._learner_act(g, s, t)
                    else:
                        actions = g.act_fixed(s)
                    parts.append(actions)
                joint = parts[0] if len(parts) == 1 else self._scatter(parts)
                nxt = self._env_step(joint, t)
            for g in learning:
                if g.learner.coplayer is not None:  # the co-player model's training data (algos/coplayer.py)
                    g.learner.coplayer.record(t, s, joint, nxt, self.groups)
            if self.watch is not None:  # no sync: the bootstrap is masked to the truncated envs
                truncated = bootstrap and nxt.final_obs is not None
            else:
                truncated = bootstrap and bool(nxt.truncated.any())  # one sync per step, shared by every learner
            if truncated:
                self._check_final_observations(nxt, t)
            for g in self.groups:
                if g.learning:
                    self._learner_observe(g, nxt, truncated, t, *pending[g.name])
                else:
                    g.observe_fixed(nxt)
            if self.multi:
                for g in self.groups:  # the group's return: sum over steps of the mean over its agents
                    g.ep_return = g.ep_return + g.take(nxt.reward).mean(-1)
            if nxt.episode_done is not None:  # kept on the device, selected at the rollout's end
                done = nxt.episode_done
                self.episodes.add(done, nxt.episode_return, nxt.extras,
                                  {g.name: g.ep_return for g in self.groups} if self.multi else None)
                if self.multi:
                    for g in self.groups:
                        g.ep_return = torch.where(done, 0.0, g.ep_return)
            s = nxt
            t += 1
        return s

    def _collect_chunk(self, t: int, s: EnvStep) -> EnvStep:
        """Steps t .. t + CHUNK - 1 as one graph call (collect_step.py; no episode ends in them, so no resets,
        bootstraps or episode statistics); their rewards, observations and states checked as each step's are."""
        last, rewards, observations, states = self._env_call(lambda: self.collect_graph.chunk(t, s), t)
        if self.watch is not None:  # recorded on the device, read at the rollout's end
            self.watch.watch_steps(t, (("reward", rewards), ("observation", observations), ("state", states)))
        elif not math.isfinite(float(rewards.sum() + observations.sum() + states.sum())):
            for k in range(collect_step.CHUNK):  # the first step with a non-finite value, as the step-wise check
                self._raise_if_nonfinite((("reward", rewards[k]), ("observation", observations[k]),
                                          ("state", states[k])), t + k)
        return last

    def _learner_act(self, g, s: EnvStep, t: int):
        """A learning group's batched actor + critic forward on its slots, stored at step t of its buffer."""
        L = g.learner
        obs, available, active = g.take(s.obs), g.take(s.available_actions), g.take(s.active)  # [E, K, ...]
        if L.off_policy:  # MADDPG: exploration actions; the transition is pushed once the step is taken
            actions = L.algo.explore(obs, available)
            return actions, (dict(obs=obs, state=s.state, available=available, active=active, actions=actions),
                             None, active)
        if L.coplayer is not None:  # the critic reads the env's obs; the actor this, with the belief when fed
            partners = torch.cat([h.partner_id.view(h.partner_id.shape[0], -1) for h in self.groups], -1) \
                if self.multi else None  # [E, G'] (a draw=slot population: one column per slot)
            actor_obs = L.coplayer.act(t, obs, L.reset_mask, partners)
        else:
            actor_obs = obs
        actions, logp, dist_params, actor_h, values, critic_h = L.policy_step(  # compiled with ppo.compile
            actor_obs, available, L.actor_h, L.reset_mask, active, obs, s.state, L.critic_h)
        L.buffer.insert(t, obs=actor_obs, state=s.state, available=available, active=active,
                        reset=L.reset_mask, actions=actions, logp=logp, values=values, dist_params=dist_params,
                        actor_h=L.actor_h, critic_h=L.critic_h,
                        prev_obs=L.prev_obs if L.store_prev_obs else None)
        L.prev_obs = actor_obs
        return actions, (actor_h, critic_h, active)

    def _learner_observe(self, g, nxt: EnvStep, truncated: bool, t: int, carried, critic_h, active) -> None:
        """The group's own agents' rewards and ends of the step just taken -> its buffer (`truncated`: some env
        hit its time limit and some learner bootstraps; `carried`: the actor's next hidden state, or the
        off-policy learner's transition row)."""
        L = g.learner
        if L.off_policy:
            self._replay_push(g, nxt, carried)
            return
        reward, dones = transition_targets(L.death, g.take(nxt.reward), g.take(nxt.done), active,
                                           nxt.terminated | nxt.truncated)  # [E, K] each
        if truncated and L.cfg.ppo.bootstrap_truncated:
            # time limit, not a real end: bootstrap from the value of the final observation
            final_active = g.take(nxt.final_active)
            v_final, _ = L.critic(g.take(nxt.final_obs), nxt.final_state, critic_h, None, active=final_active)
            alive = bootstrap_mask(L.death, nxt.truncated, final_active)
            bootstrapped = reward + L.cfg.ppo.gamma * L.algo.value_norm.denormalize(v_final) * alive
            # sync-free: every step comes here; rows that did not truncate keep their reward as it is
            reward = torch.where(alive > 0, bootstrapped, reward) if self.watch is not None else bootstrapped
        L.buffer.insert(t, rewards=reward, dones=dones)
        L.reset_mask = dones
        L.actor_h, L.critic_h = carried, critic_h

    def _replay_push(self, g, nxt: EnvStep, row: dict) -> None:
        """One transition per env into an off-policy learner's replay buffer: the next observation is the final
        one where the episode ended; an agent's target ends (terminal) at its death or a real end, not at a time
        limit it survives."""
        ended = nxt.terminated | nxt.truncated  # [E]
        final_obs = nxt.final_obs if nxt.final_obs is not None else nxt.obs
        final_state = nxt.final_state if nxt.final_state is not None else nxt.state
        final_active = nxt.final_active if nxt.final_active is not None else nxt.active
        next_active = g.take(torch.where(ended[:, None], final_active, nxt.active))  # [E, K]
        survives_limit = (nxt.truncated & ~nxt.terminated)[:, None] & next_active  # [E, K]
        g.learner.buffer.push(**row, reward=g.take(nxt.reward), terminal=g.take(nxt.done) & ~survives_limit,
                              next_obs=g.take(torch.where(ended[:, None, None], final_obs, nxt.obs)),
                              next_state=torch.where(ended[:, None], final_state, nxt.state),
                              next_active=next_active, next_available=g.take(nxt.available_actions))

    def _scatter(self, parts: list[torch.Tensor]) -> torch.Tensor:
        """Each group's actions [E, K, ...] into one [E, N, ...] tensor for env.step."""
        first = parts[0]
        actions = torch.empty((first.shape[0], self.spec.num_agents, *first.shape[2:]), dtype=first.dtype,
                              device=first.device)
        for g, a in zip(self.groups, parts):
            actions[:, g.index] = a.to(first.dtype)
        return actions

    def _env_step(self, actions: torch.Tensor | None, t: int, core: tuple | None = None) -> EnvStep:
        """env.step (or the eager rest of a step whose core ran in the collection graph) with its exceptions and
        non-finite outputs turned into one-line errors."""
        nxt = self._env_call(lambda: self.env.step(actions) if core is None else self.collect_graph.finish(*core), t)
        quantities = (("reward", nxt.reward), ("observation", nxt.obs), ("state", nxt.state))
        if self.watch is not None:  # recorded on the device, read at the rollout's end (runtime/nonfinite_watch.py)
            self.watch.watch(t, quantities)
        # one fused reduction and one sync per step: a NaN / inf anywhere makes the sum non-finite
        # (an overflowing sum of finite values is re-checked exactly and passes)
        elif not math.isfinite(float(nxt.reward.sum() + nxt.obs.sum() + nxt.state.sum())):
            self._raise_if_nonfinite(quantities, t)
        return nxt

    def _env_call(self, step, t: int):
        """step() (the env's step or a part of it) with the env's own exceptions turned into one-line errors."""
        try:
            return step()
        except (UserError, RunFailed):
            raise
        except Exception as e:  # noqa: BLE001 - the env's own failure, in this process or a worker
            raise self._env_failure(e, f"at {self._where(t)}") from e

    def _check_final_observations(self, step: EnvStep, t: int) -> None:
        """At a truncation the critic reads the final observation / state of the truncated envs (only those rows)."""
        rows = step.truncated  # [E]
        final_obs = torch.where(rows[:, None, None], step.final_obs, 0.0)  # [E, N, obs_dim]
        final_state = torch.where(rows[:, None], step.final_state, 0.0)  # [E, state_dim]
        quantities = (("final observation", final_obs), ("final state", final_state))
        if self.watch is not None:
            self.watch.watch(t, quantities)
        elif not math.isfinite(float(final_obs.sum() + final_state.sum())):
            self._raise_if_nonfinite(quantities, t)

    def _where(self, t: int | None) -> str:
        """Position in training for messages: `update u, rollout step t, env step s`."""
        if t is None:
            return f"the start of update {self.update + 1}, env step {self.env_steps:,}"
        return f"update {self.update + 1}, rollout step {t + 1}, env step {self.env_steps + (t + 1) * self.cfg.num_envs:,}"

    def _raise_if_nonfinite(self, quantities, t: int | None) -> None:
        """Slow path: name the first non-finite env quantity ((name, [E, N, ...] or [E, state_dim]) pairs) and where."""
        for quantity, x in quantities:
            bad = ~torch.isfinite(x)
            if not bad.any():
                continue
            index = bad.nonzero()[0].tolist()  # [env, agent slot, ...] ([env, feature] for state)
            raise self._nonfinite(quantity, index, x[tuple(index)].item(), int(bad.sum()), t)

    def _raise_watched(self, cause: Exception | None) -> None:
        """Sync-free collection's checks, read once: the first non-finite env output of the rollout, as the per-step
        check names it (raised from `cause`, an error later in the rollout, if any)."""
        found = self.watch.first()
        if found is not None:
            t, quantity, index, value, count = found
            raise self._nonfinite(quantity, index, value, count, t) from cause

    def _nonfinite(self, quantity: str, index: list[int], value: float, count: int, t: int) -> NonFiniteError:
        names = self.spec.agent_names
        where = f"env {index[0]}"
        if not quantity.endswith("state"):
            slot = index[1]
            where += f", agent slot {slot}" + (f" ({names[slot]})" if slot < len(names) else "")
        return NonFiniteError(f"non-finite {quantity} ({value}) from env {self.cfg.env!r} at {self._where(t)}: "
                              f"{where} (non-finite values: {count})")

    def _env_failure(self, error: Exception, when: str) -> EnvFailure | InternalFailure:
        """The env raised: its traceback (with a worker's, if any) to RUN_DIR/error.log, one line for the user; or,
        where the library's own code raised around the env call (`library_module`), the same as the library's."""
        log = self.run_dir / "error.log"
        log.write_text("".join(traceback.format_exception(error)))
        module = library_module(error)
        if module is not None:
            return InternalFailure(f"hypermappo internal error in {module}: {one_line(error)} ({when}; traceback "
                                   f"in {log})")
        return EnvFailure(f"env {self.cfg.env!r} raised {one_line(error)} ({when}; traceback in {log})")

    # ------------------------------------------------------------------ the loop

    def run(self) -> dict:
        """Train to the end; see the module docstring for how faults and signals stop it."""
        with self.stop.installed(self._aborted):  # the first SIGINT / SIGTERM sets stop_signal; a second aborts
            try:
                return self._run()
            except Exception as e:
                if self.stop_signal is not None and not isinstance(e, (UserError, NonFiniteError)):
                    raise self._interrupted_during(e) from e
                if isinstance(e, RunFailed):
                    raise self._stopped(e) from e
                raise

    # the first SIGINT / SIGTERM run() received (None: none yet); the loop stops after the update it came in
    stop_signal = property(lambda self: self.stop.received, lambda self, signum: setattr(self.stop, "received", signum))

    def _aborted(self, signum: int) -> RunInterrupted:
        """What a second SIGINT / SIGTERM raises."""
        name = signal.Signals(signum).name
        kept = f"the last checkpoint ({self.last_checkpoint}) is unchanged" if self.last_checkpoint \
            else "no checkpoint was written"
        return RunInterrupted(f"aborted by a second {name}; {kept}; continue with: hypermappo resume {self.run_dir}",
                              128 + signum)

    def _interrupted_during(self, error: Exception) -> RunInterrupted:
        """The update under way failed after the first SIGINT / SIGTERM: the signal reached the processes it started
        too (sent to the process group: a compiler not shielded, an env worker). The signal is what stopped the run;
        the failure's traceback goes to RUN_DIR/error.log and the last checkpoint stays as it was."""
        log = self.run_dir / "error.log"
        log.write_text("".join(traceback.format_exception(error)))
        self._end_progress_line()
        for close in (self.logger.close, self.env.close):
            try:
                close()
            except Exception:  # noqa: BLE001 - already stopping; report the signal, not this
                pass
        if isinstance(error, RunFailed) and error.__cause__ is not None:  # an env call's failure: what it caught
            error = error.__cause__
        name = signal.Signals(self.stop_signal).name
        kept = f"the last checkpoint ({self.last_checkpoint}) is unchanged" if self.last_checkpoint \
            else "no checkpoint was written"
        return RunInterrupted(f"interrupted by {name} in update {self.update + 1}, which did not finish ({one_line(error)}; "
                              f"traceback in {log}); {kept}; continue with: hypermappo resume {self.run_dir}",
                              128 + self.stop_signal)

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
            progress.end_line()

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
            # a switch takes effect at the first rollout starting at or after its env step
            switched = [f"{g.name}->{g.phases[g.phase].describe()}" for g in self.groups
                        if g.due_switch(self.env_steps)]
            learning = [g for g in self.groups if g.learning]
            for g in learning:
                if g.learner.cfg.ppo.lr_decay:
                    g.learner.algo.set_lr_fraction(1.0 - self.update / self.updates_total)
            # compiling (the first updates of a compiled run): the compilers it starts do not get SIGINT / SIGTERM sent
            # to the process group, so a signal lets this update finish (runtime/signals.py)
            self.stop.shield_children(self.compiled and len(self.first_update_s) < 2)
            t0 = time.perf_counter()
            for g in learning:
                g.learner.actor.eval(), g.learner.critic.eval()
            ep = self.collect()
            t1 = time.perf_counter()
            every = cfg.diagnostics.every
            diag_due = every and (self.update + 1) % every == 0
            diag, losses = {}, {}
            for g in learning:
                L = g.learner
                L.actor.train(), L.critic.train()
                if diag_due and not L.off_policy:
                    diag.update(self._prefix(g, L.diagnostics.before_update(L.buffer, L.algo.recurrent)))
                auditing = L.audit is not None and L.updates_done < cfg.diagnostics.audit_updates
                L.algo.after_backward = L.audit.observe_grads if auditing else None  # no cost after the audit
                if L.coplayer is not None:
                    L.coplayer.after_backward = L.algo.after_backward
            t_update = time.perf_counter()
            group_losses = {}
            for g in learning:  # each learner from its own agents' samples only
                try:
                    group_losses[g.name] = g.learner.algo.update(g.learner.buffer, g.learner.batch_generator)
                    if g.learner.coplayer is not None:  # its own optimiser, from its own losses
                        group_losses[g.name].update(g.learner.coplayer.update())
                except NonFiniteError as e:
                    where = f" of group {g.name!r}" if self.multi else ""
                    raise NonFiniteError(f"{e}{where} of update {self.update + 1} (env step {self.env_steps:,}) on "
                                         f"env {cfg.env!r}") from None
                g.learner.updates_done += 1
                losses.update(self._prefix(g, group_losses[g.name]))
            t2 = time.perf_counter()
            self.stop.shield_children(False)
            if diag_due:
                for g in learning:
                    L = g.learner
                    if not L.off_policy:
                        diag.update(self._prefix(g, L.diagnostics.after_update(L.buffer, L.algo.recurrent)))
            diag_s = (t_update - t1) + (time.perf_counter() - t2)  # diagnostics, excluded from train_sps
            self.update += 1
            if self.compiled and len(self.first_update_s) < 2:
                self._note_compile_time(t2 - t0)
            for g in learning:
                self._audit(g, group_losses[g.name])
            row = {"update": self.update, "env_steps": self.env_steps, **ep,
                   "train_sps": cfg.rollout_length * cfg.num_envs / ((t1 - t0) + (t2 - t_update)),
                   "collect_s": t1 - t0, "update_s": t2 - t_update, "diagnostics_s": diag_s, **losses, **diag}
            if self.switching:
                row["switch"] = "; ".join(switched)
            eval_stats = self._log_update(row, start, segment_steps0) or eval_stats
            if self.stop_signal is not None and self.update < self.updates_total:
                self._stop_for_signal()
        return self._finish_run(start, eval_stats)

    def _log_update(self, row: dict, start: float, steps0: int) -> dict | None:
        """After update `self.update`: its evaluation where one is due, the metrics row, the progress line and the
        checkpoint where one is due; the evaluation's statistics (None: none was due)."""
        cfg = self.cfg
        eval_stats = None
        last = self.update == self.updates_total
        steps_before = self.env_steps - cfg.rollout_length * cfg.num_envs
        milestone = any(steps_before < m <= self.env_steps for m in cfg.eval_at_steps)
        if (cfg.eval_interval and self.update % cfg.eval_interval == 0) or last or milestone:
            eval_stats = self._evaluate_checked()
            row.update({"eval_return_mean": eval_stats["return_mean"],
                        "eval_return_std": eval_stats["return_std"]})
            row.update({f"{name}/eval_return_mean": v for name, v in eval_stats.get("group_returns", {}).items()})
        row["wall_s"] = self.wall_before + time.perf_counter() - start  # since the run started: compile, evals in
        self.logger.log(row)
        self._progress(row, start, steps0)
        if (cfg.checkpoint_interval and self.update % cfg.checkpoint_interval == 0) or last:
            self.save_checkpoint()
        return eval_stats

    def _finish_run(self, start: float, eval_stats: dict | None) -> dict:
        """After the last update: summary.json (with an evaluation), then close what the run holds."""
        wall = self.wall_before + time.perf_counter() - start
        if not self.quiet and self.cfg.log.progress:
            print(file=sys.stderr)
        if eval_stats is None:  # resumed from the final checkpoint, killed before the summary was written
            eval_stats = self._evaluate_checked()
        summary = self.write_summary(wall, eval_stats)
        self.logger.close()
        self.env.close()
        self.run_lock.release()
        return summary

    def _note_compile_time(self, update_s: float) -> None:
        """Compiling happens inside this process's first update: its excess over the second is the compile time
        (summary.json `compile_s`; it is in `wall_s`, and the harness excludes it from env-steps/s)."""
        self.first_update_s.append(update_s)
        if len(self.first_update_s) == 2:
            first, second = self.first_update_s
            self.summary_extra["compile_s"] = round(max(0.0, first - second), 2)
            for g in self.groups:  # their graphs are in the cache now: ppo.compile=auto prices the next run so
                if g.learner is not None and g.learner.compiled:
                    compiled_shapes.remember(g.learner.cfg, self.device, self.summary_extra["compile_s"])
            kernels = cpu_kernels_report() if self.device.type == "cpu" else None  # the probed CPU passes' choices
            if kernels:
                self.summary_extra["cpu_kernels"] = kernels
            if not self.quiet:
                self._end_progress_line()
                print(f"compile: {self.summary_extra['compile_s']:.1f} s (first update {first:.1f} s, the next "
                      f"{second:.2f} s)" + (f"; {kernels}" if kernels else ""), file=sys.stderr, flush=True)

    def _audit(self, group, losses: dict) -> None:
        """Live-component audit of a learner group (after its own first updates): stop the run if an enabled
        module or loss term is dead."""
        L = group.learner
        if L.audit is None or L.updates_done > self.cfg.diagnostics.audit_updates:
            return
        L.audit.observe(losses)
        if L.updates_done < self.cfg.diagnostics.audit_updates:
            return
        result = L.audit.check(L.updates_done)
        if self.multi:
            self.summary_extra.setdefault("group_audit", {})[group.name] = result
        else:
            self.summary_extra["audit"] = result
        if not result["passed"]:
            dead = [f"{group.name}/{d}" for d in result["dead"]] if self.multi else result["dead"]
            message = f"live-component audit after {L.updates_done} updates: dead: {', '.join(dead)}"
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
        if self.multi:
            return evaluate_groups(self.cfg, self.groups, episodes or self.cfg.eval_episodes, deterministic,
                                   self.device)
        return evaluate_policy(self.cfg, self.primary.acting_actor, episodes or self.cfg.eval_episodes, deterministic,
                               self.device)

    def _progress(self, row: dict, start: float, steps0: int) -> None:
        if self.quiet or not self.cfg.log.progress:
            return
        sps = (self.env_steps - steps0) / max(time.perf_counter() - start, 1e-9)
        total = self.updates_total * self.cfg.rollout_length * self.cfg.num_envs
        progress.show(progress.progress_line(self.env_steps, total, sps, self.recent_returns,
                                             row.get("eval_return_mean")))

    def write_summary(self, wall: float, eval_stats: dict | None, status: str = "finished") -> dict:
        """summary.json; `status` is "finished" or "failed: <why>" (then no evaluation numbers)."""
        groups = None
        if self.multi:
            groups = {g.name: {
                "kind": g.kind, "slots": g.slots, "phase": g.phases[g.phase].describe(),
                "episode_return_recent": float(np.mean(self.group_recent[g.name])) if self.group_recent[g.name]
                else None,
                "eval_return_mean": eval_stats["group_returns"][g.name] if eval_stats else None,
                **({"member_episodes": g.member_record()} if g.population is not None else {})}
                for g in self.groups}
        summary = run_summary.run_summary(self.cfg, status, self.env_steps, self.update, wall, eval_stats,
                                          self.recent_returns, self.summary_extra, groups)
        run_summary.write(self.run_dir, summary)
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
            **({"coplayer": self.primary.coplayer.state_dict()} if self.primary.coplayer is not None else {}),
            # an off-policy learner's replay buffer (with groups: in each group's entry)
            **({"replay": self.buffer.state_dict()} if self.primary.off_policy and not self.multi else {}),
            # until the audit has run: its parameter snapshot and the loss terms seen so far
            "audit": self.audit.state_dict() if self.audit and self.update < self.cfg.diagnostics.audit_updates
            else None,
            **({"groups": {g.name: g.state_dict(with_audit=g.learner is not None and
                                                   g.learner.updates_done < self.cfg.diagnostics.audit_updates)
                           for g in self.groups},
                "group_recent": {k: list(v) for k, v in self.group_recent.items()}} if self.multi else {}),
        }

    def save_checkpoint(self) -> Path:
        """Write atomically (temp file + rename) with its size + CRC-32 sidecar; older ones go only after the
        new one is complete. Weights with a NaN / inf are never written (so never rotate a good one away)."""
        bad = first_nonfinite({f"{g.name}/{part}" if self.multi else part: getattr(g.learner, part).state_dict()
                               for g in self.groups if g.learner is not None for part in ("actor", "critic", "algo")})
        if bad:
            raise NonFiniteError(f"non-finite {bad} before the checkpoint of update {self.update} "
                                 f"(env step {self.env_steps:,}) on env {self.cfg.env!r}")
        path = write_checkpoint(self.run_dir / "checkpoints", self.update, self.checkpoint_state())  # checkpoint.py
        self.last_checkpoint, self.last_checkpoint_update = path, self.update
        return path

    def _intact_checkpoint(self) -> tuple[Path, dict]:
        """The newest checkpoint that verifies (see `read_checkpoint`, plus the models' keys and shapes).

        Newer unusable ones are renamed `*.pt.corrupt` (kept for inspection, out of the rotation) and the
        choice is printed on one line; with none intact, a UserError lists why each was rejected.
        """
        models = {"actor": self.actor.state_dict(), "critic": self.critic.state_dict()}

        def fits(sd: dict) -> None:
            for name, model in models.items():
                if shapes(sd[name]) != shapes(model):
                    raise ValueError(f"its {name} does not match this config's network")

        path, sd, rejected = newest_intact(self.run_dir, self.device, accept=fits)
        if path is None:
            raise UserError(f"{self.run_dir}: no intact checkpoint to resume from ({reasons(rejected)})")
        for bad, _ in rejected:
            set_aside(bad)
        skipped = "".join(f"{bad.name} is unusable ({why}), set aside as {bad.name}.corrupt; " for bad, why in rejected)
        print(f"resume: {skipped}continuing from {path} (update {sd['update']}, env step {sd['env_steps']:,})",
              file=sys.stderr, flush=True)
        return path, sd

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
        self.primary.updates_done = sd["update"]  # a run without groups: its learner learnt at every update
        if self.primary.off_policy and not self.multi:
            self.buffer.load_state_dict(sd["replay"])
        self.summary_extra = sd["summary_extra"]
        rng = sd["rng"]
        torch.set_rng_state(rng["torch"].cpu())
        np.random.set_state(rng["numpy"])
        random.setstate(rng["python"])
        restore(self.batch_generator, rng["batch"], "mini-batch")
        if rng.get("cuda") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]])
        if sd.get("audit") is not None and self.audit is not None:
            self.audit.load_state_dict(sd["audit"])
        if sd.get("coplayer") is not None and self.primary.coplayer is not None and not self.multi:
            self.primary.coplayer.load_state_dict(sd["coplayer"], with_memory=sd["env_state"] is not None)
        if self.multi:
            for g in self.groups:
                g.load_state_dict(sd["groups"][g.name], with_episode_state=sd["env_state"] is not None)
            for name, returns in sd["group_recent"].items():
                self.group_recent[name].extend(returns)
        if sd["env_state"] is not None:
            self.env.set_state(sd["env_state"])
            self.last = sd["last_step"].to(self.device)
            p = self.primary
            p.actor_h, p.critic_h, p.reset_mask = sd["actor_h"], sd["critic_h"], sd["reset_mask"]
            p.prev_obs = sd["prev_obs"]
        else:
            # third-party envs cannot save their state: start fresh episodes from the saved RNG state
            try:
                self.last = self.env.reset(seed=self.cfg.seed + self.update)
            except (UserError, RunFailed):
                raise
            except Exception as e:  # noqa: BLE001 - the env's own failure
                raise self._env_failure(e, "in reset() on resume") from e
            for g in self.groups:
                g.start(self.last)


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
