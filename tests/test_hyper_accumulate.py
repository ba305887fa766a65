"""hyper.output=accumulate: theta_t = theta_{t-1} + delta_t from theta_base, a per-agent recurrent weight state.

Zero increments give MAPPO exactly; the state adds up the increments (with the decay toward theta_base), is zeroed
at episode starts and while an agent is dead; chunked re-evaluation equals the step-by-step rollout; the
smoothness term is ||delta_t||^2; a state that cannot fit in memory is refused with one line."""

import gymnasium as gym
import pytest
import torch

from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.actor import build_actor
from hypermappo.models.hyper import check_state_memory


def _spec(n=3, obs=6, actions=5):
    return EnvSpec(num_agents=n, obs_dim=obs, state_dim=n * obs,
                   observation_space=gym.spaces.Box(-1, 1, (obs,)), action_space=gym.spaces.Discrete(actions))


CONTEXTS = [
    ["hyper.context=agent_id"],
    ["hyper.context=obs", "hyper.layers=last"],
    ["hyper.context=obs", "hyper.rank=2", "hyper.obs_aggregation=mean"],
    ["hyper.context=agent_id,obs,history", "hyper.history_hidden=8"],
    ["hyper.context=agent_id", "hyper.layers=hidden", "model.share_params=false"],
]


def _actor(overrides, seed=2, spec=None):
    # few envs: the memory check (refusing a state that cannot fit) then passes on any machine
    cfg = build_config(None, ["actor=hyper", "hyper.output=accumulate", "num_envs=4", *overrides])
    torch.manual_seed(seed)
    return build_actor("hyper", spec or _spec(), cfg), cfg


def _move_generators(actor, scale=0.3):
    """Non-zero increments: perturb every generator output (delta starts at exactly 0)."""
    torch.manual_seed(5)
    with torch.no_grad():
        for gen in actor.hyper.generators:
            for lin in [gen.b, gen.v if actor.cfg_h.rank else gen.w]:
                lin.bias.add_(scale * torch.randn_like(lin.bias))
                lin.weight.add_(scale * torch.randn_like(lin.weight))


def _masks(L, B, N, seed=0):
    g = torch.Generator().manual_seed(seed)
    reset = torch.rand(L, B, N, generator=g) < 0.2
    reset[0] = True
    active = torch.rand(L, B, N, generator=g) > 0.2
    return reset, active


@pytest.mark.parametrize("overrides", CONTEXTS, ids=lambda o: " ".join(o))
def test_zero_increments_give_the_mappo_actor_exactly(overrides):
    spec = _spec()
    hyper, cfg = _actor(overrides)
    torch.manual_seed(1)
    mlp = build_actor("mlp", spec, cfg)
    missing, unexpected = hyper.load_state_dict(mlp.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(("hyper.", "target.")) or k == "_extra_state" for k in missing)
    L, B, N = 4, 5, 3
    obs = torch.randn(L, B, N, spec.obs_dim)
    reset, active = _masks(L, B, N)
    h = torch.zeros(B, N, hyper.hidden_size)
    with torch.no_grad():
        ref = mlp(obs).dist.params()
        for t in range(L):  # step by step, the state carried
            out = hyper(obs[t], None, h, reset[t], active=active[t])
            assert torch.equal(out.dist.params(), ref[t])
            h = out.hidden
        seq = hyper(obs, None, torch.zeros(B, N, hyper.hidden_size), reset, sequence=True, active=active)
    assert torch.equal(seq.dist.params(), ref)
    assert not hyper.weight_offset(h).any()  # the weights never moved off theta_base
    _move_generators(hyper)  # not vacuous: non-zero increments change the policy
    with torch.no_grad():
        moved = hyper(obs, None, torch.zeros(B, N, hyper.hidden_size), reset, sequence=True, active=active)
    assert not torch.allclose(moved.dist.params(), ref)


@pytest.mark.parametrize("context, rank, state_size", [("obs", 0, 65), ("obs", 2, 325), ("agent_id", 0, 1),
                                                       ("agent_id", 2, 1)])
@pytest.mark.parametrize("decay", [0.0, 0.25])
def test_weights_add_up_the_increments_with_decay_toward_the_base(decay, context, rank, state_size):
    """The state is the accumulated code (full rank), the weights (low rank) or a step count (agent-id context)."""
    actor, _ = _actor([f"hyper.context={context}", "hyper.layers=last", f"hyper.rank={rank}", "hyper.hidden=64"]
                      + ([f"hyper.decay={decay}"] if decay else []))
    _move_generators(actor)
    torch.manual_seed(3)
    obs = torch.randn(3, 2, 3, 6)  # [steps, E, N, D]
    with torch.no_grad():
        h = torch.zeros(2, 3, actor.hidden_size)
        expected = torch.zeros(2, 3, 64 * 5 + 5)  # theta_t - theta_base of the 64 x 5 head
        for t in range(3):
            delta = actor._flat_increment(actor.generate(obs[t])[0])  # [E, N, P]: this step's increment
            out = actor(obs[t], None, h, torch.zeros(2, 3, dtype=torch.bool))
            expected = (1 - decay) * expected + delta
            assert torch.allclose(actor.weight_offset(out.hidden), expected, atol=1e-5)
            # the policy is the MAPPO head with theta_base + (theta_t - theta_base)
            x = actor.trunk.hidden_layers(obs[t])
            w = actor.head.weight[0] + expected[..., :320].unflatten(-1, (64, 5))
            logits = (x.unsqueeze(-2) @ w).squeeze(-2) + actor.head.bias[0] + expected[..., 320:]
            assert torch.allclose(out.dist.params(), torch.log_softmax(logits, -1), atol=1e-4)
            h = out.hidden
    assert delta.abs().sum() > 0
    assert actor.state_size == state_size


@pytest.mark.parametrize("overrides", CONTEXTS[:2], ids=lambda o: " ".join(o))
def test_weight_state_resets_at_episode_start_and_on_death(overrides):
    actor, _ = _actor(overrides)
    _move_generators(actor)
    obs = torch.randn(4, 3, 6)
    h = torch.randn(4, 3, actor.hidden_size)  # mid-episode state
    none = torch.zeros(4, 3, dtype=torch.bool)
    reset = none.clone()
    reset[1, 2] = True
    active = ~none
    active[2, 0] = False
    with torch.no_grad():
        out = actor(obs, None, h, reset, active=active)
        fresh = actor(obs, None, torch.zeros_like(h), None)
        kept = actor(obs, None, h, None)
        # episode start: slot (1, 2) acts with theta_base + delta_t, as at the first step of an episode
        assert torch.equal(out.dist.params()[1, 2], fresh.dist.params()[1, 2])
        assert torch.equal(out.dist.params()[0], kept.dist.params()[0])
        assert not torch.allclose(out.dist.params()[1, 2], kept.dist.params()[1, 2])
        # death: the dead slot's weight state is theta_base (zero) ...
        hs = actor.hyper.context.history_size
        assert not out.hidden[2, 0, hs:].any() and out.hidden[2, 1, hs:].abs().sum() > 0
        # ... so once it is alive again it starts from theta_base, as a fresh episode would
        again = actor(obs, None, out.hidden, None)
        fresh_from_dead = actor(obs, None, torch.cat([out.hidden[..., :hs], torch.zeros_like(out.hidden[..., hs:])],
                                                     -1), None)
        assert torch.equal(again.dist.params()[2, 0], fresh_from_dead.dist.params()[2, 0])


@pytest.mark.parametrize("overrides", CONTEXTS, ids=lambda o: " ".join(o))
def test_chunked_evaluation_equals_step_by_step(overrides):
    """As the GRU: a chunk re-evaluated from its start state gives the rollout's policy at every step, through
    episode starts and deaths inside the chunk; and the loss at step t reaches the increments of earlier steps."""
    actor, _ = _actor(overrides)
    _move_generators(actor)
    L, B, N = 6, 4, 3
    obs = torch.randn(L, B, N, 6)
    reset, active = _masks(L, B, N, seed=1)
    reset[0] = False  # the chunk starts mid-episode, from a carried state
    h0 = torch.randn(B, N, actor.hidden_size) * 0.1
    with torch.no_grad():
        h, steps = h0, []
        for t in range(L):
            out = actor(obs[t], None, h, reset[t], active=active[t])
            steps.append(out.dist.params())
            h = out.hidden
        seq = actor(obs, None, h0, reset, sequence=True, active=active)
    assert torch.allclose(seq.dist.params(), torch.stack(steps), atol=1e-5)
    assert torch.allclose(seq.hidden, h, atol=1e-5)
    # gradient through time: the last step's logits depend on the increments generated at the first step
    obs.requires_grad_(True)
    out = actor(obs, None, h0, torch.zeros(L, B, N, dtype=torch.bool), sequence=True)
    out.dist.params()[-1].sum().backward()
    if not actor.hyper.context.static:
        assert obs.grad[0].abs().sum() > 0


def test_chunked_training_reproduces_the_rollouts_log_probs(tmp_path):
    cfg = build_config(None, ["env=matrix:specialisation", "env_kwargs={n_agents: 3, episode_length: 7}",
                              "actor=hyper", "hyper.output=accumulate", "hyper.context=obs", "hyper.layers=last",
                              "hyper.lr=0.01", "num_envs=4", "rollout_length=10", "ppo.data_chunk_length=5",
                              f"run_dir={tmp_path / 'r'}", "log.tensorboard=false", "log.progress=false"])
    exp = Experiment(cfg, quiet=True)
    assert exp.actor.hidden_size == exp.actor.state_size > 0 and exp.algo.recurrent
    _move_generators(exp.actor, scale=0.05)
    exp._start_episodes()
    exp.collect()
    exp.collect()  # the second rollout starts mid-episode with non-zero weight states
    assert exp.buffer.reset.any() and not exp.buffer.reset.all()
    assert exp.buffer.actor_h[~exp.buffer.reset].abs().sum() > 0
    for batch in exp.buffer.chunks(num_mini_batch=1, chunk_length=5):
        with torch.no_grad():
            out, _ = exp.algo.evaluate(batch)
        assert torch.allclose(out.dist.log_prob(batch["actions"]), batch["logp"], atol=1e-5)


def test_smoothness_term_is_the_squared_increment_over_active_agents():
    actor, _ = _actor(["hyper.context=obs", "hyper.layers=last", "hyper.alpha=0.5"])
    _move_generators(actor)
    L, B, N = 3, 2, 3
    obs = torch.randn(L, B, N, 6)
    reset, active = _masks(L, B, N)
    out = actor(obs, None, torch.zeros(B, N, actor.hidden_size), reset, sequence=True, active=active)
    delta = actor._flat_increment(out.aux["gens"])  # [L, B, N, P]
    expected = 0.5 * (delta.pow(2).sum(-1) * active).sum() / active.sum()
    loss = actor.aux_losses(out, {"active": active, "reset": reset, "obs": obs,
                                  "actor_h0": torch.zeros(B, N, actor.hidden_size)})["smooth_loss"]
    assert torch.allclose(loss, expected, rtol=1e-5) and loss > 0


def test_state_that_cannot_fit_is_refused_with_one_line():
    cfg = build_config(None, ["actor=hyper", "hyper.output=accumulate", "num_envs=1024"])
    shapes = [(64, 5)]
    check_state_memory(cfg, 3, 325, shapes, available=5 * 1024 ** 3)  # 25 x 1024 x 3 x 325 floats, x 25: ~2.3 GiB
    with pytest.raises(UserError, match=r"hyper\.output=accumulate: the weight state \(325 floats per agent for "
                                        r"generated layers \['64x5'\]\) needs ~2\.3 GB .* 25 x 1024 x 3"):
        check_state_memory(cfg, 3, 325, shapes, available=4 * 1024 ** 3)
    huge = build_config(None, ["actor=hyper", "hyper.output=accumulate", "hyper.context=obs", "hyper.rank=4",
                               "num_envs=100000", "model.hidden_sizes=[1024,1024]"])
    with pytest.raises(UserError, match="more than half of the"):
        build_actor("hyper", _spec(), huge)


@pytest.mark.parametrize("overrides, key", [
    (["actor=hyper", "hyper.decay=0.1"], "hyper.decay=0.1 has no effect: it needs hyper.output=accumulate"),
    (["actor=hyper", "hyper.output=full", "hyper.decay=0.1"], "hyper.decay"),
    (["actor=hyper", "hyper.init_base=true"], "hyper.init_base=True has no effect: it needs hyper.init_from"),
    (["actor=mlp", "hyper.output=accumulate"], "hyper.output"),
    (["actor=hyper", "hyper.output=accumulated"], "hyper.output"),
    (["actor=hyper", "hyper.output=accumulate", "hyper.decay=1.5"], "hyper.decay"),
])
def test_accumulate_config_mistakes_are_one_line_errors(overrides, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.").replace("(", r"\(")):
        build_config(None, overrides)


def test_accumulate_is_recurrent_so_chunk_length_is_read():
    cfg = build_config(None, ["actor=hyper", "hyper.output=accumulate", "ppo.data_chunk_length=5"])
    assert cfg.ppo.data_chunk_length == 5
    # with an agent-id context the smoothness term ||delta||^2 is not identically 0 here, so it is allowed
    build_config(None, ["actor=hyper", "hyper.output=accumulate", "hyper.alpha=0.1"])


def test_bench_has_accumulate_rows_next_to_mappo_and_they_run():
    """`hypermappo bench` measures accumulate at the main point (vmas:simple_spread, E=1024) in the same run as MAPPO
    and the increment rows it compares with; one of its configurations runs through the harness (small env here)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"
    spec = importlib.util.spec_from_file_location("throughput_accumulate_test", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    keys = {c["key"] for c in bench.standard_cases(1)}
    _, env, e = bench.MAIN
    for name in ("mappo", "hyper-id-last", "hyper-accum-id-last", "hyper-obs-last-r0", "hyper-accum-obs-last-r0",
                 "hyper-accum-obs-last", "hyper-obs-defaults"):
        assert f"{name}/{env}/{e}" in keys
    overrides, _ = bench.EXTRA_ACCUMULATE["hyper-accum-obs-last-r0"]
    row = bench.measure(bench.case("hyper-accum-obs-last-r0", "matrix:climbing", 8, 1, overrides), 0, 1, 0.0, 5.0)
    assert row["e2e_sps"] > 0 and row["iterations"] >= 1


def test_the_flagship_preset_trains_accumulate_with_the_default_chunk_length(tmp_path, capsys):
    """`train mpe/simple_spread actor=hyper hyper.output=accumulate` (rollout_length 25): the default
    ppo.data_chunk_length=auto is the largest divisor of rollout_length not above 10 (5 here), said in the header."""
    from hypermappo.cli import main

    small = ["num_envs=2", "total_env_steps=50", "eval_episodes=1", "torch_threads=1", "log.tensorboard=false",
             "log.progress=false", "--quiet"]
    run = tmp_path / "run"
    assert main(["train", "mpe/simple_spread", "actor=hyper", "hyper.output=accumulate", f"run_dir={run}",
                 *small]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ppo.data_chunk_length: auto = 5 (the largest divisor of rollout_length 25 up to 10)" in out, out
    # an explicit value is kept as it is, and one that does not divide rollout_length is still refused
    assert main(["train", "mpe/simple_spread", "actor=hyper", "hyper.output=accumulate", "ppo.data_chunk_length=10",
                 f"run_dir={tmp_path / 'explicit'}", *small]) == 2
    assert "recurrent training needs rollout_length (25) to be a multiple of it, got 10" in capsys.readouterr().err


@pytest.mark.parametrize(("T", "chunk"), [(25, 5), (10, 10), (40, 10), (7, 7), (13, 1), (24, 8)])
def test_auto_chunk_length_is_the_largest_divisor_of_rollout_length_up_to_10(T, chunk):
    from hypermappo.config import data_chunk_length

    cfg = build_config(None, ["actor=rnn", f"rollout_length={T}"])
    assert cfg.ppo.data_chunk_length == "auto" and data_chunk_length(cfg) == chunk
    assert data_chunk_length(build_config(None, ["actor=rnn", f"rollout_length={T}", "ppo.data_chunk_length=3"])) == 3
