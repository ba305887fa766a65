"""Hyper-MAPPO: zero-init equivalence with MAPPO, the hypernetwork is live, regularisers matter,
and the live-component audit stops a run whose hypernetwork is cut off from the loss."""

import csv
import os
import shutil

import gymnasium as gym
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from hypermappo import config as config_mod
from hypermappo.config import build_config
from hypermappo.diagnostics import DeadComponentError, js_distance, system_neural_diversity
from hypermappo.envs.vec import EnvSpec
from hypermappo.experiment import Experiment
from hypermappo.kernels import obs_context as obs_context_kernel
from hypermappo.models.actor import build_actor
from hypermappo.models.agent_attention import AgentAttention, dense_attention
from hypermappo.models.distributions import make_dist
from hypermappo.models.hyper import ContextEncoder


def _spec(n=3, obs=6, actions=5):
    return EnvSpec(num_agents=n, obs_dim=obs, state_dim=n * obs,
                   observation_space=gym.spaces.Box(-1, 1, (obs,)), action_space=gym.spaces.Discrete(actions))


CONTEXTS = [
    ["hyper.context=agent_id"],
    ["hyper.context=agent_id", "hyper.id_encoding=embedding"],
    ["hyper.context=obs"],
    ["hyper.context=obs", "hyper.obs_aggregation=mean", "hyper.layers=last", "hyper.hidden_scale=true"],
    ["hyper.context=agent_id,obs,history"],
    ["hyper.context=obs", "hyper.rank=3"],
    ["hyper.context=agent_id", "hyper.layers=hidden"],
]


@pytest.mark.parametrize("overrides", CONTEXTS, ids=lambda o: " ".join(o))
def test_zero_init_hyper_actor_equals_mappo_actor_with_same_base_weights(overrides):
    spec = _spec()
    cfg = build_config(None, ["actor=hyper", *overrides])
    torch.manual_seed(1)
    mlp = build_actor("mlp", spec, cfg)
    torch.manual_seed(2)  # different init: the base weights are copied over below
    hyper = build_actor("hyper", spec, cfg)
    missing, unexpected = hyper.load_state_dict(mlp.state_dict(), strict=False)
    assert not unexpected and all(k.startswith(("hyper.", "target.")) or k == "_extra_state" for k in missing)
    obs = torch.randn(7, 4, 3, spec.obs_dim)  # [B1, B2, N, D]
    hidden = torch.randn(7, 4, 3, hyper.hidden_size) if hyper.hidden_size else None
    with torch.no_grad():
        a = mlp(obs).dist.params()
        b = hyper(obs, None, hidden, None).dist.params()
    assert torch.equal(a, b)
    # the equivalence is not vacuous: moving a generator output changes the policy
    with torch.no_grad():
        gen = hyper.hyper.generators[-1]
        bias = (gen.v if hyper.cfg_h.rank else gen.w).bias
        bias.add_(torch.randn_like(bias))
        assert not torch.allclose(hyper(obs, None, hidden, None).dist.params(), a)


def _run(tmp_path, name, extra, steps=480, tweak=None):
    cfg = build_config(None, ["env=matrix:specialisation", "env_kwargs={n_agents: 3, episode_length: 10}",
                              "rollout_length=10", "num_envs=8", f"total_env_steps={steps}", f"run_dir={tmp_path / name}",
                              "log.tensorboard=false", "log.progress=false", "eval_episodes=4", "ppo.ppo_epoch=4",
                              *extra])
    if tweak is not None:  # a config `validate` would reject, set on the object directly
        tweak(cfg)
    exp = Experiment(cfg, quiet=True)
    exp.run()
    with open(tmp_path / name / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return exp, rows


def _learning_columns(rows):
    keep = ("policy_loss", "value_loss", "entropy", "approx_kl", "kl_sum", "snd", "grad_norm_actor")
    return [{k: r[k] for k in keep} for r in rows]


def test_hypernetwork_is_trained_and_changes_the_run(tmp_path):
    cfg = build_config(None, ["actor=hyper", "hyper.context=agent_id"])
    spec = _spec(3, 10, 3)
    torch.manual_seed(0)
    fresh = build_actor("hyper", spec, cfg).hyper.state_dict()
    exp, hyper_rows = _run(tmp_path, "hyper", ["actor=hyper", "hyper.context=agent_id", "hyper.lr=1e-3"], steps=80)
    changed = [k for k, v in exp.actor.hyper.state_dict().items() if not torch.equal(v, fresh[k])]
    assert any(k.startswith("generators") for k in changed)  # the output heads moved in the first update
    _, mappo_rows = _run(tmp_path, "mappo", ["actor=mlp"], steps=80)
    assert _learning_columns(hyper_rows) != _learning_columns(mappo_rows)
    assert float(hyper_rows[0]["delta_norm_ratio"]) > 0


def test_regularisers_are_logged_nonzero_and_change_the_update(tmp_path):
    base = ["actor=hyper", "hyper.context=obs", "hyper.layers=last", "hyper.lr=1e-3"]
    _, plain = _run(tmp_path, "plain", base)
    _, smooth = _run(tmp_path, "smooth", base + ["hyper.alpha=0.5"])
    _, align = _run(tmp_path, "align", base + ["hyper.beta=0.5"])
    _, target = _run(tmp_path, "target", ["actor=hyper", "hyper.context=agent_id", "hyper.lr=1e-3", "hyper.alpha=0.5",
                                          "hyper.target=hard", "hyper.target_interval=2"])
    assert "smooth_loss" not in plain[0] and "align_loss" not in plain[0]
    assert all(float(r["smooth_loss"]) > 0 for r in smooth[1:])
    assert all(float(r["align_loss"]) > 0 for r in align[1:])
    assert any(float(r["smooth_loss"]) > 0 for r in target)
    assert _learning_columns(plain) != _learning_columns(smooth)
    assert _learning_columns(plain) != _learning_columns(align)


def test_audit_stops_a_run_whose_hypernetwork_input_is_detached(tmp_path, monkeypatch):
    original = ContextEncoder.forward

    def detached(self, obs, hidden=None, reset=None, sequence=False, active=None):
        ctx, h = original(self, obs, hidden, reset, sequence, active)
        return ctx.detach(), h  # the bug: nothing before the hypernetwork MLP gets a gradient

    monkeypatch.setattr(ContextEncoder, "forward", detached)
    monkeypatch.setenv("HYPERMAPPO_OBS_CONTEXT_KERNEL", "0")  # the modules path (the kernel's own case: below)
    with pytest.raises(DeadComponentError, match=r"actor\.hyper\.context\.obs_encoder"):
        _run(tmp_path, "dead", ["actor=hyper", "hyper.context=obs", "hyper.layers=last"])
    import json
    audit = json.loads((tmp_path / "dead" / "summary.json").read_text())["audit"]
    assert audit["passed"] is False and "actor.hyper.context.attention" in audit["dead"]


@pytest.mark.skipif(isinstance(obs_context_kernel.library(3, 18, 16, 4, 16, 2), str), reason="no C kernel")
def test_audit_stops_a_run_whose_fused_context_kernel_drops_the_encoder_gradient(tmp_path, monkeypatch):
    """The fused observation-context kernel (kernels/obs_context.py) with a bug that loses the encoder's weight
    gradient: the live-component audit names the encoder."""
    original = obs_context_kernel._ObsContext.backward

    def lossy(ctx, grad_z):
        grads = list(original(ctx, grad_z))
        grads[2] = grads[2].clone()
        width = ctx.sizes[0]
        grads[2][:(ctx.saved_tensors[0].shape[-1] + 1) * width] = 0  # the encoder's weight and bias: the first blocks
        return tuple(grads)

    monkeypatch.setattr(obs_context_kernel._ObsContext, "backward", staticmethod(lossy))
    with pytest.raises(DeadComponentError, match=r"actor\.hyper\.context\.obs_encoder"):
        _run(tmp_path, "dead", ["actor=hyper", "hyper.context=obs", "hyper.layers=last"])


def test_audit_passes_and_is_recorded_for_plain_mappo(tmp_path):
    exp, _ = _run(tmp_path, "ok", ["actor=rnn", "ppo.data_chunk_length=5"])
    audit = exp.summary_extra["audit"]
    assert audit["passed"] and audit["components"]["actor.trunk.rnn.ih"] == "live"


def test_audit_is_not_fooled_by_weight_decay_moving_a_module_the_loss_does_not_reach(tmp_path, monkeypatch):
    """The attention's output is multiplied by 0: its parameters get zero gradients, yet Adam's weight decay moves
    them every step. Only a gradient from the loss makes a module live."""
    from hypermappo.models.agent_attention import AgentAttention as Attention
    original = Attention.attend
    monkeypatch.setattr(Attention, "attend", lambda self, x, alive=None: original(self, x, alive) * 0.0)
    monkeypatch.setenv("HYPERMAPPO_OBS_CONTEXT_KERNEL", "0")  # `attend` is the modules path's
    with pytest.raises(DeadComponentError, match=r"actor\.hyper\.context\.attention"):
        _run(tmp_path, "decayed", ["actor=hyper", "hyper.context=obs", "hyper.layers=last", "ppo.weight_decay=0.01"],
             steps=240)
    import json
    summary = json.loads((tmp_path / "decayed" / "summary.json").read_text())
    audit = summary["audit"]
    assert audit["dead"] == ["actor.hyper.context.attention", "actor.hyper.context.attention.out_proj"]
    assert audit["components"]["actor.hyper.context.obs_encoder.1"] == "live"


def test_audit_reports_a_target_hypernetwork_no_loss_reads_as_dead(tmp_path):
    """hyper.alpha=0 with a target: the target is synced (its parameters move) but no loss term reads it."""
    def no_alpha(cfg):
        cfg.hyper.alpha = 0.0

    with pytest.raises(DeadComponentError, match=r"dead: actor\.target \("):
        _run(tmp_path, "unread", ["actor=hyper", "hyper.context=obs", "hyper.layers=last", "hyper.alpha=0.1",
                                  "hyper.target=polyak", "hyper.target_tau=0.5"], steps=240, tweak=no_alpha)


def test_audit_passes_for_a_hyper_run_with_every_part_on(tmp_path):
    exp, _ = _run(tmp_path, "all", ["actor=hyper", "hyper.context=agent_id,obs", "hyper.layers=last",
                                    "hyper.rank=0", "hyper.alpha=0.1", "hyper.target=hard", "hyper.target_interval=2",
                                    "hyper.beta=0.1", "ppo.weight_decay=0.01"], steps=240)
    audit = exp.summary_extra["audit"]
    assert audit["passed"], audit
    assert set(audit["components"].values()) == {"live"}
    for name in ("actor.target", "actor.hyper.context.attention", "actor.hyper.mlp.0", "actor.hyper.generators.0.w"):
        assert audit["components"][name] == "live", name
    assert set(audit["loss_terms"]) == {"policy_loss", "value_loss", "entropy", "smooth_loss", "align_loss"}


def test_audit_flags_a_zero_loss_term(tmp_path, monkeypatch):
    from hypermappo.models.hyper import HyperActor
    monkeypatch.setattr(HyperActor, "aux_losses", lambda self, out, batch: {"smooth_loss": torch.zeros(())})
    with pytest.raises(DeadComponentError, match="loss term smooth_loss"):
        _run(tmp_path, "zero", ["actor=hyper", "hyper.context=obs", "hyper.alpha=0.1", "hyper.layers=last"])


def test_snd_is_zero_for_identical_agents_and_positive_for_different_ones():
    spec = _spec()
    pool = torch.randn(32, spec.obs_dim)
    shared = build_actor("mlp", spec, build_config(None, []))
    assert system_neural_diversity(shared, pool, 3, spec.action_space) == pytest.approx(0.0, abs=1e-6)
    separate = build_actor("mlp", spec, build_config(None, ["model.share_params=false", "model.policy_gain=1.0"]))
    assert system_neural_diversity(separate, pool, 3, spec.action_space) > 0.01
    p = torch.tensor([1.0, 0.0])
    assert js_distance(p, torch.tensor([0.0, 1.0])).item() == pytest.approx(1.0)


def test_full_output_starts_at_mappo_init_gains():
    """hyper.output=full: each generated layer starts orthogonal with MAPPO's gain for that layer (model.gain,
    model.policy_gain on the head), so the first policy is as near-uniform as MAPPO's, not sharply peaked."""
    spec = _spec()
    cfg = build_config(None, ["actor=hyper", "hyper.output=full"])
    mlp = build_actor("mlp", spec, cfg)
    hyper = build_actor("hyper", spec, cfg)
    mlp_layers = list(mlp.trunk.linears) + [mlp.head]
    for gen, i in zip(hyper.hyper.generators, hyper.generated, strict=True):
        assert torch.allclose(gen.w.bias.norm(), mlp_layers[i].weight.norm(), rtol=1e-4), f"layer {i}"
    with torch.no_grad():
        entropy = hyper(torch.randn(32, 3, spec.obs_dim), None, None, None).dist.entropy()
    assert entropy.min() > torch.log(torch.tensor(5.0)) - 1e-3


@pytest.mark.parametrize("overrides", [["hyper.context=obs"], ["hyper.context=obs", "hyper.layers=last"],
                                       ["hyper.context=agent_id,obs,history", "hyper.output=full"],
                                       ["hyper.context=obs", "hyper.layers=last", "hyper.rank=1"],
                                       ["hyper.context=obs,history", "hyper.rank=3"]],
                         ids=lambda o: " ".join(o))
def test_factored_generation_equals_explicit_weights(overrides):
    """Per-sample generation never forms W(z); its outputs, gradients, ||delta|| and ||delta - delta'|| (also
    against a target net) must equal those of the explicit per-sample weights."""
    spec = _spec()
    cfg = build_config(None, ["actor=hyper", "hyper.target=hard", "hyper.alpha=0.1", *overrides])
    torch.manual_seed(3)
    actor = build_actor("hyper", spec, cfg).double()
    with torch.no_grad():  # move the zero-initialised heads so delta is not trivially 0
        for p in actor.hyper.parameters():
            p.add_(0.3 * torch.randn_like(p))
        for p in actor.target.parameters():
            p.add_(0.3 * torch.randn_like(p))
    assert actor.hyper.factored
    obs, obs2 = torch.randn(2, 5, 4, 3, spec.obs_dim, dtype=torch.float64)
    hidden = torch.randn(5, 4, 3, actor.hidden_size, dtype=torch.float64) if actor.hidden_size else None
    out = actor(obs, None, hidden, None)
    gens, gens2 = out.aux["gens"], actor.generate(obs2, hidden)[0]
    tgens = actor.generate(obs, hidden, net=actor.target)[0]
    assert "code" in gens[0] and "W" not in gens[0]

    def explicit(net, o):
        ctx, _ = net.context(o, hidden)
        return [g(net.mlp(ctx), False) for g in net.generators]

    ex, ex2, ext = explicit(actor.hyper, obs), explicit(actor.hyper, obs2), explicit(actor.target, obs)
    flat = actor._flat_delta
    torch.testing.assert_close(actor._delta_sq_norm(gens), flat(ex).pow(2).sum(-1))
    torch.testing.assert_close(actor._delta_sq_dist(gens, gens2), (flat(ex) - flat(ex2)).pow(2).sum(-1))
    torch.testing.assert_close(actor._delta_sq_dist(gens, tgens, actor.target), (flat(ex) - flat(ext)).pow(2).sum(-1))
    # the forward pass with explicit per-sample weights gives the same logits
    x = actor.trunk.feature_norm(actor.actor_input(obs)) if actor.trunk.feature_norm is not None else obs
    by_layer = dict(zip(actor.generated, ex))

    def explicit_layer(lin, x, gen):  # per-sample weight matrices, formed and applied one per sample
        if gen is None:
            return lin(x)
        w = gen["W"] if "W" in gen else gen["U"] @ gen["V"]
        return lin(x) + gen["b"] + torch.einsum("...i,...io->...o", x, w)

    for i, (lin, norm) in enumerate(zip(actor.trunk.linears, actor.trunk.norms)):
        x = norm(actor.trunk.act(explicit_layer(lin, x, by_layer.get(i))))
    logits = explicit_layer(actor.head, x, by_layer.get(len(actor.trunk.linears)))
    expected = make_dist(spec.action_space, logits, None, None).params()
    torch.testing.assert_close(out.dist.params(), expected)
    # and the same gradient for every parameter (a layer's input product has a hand-written backward)
    weights = torch.randn_like(expected)
    params = [p for p in actor.parameters() if p.requires_grad]
    got = torch.autograd.grad((out.dist.params() * weights).sum(), params, allow_unused=True)
    want = torch.autograd.grad((expected * weights).sum(), params, allow_unused=True)
    for (name, _), g, w in zip([(n, p) for n, p in actor.named_parameters() if p.requires_grad], got, want):
        assert (g is None) == (w is None), name
        if g is not None:
            torch.testing.assert_close(g, w, msg=lambda m, name=name: f"{name}: {m}")


HAS_CC = bool(os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc"))
needs_cc = pytest.mark.skipif(not HAS_CC, reason="no C compiler for the fused attention kernel")


@pytest.mark.parametrize("kernel", ["dense", pytest.param("fused", marks=needs_cc)])
@pytest.mark.parametrize("agents,width,heads", [(3, 16, 4), (3, 16, 1), (5, 8, 2), (1, 4, 4)])
def test_agent_attention_equals_torch_multihead_attention(kernel, agents, width, heads):
    """Both implementations (PyTorch ops, C kernel) give nn.MultiheadAttention's output and gradients."""
    torch.manual_seed(5)
    att = AgentAttention(agents, width, heads, kernel).double()
    assert att.implementation == kernel
    x = torch.randn(7, agents, width, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(7, agents, width, dtype=torch.float64)
    expected, _ = nn.MultiheadAttention.forward(att, x, x, x, need_weights=False)
    expected_grads = torch.autograd.grad(expected, [x, *att.parameters()], grad_out)
    got = att.attend(x)
    torch.testing.assert_close(got, expected)
    for g, e in zip(torch.autograd.grad(got, [x, *att.parameters()], grad_out), expected_grads):
        torch.testing.assert_close(g, e)


@needs_cc
def test_fused_attention_float32_and_thread_count_independent():
    """The kernel's float32 path matches the dense one, and its result does not depend on the thread count."""
    torch.manual_seed(6)
    att = AgentAttention(3, 16, 4, "fused")
    x = torch.randn(513, 3, 16)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = att.attend(x)
        torch.set_num_threads(2)
        two = att.attend(x)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    qkv = F.linear(x, att.in_proj_weight, att.in_proj_bias)
    torch.testing.assert_close(one, F.linear(dense_attention(qkv, 4), att.out_proj.weight, att.out_proj.bias))


@needs_cc
@pytest.mark.parametrize("agents,heads", [(3, 4), (3, 1), (3, 2), (3, 8), (3, 16), (5, 4), (4, 4), (1, 4)])
def test_fused_attention_float32_vector_path(agents, heads):
    """The kernel's float32 path at width 16 (one vector per query, key and value; heads as groups of lanes):
    output and input gradient equal the dense float64 attention to float32 rounding, dead keys masked, a sample with
    no alive key giving 0; every head count that divides 16, and the weights gathered per query in one vector
    (agents x heads <= 16) or lane by lane (3 x 8, 3 x 16, 5 x 4)."""
    from hypermappo.models.agent_attention import fused_attention

    torch.manual_seed(9)
    b = 300
    qkv = torch.randn(b, agents, 48) * 2
    alive = torch.rand(b, agents) < 0.6
    alive[:3] = False  # nobody alive
    alive[3:20] = True
    grad_out = torch.randn(b, agents, 16, dtype=torch.float64)
    for mask in (alive, None):
        want_x = qkv.double().requires_grad_()
        got_x = qkv.clone().requires_grad_()
        want, got = dense_attention(want_x, heads, mask), fused_attention(got_x, heads, mask)
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
        (want_g,) = torch.autograd.grad(want, want_x, grad_out)
        (got_g,) = torch.autograd.grad(got, got_x, grad_out.float())
        torch.testing.assert_close(got_g.double(), want_g, rtol=1e-5, atol=2e-5)
    assert torch.equal(fused_attention(qkv[:3], heads, alive[:3]), torch.zeros(3, agents, 16))


@needs_cc
def test_attention_vector_switch_selects_the_scalar_build(monkeypatch):
    """HYPERMAPPO_ATTENTION_VECTOR=0: the scalar loops' build (another library), the same values to float rounding;
    anything but 0 or 1 is a one-line error."""
    from hypermappo.errors import UserError
    from hypermappo.models import agent_attention
    from hypermappo.models.agent_attention import fused_attention, fused_library

    torch.manual_seed(10)
    qkv = torch.randn(64, 3, 48)
    vector, out = fused_library(3, 16, 4), fused_attention(qkv, 4)
    monkeypatch.setenv("HYPERMAPPO_ATTENTION_VECTOR", "0")
    assert not agent_attention.vector_path() and fused_library(3, 16, 4) is not vector
    scalar_out = fused_attention(qkv, 4)
    assert not torch.equal(scalar_out, out)  # another summation order and exp
    torch.testing.assert_close(scalar_out, out, rtol=1e-5, atol=1e-6)
    monkeypatch.setenv("HYPERMAPPO_ATTENTION_VECTOR", "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_ATTENTION_VECTOR='yes': expected 0 or 1"):
        fused_attention(qkv, 4)


def test_attention_kernel_falls_back_or_fails_clearly_without_a_compiler(monkeypatch, tmp_path):
    """auto -> the dense path with the reason recorded; fused -> a one-line config error; never a traceback."""
    from hypermappo.errors import UserError
    from hypermappo.kernels import c_kernel

    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    monkeypatch.setenv("HYPERMAPPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(c_kernel, "_LOADED", {})  # loaded earlier in this process: built again, without a compiler
    att = AgentAttention(2, 6, 3, "auto")
    assert not att.fused and att.implementation.startswith("dense (fused kernel unavailable: cannot run")
    x = torch.randn(4, 2, 6)
    expected, _ = nn.MultiheadAttention.forward(att, x, x, x, need_weights=False)
    torch.testing.assert_close(att.attend(x), expected)
    with pytest.raises(UserError, match="hyper.attention_kernel: 'fused' asked for"):
        AgentAttention(2, 6, 3, "fused")


@pytest.mark.parametrize("kernel", ["dense", pytest.param("fused", marks=needs_cc)])
@pytest.mark.parametrize("agents,width,heads", [(3, 16, 4), (3, 16, 1), (5, 8, 2)])
def test_agent_attention_never_attends_to_dead_agents(kernel, agents, width, heads):
    """Dead / padded slots are masked as keys exactly like nn.MultiheadAttention's key_padding_mask (output and
    gradients); a sample with no alive agent gives a finite output (the out-projection of zeros) and gradients."""
    torch.manual_seed(8)
    att = AgentAttention(agents, width, heads, kernel).double()
    b = 40
    alive = torch.rand(b, agents) < 0.5
    alive[torch.arange(b), torch.randint(agents, (b,))] = True  # >= 1 alive key (else the reference gives NaN)
    alive[:4] = True
    x = torch.randn(b, agents, width, dtype=torch.float64, requires_grad=True)
    grad_out = torch.randn(b, agents, width, dtype=torch.float64)
    expected, _ = nn.MultiheadAttention.forward(att, x, x, x, key_padding_mask=~alive, need_weights=False)
    expected_grads = torch.autograd.grad(expected, [x, *att.parameters()], grad_out)
    got = att.attend(x, alive)
    torch.testing.assert_close(got, expected)
    for g, e in zip(torch.autograd.grad(got, [x, *att.parameters()], grad_out), expected_grads):
        torch.testing.assert_close(g, e)
    assert not torch.allclose(att.attend(x), expected)  # the mask matters for these inputs

    nobody = torch.zeros(3, agents, dtype=torch.bool)
    out = att.attend(x[:3], nobody)
    torch.testing.assert_close(out, att.out_proj.bias.expand_as(out).detach())
    grads = torch.autograd.grad(out, [x, *att.parameters()], torch.randn_like(out))
    assert all(torch.isfinite(g).all() for g in grads)


def _perturbed_hyper_actor(spec, overrides, seed=4, scale=0.5):
    """A Hyper actor whose (zero-initialised) generator heads have moved, so delta != 0 depends on the context."""
    cfg = build_config(None, ["actor=hyper", *overrides])
    torch.manual_seed(seed)
    actor = build_actor("hyper", spec, cfg).double()
    with torch.no_grad():
        for p in actor.hyper.parameters():
            p.add_(scale * torch.randn_like(p))
    return actor


@pytest.mark.parametrize("overrides", [["hyper.context=obs", "hyper.attention_kernel=dense"],
                                       pytest.param(["hyper.context=obs", "hyper.attention_kernel=fused"],
                                                    marks=needs_cc),
                                       ["hyper.context=obs", "hyper.obs_aggregation=mean"],
                                       ["hyper.context=agent_id,obs,history", "hyper.layers=last"]],
                         ids=lambda o: " ".join(o))
def test_dead_agents_observation_does_not_change_alive_agents_policies(overrides):
    spec = _spec(4, 6, 5)
    actor = _perturbed_hyper_actor(spec, overrides)
    obs = torch.randn(16, 4, spec.obs_dim, dtype=torch.float64)  # [B, N, D]
    active = torch.ones(16, 4, dtype=torch.bool)
    active[:, 1] = False
    active[8:, 3] = False
    changed = obs.clone()
    changed[~active] = torch.randn_like(changed[~active]) * 3
    hidden = torch.randn(16, 4, actor.hidden_size, dtype=torch.float64) if actor.hidden_size else None
    with torch.no_grad():
        before = actor(obs, None, hidden, None, active=active).dist.logp_all
        after = actor(changed, None, hidden, None, active=active).dist.logp_all
        unmasked = actor(changed, None, hidden, None).dist.logp_all
    torch.testing.assert_close(after[active], before[active])
    assert torch.isfinite(after).all()
    assert not torch.allclose(unmasked[active], before[active])  # without the mask they would leak through


@pytest.mark.parametrize("overrides", [["hyper.context=agent_id"], ["hyper.context=agent_id", "hyper.rank=2"],
                                       ["hyper.context=agent_id", "hyper.id_encoding=embedding"]],
                         ids=lambda o: " ".join(o))
def test_agent_id_context_gives_each_agent_its_own_policy(overrides):
    """Once delta != 0, agents seeing the SAME observation act differently (their deltas differ)."""
    spec = _spec(3, 6, 5)
    actor = _perturbed_hyper_actor(spec, overrides, scale=0.1)
    obs = torch.randn(32, 1, spec.obs_dim, dtype=torch.float64).expand(32, 3, spec.obs_dim)
    with torch.no_grad():
        logp = actor(obs).dist.logp_all  # [32, N, A]
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        assert (logp[:, i] - logp[:, j]).abs().amax(-1).min() > 1e-3, (i, j)  # every sample
        assert js_distance(logp[:, i].exp(), logp[:, j].exp()).mean() > 0.01, (i, j)


@pytest.mark.parametrize("overrides, want", [
    (["hyper.context=obs"], ("last", 16, 1, 16)),  # per-sample context: the lean setting
    (["hyper.context=agent_id,obs"], ("last", 16, 1, 16)),
    (["hyper.context=history", "ppo.data_chunk_length=5"], ("last", 16, 1, 16)),
    (["hyper.context=agent_id"], ("all", 64, 0, 16)),  # generated once per agent: wide, every layer, full rank
    (["hyper.context=obs", "hyper.output=accumulate", "ppo.data_chunk_length=5"], ("last", 16, 0, 16)),
    (["hyper.context=obs", "hyper.output=full"], ("last", 16, 0, 16)),
    (["hyper.context=obs", "hyper.layers=all", "hyper.hidden=64", "hyper.rank=0", "hyper.obs_embed_dim=64"],
     ("all", 64, 0, 64)),  # explicit values are kept
])
def test_hypernetwork_sizes_default_by_context(tmp_path, overrides, want):
    """`auto` sizes: an observation context costs a hypernetwork pass per sample, so it defaults to the lean setting
    (docs: within 1.5x of MAPPO per env step); the resolved values are what the run's config.yaml records."""
    cfg = build_config(None, ["actor=hyper", *overrides, f"run_dir={tmp_path / 'r'}"])
    h = cfg.hyper
    assert (h.layers, h.hidden, h.rank, h.obs_embed_dim) == want
    config_mod.save_yaml(cfg, tmp_path / "c.yaml")
    saved = config_mod.load_yaml(tmp_path / "c.yaml")
    assert (saved["hyper"]["layers"], saved["hyper"]["hidden"], saved["hyper"]["rank"]) == want[:3]


def test_hypernetwork_without_hidden_layer_keeps_hidden_unset():
    cfg = build_config(None, ["actor=hyper", "hyper.context=obs", "hyper.mlp_layers=0"])
    assert cfg.hyper.hidden == 0 and cfg.hyper.rank == 1
