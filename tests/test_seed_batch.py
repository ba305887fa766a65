"""`seeds=` (seed_batch.py): S seeds as one batched run, each seed its own run directory and its run alone."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import yaml

from hypermappo.config import build_config
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.distributions import Categorical
from hypermappo.seed_batch import SeedBatch

KEYS = ["env=mpe:simple_spread", "num_envs=8", "rollout_length=10", "total_env_steps=240", "eval_episodes=3",
        "ppo.ppo_epoch=2", "ppo.num_mini_batch=2", "log.progress=false", "torch_threads=1"]


def rows(path):
    return list(csv.DictReader(open(path / "metrics.csv")))


def spread(e):
    return SimpleSpreadVecEnv(e)


def staghunt(e):
    from hypermappo.envs.staghunt import StagHuntVecEnv

    return StagHuntVecEnv(e, observation="partial", view_radius=4, payoff="snowdrift", env_offset=3)


def coingame(e):
    from hypermappo.envs.coingame import CoinGameVecEnv

    return CoinGameVecEnv(e)


@pytest.mark.parametrize("make", [spread, staghunt, coingame])
def test_seed_blocks_of_one_env_draw_what_each_seed_alone_draws(make):
    both = make(8)
    first = both.reset_blocks([3, 7])
    alone = [make(4), make(4)]
    starts = [env.reset(seed=s) for env, s in zip(alone, (3, 7))]
    assert torch.equal(first.obs, torch.cat([s.obs for s in starts]))
    n = first.obs.shape[1]
    actions = torch.randint(0, 5 if make is not coingame else 4, (60, 8, n), generator=torch.Generator().manual_seed(0))
    for a in actions:  # past the time limits: the auto-resets' new starts (and captures' respawns), block by block
        joint = both.step(a)
        parts = [env.step(x) for env, x in zip(alone, a.split(4))]
        assert torch.equal(joint.obs, torch.cat([p.obs for p in parts]))
        assert torch.equal(joint.reward, torch.cat([p.reward for p in parts]))
    state, own = both.block_state(1), alone[1].get_state()
    assert state.keys() == own.keys()
    for k, v in own.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(state[k], v), k
        elif isinstance(v, dict):
            assert all(torch.equal(state[k][n], x) for n, x in v.items()), k


def test_a_categorical_sample_from_the_uniforms_it_would_draw_is_its_sample():
    logits = torch.randn(6, 3, 5)
    torch.manual_seed(4)
    drawn = Categorical(logits).sample()
    torch.manual_seed(4)
    u = torch.rand(6, 3, 5)
    assert torch.equal(Categorical(logits).sample_from(u), drawn)


TIMES = {"train_sps", "seed_batch_sps", "collect_s", "update_s", "diagnostics_s", "wall_s"}


def alone_and_batched(tmp_path, seeds, extra=()):
    """Each seed trained alone, and all of them as one batched run -> [(alone's rows, batched rows, alone's
    summary, batched summary, the batched run directory)] per seed."""
    keys = [k for k in KEYS if k.split("=")[0] not in {x.split("=")[0] for x in extra}] + list(extra)
    cfg = build_config(overrides=keys + [f"seeds={list(seeds)}".replace(" ", ""), f"run_dir={tmp_path / 'batch'}"])
    summaries = SeedBatch(cfg, quiet=True).run()
    out = []
    for seed, summary in zip(seeds, summaries):
        alone_dir = tmp_path / f"alone_{seed}"
        alone = Experiment(build_config(overrides=keys + [f"seed={seed}"]), run_dir=alone_dir, quiet=True).run()
        mine = tmp_path / "batch" / f"seed_{seed}"
        out.append((rows(alone_dir), rows(mine), alone, summary, mine))
    return out


# the mlp actor, and Hyper-MAPPO with an observation context, its smoothness term (the previous observation) and a
# target hypernetwork
@pytest.mark.parametrize("extra", [(), ("actor=hyper", "hyper.context=[agent_id,obs]", "hyper.alpha=0.1",
                                        "hyper.target=polyak"), ("env=staghunt",), ("env=coingame",)],
                         ids=["mlp", "hyper", "staghunt", "coingame"])
def test_on_a_cpu_each_seed_of_a_batched_run_is_its_run_alone_to_the_bit(tmp_path, extra):
    for seed, (a, b, alone, summary, mine) in zip((0, 5), alone_and_batched(tmp_path, (0, 5), extra)):
        assert len(a) == len(b) == 3
        for ra, rb in zip(a, b):  # every figure but the timings, diagnostics and evaluation included
            assert {k: v for k, v in ra.items() if k not in TIMES} == \
                {k: v for k, v in rb.items() if k not in TIMES | {"seed_batch_sps"}}
        assert summary["eval_return_mean"] == alone["eval_return_mean"]
        saved = yaml.safe_load((mine / "config.yaml").read_text())
        assert saved["seed"] == seed and saved["seeds"] == [] and saved["ppo"]["compile"] == "off"  # its run alone
        assert "seeds [0, 5]" in summary["seed_batch"] and "in turn" in summary["seed_batch_networks"]


def test_batched_networks_train_each_seed_as_alone_up_to_float_rounding(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPERMAPPO_SEED_BATCH", "batched")  # the GPU's default: one vmapped call for every seed
    for a, b, alone, summary, _ in alone_and_batched(tmp_path, (0, 5)):
        assert "batched" in summary["seed_batch_networks"]
        for ra, rb in zip(a, b):
            # the same env starts, action noise and mini-batches: the same episodes while the weights agree to
            # float rounding (3 updates here), and losses equal up to that rounding
            assert ra["episode_return_mean"] == rb["episode_return_mean"]
            for k in ("policy_loss", "value_loss", "grad_norm_actor", "grad_norm_critic", "entropy"):
                assert float(rb[k]) == pytest.approx(float(ra[k]), rel=1e-4, abs=1e-6), k
        assert summary["eval_return_mean"] == pytest.approx(alone["eval_return_mean"], rel=1e-4)


def test_a_batched_seed_checkpoints_what_its_run_alone_holds_and_resumes_alone(tmp_path):
    from hypermappo.experiment import resume

    cfg = build_config(overrides=KEYS + ["seeds=[1,2]", f"run_dir={tmp_path / 'b'}", "checkpoint_interval=1"])
    SeedBatch(cfg, quiet=True).run()
    mine = tmp_path / "b" / "seed_2"
    # its checkpoints hold what seed 2 alone holds after the same updates: its env block (positions, step counts,
    # generator), its action-noise stream (the global generator) and its mini-batch generator
    Experiment(build_config(overrides=KEYS + ["seed=2", "checkpoint_interval=1"]), run_dir=tmp_path / "alone",
               quiet=True).run()
    for update in (2, 3):  # the two the rotation keeps
        a, b = (torch.load(d / "checkpoints" / f"ckpt_{update:07d}.pt", weights_only=False)
                for d in (tmp_path / "alone", mine))
        for k in ("agent_pos", "landmark_pos", "t", "rng"):
            assert torch.equal(a["env_state"][k], b["env_state"][k]), k
        assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])
        assert torch.equal(a["rng"]["batch"], b["rng"]["batch"])
        assert torch.equal(a["last_step"].obs, b["last_step"].obs)
        assert torch.equal(a["prev_obs"], b["prev_obs"]) and torch.equal(a["reset_mask"], b["reset_mask"])
    with pytest.raises(UserError, match=r"holds the runs of a seeds= batch \(seed_1, seed_2\).*seed_1"):
        resume(tmp_path / "b")  # the batch's parent directory is no run: the error names the seeds' own
    (mine / "summary.json").unlink()  # as if killed after its last checkpoint
    assert resume(mine, quiet=True)["env_steps"] == 240  # continued alone


@pytest.mark.parametrize("key, bad", [("algo=maddpg", "algo"), ("actor=rnn", "actor"), ("env=smax:3m", "env"),
                                      ("seeds=[1,1]", "seeds")])
def test_a_run_the_batched_path_does_not_train_is_refused_naming_the_key(key, bad):
    with pytest.raises(UserError, match=rf"^{bad}|seeds: .*{bad}"):
        build_config(overrides=[k for k in KEYS if not k.startswith(key.split("=")[0] + "=")]
                     + (["seeds=[0,1]"] if not key.startswith("seeds") else []) + [key])


def test_a_batch_that_cannot_start_leaves_no_run_directory(tmp_path, monkeypatch):
    (tmp_path / "b" / "seed_4").mkdir(parents=True)
    (tmp_path / "b" / "seed_4" / "metrics.csv").write_text("x\n")  # someone else's run
    cfg = build_config(overrides=KEYS + ["seeds=[3,4]", f"run_dir={tmp_path / 'b'}"])
    with pytest.raises(UserError):
        SeedBatch(cfg, quiet=True)
    assert not (tmp_path / "b" / "seed_3").exists()
    assert (tmp_path / "b" / "seed_4" / "metrics.csv").exists()
    # a batch that fails after every seed's run was built takes back their directories and the parent it made
    monkeypatch.setattr("hypermappo.seed_batch.RolloutBuffer", None)
    cfg = build_config(overrides=KEYS + ["seeds=[3,4]", f"run_dir={tmp_path / 'new' / 'b'}"])
    with pytest.raises(TypeError):
        SeedBatch(cfg, quiet=True)
    assert not (tmp_path / "new").exists()


def test_a_batched_run_trains_where_the_run_alone_takes_the_layernorm_kernel(tmp_path, monkeypatch):
    from hypermappo.kernels import act_norm

    monkeypatch.setenv("HYPERMAPPO_SEED_BATCH", "batched")

    # 64 envs x 100 steps x 3 agents = 19,200 rows a mini-batch: the run alone's update takes the C kernel there,
    # which has no vmap rule; the batched seeds take the composition (the same function up to float rounding)
    keys = [k for k in KEYS if not k.startswith(("num_envs", "rollout_length", "total_env_steps", "ppo.num_mini"))]
    keys += ["num_envs=64", "rollout_length=100", "total_env_steps=6400", "ppo.num_mini_batch=1"]
    assert 64 * 100 * 3 >= act_norm.MIN_ROWS
    SeedBatch(build_config(overrides=keys + ["seeds=[0,1]", f"run_dir={tmp_path / 'b'}"]), quiet=True).run()
    Experiment(build_config(overrides=keys + ["seed=1"]), run_dir=tmp_path / "alone", quiet=True).run()
    a, b = rows(tmp_path / "alone")[0], rows(tmp_path / "b" / "seed_1")[0]
    assert a["episode_return_mean"] == b["episode_return_mean"]
    for k in ("policy_loss", "value_loss", "grad_norm_actor"):
        assert float(b[k]) == pytest.approx(float(a[k]), rel=1e-4, abs=1e-6), k


def test_a_non_finite_reward_stops_every_seed_and_fails_the_seed_it_came_from(tmp_path, monkeypatch):
    from hypermappo.errors import NonFiniteError

    cfg = build_config(overrides=KEYS + ["seeds=[0,1]", f"run_dir={tmp_path / 'b'}", "checkpoint_interval=1"])
    batch = SeedBatch(cfg, quiet=True)
    step, calls = type(batch.env).step, []

    def poisoned(env, actions):  # update 2, step 4: a NaN reward in seed 1's third env
        out = step(env, actions)
        calls.append(1)
        if len(calls) == 14:
            out.reward[8 + 2, 1] = float("nan")
        return out

    monkeypatch.setattr(type(batch.env), "step", poisoned)
    with pytest.raises(NonFiniteError, match=r"^seed 1: non-finite reward \(nan\) .* env 2, agent slot 1 .*"
                                             r"every seed stopped with its last checkpoint kept"):
        batch.run()
    failed = json.loads((tmp_path / "b" / "seed_1" / "summary.json").read_text())
    assert failed["status"].startswith("failed: non-finite reward")
    assert not (tmp_path / "b" / "seed_0" / "summary.json").exists()  # stopped, resumable, not failed
    assert sorted(p.name for p in (tmp_path / "b" / "seed_0" / "checkpoints").glob("*.pt")) == ["ckpt_0000001.pt"]
