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

Chunks: even as one graph, a step at 16 envs costs ~3x its kernels in calling code and eager bookkeeping, which a
jitted scan (JaxMARL) pays once per rollout. Where the env can tell that none of the next CHUNK steps ends an
episode (`VecEnv.steps_without_end`; simple_spread's time limit is its only end), those steps are one graph call
(`run`, the step unrolled CHUNK times): the step's rows, then what the eager path does after a step that ends
nothing (the reward and trace-end rows, the reset mask, the previous observation) and the env's `carry` in place
of its resetting `finish`. Every step's reward, observation and state come back stacked for the non-finite check,
which names the step as the one-step path does. Steps that may end an episode, and a rollout's last steps when
fewer than CHUNK remain, keep one call each. Same values and random stream as one call per step (the samples are
drawn in step order; the env draws only at resets). `HYPERMAPPO_COLLECT_CHUNK=0` keeps one call per step.
"""

from __future__ import annotations

import torch

from hypermappo.algos.death import transition_targets
from hypermappo.compile import switch
from hypermappo.envs.vec import EnvStep

# the buffer rows a step writes from the graph's inputs and the policy's outputs (the rest: after the env step)
ACT_FIELDS = ("obs", "prev_obs", "state", "available", "active", "reset", "actions", "logp", "values", "dist_params")


# steps per graph call where no episode can end (a Python loop unrolled in the graph: compiling grows with it)
CHUNK = 8


def enabled() -> bool:
    return switch("HYPERMAPPO_COLLECT_GRAPH")


def chunk_blocker(env) -> str | None:
    """Why collection cannot run several steps to a graph call here (given one graph per step); None = it can."""
    if not switch("HYPERMAPPO_COLLECT_CHUNK"):
        return "HYPERMAPPO_COLLECT_CHUNK=0"
    if env.steps_without_end() is None:
        return f"{type(env).__name__} cannot tell which steps end no episode (VecEnv.steps_without_end)"
    return None


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
        self.learner, self.env = learner, env
        self.core, self.finish = env.step_parts()
        device = learner.buffer.obs.device
        self.index = [torch.tensor([t], device=device) for t in range(learner.buffer.T)]
        self.graph = compile_fn(self.step)
        # runs of CHUNK steps in which no episode ends: one graph call for all of them (see `run`)
        self.chunked = compile_fn(self.run) if chunk_blocker(env) is None else None
        self.chunk_index = [torch.arange(t, t + CHUNK, device=device) for t in range(learner.buffer.T)]
        self.no_end = torch.zeros(env.num_envs, dtype=torch.bool, device=device)
        self.chunks_run = 0

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

    def run(self, index, obs, state, available, active, reset, prev_obs):
        """CHUNK steps in which no episode ends: each step's rows, then its reward and trace end (the eager
        `_learner_observe` without a truncation), and the next step from the env's `carry` (no reset).
        Returns the last step's (obs, state, active, available, done, reset mask) and every step's reward,
        observation and state stacked [CHUNK, ...] for the non-finite check."""
        L = self.learner
        rewards, observations, states = [], [], []
        for k in range(CHUNK):
            row = index[k:k + 1]
            core = self.step(row, obs, state, available, active, reset, prev_obs)
            reward = core[1]
            nxt_obs, nxt_state, nxt_active, nxt_available, done = self.env.carry(*core)
            target, trace_end = transition_targets(L.death, reward, done, active, self.no_end)
            L.buffer.rewards.index_copy_(0, row, target.unsqueeze(0))
            L.buffer.dones.index_copy_(0, row, trace_end.unsqueeze(0))
            prev_obs = obs if prev_obs is not None else None
            obs, state, active, available, reset = nxt_obs, nxt_state, nxt_active, nxt_available, trace_end
            rewards.append(reward), observations.append(obs), states.append(state)
        return (obs, state, active, available, done, reset, torch.stack(rewards), torch.stack(observations),
                torch.stack(states))

    def chunk_fits(self, t: int) -> bool:
        """Whether steps t .. t + CHUNK - 1 can run as one chunk: inside the rollout, and no episode ends in them."""
        return self.chunked is not None and t + CHUNK <= self.learner.buffer.T and self.env.steps_without_end() >= CHUNK

    def chunk(self, t: int, s):
        """Steps t .. t + CHUNK - 1 from the EnvStep `s` (chunk_fits(t)): the learner's reset mask and previous
        observation move on; returns (the last step's EnvStep, [CHUNK, ...] rewards, observations, states)."""
        L = self.learner
        obs, state, active, available, done, reset, rewards, observations, states = self.chunked(
            self.chunk_index[t], s.obs, s.state, s.available_actions, s.active, L.reset_mask,
            L.prev_obs if L.store_prev_obs else None)
        self.chunks_run += 1
        self.env.carried(CHUNK)
        L.reset_mask = reset
        L.prev_obs = observations[-2] if CHUNK > 1 else s.obs
        no_end = self.no_end
        last = EnvStep(obs=obs, state=state, active=active, reward=rewards[-1], done=done, terminated=no_end,
                       truncated=no_end, available_actions=available, episode_done=no_end)
        return last, rewards, observations, states


def build(groups, env, compile_fn) -> tuple[CollectStep | None, str]:
    """(the one-graph collection step or None, the run-header line saying which path collection takes and why)."""
    reason = blocker(groups, env)
    if reason:
        return None, f"collection: policy and env step as separate calls ({reason})"
    why_not = chunk_blocker(env)
    runs = f"one step per call ({why_not})" if why_not else f"{CHUNK} steps per call where no episode can end"
    return (CollectStep(groups[0].learner, env, compile_fn),
            f"collection: one graph per step (policy forward, sampling, buffer writes, env step core); {runs}")
