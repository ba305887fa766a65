"""hyper.init_from=RUN_DIR: a fresh run starts from another run's hypernetwork (and base weights with init_base),
reproduces its policy on the same observations, refuses a mismatched network naming the tensor, skips an unusable
newest checkpoint, and the live-component audit still runs."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from hypermappo.checkpoint import read_checkpoint
from hypermappo.cli import main
from hypermappo.config import build_config, from_run_dir
from hypermappo.diagnostics import DeadComponentError
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.actor import build_actor

QUIET = ["log.tensorboard=false", "log.progress=false", "torch_threads=1", "eval_episodes=2"]
SOURCE = ["env=matrix:specialisation", "env_kwargs={n_agents: 3, episode_length: 5}", "actor=hyper",
          "hyper.context=agent_id,obs", "hyper.obs_aggregation=mean", "hyper.target=polyak", "hyper.alpha=0.1",
          "hyper.obs_embed_dim=64", "hyper.hidden=64", "hyper.layers=all", "hyper.rank=0",  # sizes the test names
          "hyper.lr=0.003", "num_envs=4", "rollout_length=5", "total_env_steps=200", "checkpoint_interval=5",
          "diagnostics.every=0", *QUIET]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A trained hyper run: 10 updates, checkpoints after updates 5 and 10."""
    run = tmp_path_factory.mktemp("warm") / "source"
    Experiment(build_config(None, [*SOURCE, f"run_dir={run}"]), quiet=True).run()
    return run


def _source_actor(run):
    cfg = from_run_dir(run)
    actor = build_actor("hyper", make_env(cfg.env, 1, "cpu", **cfg.env_kwargs).spec, cfg)
    ckpt = sorted((run / "checkpoints").glob("ckpt_*.pt"))[-1]
    actor.load_state_dict(read_checkpoint(ckpt, "cpu")["actor"])
    return actor.eval()


def _params(actor, obs):
    with torch.no_grad():
        return actor(obs, None, None, None).dist.params()


def _with(extra) -> list[str]:
    """SOURCE with some of its keys replaced by `extra`'s."""
    keys = {e.split("=", 1)[0] for e in extra}
    return [o for o in SOURCE if o.split("=", 1)[0] not in keys] + list(extra)


def _warm(tmp_path, source, name, extra=()):
    cfg = build_config(None, [*_with(extra), f"run_dir={tmp_path / name}", f"hyper.init_from={source}", "seed=7"])
    return Experiment(cfg, quiet=True)


def test_warm_start_reproduces_the_source_policy_on_the_same_observations(source, tmp_path):
    ref = _source_actor(source)
    obs = torch.randn(9, 3, ref.hyper.context.obs_encoder[1].in_features)
    exp = _warm(tmp_path, source, "both", ["hyper.init_base=true"])
    assert torch.equal(_params(exp.actor.eval(), obs), _params(ref, obs))
    for p, q, snap in zip(exp.actor.target.parameters(), exp.actor.hyper.parameters(), exp.audit.target_snapshot):
        assert torch.equal(p, q) and torch.equal(snap, q)  # target synced to the loaded one, and so is the audit's copy
    assert exp.summary_extra["warm_start"]["update"] == 10  # the newest checkpoint
    # not vacuous: the source's hypernetwork moved away from its zero-initialised outputs, and a fresh run differs
    assert any(g.w.weight.abs().sum() > 0 for g in ref.hyper.generators)
    fresh = Experiment(build_config(None, [*SOURCE, f"run_dir={tmp_path / 'fresh'}", "seed=7"]), quiet=True)
    assert not torch.allclose(_params(fresh.actor.eval(), obs), _params(ref, obs))


def test_without_init_base_only_the_hypernetwork_is_loaded(source, tmp_path):
    ref = _source_actor(source)
    exp = _warm(tmp_path, source, "hyper_only")
    for k, v in ref.hyper.state_dict().items():
        assert torch.equal(exp.actor.hyper.state_dict()[k], v), k
    assert not torch.equal(exp.actor.head.weight, ref.head.weight)  # the base keeps this run's own init
    assert exp.summary_extra["warm_start"]["loaded"] == "hypernetwork"


def test_newest_unusable_checkpoint_is_skipped_and_left_in_place(source, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    newest = sorted((copy / "checkpoints").glob("ckpt_*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:100])  # truncated: its .crc32 sidecar no longer matches
    exp = _warm(tmp_path, copy, "older")
    assert exp.summary_extra["warm_start"]["update"] == 5
    assert newest.exists()  # another run's files are only read


def test_audit_still_runs_on_a_warm_started_run(source, tmp_path):
    exp = _warm(tmp_path, source, "audited", ["diagnostics.audit_updates=2", "total_env_steps=60"])
    exp.run()
    summary = json.loads((tmp_path / "audited" / "summary.json").read_text())
    assert summary["audit"]["after_updates"] == 2 and summary["audit"]["passed"]
    assert summary["audit"]["components"]["actor.target"] == "live"
    assert summary["warm_start"]["from"] == str(source)


def test_mismatched_network_names_the_tensor(source, tmp_path):
    # four agents: wider observations, and the one-hot agent id widens the hypernetwork's first layer
    with pytest.raises(UserError, match=r"^hyper\.init_from: tensor actor\.hyper\.context\.obs_encoder\.1\.weight has "
                                        r"shape \(64, 10\) in .*ckpt_0*10\.pt but \(64, 17\) in this config "
                                        r"\(also mismatched: actor\.hyper\.mlp\.0\.weight, .* and 4 more\)$"):
        _warm(tmp_path, source, "n4", ["env_kwargs={n_agents: 4, episode_length: 5}"])
    assert not (tmp_path / "n4").exists()  # a failed start leaves no run directory
    with pytest.raises(UserError, match=r"tensor actor\.hyper\.generators\.2\.w\.weight .* has no place"):
        _warm(tmp_path, source, "hidden", ["hyper.layers=hidden"])
    with pytest.raises(UserError, match=r"tensor actor\.hyper\.context\.attention.* is not in"):
        _warm(tmp_path, source, "attn", ["hyper.obs_aggregation=attention"])


def test_bad_sources_are_one_line_errors(source, tmp_path):
    with pytest.raises(UserError, match=r"hyper\.init_from: expected a run directory, got '.*nowhere'"):
        _warm(tmp_path, tmp_path / "nowhere", "a")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"no config\.yaml here"):
        _warm(tmp_path, tmp_path / "empty", "b")
    mlp = tmp_path / "mlp"
    Experiment(build_config(None, ["env=matrix:climbing", "total_env_steps=40", "num_envs=2", "rollout_length=5",
                                   f"run_dir={mlp}", *QUIET]), quiet=True).run()
    with pytest.raises(UserError, match=r"trained actor='mlp', which has no hypernetwork"):
        _warm(tmp_path, mlp, "c")
    with pytest.raises(UserError, match=r"hyper\.output='full'"):
        _warm(tmp_path, source, "d", ["hyper.output=full"])


def test_cli_reports_a_mismatch_in_one_line_and_exit_2(source, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = ["train", "matrix/specialisation", *_with(["env_kwargs={n_agents: 4, episode_length: 5}"]),
            f"hyper.init_from={source}", "run_dir=r"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "actor.hyper.context.obs_encoder.1.weight" in err, err
    assert not (tmp_path / "r").exists()


def test_audit_stops_a_run_warm_started_from_a_dead_hypernetwork(tmp_path):
    """At hyper.lr=0.01 every ReLU unit of this source's hypernetwork MLP is off after 10 updates: loading it must not
    hide that (the audit judges the loaded network, not a fresh one)."""
    dead = tmp_path / "dead_source"
    Experiment(build_config(None, [*_with(["hyper.lr=0.01"]), f"run_dir={dead}"]), quiet=True).run()
    exp = _warm(tmp_path, dead, "audited", ["diagnostics.audit_updates=2", "total_env_steps=60"])
    with pytest.raises(DeadComponentError, match=r"dead: actor\.hyper\.context\.obs_encoder\.1, actor\.hyper\.mlp\.0"):
        exp.run()


def test_a_resumed_run_continues_from_its_own_checkpoint_without_the_source(source, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(source, copy)
    exp = _warm(tmp_path, copy, "resumable", ["total_env_steps=60"])
    exp.run()
    (tmp_path / "resumable" / "summary.json").unlink()  # as if stopped after its last checkpoint
    shutil.rmtree(copy)
    again = Experiment(from_run_dir(tmp_path / "resumable"), tmp_path / "resumable", resume=True, quiet=True)
    assert again.update == 3 and "warm_start" in again.summary_extra  # the record of where it started is kept
