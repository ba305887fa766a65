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
  see policies/population.py; no `switch`). `partner_id` [E] is the member playing in each env.
- learners may override `actor`, `algo` and the `model`, `critic`, `ppo`, `hyper`, `maddpg` sections; other kinds
  may not (`algo: maddpg` gives a group MADDPG: its critic reads the state and its own agents' actions).
- `switch`: a list of `{at_step, kind, policy / params / run_dir / group}` with increasing `at_step`; a switch
  takes effect at the first rollout that starts at env step >= at_step. A switch to learner uses the group's
  learner settings (built at the start, so a group that learns, is switched away and back keeps its learner).
- at least one group must learn at some point of the run.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from hypermappo.algos import micro_batch
from hypermappo.compile import compile_fn
from hypermappo.compile import decide as decide_compile
from hypermappo.errors import UserError
from hypermappo.policies.population import Population, PopulationState, initial_members, resample_ended
from hypermappo.policies.scripted import ScriptedContext, get_scripted

KINDS = ("learner", "scripted", "frozen", "population")
LEARNER_KEYS = ("actor", "algo", "model", "critic", "ppo", "hyper", "maddpg")
PHASE_KEYS = {"learner": set(), "scripted": {"policy", "params"}, "frozen": {"run_dir", "group"},
              "population": {"members", "sample"}}
GROUP_KEYS = {"name", "agents", "kind", "switch", *LEARNER_KEYS, "policy", "params", "run_dir", "group", "members",
              "sample"}
SWITCH_KEYS = {"at_step", "kind", "policy", "params", "run_dir", "group"}
NAME = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass
class Phase:
    """What a group plays from env step `at_step` on."""

    at_step: int
    kind: str
    policy: str = ""
    params: dict = field(default_factory=dict)
    run_dir: str = ""
    group: str = ""
    members: list = field(default_factory=list)  # population: its members' phases (scripted / frozen)
    sample: str = ""  # population: episode | fixed

    def describe(self) -> str:
        if self.kind == "population":
            return f"population[{', '.join(m.describe() for m in self.members)}]"
        if self.kind == "scripted":
            return f"scripted:{self.policy}"
        if self.kind == "frozen":
            return f"frozen:{self.run_dir}" + (f"#{self.group}" if self.group else "")
        return "learner"


@dataclass
class GroupSpec:
    name: str
    agents: list
    phases: list[Phase]
    cfg: object = None  # the learner's Config (run config + this group's overrides); None when it never learns

    @property
    def learns(self) -> bool:
        return any(p.kind == "learner" for p in self.phases)


def _phase(where: str, entry: dict, at_step: int) -> Phase:
    kind = entry.get("kind", "learner")
    if kind not in KINDS:
        raise UserError(f"{where}.kind: {kind!r} is not one of {list(KINDS)}")
    for key in ("policy", "params", "run_dir", "group", "members", "sample"):
        if key in entry and key not in PHASE_KEYS[kind]:
            owner = next(k for k, keys in PHASE_KEYS.items() if key in keys)
            raise UserError(f"{where}.{key}: only a {owner} group takes it, got kind={kind!r}")
    if kind == "population":
        return _population_phase(where, entry, at_step)
    params = entry.get("params", {}) or {}
    if not isinstance(params, dict):
        raise UserError(f"{where}.params: expected a mapping like {{action: 2}}, got {params!r}")
    phase = Phase(at_step, kind, str(entry.get("policy", "")), dict(params), str(entry.get("run_dir", "")),
                  str(entry.get("group", "")))
    if kind == "scripted":
        if not phase.policy:
            raise UserError(f"{where}: a scripted group needs policy: NAME (a registered policy or module:function)")
        get_scripted(phase.policy)  # unknown names fail here, before the run
    if kind == "frozen":
        if not phase.run_dir:
            raise UserError(f"{where}: a frozen group needs run_dir: a run directory to load its actor from")
        if not (Path(phase.run_dir) / "config.yaml").exists():
            raise UserError(f"{where}.run_dir: {phase.run_dir!r} is not a run directory (no config.yaml)")
    return phase


def _population_phase(where: str, entry: dict, at_step: int) -> Phase:
    from hypermappo.policies.population import SAMPLE_MODES, member_entry

    if at_step:
        raise UserError(f"{where}.kind: a population is a group's kind from the start, not a switch target")
    members = entry.get("members")
    if not isinstance(members, list) or not members:
        raise UserError(f"{where}.members: a population group needs a non-empty list of members like "
                        f"[{{policy: staghunt_stag}}, {{run_dir: runs/x}}], got {members!r}")
    sample = entry.get("sample", "episode")
    if sample not in SAMPLE_MODES:
        raise UserError(f"{where}.sample: {sample!r} is not one of {list(SAMPLE_MODES)}")
    phases = [_phase(f"{where}.members[{j}]", member_entry(f"{where}.members[{j}]", m), 0)
              for j, m in enumerate(members)]
    return Phase(at_step, "population", members=phases, sample=sample)


def _group_config(cfg, where: str, entry: dict):
    """The run's config with this group's learner overrides applied and checked like the run's own."""
    from hypermappo import config as config_mod

    gcfg = copy.deepcopy(cfg)
    gcfg.groups = []
    top = {k: entry[k] for k in ("actor", "algo") if k in entry}
    sections = {k: entry[k] for k in ("model", "critic", "ppo", "hyper", "maddpg") if k in entry}
    config_mod.apply_dict(gcfg, top, f"{where}.")
    for key, value in sections.items():
        if not isinstance(value, dict):
            raise UserError(f"{where}.{key}: expected a mapping of {key}.* keys, got {value!r}")
        config_mod.apply_dict(getattr(gcfg, key), value, f"{where}.{key}.")
    try:
        config_mod.validate(gcfg)
    except UserError as e:
        raise UserError(f"{where}: {e}") from None

    def unused(c) -> dict[str, str]:  # as run_config.unused_keys (which sits above this module)
        return {**config_mod.unused_keys(c), **micro_batch.unused_keys(c)}

    run_unused = unused(cfg)
    for key, message in unused(gcfg).items():
        section = key.split(".")[0]
        if section in ("ppo", "maddpg", "diagnostics") and section not in entry and key not in run_unused:
            continue  # a run-level key that groups of another algorithm read
        if any(k in entry for k in LEARNER_KEYS):
            raise UserError(f"{where}: {message}")
    return gcfg


def group_specs(cfg) -> list[GroupSpec]:
    """The configured groups, checked (without the env); no groups -> one learner group of all slots."""
    if not cfg.groups:
        return [GroupSpec("all", ["*"], [Phase(0, "learner")], cfg)]
    specs, names = [], set()
    for i, entry in enumerate(cfg.groups):
        where = f"groups[{i}]"
        if not isinstance(entry, dict):
            raise UserError(f"{where}: expected a mapping like {{name: good, agents: [agent_*]}}, got {entry!r}")
        unknown = [k for k in entry if k not in GROUP_KEYS]
        if unknown:
            raise UserError(f"{where}: unknown key {unknown[0]!r}; expected some of {sorted(GROUP_KEYS)}")
        name = entry.get("name")
        if not isinstance(name, str) or not NAME.match(name):
            raise UserError(f"{where}.name: expected a name of letters, digits, _ and -, got {name!r}")
        if name in names:
            raise UserError(f"{where}.name: {name!r} is the name of an earlier group; names must be unique")
        names.add(name)
        where = f"groups[{i}] ({name})"
        agents = entry.get("agents")
        if not isinstance(agents, list) or not agents:
            raise UserError(f"{where}.agents: expected a non-empty list of slot indices or agent names, got {agents!r}")
        for a in agents:
            if isinstance(a, bool) or not isinstance(a, (int, str)) or (isinstance(a, int) and a < 0):
                raise UserError(f"{where}.agents: {a!r} is neither a slot index >= 0 nor an agent name / pattern")
        phases = [_phase(where, entry, 0)]
        schedule = entry.get("switch", []) or []
        if schedule and phases[0].kind == "population":
            raise UserError(f"{where}.switch: a population group takes no switch schedule (its members change "
                            f"per episode or per env instead)")
        if not isinstance(schedule, list):
            raise UserError(f"{where}.switch: expected a list of {{at_step: INT, kind: ...}}, got {schedule!r}")
        for j, sw in enumerate(schedule):
            sw_where = f"{where}.switch[{j}]"
            if not isinstance(sw, dict) or "at_step" not in sw:
                raise UserError(f"{sw_where}: expected a mapping like {{at_step: 10000, kind: learner}}, got {sw!r}")
            unknown = [k for k in sw if k not in SWITCH_KEYS]
            if unknown:
                raise UserError(f"{sw_where}: unknown key {unknown[0]!r}; expected some of {sorted(SWITCH_KEYS)}")
            at = sw["at_step"]
            if isinstance(at, bool) or not isinstance(at, int) or at < 1:
                raise UserError(f"{sw_where}.at_step: expected an env step count >= 1, got {at!r}")
            if at <= phases[-1].at_step:
                raise UserError(f"{sw_where}.at_step: {at} is not after the previous switch ({phases[-1].at_step})")
            phases.append(_phase(sw_where, sw, at))
        spec = GroupSpec(name, list(agents), phases)
        if any(k in entry for k in LEARNER_KEYS) and not spec.learns:
            key = next(k for k in LEARNER_KEYS if k in entry)
            raise UserError(f"{where}.{key}: only a learner group takes network / algorithm settings, and this group "
                            f"never learns (kind {phases[0].kind!r}, no switch to learner)")
        if spec.learns:
            spec.cfg = _group_config(cfg, where, entry)
        specs.append(spec)
    if not any(s.learns for s in specs):
        raise UserError("groups: no group learns; make at least one group kind: learner (or switch one to learner)")
    return specs


def check_group_specs(cfg) -> None:
    group_specs(cfg)


def resolve_slots(specs: list[GroupSpec], env_spec) -> list[list[int]]:
    """Each group's slot indices, in the order given; every slot in exactly one group."""
    n, names = env_spec.num_agents, list(env_spec.agent_names)
    owner: dict[int, str] = {}
    out = []
    for spec in specs:
        slots: list[int] = []
        for a in spec.agents:
            if isinstance(a, int):
                if a >= n:
                    raise UserError(f"groups ({spec.name}).agents: slot {a} does not exist; the env has slots "
                                    f"0..{n - 1}")
                found = [a]
            elif a in names:
                found = [names.index(a)]
            else:
                found = [i for i, nm in enumerate(names) if fnmatch.fnmatchcase(nm, a)]
                if a == "*" and not names:
                    found = list(range(n))
                if not found:
                    raise UserError(f"groups ({spec.name}).agents: {a!r} matches no agent of this env; its agents "
                                    f"are {names or list(range(n))}")
            for i in found:
                if i in owner:
                    raise UserError(f"groups: slot {i}" + (f" ({names[i]})" if i < len(names) else "") +
                                    f" is in two groups, {owner[i]!r} and {spec.name!r}")
                owner[i] = spec.name
                slots.append(i)
        out.append(slots)
    left = [i for i in range(n) if i not in owner]
    if left:
        shown = [names[i] if i < len(names) else i for i in left]
        raise UserError(f"groups: agent slot(s) {shown} are in no group; every slot needs one")
    return out


def sub_spec(env_spec, slots: list[int]):
    """The env spec as one group sees it: K agents, their names."""
    names = list(env_spec.agent_names)
    return dataclasses.replace(env_spec, num_agents=len(slots),
                               agent_names=[names[i] for i in slots] if names else [])


def slot_index(slots: list[int], n: int, device) -> slice | torch.Tensor:
    """A slice when the slots are consecutive (a view, no copy; all slots -> the tensors themselves), else [K] int64."""
    if slots == list(range(slots[0], slots[0] + len(slots))):
        return slice(None) if len(slots) == n else slice(slots[0], slots[0] + len(slots))
    return torch.tensor(slots, dtype=torch.long, device=device)


def widened_spec(spec, extra: int):
    """The spec an actor reading `extra` more input features (the co-player belief) is built for."""
    if not extra:
        return spec
    import gymnasium as gym

    dim = spec.obs_dim + extra
    return dataclasses.replace(spec, obs_dim=dim, observation_space=gym.spaces.Box(-float("inf"), float("inf"), (dim,)),
                               belief_dim=spec.belief_dim + extra)


def load_frozen_actor(phase: Phase, env_spec, device) -> torch.nn.Module:
    """The actor of `phase.run_dir`'s latest intact checkpoint (its group `phase.group`, if named), without grads."""
    from hypermappo import config as config_mod
    from hypermappo.checkpoint import newest_intact, reasons
    from hypermappo.models.actor import build_actor

    run_dir = Path(phase.run_dir)
    fcfg = config_mod.from_run_dir(run_dir)
    _, sd, rejected = newest_intact(run_dir, device)
    if sd is None:
        raise UserError(f"frozen run_dir {str(run_dir)!r}: no intact checkpoint ({reasons(rejected) or 'none there'})")
    state, acfg = sd["actor"], fcfg
    if phase.group:
        groups = sd.get("groups") or {}
        if phase.group not in groups or groups[phase.group].get("learner") is None:
            raise UserError(f"frozen group {phase.group!r}: run {str(run_dir)!r} has no learner group of that name "
                            f"(its learner groups: {[g for g, v in groups.items() if v.get('learner')]})")
        state = groups[phase.group]["learner"]["actor"]
        acfg = next(s.cfg for s in group_specs(fcfg) if s.name == phase.group)
    actor = build_actor(acfg.actor, env_spec, acfg).to(device)
    try:
        actor.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).splitlines()[1].strip() if len(str(e).splitlines()) > 1 else str(e)
        raise UserError(f"frozen run_dir {str(run_dir)!r}: its actor does not fit this group's "
                        f"{env_spec.num_agents} agent(s) / observation size ({first})") from None
    actor.requires_grad_(False)
    return actor.eval()


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
        self.algo = MAPPO(self.actor, self.critic, cfg, compiled=self.compiled)
        T, L = cfg.rollout_length, cfg.ppo.data_chunk_length
        if self.algo.recurrent and T % L:
            raise UserError(f"ppo.data_chunk_length: recurrent training needs rollout_length ({T}) to be a multiple "
                            f"of it, got {L}")
        self.micro_note = micro_batch.describe(cfg, T * num_envs, spec.num_agents)  # for the run header
        self.batch_generator = torch.Generator().manual_seed(batch_seed)
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
        self.batch_generator = torch.Generator().manual_seed(batch_seed)  # replay sampling
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
        self.batch_generator.set_state(sd["batch"].cpu())
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
        self.ep_return = None  # [E] this group's running episode return (sum of the mean over its agents)

    @property
    def kind(self) -> str:
        return self.phases[self.phase].kind

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
            self.partner_id = initial_members(E, len(self.population), self.phases[0].sample,
                                              self.member_generator).to(obs.device)
            self.population_state = self.population.new_state(E)

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
            if self.phases[0].sample == "episode":
                ended = nxt.episode_done if nxt.episode_done is not None else nxt.done.all(-1)  # [E]
                self.partner_id = resample_ended(self.partner_id, ended, len(self.population), self.member_generator)

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


@torch.no_grad()
def evaluate_groups(cfg, groups: list[PolicyGroup], episodes: int, deterministic: bool = True, device=None,
                    max_steps: int = 100_000, render_env: int | None = None) -> dict:
    """`evaluation.evaluate_policy` for a run with groups: each group plays its current phase (actors' modes when
    `deterministic`; scripted groups with a generator of their own, so training's random draws are untouched;
    a population group's members take turns over the episodes: episode e plays member e mod M);
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
    populations = {i: (g.population.new_state(E), torch.arange(E, device=device) % len(g.population))
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
