"""MPE simple_tag's goal labels (envs/mpe/simple_tag.py) and its scripted predators and prey (scripted_tag.py)."""

from __future__ import annotations

import pytest
import torch

from hypermappo.envs.mpe.simple_tag import SimpleTagVecEnv, goal_events
from hypermappo.envs.staghunt import StagHuntVecEnv
from hypermappo.errors import UserError
from hypermappo.policies.scripted import ScriptedContext, get_scripted

NOOP, LEFT, RIGHT, DOWN, UP = range(5)
TOUCH = 0.075 + 0.05
CHASE_0, CHASE_1, FLEE_LEFT, FLEE_RIGHT, FLEE_DOWN, FLEE_UP = range(6)


def test_goal_events_by_hand():
    """2 adversaries, 2 prey. Adversary 0 touches prey 1 after the step: chase_1. Adversary 1 moves 0.15 up: 0.05
    nearer to prey 0 (which moved 0.1 up too), farther from prey 1: chase_0. Prey 0 (adversary 1 within 0.6) moves
    0.1 up: flee_up. Prey 1 moves 0.1 left but no adversary was within 0.6 of it before the step: no label."""
    before = torch.tensor([[[0.0, 0.0], [0.5, 0.5], [0.5, 0.9], [0.9, -0.9]]])  # [E=1, A=4, 2]
    after = torch.tensor([[[0.8, -0.8], [0.5, 0.65], [0.5, 1.0], [0.8, -0.9]]])
    assert goal_events(before, after, 2, TOUCH).tolist() == [[CHASE_1, CHASE_0, FLEE_UP, -1]]
    still = goal_events(before, before, 2, TOUCH)  # nobody moved: no approach, no flight
    assert still.tolist() == [[-1, -1, -1, -1]]


def test_the_env_labels_every_step_and_starts_with_none():
    env = SimpleTagVecEnv(8, num_good=2, num_adversaries=3)
    s = env.reset(seed=0)
    assert env.spec.goal_names == ["chase_0", "chase_1", "flee_left", "flee_right", "flee_down", "flee_up"]
    assert env.spec.public_actions and (s.extras["goal_event"] == -1).all()
    labelled = torch.zeros(5)
    for t in range(30):  # across the 25-step limit: labels never mix an episode's end with the next one's start
        ctx = ScriptedContext(env, torch.arange(5), torch.Generator().manual_seed(t), {})
        s = env.step(get_scripted("tag_nearest")(s, ctx))
        e = s.extras["goal_event"]
        assert e.shape == (8, 5) and ((e[:, :3] >= -1) & (e[:, :3] <= CHASE_1)).all()
        assert ((e[:, 3:] == -1) | ((e[:, 3:] >= FLEE_LEFT) & (e[:, 3:] <= FLEE_UP))).all()
        labelled += (e >= 0).float().mean(0)
    assert (labelled > 0).all()  # every agent gets labels


def _placed(adversaries, prey, vel=None) -> tuple[SimpleTagVecEnv, object]:
    env = SimpleTagVecEnv(1, num_good=len(prey), num_adversaries=len(adversaries), num_obstacles=0)
    s = env.reset(seed=0)
    pos = torch.tensor(adversaries + prey, dtype=torch.float32)  # [A, 2]
    env.world.pos[: len(pos), :, 0] = pos
    env.world.vel.zero_()
    if vel is not None:
        env.world.vel[: len(pos), :, 0] = torch.tensor(vel, dtype=torch.float32)
    return env, s


def _act(name, env, s, slots, **params):
    ctx = ScriptedContext(env, torch.tensor(slots), torch.Generator().manual_seed(0), params)
    return get_scripted(name)(s, ctx).tolist()[0], ctx.goal.tolist()[0]


def test_predators_chase_and_prey_flee_as_their_rules_say():
    # adversary 0 at the origin; prey 0 far up (0, 0.7), prey 1 near to the right (0.3, 0)
    env, s = _placed([[0.0, 0.0], [0.0, -0.5]], [[0.0, 0.7], [0.3, 0.0]])
    assert _act("tag_nearest", env, s, [0]) == ([RIGHT], [CHASE_1])
    assert _act("tag_target", env, s, [0], target=0) == ([UP], [CHASE_0])
    # prey 1 flees its nearest adversary (adversary 0, to its left): right; prey 0 flees adversary 0 below it: up
    assert _act("tag_nearest", env, s, [3, 2]) == ([RIGHT, UP], [FLEE_RIGHT, FLEE_UP])
    # tag_target@target=1 prey: flee adversary 1 at (0, -0.5): prey 1 at (0.3, 0) moves up (dy 0.5 > dx 0.3)
    assert _act("tag_target", env, s, [3], target=1) == ([UP], [FLEE_UP])


def test_an_interceptor_aims_ahead_of_a_moving_prey_and_prey_keep_off_the_walls():
    # prey straight up at (0, 0.3) but running right fast (vel 1.0): the interceptor aims at (0.5, 0.3): right
    env, s = _placed([[0.0, 0.0]], [[0.0, 0.3]], vel=[[0.0, 0.0], [1.0, 0.0]])
    assert _act("tag_nearest", env, s, [0])[0] == [UP]
    assert _act("tag_intercept", env, s, [0])[0] == [RIGHT]
    # a prey at the right wall with the adversary to its left: fleeing right would cost it; the wall pulls it back
    env, s = _placed([[0.85, 0.0]], [[0.98, 0.1]])
    assert _act("tag_nearest", env, s, [1])[0] != [RIGHT]


def test_tag_rules_refuse_other_envs():
    env = StagHuntVecEnv(2)
    with pytest.raises(UserError, match="'tag_nearest' plays MPE simple_tag"):
        get_scripted("tag_nearest")(env.reset(seed=0), ScriptedContext(env, torch.tensor([0]), torch.Generator()))
