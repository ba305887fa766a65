"""ppo.compile: which runs take the compiled path, that its hot functions trace without graph breaks, and that a
compiled run is the eager run (same seed: same samples, losses and weights to float tolerance) and resumes exactly.

The equality tests compile with Inductor (tens of seconds from a cold cache, a few from a warm one)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest
import torch

from hypermappo import config as config_mod
from hypermappo.cli import main
from hypermappo.compile import (
    AUTO_MIN_ENV_STEPS,
    COLD_MIN_ENV_STEPS,
    bias_epilogue,
    bool_masks,
    collect_step,
    compiled_shapes,
    cxx_compiler,
    decide,
    linear_act_norm,
    onednn_gemm,
    weight_grad,
)
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.errors import NonFiniteError, UserError
from hypermappo.experiment import Experiment
from hypermappo.kernels import act_norm
from hypermappo.storage.rollout import shuffled_minibatches

needs_cxx = pytest.mark.skipif(cxx_compiler() is None, reason="no C++ compiler for Inductor's CPU backend")
# Graph-set variants that each compile their own Inductor graphs from C++ (about a minute apiece on two cores, most of
# the suite's time): `make test` (and CI) runs them, `make test-fast` leaves them out and keeps the default actor's
# equality, resume, collection graph, non-finite step and graph-break checks. See docs/guides/workflow.md, "Test
# tiers", for how these tests keep their graphs few and small.
slow = pytest.mark.slow
compiles = pytest.mark.compiles  # scheduled first, heaviest (the argument) first: tests/conftest.py


def tiered(names, fast):
    """pytest params of `names`, those not in `fast` marked slow."""
    return [n if n in fast else pytest.param(n, marks=slow) for n in names]
CPU = torch.device("cpu")
TINY = ["num_envs=4", "rollout_length=10", "model.hidden_sizes=[16,16]", "eval_episodes=4", "log.tensorboard=false",
        "log.progress=false", "diagnostics.every=2", "diagnostics.audit_updates=1"]
LEAN_OBS = ["hyper.context=[obs]", "hyper.layers=last", "hyper.obs_embed_dim=16", "hyper.hidden=16", "hyper.rank=1"]
ACTORS = {  # the default actors of the compiled path
    "mlp": ["actor=mlp"],
    "hyper-id": ["actor=hyper", "hyper.context=[agent_id]", "hyper.hidden=16"],
    "hyper-obs-last": ["actor=hyper", *LEAN_OBS, "hyper.attention_kernel=auto"],
    "mlp-hyper-critic": ["actor=mlp", "critic.arch=hyper", "critic.hyper_hidden=16"],
}
ONE = ["ppo.num_mini_batch=1"]  # one mini-batch step per update graph: half the graph of two unrolled steps
# One hidden layer per network where a test is about something other than how hidden blocks chain (collection
# graphs, non-finite steps, unrolled steps, micro-batches, the hypernetwork's context): about a quarter less to compile
# than two. The variants that check the passes over hidden-to-hidden products keep two.
ONE_LAYER = ["model.hidden_sizes=[16]"]
# Variants compared with the eager run beyond the default actors, each with the graph passes it forces at every
# product their rules admit (not where a timed probe finds them faster: probe.py). Each compiles one mini-batch step
# per update graph (ONE), as the default actors do here, but for the micro-batch and uneven variants: graphs of
# several steps unrolled are compared with the eager loop by the unrolled-steps test below. Passes that rewrite
# different products are forced together in one variant (one graph set to compile, every count still checked).
EQUAL_TOO = {
    # JaxMARL's IPPO network (Tanh, no LayerNorm): every hidden product's bias added in its Tanh's kernel
    # (bias_epilogue.py); the compiled path decomposes tanh into exp (compile/decision.py): same values to rounding
    "mlp-tanh-no-norm": (["actor=mlp", "model.activation=tanh", "model.layer_norm=false", "model.feature_norm=false",
                          *ONE, *ONE_LAYER], {"bias-epilogue"}),
    # the hidden blocks' LayerNorm(act) C kernel (kernels/act_norm.py) inside the compiled graphs, against the eager
    # run's ATen composition (the kernel from any row count in the compiled run, from none in the eager one), and
    # every weight gradient through the C kernel (weight_grad.py; by default from 8,192 rows): not with oneDNN forced,
    # which would take those products first. With the Bayesian goal belief fed to the policy (one graph set less to
    # compile than a variant of its own): the belief's predictions, its Bayes update and the goal model's Adam steps
    # as graphs of their own (coplayer_step.py; full mini-batches of 8 from the first update on, the audit's update
    # eager) between the compiled policy steps and PPO updates, whose actor reads the observation widened by the
    # belief's features; gradients clipped at 0.1, so that every step's clipping scales them
    "mlp-tanh-act-norm-weight-grad-belief": (["actor=mlp", "model.activation=tanh", "coplayer.enabled=true",
                                             "coplayer.feed=policy", "coplayer.batch_size=8", "coplayer.steps=2",
                                             "ppo.max_grad_norm=0.1", *ONE],
                                             {"act-norm", "weight-grad"}),
    # Hyper-MAPPO's observation context (the attention and observation-context kernels) in micro-batch row blocks
    # (algos/micro_batch.py: a graph per block and one for clipping + Adam), with the LayerNorm(act) and
    # weight-gradient kernels in the block graph
    "hyper-obs-micro-act-norm-weight-grad": (["actor=hyper", *LEAN_OBS, "hyper.attention_kernel=auto",
                                             "ppo.micro_batch_size=16", *ONE_LAYER], {"act-norm", "weight-grad"}),
    # 64-wide ReLU blocks: their products fused with the LayerNorm(act) kernel (linear_act_norm.py), both directions,
    # in the MLP critic's blocks (addmm) and in Hyper-MAPPO's per-agent blocks (agent-id context: one product per
    # agent, bmm / baddbmm), the weight gradients the fused blocks leave through the weight-gradient kernel
    "hyper-id-linear-act-norm-weight-grad": (["actor=hyper", "hyper.context=[agent_id]", "hyper.hidden=16",
                                             "model.hidden_sizes=[64,64]", *ONE],
                                             {"linear-act-norm", "act-norm", "weight-grad"}),
}


@pytest.mark.parametrize("module, var, bad", [(bool_masks, "HYPERMAPPO_RECOMPUTE_MASKS", "on"),
                                              (bias_epilogue, "HYPERMAPPO_BIAS_EPILOGUE", "true"),
                                              (collect_step, "HYPERMAPPO_COLLECT_GRAPH", "no")])
def test_the_switch_takes_0_or_1_only(monkeypatch, module, var, bad):
    """Each graph pass's environment switch (compiled.switch): 0 turns it off, anything but 0 or 1 is an error (the
    probed passes' switches also take `auto`: tests/test_cpu_tuning.py)."""
    monkeypatch.setenv(var, "0")
    assert not module.enabled()
    monkeypatch.setenv(var, bad)
    with pytest.raises(UserError, match=f"{var}='{bad}': expected 0 or 1"):
        module.enabled()


def test_steps_per_graph_is_one_unless_the_environment_says_more(monkeypatch):
    """An epoch's 16 equal mini-batch steps: one per graph by default (4 took twice the cold compile:
    benchmarks/results/compile_cost_amd.md), HYPERMAPPO_STEPS_PER_GRAPH=N takes the largest divisor of 16 up to N;
    anything but 1..16 is an error that decide() raises before the run starts."""
    from hypermappo.algos import mappo

    batches = [{"active": torch.ones(6, 2)}] * 16
    monkeypatch.delenv("HYPERMAPPO_STEPS_PER_GRAPH", raising=False)
    assert mappo.steps_per_graph(batches, 2, 0) == 1
    for given, taken in (("4", 4), ("3", 2), ("16", 16)):
        monkeypatch.setenv("HYPERMAPPO_STEPS_PER_GRAPH", given)
        assert mappo.steps_per_graph(batches, 2, 0) == taken
    # steps of two sizes, or split into micro-batch blocks, stay one per graph whatever the setting
    assert mappo.steps_per_graph([*batches[:15], {"active": torch.ones(5, 2)}], 2, 0) == 1
    assert mappo.steps_per_graph(batches, 2, 4) == 1
    cfg = cfg_of("mpe/simple_spread", ["ppo.compile=on"])
    for bad in ("0", "17", "four", "-2"):
        monkeypatch.setenv("HYPERMAPPO_STEPS_PER_GRAPH", bad)
        with pytest.raises(UserError, match=f"HYPERMAPPO_STEPS_PER_GRAPH='{bad}': expected an integer from 1 to 16"):
            decide(cfg, torch.device("cpu"))


def cfg_of(preset: str, overrides: list[str]):
    given = {o.split("=", 1)[0] for o in overrides}  # a test's own setting replaces TINY's (e.g. hidden sizes)
    return config_mod.build_config(preset, [*(o for o in TINY if o.split("=", 1)[0] not in given), *overrides])


# ------------------------------------------------------------------ which runs compile


def test_auto_compiles_long_feed_forward_runs_only_and_says_why(tmp_path, monkeypatch):
    """auto: a learner whose graphs this cache holds (compiled_shapes.py) compiles from 1M env steps, one whose graphs
    would compile from an empty cache (minutes) from 10M."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # an empty cache: nothing compiled yet
    off, line = decide(cfg_of("staghunt/default", [f"total_env_steps={COLD_MIN_ENV_STEPS - 1}"]), CPU)
    assert not off and "this cache holds no graphs of this learner yet" in line
    assert f"paid back from ~10,000,000 env steps > {COLD_MIN_ENV_STEPS - 1:,}" in line
    on, line = decide(cfg_of("staghunt/default", [f"total_env_steps={COLD_MIN_ENV_STEPS}"]), CPU)
    assert on == (cxx_compiler() is not None)
    assert line.startswith("compile: on (auto: 10,000,000 env steps (no graphs of this shape in this cache")
    for overrides in ([], ["coplayer.enabled=true"]):  # the goal belief's learner too
        compiled_shapes.remember(cfg_of("staghunt/default", [*overrides, "seed=7", "total_env_steps=5000"]), CPU, 21.4)
    # another seed and length compile the same graphs: 1M is enough now
    on, line = decide(cfg_of("staghunt/default", [f"total_env_steps={AUTO_MIN_ENV_STEPS}"]), CPU)
    assert on == (cxx_compiler() is not None)
    assert line.startswith("compile: on (auto: 1,000,000 env steps, graphs of this shape compiled in this cache "
                           "before (21 s)")
    off, line = decide(cfg_of("staghunt/default", ["num_envs=32", f"total_env_steps={AUTO_MIN_ENV_STEPS}"]), CPU)
    assert not off and "this cache holds no graphs of this learner yet" in line  # another shape is not warm
    off, line = decide(cfg_of("staghunt/default", ["total_env_steps=999999"]), CPU)
    assert not off and "999,999 env steps < 1,000,000" in line
    off, line = decide(cfg_of("staghunt/default", ["actor=rnn", f"total_env_steps={AUTO_MIN_ENV_STEPS}"]), CPU)
    assert not off and line == "compile: off (auto: a recurrent actor (its GRU steps break the graph))"
    off, line = decide(cfg_of("staghunt/default", ["ppo.compile=off", "total_env_steps=10000000"]), CPU)
    assert not off and line == "compile: off (ppo.compile=off)"
    # the Bayesian goal belief runs eager beside the compiled policy step and update; the GRU model's loss is part of
    # the update
    on, line = decide(cfg_of("staghunt/default", ["coplayer.enabled=true", f"total_env_steps={AUTO_MIN_ENV_STEPS}"]),
                      CPU)
    assert on == (cxx_compiler() is not None) and line.startswith("compile: on (auto: 1,000,000 env steps")
    off, line = decide(cfg_of("staghunt/default", ["coplayer.enabled=true", "coplayer.model=gru",
                                                   f"total_env_steps={AUTO_MIN_ENV_STEPS}"]), CPU)
    assert not off and line.startswith("compile: off (auto: the co-player model (gru")
    # a damaged record (not JSON; an entry that is no record): nothing is known to be compiled
    cfg = cfg_of("staghunt/default", [f"total_env_steps={AUTO_MIN_ENV_STEPS}"])
    for text in ("{not json", json.dumps({compiled_shapes.shape_key(cfg, CPU): "compiled"})):
        compiled_shapes.cache_path().write_text(text)
        off, line = decide(cfg, CPU)
        assert not off and "this cache holds no graphs of this learner yet" in line


@pytest.mark.parametrize("overrides, reason", [
    (["actor=rnn"], "a recurrent actor"),
    (["actor=hyper", "hyper.context=[obs]", "hyper.output=accumulate", "ppo.data_chunk_length=5"],
     "hyper.output=accumulate"),
    (["coplayer.enabled=true", "coplayer.model=gru"], r"the co-player model \(gru: its loss is part of the policy's"),
])
def test_compile_on_that_cannot_be_honoured_is_a_one_line_error(overrides, reason):
    with pytest.raises(UserError, match=rf"ppo.compile: 'on' cannot be honoured: {reason}.*use ppo.compile=auto"):
        decide(cfg_of("staghunt/default", ["ppo.compile=on", *overrides]), CPU)


def test_compile_on_with_maddpg_is_a_one_line_error():
    with pytest.raises(UserError, match=r"ppo.compile='on' has no effect: algo=maddpg"):
        config_mod.build_config(None, ["env=mpe:simple_spread", "algo=maddpg", "ppo.compile=on"])


def test_compile_value_is_checked():
    with pytest.raises(UserError, match="ppo.compile"):
        config_mod.build_config("staghunt/default", ["ppo.compile=yes"])


# ------------------------------------------------------------------ no graph breaks on the hot path


@pytest.mark.parametrize("actor", list(ACTORS))  # Dynamo tracing only: seconds apiece
def test_policy_step_and_loss_trace_without_graph_breaks(tmp_path, actor):
    """What torch.compile captures per collection step and per mini-batch is one graph each (explain traces with
    Dynamo only; nothing is compiled). The Adam step: one graph per optimiser, between the two graph breaks that
    torch.optim's step wrapper inserts on purpose around its no-grad region."""
    env = "mpe/simple_spread" if actor.startswith("mlp") else "staghunt/default"
    exp = Experiment(cfg_of(env, ["ppo.compile=on", "total_env_steps=80", *ACTORS[actor], *ONE_LAYER]), tmp_path / "r",
                     quiet=True)
    L = exp.primary
    assert L.compiled
    exp._start_episodes()
    s = exp.last
    policy = torch._dynamo.explain(L.policy_forward)(s.obs, s.available_actions, None, None, s.active, s.obs,
                                                     s.state, None)
    assert (policy.graph_count, policy.graph_break_count) == (1, 0), policy.break_reasons
    with torch.compiler.set_stance("force_eager"):  # a rollout to take mini-batches from, compiling nothing
        exp.collect()
    batch = next(iter(L.buffer.minibatches(1, L.batch_generator, "samples")))
    loss = torch._dynamo.explain(L.algo.loss)(batch, torch.zeros(()), torch.ones(()))
    assert (loss.graph_count, loss.graph_break_count) == (1, 0), loss.break_reasons
    actor_loss, value_loss, _ = L.algo.loss(batch, torch.zeros(()), torch.ones(()))
    (actor_loss + value_loss).backward()
    clip = torch._dynamo.explain(L.algo.clip_gradients)()
    assert (clip.graph_count, clip.graph_break_count) == (1, 0), clip.break_reasons
    L.algo.optimizer_step()  # Adam's state exists from here on, as in every update after the first
    step = torch._dynamo.explain(L.algo.optimizer_step)()
    assert step.graph_count == 2, step.break_reasons
    if L.algo.fused is not None:  # the whole mini-batch step (loss, gradients, clipping, Adam): one graph
        batch = shuffled_minibatches(L.buffer.flat_fields(), L.buffer.minibatch_indices(2, L.batch_generator))[0]
        args = (batch, torch.zeros(()), torch.ones(()), torch.tensor([1e-3] * 4), torch.ones((), dtype=torch.bool))
        L.algo.fused.prepare(*args[:3])
        fused = torch._dynamo.explain(L.algo.fused.step)(*args)
        assert (fused.graph_count, fused.graph_break_count) == (1, 0), fused.break_reasons
    else:
        raise AssertionError("a feed-forward actor's mini-batch step is one graph")
    if actor == "hyper-obs-last":  # the fused C kernels are ops inside the graph (in their autograd.Function), not breaks
        assert exp.summary_extra.get("attention_kernel") == "fused"
        assert exp.summary_extra.get("obs_context_kernel") == "fused"  # the whole context chain, attention included
        for traced in (policy, loss):
            targets = {node.target for g in traced.graphs for m in g.modules() if isinstance(m, torch.fx.GraphModule)
                       for node in m.graph.nodes}
            assert torch.ops.hypermappo.obs_context.default in targets
    exp.logger.close()


def test_fused_attention_custom_op_is_registered_correctly():
    """torch.library.opcheck: the fake (shape-only) implementation and the schema agree with the real kernel, as
    torch.compile needs them to (alive mask given and not); the gradient through its autograd.Function is right
    (gradcheck), torch.func takes it (the one-graph compiled step), and the op refuses any other differentiation."""
    from hypermappo.models.agent_attention import dense_attention, fused_attention, fused_attention_op, fused_library

    if isinstance(fused_library(3, 8, 2), str):
        pytest.skip(f"the C kernel cannot be built: {fused_library(3, 8, 2)}")
    g = torch.Generator().manual_seed(0)
    for alive in (None, torch.rand(5, 3, generator=g) > 0.3):
        qkv = torch.randn(5, 3, 24, generator=g)
        torch.library.opcheck(fused_attention_op, (qkv, alive, 2),
                              test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
        q64 = qkv.double().requires_grad_()
        assert torch.autograd.gradcheck(lambda q, alive=alive: fused_attention(q, 2, alive), (q64,))
        w = torch.randn(24, 24, dtype=torch.float64, generator=g)
        x = q64.detach()
        by_func = torch.func.grad(lambda w, x=x, alive=alive: fused_attention(x @ w, 2, alive).square().sum())(w)
        dense = torch.func.grad(lambda w, x=x, alive=alive: dense_attention(x @ w, 2, alive).square().sum())(w)
        torch.testing.assert_close(by_func, dense)
    with pytest.raises(RuntimeError, match="differentiated only through its autograd.Function"):
        fused_attention_op(torch.randn(5, 3, 24, requires_grad=True), None, 2)


def test_simple_spread_step_core_traces_as_one_graph():
    from hypermappo.envs.registry import make_env

    env = make_env("mpe:simple_spread", 4, "cpu")
    env.reset(seed=0)
    core = torch._dynamo.explain(env._advance)(torch.zeros(4, 3, dtype=torch.long))
    assert (core.graph_count, core.graph_break_count) == (1, 0), core.break_reasons


@needs_cxx
def test_compiled_simple_spread_steps_as_the_eager_env():
    """60 steps (two auto-resets) of random actions: the same observations, rewards, ends and returns."""
    from hypermappo.compile import compile_fn, configure
    from hypermappo.envs.registry import make_env

    configure()
    eager, compiled = make_env("mpe:simple_spread", 8, "cpu"), make_env("mpe:simple_spread", 8, "cpu")
    compiled.compile_step(compile_fn)
    a, b = eager.reset(seed=3), compiled.reset(seed=3)
    g = torch.Generator().manual_seed(0)
    resets = 0
    for t in range(60):
        actions = torch.randint(0, 5, (8, 3), generator=g)
        a, b = eager.step(actions), compiled.step(actions)
        for name in ("obs", "reward", "final_obs", "episode_return"):
            torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-5, atol=1e-5, msg=f"{name} t={t}")
        assert torch.equal(b.truncated, a.truncated) and torch.equal(b.done, a.done)
        resets += int(a.truncated.sum())
    assert resets == 16  # every env reset at steps 25 and 50


# ------------------------------------------------------------------ same maths, exact resume


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if not k.endswith(("_s", "sps"))} for r in csv.DictReader(f)]


@needs_cxx
@compiles(2)
@pytest.mark.parametrize("actor", tiered(["mlp", *EQUAL_TOO], {"mlp"}))
def test_compiled_run_equals_the_eager_run(tmp_path, monkeypatch, actor):
    """Same seed, 4 updates (of one mini-batch step each; three uneven ones for the MLP, two for the micro-batch
    variants): the sampled episodes, every logged loss and statistic, the evaluation and the final weights agree to
    float tolerance (fusion reorders float sums)."""
    # the rewrites at every product their rules admit, not where a timed probe finds them faster (probe.py)
    for var in ("HYPERMAPPO_ONEDNN_GEMM", "HYPERMAPPO_WEIGHT_GRAD", "HYPERMAPPO_LINEAR_ACT_NORM"):
        monkeypatch.setenv(var, "1")
    # the default MLP with mini-batches of 14, 13 and 13 rows: a graph per shape, and the update's guard skipping
    # must not run one shape's graph on another; every row-major product through oneDNN (onednn_gemm.py; by default
    # only those of >= 32,768 rows); and a decaying learning rate, which enters the compiled mini-batch step as a
    # tensor: it must not be baked into the graph. (Its graphs without forced passes: the collection test's.)
    overrides, forced = [*ACTORS.get(actor, []), *ONE, *ONE_LAYER], set()
    if actor == "mlp":
        overrides, forced = ["actor=mlp", "ppo.num_mini_batch=3", "ppo.lr_decay=true", *ONE_LAYER], {"onednn"}
    if actor in EQUAL_TOO:
        overrides, forced = EQUAL_TOO[actor]
    # a pass whose rewrites are counted needs a key no cached graph has (a graph from the cache would skip it)
    if "onednn" in forced:
        monkeypatch.setattr(onednn_gemm, "MIN_ROWS", 1)
        monkeypatch.setattr(onednn_gemm.PASS, "uuid", lambda key=os.urandom(16): key)
    if "weight-grad" in forced:
        monkeypatch.setattr(weight_grad, "MIN_ROWS", 1)
        monkeypatch.setattr(weight_grad, "MIN_WIDTH", 1)
        monkeypatch.setattr(weight_grad.PASS, "uuid", lambda key=os.urandom(16): key)
    if "linear-act-norm" in forced:
        monkeypatch.setattr(linear_act_norm.PASS, "uuid", lambda key=os.urandom(16): key)
    if "bias-epilogue" in forced:
        monkeypatch.setattr(bias_epilogue.PASS, "uuid", lambda key=os.urandom(16): key)
    steps = next((int(o.split("=")[1]) for o in overrides if o.startswith("ppo.num_mini_batch=")), 2)  # per graph
    rewritten, rewritten_wg = onednn_gemm.PASS.rewritten, weight_grad.PASS.rewritten
    rewritten_be = bias_epilogue.PASS.rewritten
    rewritten_lan = dict(linear_act_norm.PASS.rewritten)
    runs, graphs, kernel_calls = {}, {}, {}
    for mode in ("off", "on"):
        if "act-norm" in forced:
            monkeypatch.setattr(act_norm, "MIN_ROWS", 1 if mode == "on" else 10 ** 12)
        before_calls = dict(act_norm.calls)
        torch._dynamo.reset()  # graphs of earlier tests in this process may fit these shapes: count this run's own
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        mini_batches = [] if any(o.startswith("ppo.num_mini_batch=") for o in overrides) else ["ppo.num_mini_batch=2"]
        cfg = cfg_of("staghunt/default", [f"ppo.compile={mode}", "total_env_steps=160", *mini_batches,
                                          "checkpoint_interval=2", *overrides])
        shapes = tmp_path / f"shapes_{mode}"  # the record of compiled shapes (compiled_shapes.py) in a folder of its own
        monkeypatch.setattr(compiled_shapes, "cache_path", lambda shapes=shapes: shapes / compiled_shapes.FILE)
        exp = Experiment(cfg, tmp_path / mode, quiet=True)
        assert exp.primary.compiled == (mode == "on")
        summary = exp.run()
        graphs[mode] = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
        # a compiled run records its learner's shape with the compile time it measured; an eager one records nothing
        record = compiled_shapes.recorded(cfg, CPU)
        assert (record is not None) == (mode == "on")
        assert record is None or record["compile_s"] == pytest.approx(summary["compile_s"], abs=0.06)
        kernel_calls[mode] = {k: v - before_calls.get(k, 0) for k, v in act_norm.calls.items()}
        if actor.endswith("belief"):  # the goal model's Adam steps: one graph each but in the audit's update (eager)
            fused = exp.primary.coplayer.fused
            assert (fused.steps_run if fused else 0) == {"off": 0, "on": 3 * 2}[mode]
            assert summary.get("coplayer_graphs") == {"off": None, "on": (
                "co-player model: the belief's predictions, its Bayes update and the goal model's Adam steps as "
                "graphs")}[mode]
        runs[mode] = (rows(tmp_path / mode), summary,
                      torch.load(tmp_path / mode / "checkpoints" / "ckpt_0000004.pt", weights_only=False))
    (eager_rows, eager_summary, eager_ckpt), (comp_rows, comp_summary, comp_ckpt) = runs["off"], runs["on"]
    assert len(eager_rows) == len(comp_rows) == 4
    # compiled: the policy step and the whole mini-batch step (loss, gradients, clipping, Adam), also with the
    # fused attention kernel; with micro-batch blocks or uneven mini-batches one more graph; with the goal belief
    # three more (its predictions, its Bayes update, the goal model's Adam step); eager: none
    assert graphs == {"off": 0, "on": {"hyper-obs-micro-act-norm-weight-grad": 3, "mlp": 3,
                                       "mlp-tanh-act-norm-weight-grad-belief": 5}.get(actor, 2)}, graphs
    for e, c in zip(eager_rows, comp_rows):
        assert e.keys() == c.keys()
        for k in e:
            if e[k] in ("", "nan") or c[k] in ("", "nan"):
                assert e[k] == c[k], k
                continue
            assert float(c[k]) == pytest.approx(float(e[k]), rel=1e-3, abs=1e-4), (k, e["update"])
    assert comp_summary["eval_return_mean"] == pytest.approx(eager_summary["eval_return_mean"], abs=1e-4)
    for name, w in eager_ckpt["actor"].items():
        torch.testing.assert_close(comp_ckpt["actor"][name], w, rtol=1e-4, atol=1e-5, msg=name)
    if actor.endswith("belief"):  # the goal model's weights and the belief's state (mid-episode) too
        for name, w in eager_ckpt["coplayer"]["model"].items():
            torch.testing.assert_close(comp_ckpt["coplayer"]["model"][name], w, rtol=1e-4, atol=1e-5, msg=name)
        for name, w in eager_ckpt["coplayer"]["belief"].items():
            torch.testing.assert_close(comp_ckpt["coplayer"]["belief"][name], w, rtol=1e-4, atol=1e-4, msg=name)
        # and a compiled belief run resumes exactly (its graphs' state: belief, correction weights, Adam moments;
        # with any number of threads: test_the_goal_models_compiled_gradient_is_the_same_sum_whatever_the_threads)
        from test_resume import resumed_from_update_2_matches

        resumed_from_update_2_matches(cfg, tmp_path / "on", tmp_path / "resumed")
    assert "compile_s" in comp_summary and comp_summary["compile_s"] >= 0
    assert comp_summary["compile"].startswith("compile: on (ppo.compile=on")
    assert "compile_s" not in eager_summary
    assert comp_summary["weight_grad"] == weight_grad.status() and "weight_grad" not in eager_summary
    if "onednn" in forced:
        # every row-major product of the graphs (one hidden layer per network): collection's 4 forwards (hidden
        # layer and head of the actor and of the critic), and in each update graph those 4 and the heads' 2 input
        # gradients (none for the hidden layers, the first ones: the input LayerNorm is folded into them,
        # agent_layers.fold_norm)
        assert onednn_gemm.PASS.rewritten - rewritten == 4 + 2 * 6  # two update graphs: 14 and 13 rows
    if "weight-grad" in forced:  # every weight gradient the rule admits at this test's MIN_ROWS = MIN_WIDTH = 1, in
        # the update's one graph with gradients (mlp: 6; hyper-id: 11, its 64-wide blocks fused with their LayerNorm;
        # hyper-obs, one hidden layer per network: 5 in the micro-batch block graph, compiled once for its blocks of
        # one size, the context chain's 5 weight gradients taken inside the observation-context kernel, obs_context.c;
        # the belief: the policy's 6 and the goal model's Adam step's 4, its layers at the 64-unit default within the
        # kernel's MAX_WIDTH = 64)
        taken = weight_grad.PASS.rewritten - rewritten_wg
        assert taken == {"mlp-tanh-act-norm-weight-grad-belief": 6 + 4, "hyper-id-linear-act-norm-weight-grad": 11,
                         "hyper-obs-micro-act-norm-weight-grad": 5}[actor], taken
    if "bias-epilogue" in forced:
        # collection: the 2 hidden products (into Tanh; one hidden layer per network); in each of the update's
        # unrolled steps those 2 and the value head's (into the value loss); the policy heads feed log-softmax, a
        # reduction, and stay addmm
        assert bias_epilogue.PASS.rewritten - rewritten_be == 2 + steps * 3
    if actor.endswith("micro"):  # 20 rows x 2 agents per mini-batch: 4 blocks of 5 rows
        assert comp_summary["micro_batch"] == eager_summary["micro_batch"] == (
            "micro-batches: each mini-batch of 40 agent samples in 4 row blocks of <= 10 (ppo.micro_batch_size=16), "
            "gradients accumulated")
    if "act-norm" in forced:  # forward in collection and the update, backward in the update: compiled run only
        assert not any(kernel_calls["off"].values()) and kernel_calls["on"]["backward"] > 0, kernel_calls
        assert kernel_calls["on"]["forward"] > kernel_calls["on"]["backward"], kernel_calls
    fused = {k: v - rewritten_lan[k] for k, v in linear_act_norm.PASS.rewritten.items()}
    if "linear-act-norm" in forced:  # collection's 4 blocks forward; 4 forward and 4 backward (+ bias) in each of
        # the update graph's unrolled mini-batch steps (hyper-id: the actor's 2 of each per agent)
        assert fused == {"forward": 4 + steps * 4, "backward": steps * 4, "bias": steps * 4}, fused
        assert comp_summary["linear_act_norm"] == linear_act_norm.status() and "linear_act_norm" not in eager_summary
    elif "act-norm" in forced:  # 16-wide blocks or Tanh: the separate kernels
        assert fused == {"forward": 0, "backward": 0, "bias": 0}, fused
    if actor.startswith("hyper-obs"):  # the C attention kernel ran inside the compiled graphs
        assert comp_summary["attention_kernel"] == eager_summary["attention_kernel"] == "fused"
    # (a compiled run's exact resume, its update graph with a decaying learning rate included: the collection-graph
    # test below, whose compiled run compiles the mini-batch step too)


# Hyper-MAPPO's observation context with the smoothness term, whose previous observation is a buffer row the graph
# writes too: the graph holds every row an MLP's would and more (one variant: each compiles minutes of graphs on two
# cores). Chunks of 2 steps (the run's 8: a graph four times the size, the same code); the previous observation of a
# chunk's 2nd step is a row the chunk itself wrote.
COLLECT_ACTORS = {"hyper-obs-smooth": (["actor=hyper", *LEAN_OBS, "hyper.attention_kernel=auto", "hyper.alpha=0.1"], 2)}


@needs_cxx
@compiles(3)
@pytest.mark.parametrize("actor", list(COLLECT_ACTORS))
def test_collection_graph_run_equals_the_eager_run(tmp_path, monkeypatch, actor):
    """MPE simple_spread, whose step splits into a core and an eager rest (collect_step.py): collection as one graph
    per step, and runs of 2 steps (a run's default is 8) in which no episode ends as one graph call, give the eager
    run's rollout buffer (every row the graphs write and those written after the env step), logged statistics and
    weights. Rollouts of 34 steps cross the 25-step time limit: auto-resets and the truncation bootstrap run between
    graph steps, and episodes start mid-rollout, so chunks start at other steps than 0. The compiled run then resumes
    exactly from its checkpoint of update 2, whose last step a single-step call made after the rollout's chunks (its
    graphs: from the cache)."""
    overrides, chunk = COLLECT_ACTORS[actor]
    monkeypatch.setattr(collect_step, "CHUNK", chunk)
    runs = {}
    for mode in ("off", "on"):
        torch._dynamo.reset()
        before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
        tiny = [o for o in TINY if not o.startswith(("rollout_length=", "model.hidden_sizes="))]
        cfg = config_mod.build_config("mpe/simple_spread", [
            *tiny, f"ppo.compile={mode}", "rollout_length=34", "total_env_steps=544", "ppo.num_mini_batch=1",
            "ppo.lr_decay=true", "checkpoint_interval=2", *ONE_LAYER, *overrides])
        exp = Experiment(cfg, tmp_path / mode, quiet=True)
        assert (exp.collect_graph is not None) == (mode == "on")
        summary = exp.run()
        graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"] - before
        chunks = exp.collect_graph.chunks_run if exp.collect_graph is not None else 0
        buf = exp.primary.buffer
        rows_of_buffer = {k: v.clone() for k, v in vars(buf).items() if isinstance(v, torch.Tensor)}
        runs[mode] = (rows(tmp_path / mode), summary, rows_of_buffer, graphs, chunks,
                      torch.load(tmp_path / mode / "checkpoints" / "ckpt_0000004.pt", weights_only=False))
    (e_rows, e_sum, e_buf, e_graphs, _, e_ckpt), (c_rows, c_sum, c_buf, c_graphs, chunks, c_ckpt) = \
        runs["off"], runs["on"]
    assert (e_graphs, c_graphs) == (0, 3)  # the collection step, its chunk of steps and the mini-batch step
    # 4 rollouts of 34 steps from episode step 0, 9, 18, 2: 64 runs of 2 without an end, among them ones
    # right after an episode's end (its reset mask set), ones over rows an earlier rollout ended at, and chances with
    # fewer steps than a chunk left before an end or before the rollout's (single steps there)
    assert chunks == 64
    assert c_sum["collect"] == ("collection: one graph per step (policy forward, sampling, buffer writes, env step "
                                f"core); {chunk} steps per call where no episode can end") and "collect" not in e_sum
    assert e_buf.keys() == c_buf.keys() and {"obs", "actions", "logp", "rewards", "dones", "reset"} <= e_buf.keys()
    assert "prev_obs" in e_buf
    assert bool(e_buf["dones"].any()) and bool(e_buf["reset"][1:].any())  # episodes ended inside the rollout
    for name, value in e_buf.items():
        if value.dtype.is_floating_point:  # sums (returns, advantages) carry rounding of the field's scale
            scale = max(1.0, float(value.abs().max()))
            torch.testing.assert_close(c_buf[name], value, rtol=1e-4, atol=1e-5 * scale, msg=name)
        else:
            assert torch.equal(c_buf[name], value), name
    assert len(e_rows) == len(c_rows) == 4
    for e, c in zip(e_rows, c_rows):
        for k in e:
            if e[k] in ("", "nan") or c[k] in ("", "nan"):
                assert e[k] == c[k], k
                continue
            assert float(c[k]) == pytest.approx(float(e[k]), rel=1e-3, abs=1e-4), (k, e["update"])
    for name, w in e_ckpt["actor"].items():
        torch.testing.assert_close(c_ckpt["actor"][name], w, rtol=1e-4, atol=1e-5, msg=name)
    from test_resume import resumed_from_update_2_matches

    resumed_from_update_2_matches(cfg, tmp_path / "on", tmp_path / "resumed")


def nan_reward_at_step_11(monkeypatch) -> None:
    """simple_spread's reward of env 1 at its 11th episode step made NaN (in the step's branch-free core, so also
    inside the compiled graphs)."""
    advance = SimpleSpreadVecEnv._advance

    def nan_at_step_11(self, actions):
        final_obs, reward, truncated, ep_return, ep_length = advance(self, actions)
        reward = torch.where((self.t == 11).unsqueeze(1) & (torch.arange(self.num_envs) == 1).unsqueeze(1),
                             float("nan"), reward)
        return final_obs, reward, truncated, ep_return, ep_length

    monkeypatch.setattr(SimpleSpreadVecEnv, "_advance", nan_at_step_11)


@needs_cxx
@slow
@compiles(1)
def test_nonfinite_reward_inside_a_chunk_names_its_own_step(tmp_path, monkeypatch):
    """A NaN reward at episode step 11 (rollout step 11: the 2nd step of the chunk of steps 10-12; chunks of 3 here,
    a smaller graph to compile than the run's 8, and one hidden layer) stops the run with the message the
    one-step-per-call path gives for it."""
    monkeypatch.setattr(collect_step, "CHUNK", 3)
    nan_reward_at_step_11(monkeypatch)
    messages = {}
    for chunks in ("1", "0"):
        monkeypatch.setenv("HYPERMAPPO_COLLECT_CHUNK", chunks)
        torch._dynamo.reset()
        exp = Experiment(cfg_of("mpe/simple_spread", ["ppo.compile=on", "rollout_length=30", "total_env_steps=360",
                                                      *ONE_LAYER]), tmp_path / chunks, quiet=True)
        with pytest.raises(NonFiniteError) as error:
            exp.run()
        messages[chunks] = str(error.value).replace(str(tmp_path / chunks), "RUN_DIR")
        assert (exp.collect_graph.chunks_run > 0) == (chunks == "1")
    assert messages["1"] == messages["0"]
    assert "non-finite reward (nan) from env 'mpe:simple_spread' at update 1, rollout step 11" in messages["1"]
    assert "env 1, agent slot 0" in messages["1"]


def test_collection_graph_says_why_not(tmp_path, monkeypatch):
    """The run header's collection line: an env without a step core, or the switch off, keeps the two-call path."""
    cases = {"staghunt/default": "StagHuntVecEnv has no branch-free step core (VecEnv.step_parts)",
             "mpe/simple_spread": "HYPERMAPPO_COLLECT_GRAPH=0"}
    for preset, reason in cases.items():
        if preset.startswith("mpe"):
            monkeypatch.setenv("HYPERMAPPO_COLLECT_GRAPH", "0")
        exp = Experiment(cfg_of(preset, ["ppo.compile=on", "total_env_steps=40"]), tmp_path / preset, quiet=True)
        assert exp.collect_graph is None
        assert exp.summary_extra["collect"] == f"collection: policy and env step as separate calls ({reason})"
    monkeypatch.delenv("HYPERMAPPO_COLLECT_GRAPH")
    monkeypatch.setenv("HYPERMAPPO_COLLECT_CHUNK", "0")  # one graph per step, one step per call
    exp = Experiment(cfg_of("mpe/simple_spread", ["ppo.compile=on", "total_env_steps=40"]), tmp_path / "c", quiet=True)
    assert exp.collect_graph is not None and exp.collect_graph.chunked is None
    assert exp.summary_extra["collect"].endswith("; one step per call (HYPERMAPPO_COLLECT_CHUNK=0)")
    monkeypatch.setenv("HYPERMAPPO_COLLECT_CHUNK", "yes")
    with pytest.raises(UserError, match="HYPERMAPPO_COLLECT_CHUNK='yes': expected 0 or 1"):
        Experiment(cfg_of("mpe/simple_spread", ["ppo.compile=on", "total_env_steps=40"]), tmp_path / "y", quiet=True)
    monkeypatch.delenv("HYPERMAPPO_COLLECT_CHUNK")
    groups = Experiment(cfg_of("staghunt/default", ["ppo.compile=on", "groups=[{name: h0, agents: [0]}, {name: h1, "
                                                    "agents: [1]}]"]), tmp_path / "g", quiet=True)
    assert collect_step.blocker(groups.groups, groups.env) == "more than one policy group, or a group that does not learn"
    switching = Experiment(cfg_of("mpe/simple_spread", [
        "ppo.compile=on", "groups=[{name: a, agents: [0, 1, 2], switch: [{at_step: 80, kind: scripted, policy: random}]}]"]),
        tmp_path / "s", quiet=True)
    assert switching.collect_graph is None and switching.summary_extra["collect"].endswith(
        "(the group switches kind during the run (it would stop learning or start acting otherwise))")


CLIPPED = ["ppo.max_grad_norm=0.001", "ppo.ppo_epoch=1", "ppo.num_mini_batch=1"]  # one Adam step, clipped


def assert_clipped_and_stepped(L, before: dict, metrics: dict) -> None:
    """After one update of one mini-batch step (CLIPPED): pre-clip norms reported, both networks' gradients clipped
    to ppo.max_grad_norm, both networks moved by the step. `before`: each network's parameters before it.

    Read from Adam's state: after its first step exp_avg = (1 - beta1) * the gradient it was given, so the norm
    of a network's exp_avg / (1 - beta1) is the norm of its clipped gradient."""
    nets = {"actor": (L.actor, L.algo.actor_opt), "critic": (L.critic, L.algo.critic_opt)}
    for n, (module, opt) in nets.items():
        beta1 = opt.param_groups[0]["betas"][0]
        given = [opt.state[p]["exp_avg"] / (1 - beta1) for p in module.parameters() if p in opt.state]
        assert given and all(float(opt.state[p]["step"]) == 1 for p in module.parameters() if p in opt.state), n
        assert metrics[f"grad_norm_{n}"] > 0.01, n  # the pre-clip norm, well above the limit
        clipped = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in given]))
        assert float(clipped) == pytest.approx(0.001, rel=1e-3), n  # clipped to it
        moved = [not torch.equal(a, b) for a, b in zip(before[n], (p.detach() for p in module.parameters()))]
        assert any(moved), f"{n} not stepped"


def test_update_clips_each_network_and_steps_both(tmp_path):
    """The eager update's clipping and optimiser step (assert_clipped_and_stepped; the compiled one-graph step's: in
    the non-finite loss test below, which compiles that graph anyway)."""
    exp = Experiment(cfg_of("staghunt/default", ["ppo.compile=off", "total_env_steps=40", *CLIPPED]), tmp_path / "r",
                     quiet=True)
    L = exp.primary
    assert L.algo.fused is None
    exp._start_episodes()
    exp.collect()
    before = {n: [p.detach().clone() for p in m.parameters()] for n, m in (("actor", L.actor), ("critic", L.critic))}
    assert_clipped_and_stepped(L, before, L.algo.update(L.buffer, L.batch_generator))
    exp.logger.close()


@needs_cxx
@compiles(1)
def test_compiled_step_with_a_nonfinite_loss_moves_no_weight_and_no_optimiser_state(tmp_path):
    """The one-graph mini-batch step applies Adam inside the graph: a non-finite loss must leave every weight and
    every moment / step count as it was (the eager path raises before its step), and the update raises. And as
    torch.optim skips a parameter without a gradient (no state, no move), the one-graph step does too, not treat it
    as a zero gradient (Adam would then move it by its old momentum and count its steps). Its first update clips each
    network's gradients and steps both, as the eager update does (assert_clipped_and_stepped)."""
    exp = Experiment(cfg_of("staghunt/default", ["ppo.compile=on", "total_env_steps=80", *CLIPPED, *ONE_LAYER]),
                     tmp_path / "r", quiet=True)
    L = exp.primary
    assert L.algo.fused is not None
    unused = torch.nn.Parameter(torch.ones(3))
    L.algo.actor_opt.param_groups[0]["params"].append(unused)
    exp._start_episodes()
    exp.collect()
    before = {n: [p.detach().clone() for p in m.parameters()] for n, m in (("actor", L.actor), ("critic", L.critic))}
    metrics = L.algo.update(L.buffer, L.batch_generator)  # a clean update first: Adam's state exists, non-zero
    assert_clipped_and_stepped(L, before, metrics)
    assert unused not in L.algo.actor_opt.state and torch.equal(unused.detach(), torch.ones(3))
    exp.collect()
    L.buffer.returns[3, 1, 0] = float("nan")  # one target: the value loss of the first mini-batch step is NaN
    weights = {k: v.clone() for k, v in [*L.actor.state_dict().items(), *L.critic.state_dict().items()]}
    moments = [{k: v.clone() for k, v in st.items()} for opt in (L.algo.actor_opt, L.algo.critic_opt)
               for st in opt.state.values()]
    with pytest.raises(NonFiniteError, match=r"non-finite value_loss \(nan\) in PPO epoch 1, mini-batch 1"):
        L.algo.update(L.buffer, L.batch_generator)
    now = {**L.actor.state_dict(), **L.critic.state_dict()}
    for k, v in weights.items():
        assert torch.equal(now[k], v), k
    after = [st for opt in (L.algo.actor_opt, L.algo.critic_opt) for st in opt.state.values()]
    assert len(after) == len(moments) > 0
    for old, new in zip(moments, after):
        for k in old:
            assert torch.equal(new[k], old[k]), k
    assert all(float(st["step"]) == 1 for st in after)  # the clean update's step, no second
    exp.logger.close()


@pytest.mark.parametrize("unrolled, per_graph, mini_batches, bad", [
    # the gate's chaining needs 3 steps in a graph (after a non-finite 1st, the 3rd must not move): the unrolled
    # steps' function run as it is, uncompiled, in graphs of 3
    # (the same function compiled is the compiled update's, compared with the eager loop through clean updates by
    # the compiled-equals-eager runs; compiling this test's graphs cost a minute of the suite's time)
    ("uncompiled", 3, 6, 4)])
@pytest.mark.parametrize("read", ["per step", "once"])
def test_unrolled_steps_stop_at_the_first_nonfinite_one_as_the_eager_loop_does(tmp_path, monkeypatch, unrolled,
                                                                             per_graph, mini_batches, bad, read):
    """ppo.num_mini_batch=`mini_batches` with at most `per_graph` steps unrolled per graph (mappo.STEPS_PER_GRAPH, 1
    by default): an epoch's steps are graphs of `per_graph`, equal to the eager loop's steps through a clean update. A
    NaN in step `bad` (a graph's 1st) must leave the weights and Adam's state as the step before made them, as the
    eager loop does (it raises before step `bad`): the later steps of that graph move nothing, and the error names
    step `bad`. Read "once": the steps' finite flags read after the last step (sync-free, as on CUDA): the steps
    after the bad one, in later graphs too, move nothing."""
    from hypermappo.algos import mappo
    from hypermappo.algos.fused_step import FusedMinibatchStep
    from hypermappo.runtime import sync_free

    monkeypatch.setenv(sync_free.VAR, "1" if read == "once" else "0")

    monkeypatch.setattr(mappo, "STEPS_PER_GRAPH", per_graph)
    ends = {}
    for mode in ("off", unrolled):
        exp = Experiment(cfg_of("staghunt/default", ["ppo.compile=off",
                                                     f"rollout_length={15 if mini_batches == 6 else 10}",
                                                     "total_env_steps=120", "ppo.ppo_epoch=2",
                                                     f"ppo.num_mini_batch={mini_batches}", *ONE_LAYER]),
                         tmp_path / mode, quiet=True)
        L = exp.primary
        if mode == "uncompiled":
            L.algo.fused = FusedMinibatchStep(L.algo, lambda fn: fn)
        exp._start_episodes()
        exp.collect()
        L.algo.update(L.buffer, L.batch_generator)  # a clean update first
        exp.collect()
        ahead = torch.Generator()
        ahead.set_state(L.batch_generator.get_state())
        row = L.buffer.minibatch_indices(mini_batches, ahead)[bad - 1][0]  # a row of the next update's step `bad`
        L.buffer.returns.view(-1, L.buffer.N)[row] = float("nan")
        with pytest.raises(NonFiniteError, match=rf"non-finite value_loss \(nan\) in PPO epoch 1, mini-batch {bad}$"):
            L.algo.update(L.buffer, L.batch_generator)
        if mode != "off":
            assert L.algo.fused.compiled_steps is not None  # the unrolled steps ran
        steps = [float(st["step"]) for opt in (L.algo.actor_opt, L.algo.critic_opt) for st in opt.state.values()]
        # the clean update's 2 epochs and this one's steps before the bad one
        assert steps and all(s == 2 * mini_batches + bad - 1 for s in steps), steps
        ends[mode] = {**L.actor.state_dict(), **{"critic." + k: v for k, v in L.critic.state_dict().items()},
                      **{f"moment{i}": st["exp_avg"] for i, st in enumerate(L.algo.actor_opt.state.values())}}
        exp.logger.close()
    for name, value in ends["off"].items():
        torch.testing.assert_close(ends[unrolled][name], value, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("counts", ["shared", "own"])
def test_one_graph_adam_takes_each_parameters_own_step_count_where_they_differ(tmp_path, counts):
    """The one-graph step's Adam computes the bias corrections once per parameter group where the group's step counts
    agree (as they do from the first update on), and per parameter where they do not (a checkpoint or warm start gave
    one parameter a count of its own): both as torch.optim.Adam steps. Run uncompiled (the same function a graph is
    compiled from), one update of one mini-batch step beside the eager update, from the same Adam state."""
    from hypermappo.algos.fused_step import FusedMinibatchStep

    ends = {}
    for mode in ("eager", "one-graph"):
        exp = Experiment(cfg_of("staghunt/default", ["ppo.compile=off", "total_env_steps=40", "ppo.ppo_epoch=1",
                                                     "ppo.num_mini_batch=1"]), tmp_path / mode, quiet=True)
        L = exp.primary
        g = torch.Generator().manual_seed(1)
        for i, q in enumerate(L.actor.parameters()):  # an Adam state as after some steps; one count off in "own"
            L.algo.actor_opt.state[q] = {"step": torch.tensor(7.0 if counts == "own" and i == 2 else 3.0),
                                         "exp_avg": 1e-3 * torch.randn(q.shape, generator=g),
                                         "exp_avg_sq": 1e-6 * torch.rand(q.shape, generator=g)}
        if mode == "one-graph":
            L.algo.fused = FusedMinibatchStep(L.algo, lambda fn: fn)
        exp._start_episodes()
        exp.collect()
        L.algo.update(L.buffer, L.batch_generator)
        if mode == "one-graph":
            assert L.algo.fused.shared_step == [counts == "shared", True]  # the actor's group, the critic's
        ends[mode] = {**L.actor.state_dict(), **{f"{k}.{i}": v for i, st in enumerate(L.algo.actor_opt.state.values())
                                                 for k, v in st.items()}}
        exp.logger.close()
    assert ends["eager"]["step.2"] == (8.0 if counts == "own" else 4.0)
    for name, value in ends["eager"].items():
        torch.testing.assert_close(ends["one-graph"][name], value, rtol=1e-5, atol=1e-7, msg=name)


def test_graphs_are_cached_in_the_library_directory_unless_the_user_chose_one(tmp_path):
    """Importing the pass modules imports torch._inductor, which pins its own default (under /tmp) in
    TORCHINDUCTOR_CACHE_DIR unless it is already set: ours must be set first."""
    import subprocess
    import sys

    code = ("import os, hypermappo.compile.weight_grad, hypermappo.compile.linear_act_norm, hypermappo.experiment; "
            "from torch._inductor.runtime.cache_dir_utils import cache_dir; "
            "print(os.environ['TORCHINDUCTOR_CACHE_DIR']); print(cache_dir())")
    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"} | {"HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    ours = str(tmp_path / ".cache" / "hypermappo" / "inductor")
    assert out.split() == [ours, ours]
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "mine")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(tmp_path / "mine")] * 2


def test_run_header_says_whether_and_why_it_compiles(tmp_path, capsys):
    assert main(["train", "staghunt/default", "total_env_steps=40", "num_envs=4", "rollout_length=10",
                 "log.tensorboard=false", f"run_dir={tmp_path / 'r'}", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "compile: off (auto: 40 env steps < 1,000,000, too short to pay back compiling" in out
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["compile"].startswith("compile: off (auto: 40 env steps")


def test_run_header_says_how_collection_runs(tmp_path, capsys, monkeypatch):
    """A compiled run's header has the collection line (collect_step.py); stopped before training (no compiling)."""
    def stop(self):
        raise SystemExit("stopped after the header")

    monkeypatch.setattr(Experiment, "run", stop)
    with pytest.raises(SystemExit, match="stopped after the header"):
        main(["train", "mpe/simple_spread", "ppo.compile=on", "num_envs=4", "log.tensorboard=false",
              f"run_dir={tmp_path / 'r'}", "--quiet"])
    out = capsys.readouterr().out
    assert "compile: on (ppo.compile=on" in out
    assert ("collection: one graph per step (policy forward, sampling, buffer writes, env step core); 8 steps per "
            "call where no episode can end") in out


@needs_cxx
def test_the_goal_models_compiled_gradient_is_the_same_sum_whatever_the_threads(monkeypatch):
    """The goal model's first layer reads its small table (co-player slot x previous action embeddings + bias) by
    index. Compiled, F.embedding's gradient is a scatter-add whose parallel loop adds rows in the order threads reach
    them: two compiled belief runs with two threads differed in the goal model's Adam moments (and so a resumed run
    from the run it resumed). Inside a graph the rows are a product with the one-hot index instead, whose gradient is
    a product too: no atomic add in the generated code, and the eager gradient's values."""
    from torch._inductor.utils import run_and_get_code

    from hypermappo.models.coplayer_goal import GoalPolicy

    torch.manual_seed(0)
    model = GoalPolicy(obs_dim=6, n_slots=2, n_actions=3, n_goals=3, hidden=8, floor=0.0)
    obs, target, prev = torch.randn(64, 6), torch.randint(2, (64,)), torch.randint(4, (64,))
    params = {k: v.detach() for k, v in model.named_parameters()}

    def grads(ps, obs, target, prev):
        def objective(ps):
            return torch.func.functional_call(model, ps, (obs, target, prev)).square().sum()
        return torch.func.grad(objective)(ps)

    monkeypatch.setattr(model, "forward", model._first_layer)  # functional_call calls forward: the layer alone here
    torch._dynamo.reset()
    torch.set_num_threads(2)  # Inductor writes its loops for the threads it will run on (one: no parallel adds)
    compiled, code = run_and_get_code(torch.compile(grads, dynamic=False), params, obs, target, prev)
    eager = grads(params, obs, target, prev)
    assert not any("atomic_add" in src for src in code)
    assert compiled.keys() == eager.keys() and {"target_in.weight", "prev_in.weight", "obs_in.bias"} <= eager.keys()
    for name, g in eager.items():
        torch.testing.assert_close(compiled[name], g, rtol=1e-5, atol=1e-6, msg=name)
