"""Available-action masks and dead agents, exercised through the real training path (`Experiment.collect`,
`MAPPO.evaluate`, `MAPPO.update`) on the scripted PettingZoo env: agents with different action counts (padded
actions unavailable), the runner's action 3 masked, the sprinter dead from step 2 and the walker from step 4."""

from __future__ import annotations

import copy

import pytest
import torch

from hypermappo.config import build_config
from hypermappo.experiment import Experiment

ENV = "pettingzoo:envs_for_adapter_tests:make_scripted_env"
# runner: 4 actions, action 3 masked; sprinter: 2 actions; walker: 3 actions (padded to 4)
ALLOWED = torch.tensor([[True, True, True, False], [True, True, False, False], [True, True, True, False]])
ACTORS = [["actor=mlp"], ["actor=hyper", "hyper.context=obs", "hyper.layers=last"]]


def _collected(tmp_path, overrides, perturb_hypernetwork: bool = False) -> Experiment:
    cfg = build_config(None, [f"env={ENV}", "num_envs=6", "rollout_length=8", "total_env_steps=96", "ppo.ppo_epoch=3",
                              "ppo.num_mini_batch=2", "log.tensorboard=false", "log.progress=false",
                              "checkpoint_interval=0", "torch_threads=1", "diagnostics.every=0",
                              f"run_dir={tmp_path / 'run'}", *overrides], base={"env_kwargs": {"with_state": True}})
    torch.manual_seed(0)
    exp = Experiment(cfg, quiet=True)
    if perturb_hypernetwork and hasattr(exp.actor, "hyper"):  # delta != 0, so the context reaches the policy
        with torch.no_grad():
            for p in exp.actor.hyper.parameters():
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(3)) * 0.3)
    exp._start_episodes()
    exp.actor.eval(), exp.critic.eval()
    exp.collect()
    exp.actor.train(), exp.critic.train()
    buf = exp.buffer
    assert (~buf.active).any() and buf.active.any()  # deaths happened inside the rollout
    return exp


@pytest.mark.parametrize("overrides", ACTORS, ids=lambda o: o[0])
def test_masked_actions_never_sampled_and_get_probability_zero_in_training(tmp_path, overrides):
    exp = _collected(tmp_path, overrides)
    buf = exp.buffer
    allowed = ALLOWED.expand_as(buf.available)  # [T, E, N, A]: the env's masks, independent of the buffer
    taken = torch.nn.functional.one_hot(buf.actions, 4).bool()
    assert not (taken & ~allowed)[buf.active].any(), "collect sampled a masked action"
    batch = next(iter(buf.minibatches(1)))
    out, _ = exp.algo.evaluate(batch)
    probs = out.dist.logp_all.exp()  # [T*E, N, A]
    active, allowed = batch["active"], ALLOWED.expand_as(probs)
    assert torch.equal(probs[active][~allowed[active]], torch.zeros_like(probs[active][~allowed[active]]))
    assert (probs[active][allowed[active]] > 0).all()


@pytest.mark.parametrize("overrides", ACTORS, ids=lambda o: o[0])
def test_dead_slots_contribute_no_gradient_to_the_real_update(tmp_path, overrides):
    """Two identical learners run MAPPO.update on the same rollout, except that every dead slot's observation,
    action (with every action made available), advantage, return, value and log-prob is replaced by garbage: the
    parameters must come out identical."""
    exp = _collected(tmp_path, overrides)
    clean, garbled = exp.algo, copy.deepcopy(exp.algo)
    buf = exp.buffer
    other = copy.deepcopy(buf)
    dead = ~buf.active
    g = torch.Generator().manual_seed(1)
    for name in ("obs", "advantages", "returns", "values", "logp"):
        field = getattr(other, name)
        field[dead] = torch.randn(field[dead].shape, generator=g) * 5
    other.available[dead] = True  # else a dead slot's only action (no-op) has probability 1 and no gradient anyway
    other.actions[dead] = torch.randint(4, other.actions[dead].shape, generator=g)
    before = [p.detach().clone() for p in clean.actor.parameters()]
    clean.update(buf, torch.Generator().manual_seed(2))
    garbled.update(other, torch.Generator().manual_seed(2))
    assert any(not torch.equal(p, q) for p, q in zip(clean.actor.parameters(), before))  # the update did something
    for part in ("actor", "critic"):
        for (name, a), b in zip(getattr(clean, part).named_parameters(), getattr(garbled, part).parameters()):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=lambda m, name=f"{part}.{name}": f"{name}: {m}")


@pytest.mark.parametrize("overrides", ACTORS, ids=lambda o: o[0])
def test_collection_and_training_see_the_same_policy(tmp_path, overrides):
    """Before any update, the training-time evaluate must give the stored behaviour log-probs back (ratio 1): collect
    and MAPPO.evaluate must pass the actor the same inputs (observations, action masks, alive agents)."""
    exp = _collected(tmp_path, overrides, perturb_hypernetwork=True)
    buf = exp.buffer
    batch = next(iter(buf.minibatches(1)))
    with torch.no_grad():
        out, _ = exp.algo.evaluate(batch)
        logp = out.dist.log_prob(batch["actions"])  # [T*E, N]
    active = batch["active"]
    torch.testing.assert_close(logp[active], batch["logp"][active], rtol=0, atol=1e-5)
