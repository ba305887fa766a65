"""OMG's subgoal model (models/coplayer_subgoal.py, algos/coplayer_subgoal.py): the subgoal a co-player's future
states and the learner's values choose, the hit ratio, the KL, the pre-trained and then frozen state VAE, what the
policy reads, exact resume, evaluation."""

from __future__ import annotations

import csv
import dataclasses
import json

import pytest
import torch
from test_resume import TINY, assert_same, resume_matches_uninterrupted

from hypermappo import config as config_mod
from hypermappo.algos.coplayer_subgoal import hit_ratio, select_mode, select_subgoals
from hypermappo.errors import UserError
from hypermappo.experiment import Experiment
from hypermappo.models.coplayer_subgoal import kl_gaussians

ON = ["coplayer.enabled=true", "coplayer.model=subgoal", "coplayer.hidden=16", "coplayer.subgoal_latent=4",
      "model.hidden_sizes=[16,16]"]
PARTNER = ("groups=[{name: me, agents: [0]}, {name: other, agents: [1], kind: scripted, "
           "policy: staghunt_stag}]")


def _cfg(extra=(), steps: int = 160, envs: int = 4):
    tiny = [o for o in TINY if not o.startswith("num_envs=")]
    return config_mod.build_config("staghunt/default", [*tiny, f"num_envs={envs}", f"total_env_steps={steps}", *extra])


def _rows(run_dir) -> list[dict]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return list(csv.DictReader(f))


# --------------------------------------------------------------------------- the subgoal, the hit ratio, the KL


def test_the_subgoal_is_the_most_or_least_valued_of_the_next_h_states_in_the_same_episode():
    T = 6
    obs = torch.arange(T, dtype=torch.float).view(T, 1, 1, 1).repeat(1, 1, 2, 1)  # [T, E=1, N=2, D=1]: obs = t
    obs[:, :, 1] += 100  # slot 1's states differ: the same step is picked for both
    values = torch.tensor([0.0, 5.0, 1.0, 3.0, 9.0, 2.0]).view(T, 1)
    end = torch.tensor([0, 0, 1, 0, 0, 0], dtype=torch.bool).view(T, 1)  # the episode ends after step 2
    target, valid, offset = select_subgoals(obs, values, end, horizon=2, mode="optimistic")
    # t=0: steps 1, 2 (values 5, 1) -> 1; t=1: step 2 only (3 is the next episode) -> 2; t=2: none (it ended);
    # t=3: steps 4, 5 (9, 2) -> 4; t=4: step 5 -> 5; t=5: none (the rollout ends)
    assert valid.flatten().tolist() == [True, True, False, True, True, False]
    assert target[valid.flatten(), 0, 0, 0].tolist() == [1.0, 2.0, 4.0, 5.0]
    assert target[valid.flatten(), 0, 1, 0].tolist() == [101.0, 102.0, 104.0, 105.0]
    assert offset[valid].tolist() == [1, 1, 1, 1]
    target, valid, _ = select_subgoals(obs, values, end, horizon=2, mode="conservative")
    assert target[valid.flatten(), 0, 0, 0].tolist() == [2.0, 2.0, 5.0, 5.0]
    # a wider window reaches further, never across the episode's end
    target, valid, _ = select_subgoals(obs, values, end, horizon=5, mode="optimistic")
    assert target[valid.flatten(), 0, 0, 0].tolist() == [1.0, 2.0, 4.0, 5.0]


def test_subgoal_selection_follows_the_envs_reward_unless_set():
    team = dataclasses.make_dataclass("S", [("team_reward", bool)])
    assert select_mode("auto", team(True)) == "optimistic" and select_mode("auto", team(False)) == "conservative"
    assert select_mode("optimistic", team(False)) == "optimistic"


def test_a_hit_names_a_state_the_coplayer_goes_to_rather_than_one_it_is_or_was_in():
    T = 4
    obs = torch.tensor([0.0, 1.0, 1.0, 2.0]).view(T, 1, 1, 1)  # [T, E, N=1, D=1]: it moves, stays, moves
    end = torch.zeros(T, 1, dtype=torch.bool)
    mask = torch.ones(T, 1, 1, 1, dtype=torch.bool)  # [T, E, K=1, N=1]
    mask[3] = False  # no future at the rollout's last step
    pred = torch.tensor([0.9, 1.8, 0.2, 0.0]).view(T, 1, 1, 1, 1)
    # t=0: 0.9 is nearer 1 (ahead) than 0 (now): hit; t=1: 1.8 is nearer 2 (t=3) than 0 (before; 1, where it is,
    # is no rival: it stays there, so 1 is also where it goes): hit; t=2: 0.2 is nearer 1 (now) than 2 (ahead): miss
    assert hit_ratio(pred, obs, end, 2, mask) == pytest.approx(2 / 3)
    # H = 1: at t=1 only 1 (t=2) is ahead, and the only rival is 0: a hit; t=2 still a miss
    assert hit_ratio(pred, obs, end, 1, mask) == pytest.approx(2 / 3)
    pred[1] = 0.4  # nearer 0 (t=0, one step back) than 1 (ahead): a miss with either H
    assert hit_ratio(pred, obs, end, 2, mask) == pytest.approx(1 / 3)
    assert hit_ratio(pred, obs, end, 0 + 1, mask) == pytest.approx(1 / 3)
    pred[1] = 1.8
    now = obs.unsqueeze(2)  # copying the present hits where it stays: t=1 (1 -> 1) only
    assert hit_ratio(now, obs, end, 2, mask) == pytest.approx(1 / 3)
    end[0] = True  # step 1 starts another episode: t=0 has no future in its episode, t=1 no past before it
    pred[1] = 0.4  # near 0, but 0 (t=0) is the last episode's: no rival left at t=1, so any reachable state hits
    assert hit_ratio(pred, obs, end, 2, mask) == pytest.approx(1 / 3)


def test_kl_of_two_gaussians_is_torchs():
    g = torch.Generator().manual_seed(0)
    mq, lq, mp, lp = (torch.randn(5, 3, generator=g) for _ in range(4))
    want = torch.distributions.kl_divergence(torch.distributions.Normal(mq, (0.5 * lq).exp()),
                                             torch.distributions.Normal(mp, (0.5 * lp).exp())).sum(-1)
    assert torch.allclose(kl_gaussians(mq, lq, mp, lp), want, atol=1e-5)


# --------------------------------------------------------------------------- training


def test_the_state_vae_pretrains_on_the_first_rollouts_then_stays_frozen_while_the_cvae_trains(tmp_path):
    exp = Experiment(_cfg([*ON, "coplayer.prior_updates=2", "coplayer.epochs=2"]), tmp_path / "run", quiet=True)
    cp = exp.groups[0].learner.coplayer
    snaps = []

    def snapshot(update=cp.update):
        out = update()
        snaps.append({k: v.clone() for k, v in cp.model.state_dict().items()})
        return out

    cp.update = snapshot
    init = {k: v.clone() for k, v in cp.model.state_dict().items()}
    exp.run()  # 4 updates
    prior = [k for k in init if k.startswith("prior_")]
    cvae = [k for k in init if k.startswith(("infer", "decoder", "gru", "encoder"))]
    assert prior and cvae and len(snaps) == 4
    assert all(not torch.equal(init[k], snaps[1][k]) for k in prior)  # trained in updates 1-2
    assert all(torch.equal(snaps[1][k], snaps[3][k]) for k in prior)  # frozen after
    assert all(not torch.equal(snaps[1][k], snaps[3][k]) for k in cvae if "encoder.0" not in k)  # still training
    rows = _rows(tmp_path / "run")
    assert [bool(r["coplayer_prior_loss"]) for r in rows] == [True, True, False, False]
    for r in rows:
        assert 0.0 <= float(r["coplayer_subgoal_hit"]) <= 1.0 and float(r["coplayer_subgoal_labelled"]) > 0.5
    audit = json.loads((tmp_path / "run" / "summary.json").read_text())["audit"]
    assert audit["passed"], audit


def test_the_cvae_learns_the_subgoal_its_history_reveals_and_hits_far_above_chance(tmp_path):
    """A rollout where the learner's own observation at t shows the co-player's state at t + 1 (a one-hot cell):
    with H = 1 the subgoal is that state, so the CVAE must carry it through its latent; its hit ratio climbs from
    chance to nearly every step, and a random guess stays at chance."""
    exp = Experiment(_cfg([*ON, "coplayer.subgoal_horizon=1", "coplayer.lr=0.01", "coplayer.epochs=4",
                           "coplayer.prior_updates=1"]), tmp_path / "run", quiet=True)
    cp = exp.groups[0].learner.coplayer
    T, E, N, D = cp.T, cp.E, cp.N, cp.D
    g = torch.Generator().manual_seed(0)
    assert cp.K == N == 2  # both hunters learn: each one's co-player is the other
    cells = torch.randint(8, (T + 1, E, N), generator=g)
    cp.obs_all.copy_(torch.nn.functional.one_hot(cells[:T], D).float())  # every slot's state: its cell
    cp.obs.copy_(torch.nn.functional.one_hot(cells[1:].flip(-1), D).float())  # each sees where the other goes next
    cp.active_all.fill_(True)
    cp.episode_end.fill_(False)
    cp.new_episode.fill_(False)
    cp.reset.fill_(False)
    cp.h0.zero_()
    cp.bind_values(torch.zeros(T, E, cp.K))
    first = cp.update()
    for _ in range(40):
        last = cp.update()
    assert first["coplayer_subgoal_hit"] < 0.5 and last["coplayer_subgoal_hit_chance"] < 0.5
    assert last["coplayer_subgoal_hit"] > 0.95, last
    assert last["coplayer_subgoal_hit_now"] < 0.5  # the cell changes every step: copying the present does not hit
    assert last["coplayer_subgoal_recon"] < first["coplayer_subgoal_recon"] / 10


def test_a_non_finite_subgoal_loss_stops_the_update_with_one_line_naming_it(tmp_path):
    from hypermappo.errors import NonFiniteError

    exp = Experiment(_cfg([*ON, "diagnostics.audit_updates=0", "coplayer.prior_updates=1"]), tmp_path / "run",
                     quiet=True)
    exp._start_episodes()
    exp.collect()
    cp = exp.groups[0].learner.coplayer
    cp.update()  # finite, and the prior is frozen from here on
    with torch.no_grad():
        cp.model.decoder[-1].bias.fill_(float("nan"))
    exp.collect()
    with pytest.raises(NonFiniteError, match=r"^non-finite co-player subgoal loss in co-player step 1 \(subgoal\)$"):
        cp.update()


def test_the_policy_reads_every_slots_inferred_subgoal_and_only_the_learners_own_observations(tmp_path):
    exp = Experiment(_cfg([*ON, "coplayer.feed=policy"]), tmp_path / "run", quiet=True)
    exp._start_episodes()
    g, s, D = exp.groups[0], exp.last, exp.spec.obs_dim
    other = dataclasses.replace(s, obs=s.obs.clone())
    other.obs[:, 1] += torch.randn(other.obs[:, 1].shape, generator=torch.Generator().manual_seed(3))
    fed = []
    for step in (s, other):
        g.start(step)
        exp._learner_act(g, step, 0)
        fed.append(g.learner.buffer.obs[0, :, :, D:].clone())  # [E, K, N * Z]
    cp = g.learner.coplayer
    assert fed[1].shape[-1] == exp.spec.num_agents * 4
    assert torch.equal(fed[1], cp.model.posterior(cp.memory)[0].flatten(-2))  # q's means, every slot's
    assert torch.equal(fed[0][:, 0], fed[1][:, 0]) and not torch.allclose(fed[0][:, 1], fed[1][:, 1])


def test_resume_of_a_fed_subgoal_run_equals_the_uninterrupted_run(tmp_path):
    resume_matches_uninterrupted(tmp_path, "staghunt/default", [*ON, "coplayer.feed=policy", "coplayer.prior_updates=3"])
    got = torch.load(tmp_path / "resumed" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    want = torch.load(tmp_path / "full" / "checkpoints" / "ckpt_0000004.pt", weights_only=False)
    assert_same(got["coplayer"], want["coplayer"], "coplayer")


def test_eval_of_a_fed_subgoal_run_plays_as_training_evaluated_it(tmp_path, capsys):
    from hypermappo.cli import main

    run = tmp_path / "run"
    summary = Experiment(_cfg([*ON, "coplayer.feed=policy"]), run, quiet=True).run()
    assert main(["eval", str(run), "--episodes", "4", "--quiet"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)


def test_held_out_evaluation_of_a_subgoal_run_reports_its_hit_ratio_per_episode_beside_chance(tmp_path):
    from hypermappo.adaptation import adapt

    run = tmp_path / "run"
    Experiment(_cfg([*ON, "coplayer.feed=policy", PARTNER]), run, quiet=True).run()
    report = adapt(run, ["scripted:staghunt_stag@path=cols"], episodes=3, num_envs=8, memory=(True,), held_out=True)
    (r,) = report["results"]
    hit = r["subgoal_hit"]
    assert len(hit["by_episode"]) == len(hit["chance_by_episode"]) == len(hit["now_by_episode"]) == 3
    assert "action_accuracy" not in r
    assert all(0.0 <= v <= 1.0 for v in [*hit["by_episode"], *hit["chance_by_episode"]])
    assert hit["overall"] == pytest.approx(sum(hit["by_episode"]) / 3)


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize("overrides, expected", [
    (["coplayer.enabled=true", "coplayer.subgoal_latent=4"],
     r"coplayer.subgoal_latent=4 has no effect: it is read by coplayer.model=subgoal, got coplayer.model='bayes'"),
    (["coplayer.enabled=true", "coplayer.model=subgoal", "coplayer.action_weight=2"],
     r"coplayer.action_weight=2.0 has no effect: coplayer.model=subgoal predicts subgoals, not actions"),
    (["coplayer.enabled=true", "coplayer.model=subgoal", "coplayer.subgoal_select=greedy"],
     r"coplayer.subgoal_select: 'greedy' is not one of"),
    (["coplayer.enabled=true", "coplayer.model=subgoal", "coplayer.prior_updates=0"], r"coplayer.prior_updates"),
])
def test_subgoal_config_mistakes_are_one_line_errors(overrides, expected):
    with pytest.raises(UserError, match=expected):
        config_mod.build_config("staghunt/default", overrides)
