"""ppo.micro_batch_size (algos/micro_batch.py): a mini-batch evaluated in row blocks gives the update of the whole
mini-batch in one pass, with dead agents spread unevenly over the blocks; where that would not hold it is off and
says why (or refuses an explicit size)."""

from __future__ import annotations

import copy

import pytest
import torch

from hypermappo import run_config
from hypermappo.algos import micro_batch
from hypermappo.config import build_config
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment

ENV = "pettingzoo:envs_for_adapter_tests:make_scripted_env"  # 3 agents; two die inside the rollout
ACTORS = {"mlp": ["actor=mlp"],
          "hyper-obs": ["actor=hyper", "hyper.context=obs", "hyper.layers=last", "hyper.beta=0.5"]}


def _collected(tmp_path, overrides) -> Experiment:
    cfg = build_config(None, [f"env={ENV}", "num_envs=6", "rollout_length=8", "total_env_steps=96", "ppo.ppo_epoch=3",
                              "log.tensorboard=false", "log.progress=false", "checkpoint_interval=0",
                              "torch_threads=1", "diagnostics.every=0", f"run_dir={tmp_path / 'run'}", *overrides],
                       base={"env_kwargs": {"with_state": True}})
    torch.manual_seed(0)
    exp = Experiment(cfg, quiet=True)
    exp._start_episodes()
    exp.actor.eval(), exp.critic.eval()
    exp.collect()
    exp.actor.train(), exp.critic.train()
    return exp


def test_row_blocks_split_evenly_where_they_can_and_cover_every_row_once():
    # the paper setting: 25,600 rows x 3 agents in blocks of <= 16,384 samples -> 5 blocks of 5,120 rows
    blocks = micro_batch.row_blocks(25_600, 3, 16_384)
    assert len(blocks) == 5 and {len(range(25_600)[b]) for b in blocks} == {5120}
    assert micro_batch.row_blocks(512, 3, 8192) == [slice(None)]  # fits: one pass
    assert micro_batch.row_blocks(512, 3, 0) == [slice(None)]  # off
    prime = micro_batch.row_blocks(101, 1, 10)  # no divisor within 2x the fewest blocks: equal but the last
    sizes = [len(range(101)[b]) for b in prime]
    assert sizes == [10] * 10 + [1]
    for rows, n, size in ((25_600, 3, 8192), (101, 1, 10), (48, 3, 24), (7, 5, 12)):
        covered = torch.cat([torch.arange(rows)[b] for b in micro_batch.row_blocks(rows, n, size)])
        assert torch.equal(covered, torch.arange(rows)), (rows, n, size)
        assert all(len(range(rows)[b]) * n <= max(size, n) for b in micro_batch.row_blocks(rows, n, size))


@pytest.mark.parametrize("actor", list(ACTORS))
@pytest.mark.parametrize("num_mini_batch", [1, 2])
def test_micro_batched_update_equals_the_one_pass_update(tmp_path, actor, num_mini_batch):
    """Two copies of one learner update on one rollout (dead agents in it), one in a single pass per mini-batch and
    one in blocks of 8 rows: the same weights, optimiser moments and logged losses to float rounding."""
    exp = _collected(tmp_path, [*ACTORS[actor], f"ppo.num_mini_batch={num_mini_batch}", "ppo.micro_batch_size=0"])
    one, blocked = exp.algo, copy.deepcopy(exp.algo)
    buf = exp.buffer
    rows = buf.T * buf.E // num_mini_batch
    blocked.micro_size = 8 * buf.N
    blocks = micro_batch.row_blocks(rows, buf.N, blocked.micro_size)
    assert len(blocks) > 1
    batch = next(iter(buf.minibatches(num_mini_batch, torch.Generator().manual_seed(2))))
    alive = [int(batch["active"][b].sum()) for b in blocks]
    assert len(set(alive)) > 1, alive  # blocks differ in their share of the loss mask
    before = [p.detach().clone() for p in one.actor.parameters()]
    m_one = one.update(buf, torch.Generator().manual_seed(2))
    m_blocked = blocked.update(buf, torch.Generator().manual_seed(2))
    assert any(not torch.equal(p, q) for p, q in zip(one.actor.parameters(), before))  # the update did something
    for part in ("actor", "critic"):
        for (name, a), b in zip(getattr(one, part).named_parameters(), getattr(blocked, part).parameters()):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=lambda m, name=f"{part}.{name}": f"{name}: {m}")
    for opt in ("actor_opt", "critic_opt"):
        for p, q in zip(getattr(one, opt).state.values(), getattr(blocked, opt).state.values()):
            torch.testing.assert_close(q["exp_avg_sq"], p["exp_avg_sq"], rtol=1e-4, atol=1e-12)
    assert m_one.keys() == m_blocked.keys()
    for k in m_one:
        assert m_blocked[k] == pytest.approx(m_one[k], rel=1e-4, abs=1e-6), k
    exp.logger.close()


@pytest.mark.parametrize("overrides, note", [
    (["rollout_length=256", "ppo.micro_batch_size=16384"],
     "micro-batches: each mini-batch of 32,768 agent samples in 2 row blocks of <= 16,384 (ppo.micro_batch_size=16,384), "
     "gradients accumulated"),
    (["rollout_length=64", "ppo.micro_batch_size=16384"],
     "micro-batches: none needed (a mini-batch is 8,192 agent samples <= ppo.micro_batch_size=16,384)"),
    ([], "micro-batches: off (ppo.micro_batch_size=0)"),  # the default
])
def test_run_header_and_summary_say_how_mini_batches_are_split(tmp_path, capsys, overrides, note):
    from hypermappo.cli import main

    assert main(["train", "staghunt/default", "num_envs=64", "total_env_steps=64", "log.tensorboard=false",
                 "log.progress=false", "eval_episodes=2", f"run_dir={tmp_path / 'run'}", *overrides]) == 0
    assert note in capsys.readouterr().out.splitlines()
    import json

    assert json.loads((tmp_path / "run" / "summary.json").read_text())["micro_batch"] == note


def test_blocked_configs_say_why_and_refuse_an_explicit_size():
    base = ["actor=hyper", "hyper.context=obs", "hyper.alpha=0.1"]
    cfg = build_config("staghunt/default", base)
    assert micro_batch.blocker(cfg).startswith("hyper.alpha > 0 with a per-sample context")
    cfg.ppo.micro_batch_size = 16  # as a policy group's own config could carry it
    assert micro_batch.describe(cfg, 512, 2).startswith("micro-batches: off (hyper.alpha > 0")
    # what train / config / sweep build (run_config) refuses a size micro-batches cannot honour
    with pytest.raises(UserError, match=r"ppo.micro_batch_size=4096 has no effect: micro-batches are off here: "
                                        r"hyper.alpha > 0"):
        run_config.build_config("staghunt/default", [*base, "ppo.micro_batch_size=4096"])
    with pytest.raises(UserError, match="ppo.micro_batch_size=1024 has no effect: .*recurrent"):
        run_config.build_config("staghunt/default", ["actor=rnn", "ppo.micro_batch_size=1024"])
    # ... and so does a learner group's own config
    with pytest.raises(UserError, match=r"groups\[0\] \(a\): ppo.micro_batch_size=1024 has no effect: .*recurrent"):
        run_config.build_config("staghunt/default", ["groups=[{name: a, agents: ['*'], actor: rnn, "
                                                     "ppo: {micro_batch_size: 1024}}]"])
    # a static (agent-id) context's smoothness target term is one constant mean: blocks add up to it
    assert micro_batch.blocker(build_config("staghunt/default", ["actor=hyper", "hyper.context=[agent_id]",
                                                                 "hyper.alpha=0.1", "hyper.target=hard"])) is None
    with pytest.raises(UserError, match="ppo.micro_batch_size"):
        build_config("staghunt/default", ["ppo.micro_batch_size=-1"])
