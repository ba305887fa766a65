"""One rollout + one PPO update on a scripted 4-step, 1-env, 2-agent episode, checked against a scalar
reference written out in this file (plain Python loops, no library maths), for both `ppo.death` modes.

Script (gamma 0.9, lambda 0.8, team reward):
  t0: both act, reward 1 each.            t1: both act, reward 2 each, agent 1 dies (done).
  t2: agent 1 dead (env gives it 0), agent 0 gets 3; the time limit truncates the episode:
      bootstrap from V(final state); final_active = [1, 0].
  t3: a new episode, both act, reward 0.5 each; the rollout ends mid-episode (bootstrap last values).
Agent 0 may never take action 2 (masked); the dead slot may only take action 0.
"""

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

import hypermappo.experiment as experiment_mod
from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec, EnvStep, VecEnv
from hypermappo.experiment import Experiment

GAMMA, LAM, CLIP = 0.9, 0.8, 0.2
ENV_REWARD = [[1.0, 1.0], [2.0, 2.0], [3.0, 0.0], [0.5, 0.5]]  # [t][agent], dead slot 0
ACTED = [[True, True], [True, True], [True, False], [True, True]]  # alive when acting at t
AGENT_DONE = [[0, 0], [0, 1], [1, 1], [0, 0]]
TRUNC_T = 2


def _t(x):
    return torch.tensor(x, dtype=torch.float32)


class ScriptedDeathEnv(VecEnv):
    def __init__(self):
        self.num_envs, self.device = 1, torch.device("cpu")
        self.spec = EnvSpec(num_agents=2, obs_dim=3, state_dim=4, observation_space=gym.spaces.Box(-1, 1, (3,)),
                            action_space=gym.spaces.Discrete(3), has_available_actions=True, episode_limit=3,
                            team_reward=True)
        self.k = 0

    def _step(self, k, reward=(0.0, 0.0), done=(0, 0), term=False, trunc=False, **kw):
        alive = [True, k < 2 or k == 3]  # agent 1 dead in the observation after step 1 until the reset
        obs = _t([[0.1 * k, 0.2, -0.3], [0.4, -0.1 * k, 0.6] if alive[1] else [0.0, 0.0, 0.0]]).unsqueeze(0)
        avail = torch.tensor([[[True, True, False], [True, alive[1], alive[1]]]])
        return EnvStep(obs=obs, state=_t([[0.5, -0.2 * k, 0.3, 0.1 * k]]), active=torch.tensor([alive]),
                       reward=_t([list(reward)]), done=torch.tensor([list(done)], dtype=torch.bool),
                       terminated=torch.tensor([term]), truncated=torch.tensor([trunc]), available_actions=avail,
                       episode_done=torch.tensor([term or trunc]), episode_return=_t([1.0]),
                       episode_length=torch.tensor([3]), **kw)

    def reset(self, seed=None):
        self.k = 0
        return self._step(0)

    def step(self, actions):
        t = self.k
        assert actions[0, 0] != 2, "masked action taken"
        if not ACTED[t][1]:
            assert actions[0, 1] == 0, "dead slot took a real action"
        self.k += 1
        kw = {}
        if t == TRUNC_T:
            kw = dict(final_obs=_t([[[0.7, 0.8, -0.9], [0.0, 0.0, 0.0]]]), final_state=_t([[0.9, -0.5, 0.2, 0.4]]),
                      final_active=torch.tensor([[True, False]]))
            self.k = 3  # auto-reset: the returned observation is the new episode's first
        return self._step(self.k, ENV_REWARD[t], AGENT_DONE[t], trunc=t == TRUNC_T, **kw)


def critic_by_hand(critic, state, agent, dead):
    """Raw critic output for one agent from an input built here (state + one-hot id, zero state if death-masked)."""
    s = [0.0] * 4 if dead else list(state)
    x = _t([[s + [1.0 * (agent == 0), 1.0 * (agent == 1)]] * 2])  # [1, N, C]; row `agent` is read
    with torch.no_grad():
        return float(critic.head(critic.trunk(x)[0]).squeeze(-1)[0, agent])


def gae_reference(rewards, dones, values, last, gamma, lam):
    T, N = len(rewards), len(rewards[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            next_v = last[n] if t == T - 1 else values[t + 1][n]
            nonterminal = 0.0 if dones[t][n] else 1.0
            delta = rewards[t][n] + gamma * next_v * nonterminal - values[t][n]
            running = delta + gamma * lam * nonterminal * running
            adv[t][n] = running
    return adv


def assert_close(tensor, expected, atol):
    """tensor [T, N] against a nested list [T][N] (a mismatch shows both)."""
    assert torch.allclose(tensor, torch.tensor(expected, dtype=tensor.dtype), atol=atol), (tensor.tolist(), expected)


def huber(e, d=10.0):
    return 0.5 * e * e if abs(e) <= d else d * (abs(e) - 0.5 * d)


@pytest.mark.parametrize("death", ["episode", "agent"])
def test_one_rollout_and_update_match_scalar_reference(death, tmp_path, monkeypatch):
    monkeypatch.setattr(experiment_mod, "make_env", lambda *a, **k: ScriptedDeathEnv())
    cfg = build_config(None, ["num_envs=1", "rollout_length=4", "ppo.ppo_epoch=1", "ppo.num_mini_batch=1",
                              f"ppo.gamma={GAMMA}", f"ppo.gae_lambda={LAM}", f"ppo.clip={CLIP}", f"ppo.death={death}",
                              "diagnostics.every=0", "diagnostics.audit_updates=0", f"run_dir={tmp_path / 'r'}",
                              "log.tensorboard=false", "log.progress=false", "seed=3"])
    torch.manual_seed(3)
    exp = Experiment(cfg, quiet=True)
    assert exp.death == death
    snap = {}
    real = exp.algo.compute_returns

    def spy(buf, last_values):
        snap["v"], snap["last"] = buf.values[:, 0].tolist(), last_values[0].tolist()
        real(buf, last_values)

    exp.algo.compute_returns = spy
    exp._start_episodes()
    exp.actor.eval(), exp.critic.eval()
    exp.collect()
    buf = exp.buffer
    v_raw, last_raw = snap["v"], snap["last"]  # [T][N], [N] raw critic outputs (old normalised units)
    episode = death == "episode"

    # the dead slot's stored value is the death-masked critic (episode) or the plain one (agent)
    state_t2 = buf.state[2, 0].tolist()
    assert v_raw[2][1] == pytest.approx(critic_by_hand(exp.critic, state_t2, 1, dead=episode), abs=1e-6)
    assert v_raw[2][0] == pytest.approx(critic_by_hand(exp.critic, state_t2, 0, dead=False), abs=1e-6)

    # ---- reference: value normaliser before the first update: mean 0, var floor 0.01 -> std 0.1
    old_std = 0.1
    V = [[old_std * v for v in row] for row in v_raw]
    last = [old_std * v for v in last_raw]
    final_state = [0.9, -0.5, 0.2, 0.4]
    vf = [old_std * critic_by_hand(exp.critic, final_state, n, dead=(episode and n == 1)) for n in range(2)]
    rewards, dones = [], []
    for t in range(4):
        team = max(ENV_REWARD[t][n] for n in range(2) if ACTED[t][n])
        r = [ENV_REWARD[t][n] if (ACTED[t][n] or not episode) else team for n in range(2)]
        d = [int(t == TRUNC_T) for n in range(2)] if episode else list(AGENT_DONE[t])
        if t == TRUNC_T:  # episode: every agent bootstraps; agent: only those alive at the end
            alive_end = [True, True] if episode else [True, False]
            r = [r[n] + GAMMA * vf[n] * alive_end[n] for n in range(2)]
        rewards.append(r)
        dones.append(d)
    assert_close(buf.rewards[:, 0], rewards, 1e-5)
    assert buf.dones[:, 0].int().tolist() == dones
    adv = gae_reference(rewards, dones, V, last, GAMMA, LAM)
    ret = [[adv[t][n] + V[t][n] for n in range(2)] for t in range(4)]
    assert_close(buf.advantages[:, 0], adv, 1e-5)
    assert_close(buf.returns[:, 0], ret, 1e-5)

    act = [(t, n) for t in range(4) for n in range(2) if ACTED[t][n]]
    assert buf.active[:, 0].tolist() == ACTED
    xs = [ret[t][n] for t, n in act]  # value normaliser statistics: active returns only
    m = sum(xs) / len(xs)
    std = math.sqrt(max(sum(x * x for x in xs) / len(xs) - m * m, 0.01))
    stored = [[(V[t][n] - m) / std for n in range(2)] for t in range(4)]  # re-expressed in the new units
    assert_close(buf.values[:, 0], stored, 1e-4)

    # ---- one update: the behaviour policy differed by `shift` in log-prob, so ratios are exp(-shift)
    logp_now = buf.logp[:, 0].tolist()
    shift = [[0.4, -0.35], [-0.5, 0.1], [0.05, 0.9], [-0.25, 0.3]]
    buf.logp[:, 0] += _t(shift)
    a = [adv[t][n] for t, n in act]
    am = sum(a) / len(a)
    asd = math.sqrt(sum((x - am) ** 2 for x in a) / (len(a) - 1))  # unbiased, as torch.std
    pol, val = 0.0, 0.0
    for t, n in act:
        an = (adv[t][n] - am) / (asd + 1e-5)
        r = math.exp(-shift[t][n])
        pol -= min(r * an, min(max(r, 1 - CLIP), 1 + CLIP) * an)
        target = (ret[t][n] - m) / std
        pred, old = v_raw[t][n], stored[t][n]  # same parameters as at collection time
        clipped = old + min(max(pred - old, -CLIP), CLIP)
        val += max(huber(target - pred), huber(target - clipped))
    pol, val = pol / len(act), val / len(act)
    assert any(abs(v_raw[t][n] - stored[t][n]) > CLIP for t, n in act)  # the value clip matters here
    assert logp_now[2][1] == pytest.approx(0.0, abs=1e-6)  # the dead slot's only action
    exp.actor.train(), exp.critic.train()
    metrics = exp.algo.update(buf, exp.batch_generator)
    assert metrics["policy_loss"] == pytest.approx(pol, abs=1e-5)
    assert metrics["value_loss"] == pytest.approx(val, abs=1e-5)


def test_team_reward_reaches_dead_agents_advantages_only_in_episode_mode():
    from hypermappo.algos.death import bootstrap_mask, transition_targets
    reward = _t([[0.0, 5.0, 0.0]])  # slot 0 dead before this step (env gives 0), slots 1, 2 acted
    acted = torch.tensor([[False, True, True]])
    done = torch.tensor([[False, False, True]])
    r, d = transition_targets("episode", reward, done, acted, torch.tensor([False]))
    assert r.tolist() == [[5.0, 5.0, 0.0]] and not d.any()  # the dead slot gets the team reward, trace goes on
    r, d = transition_targets("agent", reward, done, acted, torch.tensor([False]))
    assert torch.equal(r, reward) and torch.equal(d, done)
    final_active = torch.tensor([[False, True, True]])
    assert bootstrap_mask("episode", torch.tensor([True]), final_active).all()
    assert bootstrap_mask("agent", torch.tensor([True]), final_active).tolist() == [[False, True, True]]


def test_lr_decay_is_applied_every_update(tmp_path):
    cfg = build_config(None, ["env=matrix:climbing", "num_envs=2", "rollout_length=5", "total_env_steps=40",
                              "ppo.lr_decay=true", "ppo.ppo_epoch=1", f"run_dir={tmp_path / 'r'}", "eval_episodes=1",
                              "log.tensorboard=false", "log.progress=false", "diagnostics.every=0"])
    exp = Experiment(cfg, quiet=True)
    seen = []
    real = exp.algo.update

    def spy(buf, generator=None):
        seen.append([g["lr"] for opt in (exp.algo.actor_opt, exp.algo.critic_opt) for g in opt.param_groups])
        return real(buf, generator)

    exp.algo.update = spy
    exp.run()
    U = exp.updates_total
    assert U == 4 and len(seen) == U
    for u, lrs in enumerate(seen):
        assert lrs == pytest.approx([cfg.ppo.lr_actor * (1 - u / U), cfg.ppo.lr_critic * (1 - u / U)])


@pytest.mark.parametrize("activation, expected", [("relu", 2 ** 0.5), ("tanh", 5 / 3)])
def test_hidden_gain_follows_the_activation_by_default(activation, expected):
    assert build_config(None, [f"model.activation={activation}"]).model.hidden_gain() == expected
    assert build_config(None, [f"model.activation={activation}", "model.gain=0.5"]).model.hidden_gain() == 0.5
    assert expected == pytest.approx(torch.nn.init.calculate_gain(activation))


def test_agent_minibatches_cover_every_agent_sample_once_with_whole_rows():
    from hypermappo.storage.rollout import RolloutBuffer
    buf = RolloutBuffer(5, 3, 4, obs_dim=2, state_dim=1, action_shape=(), action_dtype=torch.long)
    buf.obs[..., 0] = torch.arange(15.0).reshape(5, 3, 1)  # row id
    buf.obs[..., 1] = torch.arange(4.0)  # agent id
    seen = np.zeros((15, 4), int)
    for batch in buf.minibatches(3, torch.Generator().manual_seed(0), over="agents"):
        assert batch["obs"].shape[1:] == (4, 2)  # rows come whole: every agent's inputs
        assert batch["selected"].any(-1).all()
        rows = batch["obs"][:, 0, 0].long()
        for i, row in enumerate(rows.tolist()):
            seen[row] += batch["selected"][i].numpy()
    assert (seen == 1).all()


def test_sample_minibatches_are_the_drawn_rows_and_cover_the_rollout():
    """Feed-forward mini-batches over (t, env) samples: mini-batch k is rows chunk k of the generator's permutation
    (the rows the eager loop and the one-graph compiled step both gather), and an epoch covers each row once."""
    from hypermappo.storage.rollout import RolloutBuffer
    buf = RolloutBuffer(5, 3, 4, obs_dim=2, state_dim=1, action_shape=(), action_dtype=torch.long)
    buf.obs[..., 0] = torch.arange(15.0).reshape(5, 3, 1)  # row id
    drawn = torch.randperm(15, generator=torch.Generator().manual_seed(0)).chunk(3)
    batches = list(buf.minibatches(3, torch.Generator().manual_seed(0)))
    assert len(batches) == 3
    for batch, rows in zip(batches, drawn):
        assert batch["obs"][:, 0, 0].long().tolist() == rows.tolist()
    assert sorted(torch.cat([b["obs"][:, 0, 0] for b in batches]).long().tolist()) == list(range(15))


def test_death_auto_follows_the_envs_team_reward():
    from hypermappo.algos.death import resolve_death
    from hypermappo.envs.registry import make_env
    from hypermappo.errors import UserError
    assert make_env("matrix:climbing", 1).spec.team_reward and not make_env("matrix:stag_hunt", 1).spec.team_reward
    assert make_env("staghunt", 1).spec.team_reward
    assert not make_env("staghunt", 1, shared_reward=False).spec.team_reward
    pz = "pettingzoo:envs_for_adapter_tests:make_scripted_env"
    assert make_env(pz, 1, team_reward=True).spec.team_reward and not make_env(pz, 1).spec.team_reward
    with pytest.raises(UserError, match="team_reward"):
        make_env(pz, 1, team_reward="yes")
    spec = make_env("matrix:climbing", 1).spec
    assert resolve_death("auto", spec) == "episode" and resolve_death("agent", spec) == "agent"
    assert resolve_death("auto", make_env("matrix:stag_hunt", 1).spec) == "agent"


def test_agent_minibatch_selection_weights_the_loss_like_a_mask():
    """A row whose agent 1 was not drawn must give the loss of that row with agent 1 inactive."""
    from hypermappo.algos.mappo import MAPPO
    from hypermappo.models.actor import build_actor
    from hypermappo.models.critic import Critic
    cfg = build_config(None, ["ppo.minibatch_over=agents"])
    spec = ScriptedDeathEnv().spec
    spec.team_reward = False
    torch.manual_seed(0)
    algo = MAPPO(build_actor("mlp", spec, cfg), Critic(spec, cfg), cfg)
    g = torch.Generator().manual_seed(1)
    B = 6
    batch = {"obs": torch.randn(B, 2, 3, generator=g), "state": torch.randn(B, 4, generator=g),
             "available": torch.ones(B, 2, 3, dtype=torch.bool), "active": torch.ones(B, 2, dtype=torch.bool),
             "reset": torch.zeros(B, 2, dtype=torch.bool), "actions": torch.randint(0, 3, (B, 2), generator=g),
             "logp": torch.randn(B, 2, generator=g) - 1.0, "values": torch.randn(B, 2, generator=g),
             "advantages": torch.randn(B, 2, generator=g), "returns": torch.randn(B, 2, generator=g),
             "dist_params": torch.zeros(B, 2, 3)}
    selected = torch.ones(B, 2, dtype=torch.bool)
    selected[::2, 1] = False
    masked = {**batch, "active": selected.clone()}
    with torch.no_grad():
        _, _, a = algo.loss({**batch, "selected": selected}, torch.tensor(0.0), torch.tensor(1.0))
        _, _, b = algo.loss(masked, torch.tensor(0.0), torch.tensor(1.0))
        _, _, c = algo.loss(batch, torch.tensor(0.0), torch.tensor(1.0))
    for k in ("policy_loss", "value_loss", "entropy"):
        assert torch.equal(a[k], b[k]) and not torch.equal(a[k], c[k])


@pytest.mark.parametrize("mode", ["state", "obs_concat", "state_agent_id"])
@pytest.mark.parametrize("death", ["agent", "episode"])
@pytest.mark.parametrize("share", [True, False])
def test_critic_with_one_input_for_all_agents_runs_once_per_env_with_the_same_values_and_gradients(mode, death, share):
    """critic.input=state / obs_concat, shared weights, no death mask: one row per env, broadcast to the agents.
    Values and gradients equal the per-agent computation (some agents dead in the batch)."""
    from hypermappo.models.critic import Critic
    cfg = build_config(None, ["algo=mappo", f"critic.input={mode}", f"ppo.death={death}", "model.hidden_sizes=[8]",
                              f"critic.share_params={'on' if share else 'off'}"])
    spec = ScriptedDeathEnv().spec
    torch.manual_seed(0)
    critic = Critic(spec, cfg)
    assert critic.one_row_per_env == (mode != "state_agent_id" and death == "agent" and share)
    g = torch.Generator().manual_seed(2)
    obs, state = torch.randn(5, 2, 3, generator=g), torch.randn(5, 4, generator=g)
    active = torch.tensor([[True, True], [True, False], [False, True], [True, True], [False, False]])
    weights = torch.randn(5, 2, generator=g)
    out = {}
    for one_row in (critic.one_row_per_env, False):
        critic.one_row_per_env = one_row
        critic.zero_grad()
        values, _ = critic(obs, state, active=active)
        (values * weights).sum().backward()
        out[one_row] = (values.detach(), [p.grad.clone() for p in critic.parameters()])
    (v1, g1), (v2, g2) = out.values() if len(out) == 2 else (out[False], out[False])
    torch.testing.assert_close(v1, v2, rtol=1e-6, atol=1e-6)
    for a, b in zip(g1, g2):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    if death == "episode":  # the death mask reaches the values: a dead agent's value is not a live one's
        assert not torch.equal(v2[1, 0], v2[1, 1])
