"""CUDA graphs of the compiled path (compile/cuda_graphs.py), tested on the CPU: the switch, the option every graph
gets, and the condition Inductor's CUDA graphs need: every tensor a compiled graph writes in place that it did not
make itself is static (a parameter, or marked with `torch._dynamo.mark_static_address`), else Inductor runs that
graph without a CUDA graph. The graphs are traced by Dynamo and run as traced (the compiled path's Python), and a
dispatch mode sees every in-place write."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from hypermappo import config as config_mod
from hypermappo.compile import cuda_graphs, decision
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.runtime import sync_free

TINY = ["num_envs=6", "rollout_length=50", "model.hidden_sizes=[16,16]", "eval_episodes=2", "log.tensorboard=false",
        "log.progress=false", "ppo.compile=on", "total_env_steps=600", "ppo.num_mini_batch=2", "ppo.ppo_epoch=2"]


def test_the_switch_is_off_by_default_on_only_for_cuda_and_checked(monkeypatch):
    monkeypatch.delenv(cuda_graphs.VAR, raising=False)
    assert cuda_graphs.decide(torch.device("cuda"))[0] is False  # auto: not yet measured with the marks
    assert cuda_graphs.decide(torch.device("cpu")) == (False, "CUDA graphs: no (device cpu)")
    monkeypatch.setenv(cuda_graphs.VAR, "1")
    on, note = cuda_graphs.decide(torch.device("cuda", 0))
    assert on and note.startswith("CUDA graphs: on")
    assert cuda_graphs.decide(torch.device("cpu"))[0] is False  # Inductor records CUDA graphs of CUDA graphs only
    monkeypatch.setenv(cuda_graphs.VAR, "0")
    assert cuda_graphs.decide(torch.device("cuda"))[0] is False
    monkeypatch.setenv(cuda_graphs.VAR, "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_CUDA_GRAPHS='yes': expected auto, 0 or 1"):
        cuda_graphs.decide(torch.device("cuda"))


def test_every_graph_gets_inductors_cuda_graphs_once_a_cuda_learner_asked(monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: seen.append(kw["options"]) or fn)
    monkeypatch.setattr(cuda_graphs, "_ON", set())
    monkeypatch.setenv(cuda_graphs.VAR, "1")
    decision.compile_fn(len)
    assert cuda_graphs.configure_for(torch.device("cpu")).startswith("CUDA graphs: no")
    decision.compile_fn(len, cpp_wrapper=False)
    cuda_graphs.configure_for(torch.device("cuda"))
    decision.compile_fn(len)
    decision.compile_fn(len, cpp_wrapper=False)
    assert seen == [None, {"cpp_wrapper": False}, {"triton.cudagraphs": True},
                    {"triton.cudagraphs": True, "cpp_wrapper": False}]


class InPlaceWrites(TorchDispatchMode):
    """Records the in-place writes of ops to tensors the recorded stretch did not make (its inputs)."""

    def __init__(self):
        super().__init__()
        self.recording, self.made, self.writes = False, set(), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.recording:
            schema = func._schema
            for i, a in enumerate(schema.arguments):
                value = args[i] if i < len(args) else kwargs.get(a.name)
                if a.alias_info is not None and a.alias_info.is_write and isinstance(value, torch.Tensor):
                    ptr = value.untyped_storage().data_ptr()
                    if ptr not in self.made:
                        self.writes.append((str(func), ptr, tuple(value.shape)))
        out = func(*args, **kwargs)
        if self.recording:
            self.made.update(t.untyped_storage().data_ptr() for t in tree_leaves(out) if isinstance(t, torch.Tensor))
        return out


def recorded(mode: InPlaceWrites, fn):
    def call(*args, **kwargs):
        mode.recording, mode.made = True, set()
        try:
            return fn(*args, **kwargs)
        finally:
            mode.recording = False
    return call


@pytest.mark.parametrize("preset", ["mpe/simple_spread"])
def test_every_tensor_a_graph_writes_in_place_is_static_with_cuda_graphs_on(tmp_path, monkeypatch, fresh_dynamo,
                                                                             preset):
    """Collection's step and chunk graphs and the update's mini-batch graph, with CUDA graphs on (forced on the CPU:
    only the marks are under test): each in-place write to a tensor the graph did not make goes to a parameter or a
    tensor marked static."""
    import sys

    monkeypatch.setenv(sync_free.VAR, "1")
    monkeypatch.setattr(cuda_graphs, "_ON", {"cpu"})
    mode, graphs = InPlaceWrites(), []

    def traced(fn, **_):  # every graph of the compiled path, traced by Dynamo, run as traced, its writes recorded
        graphs.append(fn.__name__)
        return recorded(mode, torch.compile(fn, backend="eager", dynamic=False))

    for name, module in list(sys.modules.items()):
        if name.startswith("hypermappo") and hasattr(module, "compile_fn"):
            monkeypatch.setattr(module, "compile_fn", traced)
    exp = Experiment(config_mod.build_config(preset, TINY), tmp_path / "r", quiet=True)
    L = exp.primary
    g = exp.collect_graph
    assert g is not None and L.compiled
    exp._start_episodes()
    with mode:
        for _ in range(2):
            exp.collect()
            L.algo.update(L.buffer, L.batch_generator)
    assert g.chunks_run > 0 and mode.writes
    # collection's step, chunk, policy and env-core graphs and the update's mini-batch graph were all recorded
    assert {"run", "policy_forward", "_advance"} <= set(graphs) and graphs.count("step") == 2, graphs
    static = {t.untyped_storage().data_ptr() for t in [*L.actor.parameters(), *L.critic.parameters()]}
    marked = [t for t in [*cuda_graphs.tensors_of(L.buffer), *cuda_graphs.tensors_of(exp.env)]
              + [v for opt in (L.algo.actor_opt, L.algo.critic_opt) for st in opt.state.values() for v in st.values()]
              if getattr(t, "_dynamo_static_input_type", None)]
    static |= {t.untyped_storage().data_ptr() for t in marked}
    unmarked = sorted({(op, shape) for op, ptr, shape in mode.writes if ptr not in static})
    assert unmarked == [], "\n".join(map(str, unmarked))
    exp.logger.close()
