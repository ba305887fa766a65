"""ppo.compile: a collection step (policy forward, sampling, the rollout-buffer writes and the env's step core) as
one graph.

Why: at small batches (JaxMARL's IPPO settings: 16 envs x 3 agents) a step's tensors hold a few hundred floats, so
collection time is per-call overhead, not arithmetic: the policy graph and the env's core graph each pay Dynamo's
guards and the wrapper's prologue (~100-200 us a call here), and the buffer writes between them are a dozen more
eager ops. Here they are one call per step; what stays eager is the branchy rest of the env step (auto-resets,
`VecEnv.step_parts`), the non-finite check and the step's reward / trace-end targets, as on the two-call path.

Same maths and the same random stream as the two-call path: the actions are sampled (global generator) before the
env core runs, the buffer rows hold the same values, and an env's own generator (its resets) is only drawn in the
eager part. Taken by a compiled learner that is the run's only group and acts for every agent, on-policy, with no
co-player model, in an env that splits its step (today the batched torch simple_spread); the run header says
which path collection takes and why. `HYPERMAPPO_COLLECT_GRAPH=0` keeps the two-call path (side-by-side timing).
"""

from __future__ import annotations

import torch

from hypermappo.compiled import switch

# the buffer rows a step writes from the graph's inputs and the policy's outputs (the rest: after the env step)
ACT_FIELDS = ("obs", "prev_obs", "state", "available", "active", "reset", "actions", "logp", "values", "dist_params")


def enabled() -> bool:
    return switch("HYPERMAPPO_COLLECT_GRAPH")


def blocker(groups, env) -> str | None:
    """Why collection cannot run as one graph per step here; None = it can."""
    if not enabled():
        return "HYPERMAPPO_COLLECT_GRAPH=0"
    if len(groups) != 1 or groups[0].learner is None or not groups[0].learning:
        return "more than one policy group, or a group that does not learn"
    g = groups[0]
    if len(g.phases) > 1:
        return "the group switches kind during the run (it would stop learning or start acting otherwise)"
    L = g.learner
    if not L.compiled:
        return "the learner is not compiled"
    if L.off_policy or L.coplayer is not None:
        return "an off-policy learner or a co-player model"
    if L.actor.hidden_size or L.critic.hidden_size:
        return "a recurrent network"
    if list(g.slots) != list(range(env.spec.num_agents)):
        return "the group does not act for every agent in order"
    if env.step_parts() is None:
        return f"{type(env).__name__} has no branch-free step core (VecEnv.step_parts)"
    return None


class CollectStep:
    """One compiled call per collection step: returns the env core's outputs; the learner's buffer rows of step t
    (what it acted on and what it sampled) are written inside the graph."""

    def __init__(self, learner, env, compile_fn):
        self.learner = learner
        self.core, self.finish = env.step_parts()
        self.index = [torch.tensor([t], device=learner.buffer.obs.device) for t in range(learner.buffer.T)]
        self.graph = compile_fn(self.step)

    def step(self, t, obs, state, available, active, reset, prev_obs):
        L = self.learner
        actions, logp, params, _, values, _ = L.policy_forward(obs, available, None, reset, active, obs, state, None)
        rows = dict(obs=obs, prev_obs=prev_obs, state=state, available=available, active=active, reset=reset,
                    actions=actions, logp=logp, values=values, dist_params=params)
        for name in ACT_FIELDS:
            row, store = rows[name], getattr(L.buffer, name)
            if row is not None and store is not None:
                store.index_copy_(0, t, row.unsqueeze(0))
        return self.core(actions)

    def __call__(self, t: int, s):
        """Step t from the EnvStep `s`: the env core's outputs, for `finish`."""
        L = self.learner
        return self.graph(self.index[t], s.obs, s.state, s.available_actions, s.active, L.reset_mask,
                          L.prev_obs if L.store_prev_obs else None)


def build(groups, env, compile_fn) -> tuple[CollectStep | None, str]:
    """(the one-graph collection step or None, the run-header line saying which path collection takes and why)."""
    reason = blocker(groups, env)
    if reason:
        return None, f"collection: policy and env step as separate calls ({reason})"
    return (CollectStep(groups[0].learner, env, compile_fn),
            "collection: one graph per step (policy forward, sampling, buffer writes, env step core)")
