"""`seeds=`: S seeds of one config trained as one batched run in one process, each into its own run directory.

Why: a run of E = 1024 envs leaves most of a GPU idle (its time goes to launching small kernels), and researchers
train every config for several seeds; JaxMARL trains ten at once with vmap. Here the seeds' envs are blocks of one
env (`reset_blocks`: block b draws what an env seeded with seeds[b] alone draws), one env step serves every
seed, and on a GPU the seeds' actors and critics are called once for all seeds (torch.func.vmap over parameters
stacked per seed), in collection and in every mini-batch step (`batch_mode`).

What keeps each seed's run its own: a whole `Experiment` per seed (run directory, config.yaml, metrics, evaluations,
checkpoints, summary.json), its own optimisers, value normaliser and mini-batch generator, and its own action noise
(drawn from a generator that holds what the global generator of that seed's run alone holds). Each rollout is copied
into the seed's own buffer, where its returns, mini-batches, diagnostics and statistics come from that run's code.

Same run as alone: the same initial weights, env starts, action noise and mini-batches as `seed=s` alone. With the
networks called in turn (a CPU's default) each seed is its run alone to the bit, every metric, evaluation and
checkpoint (tested); vmapped (a GPU's), the losses of a first mini-batch step are equal to the bit and the gradients
to float rounding (a batched product adds in another order), so the runs drift apart over many updates as one
config's run does on two machines. Each seed's config.yaml is its run alone (`seed=s`, no `seeds`, eager);
`hypermappo resume RUN_DIR` continues a seed alone. What it batches: `config.check_seed_batch`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.func import functional_call, stack_module_state, vmap

from hypermappo.algos.death import bootstrap_mask, transition_targets
from hypermappo.algos.mappo import nonfinite_step
from hypermappo.envs.registry import make_env
from hypermappo.envs.vec import EnvStep
from hypermappo.errors import NonFiniteError, RunFailed, RunInterrupted, UserError
from hypermappo.experiment import Experiment, default_run_dir
from hypermappo.runtime import progress, sync_free
from hypermappo.runtime.nonfinite_watch import NonFiniteWatch
from hypermappo.storage.rollout import RolloutBuffer


class LossModules(nn.Module):
    """What one seed's PPO loss reads (actor, critic, value normaliser) as one module, for functional_call."""

    def __init__(self, algo):
        super().__init__()
        self.actor, self.critic = algo.actor, algo.critic
        self.value_norm = algo.value_norm if isinstance(algo.value_norm, nn.Module) else None
        self._algo = (algo,)  # a tuple: not a submodule

    def forward(self, batch: dict, adv_mean: torch.Tensor, adv_std: torch.Tensor):
        return self._algo[0].loss(batch, adv_mean, adv_std)


def run_dirs(cfg) -> list[Path]:
    """Each seed's run directory: RUN_DIR/seed_<s>, or the default directory of that seed's run alone."""
    if cfg.run_dir:
        return [Path(cfg.run_dir) / f"seed_{s}" for s in cfg.seeds]
    return [default_run_dir(dataclasses.replace(cfg, seed=s)) for s in cfg.seeds]


def block_step(step: EnvStep, rows: slice) -> EnvStep:
    """The EnvStep of the envs `rows` (a seed's block)."""
    kw = {}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        if isinstance(v, torch.Tensor):
            v = v[rows].clone()
        elif isinstance(v, dict):
            v = {k: x[rows].clone() for k, x in v.items()}
        kw[f.name] = v
    return EnvStep(**kw)


class SeedBatch:
    """The seeds of `cfg.seeds` as one run: see the module docstring."""

    def __init__(self, cfg, quiet: bool = False):
        if not cfg.seeds:
            raise UserError("seeds: expected a list of seeds, e.g. seeds=[0,1,2]")
        self.cfg, self.quiet = cfg, quiet
        self.seeds = list(cfg.seeds)
        self.failed: int | None = None  # the block of the seed a fault came from
        S, E = len(self.seeds), cfg.num_envs
        self.batched, note = batch_mode(torch.device(cfg.device), cfg.actor)  # refused before any run is made
        self.exps: list[Experiment] = []
        self.cpu_rng, self.noise = [], []  # per seed: the global generators' states its run alone would hold
        try:
            for s, run_dir in zip(self.seeds, run_dirs(cfg)):
                alone = dataclasses.replace(cfg, seed=s, seeds=[], run_dir=str(run_dir),
                                            ppo=dataclasses.replace(cfg.ppo, compile="off"))  # what runs: eager
                exp = Experiment(alone, run_dir, quiet=True)
                self.exps.append(exp)
                self.cpu_rng.append((torch.get_rng_state(), np.random.get_state(), random.getstate()))
                noise = torch.Generator(device=exp.device)
                noise.set_state(torch.cuda.get_rng_state(exp.device) if exp.device.type == "cuda"
                                else torch.get_rng_state())
                self.noise.append(noise)
                exp.summary_extra["seed_batch"] = f"seed {s}, trained batched with seeds {self.seeds} in one process"
            first = self.exps[0]
            self.device, self.spec = first.device, first.spec
            self.env = make_env(cfg.env, S * E, self.device, **cfg.env_kwargs)
            self.blocks = [slice(b * E, (b + 1) * E) for b in range(S)]
            self.sync_free = sync_free.decide(self.device)[0]
            self.env.sync_free = self.sync_free
            L = first.primary
            self.buffer = RolloutBuffer(cfg.rollout_length, S * E, self.spec.num_agents, self.spec.obs_dim,
                                        self.spec.state_dim, *_action_layout(first), 0,
                                        first.buffer.dist_params.shape[-1], 0, 0, self.device,
                                        store_prev_obs=L.store_prev_obs)
            self.death = L.death
            self.losses = [LossModules(e.algo) for e in self.exps]
            for exp in self.exps:
                exp.summary_extra["seed_batch_networks"] = note
        except BaseException:
            for exp in reversed(self.exps):  # a failed start holds no run directory (nor the parents it made)
                exp.logger.close()
                exp.run_lock.release()
                exp.claim.undo()
            raise

    # ------------------------------------------------------------------ stacked parameters

    def _stacked(self, modules: list[nn.Module]):
        """The modules' parameters (detached: collection takes no gradient) and buffers, stacked per seed."""
        params, buffers = stack_module_state(modules)
        return {k: v.detach() for k, v in params.items()}, buffers

    def _call(self, module: nn.Module):
        """fn(params, buffers, *args) -> module's forward with one seed's parameters (vmapped over seeds)."""
        def call(params, buffers, *args, **kwargs):
            return functional_call(module, (params, buffers), args, kwargs)
        return call

    # ------------------------------------------------------------------ collection

    def _start(self) -> None:
        self.last = self.env.reset_blocks(self.seeds)
        for exp, rows in zip(self.exps, self.blocks):
            exp.last = block_step(self.last, rows)
            exp.primary.start(exp.last.obs)
        self.reset_mask = torch.ones(self.env.num_envs, self.spec.num_agents, dtype=torch.bool, device=self.device)
        self.prev_obs = torch.zeros_like(self.last.obs)  # the observation acted on at the step before (Learner's)

    def _noise(self, shape: tuple) -> torch.Tensor:
        """[S * E, ...] uniforms (`shape`: one seed's), block b from seed b's generator, as its run alone draws
        them (`rand_like` in Categorical.sample)."""
        return torch.cat([torch.rand(shape, generator=g, device=self.device) for g in self.noise])

    @torch.no_grad()
    def _collect(self) -> None:
        cfg = self.cfg
        first = self.exps[0]
        for exp in self.exps:
            exp.episodes.clear()
        A = first.buffer.dist_params.shape[-1]
        forward, final_values = self._batched_forwards() if self.batched else self._forwards_in_turn()

        watch = NonFiniteWatch() if self.sync_free else None
        bootstrap = cfg.ppo.bootstrap_truncated
        s = self.last
        for t in range(cfg.rollout_length):
            u = self._noise((cfg.num_envs, self.spec.num_agents, A))  # [S * E, N, A]
            actions, logp, params, values = forward(s, u)
            self.buffer.insert(t, obs=s.obs, state=s.state, available=None, active=s.active, reset=self.reset_mask,
                               actions=actions, logp=logp, values=values, dist_params=params,
                               prev_obs=self.prev_obs if self.buffer.prev_obs is not None else None)
            self.prev_obs = s.obs
            nxt = first._env_call(lambda a=actions: self.env.step(a), t)  # the env's failures in one line, as alone
            quantities = (("reward", nxt.reward), ("observation", nxt.obs), ("state", nxt.state))
            if watch is not None:
                watch.watch(t, quantities)
            elif not math.isfinite(float(nxt.reward.sum() + nxt.obs.sum() + nxt.state.sum())):
                self._raise_nonfinite(*_first_nonfinite(quantities), t)
            truncated = nxt.final_obs is not None if self.sync_free else bool(nxt.truncated.any())
            reward, dones = transition_targets(self.death, nxt.reward, nxt.done, s.active,
                                               nxt.terminated | nxt.truncated)
            if truncated and bootstrap:
                v_final = final_values(nxt)
                v_final = torch.cat([e.algo.value_norm.denormalize(v_final[rows])
                                     for e, rows in zip(self.exps, self.blocks)])
                alive = bootstrap_mask(self.death, nxt.truncated, nxt.final_active)
                bootstrapped = reward + cfg.ppo.gamma * v_final * alive
                reward = torch.where(alive > 0, bootstrapped, reward) if self.sync_free else bootstrapped
            self.buffer.insert(t, rewards=reward, dones=dones)
            self.reset_mask = dones
            if nxt.episode_done is not None:
                for exp, rows in zip(self.exps, self.blocks):
                    exp.episodes.add(nxt.episode_done[rows], nxt.episode_return[rows],
                                     {k: v[rows] for k, v in nxt.extras.items()}, None)
            s = nxt
        if watch is not None:
            found = watch.first()
            if found is not None:
                t, quantity, index, value, count = found
                self._raise_nonfinite(quantity, index, value, count, t)
        self.last = s
        # each seed's rollout into its own buffer: its returns, mini-batches and statistics are its run's code
        for exp, rows in zip(self.exps, self.blocks):
            for name, stacked in vars(self.buffer).items():
                mine = getattr(exp.buffer, name, None)
                if isinstance(stacked, torch.Tensor) and stacked.dim() > 1 and isinstance(mine, torch.Tensor):
                    mine.copy_(stacked[:, rows])
            exp.last = block_step(s, rows)
            L = exp.primary
            L.reset_mask, L.prev_obs = self.reset_mask[rows].clone(), self.prev_obs[rows].clone()
            last_values, _ = L.critic(exp.last.obs, exp.last.state, None, L.reset_mask, active=exp.last.active)
            L.algo.compute_returns(L.buffer, last_values)

    def _batched_forwards(self):
        """(forward(step, noise) -> actions, log-probs, policy parameters, values; final_values(step) -> values) for
        every seed at once: actor and critic vmapped over the seeds' stacked parameters."""
        S, E = len(self.seeds), self.cfg.num_envs
        pa, ba = self._stacked([e.actor for e in self.exps])
        pc, bc = self._stacked([e.critic for e in self.exps])
        act_fn, value_fn = self._call(self.exps[0].actor), self._call(self.exps[0].critic)

        def act(pa, ba, pc, bc, obs, state, reset, active, u):  # Learner.policy_forward, one seed
            out = act_fn(pa, ba, obs, None, None, reset, active=active)
            actions = out.dist.sample_from(u)
            values, _ = value_fn(pc, bc, obs, state, None, reset, active=active)
            return actions, out.dist.log_prob(actions), out.dist.params(), values

        batched_act = vmap(act)
        batched_value = vmap(lambda pc, bc, obs, state, active: value_fn(pc, bc, obs, state, None, None,
                                                                        active=active)[0])

        def per_seed(x):  # [S * E, ...] -> [S, E, ...]
            return x.unflatten(0, (S, E))

        def forward(s, u):
            return tuple(x.flatten(0, 1) for x in batched_act(pa, ba, pc, bc, per_seed(s.obs), per_seed(s.state),
                                                              per_seed(self.reset_mask), per_seed(s.active),
                                                              per_seed(u)))

        def final_values(nxt):
            return batched_value(pc, bc, per_seed(nxt.final_obs), per_seed(nxt.final_state),
                                 per_seed(nxt.final_active)).flatten(0, 1)

        return forward, final_values

    def _forwards_in_turn(self):
        """As `_batched_forwards`, each seed's actor and critic called on its own block in turn (Learner's calls)."""
        def forward(s, u):
            parts = []
            for exp, rows in zip(self.exps, self.blocks):
                obs, reset, active = s.obs[rows], self.reset_mask[rows], s.active[rows]
                out = exp.actor(obs, None, None, reset, active=active)
                actions = out.dist.sample_from(u[rows])
                values, _ = exp.critic(obs, s.state[rows], None, reset, active=active)
                parts.append((actions, out.dist.log_prob(actions), out.dist.params(), values))
            return tuple(torch.cat(x) for x in zip(*parts))

        def final_values(nxt):
            return torch.cat([exp.critic(nxt.final_obs[rows], nxt.final_state[rows], None, None,
                                         active=nxt.final_active[rows])[0]
                              for exp, rows in zip(self.exps, self.blocks)])

        return forward, final_values

    def _raise_nonfinite(self, quantity: str, index: list[int], value: float, count: int, t: int):
        b, E = index[0] // self.cfg.num_envs, self.cfg.num_envs
        self.failed = b
        exp = self.exps[b]
        raise exp._nonfinite(quantity, [index[0] - b * E, *index[1:]], value, count, t)

    # ------------------------------------------------------------------ update

    def _update(self) -> list[dict]:
        """One PPO update of every seed -> each seed's loss metrics: each seed's own update in turn (its run alone's
        code), or batched (`update_mode`)."""
        if self.batched:
            return self._update_batched()
        out = []
        for b, exp in enumerate(self.exps):
            try:
                out.append(exp.algo.update(exp.buffer, exp.batch_generator))
            except NonFiniteError as e:  # worded as the run alone words it
                self.failed = b
                raise NonFiniteError(f"{e} of update {exp.update + 1} (env step {exp.env_steps:,}) on env "
                                     f"{self.cfg.env!r}") from None
        return out

    def _update_batched(self) -> list[dict]:
        """`_update` mini-batch step by mini-batch step: the seeds' losses in one vmapped call, then each seed's own
        clipping and Adam step."""
        p = self.cfg.ppo
        S = len(self.seeds)
        algos = [e.algo for e in self.exps]
        stats = [a.advantage_stats(e.buffer) for a, e in zip(algos, self.exps)]
        adv_mean = torch.stack([m for m, _ in stats])
        adv_std = torch.stack([sd for _, sd in stats])
        loss_fn = self._call(self.losses[0])
        batched_loss = vmap(loss_fn)
        sums: list[dict] = [{} for _ in range(S)]
        n = 0
        for epoch in range(p.ppo_epoch):
            batches = [list(e.buffer.minibatches(p.num_mini_batch, e.batch_generator, p.minibatch_over))
                       for e in self.exps]
            for minibatch in range(len(batches[0])):
                batch = {k: torch.stack([b[minibatch][k] for b in batches]) for k in batches[0][minibatch]}
                params, buffers = stack_module_state(self.losses)
                actor_loss, value_loss, step_stats = batched_loss(params, buffers, batch, adv_mean, adv_std)
                (actor_loss + p.value_coef * value_loss).sum().backward()
                checked, norms = [], []
                for b, (algo, modules) in enumerate(zip(algos, self.losses)):
                    for name, param in modules.named_parameters():
                        param.grad = params[name].grad[b]
                    if algo.after_backward is not None:
                        algo.after_backward()
                    norms.append(algo._clip())
                    checked.append(torch.stack([actor_loss[b].detach(), value_loss[b].detach(), *norms[b]]))
                finite = torch.isfinite(torch.stack(checked)).all(1)
                if not bool(finite.all()):  # one read for every seed
                    b = self.failed = int((~finite).nonzero()[0, 0])
                    exp = self.exps[b]
                    raise NonFiniteError(f"{nonfinite_step({k: v[b] for k, v in step_stats.items()}, epoch, minibatch)}"
                                         f" of update {exp.update + 1} (env step {exp.env_steps:,}) on env "
                                         f"{self.cfg.env!r}")
                for b, algo in enumerate(algos):
                    algo._step()
                    mine = {**{k: v[b] for k, v in step_stats.items()},
                            "grad_norm_actor": norms[b][0], "grad_norm_critic": norms[b][1]}
                    for k, v in mine.items():  # summed in step order, as MAPPO.update sums them
                        sums[b][k] = sums[b].get(k, 0.0) + v.detach()
                n += 1
        return [algo._finish_update(exp.buffer, {k: float(v) / n for k, v in sums[b].items()})
                for b, (algo, exp) in enumerate(zip(algos, self.exps))]

    # ------------------------------------------------------------------ the loop

    def _sync_run_state(self, b: int) -> None:
        """Seed b's env block, learner state and global generators into its Experiment (its checkpoint reads them)."""
        exp = self.exps[b]
        if exp.spec.can_save_state:
            exp.env.set_state(self.env.block_state(b))
        cpu, np_state, py_state = self.cpu_rng[b]
        torch.set_rng_state(self.noise[b].get_state() if self.device.type == "cpu" else cpu)
        if self.device.type == "cuda":
            torch.cuda.set_rng_state(self.noise[b].get_state(), self.device)
        np.random.set_state(np_state)
        random.setstate(py_state)

    def run(self) -> list[dict]:
        stop = self.exps[0].stop
        with stop.installed(lambda signum: RunInterrupted(f"aborted by a second {signal.Signals(signum).name}; "
                                                          f"each seed's last checkpoint is unchanged", 128 + signum)):
            try:
                return self._run(stop)
            except RunFailed as e:
                raise self._stopped(e) from e

    def _stopped(self, error: RunFailed) -> RunFailed:
        """A fault stops every seed: the seed it came from records it as its run alone would (a non-finite value:
        status failed in its summary.json); every seed's run is closed with its last checkpoint kept."""
        for b, exp in enumerate(self.exps):
            if b == self.failed:
                exp._stopped(error)
                continue
            for close in (exp.logger.close, exp.env.close):
                try:
                    close()
                except Exception:  # noqa: BLE001 - already failing; report the first fault, not this one
                    pass
        self.env.close()
        where = f"seed {self.seeds[self.failed]}: " if self.failed is not None else ""
        kept = ", ".join(f"{e.run_dir} ({e.last_checkpoint.name if e.last_checkpoint else 'no checkpoint'})"
                         for e in self.exps)
        return type(error)(f"{where}{error}; every seed stopped with its last checkpoint kept: {kept}; `hypermappo "
                           f"resume RUN_DIR` continues a seed alone")

    def _run(self, stop) -> list[dict]:
        cfg = self.cfg
        self._start()
        start = time.perf_counter()
        eval_stats = [None] * len(self.exps)
        first = self.exps[0]
        while first.update < first.updates_total:
            for exp in self.exps:
                if cfg.ppo.lr_decay:
                    exp.algo.set_lr_fraction(1.0 - exp.update / exp.updates_total)
                exp.actor.eval(), exp.critic.eval()
            t0 = time.perf_counter()
            self._collect()
            eps = [exp._rollout_stats() for exp in self.exps]
            t1 = time.perf_counter()
            diag = [{} for _ in self.exps]
            every = cfg.diagnostics.every
            diag_due = every and (first.update + 1) % every == 0
            for b, exp in enumerate(self.exps):
                L = exp.primary
                L.actor.train(), L.critic.train()
                if diag_due:
                    diag[b] = L.diagnostics.before_update(L.buffer, False)
                auditing = L.audit is not None and L.updates_done < cfg.diagnostics.audit_updates
                L.algo.after_backward = L.audit.observe_grads if auditing else None
            t_update = time.perf_counter()
            losses = self._update()
            t2 = time.perf_counter()
            steps = cfg.rollout_length * cfg.num_envs
            batch_s = (t1 - t0) + (t2 - t_update)
            for b, exp in enumerate(self.exps):
                L = exp.primary
                if diag_due:
                    diag[b].update(L.diagnostics.after_update(L.buffer, False))
                L.updates_done += 1
                exp.update += 1
                exp._audit(exp.groups[0], losses[b])
                row = {"update": exp.update, "env_steps": exp.env_steps, **eps[b],
                       "train_sps": steps / batch_s, "seed_batch_sps": len(self.exps) * steps / batch_s,
                       "collect_s": t1 - t0, "update_s": t2 - t_update, **losses[b], **diag[b]}
                self._sync_run_state(b)
                eval_stats[b] = exp._log_update(row, start, 0) or eval_stats[b]
                self.noise_back(b)
            if not self.quiet and cfg.log.progress:  # one line for the batch: seed 0's returns, all seeds' steps/s
                S = len(self.exps)
                progress.show(progress.progress_line(S * first.env_steps, S * first.updates_total * steps,
                                                     S * first.env_steps / max(time.perf_counter() - start, 1e-9),
                                                     first.recent_returns, eval_stats[0] and
                                                     eval_stats[0]["return_mean"]) + f"  ({S} seeds)")
            if stop.received is not None and first.update < first.updates_total:
                for b, exp in enumerate(self.exps):
                    if exp.last_checkpoint_update != exp.update:
                        self._sync_run_state(b)
                        exp.save_checkpoint()
                    exp.logger.close()
                    exp.run_lock.release()
                name = signal.Signals(stop.received).name
                raise RunInterrupted(f"interrupted by {name} after update {first.update}; saved a checkpoint of each "
                                     f"seed; continue each with: hypermappo resume "
                                     f"{' / '.join(str(e.run_dir) for e in self.exps)}", 128 + stop.received)
        if not self.quiet and cfg.log.progress:
            progress.end_line()
        summaries = []
        for b, exp in enumerate(self.exps):
            self._sync_run_state(b)
            summaries.append(exp._finish_run(start, eval_stats[b]))
        self.env.close()
        return summaries

    def noise_back(self, b: int) -> None:
        """What seed b's evaluation and checkpoint drew from the global generator stays in its own stream."""
        if self.device.type == "cpu":
            self.noise[b].set_state(torch.get_rng_state())
        self.cpu_rng[b] = (torch.get_rng_state(), np.random.get_state(), random.getstate())


BATCH_VAR = "HYPERMAPPO_SEED_BATCH"


def batch_mode(device, actor: str = "mlp") -> tuple[bool, str]:
    """(batched, the summary's words): the seeds' actors and critics called once for all seeds (vmapped over their
    stacked parameters, in collection and in the update's mini-batch steps), or each seed's in turn.

    auto: in turn on a CPU, where each seed is then its run alone to the bit (its update is the run alone's code, C
    kernels and micro-batches included; the env is batched either way) and faster: 2-core AMD EPYC, MPE simple_spread
    at the paper's settings, 4 seeds, in turn 1.13x and 1.08x one seed alone's env-steps/s at E = 64 and 256 per seed,
    vmapped 0.95x and 0.68x (benchmarks/results/seed_batch_cpu.md); batched on a GPU, where one call for S seeds
    saves S - 1 calls' kernel launches, and runs equal their runs alone up to float rounding (a batched product adds
    in another order). Vmapped networks are the mlp actor's (the hypernetwork's C kernels and attention have no
    batching rules): other actors are called in turn."""
    flag = os.environ.get(BATCH_VAR, "auto")
    if flag not in ("auto", "batched", "each"):
        raise UserError(f"{BATCH_VAR}={flag!r}: expected auto, batched or each")
    if flag == "batched" and actor != "mlp":
        raise UserError(f"{BATCH_VAR}=batched: the vmapped path calls the mlp actor, got actor={actor!r} "
                        f"(auto or each calls it in turn)")
    batched = flag == "batched" or (flag == "auto" and device.type != "cpu" and actor == "mlp")
    how = "batched: one vmapped actor and critic call for every seed" if batched else \
        "each seed's actor, critic and update in turn (each seed its run alone to the bit)"
    return batched, f"{how} ({BATCH_VAR}={flag}, device {device.type})"


def _action_layout(exp) -> tuple:
    buf = exp.buffer
    return tuple(buf.actions.shape[3:]), buf.actions.dtype


def _first_nonfinite(quantities) -> tuple[str, list[int], float, int]:
    for quantity, x in quantities:
        bad = ~torch.isfinite(x)
        if bad.any():
            index = bad.nonzero()[0].tolist()
            return quantity, index, x[tuple(index)].item(), int(bad.sum())
    raise AssertionError("no non-finite value")  # the caller found one


def train(cfg, quiet: bool = False) -> list[dict]:
    return SeedBatch(cfg, quiet).run()
