"""Held-out-partner evaluation: K consecutive episodes against each partner left out of training, no updates.

A run trained with a partner group (typically a population, policies/population.py) is loaded from its newest
intact checkpoint; its partner group is replaced by one held-out partner at a time (a scripted rule or a frozen
learned actor), and its learner groups play K consecutive episodes against it in E envs at once. Nothing is
updated: what can change over the K episodes is only what the learner carries (its beliefs about the partner).
The learner's own recurrent state restarts every episode, as in training; `memory` says whether the learner's
co-player memory carries over episode boundaries (memory=True: the partner stays the same, so beliefs
accumulate) or restarts with every episode (memory=False).

Returned per partner and memory setting, over the E envs (mean and standard error of the mean):
  return[k]   the learner groups' episode return in the k-th consecutive episode, k = 1..K (sum over the episode
              of the mean reward over the learner slots): the few-shot adaptation curve
  team[k]     the env's episode return (mean over all agents)
and, when a learner group has a co-player model (models/coplayer.py), the accuracy of its argmax predictions of
the held-out partner's action and goal, per episode index k, per step t of the episode and per (k, t). Goal
labels are a scripted partner's own target (ScriptedContext.goal), else in hindsight the goal it completes next
in the same episode (env `extras["goal_event"]`); steps without a label do not count (NaN when none has one).

    hypermappo adapt runs/x --partners scripted:staghunt_follow runs/partner#b --episodes 10 --num-envs 64
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import torch

from hypermappo.errors import UserError
from hypermappo.evaluation import EVAL_SEED_OFFSET

RUN_GROUP_SEP = "#"


def parse_partner(spec: str):
    """`scripted:NAME[@key=value...]`, `RUN_DIR` or `RUN_DIR#GROUP` -> a population member (groups.Phase)."""
    from hypermappo.crossplay import SCRIPTED_PREFIX, parse_scripted
    from hypermappo.policies.groups import Phase, _phase

    if spec.startswith(SCRIPTED_PREFIX):
        scripted = parse_scripted(spec)
        return _phase(f"partner {spec!r}", {"kind": "scripted", "policy": scripted.name, "params": scripted.params}, 0)
    run_dir, _, group = spec.partition(RUN_GROUP_SEP)
    if not (Path(run_dir) / "config.yaml").exists():
        raise UserError(f"partner {spec!r}: expected scripted:NAME[@key=value] or a run directory (RUN_DIR or "
                        f"RUN_DIR#GROUP); {run_dir!r} has no config.yaml")
    return Phase(0, "frozen", run_dir=run_dir, group=group)


MIX_SEP = "+"


def parse_mix(spec: str) -> list:
    """`PARTNER` (every partner slot plays it) or `PARTNER+PARTNER+...` (one per partner slot, in slot order) ->
    population members (groups.Phase)."""
    return [parse_partner(part) for part in spec.split(MIX_SEP)]


def _label(member) -> str:
    if isinstance(member, list):
        return MIX_SEP.join(_label(m) for m in member)
    if member.kind == "scripted":
        return member.policy + "".join(f"@{k}={v}" for k, v in member.params.items())
    return Path(member.run_dir).name + (f"#{member.group}" if member.group else "")


def training_record(run_dir: Path, cfg, partner_group: str) -> dict:
    """{member identity (groups.Phase.identity): episodes it played in training} of the run's partner group, from
    the run's own records: summary.json's `member_episodes` (a finished run), else its newest intact checkpoint's
    counts, else (a scripted / frozen group, or a run from before the counts existed) every policy the group was
    configured to play, with count None (unknown, so taken as met)."""
    from hypermappo.policies.groups import group_specs

    summary = Path(run_dir) / "summary.json"
    if summary.exists():
        group = json.loads(summary.read_text()).get("groups", {}).get(partner_group, {})
        if "member_episodes" in group:
            return dict(group["member_episodes"])
    spec = next(s for s in group_specs(cfg) if s.name == partner_group)
    members = [m for p in spec.phases for m in (p.members if p.kind == "population" else [p])]
    if spec.phases[0].kind == "population":
        try:
            counts = _latest_checkpoint(run_dir, "cpu")["groups"][partner_group]["population"].get("member_episodes")
        except (UserError, KeyError):
            counts = None
        if counts is not None:
            record: dict = {}
            for m, n in zip(members, counts.tolist()):
                record[m.identity()] = record.get(m.identity(), 0) + n
            return record
    return {m.identity(): None for m in members}


def _met_in_training(member, record: dict):
    """Episodes `member` played in training per the run's record (None: met, count unknown; 0: never met). A frozen
    partner named without a group matches the same run with any group."""
    ident = member.identity()
    if ident in record:
        return record[ident]
    if member.kind == "frozen":
        hits = [n for k, n in record.items() if k.split("#")[0] == ident.split("#")[0]]
        if hits:
            return None if any(n is None for n in hits) else sum(hits)
    return 0


class HeldOutMatch:
    """A trained run's learner groups against one partner in `num_envs` evaluation envs."""

    def __init__(self, run_dir: Path, partner_group: str | None, num_envs: int, device):
        from hypermappo import config as config_mod
        from hypermappo.envs.registry import make_env
        from hypermappo.policies.groups import group_specs, resolve_slots, sub_spec

        self.run_dir, self.device = Path(run_dir), device
        if not (self.run_dir / "config.yaml").exists():
            raise UserError(f"adapt: {str(run_dir)!r} is not a run directory (no config.yaml)")
        self.cfg = config_mod.from_run_dir(self.run_dir)
        if not self.cfg.groups:
            raise UserError(f"adapt: run {str(run_dir)!r} has no groups, so no partner slot to hand to a held-out "
                            f"partner; train with groups (a learner group and a partner group)")
        specs = group_specs(self.cfg)
        self.env = make_env(self.cfg.env, num_envs, device, **self.cfg.env_kwargs)
        slots = resolve_slots(specs, self.env.spec)
        fixed = [s.name for s in specs if not s.learns]
        if partner_group is None:
            if len(fixed) != 1:
                raise UserError(f"adapt: run {str(run_dir)!r} has {len(fixed)} non-learning groups {fixed}; name the "
                                f"partner group with --group")
            partner_group = fixed[0]
        names = [s.name for s in specs]
        if partner_group not in names:
            raise UserError(f"adapt: --group {partner_group!r} is not a group of run {str(run_dir)!r} (its groups: "
                            f"{names})")
        others = [s.name for s in specs if s.name != partner_group and not s.learns]
        if others:
            raise UserError(f"adapt: groups {others} neither learn nor are the partner group {partner_group!r}; "
                            f"held-out evaluation plays learner groups against one partner group")
        self.partner_group = partner_group
        self.partner_slots = slots[names.index(partner_group)]
        self.partner_spec = sub_spec(self.env.spec, self.partner_slots)
        self.learners = [LearnerSide(self.run_dir, spec, s, self.env.spec, num_envs, device)
                         for spec, s in zip(specs, slots) if spec.name != partner_group]
        self.coplayer = [x for x in self.learners if x.model is not None]  # learner groups with a co-player model

    @torch.no_grad()
    def play(self, partner, episodes: int, memory: bool, seed: int, deterministic: bool = True,
             focal: str = "learner") -> dict:
        """`episodes` (K) consecutive episodes in every env against `partner` (a groups.Phase member, or a list of
        one member per partner slot: a mix). `focal="random"`: uniformly random moves (among the available ones)
        in the learner groups' seats instead of their actors, the lower bound of a normalised return.

        Returns {"return": [E, K], "team": [E, K]} (learner-group and team return of episode k) and, when a learner
        group has a co-player model, "action_accuracy" / "goal_accuracy": {"correct": [K, T], "count": [K, T]}
        (predictions of the partner's action / goal at step t of episode k, summed over envs, learner agents
        and partner slots; goal labels are a scripted partner's own target, else in hindsight the goal it
        completes next in the episode; unlabelled steps do not count). Sampled actions (a frozen partner's, the
        learner's when not `deterministic`) draw from torch's global generator, seeded with `seed` here and
        restored afterwards: every memory setting faces the same partner draws."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self._play(partner, episodes, memory, seed, deterministic, focal)

    def _play(self, partner, episodes: int, memory: bool, seed: int, deterministic: bool, focal: str) -> dict:
        from hypermappo.policies.population import Population

        E, K, device = self.env.num_envs, episodes, self.device
        members = partner if isinstance(partner, list) else [partner]
        P = len(self.partner_slots)
        if len(members) not in (1, P):
            raise UserError(f"adapt: partner {_label(members)!r} is a mix of {len(members)}; expected one partner "
                            f"for all {P} partner slots or one per slot ({P}, joined by {MIX_SEP!r})")
        population = Population(members, self.partner_spec, torch.tensor(self.partner_slots, device=device), device)
        pstate = population.new_state(E)
        coplayer = self.coplayer if focal == "learner" else []
        population.record_probs = bool(coplayer)
        subgoal = bool(coplayer) and all(side.subgoal_horizon for side in coplayer)  # OMG's model: its hit ratio
        # which member plays each partner slot: [E] (one for all) or [E, P] (slot p plays member p)
        partner_id = torch.zeros(E, dtype=torch.long, device=device) if len(members) == 1 else \
            torch.arange(P, device=device).expand(E, P)
        generator = torch.Generator().manual_seed(seed + 1)
        focal_generator = torch.Generator().manual_seed(seed + 2)  # the random focal player's moves
        for side in self.learners:
            side.start(E, memory)
        learner_slots = torch.cat([side.slots for side in self.learners])  # [L]
        episode = torch.zeros(E, dtype=torch.long, device=device)  # index of the episode each env is playing
        t_in_episode = torch.zeros(E, dtype=torch.long, device=device)
        running = torch.zeros(E, device=device)
        returns = torch.zeros(E, K, device=device)
        team = torch.zeros(E, K, device=device)
        rows = torch.arange(E, device=device)
        trace = []  # per step, with a co-player model: what its accuracy needs
        s = self.env.reset(seed=seed)
        baselines = Baselines(self.env, self.learners[0].slots, population.slots, memory) if coplayer else None
        while bool((episode < K).any()):
            actions = torch.zeros((E, self.env.spec.num_agents), dtype=torch.long, device=device)
            for side in self.learners:
                actions[:, side.slots] = side.act(s, memory, deterministic) if focal == "learner" else \
                    _uniform_moves(s, side.slots, int(self.env.spec.action_space.n), focal_generator)
            if baselines is not None:
                baselines.predict(s)
            partner_actions, partner_goal = population.act(s, self.env, pstate, partner_id, generator)
            actions[:, population.slots] = partner_actions.long()
            nxt = self.env.step(actions)
            ended = nxt.episode_done if nxt.episode_done is not None else nxt.done.all(-1)  # [E]
            if coplayer:
                trace.append(self._trace_step(population.slots, partner_actions, partner_goal, nxt, ended, episode,
                                              t_in_episode))
                trace[-1].update(baselines.score(partner_actions.long()))
                trace[-1].update(_ceiling(population.policy_probs, partner_actions.long()))
                if subgoal:  # what the subgoal model names before the partner's move, and where the partner is
                    trace[-1]["subgoal_pred"] = torch.cat([side.subgoal(population.slots) for side in coplayer], 1)
                    trace[-1]["partner_state"] = s.obs[:, population.slots]  # [E, P, D]
                    trace[-1]["partner_alive"] = s.active[:, population.slots]
            active_before = s.active
            s = nxt
            for side in (self.learners if focal == "learner" else []):
                side.observe(s, actions, active_before)
            if baselines is not None:
                baselines.observe(actions, active_before, ended, s.extras.get("goal_event"))
            population.observe(pstate, s.done[:, population.slots])
            running = running + s.reward[:, learner_slots].mean(-1)
            t_in_episode = t_in_episode + 1
            if bool(ended.any()):
                record = ended & (episode < K)
                k = episode.clamp(max=K - 1)
                returns[rows[record], k[record]] = running[record]
                team[rows[record], k[record]] = s.episode_return[record]
                running = torch.where(ended, 0.0, running)
                episode = episode + ended.long()
                t_in_episode = torch.where(ended, 0, t_in_episode)
        out = {"return": returns, "team": team}
        if coplayer:
            out.update(_accuracy(trace, K, self.coplayer[0].hindsight_window))
        if subgoal:
            out["subgoal_hit"] = _subgoal_hits(trace, K, coplayer[0].subgoal_horizon, seed)
        return out

    def _trace_step(self, partner_slots, partner_actions, partner_goal, nxt, ended, episode, t_in_episode) -> dict:
        """One step's predictions (of every learner agent with a co-player model) and the partner's truth."""
        act_pred = [side.prediction("action", partner_slots) for side in self.coplayer]  # [E, Q_side, P] each
        goal_pred = [side.prediction("goal", partner_slots) for side in self.coplayer]
        event = nxt.extras.get("goal_event")
        if partner_goal is not None and all(side.other_goal is not None for side in self.coplayer):
            # a scripted partner with no target (-1) pursues the Bayesian model's "other" goal
            partner_goal = torch.where(partner_goal == -1, self.coplayer[0].other_goal, partner_goal)
        nll = [side.action_nll(partner_slots, partner_actions) for side in self.coplayer]
        goal_probs = [side.goal_probs(partner_slots) for side in self.coplayer]
        return {"episode": episode, "t": t_in_episode, "ended": ended,
                "action_nll": torch.cat(nll, 1) if all(x is not None for x in nll) else None,  # [E, Q, P]
                "goal_probs": torch.cat(goal_probs, 1) if all(x is not None for x in goal_probs) else None,
                "action_correct": torch.cat(act_pred, 1) == partner_actions.unsqueeze(1)  # [E, Q, P]
                if all(a is not None for a in act_pred) else None,  # None: a model that predicts no actions
                "goal_pred": torch.cat(goal_pred, 1) if all(g is not None for g in goal_pred) else None,
                "scripted_goal": partner_goal,  # [E, P] or None
                "goal_event": event[:, partner_slots] if event is not None else None}  # [E, P]


class LearnerSide:
    """A learner group of a trained run, acting without updates: its actor and, if it has one, its co-player
    model with its memory (kept across episodes when `memory`, else restarted at each episode start)."""

    def __init__(self, run_dir: Path, spec, slots: list[int], env_spec, num_envs: int, device):
        from hypermappo.policies.groups import Learner, Phase, load_frozen_actor, sub_spec

        self.slots = torch.tensor(slots, dtype=torch.long, device=device)
        self.model = self.belief = self.other_goal = None
        self.hindsight_window = 0  # how far ahead a completed goal labels a step (the Bayesian model's setting)
        self.subgoal_horizon = 0  # the subgoal model's H (its hit ratio looks this far ahead); 0: another model
        group_spec = sub_spec(env_spec, slots)
        if not spec.cfg.coplayer.enabled:
            self.actor = load_frozen_actor(Phase(0, "frozen", run_dir=str(run_dir), group=spec.name), group_spec,
                                           device)
            self.fed = False
            return
        sd = _latest_checkpoint(run_dir, device)["groups"][spec.name]["learner"]
        learner = Learner(spec.cfg, group_spec, num_envs, device, 0, env_spec, slots)  # the run's shapes
        learner.actor.load_state_dict(sd["actor"])
        learner.coplayer.model.load_state_dict(sd["coplayer"]["model"])
        self.actor = learner.actor.requires_grad_(False).eval()
        self.model = learner.coplayer.model.requires_grad_(False).eval()
        self.fed = learner.coplayer.fed
        if spec.cfg.coplayer.model == "bayes":  # the goal belief (algos/coplayer_bayes.py), as in training
            self.bayes_cfg = spec.cfg.coplayer
            self.hindsight_window = spec.cfg.coplayer.hindsight_window
            self.other_goal = learner.coplayer.OTHER
        if spec.cfg.coplayer.model == "subgoal":
            self.subgoal_horizon = spec.cfg.coplayer.subgoal_horizon

    def start(self, E: int, memory: bool = True) -> None:
        K, device = self.slots.numel(), self.slots.device
        self.hidden = torch.zeros(E, K, self.actor.hidden_size, device=device) if self.actor.hidden_size else None
        self.reset = torch.ones(E, K, dtype=torch.bool, device=device)  # the actor's: every episode start
        self.first = True
        if self.other_goal is not None:
            from hypermappo.algos.coplayer_bayes import GoalBelief

            c = self.bayes_cfg
            self.belief = GoalBelief(self.model, self.slots, self.model.n_slots, c.prior_weight, c.hazard, memory,
                                     c.observe_actions, c.event_reset, c.online_lr, c.goal_evidence == "corrected",
                                     c.evidence_weight)
            self.belief.start(E, device)
            self.memory = None
            return
        self.memory = torch.zeros(E, K, self.model.hidden_size, device=device) if self.model is not None else None

    def act(self, s, memory: bool, deterministic: bool) -> torch.Tensor:
        """Actions [E, K]; the co-player memory consumes this step's own observations first."""
        obs = s.obs[:, self.slots]  # [E, K, D]
        actor_obs = obs
        if self.belief is not None:
            features, self.log_pred = self.belief.begin(obs, features=self.fed)  # [E, K, N * (G + A)], [E, K, N, A]
            if self.fed:
                actor_obs = torch.cat([obs, features], -1)
        elif self.model is not None:
            restart = self.reset if (self.first or not memory) else torch.zeros_like(self.reset)
            self.memory = self.model.step(obs, self.reset, self.memory, restart)  # [E, K, H]
            self.first = False
            if self.fed:
                actor_obs = torch.cat([obs, self.model.features(self.memory)], -1)
        available = None if s.available_actions is None else s.available_actions[:, self.slots]
        out = self.actor(actor_obs, available, self.hidden, self.reset, active=s.active[:, self.slots])
        self.hidden = out.hidden
        return (out.dist.mode() if deterministic else out.dist.sample()).long()

    def observe(self, s, actions: torch.Tensor, active_before: torch.Tensor) -> None:
        """After the env step: the actor's resets; the goal belief's Bayes update on everyone's actions [E, N]."""
        self.reset = s.done[:, self.slots]
        if self.belief is not None:
            self.belief.observe(actions, active_before, s.terminated | s.truncated, s.extras.get("goal_event"))

    def action_nll(self, partner_slots: torch.Tensor, actions: torch.Tensor) -> torch.Tensor | None:
        """-log p(the partner's action) under the belief's prediction: [E, K, P] (None: no goal belief)."""
        if self.belief is None:
            return None
        lp = self.log_pred[:, :, partner_slots]  # [E, K, P, A]
        return -lp.gather(-1, actions.long().unsqueeze(1).unsqueeze(-1).expand(-1, lp.shape[1], -1, 1)).squeeze(-1)

    def goal_probs(self, partner_slots: torch.Tensor) -> torch.Tensor | None:
        """The goal posterior about each partner slot before its move: [E, K, P, G] (None: no goal belief)."""
        return None if self.belief is None else self._goal_probs()[:, :, partner_slots]

    def _goal_probs(self) -> torch.Tensor:
        """[E, K, N, G]: the goal predictions of the belief's last `begin` (with coplayer.goal_readout=state the goal
        pursued now, b(g) q(g | ...)); the posterior itself before any."""
        probs = self.belief.goal_probs
        return self.belief.goal_log_b().exp() if probs is None else probs

    def subgoal(self, partner_slots: torch.Tensor) -> torch.Tensor:
        """The subgoal model's decoded subgoal state of each partner slot, from its memory: [E, K, P, D]."""
        return self.model.predict(self.memory)["subgoal"][:, :, partner_slots]

    def prediction(self, head: str, partner_slots: torch.Tensor) -> torch.Tensor | None:
        """The model's argmax prediction of each partner slot's action or goal: [E, K, P] (None: no such head)."""
        if self.belief is not None:
            return (self.log_pred if head == "action" else self._goal_probs())[:, :, partner_slots].argmax(-1)
        logits = self.model.predict(self.memory).get(head)  # [E, K, N, A or G]
        return None if logits is None else logits[:, :, partner_slots].argmax(-1)


class Baselines:
    """Predictors of the partner's next action in the same harness: repeat its last move, its most frequent move
    so far (counts restart every episode without memory), and the oracle: the Bayesian goal belief over the env's
    own scripted rules (algos/coplayer_oracle.py; an upper bound, it reads the env's state)."""

    def __init__(self, env, learner_slots: torch.Tensor, partner_slots: torch.Tensor, memory: bool):
        from hypermappo.algos.coplayer_bayes import GoalBelief
        from hypermappo.algos.coplayer_oracle import NAMED_GOALS, ORACLE_GOALS, OracleGoalPolicy
        from hypermappo.config import CoplayerConfig

        E, A = env.num_envs, int(env.spec.action_space.n)
        self.partner_slots, self.memory, self.A = partner_slots, memory, A
        P = partner_slots.numel()
        self.last = torch.zeros(E, P, dtype=torch.long, device=partner_slots.device)
        self.counts = torch.zeros(E, P, A, device=partner_slots.device)
        self.oracle = None
        self.oracle_names_goals = type(env).__name__ in NAMED_GOALS
        if type(env).__name__ in ORACLE_GOALS:
            c = CoplayerConfig()  # the Bayesian model's defaults
            self.oracle_model = OracleGoalPolicy(env, c.floor)
            self.oracle = GoalBelief(self.oracle_model, learner_slots, env.spec.num_agents, c.prior_weight, c.hazard,
                                     memory, event_reset=c.event_reset)
            self.oracle.start(E, partner_slots.device)

    def predict(self, s) -> None:
        if self.oracle is not None:
            self.oracle_model.set_step(s)
            _, log_pred = self.oracle.begin(s.obs[:, self.oracle.slots])
            self.oracle_pred = log_pred[:, :, self.partner_slots]  # [E, K, P, A]

    def score(self, actions: torch.Tensor) -> dict:
        """actions [E, P] the partner took -> per-predictor hits [E, 1, P] (and the oracle's NLL)."""
        out = {"repeat_correct": (self.last == actions).unsqueeze(1),
               "frequent_correct": (self.counts.argmax(-1) == actions).unsqueeze(1)}
        if self.oracle is not None:
            out["oracle_correct"] = (self.oracle_pred.argmax(-1) == actions.unsqueeze(1))
            if self.oracle_names_goals:  # its goal prediction, before this move: [E, K, P]
                out["oracle_goal_pred"] = self.oracle.log_b[:, :, self.partner_slots].argmax(-1)
            out["oracle_nll"] = -self.oracle_pred.gather(-1, actions.unsqueeze(1).unsqueeze(-1).expand(
                -1, self.oracle_pred.shape[1], -1, 1)).squeeze(-1)
        return out

    def observe(self, actions: torch.Tensor, active_before: torch.Tensor, ended: torch.Tensor,
                event: torch.Tensor | None = None) -> None:
        a = actions[:, self.partner_slots]
        self.last = a
        self.counts += torch.nn.functional.one_hot(a, self.A).float()
        if not self.memory:
            self.counts = torch.where(ended.view(-1, 1, 1), 0.0, self.counts)
        if self.oracle is not None:
            self.oracle.observe(actions, active_before, ended, event)


def _uniform_moves(s, slots: torch.Tensor, n_actions: int, generator: torch.Generator) -> torch.Tensor:
    """Uniformly random moves [E, K] for `slots`, among each slot's available actions when the env masks them."""
    E, K = s.obs.shape[0], slots.numel()
    weights = torch.ones(E * K, n_actions) if s.available_actions is None else \
        s.available_actions[:, slots].reshape(E * K, n_actions).float().cpu()
    return torch.multinomial(weights, 1, generator=generator).view(E, K).to(s.obs.device)


def _latest_checkpoint(run_dir: Path, device) -> dict:
    from hypermappo.checkpoint import read_checkpoint

    reasons = []
    for path in sorted((Path(run_dir) / "checkpoints").glob("ckpt_*.pt"), reverse=True):
        try:
            return read_checkpoint(path, device)
        except (ValueError, OSError) as e:
            reasons.append(f"{path.name}: {e}")
    raise UserError(f"adapt: run {str(run_dir)!r} has no intact checkpoint ({'; '.join(reasons) or 'none there'})")


def _ceiling(probs: torch.Tensor | None, actions: torch.Tensor) -> dict:
    """The best any predictor can do against a partner that samples its moves: predict the most likely move of its
    own distribution (probs [E, P, A], NaN rows where no frozen member played). -> hits and counted [E, 1, P]."""
    if probs is None:
        return {}
    known = ~probs.isnan().any(-1)  # [E, P]
    hit = (probs.nan_to_num(0.0).argmax(-1) == actions) & known
    return {"policy_correct": hit.unsqueeze(1), "policy_counted": known.unsqueeze(1)}


def _subgoal_hits(trace: list[dict], K: int, horizon: int, seed: int) -> dict:
    """The subgoal model's hit ratio per episode index (algos/coplayer_subgoal.hit_ratio: its decoded subgoal is
    nearer a state the partner reaches in the next H steps of the episode than every state it was in over its present
    and last H steps and does not reach again), and the same for a random partner state of the evaluation in place
    of the prediction (chance) and for the partner's own present state (now: it hits where the partner stays; the
    partner's state is not the learner's to see, so this is a reference, not a predictor it could use)."""
    from hypermappo.algos.coplayer_subgoal import hits

    pred = torch.stack([x["subgoal_pred"] for x in trace])  # [S, E, Q, P, D]
    states = torch.stack([x["partner_state"] for x in trace])  # [S, E, P, D]
    alive = torch.stack([x["partner_alive"] for x in trace])  # [S, E, P]
    episode = torch.stack([x["episode"] for x in trace])  # [S, E]
    ended = torch.stack([x["ended"] for x in trace])
    pool = states[alive & (episode < K).unsqueeze(-1)]  # [M, D]
    g = torch.Generator().manual_seed(seed + 3)
    guess = pool[torch.randint(pool.shape[0], (pred[..., 0].numel(),), generator=g)].view(pred.shape)
    now = states.unsqueeze(2).expand_as(pred)
    base = alive.unsqueeze(2).expand(pred.shape[:-1])  # [S, E, Q, P]
    curves = {}
    for name, x in (("by_episode", pred), ("chance_by_episode", guess), ("now_by_episode", now)):
        hit = hits(x, states, ended, horizon).float()  # [S, E, Q, P], once per predictor
        curves[name] = [float((hit * m).sum() / m.sum().clamp(min=1.0))
                        for m in ((base & (episode == k).view(*episode.shape, 1, 1)).float() for k in range(K))]
    return {**curves, "overall": sum(curves["by_episode"]) / K, "chance": sum(curves["chance_by_episode"]) / K,
            "now": sum(curves["now_by_episode"]) / K}


def _accuracy(trace: list[dict], K: int, window: int = 0) -> dict:
    """Per (episode index k, step t) sums of correct predictions and of predictions counted: [K, T] each. A partner
    without a rule's own goal is labelled in hindsight as in training: the goal it completes next, within `window`
    steps (0: any distance; the Bayesian model's coplayer.hindsight_window); further away, the step is unlabelled."""
    from hypermappo.algos.coplayer import hindsight_goals

    episode = torch.stack([x["episode"] for x in trace])  # [S, E]
    t = torch.stack([x["t"] for x in trace])
    T = int(t.max()) + 1
    valid = episode < K
    cell = (episode.clamp(max=K - 1) * T + t)[valid]  # [V]

    def grid(correct: torch.Tensor, counted: torch.Tensor) -> dict:  # [S, E, ...] -> sums per cell [K, T]
        c = correct.float().flatten(2).sum(-1)[valid]
        n = counted.float().flatten(2).sum(-1)[valid]
        return {"correct": torch.zeros(K * T).index_add_(0, cell, c).view(K, T),
                "count": torch.zeros(K * T).index_add_(0, cell, n).view(K, T)}

    out = {}
    if trace[0]["action_correct"] is not None:
        action = torch.stack([x["action_correct"] for x in trace])  # [S, E, Q, P]
        out["action_accuracy"] = grid(action, torch.ones_like(action))
    for name in ("repeat", "frequent", "oracle"):  # the baselines' hits
        if f"{name}_correct" in trace[0]:
            hits = torch.stack([x[f"{name}_correct"] for x in trace])
            out[f"{name}_action_accuracy"] = grid(hits, torch.ones_like(hits))
    if all("policy_correct" in x for x in trace):  # the partner's own distribution's mode: the ceiling
        out["policy_action_accuracy"] = grid(torch.stack([x["policy_correct"] for x in trace]),
                                             torch.stack([x["policy_counted"] for x in trace]))
    for name in ("action_nll", "oracle_nll"):  # a mean, stored as the grid's "correct" sums
        if trace[0].get(name) is not None:
            v = torch.stack([x[name] for x in trace])
            out[name] = grid(v, torch.ones_like(v))
    if trace[0]["goal_pred"] is not None:
        pred = torch.stack([x["goal_pred"] for x in trace])  # [S, E, Q, P]
        ended = torch.stack([x["ended"] for x in trace])  # [S, E]
        event = trace[0]["goal_event"]
        label = hindsight_goals(torch.stack([x["goal_event"] for x in trace]), ended, window) if event is not None \
            else torch.full(pred[:, :, 0].shape, -1, dtype=torch.long)  # [S, E, P]
        if trace[0]["scripted_goal"] is not None:
            given = torch.stack([x["scripted_goal"] for x in trace])
            label = torch.where(given >= -1, given, label)
        label = label.unsqueeze(2).expand_as(pred)
        out["goal_accuracy"] = grid((pred == label) & (label >= 0), label >= 0)
        out["recognise"] = _recognition(episode, t, valid, (pred == label) & (label >= 0), label >= 0, K, T)
        if "oracle_goal_pred" in trace[0]:  # the same labels, the oracle's belief
            oracle = torch.stack([x["oracle_goal_pred"] for x in trace])
            lab = label[:, :, :1].expand_as(oracle)
            out["oracle_goal_accuracy"] = grid((oracle == lab) & (lab >= 0), lab >= 0)
    return out


def _recognition(episode, t, valid, correct, labelled, K: int, T: int) -> dict:
    """Steps to recognise the partner's goal per episode index k: the first step of an episode from which the
    belief's argmax is the true goal at every labelled step to its end (report/adaptation_curves.py), per env,
    learner agent and partner slot; `steps` is its mean over the episodes where that happens, `recognised` the
    fraction of the episodes with a goal label where it does (NaN where none has a label)."""
    from hypermappo.report.adaptation_curves import steps_to_recognise

    s_idx, e_idx = valid.nonzero(as_tuple=True)
    E, (Q, P) = episode.shape[1], correct.shape[2:]
    cells = torch.zeros(2, E, K, T, Q, P, dtype=torch.bool)  # correct, labelled per (env, episode, step)
    at = (e_idx, episode[s_idx, e_idx], t[s_idx, e_idx])
    cells[0][at] = correct[s_idx, e_idx]
    cells[1][at] = labelled[s_idx, e_idx]
    cells = cells.movedim(3, -1).numpy()  # [2, E, K, Q, P, T]
    steps = steps_to_recognise(cells[0], cells[1])  # [E, K, Q, P]
    has_label = cells[1].any(-1)
    found = ~np.isnan(steps)
    n_label = has_label.sum((0, 2, 3))
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_steps = np.where(found.sum((0, 2, 3)) > 0, np.nansum(steps, (0, 2, 3)) / found.sum((0, 2, 3)), np.nan)
        fraction = np.where(n_label > 0, found.sum((0, 2, 3)) / np.maximum(n_label, 1), np.nan)
    return {"steps": mean_steps.tolist(), "recognised": fraction.tolist(), "episodes": n_label.tolist()}


def _sem(x: torch.Tensor) -> float:
    """Standard error of the mean of per-env values [E] (0 for one env)."""
    return float(x.std() / math.sqrt(x.numel())) if x.numel() > 1 else 0.0


def _curve(x: torch.Tensor) -> dict:
    """x [E, K] -> per-episode-index mean and standard error over the E envs."""
    E = x.shape[0]
    sem = x.std(0) / math.sqrt(E) if E > 1 else torch.zeros(x.shape[1])
    return {"mean": x.mean(0).tolist(), "sem": sem.tolist()}


def _rates(sums: dict) -> dict:
    """Accuracy per episode index, per step of the episode (over all K episodes), per (k, t), and overall;
    NaN where nothing was counted (e.g. no goal label)."""
    c, n = sums["correct"], sums["count"]

    def rate(correct, count):
        return torch.where(count > 0, correct / count.clamp(min=1), torch.nan).tolist()

    return {"overall": rate(c.sum(), n.sum()), "by_episode": rate(c.sum(1), n.sum(1)),
            "by_step": rate(c.sum(0), n.sum(0)), "by_episode_step": rate(c, n), "count": n.sum(1).tolist()}


def adapt(run_dir, partners: list[str], episodes: int = 10, num_envs: int = 64, memory=(True, False),
          partner_group: str | None = None, seed: int | None = None, deterministic: bool = True,
          out: Path | None = None, device: str = "cpu", held_out: bool = False, oracles: list | None = None) -> dict:
    """Held-out evaluation of one run against each partner (or mix, `A+B+C`: one per partner slot) in `partners`,
    for each memory setting; written to OUT/adaptation.json and OUT/adaptation.md when `out` is given.

    Every result says how many episodes the run trained against that partner (`training_episodes`, from the run's
    own records: 0 = held out); `held_out` makes a partner the run met an error. `oracles` (one run directory per
    partner) adds normalised returns: the oracle is a learner trained against that mix alone with this run's
    budget (checked), the lower bound a uniformly random player in the learner's seats against the same mix."""
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 1:
        raise UserError(f"adapt: --episodes {episodes!r} is invalid; expected consecutive episodes K >= 1")
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise UserError(f"adapt: --num-envs {num_envs!r} is invalid; expected an env count >= 1")
    if not partners:
        raise UserError("adapt: --partners is empty; expected scripted:NAME or run directories")
    if oracles is not None and len(oracles) != len(partners):
        raise UserError(f"adapt: --oracles names {len(oracles)} runs for {len(partners)} partners; expected one "
                        f"oracle run per partner, in the same order")
    mixes = [parse_mix(p) for p in partners]
    match = HeldOutMatch(Path(run_dir), partner_group, num_envs, torch.device(device))
    record = training_record(match.run_dir, match.cfg, match.partner_group)
    seed = match.cfg.seed + EVAL_SEED_OFFSET if seed is None else seed
    results = []
    for i, (spec, mix) in enumerate(zip(partners, mixes)):
        met = [_met_in_training(m, record) for m in mix]
        if held_out:
            for m, n in zip(mix, met):
                if n != 0:
                    raise UserError(f"adapt: partner {m.identity()!r} is not held out: run {str(run_dir)!r} trained "
                                    f"against it ({'an unknown number of' if n is None else n} episodes, from its "
                                    f"own records); --held-out evaluates partners the run never met")
        bounds = None
        if oracles is not None:
            check_oracle(match, Path(oracles[i]), mix)
            oracle = HeldOutMatch(Path(oracles[i]), None, num_envs, torch.device(device))
            from hypermappo.report.adaptation_curves import scale_is_resolved

            upper = oracle.play(mix, episodes, True, seed, deterministic)["return"].mean(1)  # [E]: per env
            lower = match.play(mix, episodes, True, seed, deterministic, focal="random")["return"].mean(1)
            bounds = {"oracle": float(upper.mean()), "random": float(lower.mean()),
                      "oracle_sem": _sem(upper), "random_sem": _sem(lower), "oracle_run": str(oracles[i])}
            bounds["resolved"] = scale_is_resolved(bounds)
        for mem in memory:
            played = match.play(mix, episodes, mem, seed, deterministic)
            result = {"partner": _label(mix if len(mix) > 1 else mix[0]), "source": spec, "memory": bool(mem),
                      "training_episodes": None if None in met else int(sum(met)),
                      "return": _curve(played["return"]), "team_return": _curve(played["team"])}
            if bounds is not None:
                from hypermappo.report.adaptation_curves import normalised_return

                result["bounds"] = bounds
                result["normalised_return"] = normalised_return(
                    played["return"].mean(0).numpy(), bounds["random"], bounds["oracle"],
                    resolved=bounds["resolved"]).tolist()
            for name in ("action_accuracy", "goal_accuracy", "action_nll", "repeat_action_accuracy",
                         "frequent_action_accuracy", "oracle_action_accuracy", "oracle_nll",
                         "policy_action_accuracy", "oracle_goal_accuracy"):
                if name in played:
                    result[name] = _rates(played[name])
            if "recognise" in played:
                result["recognise"] = played["recognise"]
            if "subgoal_hit" in played:
                result["subgoal_hit"] = played["subgoal_hit"]
            results.append(result)
    report = {"run_dir": str(run_dir), "env": match.cfg.env, "episodes": episodes, "num_envs": num_envs,
              "seed": seed, "deterministic": deterministic, "results": results}
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "adaptation.json").write_text(json.dumps(report, indent=2))
        (out / "adaptation.md").write_text(markdown(report))
    return report


BUDGET_KEYS = ("env", "env_kwargs", "total_env_steps", "num_envs", "rollout_length")


def check_oracle(match: HeldOutMatch, oracle_dir: Path, mix: list) -> None:
    """An oracle for a held-out mix is a run of the same game with the focal run's budget (env, env settings, env
    steps, envs, rollout length) whose partner group met exactly the mix's members in training (its records)."""
    from hypermappo import config as config_mod

    if not (oracle_dir / "config.yaml").exists():
        raise UserError(f"adapt: oracle {str(oracle_dir)!r} is not a run directory (no config.yaml)")
    cfg = config_mod.from_run_dir(oracle_dir)
    for key in BUDGET_KEYS:
        mine, theirs = getattr(match.cfg, key), getattr(cfg, key)
        if mine != theirs:
            raise UserError(f"adapt: oracle {str(oracle_dir)!r} has {key}={theirs!r} where the evaluated run has "
                            f"{mine!r}; expected an oracle trained on the same game with the same budget")
    oracle_match = HeldOutMatch(oracle_dir, None, 1, torch.device("cpu"))
    met = {k for k, n in training_record(oracle_dir, cfg, oracle_match.partner_group).items() if n != 0}
    want = {m.identity() for m in mix}
    if met != want:
        raise UserError(f"adapt: oracle {str(oracle_dir)!r} trained against {sorted(met)}; expected exactly the "
                        f"held-out mix {sorted(want)}")


def markdown(report: dict) -> str:
    K = report["episodes"]
    head = "| partner | memory | met in training | " + " | ".join(f"ep {k}" for k in range(1, K + 1)) + " |"
    lines = [f"Held-out partners of {report['run_dir']} ({report['env']}): learner return per consecutive episode, "
             f"mean over {report['num_envs']} envs", "", head, "|" + "---|" * (K + 3)]

    def met(r) -> str:
        n = r.get("training_episodes")
        return "unknown" if n is None else ("no" if n == 0 else f"{n} episodes")

    for r in report["results"]:
        cells = " | ".join(f"{m:.2f}" for m in r["return"]["mean"])
        lines.append(f"| {r['partner']} | {'on' if r['memory'] else 'off'} | {met(r)} | {cells} |")
    normed = [r for r in report["results"] if "normalised_return" in r]
    if normed:
        lines += ["", "Normalised return per episode: (return - random) / (oracle - random), where random is a uniformly "
                  "random player in the learner's seats and oracle a learner trained against that mix alone with "
                  "the same budget", "", "| partner | memory | random | oracle | "
                  + " | ".join(f"ep {k}" for k in range(1, K + 1)) + " |", "|" + "---|" * (K + 4)]
        for r in normed:
            cells = " | ".join(f"{v:.2f}" for v in r["normalised_return"])
            lines.append(f"| {r['partner']} | {'on' if r['memory'] else 'off'} | {r['bounds']['random']:.2f} | "
                         f"{r['bounds']['oracle']:.2f} | {cells} |")
    known = [r for r in report["results"] if "recognise" in r]
    if known:
        lines += ["", "Steps to recognise the partner's goal (mean over the episodes where the belief's argmax is the "
                  "true goal from some step to the episode's end; in brackets the fraction of episodes where it is)",
                  "", "| partner | memory | " + " | ".join(f"ep {k}" for k in range(1, K + 1)) + " |",
                  "|" + "---|" * (K + 2)]
        for r in known:
            cells = " | ".join(f"{st:.1f} ({fr:.2f})" for st, fr in zip(r["recognise"]["steps"],
                                                                       r["recognise"]["recognised"]))
            lines.append(f"| {r['partner']} | {'on' if r['memory'] else 'off'} | {cells} |")
    hits = [r for r in report["results"] if "subgoal_hit" in r]
    if hits:
        lines += ["", "Subgoal hit ratio (the decoded subgoal is nearer a state the partner reaches in the next H steps "
                  "than every state it was in over its present and last H steps and does not reach again; in brackets "
                  "the same for a random partner state, and for the partner's own present state)",
                  "", "| partner | memory | " + " | ".join(f"ep {k}" for k in range(1, K + 1)) + " |",
                  "|" + "---|" * (K + 2)]
        for r in hits:
            h = r["subgoal_hit"]
            cells = " | ".join(f"{v:.2f} ({c:.2f}, {n:.2f})" for v, c, n in zip(h["by_episode"], h["chance_by_episode"],
                                                                          h.get("now_by_episode", h["chance_by_episode"])))
            lines.append(f"| {r['partner']} | {'on' if r['memory'] else 'off'} | {cells} |")
    return "\n".join(lines) + "\n"
