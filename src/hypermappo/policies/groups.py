"""Policy groups: the agent slots split into named groups, each acting with one batched call per step.

A group owns the index of its K slots and, for the current phase of its switch schedule, a policy:
- learner: its own actor, critic, MAPPO (optimisers, value normaliser) and RolloutBuffer over its K slots; its
  critic reads the env's global state and its agents' ids within the group, its advantages its agents' own
  rewards (`reward[:, slots]`), and it is updated from its own agents' samples only;
- scripted: a batched function from `policies/scripted.py` (no parameters, no optimiser);
- frozen: the actor of another run's latest intact checkpoint, in eval mode, without an optimiser.

With no `groups` in the config the run has one learner group of all slots, built from the run's own config;
that group's networks, generator seeds and order of random draws are exactly those of a run before groups
existed (tests/test_groups.py checks metrics.csv and the checkpoint against a stored reference).

Config rules (`check_group_specs`, all before a run starts; `resolve_slots` once the env is known):
- `groups` is a list of mappings with `name` (letters, digits, _ and -, unique) and `agents` (a non-empty list
  of slot indices, agent names, or fnmatch patterns such as `adversary_*` that match at least one name);
  every slot belongs to exactly one group.
- `kind` is learner (default), scripted (needs `policy`, optional `params`), frozen (needs `run_dir`,
  optional `group`: which group of that run to load; default its first learner) or population (needs
  `members`: scripted and / or frozen entries, one of which plays in each env; optional `sample`: episode
  (default, a new member per env whenever its episode ends) or fixed (one member per env for the whole run);
  optional `draw`: env (default, one member plays all the group's slots of an env) or slot (each slot draws its
  own, a mix); see policies/population.py; no `switch`). `partner_id` [E] is the member playing in each env
  ([E, K], per slot, with draw=slot).
- learners may override `actor`, `algo` and the `model`, `critic`, `ppo`, `hyper`, `maddpg` sections; other kinds
  may not (`algo: maddpg` gives a group MADDPG: its critic reads the state and its own agents' actions).
- `switch`: a list of `{at_step, kind, policy / params / run_dir / group}` with increasing `at_step`; a switch
  takes effect at the first rollout that starts at env step >= at_step. A switch to learner uses the group's
  learner settings (built at the start, so a group that learns, is switched away and back keeps its learner).
- at least one group must learn at some point of the run.
"""

from __future__ import annotations

import torch

from hypermappo.algos import micro_batch
from hypermappo.compile import compile_fn
from hypermappo.compile import decide as decide_compile
from hypermappo.config import CHUNK_AUTO_MAX, data_chunk_length
from hypermappo.errors import UserError
from hypermappo.policies.loaded import load_frozen_actor  # a trained run's actor for a frozen group (loaded.py)
from hypermappo.policies.population import (
    Population,
    PopulationState,
    count_member_episodes,
    initial_members,
    resample_ended,
)
from hypermappo.policies.scripted import ScriptedContext, get_scripted

# the groups as configured (specs.py); imported here also for the callers that know them as groups' names
from hypermappo.policies.specs import (  # noqa: F401
    GroupSpec,
    Phase,
    _phase,
    check_group_specs,
    group_specs,
    resolve_slots,
    slot_index,
    sub_spec,
    widened_spec,
)
from hypermappo.runtime.device_rng import device_generator, restore


class Learner:
    """A learning group's networks, algorithm and storage (the pre-groups Experiment's, for K slots)."""

    def __init__(self, cfg, spec, num_envs: int, device, batch_seed: int, env_spec=None, slots: list | None = None):
        from hypermappo.algos.death import resolve_death
        from hypermappo.algos.mappo import MAPPO
        from hypermappo.diagnostics import Diagnostics, LiveComponentAudit
        from hypermappo.models.actor import build_actor
        from hypermappo.models.critic import build_critic
        from hypermappo.models.distributions import params_size
        from hypermappo.storage.rollout import RolloutBuffer, action_layout

        self.cfg, self.spec = cfg, spec
        # co-player model (algos/coplayer.py); a belief fed to the actor widens the actor's input, not the critic's
        self.coplayer, actor_spec = None, spec
        if cfg.coplayer.enabled:
            from hypermappo.algos.coplayer import make_coplayer
            from hypermappo.models.coplayer import belief_dim

            self.coplayer = make_coplayer(cfg, env_spec or spec, slots or list(range(spec.num_agents)), num_envs,
                                            device, batch_seed)
            actor_spec = widened_spec(spec, belief_dim(cfg, env_spec or spec))
        self.actor = build_actor(cfg.actor, actor_spec, cfg).to(device)
        self.off_policy = cfg.algo == "maddpg"
        if self.off_policy:
            self._build_maddpg(cfg, spec, num_envs, device, batch_seed)
            return
        self.critic = build_critic(spec, cfg).to(device)
        self.death = resolve_death(cfg.ppo.death, spec)  # episode | agent (algos/death.py)
        # ppo.compile (compile/decision.py): the policy step below and the PPO update as graphs, where they can be
        self.compiled, self.compile_note = decide_compile(cfg, torch.device(device))
        self.policy_step = compile_fn(self.policy_forward) if self.compiled else self.policy_forward
        if self.compiled and hasattr(self.coplayer, "compile"):  # the goal belief's network and update steps
            self.coplayer.compile(compile_fn)
        self.algo = MAPPO(self.actor, self.critic, cfg, compiled=self.compiled)
        T, L = cfg.rollout_length, data_chunk_length(cfg)  # auto: the largest divisor of T up to 10 (config.py)
        if self.algo.recurrent and T % L:
            raise UserError(f"ppo.data_chunk_length: recurrent training needs rollout_length ({T}) to be a multiple "
                            f"of it, got {L}")
        self.chunk_note = (f"ppo.data_chunk_length: auto = {L} (the largest divisor of rollout_length {T} up to "
                           f"{CHUNK_AUTO_MAX})" if self.algo.recurrent and cfg.ppo.data_chunk_length == "auto" else None)
        self.micro_note = micro_batch.describe(cfg, T * num_envs, spec.num_agents)  # for the run header
        self.batch_generator = device_generator(batch_seed, device)  # mini-batch draws on the run's device
        space = spec.action_space
        action_shape, action_dtype = action_layout(space)
        n_avail = int(space.n) if spec.has_available_actions else 0
        self.store_dist_params = True  # KL alignment and per-agent KL diagnostics need the behaviour policy
        self.store_prev_obs = getattr(self.actor, "needs_prev_obs", False)
        self.buffer = RolloutBuffer(T, num_envs, spec.num_agents, actor_spec.obs_dim, spec.state_dim,
                                    action_shape, action_dtype, n_avail,
                                    params_size(space) if self.store_dist_params else 0,
                                    self.actor.hidden_size, self.critic.hidden_size, device,
                                    store_prev_obs=self.store_prev_obs)
        if hasattr(self.coplayer, "bind_values"):  # the subgoal model picks subgoals by the learner's values
            self.coplayer.bind_values(self.buffer.values)
        self.diagnostics = Diagnostics(self.actor, cfg, actor_spec)
        self.audit = LiveComponentAudit(self.actor, self.critic, cfg) if cfg.diagnostics.audit_updates else None
        if self.audit is not None and self.coplayer is not None and self.coplayer.trains:
            self.audit.watch("coplayer", self.coplayer.model, self.coplayer.loss_terms())
        # what acts in evaluation: the actor, with the co-player belief computed on the way when it reads one
        self.acting_actor = self.actor
        if actor_spec is not spec:
            if cfg.coplayer.model == "bayes":
                from hypermappo.algos.coplayer_bayes import BayesBeliefActor

                self.acting_actor = BayesBeliefActor(self.actor, self.coplayer.model, cfg,
                                                     slots or list(range(spec.num_agents)))
            else:
                from hypermappo.models.coplayer import BeliefActor

                self.acting_actor = BeliefActor(self.actor, self.coplayer.model)
        self.actor_h = self.critic_h = self.reset_mask = self.prev_obs = None
        self.updates_done = 0  # its own updates (a group switched to learner later starts at 0; the audit counts these)

    def policy_forward(self, actor_obs, available, actor_h, reset, active, obs, state, critic_h):
        """Collection's forward for one step: sampled actions, their log-probs, the behaviour policy's parameters
        (when stored), the actor's next hidden state, values and the critic's next hidden state."""
        out = self.actor(actor_obs, available, actor_h, reset, active=active)
        actions = out.dist.sample()  # [E, K, ...]
        params = out.dist.params() if self.store_dist_params else None
        values, critic_h = self.critic(obs, state, critic_h, reset, active=active)  # [E, K]
        return actions, out.dist.log_prob(actions), params, out.hidden, values, critic_h

    def _build_maddpg(self, cfg, spec, num_envs: int, device, batch_seed: int) -> None:
        """MADDPG's learner: Q critic, target networks, replay buffer; no diagnostics or audit (MAPPO-only)."""
        from hypermappo.algos.maddpg import MADDPG, QCritic
        from hypermappo.diagnostics import Diagnostics
        from hypermappo.storage.replay import ReplayBuffer
        from hypermappo.storage.rollout import action_layout

        self.critic = QCritic(spec, cfg).to(device)
        self.algo = MADDPG(self.actor, self.critic, cfg, spec)
        self.death = "agent"  # a dead agent's target ends at its death; its later steps are masked out
        self.batch_generator = device_generator(batch_seed, device)  # replay sampling, on the run's device
        action_shape, action_dtype = action_layout(spec.action_space)
        n_avail = int(spec.action_space.n) if spec.has_available_actions else 0
        self.buffer = ReplayBuffer(cfg.maddpg.buffer_size, spec.num_agents, spec.obs_dim, spec.state_dim,
                                   action_shape, action_dtype, n_avail, device)
        self.store_dist_params = self.store_prev_obs = False
        self.diagnostics = Diagnostics(self.actor, cfg, spec)  # never run (its state is checkpointed as for MAPPO)
        self.audit = None
        self.compiled, self.compile_note = decide_compile(cfg, torch.device(device))  # off, or a one-line error
        self.acting_actor = self.actor  # what acts in evaluation (no co-player model with MADDPG: config refuses it)
        self.actor_h = self.critic_h = self.reset_mask = self.prev_obs = None
        self.updates_done = 0

    def start(self, obs: torch.Tensor) -> None:
        """Fresh episodes: zero recurrent state, every slot reset. obs: [E, K, obs_dim]."""
        E, K = obs.shape[:2]
        self.reset_mask = torch.ones(E, K, dtype=torch.bool, device=obs.device)
        self.prev_obs = torch.zeros_like(obs)
        self.actor_h = torch.zeros(E, K, self.actor.hidden_size, device=obs.device) if self.actor.hidden_size else None
        self.critic_h = (torch.zeros(E, K, self.critic.hidden_size, device=obs.device)
                         if self.critic.hidden_size else None)
        if self.coplayer is not None:
            self.coplayer.start(E, obs.device)

    def state_dict(self, with_audit: bool) -> dict:
        return {"actor": self.actor.state_dict(), "critic": self.critic.state_dict(), "algo": self.algo.state_dict(),
                "batch": self.batch_generator.get_state(), "actor_h": self.actor_h, "critic_h": self.critic_h,
                "reset_mask": self.reset_mask, "prev_obs": self.prev_obs,
                "diagnostics": self.diagnostics.state_dict(), "updates_done": self.updates_done,
                "audit": self.audit.state_dict() if self.audit and with_audit else None,
                **({"coplayer": self.coplayer.state_dict()} if self.coplayer is not None else {}),
                **({"replay": self.buffer.state_dict()} if self.off_policy else {})}

    def load_state_dict(self, sd: dict, with_episode_state: bool) -> None:
        self.actor.load_state_dict(sd["actor"])
        self.critic.load_state_dict(sd["critic"])
        self.algo.load_state_dict(sd["algo"])
        restore(self.batch_generator, sd["batch"], "mini-batch")
        self.diagnostics.load_state_dict(sd["diagnostics"])
        self.updates_done = sd["updates_done"]
        if self.off_policy:
            self.buffer.load_state_dict(sd["replay"])
        if sd.get("audit") is not None and self.audit is not None:
            self.audit.load_state_dict(sd["audit"])
        if with_episode_state:
            self.actor_h, self.critic_h, self.reset_mask = sd["actor_h"], sd["critic_h"], sd["reset_mask"]
            self.prev_obs = sd["prev_obs"]
        if self.coplayer is not None and sd.get("coplayer") is not None:
            self.coplayer.load_state_dict(sd["coplayer"], with_memory=with_episode_state)


class PolicyGroup:
    """One group of slots: its index, its phases and the policy of the current one (see the module docstring)."""

    def __init__(self, spec: GroupSpec, slots: list[int], env, device, learner_number: int, group_number: int,
                 seed: int):
        self.name, self.spec, self.slots = spec.name, spec, slots
        self.K = len(slots)
        self.env, self.device = env, device
        self.index = slot_index(slots, env.spec.num_agents, device)
        self.slot_tensor = torch.tensor(slots, dtype=torch.long, device=device)  # [K]
        self.env_spec = sub_spec(env.spec, slots)
        self.phases = spec.phases
        self.phase = 0
        # the implicit all-slots group uses the pre-groups seed of the mini-batch generator (seed + 1)
        self.learner = Learner(spec.cfg, self.env_spec, spec.cfg.num_envs, device, seed + 1 + 7919 * learner_number,
                               env.spec, slots) if spec.learns else None
        self.generator = torch.Generator().manual_seed(seed + 2 + 7919 * group_number)  # scripted randomness
        self.frozen = {i: load_frozen_actor(p, self.env_spec, device) for i, p in enumerate(self.phases)
                       if p.kind == "frozen"}
        self.scripted = {i: get_scripted(p.policy) for i, p in enumerate(self.phases) if p.kind == "scripted"}
        self.frozen_h = self.frozen_reset = None
        # which policy plays this group in each env (the phase index); co-player memories reset when it changes
        self.partner_id = torch.zeros(env.num_envs, dtype=torch.long, device=device)  # [E]
        self.last_goal = None  # [E, K] a goal-directed scripted policy's targets at its last act (else None)
        # a population group (policies/population.py): its members, the member playing in each env (partner_id)
        pop = self.phases[0] if self.phases[0].kind == "population" else None
        self.population = Population(pop.members, self.env_spec, self.slot_tensor, device) if pop else None
        self.member_generator = torch.Generator().manual_seed(seed + 3 + 7919 * group_number)
        self.population_state = None
        # episodes each member played here (per slot with draw=slot): the run's record of its training partners
        self.member_episodes = torch.zeros(len(self.population) if pop else 0, dtype=torch.long, device=device)
        # episodes the current draw has played in each env (episodes_per_draw > 1: redrawn when it reaches that)
        self.draw_age = torch.zeros(env.num_envs, dtype=torch.long, device=device)
        self.ep_return = None  # [E] this group's running episode return (sum of the mean over its agents)

    @property
    def kind(self) -> str:
        return self.phases[self.phase].kind

    def member_record(self) -> dict:
        """{member identity: episodes it played in training} of a population group (per slot with draw=slot), keyed
        by `Phase.identity()`, so `hypermappo adapt` can check a held-out partner against it."""
        counts = self.member_episodes.tolist()
        record: dict = {}
        for m, n in zip(self.population.members, counts):
            record[m.identity()] = record.get(m.identity(), 0) + n
        return record

    @property
    def learning(self) -> bool:
        return self.kind == "learner"

    def take(self, x: torch.Tensor | None) -> torch.Tensor | None:
        """This group's slots of an [E, N, ...] tensor -> [E, K, ...]."""
        return None if x is None else x[:, self.index]

    def start(self, step) -> None:
        obs = self.take(step.obs)
        if self.learner is not None:
            self.learner.start(obs)
        self._start_frozen(obs)
        self.ep_return = torch.zeros(obs.shape[0], device=obs.device)
        if self.population is not None:
            E = obs.shape[0]
            per_slot = self.K if self.phases[0].draw == "slot" else None
            self.partner_id = initial_members(E, len(self.population), self.phases[0].sample,
                                              self.member_generator, per_slot).to(obs.device)
            self.population_state = self.population.new_state(E)
            self.draw_age = torch.zeros(E, dtype=torch.long, device=obs.device)

    def _start_frozen(self, obs: torch.Tensor) -> None:
        E = obs.shape[0]
        actor = self.frozen.get(self.phase)
        self.frozen_reset = torch.ones(E, self.K, dtype=torch.bool, device=obs.device)
        self.frozen_h = torch.zeros(E, self.K, actor.hidden_size, device=obs.device) \
            if actor is not None and actor.hidden_size else None

    def due_switch(self, env_steps: int) -> bool:
        """Apply the schedule before a rollout; True when the phase changed (recurrent state starts afresh)."""
        changed = False
        while self.phase + 1 < len(self.phases) and self.phases[self.phase + 1].at_step <= env_steps:
            self.phase += 1
            changed = True
        if changed:
            self.partner_id.fill_(self.phase)
        if changed and self.ep_return is not None:
            obs = torch.zeros(self.ep_return.shape[0], self.K, self.env_spec.obs_dim, device=self.device)
            if self.learner is not None:
                self.learner.start(obs)
            self._start_frozen(obs)
        return changed

    @torch.no_grad()
    def act_fixed(self, step) -> torch.Tensor:
        """Actions [E, K] of a scripted, frozen or population phase (sampled from a frozen actor)."""
        if self.kind == "population":
            actions, self.last_goal = self.population.act(step, self.env, self.population_state, self.partner_id,
                                                          self.generator)
            return actions
        if self.kind == "scripted":
            p = self.phases[self.phase]
            ctx = ScriptedContext(self.env, self.slot_tensor, self.generator, p.params)
            actions = self.scripted[self.phase](step, ctx)
            self.last_goal = ctx.goal
            return actions
        self.last_goal = None
        actor = self.frozen[self.phase]
        out = actor(self.take(step.obs), self.take(step.available_actions), self.frozen_h, self.frozen_reset,
                    active=self.take(step.active))
        self.frozen_h = out.hidden
        return out.dist.sample()

    def observe_fixed(self, nxt) -> None:
        if self.kind == "frozen":
            self.frozen_reset = self.take(nxt.done)
        if self.kind == "population":
            self.population.observe(self.population_state, self.take(nxt.done))
            ended = nxt.episode_done if nxt.episode_done is not None else nxt.done.all(-1)  # [E]
            self.member_episodes = count_member_episodes(self.member_episodes, self.partner_id, ended)
            if self.phases[0].sample == "episode":
                redraw = ended
                if self.phases[0].episodes_per_draw > 1:  # a draw plays that many consecutive episodes
                    self.draw_age = self.draw_age + ended.long()
                    redraw = ended & (self.draw_age >= self.phases[0].episodes_per_draw)
                    self.draw_age = torch.where(redraw, 0, self.draw_age)
                self.partner_id = resample_ended(self.partner_id, redraw, len(self.population), self.member_generator)

    def state_dict(self, with_audit: bool) -> dict:
        sd = {"phase": self.phase, "generator": self.generator.get_state(), "ep_return": self.ep_return,
              # saved once set (else it is the zeros a fresh group starts with: older checkpoints' keys unchanged);
              # always for a population, whose draws may all be member 0
              **({"partner_id": self.partner_id} if self.population is not None or bool(self.partner_id.any())
                 else {}),
              "frozen_h": self.frozen_h, "frozen_reset": self.frozen_reset,
              "learner": self.learner.state_dict(with_audit) if self.learner is not None else None}
        if self.population is not None:
            sd["population"] = {"member_generator": self.member_generator.get_state(),
                                "member_episodes": self.member_episodes, "draw_age": self.draw_age,
                                "hidden": self.population_state.hidden, "reset": self.population_state.reset}
        return sd

    def load_state_dict(self, sd: dict, with_episode_state: bool) -> None:
        self.phase = sd["phase"]
        self.generator.set_state(sd["generator"].cpu())
        if sd.get("partner_id") is not None:
            self.partner_id = sd["partner_id"].to(self.device)
        if self.learner is not None:
            self.learner.load_state_dict(sd["learner"], with_episode_state)
        if with_episode_state:
            self.ep_return, self.frozen_h, self.frozen_reset = sd["ep_return"], sd["frozen_h"], sd["frozen_reset"]
        if self.population is not None:
            pop = sd["population"]
            self.member_generator.set_state(pop["member_generator"].cpu())
            if pop.get("member_episodes") is not None:  # older checkpoints have no record: counts start at 0
                self.member_episodes = pop["member_episodes"].to(self.device)
            if pop.get("draw_age") is not None:  # older checkpoints: every draw played one episode
                self.draw_age = pop["draw_age"].to(self.device)
            if with_episode_state:
                self.population_state = PopulationState(pop["hidden"], pop["reset"])


def build_groups(cfg, env, device) -> list[PolicyGroup]:
    specs = group_specs(cfg)
    slots = resolve_slots(specs, env.spec)
    groups, learners = [], 0
    for i, (spec, s) in enumerate(zip(specs, slots)):
        groups.append(PolicyGroup(spec, s, env, device, learners, i, cfg.seed))
        learners += spec.learns
    return groups


def evaluation_members(episodes: int, slots: int, num_members: int, draw: str, device) -> torch.Tensor:
    """Who plays in evaluation episode e: member e mod M ([E]); with draw=slot, slot k of episode e plays member
    (e * K + k) mod M ([E, K]), so the members take turns over the cells and every member plays."""
    if draw == "slot":
        return (torch.arange(episodes * slots, device=device) % num_members).view(episodes, slots)
    return torch.arange(episodes, device=device) % num_members


@torch.no_grad()
def evaluate_groups(cfg, groups: list[PolicyGroup], episodes: int, deterministic: bool = True, device=None,
                    max_steps: int = 100_000, render_env: int | None = None) -> dict:
    """`evaluation.evaluate_policy` for a run with groups: each group plays its current phase (actors' modes when
    `deterministic`; scripted groups with a generator of their own, so training's random draws are untouched;
    a population group's members take turns over the episodes: `evaluation_members`);
    adds each group's mean return (sum over the episode of the mean over its agents) under `group_returns`."""
    from hypermappo.evaluation import EVAL_SEED_OFFSET, play_episodes

    device = device or torch.device(cfg.device)
    E = episodes
    actors = [g.learner.acting_actor if g.learning else g.frozen.get(g.phase) for g in groups]
    modes = [a.training if a is not None else False for a in actors]
    for a in actors:
        if a is not None:
            a.eval()
    hidden = [torch.zeros(E, g.K, a.hidden_size, device=device) if a is not None and a.hidden_size else None
              for g, a in zip(groups, actors)]
    reset = [torch.ones(E, g.K, dtype=torch.bool, device=device) for g in groups]
    contexts: list[ScriptedContext] = []
    taken = [None]  # the joint actions of the last step
    group_returns = torch.zeros(len(groups), E, device=device)
    populations = {i: (g.population.new_state(E), evaluation_members(E, g.K, len(g.population), g.phases[0].draw,
                                                                     device))
                   for i, g in enumerate(groups) if g.population is not None}

    def act(env, s):
        if not contexts:  # the evaluation env exists from the first step on
            contexts.extend(ScriptedContext(env, g.slot_tensor, torch.Generator().manual_seed(
                cfg.seed + EVAL_SEED_OFFSET + i), g.phases[g.phase].params) for i, g in enumerate(groups))
        actions = None
        for i, (g, actor) in enumerate(zip(groups, actors)):
            if actor is not None:
                out = actor(g.take(s.obs), g.take(s.available_actions), hidden[i], reset[i], active=g.take(s.active))
                a = out.dist.mode() if deterministic else out.dist.sample()
                hidden[i] = out.hidden
            elif i in populations:
                state, partner_id = populations[i]
                a, _ = g.population.act(s, env, state, partner_id, contexts[i].generator, deterministic)
            else:
                a = g.scripted[g.phase](s, contexts[i])
            if actions is None:
                actions = torch.empty((E, env.spec.num_agents, *a.shape[2:]), dtype=a.dtype, device=a.device)
            actions[:, g.index] = a.to(actions.dtype)
        taken[0] = actions
        return actions

    def after_step(s, finished):
        for a in actors:
            if a is not None and hasattr(a, "observe"):  # a belief over the others' goals sees everyone's moves
                a.observe(taken[0], s)
        for i, g in enumerate(groups):
            group_returns[i] += torch.where(finished, 0.0, g.take(s.reward).mean(-1))
            reset[i] = g.take(s.done)
            if i in populations:
                g.population.observe(populations[i][0], g.take(s.done))

    try:
        result = play_episodes(cfg, E, act, device, render_env, max_steps, after_step=after_step)
    finally:
        for a, mode in zip(actors, modes):
            if a is not None:
                a.train(mode)
                if hasattr(a, "done"):
                    a.done()
    result.pop("length_mean")  # as before: a group run's summary has no eval length
    result["group_returns"] = {g.name: float(group_returns[i].mean()) for i, g in enumerate(groups)}
    return result
