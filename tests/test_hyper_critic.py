"""critic.arch=hyper: a MAPPO critic whose layers get per-agent increments from an agent-id hypernetwork.

At init it is MAPPO's critic exactly; with moved generators agent i's value is the MAPPO critic with weights
base + delta_i; it fits per-agent values a shared critic without an agent id cannot; it trains, passes the
live-component audit, resumes exactly; misuse is a one-line error."""

from __future__ import annotations

import copy
import json

import gymnasium as gym
import pytest
import torch
from test_resume import resume_matches_uninterrupted

from hypermappo.cli import main
from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec
from hypermappo.errors import UserError
from hypermappo.models.critic import Critic, HyperCritic, build_critic

TINY = ["total_env_steps=8", "num_envs=2", "rollout_length=4", "eval_episodes=1", "log.tensorboard=false",
        "log.progress=false", "diagnostics.every=0", "diagnostics.audit_updates=0", "torch_threads=1"]


def _spec(n=3, obs=5, state=7):
    return EnvSpec(num_agents=n, obs_dim=obs, state_dim=state, observation_space=gym.spaces.Box(-1, 1, (obs,)),
                   action_space=gym.spaces.Discrete(4))


def _critics(overrides=(), seed=3, spec=None):
    spec = spec or _spec()
    torch.manual_seed(seed)
    base = Critic(spec, build_config(None, list(overrides)))
    torch.manual_seed(seed)
    hyper = build_critic(spec, build_config(None, ["critic.arch=hyper", *overrides]))
    return base, hyper


def _inputs(spec, lead=(6,), seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(*lead, spec.num_agents, spec.obs_dim, generator=g)  # [B, N, D]
    state = torch.randn(*lead, spec.state_dim, generator=g)  # [B, S]
    active = torch.rand(*lead, spec.num_agents, generator=g) > 0.3  # [B, N]
    return obs, state, active


def _move_generators(critic, scale=0.3):
    torch.manual_seed(11)
    with torch.no_grad():
        for gen in critic.hyper.generators:
            for lin in (gen.w, gen.b):
                lin.weight.add_(scale * torch.randn_like(lin.weight))
                lin.bias.add_(scale * torch.randn_like(lin.bias))


@pytest.mark.parametrize("overrides", [[], ["critic.input=state_obs_agent_id", "ppo.death=episode"],
                                       ["model.share_params=false"], ["model.layer_norm=false", "critic.hidden_sizes=[8]"]])
def test_zero_increments_give_the_mappo_critic_exactly(overrides):
    base, hyper = _critics(overrides)
    assert isinstance(hyper, HyperCritic) and type(base) is Critic
    obs, state, active = _inputs(_spec(), lead=(2, 5))
    want, _ = base(obs, state, active=active)
    got, hidden = hyper(obs, state, active=active)
    assert hidden is None and got.shape == want.shape == (2, 5, 3)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("overrides", [[], ["model.share_params=false"], ["critic.input=state", "ppo.death=agent"]])
def test_agent_i_value_is_the_critic_with_weights_base_plus_delta_i(overrides):
    spec = _spec()
    base, hyper = _critics(overrides, spec=spec)
    _move_generators(hyper)
    obs, state, active = _inputs(spec)
    got, _ = hyper(obs, state, active=active)  # [B, N]
    gens, _, _ = hyper.hyper(obs.new_zeros(1, spec.num_agents, 1))
    layers = lambda c: list(c.trunk.linears) + [c.head]  # noqa: E731
    for i in range(spec.num_agents):  # reference: agent i's own MAPPO critic (a loop is fine in a test)
        ref = copy.deepcopy(base)
        with torch.no_grad():
            for lin, gen in zip(layers(ref), gens):
                lin.weight.add_(gen["W"][0, i])  # [G, in, out] + [in, out]
                lin.bias.add_(gen["b"][0, i])
        want, _ = ref(obs, state, active=active)
        torch.testing.assert_close(got[:, i], want[:, i], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, base(obs, state, active=active)[0], atol=1e-3)


def test_fits_per_agent_values_that_a_shared_critic_without_agent_id_cannot():
    """critic.input=state carries no agent id: only generated per-agent weights can give agents different values."""
    spec = _spec(n=4)
    g = torch.Generator().manual_seed(0)
    obs, state = torch.randn(64, 4, 5, generator=g), torch.randn(64, 7, generator=g)
    target = state[:, :1] * torch.tensor([1.0, -1.0, 2.0, 0.0]) + torch.tensor([0.5, -0.5, 1.0, 0.0])  # [B, N]
    losses = {}
    for arch in ("mlp", "hyper"):
        torch.manual_seed(0)
        cfg = build_config(None, ["critic.input=state", f"critic.arch={arch}", "critic.hidden_sizes=[16]",
                                  *(["critic.hyper_lr=1e-2"] if arch == "hyper" else [])])
        critic = build_critic(spec, cfg)
        opt = torch.optim.Adam(critic.optimizer_groups(1e-2))
        for _ in range(60):
            loss = (critic(obs, state)[0] - target).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        losses[arch] = loss.item()
    assert losses["mlp"] > 0.5, losses  # the best shared fit predicts the agents' mean target
    assert losses["hyper"] < 0.1, losses


def test_hypernetwork_gets_its_own_learning_rate():
    from hypermappo.algos.mappo import MAPPO
    from hypermappo.models.actor import build_actor

    cfg = build_config(None, ["critic.arch=hyper", "critic.hyper_lr=2e-3", "ppo.lr_critic=5e-4"])
    hyper = build_critic(_spec(), cfg)
    algo = MAPPO(build_actor("mlp", _spec(), cfg), hyper, cfg)  # the optimiser MAPPO trains the critic with
    groups = {g["name"]: g for g in algo.critic_opt.param_groups}
    assert groups["critic_base"]["lr"] == 5e-4 and groups["critic_hypernetwork"]["lr"] == 2e-3
    hyper_ids = {id(p) for p in hyper.hyper.parameters()}
    assert {id(p) for p in groups["critic_hypernetwork"]["params"]} == hyper_ids
    assert not hyper_ids & {id(p) for p in groups["critic_base"]["params"]}
    assert len(hyper_ids) + len(groups["critic_base"]["params"]) == len(list(hyper.parameters()))


def test_trains_and_passes_the_live_component_audit(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "matrix/specialisation", "critic.arch=hyper", "total_env_steps=1280", "num_envs=16",
                 "diagnostics.audit_updates=3", "eval_episodes=4", "torch_threads=1", "log.tensorboard=false",
                 f"run_dir={run}", "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    audit = summary["audit"]
    assert audit["passed"], audit
    hyper_parts = [k for k in audit["components"] if k.startswith("critic.hyper.")]
    assert {"critic.hyper.mlp.0", "critic.hyper.generators.0.w", "critic.hyper.generators.2.b"} <= set(hyper_parts)
    ckpt = torch.load(sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1], weights_only=False)
    moved = [v.abs().max() for k, v in ckpt["critic"].items() if k.startswith("hyper.generators.")]
    assert min(moved) > 0  # every generator left its zero init: increments were trained
    assert summary["status"] == "finished" and summary["eval_return_mean"] == summary["eval_return_mean"]


def test_resume_from_a_checkpoint_equals_the_uninterrupted_run(tmp_path):
    resume_matches_uninterrupted(tmp_path, "staghunt/default", ["model.hidden_sizes=[16,16]", "critic.arch=hyper",
                                                                 "critic.hyper_hidden=16", "critic.hyper_lr=1e-3"])


def test_a_learner_group_can_use_the_hypernetwork_critic(tmp_path):
    from hypermappo.experiment import Experiment

    groups = ("groups=[{name: a, agents: [0, 1], critic: {arch: hyper, hyper_hidden: 8}}, "
              "{name: b, agents: [2], critic: {arch: mlp}}]")
    cfg = build_config("matrix/specialisation", ["env_kwargs={n_agents: 3, episode_length: 4}", groups, *TINY])
    exp = Experiment(cfg, tmp_path / "run", quiet=True)
    by_name = {g.name: g.learner for g in exp.groups}
    assert isinstance(by_name["a"].critic, HyperCritic) and by_name["a"].critic.hyper.mlp[0].out_features == 8
    assert type(by_name["b"].critic) is Critic


@pytest.mark.parametrize("overrides, match", [
    (["critic.arch=hyper", "ppo.value_norm=popart"], r"critic\.arch=hyper: ppo\.value_norm=popart"),
    (["critic.arch=hyper", "critic.recurrent=on"], r"critic\.arch=hyper: .*critic\.recurrent=off"),
    (["critic.arch=hyper", "actor=rnn"], r"critic\.arch=hyper: .*actor='rnn'"),
    (["critic.hyper_lr=1e-3"], r"critic\.hyper_lr=0\.001 has no effect: it needs critic\.arch=hyper"),
    (["critic.hyper_hidden=8"], r"critic\.hyper_hidden=8 has no effect: it needs critic\.arch=hyper"),
    (["critic.arch=hypernet"], r"critic\.arch: 'hypernet' is not one of \['mlp', 'hyper'\]"),
])
def test_misuse_is_a_one_line_error(overrides, match, capsys, tmp_path):
    with pytest.raises(UserError, match=match):
        build_config(None, overrides)
    assert main(["train", "matrix/climbing", *overrides, *TINY, f"run_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "r").exists()
