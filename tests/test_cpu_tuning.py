"""ppo.compile's CPU tuning (issue 40): the graph passes registered as one CustomGraphPass (torch 2.11's contract),
installed only for CPU learners under a tested torch, and the kernels taken where a timed probe finds them faster.
No GPU needed: CUDA is a device name, and a graph on it is one of fake tensors."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from hypermappo import config as config_mod
from hypermappo.compile import (
    bias_epilogue,
    bool_masks,
    column_sum,
    configure,
    cxx_compiler,
    decide,
    decision,
    linear_act_norm,
    onednn_gemm,
    pipeline,
    probe,
    torch_range,
    weight_grad,
)
from hypermappo.kernels import act_norm

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
PROBED = {"linear_act_norm": "HYPERMAPPO_LINEAR_ACT_NORM", "weight_grad": "HYPERMAPPO_WEIGHT_GRAD",
          "onednn_gemm": "HYPERMAPPO_ONEDNN_GEMM"}


@pytest.fixture
def inductor_settings(monkeypatch):
    """configure() writes process-wide Inductor settings: each test's are undone after it, and it starts with no
    device recorded."""
    import torch._inductor.config as inductor

    monkeypatch.setattr(decision, "_DEVICES", set())
    # not monkeypatch.setattr: its undo deletes a config module's attribute, which Inductor then hides
    with inductor.patch(post_grad_custom_post_pass=None, joint_custom_post_pass=None, cpp_wrapper=False,
                        **{"cpp.use_decompose_tanh": False}):
        yield inductor


def biased_relu_graph(device: str = "cpu") -> torch.fx.GraphModule:
    """relu(addmm(b, x, w)) with its nodes' metadata (what a post-grad graph has); `device` other than the CPU: the
    metadata's tensors are fake tensors on it."""
    gm = make_fx(lambda b, x, w: torch.addmm(b, x, w).relu(), tracing_mode="fake")(
        torch.randn(8), torch.randn(5, 4), torch.randn(4, 8))
    if device != "cpu":
        with FakeTensorMode(allow_non_fake_inputs=True):
            for node in gm.graph.nodes:
                v = node.meta.get("val")
                if isinstance(v, torch.Tensor):
                    node.meta["val"] = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=device)
    return gm


def targets(gm) -> list:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


# ------------------------------------------------------------------ one pass object (torch 2.11's contract)


def test_the_post_grad_hook_is_one_graph_pass_that_runs_every_enabled_pass_in_order(inductor_settings, monkeypatch):
    """torch 2.11 calls `post_grad_custom_post_pass(graph)` and keys its graph cache on the object's uuid(): a list
    there crashed every compiled run at update 1 ("'list' object is not callable")."""
    configure()
    hook = inductor_settings.post_grad_custom_post_pass
    assert callable(hook) and isinstance(hook, CustomGraphPass) and not isinstance(hook, (list, tuple))
    assert list(hook.passes) == [linear_act_norm.PASS, onednn_gemm.PASS, weight_grad.PASS, column_sum.PASS,
                                 bias_epilogue.PASS]
    joint = inductor_settings.joint_custom_post_pass
    assert callable(joint) and isinstance(joint, CustomGraphPass) and list(joint.passes) == [bool_masks.PASS]

    ran = []
    for graph_pass in hook.passes:
        cls = type(graph_pass)
        monkeypatch.setattr(cls, "__call__", lambda self, graph, run=cls.__call__: (ran.append(self), run(self, graph)))
    gm = biased_relu_graph()
    before = bias_epilogue.PASS.rewritten
    hook(gm.graph)  # as torch 2.11's post_grad.py calls it
    assert ran == list(hook.passes)
    assert bias_epilogue.PASS.rewritten - before == 1  # the real passes ran: addmm -> mm + add before the ReLU
    assert torch.ops.aten.addmm.default not in targets(gm) and torch.ops.aten.mm.default in targets(gm)


def test_the_hooks_uuid_combines_the_passes_keys(inductor_settings, monkeypatch):
    configure()
    hook = inductor_settings.post_grad_custom_post_pass
    key = hook.uuid()
    assert isinstance(key, bytes) and key == hook.uuid()
    monkeypatch.setattr(bias_epilogue.PASS, "uuid", lambda: b"another version of the pass")
    assert hook.uuid() != key  # a changed pass recompiles rather than reusing a cached graph
    monkeypatch.setenv("HYPERMAPPO_WEIGHT_GRAD", "0")
    configure()
    assert weight_grad.PASS not in inductor_settings.post_grad_custom_post_pass.passes


def test_a_graph_on_another_device_is_left_alone():
    """Inductor's settings are process-wide: a CUDA learner's graphs reach the hook too and must come out as they
    went in, while the same graph on the CPU is rewritten."""
    class Recorder(CustomGraphPass):
        def __init__(self):
            self.graphs = []

        def __call__(self, graph):
            self.graphs.append(graph)

        def uuid(self):
            return b"recorder"

    recorder = Recorder()
    hook = pipeline.GraphPasses([recorder, bias_epilogue.PASS])
    cuda = biased_relu_graph("cuda")
    assert not pipeline.on_cpu(cuda.graph)
    before = targets(cuda)
    hook(cuda.graph)
    assert targets(cuda) == before and recorder.graphs == []
    cpu = biased_relu_graph()
    assert pipeline.on_cpu(cpu.graph)
    hook(cpu.graph)
    assert targets(cpu) != before and recorder.graphs == [cpu.graph]


# ------------------------------------------------------------------ CPU only, tested torch only


def compiled_cfg():
    return config_mod.build_config("staghunt/default", ["ppo.compile=on", "num_envs=4", "rollout_length=10"])


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_a_cuda_learner_gets_no_cpu_pass_and_the_header_says_so(inductor_settings):
    on, line = decide(compiled_cfg(), CUDA)
    assert on and line.startswith("compile: on (ppo.compile=on")
    assert ("; CPU graph passes and kernels: stepping aside (device cuda; they are written for Inductor's CPU "
            "backend); CUDA graphs: off (auto: ") in line
    assert "\n" not in line
    assert inductor_settings.post_grad_custom_post_pass is None and inductor_settings.joint_custom_post_pass is None
    assert not inductor_settings.cpp_wrapper and not inductor_settings.cpp.use_decompose_tanh
    assert inductor_settings.fallback_random  # what equality with eager needs holds on every device

    # a CPU learner in the same process gets its passes; the C++ calling code stays off (process-wide)
    on, line = decide(compiled_cfg(), CPU)
    assert on and "CPU graph passes: column_sum, bias_epilogue, bool_masks" in line and "stepping aside" not in line
    assert isinstance(inductor_settings.post_grad_custom_post_pass, pipeline.GraphPasses)
    assert not inductor_settings.cpp_wrapper


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_a_cpu_learner_gets_the_passes_and_the_header_names_them(inductor_settings):
    on, line = decide(compiled_cfg(), CPU)
    assert on and "; CPU graph passes: column_sum, bias_epilogue, bool_masks; linear_act_norm, onednn_gemm, " \
                  "weight_grad per product shape where a timed probe on this CPU" in line
    assert str(probe.cache_path()) in line
    assert inductor_settings.cpp_wrapper and inductor_settings.cpp.use_decompose_tanh


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_an_untested_torch_gets_no_cpu_tuning(inductor_settings, monkeypatch):
    assert torch_range() == "torch>=2.13,<2.14"
    for version, tested in (((2, 11), False), ((2, 12), False), ((2, 13), True), ((2, 14), False), ((3, 0), False)):
        monkeypatch.setattr(decision, "torch_version", lambda v=version: v)
        monkeypatch.setattr(decision, "_DEVICES", set())
        inductor_settings.post_grad_custom_post_pass = None
        on, line = decide(compiled_cfg(), CPU)
        assert on
        assert ("stepping aside (torch" in line) != tested, (version, line)
        assert (inductor_settings.post_grad_custom_post_pass is not None) == tested, version
        assert inductor_settings.cpp_wrapper == tested
    monkeypatch.setattr(decision, "torch_version", lambda: (2, 11))
    assert decision.cpu_tuning_blocker(CPU) == (f"torch {torch.__version__} is outside the range they were tested "
                                                "with, torch>=2.13,<2.14")


def test_pyproject_states_the_tested_torch_range():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"{torch_range()}"' in text


# ------------------------------------------------------------------ the probe


@pytest.fixture
def probe_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(probe, "seen", {})
    return tmp_path / probe.FILE


def test_a_probe_takes_the_faster_and_is_cached_per_machine(probe_cache, monkeypatch):
    made = []
    monkeypatch.setattr(probe, "measure", lambda kernel, aten: (kernel(), aten()))  # stand-in timer: given times

    def make(kernel_s, aten_s):
        def build():
            made.append(1)
            return (lambda: kernel_s), (lambda: aten_s)
        return build

    assert probe.pays("weight_grad", "[64, 76800]/[1, 64]", make(0.001, 0.01))  # 10x faster: taken
    assert not probe.pays("weight_grad", "[64, 9600]/[1, 64]", make(0.01, 0.001))  # slower: not taken
    assert not probe.pays("onednn_gemm", "[76800, 64]/[64, 1]", make(0.0095, 0.01))  # within the margin: not taken
    assert len(made) == 3
    stored = json.loads(probe_cache.read_text())[probe.machine_key()]
    assert stored["cpu"] == probe.cpu_model() and stored["torch"] == torch.__version__
    code = hashlib.sha256(b"").hexdigest()[:8]
    assert sorted(stored["probes"]) == sorted(f"{n} {s} threads={torch.get_num_threads()} code={code}" for n, s in (
        ("weight_grad", "[64, 76800]/[1, 64]"), ("weight_grad", "[64, 9600]/[1, 64]"),
        ("onednn_gemm", "[76800, 64]/[64, 1]")))
    # the same machine asks again: answered from the cache, nothing timed
    assert probe.pays("weight_grad", "[64, 76800]/[1, 64]", make(1.0, 0.0))
    assert len(made) == 3
    report = probe.report(["weight_grad", "onednn_gemm", "linear_act_norm"])
    assert report.startswith("weight_grad taken for 1 of 2 product shapes probed (")
    assert "onednn_gemm taken for 0 of 1 product shapes probed" in report and "linear_act_norm met no product" in report
    # a changed kernel is probed afresh, and so is another CPU (or torch)
    assert not probe.pays("weight_grad", "[64, 76800]/[1, 64]", make(0.01, 0.001), b"another kernel source")
    assert len(made) == 4
    monkeypatch.setattr(probe, "machine_key", lambda: "another-cpu")
    assert not probe.pays("weight_grad", "[64, 76800]/[1, 64]", make(0.01, 0.001))
    assert len(made) == 5


def test_the_probe_switch_takes_0_1_or_auto(monkeypatch):
    from hypermappo.errors import UserError

    for module, var in ((linear_act_norm, "HYPERMAPPO_LINEAR_ACT_NORM"), (weight_grad, "HYPERMAPPO_WEIGHT_GRAD"),
                        (onednn_gemm, "HYPERMAPPO_ONEDNN_GEMM")):
        monkeypatch.delenv(var, raising=False)
        assert probe.setting(var) == "auto"
        monkeypatch.setenv(var, "yes")
        with pytest.raises(UserError, match=f"{var}='yes': expected 0, 1 or auto"):
            module.enabled()
        monkeypatch.setenv(var, "0")
        assert not module.enabled()


def probed_graph(name: str) -> tuple[torch.fx.GraphModule, object]:
    """A post-grad graph with one product the pass `name`'s static rule admits, and the pass's rewrite counter."""
    relu, eps = act_norm.ACTS["relu"], 1e-5
    if name == "weight_grad":  # a linear layer's weight gradient, mm(x^T, g)
        gm = make_fx(lambda x, g: torch.mm(x.t(), g), tracing_mode="fake")(
            torch.randn(weight_grad.MIN_ROWS, 48), torch.randn(weight_grad.MIN_ROWS, 64))
        return gm, lambda: weight_grad.PASS.rewritten
    if name == "onednn_gemm":  # a large row-major product with a bias
        gm = make_fx(lambda b, x, w: torch.addmm(b, x, w), tracing_mode="fake")(
            torch.randn(64), torch.randn(onednn_gemm.MIN_ROWS, 8), torch.randn(8, 64))
        return gm, lambda: onednn_gemm.PASS.rewritten

    def block(x, w, b, gamma, beta, w2, g2):  # a 64-wide block, forward and backward (test_linear_act_norm.py)
        z = torch.addmm(b, x, w)
        h, mean, rstd = act_norm.act_norm_op(z, gamma, beta, relu, eps)
        return h, *act_norm.act_norm_backward_op(g2 @ w2, z, gamma, mean, rstd, relu)

    gm = make_fx(block, tracing_mode="fake")(torch.randn(300, 14), torch.randn(14, 64), torch.randn(64),
                                             torch.rand(64) + 0.5, torch.randn(64), torch.randn(9, 64),
                                             torch.randn(300, 9))
    return gm, lambda: sum(linear_act_norm.PASS.rewritten[k] for k in ("forward", "backward"))


@pytest.mark.parametrize("kernel_faster", [True, False])
@pytest.mark.parametrize("name", list(PROBED))
def test_a_probed_pass_rewrites_only_where_the_probe_finds_the_kernel_faster(probe_cache, monkeypatch, name,
                                                                            kernel_faster):
    """With the switch unset the probe decides (here a stand-in timer), with it set to 1 the static rule alone does;
    the probe runs the kernel and the ATen ops it would replace on real tensors of the graph's layout: same values."""
    monkeypatch.delenv(PROBED[name], raising=False)
    timed = []

    def fake_measure(candidate, reference):
        timed.append((candidate(), reference()))
        return (1.0, 2.0) if kernel_faster else (2.0, 1.0)

    monkeypatch.setattr(probe, "measure", fake_measure)
    directions = 2 if name == "linear_act_norm" else 1  # the fused block's forward and backward: probed apart
    module = {"linear_act_norm": linear_act_norm, "weight_grad": weight_grad, "onednn_gemm": onednn_gemm}[name]
    gm, rewritten = probed_graph(name)
    before = rewritten()
    module.PASS(gm.graph)
    assert rewritten() - before == directions * int(kernel_faster)
    assert len(timed) == directions
    for kernel_out, aten_out in timed:
        first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731 - h forward, dz backward
        torch.testing.assert_close(first(kernel_out), first(aten_out), rtol=1e-4, atol=1e-3)
    monkeypatch.setenv(PROBED[name], "1")
    gm, rewritten = probed_graph(name)
    before = rewritten()
    module.PASS(gm.graph)
    assert rewritten() - before == directions and len(timed) == directions  # switch 1: no probe


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_inside_a_compile_the_probe_times_real_tensors_and_its_answer_holds(probe_cache, monkeypatch):
    """In Inductor's post-grad pass (fake tensors about): the probe's operands are real, its record is stored, the
    graph takes the kernel where the record says so, and the compiled gradient is eager's."""
    import os

    monkeypatch.delenv("HYPERMAPPO_WEIGHT_GRAD", raising=False)
    monkeypatch.setattr(weight_grad, "MIN_ROWS", 256)
    monkeypatch.setattr(weight_grad.PASS, "uuid", lambda key=os.urandom(16): key)  # compile, do not load
    real = probe.measure
    monkeypatch.setattr(probe, "measure", lambda kernel, aten: (real(kernel, aten), (1.0, 2.0))[1])  # the kernel wins
    configure()
    torch._dynamo.reset()
    x, g = torch.randn(300, 48), torch.randn(300, 64)
    before = weight_grad.PASS.rewritten
    out = torch.compile(lambda x, g: torch.mm(x.t(), g) * 2, dynamic=False)(x, g)
    assert weight_grad.PASS.rewritten - before == 1
    torch.testing.assert_close(out, torch.mm(x.t(), g) * 2, rtol=1e-5, atol=1e-4)
    (key, record), = probe.seen["weight_grad"].items()
    assert record["taken"] and key.startswith("weight_grad [48, 300]/[1, 48] [300, 64]/[64, 1] threads=")


def test_probe_timing_is_interleaved_and_keeps_the_best(monkeypatch):
    order = []
    times = iter([5.0, 9.0, 1.0, 3.0, 4.0, 2.0, 6.0, 7.0, 8.0, 10.0])
    monkeypatch.setattr(probe, "REPEATS", 5)
    monkeypatch.setattr(probe, "_timed", lambda fn, ts: (fn(), ts.append(next(times))))
    assert probe.measure(lambda: order.append("k"), lambda: order.append("a")) == (1.0, 2.0)
    assert order == ["k", "a"] * 6  # a warm-up call each, then alternating
