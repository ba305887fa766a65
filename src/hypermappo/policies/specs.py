"""Policy groups as configured: the `groups` entries parsed and checked into `GroupSpec`s (their phases, a learner
group's own config), and the env spec as one group sees it. The rules are in policies/groups.py's docstring; a
population group's `members` in policies/population.py's. Nothing here builds a network or loads a run.
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
from hypermappo.errors import UserError
from hypermappo.policies.scripted import get_scripted

KINDS = ("learner", "scripted", "frozen", "population")
LEARNER_KEYS = ("actor", "algo", "model", "critic", "ppo", "hyper", "maddpg")
PHASE_KEYS = {"learner": set(), "scripted": {"policy", "params"}, "frozen": {"run_dir", "group"},
              "population": {"members", "sample", "draw", "episodes_per_draw"}}
GROUP_KEYS = {"name", "agents", "kind", "switch", *LEARNER_KEYS, "policy", "params", "run_dir", "group", "members",
              "sample", "draw", "episodes_per_draw"}
SWITCH_KEYS = {"at_step", "kind", "policy", "params", "run_dir", "group"}
NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# a population group's members (policies/population.py)
SAMPLE_MODES = ("episode", "fixed")
DRAW_MODES = ("env", "slot")  # one member for all of a group's slots in an env, or one per slot (a mix)
MEMBER_KEYS = {"kind", "policy", "params", "run_dir", "group"}


def member_entry(where: str, entry) -> dict:
    """One `members` entry as a phase entry with its kind (scripted when it names a policy, frozen for a run_dir)."""
    if not isinstance(entry, dict):
        raise UserError(f"{where}: expected a mapping like {{policy: staghunt_stag}} or {{run_dir: runs/x}}, "
                        f"got {entry!r}")
    unknown = [k for k in entry if k not in MEMBER_KEYS]
    if unknown:
        raise UserError(f"{where}: unknown key {unknown[0]!r}; expected some of {sorted(MEMBER_KEYS)}")
    if "policy" in entry and "run_dir" in entry:
        raise UserError(f"{where}: give either policy (a scripted member) or run_dir (a frozen member), not both")
    kind = entry.get("kind") or ("scripted" if "policy" in entry else "frozen" if "run_dir" in entry else None)
    if kind not in ("scripted", "frozen"):
        raise UserError(f"{where}: a member is scripted (policy: NAME) or frozen (run_dir: RUN_DIR), got {entry!r}")
    return {**entry, "kind": kind}


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
    draw: str = "env"  # population: env (one member plays all the group's slots of an env) | slot (one per slot)
    episodes_per_draw: int = 1  # population, sample=episode: consecutive episodes each draw plays (few-shot)

    def identity(self) -> str:
        """Which policy this is, canonically: `scripted:NAME@k=v...` (params sorted) or `frozen:/abs/run_dir#group`;
        equal strings are the same partner (held-out evaluation checks its partners against a run's members)."""
        if self.kind == "scripted":
            return f"scripted:{self.policy}" + "".join(f"@{k}={self.params[k]}" for k in sorted(self.params))
        if self.kind == "frozen":
            return f"frozen:{Path(self.run_dir).resolve()}" + (f"#{self.group}" if self.group else "")
        return self.describe()

    def describe(self) -> str:
        if self.kind == "population":
            per_slot = " per slot" if self.draw == "slot" else ""
            return f"population[{', '.join(m.describe() for m in self.members)}]{per_slot}"
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
    for key in ("policy", "params", "run_dir", "group", "members", "sample", "draw", "episodes_per_draw"):
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
    if at_step:
        raise UserError(f"{where}.kind: a population is a group's kind from the start, not a switch target")
    members = entry.get("members")
    if not isinstance(members, list) or not members:
        raise UserError(f"{where}.members: a population group needs a non-empty list of members like "
                        f"[{{policy: staghunt_stag}}, {{run_dir: runs/x}}], got {members!r}")
    sample = entry.get("sample", "episode")
    if sample not in SAMPLE_MODES:
        raise UserError(f"{where}.sample: {sample!r} is not one of {list(SAMPLE_MODES)}")
    draw = entry.get("draw", "env")
    if draw not in DRAW_MODES:
        raise UserError(f"{where}.draw: {draw!r} is not one of {list(DRAW_MODES)} (env: one member plays all the "
                        f"group's slots of an env; slot: each slot draws its own)")
    per_draw = entry.get("episodes_per_draw", 1)
    if isinstance(per_draw, bool) or not isinstance(per_draw, int) or per_draw < 1:
        raise UserError(f"{where}.episodes_per_draw: {per_draw!r} is invalid; expected an integer >= 1 (consecutive "
                        f"episodes each draw of members plays)")
    if per_draw > 1 and sample != "episode":
        raise UserError(f"{where}.episodes_per_draw: {per_draw} needs sample: episode (sample: {sample} never redraws)")
    phases = [_phase(f"{where}.members[{j}]", member_entry(f"{where}.members[{j}]", m), 0)
              for j, m in enumerate(members)]
    return Phase(at_step, "population", members=phases, sample=sample, draw=draw, episodes_per_draw=per_draw)


def population_members(cfg) -> int:
    """Members of the run's population groups, in the order of `cfg.groups` (coplayer.member_heads: member m of
    the i-th population group is read-out 1 + (the members of the population groups before it) + m)."""
    return sum(len(g.get("members") or []) for g in (cfg.groups or [])
               if isinstance(g, dict) and g.get("kind") == "population")


def _group_config(cfg, where: str, entry: dict):
    """The run's config with this group's learner overrides applied and checked like the run's own."""
    from hypermappo import config as config_mod

    gcfg = copy.deepcopy(cfg)
    # what a learner's co-player model needs of the other groups (coplayer.member_heads: one read-out per member
    # of the run's populations), kept as the count: the group's config has no groups of its own
    gcfg.population_members = population_members(cfg)
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
