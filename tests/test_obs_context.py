"""The observation-context kernel (kernels/obs_context.py): the same hypernetwork code and parameter gradients as the
modules it stands in for (ContextEncoder with attention + the hypernetwork MLP), dead agents masked as they mask
them, and taken exactly where it applies."""

import gymnasium as gym
import pytest
import torch

from hypermappo.config import build_config
from hypermappo.envs.vec import EnvSpec
from hypermappo.kernels import obs_context as kernel
from hypermappo.models.actor import build_actor

CAN_BUILD = kernel.library(3, 18, 16, 4, 16, 2)
needs_kernel = pytest.mark.skipif(isinstance(CAN_BUILD, str), reason=f"the C kernel cannot be built: {CAN_BUILD}")


def _actor(agents: int, obs_dim: int, overrides=(), dtype=torch.float64, seed=0):
    spec = EnvSpec(num_agents=agents, obs_dim=obs_dim, state_dim=agents * obs_dim,
                   observation_space=gym.spaces.Box(-1, 1, (obs_dim,)), action_space=gym.spaces.Discrete(5))
    context = [] if any(o.startswith("hyper.context=") for o in overrides) else ["hyper.context=obs"]
    cfg = build_config(None, ["actor=hyper", *context, *overrides])
    torch.manual_seed(seed)
    actor = build_actor("hyper", spec, cfg).to(dtype)
    with torch.no_grad():  # move every parameter (the generator heads start at 0), so each one matters
        for p in actor.hyper.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return actor


def _code_and_gradients(net, obs, alive, dz, fused: bool):
    if fused:
        params = net.context_params()
        z = kernel.obs_context(obs, alive, params, net.kernel_sizes)
    else:
        ctx, _ = net.context(obs, active=alive)
        z = net.mlp(ctx)
    named = [(n, p) for n, p in net.named_parameters() if not n.startswith("generators")]
    grads = torch.autograd.grad((z * dz).sum(), [p for _, p in named])
    return z, dict(zip([n for n, _ in named], grads))


def _alive_cases(samples: int, agents: int, g: torch.Generator):
    alive = torch.rand(samples, agents, generator=g) > 0.4
    alive[0] = False  # no agent alive: attention output 0
    alive[1] = False
    alive[1, -1] = True  # one alive agent: every query attends to it alone
    return [None, alive]


@needs_kernel
@pytest.mark.parametrize("agents,obs_dim,overrides", [
    (3, 18, []),  # the defaults: 4 heads, 16 wide, 2 MLP layers (VMAS / MPE simple_spread's observation)
    (4, 7, ["hyper.attention_heads=2", "hyper.mlp_layers=1"]),
    (5, 6, ["hyper.attention_heads=1", "hyper.mlp_layers=3", "hyper.hidden=8", "hyper.obs_embed_dim=8"]),
], ids=["defaults", "2-heads-1-layer", "1-head-3-layers-8-wide"])
def test_kernel_gives_the_modules_code_and_gradients(agents, obs_dim, overrides):
    actor = _actor(agents, obs_dim, overrides)
    net = actor.hyper
    assert net.context_kernel == "fused"
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(43, agents, obs_dim, dtype=torch.float64, generator=g) * 2  # 43: a partial block
    dz = torch.randn(43, agents, net.kernel_sizes[2], dtype=torch.float64, generator=g)
    for alive in _alive_cases(43, agents, g):
        z_ref, g_ref = _code_and_gradients(net, obs, alive, dz, fused=False)
        z, grads = _code_and_gradients(net, obs, alive, dz, fused=True)
        torch.testing.assert_close(z, z_ref, rtol=1e-12, atol=1e-12)
        assert (z > 0).any() and (z == 0).any()  # both sides of the last ReLU are exercised
        assert g_ref.keys() == grads.keys() and len(grads) == 6 + 2 * net.kernel_sizes[3]
        for name in g_ref:
            assert g_ref[name].abs().max() > 0, name
            torch.testing.assert_close(grads[name], g_ref[name], rtol=1e-10, atol=1e-10, msg=name)


@needs_kernel
def test_kernel_float32_is_close_and_deterministic_per_thread_count():
    actor = _actor(3, 18)
    net = actor.hyper
    g = torch.Generator().manual_seed(2)
    obs = torch.randn(600, 3, 18, dtype=torch.float64, generator=g)
    dz = torch.randn(600, 3, 16, dtype=torch.float64, generator=g)
    alive = _alive_cases(600, 3, g)[1]
    z_ref, g_ref = _code_and_gradients(net, obs, alive, dz, fused=False)
    net32 = net.float()
    threads = torch.get_num_threads()
    try:
        runs = []
        for n in (1, 2, 2):
            torch.set_num_threads(n)
            runs.append(_code_and_gradients(net32, obs.float(), alive, dz.float(), fused=True))
    finally:
        torch.set_num_threads(threads)
    (z1, g1), (z2, g2), (z2b, g2b) = runs
    torch.testing.assert_close(z1.double(), z_ref, rtol=1e-4, atol=1e-5)
    for name in g_ref:
        torch.testing.assert_close(g1[name].double(), g_ref[name], rtol=1e-4, atol=1e-3, msg=name)
        torch.testing.assert_close(g2[name], g1[name], rtol=1e-5, atol=1e-4, msg=name)
        assert torch.equal(g2[name], g2b[name]), name  # one thread count: the same bits every run
    assert torch.equal(z1, z2)  # samples are independent: the forward does not depend on the thread count


@needs_kernel
def test_obs_context_ops_are_registered_correctly():
    """opcheck (schema, fake shapes, AOT dispatch as torch.compile uses them), gradcheck through the autograd.Function,
    torch.func (the one-graph compiled step), and no differentiation past the Function."""
    actor = _actor(3, 5, ["hyper.attention_heads=2", "hyper.mlp_layers=1", "hyper.obs_embed_dim=4",
                          "hyper.hidden=3"])
    net = actor.hyper
    params = net.context_params().detach()
    g = torch.Generator().manual_seed(3)
    obs = torch.randn(6, 3, 5, dtype=torch.float64, generator=g)
    for alive in _alive_cases(6, 3, g):
        torch.library.opcheck(kernel.obs_context_op, (obs, alive, params, net.kernel_sizes),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
        p = params.clone().requires_grad_()
        assert torch.autograd.gradcheck(lambda p, alive=alive: kernel.obs_context(obs, alive, p, net.kernel_sizes),
                                        (p,))
        by_func = torch.func.grad(lambda p, alive=alive: kernel.obs_context(obs, alive, p, net.kernel_sizes)
                                  .square().sum())(params)
        by_autograd = torch.autograd.grad(kernel.obs_context(obs, alive, p, net.kernel_sizes).square().sum(), p)[0]
        torch.testing.assert_close(by_func, by_autograd)
    with pytest.raises(RuntimeError, match="differentiated only through its autograd.Function"):
        kernel.obs_context_op(obs, None, params.clone().requires_grad_(), net.kernel_sizes)


@needs_kernel
@pytest.mark.parametrize("overrides,want", [
    ([], "fused"),
    (["hyper.obs_aggregation=mean"], "modules (not an observation-only context"),
    (["hyper.context=agent_id,obs"], "modules (not an observation-only context"),
    (["hyper.mlp_layers=0"], "modules (not an observation-only context"),
    (["hyper.attention_kernel=dense"], "modules (attention kernel: dense)"),
    # too large for the kernel's per-thread stack scratch: the modules, not a crash
    (["hyper.obs_embed_dim=256", "hyper.hidden=256"], "modules (kernel unavailable: sizes (3, 18, 256, 4, 256, 2) need"),
])
def test_hypernetwork_takes_the_kernel_where_it_applies(overrides, want):
    assert _actor(3, 18, overrides).hyper.context_kernel.startswith(want)


@needs_kernel
def test_switch_off_keeps_the_modules_and_the_same_policy(monkeypatch):
    """The actor's logits and gradients with the kernel are those of the modules (HYPERMAPPO_OBS_CONTEXT_KERNEL=0),
    for the same seed; a summary records which ran."""
    g = torch.Generator().manual_seed(4)
    obs = torch.randn(32, 3, 18, dtype=torch.float64, generator=g)
    active = _alive_cases(32, 3, g)[1]
    outs = []
    for flag in ("1", "0"):
        monkeypatch.setenv("HYPERMAPPO_OBS_CONTEXT_KERNEL", flag)
        actor = _actor(3, 18)
        logp = actor(obs, None, None, None, active=active).dist.logp_all
        grads = torch.autograd.grad(logp.logsumexp(-1).sum() + logp[..., 0].sum(), list(actor.hyper.parameters()))
        outs.append((actor.describe()["obs_context_kernel"], logp, grads))
    (kind_on, logp_on, grads_on), (kind_off, logp_off, grads_off) = outs
    assert (kind_on, kind_off) == ("fused", "modules (HYPERMAPPO_OBS_CONTEXT_KERNEL=0)")
    torch.testing.assert_close(logp_on, logp_off)
    for a, b in zip(grads_on, grads_off):
        torch.testing.assert_close(a, b)


def test_a_changed_local_header_rebuilds_the_kernel(tmp_path, monkeypatch):
    """c_kernel.build keys its cache on the local headers a kernel includes (vec16.h is shared by two kernels): a
    changed header must not load the stale build."""
    import shutil

    from hypermappo.kernels import c_kernel

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler")
    monkeypatch.setenv("HYPERMAPPO_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "k.c"
    source.write_text('#include "k.h"\nint value(void) { return VALUE; }\n')
    values = []
    for v in (1, 2):
        (tmp_path / "k.h").write_text(f"#define VALUE {v}\n")
        lib = c_kernel.build(source, "header_test", [])
        assert not isinstance(lib, str), lib
        values.append(lib.value())
    assert values == [1, 2]
