"""A failure of the library's own code where the env is called (issue 40: a graph pass crashing while the collection
graph compiled was reported as "env 'mpe:simple_spread' raised InductorError") is reported as the library's; the
env's own exceptions stay the env's (tests/test_faults.py runs those end to end)."""

from __future__ import annotations

import pytest
import torch

from hypermappo.cli import main
from hypermappo.compile import cxx_compiler, pipeline, weight_grad
from hypermappo.envs.registry import make_env
from hypermappo.experiment import library_module


def raise_in(function):
    try:
        function()
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("did not raise")


def test_an_exception_from_env_code_is_the_envs():
    env = make_env("staghunt", 2)
    env.reset(seed=0)
    error = raise_in(lambda: env.step(torch.zeros(3, 7, dtype=torch.long)))  # wrong shape: raised inside envs/
    assert library_module(error) is None


def test_an_exception_from_library_code_is_the_librarys(monkeypatch):
    monkeypatch.setenv("HYPERMAPPO_WEIGHT_GRAD", "maybe")
    error = raise_in(weight_grad.enabled)  # raised in compile/probe.py
    assert library_module(error) == "hypermappo.compile.probe"


def test_a_compile_failure_is_the_librarys_even_inside_an_env():
    """An Inductor error (e.g. a graph pass raising) while compiling the env's own step core, called from the env's
    step in envs/, is the library's."""
    from torch._inductor.exc import InductorError

    def compile_fn(fn):
        def compiled(*args):
            raise InductorError(TypeError("'list' object is not callable"), "")
        return compiled

    env = make_env("mpe:simple_spread", 2)
    env.reset(seed=0)
    env.compile_step(compile_fn)
    error = raise_in(lambda: env.step(torch.zeros(2, env.spec.num_agents, dtype=torch.long)))
    assert type(error).__name__ == "InductorError"
    assert library_module(error) == "hypermappo.envs.mpe_torch"


@pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
def test_a_graph_pass_failure_is_one_line_naming_the_library_not_the_env(tmp_path, capsys, monkeypatch):
    """Issue 40's crash as a user saw it: a compiled run on MPE simple_spread whose graph pass raises at the first
    update (the collection graph, which holds the env's step core, compiles inside the env call) said "env
    'mpe:simple_spread' raised InductorError". Now: one line blaming the library, exit 1 (not 4: the env is fine)."""
    def broken(self, graph):
        raise TypeError("'list' object is not callable")

    monkeypatch.setattr(pipeline.GraphPasses, "__call__", broken)
    monkeypatch.setattr(pipeline.GraphPasses, "uuid", lambda self: b"not in the cache")  # compile, do not load
    code = main(["train", "mpe/simple_spread", "ppo.compile=on", "num_envs=4", "rollout_length=8",
                 "total_env_steps=32", "model.hidden_sizes=[16,16]", "log.tensorboard=false", "log.progress=false",
                 f"run_dir={tmp_path / 'r'}", "--quiet"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 1, err
    assert len(err) == 1, err
    assert err[0].startswith("hypermappo train: error: hypermappo internal error in hypermappo."), err[0]
    assert "TypeError: 'list' object is not callable" in err[0] and "env 'mpe:simple_spread'" not in err[0]
    assert "'list' object is not callable" in (tmp_path / "r" / "error.log").read_text()
