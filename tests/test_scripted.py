"""Env-specific scripted policies do what their names say, on hand-built states, batched over envs and slots."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hypermappo.envs.matrix import MatrixGameVecEnv
from hypermappo.envs.mpe_torch import SimpleSpreadVecEnv
from hypermappo.envs.staghunt import StagHuntVecEnv
from hypermappo.errors import UserError
from hypermappo.policies.scripted import ScriptedContext, get_scripted

STAY, UP, DOWN, LEFT, RIGHT = range(5)


def act(name: str, env, step, slots, seed: int = 0, **params) -> torch.Tensor:
    ctx = ScriptedContext(env, torch.tensor(slots), torch.Generator().manual_seed(seed), params)
    return get_scripted(name)(step, ctx)


def staghunt(hunters, prey, alive=None, **kwargs) -> tuple[StagHuntVecEnv, object]:
    """An env whose state is the given positions: hunters [E, H, 2], prey [E, P, 2] (stags first)."""
    hunters, prey = torch.tensor(hunters), torch.tensor(prey)
    env = StagHuntVecEnv(hunters.shape[0], n_hunters=hunters.shape[1], **kwargs)
    step = env.reset(seed=0)
    env.hunters, env.prey = hunters, prey
    if alive is not None:
        env.prey_alive = torch.tensor(alive)
    return env, step


def test_staghunt_hare_walks_to_the_nearest_hare():
    # env 0: hunter 0 one cell left of a hare -> right; hunter 1 one cell below the other hare -> up
    # env 1: the near hare is gone, so hunter 0 walks to the far one (down); hunter 1 is on a hare -> stays
    env, step = staghunt([[[2, 1], [4, 4]], [[0, 0], [3, 3]]],
                         [[[0, 4], [2, 2], [3, 4]], [[4, 0], [0, 1], [3, 3]]],
                         alive=[[True, True, True], [True, False, True]])
    assert act("staghunt_hare", env, step, [0, 1]).tolist() == [[RIGHT, UP], [DOWN, STAY]]
    assert act("staghunt_hare", env, step, [1]).tolist() == [[UP], [STAY]]  # slots pick the hunters


def test_staghunt_stag_team_catches_the_stag_after_k_steps():
    # hunters in opposite corners, the stag in the middle: 4 moves each, the catch pays 10 at step 4
    env, step = staghunt([[[0, 0], [4, 4]]], [[[2, 2], [0, 4], [4, 0]]])
    rewards = []
    for _ in range(4):
        step = env.step(act("staghunt_stag", env, step, [0, 1]))
        rewards.append(float(step.reward[0, 0]))
    assert rewards == [0.0, 0.0, 0.0, 10.0]
    assert int(step.extras["stag_captures"][0]) == 1


def test_staghunt_stag_waits_on_the_stag_for_its_partner():
    env, step = staghunt([[[2, 2], [0, 2]]], [[[2, 2], [4, 4], [4, 0]]])
    assert act("staghunt_stag", env, step, [0, 1]).tolist() == [[STAY, DOWN]]


def test_staghunt_follow_walks_to_the_nearest_other_hunter():
    env, step = staghunt([[[0, 0], [0, 3], [4, 4]]], [[[2, 2], [1, 4], [4, 0]]])
    assert act("staghunt_follow", env, step, [0, 1, 2]).tolist() == [[RIGHT, LEFT, UP]]


def test_spread_goes_to_the_nearest_landmark_no_other_agent_is_nearer_to():
    # agent 1 is nearer to landmark A (x=0.5) than agent 0, so agent 0 takes B (x=-1) although A is nearer to it
    env = SimpleSpreadVecEnv(1, N=2)
    step = env.set_world(agent_pos=[[[0.0, 0.0], [0.1, 0.0]]], agent_vel=[[[0.0, 0.0], [0.0, 0.0]]],
                         landmark_pos=[[[0.5, 0.0], [-1.0, 0.0]]])
    assert act("spread_nearest_landmark", env, step, [0, 1]).tolist() == [[1, 2]]  # -x, +x
    # on a landmark and at rest: no-op; moving fast towards it: brake (the opposite push)
    step = env.set_world(agent_pos=[[[0.5, 0.0], [-1.0, 0.3]]], agent_vel=[[[0.0, 0.0], [0.0, -1.0]]],
                         landmark_pos=[[[0.5, 0.0], [-1.0, 0.0]]])
    assert act("spread_nearest_landmark", env, step, [0, 1]).tolist() == [[0, 4]]


def test_spread_rule_reaches_the_heuristic_return():
    """200 episodes: the greedy rule scores -10.0 (the Hungarian-assignment heuristic -9.2, random -27)."""
    env = SimpleSpreadVecEnv(200)
    step = env.reset(seed=0)
    ctx = ScriptedContext(env, torch.arange(3), torch.Generator().manual_seed(0))
    for _ in range(25):
        step = env.step(get_scripted("spread_nearest_landmark")(step, ctx))
    assert step.episode_done.all()
    assert float(step.episode_return.mean()) > -10.5


def test_matrix_mixed_frequencies_match_probs_and_follow_the_generator():
    env = MatrixGameVecEnv("stag_hunt", 4000, torch.device("cpu"))
    step = env.reset()
    a = act("matrix_mixed", env, step, [0, 1], seed=1, probs=[0.3, 0.7])
    assert a.shape == (4000, 2)
    assert abs(float(a.float().mean()) - 0.7) < 0.02
    assert torch.equal(a, act("matrix_mixed", env, step, [0, 1], seed=1, probs=[0.3, 0.7]))  # same seed, same draws
    assert not torch.equal(a, act("matrix_mixed", env, step, [0, 1], seed=2, probs=[0.3, 0.7]))
    with pytest.raises(UserError, match=r"probs=\[0.5, 0.6\] is invalid; expected 2 non-negative numbers summing to 1"):
        act("matrix_mixed", env, step, [0], probs=[0.5, 0.6])


@pytest.mark.parametrize("name", ["staghunt_hare", "staghunt_stag", "staghunt_follow"])
def test_dead_slots_take_the_noop(name):
    env, step = staghunt([[[0, 0], [4, 4]]], [[[2, 2], [0, 4], [4, 0]]])
    assert (act(name, env, step, [0, 1]) != 0).all()
    dead = dataclasses.replace(step, active=torch.tensor([[False, True]]))
    out = act(name, env, dead, [0, 1])
    assert out[0, 0] == 0 and out[0, 1] != 0


def test_spread_and_matrix_dead_slots_take_the_noop():
    env = SimpleSpreadVecEnv(1, N=2)
    step = env.set_world(agent_pos=[[[0.0, 0.0], [0.1, 0.0]]], agent_vel=[[[0.0, 0.0], [0.0, 0.0]]],
                         landmark_pos=[[[0.5, 0.0], [-1.0, 0.0]]])
    assert act("spread_nearest_landmark", env, dataclasses.replace(step, active=torch.tensor([[True, False]])),
               [0, 1]).tolist() == [[1, 0]]
    env = MatrixGameVecEnv("stag_hunt", 3, torch.device("cpu"))
    step = dataclasses.replace(env.reset(), active=torch.tensor([[False, True]] * 3))
    assert act("matrix_mixed", env, step, [0, 1], probs=[0.0, 1.0]).tolist() == [[0, 1]] * 3


@pytest.mark.parametrize("name,env", [
    ("staghunt_stag", lambda: MatrixGameVecEnv("stag_hunt", 1, torch.device("cpu"))),
    ("spread_nearest_landmark", lambda: StagHuntVecEnv(1)),
    ("matrix_mixed", lambda: SimpleSpreadVecEnv(1)),
])
def test_a_rule_on_the_wrong_env_is_a_one_line_user_error(name, env):
    e = env()
    with pytest.raises(UserError, match=rf"^scripted policy '{name}' plays .*; this env is {type(e).__name__}$"):
        act(name, e, e.reset(seed=0), [0], probs=[0.5, 0.5])


def test_spread_rule_refuses_continuous_actions():
    env = SimpleSpreadVecEnv(1, continuous_actions=True)
    with pytest.raises(UserError, match="needs discrete actions"):
        act("spread_nearest_landmark", env, env.reset(seed=0), [0])
