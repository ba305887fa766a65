"""User mistakes in the config and on the command line: one-line errors, exit code 2, no run directory left."""

from __future__ import annotations

import pytest
import torch

from hypermappo.cli import main
from hypermappo.config import build_config, list_presets, save_yaml
from hypermappo.errors import UserError

TINY = ["total_env_steps=8", "num_envs=2", "rollout_length=4", "eval_episodes=1", "log.tensorboard=false",
        "log.progress=false", "diagnostics.every=0", "diagnostics.audit_updates=0", "torch_threads=1"]


# ------------------------------------------------------------------ keys nothing reads


@pytest.mark.parametrize("target", ["hard", "polyak"])
def test_target_hypernetwork_without_smoothness_is_rejected(target):
    with pytest.raises(UserError, match=r"hyper\.target=.*hyper\.alpha>0"):
        build_config(None, ["actor=hyper", "hyper.context=obs", f"hyper.target={target}"])
    build_config(None, ["actor=hyper", "hyper.context=obs", f"hyper.target={target}", "hyper.alpha=0.1"])


@pytest.mark.parametrize("overrides, key", [
    (["hyper.hidden=32"], "hyper.hidden"),
    (["actor=rnn", "hyper.lr=1e-3"], "hyper.lr"),
    (["model.rnn_hidden=32"], "model.rnn_hidden"),
    (["actor=hyper", "model.rnn_hidden=32"], "model.rnn_hidden"),
    (["ppo.data_chunk_length=5"], "ppo.data_chunk_length"),
    (["actor=hyper", "hyper.context=obs", "ppo.data_chunk_length=5"], "ppo.data_chunk_length"),
    (["actor=hyper", "hyper.context=obs", "hyper.alpha=0.1", "hyper.target=polyak", "hyper.target_interval=5"],
     "hyper.target_interval"),
    (["actor=hyper", "hyper.context=obs", "hyper.alpha=0.1", "hyper.target=hard", "hyper.target_tau=0.5"],
     "hyper.target_tau"),
    (["actor=hyper", "hyper.id_embed_dim=8"], "hyper.id_embed_dim"),
    (["actor=hyper", "hyper.context=obs", "hyper.id_encoding=embedding"], "hyper.id_encoding"),
    (["actor=hyper", "hyper.obs_embed_dim=32"], "hyper.obs_embed_dim"),
    (["actor=hyper", "hyper.context=obs", "hyper.obs_aggregation=mean", "hyper.attention_heads=2"],
     "hyper.attention_heads"),
    (["actor=hyper", "hyper.history_hidden=8"], "hyper.history_hidden"),
    (["actor=hyper", "hyper.mlp_layers=0", "hyper.hidden=8"], "hyper.hidden"),
    (["ppo.huber=false", "ppo.huber_delta=1"], "ppo.huber_delta"),
    (["diagnostics.every=0", "diagnostics.snd_pool=10"], "diagnostics.snd_pool"),
    (["log.wandb_project=x"], "log.wandb_project"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_key_nothing_reads_is_an_error_naming_it(overrides, key):
    with pytest.raises(UserError, match=rf"^{key}=.* has no effect: "):
        build_config(None, overrides)


@pytest.mark.parametrize("overrides", [
    ["hyper.beta=0.1"],  # the KL alignment term works with any actor
    ["hyper.hidden=0"],  # equal to the default (auto): not "set"
    ["actor=rnn", "model.rnn_hidden=32", "ppo.data_chunk_length=5"],
    ["critic.recurrent=on", "model.rnn_hidden=32", "ppo.data_chunk_length=5"],
    ["actor=hyper", "hyper.context=obs,history", "ppo.data_chunk_length=5", "hyper.history_hidden=8"],
    ["actor=hyper", "hyper.id_encoding=embedding", "hyper.id_embed_dim=8"],
    ["actor=hyper", "hyper.context=obs", "hyper.attention_heads=2", "hyper.obs_embed_dim=32"],
    ["actor=hyper", "hyper.context=obs", "hyper.alpha=0.1", "hyper.target=polyak", "hyper.target_tau=0.5"],
    ["actor=hyper", "hyper.alpha=0.1", "hyper.target=hard", "hyper.target_interval=3"],
], ids=" ".join)
def test_keys_that_are_read_are_accepted(overrides):
    build_config(None, overrides)


@pytest.mark.parametrize("preset", list_presets())
def test_every_preset_loads(preset):
    build_config(preset)


def test_sweep_accepts_a_key_some_runs_read_but_not_one_no_run_reads(tmp_path, capsys):
    out = str(tmp_path / "sw")
    assert main(["sweep", "matrix/climbing", "actor=mlp,hyper", "hyper.lr=1e-3", "--out", out, "--dry-run"]) == 0
    listing = capsys.readouterr().out
    assert "actor=mlp" in listing and "--allow-unused-keys" in listing.split("actor=hyper,")[0]
    assert main(["sweep", "matrix/climbing", "actor=mlp,rnn", "hyper.lr=1e-3", "--out", out, "--dry-run"]) == 2
    assert "hyper.lr=0.001 has no effect" in capsys.readouterr().err


# ------------------------------------------------------------------ values, duplicates, bare keys


@pytest.mark.parametrize("override", ["ppo.lr_actor=nan", "ppo.lr_critic=inf", "hyper.alpha=-inf", "ppo.gamma=nan",
                                      "model.log_std_init=inf", "ppo.max_grad_norm=inf", "ppo.huber_delta=nan"])
def test_non_finite_numbers_are_rejected(override):
    key = override.split("=")[0]
    with pytest.raises(UserError, match=rf"^{key}: expected a finite number"):
        build_config(None, [override])


@pytest.mark.parametrize("override", ["ppo.clip=5", "ppo.clip=1", "ppo.clip=0", "ppo.gae_lambda=1.5",
                                      "ppo.gamma=-0.1", "hyper.target_tau=0", "ppo.entropy_coef=2",
                                      "ppo.lr_actor=3", "model.log_std_init=10"])
def test_out_of_range_numbers_are_rejected(override):
    key = override.split("=")[0]
    with pytest.raises(UserError, match=rf"^{key}: expected a value"):
        build_config(None, [override])


def test_a_key_given_twice_is_an_error():
    with pytest.raises(UserError, match=r"^seed: given twice \('seed=1' and 'seed=2'\)"):
        build_config(None, ["seed=1", "seed=2"])


@pytest.mark.parametrize("bare, dotted", [("gamma", "ppo.gamma"), ("lr", "ppo.lr_actor"), ("clip", "ppo.clip"),
                                          ("entropy_coef", "ppo.entropy_coef"), ("hidden_sizes", "model.hidden_sizes"),
                                          ("rnn_hidden", "model.rnn_hidden"), ("gama", "ppo.gamma")])
def test_a_bare_key_suggests_the_dotted_one(bare, dotted):
    with pytest.raises(UserError, match=rf"unknown config key '{bare}' \(did you mean .*'{dotted}'"):
        build_config(None, [f"{bare}=1"])


# ------------------------------------------------------------------ the CLI: exit 2, one line, no run directory

CLI_CASES = {
    "nan lr": ["ppo.lr_actor=nan"],
    "inf lr": ["ppo.lr_critic=inf"],
    "clip 5": ["ppo.clip=5"],
    "duplicate": ["seed=1", "seed=2"],
    "bare key": ["gamma=0.9"],
    "dead key": ["hyper.hidden=8"],
    "target no alpha": ["actor=hyper", "hyper.target=hard"],
    "chunk": ["actor=rnn", "ppo.data_chunk_length=3"],  # found in Experiment init, after the run dir is claimed
    "env kwarg": ["env_kwargs={foo: 1}"],  # likewise
    "unknown env": ["env=matrix:nope"],
    "cuda": ["device=cuda"],
    "nested run dir": ["run_dir=a/b/run", "env_kwargs={foo: 1}"],
    "unclosed list": ["model.hidden_sizes=[64,"],
}


@pytest.mark.parametrize("extra", list(CLI_CASES.values()), ids=list(CLI_CASES))
def test_train_user_error_exits_2_with_one_line_and_no_run_dir(extra, tmp_path, monkeypatch, capsys):
    if "device=cuda" in extra and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    monkeypatch.chdir(tmp_path)
    assert main(["train", "matrix/climbing", *TINY, *extra, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("hypermappo train: error: "), err
    assert list(tmp_path.iterdir()) == []


def test_failed_init_keeps_a_directory_that_existed(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "mine").mkdir(parents=True)
    assert main(["train", "matrix/climbing", *TINY, "run_dir=runs/mine/x", "env_kwargs={foo: 1}"]) == 2
    assert main(["train", "matrix/climbing", *TINY, "run_dir=runs/mine", "env_kwargs={foo: 1}"]) == 2
    assert [p.name for p in tmp_path.rglob("*")] == ["runs", "mine"]
    (tmp_path / "runs" / "mine" / "notes.txt").write_text("keep")
    assert main(["train", "matrix/climbing", *TINY, "run_dir=runs/mine", "env_kwargs={foo: 1}"]) == 2
    assert (tmp_path / "runs" / "mine" / "notes.txt").read_text() == "keep"
    assert "already exists and is not empty" in capsys.readouterr().err


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse usage errors
        return e.code


@pytest.mark.parametrize("argv", [
    ["train", "matrix/climbing", *TINY, "run_dir={file}"],
    ["train", "matrix/climbing", *TINY, "run_dir={file}/run"],
    ["eval", "{fake}/checkpoints/ckpt_0000001.pt"],
    ["eval", "{fake}", "--seed", "-1"],
    ["sweep", "matrix/climbing", "seed=1,2", "--out", "{file}"],
    ["train"],
    ["eval", "{fake}", "--episodes", "abc"],
    ["frobnicate"],
    ["train", "matrix/climbing", "--fast"],
], ids=lambda a: " ".join(x for x in a if x not in TINY))
def test_other_user_errors_exit_2_with_one_line(argv, tmp_path, monkeypatch, capsys):
    """Run paths that are files, a file that is not a checkpoint, usage mistakes (argparse's usage block too)."""
    fake = tmp_path / "fake"
    (fake / "checkpoints").mkdir(parents=True)
    (fake / "checkpoints" / "ckpt_0000001.pt").write_text("not a checkpoint")
    save_yaml(build_config("matrix/climbing"), fake / "config.yaml")
    (tmp_path / "a_file").write_text("x")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    before = sorted(tmp_path.rglob("*"))
    argv = [a.format(file=tmp_path / "a_file", fake=fake) for a in argv]
    assert _main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "error: " in err and "Traceback" not in err, err
    assert sorted(tmp_path.rglob("*")) == before


def test_training_into_a_finished_run_leaves_it_exactly_as_it_was(tmp_path, monkeypatch, capsys):
    """Refused because the directory holds a run: no file is added, rewritten or touched (not even its lock file)."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "matrix/climbing", *TINY, "run_dir=done", "--quiet"]) == 0

    def snapshot():
        return sorted((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (tmp_path / "done").rglob("*"))

    for copied_without_lock in (False, True):
        if copied_without_lock:  # a run copied from elsewhere, or made before locks existed
            (tmp_path / "done" / ".lock").unlink()
        before = snapshot()
        capsys.readouterr()
        assert main(["train", "matrix/climbing", *TINY, "run_dir=done", "--quiet"]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert snapshot() == before


def test_compare_with_an_unknown_metric_prints_only_the_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "matrix/climbing", *TINY, "run_dir=done", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["compare", "done", "--metric", "nope", "--out", "report"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope" in err[0]
