"""MADDPG: Gumbel-softmax, Polyak targets, the replay buffer, dead agents, exact resume, config rules, groups."""

from __future__ import annotations

import signal
from types import SimpleNamespace

import gymnasium as gym
import pytest
import torch
from test_resume import assert_same, checkpoint_updates, metrics_without_timing

from hypermappo import config as config_mod
from hypermappo.algos.maddpg import MADDPG, QCritic, gumbel_softmax_st, polyak_update
from hypermappo.cli import main
from hypermappo.errors import RunInterrupted, UserError
from hypermappo.experiment import Experiment, resume
from hypermappo.models.mlp import MLPActor
from hypermappo.storage.replay import ReplayBuffer

SMALL = ["model.hidden_sizes=[16,16]", "num_envs=4", "rollout_length=10", "eval_episodes=4", "torch_threads=1",
         "log.tensorboard=false", "algo=maddpg", "maddpg.batch_size=16", "maddpg.warmup_steps=60",
         "maddpg.update_interval=20"]


def spec_of(space, n=2, obs_dim=3, state_dim=4, available=False):
    return SimpleNamespace(num_agents=n, obs_dim=obs_dim, state_dim=state_dim, action_space=space,
                           has_available_actions=available, team_reward=False)


def maddpg_for(space, overrides=(), **spec_kwargs):
    cfg = config_mod.build_config(None, ["algo=maddpg", "model.hidden_sizes=[8]", *overrides])
    spec = spec_of(space, **spec_kwargs)
    torch.manual_seed(0)
    actor, critic = MLPActor(spec, cfg), QCritic(spec, cfg)
    return MADDPG(actor, critic, cfg, spec), cfg, spec


def test_straight_through_gumbel_softmax_is_one_hot_forward_with_softmax_gradients():
    torch.manual_seed(0)
    logits = torch.randn(64, 3, 5, requires_grad=True)
    y = gumbel_softmax_st(logits, temperature=0.7)
    assert torch.equal(y.sum(-1), torch.ones(64, 3))
    assert torch.equal(y, torch.nn.functional.one_hot(y.argmax(-1), 5).float())  # exactly 0 / 1
    (y * torch.arange(5.0)).sum().backward()  # d/dlogits of the softmax surrogate: non-zero
    assert logits.grad.abs().sum() > 0 and torch.isfinite(logits.grad).all()
    masked = torch.zeros(1000, 4)
    masked[:, 2] = -1e10  # an unavailable action is never drawn
    assert (gumbel_softmax_st(masked, 1.0).argmax(-1) != 2).all()


def test_polyak_update_is_exact():
    torch.manual_seed(0)
    source, target = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update(target, source, 0.25)
    for t, t0, s in zip(target.parameters(), before, source.parameters()):
        torch.testing.assert_close(t, 0.75 * t0 + 0.25 * s, rtol=0, atol=1e-7)
    polyak_update(target, source, 1.0)  # tau = 1 is a copy, bit for bit
    for t, s in zip(target.parameters(), source.parameters()):
        assert torch.equal(t, s)


def test_replay_respects_capacity_and_wraps_around():
    buf = ReplayBuffer(5, num_agents=2, obs_dim=1, state_dim=1, action_shape=(), action_dtype=torch.long, n_avail=0,
                       device=torch.device("cpu"))

    def push(first):  # 3 envs whose obs are first, first + 1, first + 2
        v = torch.arange(first, first + 3, dtype=torch.float32)
        buf.push(obs=v[:, None, None].expand(3, 2, 1), state=v[:, None], active=torch.ones(3, 2, dtype=torch.bool),
                 actions=torch.zeros(3, 2, dtype=torch.long), reward=v[:, None].expand(3, 2),
                 terminal=torch.zeros(3, 2, dtype=torch.bool), next_obs=v[:, None, None].expand(3, 2, 1),
                 next_state=v[:, None], next_active=torch.ones(3, 2, dtype=torch.bool))

    push(1)
    assert (buf.size, buf.pos, buf.pushed) == (3, 3, 3)
    drawn = buf.sample(500, torch.Generator().manual_seed(0))["state"].flatten()
    assert set(drawn.tolist()) == {1.0, 2.0, 3.0}  # only filled rows (unfilled ones hold 0)
    push(10)  # rows 3, 4, then wraps to row 0
    assert (buf.size, buf.pos, buf.pushed) == (5, 1, 6)
    assert buf.data["state"].flatten().tolist() == [12.0, 2.0, 3.0, 10.0, 11.0]
    push(20)
    assert buf.data["state"].flatten().tolist() == [12.0, 20.0, 21.0, 22.0, 11.0]
    drawn = buf.sample(2000, torch.Generator().manual_seed(1))["state"].flatten()
    assert set(drawn.tolist()) == {12.0, 20.0, 21.0, 22.0, 11.0}  # uniform over the 5 rows kept
    assert (torch.bincount(drawn.long())[[11, 12, 20, 21, 22]] > 300).all()
    restored = ReplayBuffer(5, 2, 1, 1, (), torch.long, 0, torch.device("cpu"))
    restored.load_state_dict(buf.state_dict())
    assert (restored.pos, restored.size, restored.pushed) == (4, 5, 9)
    assert torch.equal(restored.data["obs"], buf.data["obs"])


def dead_agent_batch(space, B=32):
    torch.manual_seed(1)
    active = torch.ones(B, 2, dtype=torch.bool)
    active[:, 1] = False  # agent 1 is dead in every sample
    actions = torch.randint(0, 5, (B, 2)) if isinstance(space, gym.spaces.Discrete) else torch.rand(B, 2, 2)
    return {"obs": torch.randn(B, 2, 3), "state": torch.randn(B, 4), "active": active, "actions": actions,
            "reward": torch.randn(B, 2), "terminal": torch.zeros(B, 2, dtype=torch.bool),
            "next_obs": torch.randn(B, 2, 3), "next_state": torch.randn(B, 4), "next_active": active.clone()}


@pytest.mark.parametrize("space", [gym.spaces.Discrete(5), gym.spaces.Box(-1.0, 1.0, (2,))])
def test_dead_agent_transitions_produce_no_actor_gradient(space):
    """Per-agent actor weights: the dead agent's stay exactly as they were, the live agent's move."""
    algo, _, _ = maddpg_for(space, ["model.share_params=false"])
    actor = algo.actor
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    grads = {}
    actor.head.weight.register_hook(lambda g: grads.setdefault("head", g.clone()))
    algo.gradient_step(dead_agent_batch(space))
    assert grads["head"][1].abs().sum() == 0 and grads["head"][0].abs().sum() > 0  # [G, in, out], agent 1 dead
    for k, v in actor.state_dict().items():
        if k.endswith(("weight", "bias")) and k != "log_std":
            assert torch.equal(v[1], before[k][1]), f"{k}: dead agent's weights changed"
    assert not torch.equal(actor.head.weight[0], before["head.weight"][0])


def test_box_exploration_stays_inside_the_bounds():
    algo, _, _ = maddpg_for(gym.spaces.Box(-0.5, 2.0, (2,)), ["maddpg.noise_std=5.0"])
    actions = algo.explore(torch.randn(256, 2, 3) * 100, None)
    assert actions.shape == (256, 2, 2)
    assert actions.min() >= -0.5 and actions.max() <= 2.0
    assert (actions == -0.5).any() and (actions == 2.0).any()  # clipped, not squashed
    assert ((actions > -0.5) & (actions < 2.0)).any()


def test_targets_follow_the_networks_by_polyak_and_the_terminal_cuts_bootstrap():
    algo, cfg, _ = maddpg_for(gym.spaces.Discrete(5), ["maddpg.tau=0.5"])
    t_before = [p.clone() for p in algo.target_critic.parameters()]
    algo.gradient_step(dead_agent_batch(gym.spaces.Discrete(5)))
    for t, t0, p in zip(algo.target_critic.parameters(), t_before, algo.critic.parameters()):
        torch.testing.assert_close(t, 0.5 * t0 + 0.5 * p, rtol=0, atol=1e-7)


def interrupt_after(exp: Experiment, update: int) -> None:
    """As if SIGTERM arrived during `update`: the loop checkpoints it and raises RunInterrupted."""
    log = exp.logger.log

    def log_then_signal(row):
        log(row)
        if row["update"] == update:
            exp.stop_signal = signal.SIGTERM
    exp.logger.log = log_then_signal


def test_resumed_maddpg_run_equals_the_uninterrupted_one(tmp_path):
    """Stopped mid-run after the replay buffer wrapped around and gradient steps ran; the resumed run logs the same
    metrics and ends with the same checkpoint (networks, targets, optimisers, replay buffer, RNG) bit for bit."""
    cfg = config_mod.build_config("mpe/simple_spread", [*SMALL, "total_env_steps=400", "checkpoint_interval=3",
                                                        "maddpg.buffer_size=100", "eval_interval=4"])
    full = tmp_path / "full"
    Experiment(cfg, full, quiet=True).run()  # 10 updates of 40 env steps
    stopped = tmp_path / "stopped"
    exp = Experiment(cfg, stopped, quiet=True)
    interrupt_after(exp, 5)
    with pytest.raises(RunInterrupted):
        exp.run()
    exp.run_lock.release()
    assert checkpoint_updates(stopped) == [3, 5]
    state = torch.load(stopped / "checkpoints" / "ckpt_0000005.pt", weights_only=False)
    assert state["replay"]["pushed"] == 200 and state["replay"]["size"] == 100 and state["replay"]["pos"] == 0
    assert state["algo"]["gradient_steps"] == (200 - 60) // 20
    resume(stopped, quiet=True)

    got, want = metrics_without_timing(stopped), metrics_without_timing(full)
    assert [r["update"] for r in got] == [str(u) for u in range(1, 11)]
    assert got == want
    assert float(want[-1]["gradient_steps"]) == (400 - 60) // 20
    final_got = torch.load(stopped / "checkpoints" / "ckpt_0000010.pt", weights_only=False)
    final_want = torch.load(full / "checkpoints" / "ckpt_0000010.pt", weights_only=False)
    for key in ("actor", "critic", "algo", "replay", "env_state", "rng", "recent_returns", "update", "env_steps"):
        assert_same(final_got[key], final_want[key], key)


def test_an_uninterrupted_rerun_is_identical_and_a_different_seed_is_not(tmp_path):
    overrides = [*SMALL, "total_env_steps=200", "checkpoint_interval=0"]
    runs = {}
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        cfg = config_mod.build_config("mpe/simple_spread", [*overrides, f"seed={seed}"])
        Experiment(cfg, tmp_path / name, quiet=True).run()
        runs[name] = torch.load(tmp_path / name / "checkpoints" / "ckpt_0000005.pt", weights_only=False)
    assert_same(runs["a"]["actor"], runs["b"]["actor"], "actor")
    assert not torch.equal(runs["a"]["actor"]["head.weight"], runs["c"]["actor"]["head.weight"])


@pytest.mark.parametrize("overrides, message", [
    (["algo=maddpg", "ppo.clip=0.3"], "ppo.clip=0.3 has no effect: algo=maddpg reads maddpg.* keys"),
    (["maddpg.tau=0.05"], "maddpg.tau=0.05 has no effect: it is read only by algo=maddpg, got algo='mappo'"),
    (["algo=maddpg", "maddpg.tau=0"], "maddpg.tau: expected a value > 0.0, got 0"),
    (["algo=maddpg", "maddpg.batch_size=0"], "maddpg.batch_size: expected a value >= 1, got 0"),
    (["algo=maddpg", "actor=rnn"], "actor: algo=maddpg supports actor=mlp"),
    (["algo=maddpg", "critic.input=obs"], "critic.input: algo=maddpg has a centralised critic"),
    (["algo=maddpg", "maddpg.buffer_size=10", "num_envs=16"], "maddpg.buffer_size: 10 is smaller than one step"),
    (["algo=maddpg", "diagnostics.every=2"], "diagnostics.every=2 has no effect"),
    (["algo=maddpg", "maddpg.gumbel_temperature=abc"], "maddpg.gumbel_temperature: expected a number, got 'abc'"),
    (["algo=maddpg", "coplayer.enabled=true"], "coplayer.enabled: the co-player model trains next to MAPPO/IPPO"),
])
def test_config_mistakes_are_one_line_errors(overrides, message):
    with pytest.raises(UserError) as info:
        config_mod.build_config(None, overrides)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unsupported_action_space_is_a_user_error():
    with pytest.raises(UserError, match="algo=maddpg supports Discrete and Box action spaces"):
        maddpg_for(gym.spaces.MultiDiscrete([2, 3]))


def test_cli_reports_a_maddpg_config_mistake_in_one_line(capsys):
    assert main(["train", "mpe/simple_spread", "algo=maddpg", "ppo.ppo_epoch=4", "--quiet"]) == 2
    assert "ppo.ppo_epoch=4 has no effect" in capsys.readouterr().err


def test_learner_groups_each_with_maddpg_and_a_scripted_one(tmp_path):
    """Two teams, each its own MADDPG learner on its own rewards, and MADDPG beside a MAPPO group; replay buffers
    are checkpointed per group and a resumed run matches."""
    groups = ("groups=[{name: a, agents: [0], algo: maddpg}, {name: b, agents: [1, 2], algo: maddpg, "
              "maddpg: {tau: 0.05}}]")
    cfg = config_mod.build_config("mpe/simple_spread", [*SMALL, "total_env_steps=200", "checkpoint_interval=2",
                                                        groups])
    run = tmp_path / "two"
    summary = Experiment(cfg, run, quiet=True).run()
    assert set(summary["groups"]) == {"a", "b"}
    ck = torch.load(run / "checkpoints" / "ckpt_0000005.pt", weights_only=False)
    assert ck["groups"]["b"]["learner"]["replay"]["data"]["obs"].shape == (200, 2, 18)
    assert ck["groups"]["a"]["learner"]["algo"]["gradient_steps"] == (200 - 60) // 20
    mixed = ("groups=[{name: a, agents: [0], algo: maddpg, maddpg: {batch_size: 16, warmup_steps: 60}}, "
             "{name: b, agents: [1, 2], algo: mappo}]")
    plain = [o for o in SMALL if not o.startswith(("algo", "maddpg"))]
    cfg = config_mod.build_config("mpe/simple_spread", [*plain, "total_env_steps=80", "ppo.ppo_epoch=2", mixed])
    Experiment(cfg, tmp_path / "mixed", quiet=True).run()
    scripted = ("groups=[{name: a, agents: [0, 1], algo: maddpg}, {name: s, agents: [2], kind: scripted, "
                "policy: random}]")
    cfg = config_mod.build_config("mpe/simple_spread", [*SMALL, "total_env_steps=80", scripted])
    Experiment(cfg, tmp_path / "scripted", quiet=True).run()


def test_time_limit_is_not_terminal_and_the_next_observation_is_the_final_one(tmp_path):
    """simple_spread episodes end only by the 25-step limit: no replay row is terminal, and the last step's next
    observation is the episode's final one, not the first of the next episode."""
    cfg = config_mod.build_config("mpe/simple_spread", [*[o for o in SMALL if not o.startswith("rollout")],
                                                        "rollout_length=25", "total_env_steps=100"])
    exp = Experiment(cfg, tmp_path / "r", quiet=True)
    exp._start_episodes()
    exp.collect()
    buf = exp.buffer
    assert buf.pushed == 100 and not buf.data["terminal"][:100].any()
    last = slice(96, 100)  # step 25 of the 4 envs: the time limit
    assert not torch.equal(buf.data["next_obs"][last], exp.last.obs)  # exp.last: the new episodes
    assert torch.equal(buf.data["next_obs"][92:96], buf.data["obs"][last])  # steps chain within an episode
    exp.logger.close()
    exp.run_lock.release()
