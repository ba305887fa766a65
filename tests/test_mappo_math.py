"""The MAPPO math that must not silently break: GAE, value normalisation, masks, recurrence."""

import gymnasium as gym
import pytest
import torch

from hypermappo.algos.mappo import MAPPO
from hypermappo.algos.value_norm import PopArt, ValueNorm
from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec
from hypermappo.experiment import Experiment
from hypermappo.models.actor import build_actor
from hypermappo.models.agent_layers import AgentLinear
from hypermappo.models.critic import Critic
from hypermappo.models.distributions import Categorical, dist_from_params, make_dist
from hypermappo.storage.rollout import RolloutBuffer


def test_gae_matches_hand_computed_example_with_episode_boundaries():
    buf = RolloutBuffer(3, 1, 2, obs_dim=1, state_dim=1, action_shape=(), action_dtype=torch.long)
    buf.rewards[:, 0, 0] = torch.tensor([1.0, 2.0, 3.0])
    buf.rewards[:, 0, 1] = torch.tensor([0.0, 0.0, 1.0])
    buf.dones[:, 0, 0] = torch.tensor([False, True, False])  # agent 0's episode ends after step 1
    buf.dones[:, 0, 1] = torch.tensor([False, False, True])
    values = torch.zeros(3, 1, 2)
    values[:, 0, 0] = torch.tensor([0.5, 1.0, 1.5])
    last = torch.tensor([[2.0, 0.0]])
    buf.compute_gae(values, last, gamma=0.9, lam=0.8)
    # by hand: agent 0: t2: 3 + .9*2 - 1.5 = 3.3; t1: 2 - 1 = 1 (cut); t0: 1 + .9*1 - .5 + .72*1 = 2.12
    #          agent 1: t2: 1; t1: .72; t0: .5184
    expected = torch.tensor([[2.12, 0.5184], [1.0, 0.72], [3.3, 1.0]])
    assert torch.allclose(buf.advantages[:, 0], expected, atol=1e-6)
    assert torch.allclose(buf.returns[:, 0], expected + values[:, 0], atol=1e-6)


def test_value_norm_statistics_are_debiased_running_moments():
    vn = ValueNorm(beta=0.9)
    x1, x2 = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 5.0])
    vn.update(x1)
    mean, var = vn.mean_var()
    assert mean.item() == pytest.approx(2.0)  # debiased: not pulled towards the zero init
    assert var.item() == pytest.approx(14 / 3 - 4)
    vn.update(x2)
    w1, w2 = 0.9 * 0.1, 0.1  # exponential weights of the two batches
    exp_mean = (w1 * 2.0 + w2 * 4.5) / (w1 + w2)
    exp_sq = (w1 * 14 / 3 + w2 * 20.5) / (w1 + w2)
    mean, var = vn.mean_var()
    assert mean.item() == pytest.approx(exp_mean)
    assert var.item() == pytest.approx(exp_sq - exp_mean ** 2)
    y = torch.tensor([0.3, 7.0])
    assert torch.allclose(vn.denormalize(vn.normalize(y)), y, atol=1e-6)
    assert torch.allclose(vn.normalize(y), (y - exp_mean) / (exp_sq - exp_mean ** 2) ** 0.5, atol=1e-5)


def test_value_norm_is_traced_once_by_dynamo_and_loads_0d_statistics():
    """A compiled update reads the statistics: Dynamo must trace it once (a 0-d float64 tensor made it restart its
    analysis, tracing every update graph twice) and not again after an update moves them. Checkpoints written when
    the statistics were 0-d load into the (1,) buffers."""
    vn = ValueNorm(beta=0.9)
    vn.update(torch.tensor([1.0, 2.0, 3.0]))
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    normalize = torch.compile(vn.normalize, backend="aot_eager")
    y = torch.tensor([0.3, 7.0])
    torch.testing.assert_close(normalize(y), vn.normalize(y))
    vn.update(torch.tensor([4.0, 5.0]))
    torch.testing.assert_close(normalize(y), vn.normalize(y))
    counters = torch._dynamo.utils.counters
    assert counters["aot_autograd"]["total"] == 1 and counters["stats"]["unique_graphs"] == 1, dict(counters)
    old = {k: v.reshape(()) for k, v in vn.state_dict().items()}
    loaded = ValueNorm(beta=0.9)
    loaded.load_state_dict(old)
    torch.testing.assert_close(loaded.normalize(y), vn.normalize(y))
    assert loaded.running_mean.shape == (1,)


def test_popart_preserves_unnormalised_predictions():
    head = AgentLinear(4, 1)
    pa = PopArt(head, beta=0.9)
    x = torch.randn(5, 2, 4)
    pa.update(torch.tensor([10.0, 20.0]))
    before = pa.denormalize(head(x))
    pa.update(torch.tensor([100.0, -50.0, 3.0]))
    after = pa.denormalize(head(x))
    assert torch.allclose(before, after, atol=1e-4)


def _spec(n=3, obs=5, actions=4, avail=False):
    return EnvSpec(num_agents=n, obs_dim=obs, state_dim=n * obs,
                   observation_space=gym.spaces.Box(-1, 1, (obs,)), action_space=gym.spaces.Discrete(actions),
                   has_available_actions=avail)


def _batch(spec, B=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    N, D = spec.num_agents, spec.obs_dim
    return {"obs": torch.randn(B, N, D, generator=g), "state": torch.randn(B, spec.state_dim, generator=g),
            "active": torch.ones(B, N, dtype=torch.bool), "reset": torch.zeros(B, N, dtype=torch.bool),
            "actions": torch.randint(0, 4, (B, N), generator=g), "logp": torch.randn(B, N, generator=g) - 1.4,
            "values": torch.randn(B, N, generator=g), "advantages": torch.randn(B, N, generator=g),
            "returns": torch.randn(B, N, generator=g)}


@pytest.mark.parametrize("share", [True, False])
def test_dead_agent_contributes_exactly_zero_gradient(share):
    cfg = build_config(None, [f"model.share_params={share}"])
    spec = _spec()
    torch.manual_seed(0)
    actor, critic = build_actor("mlp", spec, cfg), Critic(spec, cfg)
    algo = MAPPO(actor, critic, cfg)
    batch = _batch(spec)
    batch["active"][:, 1] = False  # agent slot 1 is dead in every sample

    def grads(b):
        actor.zero_grad(), critic.zero_grad()
        a, v, _ = algo.loss(b, torch.tensor(0.0), torch.tensor(1.0))
        (a + v).backward()
        return [p.grad.clone() for p in list(actor.parameters()) + list(critic.parameters()) if p.grad is not None]

    g1 = grads(batch)
    scrambled = {k: v.clone() for k, v in batch.items()}
    g = torch.Generator().manual_seed(7)
    for k in ("actions", "logp", "values", "advantages", "returns"):
        src = _batch(spec, seed=9)[k]
        scrambled[k][:, 1] = src[:, 1]  # change everything the dead agent "did"
    scrambled["obs"][:, 1] = torch.randn(6, spec.obs_dim, generator=g)
    g2 = grads(scrambled)
    assert len(g1) == len(g2) and all(torch.equal(a, b) for a, b in zip(g1, g2))
    # and it does matter when the agent is alive: the same scramble changes the gradients
    batch["active"][:, 1] = True
    scrambled["active"][:, 1] = True
    assert not all(torch.equal(a, b) for a, b in zip(grads(batch), grads(scrambled)))


def test_masked_actions_get_zero_probability():
    logits = torch.randn(64, 3, 5) * 5
    avail = torch.rand(64, 3, 5) > 0.5
    avail[..., 2] = True
    d = Categorical(logits, avail)
    probs = d.logp_all.exp()
    assert (probs[~avail] == 0).all()
    assert torch.allclose(probs.sum(-1), torch.ones(64, 3))
    torch.manual_seed(0)
    for _ in range(20):
        a = d.sample()
        assert avail.gather(-1, a.unsqueeze(-1)).all()
    assert avail.gather(-1, d.mode().unsqueeze(-1)).all()
    assert torch.isfinite(d.entropy()).all()


@pytest.mark.parametrize("space", [gym.spaces.Discrete(4), gym.spaces.MultiDiscrete([3, 2]),
                                   gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiBinary(3)])
def test_distributions_logprob_entropy_and_kl(space):
    from hypermappo.models.distributions import head_size
    torch.manual_seed(0)
    out = torch.randn(10, 2, head_size(space))
    log_std = torch.zeros(head_size(space)) - 0.5
    d = make_dist(space, out, None, log_std)
    a = d.sample()
    lp = d.log_prob(a)
    assert lp.shape == (10, 2) and d.entropy().shape == (10, 2)
    assert torch.allclose(d.kl_from_params(d.params()), torch.zeros(10, 2), atol=1e-5)
    other = make_dist(space, out + 0.5 * torch.randn_like(out), None, log_std)
    assert (other.kl_from_params(d.params()) > 0).all()
    if isinstance(space, gym.spaces.Discrete):
        ref = torch.distributions.Categorical(logits=out)
        assert torch.allclose(lp, ref.log_prob(a), atol=1e-5)
        assert torch.allclose(d.entropy(), ref.entropy(), atol=1e-5)
        assert torch.allclose(dist_from_params(space, d.params()).log_prob(a), lp)
    if isinstance(space, gym.spaces.Box):
        ref = torch.distributions.Normal(out, log_std.exp())
        assert torch.allclose(lp, ref.log_prob(a).sum(-1), atol=1e-5)


def test_separate_parameters_equal_independent_per_agent_networks():
    lin = AgentLinear(5, 7, groups=3)
    x = torch.randn(4, 6, 3, 5)
    y = lin(x)
    for n in range(3):
        ref = x[..., n, :] @ lin.weight[n] + lin.bias[n]
        assert torch.allclose(y[..., n, :], ref, atol=1e-6)


def test_recurrent_chunked_evaluation_equals_step_by_step_rollout(tmp_path):
    cfg = build_config(None, ["env=matrix:specialisation", "env_kwargs={n_agents: 3, episode_length: 7}",
                              "actor=rnn", "num_envs=4", "rollout_length=10", "ppo.data_chunk_length=5",
                              "ppo.value_norm=none",
                              f"run_dir={tmp_path / 'r'}", "log.tensorboard=false", "log.progress=false"])
    exp = Experiment(cfg, quiet=True)
    assert exp.critic.hidden_size > 0
    exp._start_episodes()
    exp.collect()
    exp.collect()  # the second rollout starts mid-episode with non-zero hidden states
    assert exp.buffer.reset.any() and not exp.buffer.reset.all()
    for batch in exp.buffer.chunks(num_mini_batch=1, chunk_length=5):
        with torch.no_grad():
            out, values = exp.algo.evaluate(batch)
        assert torch.allclose(out.dist.log_prob(batch["actions"]), batch["logp"], atol=1e-5)
        assert torch.allclose(values, batch["values"], atol=1e-5)


def _train_rows(run_dir, extra=()):
    import csv
    cfg = build_config(None, ["env=matrix:climbing", "num_envs=8", "total_env_steps=1200", f"run_dir={run_dir}",
                              "log.tensorboard=false", "log.progress=false", "eval_episodes=4", *extra])
    Experiment(cfg, quiet=True).run()
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    timing = {"train_sps", "collect_s", "update_s", "diagnostics_s", "wall_s"}
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


def test_same_seed_gives_identical_metrics(tmp_path):
    a = _train_rows(tmp_path / "a")
    b = _train_rows(tmp_path / "b")
    c = _train_rows(tmp_path / "c", ["seed=1"])
    assert len(a) == 6 and a == b
    assert a != c


def test_reset_mask_zeroes_recurrent_state_at_episode_start():
    cfg = build_config(None, ["actor=rnn"])
    spec = _spec()
    actor = build_actor("rnn", spec, cfg)
    obs = torch.randn(4, 3, spec.obs_dim)
    h = torch.randn(4, 3, actor.hidden_size)
    reset = torch.zeros(4, 3, dtype=torch.bool)
    reset[1, 2] = True
    with torch.no_grad():
        out = actor(obs, None, h, reset)
        fresh = actor(obs, None, torch.zeros_like(h), None)
        kept = actor(obs, None, h, None)
    assert torch.equal(out.dist.params()[1, 2], fresh.dist.params()[1, 2])
    assert torch.equal(out.dist.params()[0], kept.dist.params()[0])
    assert not torch.allclose(out.dist.params()[1, 2], kept.dist.params()[1, 2])
