"""The device-dependent choices that have no GPU here, tested on the CPU: which Adam implementation a device gets
(algos/adam.py; the CUDA one, fused + capturable, also runs on the CPU and is run here), and mini-batch draws
made where the run's generator lives (runtime/device_rng.py, storage/rollout.draw_perm)."""

from __future__ import annotations

import csv

import pytest
import torch

from hypermappo import config as config_mod
from hypermappo.algos import adam as adam_mod
from hypermappo.algos.adam import adam, adam_options, step_tensor
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.runtime.device_rng import device_generator, restore
from hypermappo.storage.rollout import draw_perm

TINY = ["num_envs=4", "rollout_length=10", "model.hidden_sizes=[16,16]", "eval_episodes=2", "log.tensorboard=false",
        "log.progress=false", "ppo.compile=off", "total_env_steps=160", "ppo.num_mini_batch=2"]


def test_adam_is_foreach_on_cpu_and_fused_capturable_on_cuda():
    assert adam_options("cpu") == {"foreach": True}
    assert adam_options(torch.device("cuda", 0)) == {"fused": True, "capturable": True}
    assert adam_options("cuda") == {"fused": True, "capturable": True}


@pytest.mark.parametrize("device_kind", ["cpu", "cuda"])
def test_a_fresh_step_count_is_where_adam_itself_puts_it(device_kind):
    """The compiled update creates Adam's state itself (algos/fused_step.py): its step count must be the tensor Adam
    would make, a CPU scalar for foreach and a tensor on the parameter's device for the CUDA choice (which runs on
    the CPU too), or a resumed or eager step would meet a count of another kind."""
    p = torch.nn.Parameter(torch.randn(3))
    opt = torch.optim.Adam([p], **adam_options(device_kind))
    made = step_tensor(opt, p)
    p.grad = torch.ones(3)
    opt.step()
    real = opt.state[p]["step"]
    assert (made.device, made.dtype, made.shape) == (real.device, real.dtype, real.shape)
    assert float(made) == 0.0
    if device_kind == "cuda":  # kept with the parameter: a capturable step reads no host scalar
        assert opt.defaults["capturable"] and opt.defaults["fused"]
    # a parameter elsewhere than the CPU (the meta device stands in for a GPU): the count goes with it only for the
    # CUDA choice; foreach keeps a host scalar, as torch.optim.Adam does
    elsewhere = torch.nn.Parameter(torch.empty(3, device="meta"))
    assert step_tensor(opt, elsewhere).device.type == ("meta" if device_kind == "cuda" else "cpu")


def rows(path):
    with open(path / "metrics.csv") as f:
        return list(csv.DictReader(f))


def test_the_cuda_adam_choice_trains_as_the_cpu_one_to_rounding(tmp_path, monkeypatch):
    """A MAPPO run with the CUDA branch's Adam (fused, capturable; on the CPU) gives the foreach run's statistics and
    weights up to float rounding, and resumes from its own checkpoint."""
    out = {}
    for kind in ("cpu", "cuda"):
        monkeypatch.setattr(adam_mod, "adam_options", lambda device, kind=kind: adam_options(kind))
        cfg = config_mod.build_config("staghunt/default", [*TINY, "checkpoint_interval=2"])
        exp = Experiment(cfg, tmp_path / kind, quiet=True)
        assert exp.primary.algo.actor_opt.defaults.get("fused") is (True if kind == "cuda" else None)
        exp.run()
        out[kind] = (rows(tmp_path / kind), torch.load(tmp_path / kind / "checkpoints" / "ckpt_0000004.pt",
                                                       weights_only=False))
    (cpu_rows, cpu_ckpt), (cuda_rows, cuda_ckpt) = out["cpu"], out["cuda"]
    assert len(cpu_rows) == len(cuda_rows) == 4
    for a, b in zip(cpu_rows, cuda_rows):
        for k in ("loss_policy", "loss_value", "grad_norm_actor", "entropy"):
            if k in a:
                assert float(b[k]) == pytest.approx(float(a[k]), rel=1e-3, abs=1e-5), k
    for name, w in cpu_ckpt["actor"].items():
        torch.testing.assert_close(cuda_ckpt["actor"][name], w, rtol=1e-4, atol=1e-5, msg=name)


def test_draws_on_the_cpu_are_the_cpu_generators_as_before():
    """On the CPU the run's generator is the same Mersenne twister as a plain torch.Generator: every CPU run's
    mini-batches are what they were."""
    g, ref = device_generator(123, "cpu"), torch.Generator().manual_seed(123)
    assert torch.equal(draw_perm(50, g, torch.device("cpu")), torch.randperm(50, generator=ref))
    assert g.device.type == "cpu"


def test_a_generator_state_of_another_device_type_is_a_one_line_error():
    g = device_generator(0, "cpu")
    philox_like = torch.zeros(16, dtype=torch.uint8)  # a CUDA generator's state: seed and offset
    with pytest.raises(UserError, match=r"mini-batch generator state has 16 bytes, a cpu generator's has \d+"):
        restore(g, philox_like, "mini-batch")
    state = device_generator(5, "cpu").get_state()
    restore(g, state, "mini-batch")
    assert torch.equal(torch.randperm(20, generator=g), torch.randperm(20, generator=device_generator(5, "cpu")))


def test_the_fused_capturable_adam_is_built_by_adam():
    p = torch.nn.Parameter(torch.randn(4))
    opt = adam([p], "cuda", lr=0.1)  # built on the CPU: the choice, not the device, is under test
    assert opt.defaults["fused"] and opt.defaults["capturable"] and opt.defaults["lr"] == 0.1


@pytest.mark.parametrize("preset", ["mpe/simple_spread", "mpe/simple_spread compiled", "staghunt/default",
                                    "staghunt/default compiled", "mpe/simple_spread hyper",
                                    "coingame/default", "staghunt/egocentric"])
def test_collection_and_update_make_no_tensor_where_the_device_is_not_said(tmp_path, monkeypatch, fresh_dynamo,
                                                                          preset):
    """A tensor made without a device lands on the CPU whatever the run's device, and meeting a CUDA tensor it is
    an error (eager) or a host pointer handed to a kernel (a CUDA graph: 'invalid argument' at launch). With the
    default device set to `meta`, every such tensor meets the run's CPU tensors as an error here. Compiled: the
    graphs traced by Dynamo and run as traced (the compiled path's Python in seconds); sync-free collection on, as
    on CUDA. (A hypernetwork actor is checked eager: Dynamo's fake copy of its `torch.func.grad` inputs under a
    default-device context fails a torch-internal leaf check that has nothing to do with devices.)"""
    from test_sync_free import graphs_traced_not_compiled

    from hypermappo.runtime import sync_free

    monkeypatch.setenv(sync_free.VAR, "1")
    preset, *extra = preset.split()
    overrides = [o for o in TINY if o.split("=")[0] not in ("rollout_length", "total_env_steps")] + [
        "rollout_length=30", "total_env_steps=360"]
    if "compiled" in extra:
        graphs_traced_not_compiled(monkeypatch)
        # chunks of 2 steps, not the run's 8: the same code traced (each chunk unrolls the step), a quarter of it
        from hypermappo.compile import collect_step

        monkeypatch.setattr(collect_step, "CHUNK", 2)
        overrides = [o for o in overrides if o.split("=")[0] != "ppo.compile"] + ["ppo.compile=on"]
    if "hyper" in extra:
        overrides.append("actor=hyper")
    exp = Experiment(config_mod.build_config(preset, overrides), tmp_path / "r", quiet=True)
    exp._start_episodes()
    exp.collect()
    with torch.device("meta"):  # the default device for tensors made without one
        exp.collect()
        for g in exp.groups:
            if g.learner is not None:
                g.learner.algo.update(g.learner.buffer, g.learner.batch_generator)
    exp.logger.close()
