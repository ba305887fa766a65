"""Tests of the batched stag-hunt gridworld and its PettingZoo wrapper."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from hypermappo.envs.contract import random_actions, run_random
from hypermappo.envs.registry import make_env
from hypermappo.envs.staghunt import StagHuntParallelEnv, StagHuntVecEnv
from hypermappo.errors import UserError

STAY, UP, DOWN, LEFT, RIGHT = range(5)


def place(env: StagHuntVecEnv, hunters, stags, hares, t=None):
    """Put one env (E=1) into a chosen position via set_state."""
    state = env.get_state()
    state["hunters"] = torch.tensor([hunters])
    state["prey"] = torch.tensor([stags + hares])
    state["prey_alive"] = torch.ones(1, len(stags) + len(hares), dtype=torch.bool)
    if t is not None:
        state["t"] = torch.tensor([t])
    env.set_state(state)


def act(env: StagHuntVecEnv, *actions):
    return env.step(torch.tensor([list(actions)]))


@pytest.mark.parametrize("observation", ["full", "partial"])
def test_contract_with_auto_reset(observation):
    env = make_env("staghunt", 4, observation=observation, stag_move_prob=0.3)
    steps = run_random(env, 60, seed=3)
    assert any(s.episode_done.any() for s in steps[1:]), "episodes of 25 steps must have ended in 60 steps"
    space = env.spec.observation_space
    for s in steps:
        assert (s.obs >= torch.as_tensor(space.low)).all() and (s.obs <= torch.as_tensor(space.high)).all()
    ended = [s for s in steps[1:] if s.episode_done.any()]
    assert all((s.episode_length[s.episode_done] == 25).all() for s in ended)
    assert all(s.extras["stag_captures"].dtype == torch.long for s in ended)


def test_parallel_api_and_render():
    env = StagHuntParallelEnv(render_mode="rgb_array", observation="partial")
    parallel_api_test(env, num_cycles=1000)
    obs, _ = env.reset(seed=1)
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())
    frame = env.render()
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8
    for _ in range(25):
        obs, rew, _term, trunc, info = env.step({a: env.action_space(a).sample() for a in env.agents})
        assert all(env.observation_space(a).contains(o) for a, o in obs.items())
        assert set(rew) == set(env.possible_agents)
    assert all(trunc.values()) and env.agents == []
    assert set(info["hunter_0"]) == {"stag_captures", "hare_captures", "goal_event"}


def test_parallel_env_seeding_is_reproducible():
    def rollout(seed):
        env = StagHuntParallelEnv(stag_move_prob=0.5)
        obs, _ = env.reset(seed=seed)
        out = [obs["hunter_0"]]
        for step in range(30):
            if not env.agents:
                obs, _ = env.reset()
            obs, *_ = env.step({a: (step + i) % 5 for i, a in enumerate(env.agents)})
            out.append(obs["hunter_0"])
        return np.stack(out)

    np.testing.assert_array_equal(rollout(5), rollout(5))
    assert rollout(5)[25, -1] == 1.0, "the last observation of an episode is its final one (elapsed = 1)"
    assert not np.array_equal(rollout(5), rollout(6))


def test_batch_equals_separate_envs_with_env_offset():
    kwargs = {"stag_move_prob": 0.4, "n_hunters": 3, "n_hares": 3, "episode_length": 10}
    batched = StagHuntVecEnv(4, **kwargs)
    singles = [StagHuntVecEnv(1, env_offset=i, **kwargs) for i in range(4)]
    batched.reset(seed=11)
    for single in singles:
        single.reset(seed=11)
    # desynchronise the episodes so that auto-resets happen in some envs of the batch, not all
    offsets = [0, 3, 6, 9]
    state = batched.get_state()
    state["t"] = state["tracker"]["lengths"] = torch.tensor(offsets)
    batched.set_state(state)
    for single, offset in zip(singles, offsets):
        state = single.get_state()
        state["t"] = state["tracker"]["lengths"] = torch.tensor([offset])
        single.set_state(state)
    s = batched.step(torch.zeros(4, 3, dtype=torch.long))
    ss = [single.step(torch.zeros(1, 3, dtype=torch.long)) for single in singles]
    g = torch.Generator().manual_seed(0)
    captures = partial_resets = 0
    for _ in range(40):
        torch.testing.assert_close(s.obs, torch.cat([x.obs for x in ss]), rtol=0, atol=0)
        actions = random_actions(batched, s, g)
        s = batched.step(actions)
        ss = [single.step(actions[i:i + 1]) for i, single in enumerate(singles)]
        for name in ("reward", "done", "state", "final_obs"):
            assert torch.equal(getattr(s, name), torch.cat([getattr(x, name) for x in ss])), name
        captures += int(s.reward.ne(0).any(-1).sum())
        partial_resets += int(s.episode_done.any() and not s.episode_done.all())
    assert captures > 0, "the comparison should include steps with captures and respawns"
    assert partial_resets > 0, "the comparison should include auto-resets of some envs only"
    assert len({tuple(k) for k in s.obs[:, 0, :2].tolist()}) > 1, "envs of a batch must differ"


def test_stag_caught_by_two_hunters_pays_and_respawns():
    env = StagHuntVecEnv(1)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [2, 1]], stags=[[2, 2]], hares=[[0, 0], [4, 4]])
    s = act(env, DOWN, RIGHT)
    assert s.reward.tolist() == [[10.0, 10.0]]
    stag = env.prey[0, 0].tolist()
    assert stag != [2, 2] and stag not in ([0, 0], [4, 4]), "stag respawns on a free cell"
    for _ in range(24):
        s = act(env, STAY, STAY)
    assert s.episode_done.item() and s.extras["stag_captures"].item() == 1 and s.extras["hare_captures"].item() == 0
    assert s.episode_return.item() == pytest.approx(10.0)


def test_individual_rewards_go_to_the_catching_hunters():
    env = StagHuntVecEnv(1, n_hunters=3, shared_reward=False, step_penalty=0.5)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [2, 1], [4, 0]], stags=[[2, 2]], hares=[[4, 1], [0, 4]])
    s = act(env, DOWN, RIGHT, RIGHT)
    assert s.reward.tolist() == [[9.5, 9.5, 0.5]]


def test_respawn_lands_on_free_cells_only():
    env = StagHuntVecEnv(256)
    env.reset(seed=0)
    state = env.get_state()
    state["hunters"] = torch.tensor([[1, 2], [2, 1]]).expand(256, 2, 2).clone()
    state["prey"] = torch.tensor([[2, 2], [0, 0], [4, 4]]).expand(256, 3, 2).clone()
    env.set_state(state)
    s = env.step(torch.tensor([[DOWN, RIGHT]]).expand(256, 2))
    assert (s.reward == 10).all()
    stags = [tuple(p) for p in env.prey[:, 0].tolist()]
    assert not {(2, 2), (0, 0), (4, 4)} & set(stags), "a respawned stag never lands on a hunter or a hare"
    assert len(set(stags)) == 22, "it can land on any of the 25 - 3 free cells"


def test_stags_wander_with_stag_move_prob():
    env = StagHuntVecEnv(512, stag_move_prob=0.5)
    env.reset(seed=0)
    state = env.get_state()
    state["hunters"] = torch.tensor([[0, 0], [0, 1]]).expand(512, 2, 2).clone()
    state["prey"] = torch.tensor([[2, 2], [4, 0], [4, 4]]).expand(512, 3, 2).clone()
    env.set_state(state)
    env.step(torch.zeros(512, 2, dtype=torch.long))
    distance = (env.prey[:, 0] - torch.tensor([2, 2])).abs().sum(-1)  # [E]
    assert set(distance.tolist()) == {0, 1}, "a stag moves at most one cell per step"
    assert 0.4 < distance.float().mean().item() < 0.6
    assert len({tuple(p) for p in env.prey[:, 0].tolist()}) == 5, "it stays or goes up, down, left or right"
    assert (env.prey[:, 1:] == torch.tensor([[4, 0], [4, 4]])).all(), "hares never move"


def test_single_hunter_cannot_catch_a_stag():
    env = StagHuntVecEnv(1, stag_min_hunters=2)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [4, 4]], stags=[[2, 2]], hares=[[0, 0], [4, 0]])
    s = act(env, DOWN, STAY)
    assert s.reward.tolist() == [[0.0, 0.0]]
    assert env.prey[0, 0].tolist() == [2, 2] and env.stag_captures.item() == 0
    s = act(env, STAY, STAY)  # standing on it longer does not help either
    assert s.reward.tolist() == [[0.0, 0.0]]


def test_hare_caught_by_one_hunter():
    env = StagHuntVecEnv(1, shared_reward=False)
    env.reset(seed=0)
    place(env, hunters=[[0, 1], [4, 4]], stags=[[2, 2]], hares=[[0, 0], [3, 3]])
    s = act(env, LEFT, STAY)
    assert s.reward.tolist() == [[1.0, 0.0]]
    assert env.hare_captures.item() == 1 and env.prey[0, 1].tolist() != [0, 0]
    assert env.prey[0, 2].tolist() == [3, 3], "the other hare stays put"


def test_without_respawn_prey_disappears_and_episode_terminates():
    env = StagHuntVecEnv(1, n_hares=1, respawn=False)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [2, 1]], stags=[[2, 2]], hares=[[2, 3]])
    s = act(env, DOWN, RIGHT)
    assert s.reward.tolist() == [[10.0, 10.0]] and not s.terminated.item()
    assert env.prey_alive.tolist() == [[False, True]]
    assert (s.state[0, 4:6] == 0).all(), "a caught stag's position reads zero"
    s = act(env, STAY, STAY)  # both hunters are on the stag's old cell; the stag is gone
    assert s.reward.tolist() == [[0.0, 0.0]]
    s = act(env, RIGHT, STAY)
    assert s.reward.tolist() == [[1.0, 1.0]] and s.terminated.item() and not s.truncated.item()
    assert s.episode_length.item() == 3 and env.prey_alive.all(), "auto-reset brings the prey back"


def test_envs_auto_reset_independently():
    env = StagHuntVecEnv(3, episode_length=10)
    env.reset(seed=0)
    state = env.get_state()
    state["t"] = torch.tensor([0, 4, 9])
    state["tracker"]["lengths"] = torch.tensor([0, 4, 9])
    env.set_state(state)
    before = env.hunters.clone()
    s = env.step(torch.zeros(3, 2, dtype=torch.long))
    assert s.episode_done.tolist() == [False, False, True] and s.truncated.tolist() == [False, False, True]
    assert s.done.tolist() == [[False, False], [False, False], [True, True]]
    assert torch.equal(env.hunters[:2], before[:2]), "the other envs are untouched"
    assert torch.equal(s.final_obs[:2], s.obs[:2]) and not torch.equal(s.final_obs[2], s.obs[2])
    assert env.t.tolist() == [1, 5, 0] and s.obs[2, 0, -1].item() == 0.0
    for _ in range(5):
        s = env.step(torch.zeros(3, 2, dtype=torch.long))
    assert s.episode_done.tolist() == [False, True, False] and s.episode_length[1].item() == 10


def test_seeding_is_reproducible():
    def trajectory(seed):
        env = StagHuntVecEnv(8, stag_move_prob=0.5)
        return torch.stack([s.state for s in run_random(env, 40, seed=seed)])

    assert torch.equal(trajectory(1), trajectory(1))
    assert not torch.equal(trajectory(1)[0], trajectory(2)[0])


def test_state_round_trip_continues_identically():
    env = StagHuntVecEnv(6, stag_move_prob=0.5, observation="partial", episode_length=7)
    g = torch.Generator().manual_seed(0)
    s = env.reset(seed=4)
    for _ in range(5):
        s = env.step(random_actions(env, s, g))
    saved, saved_step = env.get_state(), s
    actions = [torch.randint(0, 5, (6, 2), generator=g) for _ in range(20)]
    first = [env.step(a) for a in actions]

    other = StagHuntVecEnv(6, stag_move_prob=0.5, observation="partial", episode_length=7)
    other.set_state(saved)
    torch.testing.assert_close(other.observe()[0], saved_step.obs, rtol=0, atol=0)
    second = [other.step(a) for a in actions]
    for a, b in zip(first, second):
        for name in ("obs", "state", "reward", "done", "episode_return", "episode_length"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert torch.equal(a.extras["stag_captures"], b.extras["stag_captures"])


def test_partial_observation_window():
    env = StagHuntVecEnv(1, observation="partial", view_radius=1)
    env.reset(seed=0)
    place(env, hunters=[[0, 0], [1, 1]], stags=[[0, 1]], hares=[[1, 0], [4, 4]])
    obs, _ = env.observe()
    window = obs[0, 0, 5:].view(4, 3, 3)  # after own position (2), id (2), elapsed (1)
    hunters, stags, hares, outside = window
    assert hunters.tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 1]], "sees the other hunter, not itself"
    assert stags.tolist() == [[0, 0, 0], [0, 0, 1], [0, 0, 0]]
    assert hares.tolist() == [[0, 0, 0], [0, 0, 0], [0, 1, 0]]
    assert outside.tolist() == [[1, 1, 1], [1, 0, 0], [1, 0, 0]]


def test_render_frame():
    env = StagHuntVecEnv(2, grid_size=6, n_hunters=4)
    env.reset(seed=0)
    frame = env.render(1)
    assert frame.shape == (6 * 32, 6 * 32, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 6, "background, lines, stag, hare and hunters"
    s = env.step(torch.zeros(2, 4, dtype=torch.long))
    np.testing.assert_array_equal(env.frame_from_state(s.state[1]), env.render(1))


def test_parallel_env_renders_the_final_state_at_episode_end():
    env = StagHuntParallelEnv(render_mode="rgb_array", episode_length=3)
    env.reset(seed=0)
    env.step({a: STAY for a in env.agents})
    before_end = env.render()
    env.step({a: STAY for a in env.agents})
    _, rewards, *_ = env.step({a: STAY for a in env.agents})
    assert env.agents == [] and sum(rewards.values()) == 0
    np.testing.assert_array_equal(env.render(), before_end)


@pytest.mark.parametrize("kwargs, words", [
    ({"grid_size": 2, "n_hunters": 3}, "fit on a 2x2 grid"),
    ({"stag_min_hunters": 3}, "stag_min_hunters=3"),
    ({"observation": "egocentric"}, "observation='egocentric'"),
    ({"stag_move_prob": 1.5}, "stag_move_prob=1.5"),
    ({"n_stags": 0, "n_hares": 0}, "at least one"),
    ({"episode_length": 0}, "episode_length=0"),
    ({"shared_reward": "yes"}, "shared_reward='yes'"),
    ({"colour": "red"}, "no argument"),
])
def test_bad_kwargs_raise_user_error(kwargs, words):
    with pytest.raises(UserError, match=words):
        make_env("staghunt", 2, **kwargs)


# ------------------------------------------------------------------ goal labels
STAG, HARE, HUNTER = 0, 1, 2


def test_goal_event_fires_exactly_for_the_hunters_on_caught_prey():
    env = StagHuntVecEnv(1, n_hunters=3)
    s = env.reset(seed=0)
    assert env.spec.goal_names == ["stag", "hare", "hunter"]
    assert s.extras["goal_event"].tolist() == [[-1, -1, -1]]
    place(env, hunters=[[1, 2], [2, 1], [4, 1]], stags=[[2, 2]], hares=[[4, 0], [0, 4]])
    s = act(env, DOWN, RIGHT, LEFT)  # two hunters catch the stag, the third a hare
    assert s.extras["goal_event"].tolist() == [[STAG, STAG, HARE]]
    assert s.reward.tolist() == [[11.0, 11.0, 11.0]], "shared reward: the team's, goal only for the catchers"
    s = act(env, STAY, STAY, STAY)
    assert s.extras["goal_event"].tolist() == [[-1, -1, -1]], "nothing caught, nobody moved onto anybody"
    place(env, hunters=[[1, 1], [2, 1], [4, 4]], stags=[[0, 4]], hares=[[0, 0], [3, 3]])
    s = act(env, DOWN, STAY, STAY)  # hunter 0 walks onto hunter 1: it reached a hunter, hunter 1 did nothing
    assert s.extras["goal_event"].tolist() == [[HUNTER, -1, -1]]
    place(env, hunters=[[1, 2], [0, 0], [4, 4]], stags=[[2, 2]], hares=[[0, 4], [3, 3]])
    s = act(env, DOWN, STAY, STAY)  # alone on the stag: no catch, no goal
    assert s.extras["goal_event"].tolist() == [[-1, -1, -1]]


def test_goal_event_matches_captures_on_random_play():
    env = StagHuntVecEnv(64, stag_min_hunters=1, episode_length=10)
    steps = run_random(env, 10, seed=1)
    events = torch.stack([s.extras["goal_event"] for s in steps[1:]])  # [T, E, H]
    last = steps[-1]
    assert last.episode_done.all()
    # with one hunter per catch, each capture has >= 1 event; two hunters on one prey share it
    assert ((events == STAG).sum((0, 2)) >= last.extras["stag_captures"]).all()
    assert ((events == HARE).sum((0, 2)) >= last.extras["hare_captures"]).all()
    assert torch.equal((events == STAG).any(-1).sum(0), last.extras["stag_captures"]), "one stag: a step per capture"
    assert int(last.extras["hare_captures"].sum()) > 20 and int(last.extras["stag_captures"].sum()) > 5


def test_parallel_env_and_adapter_carry_goal_events():
    env = StagHuntParallelEnv()
    obs, infos = env.reset(seed=0)
    assert env.goal_names == ["stag", "hare", "hunter"] and infos["hunter_0"] == {"goal_event": -1}
    place(env.vec, hunters=[[1, 2], [2, 1]], stags=[[2, 2]], hares=[[0, 0], [2, 0]])
    _, _, _, _, infos = env.step({"hunter_0": DOWN, "hunter_1": LEFT})
    assert infos["hunter_0"]["goal_event"] == -1 and infos["hunter_1"]["goal_event"] == HARE
    vec = make_env("pettingzoo:hypermappo.envs.staghunt:StagHuntParallelEnv", 3, stag_min_hunters=1)
    s = vec.reset(seed=0)
    assert vec.spec.goal_names == ["stag", "hare", "hunter"] and s.extras["goal_event"].tolist() == [[-1, -1]] * 3
    singles = [StagHuntVecEnv(1, stag_min_hunters=1) for _ in range(3)]
    for i, single in enumerate(singles):
        single.reset(seed=i)
    g = torch.Generator().manual_seed(0)
    fired = 0
    for _ in range(24):
        actions = random_actions(vec, s, g)
        s = vec.step(actions)
        expected = torch.cat([single.step(actions[i:i + 1]).extras["goal_event"] for i, single in enumerate(singles)])
        assert torch.equal(s.extras["goal_event"], expected)
        fired += int((expected >= 0).sum())
    assert fired > 0


# ------------------------------------------------------------------ snowdrift payoffs
B, C = 10.0, 6.0  # stag_reward (benefit to everyone) and stag_cost (split among the catchers)


def snowdrift(**kwargs) -> StagHuntVecEnv:
    env = StagHuntVecEnv(1, payoff="snowdrift", **kwargs)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [2, 1]], stags=[[2, 2]], hares=[[0, 0], [4, 4]])
    return env


def test_snowdrift_payoffs_follow_t_r_s_p():
    assert snowdrift().spec.team_reward is False
    both = act(snowdrift(), DOWN, RIGHT).reward.tolist()[0]  # R, R
    alone = act(snowdrift(), DOWN, STAY).reward.tolist()[0]  # S, T
    nobody = act(snowdrift(), STAY, STAY).reward.tolist()[0]  # P, P
    r, (s, t), p = both[0], alone, nobody[0]
    assert both == [B - C / 2, B - C / 2] and alone == [B - C, B] and nobody == [0.0, 0.0]
    assert t > r > s > p, "the snowdrift ordering"


def test_snowdrift_cost_is_shared_by_all_catchers_and_hares_pay_their_catcher():
    env = StagHuntVecEnv(1, payoff="snowdrift", n_hunters=4, stag_cost=9.0)
    env.reset(seed=0)
    place(env, hunters=[[1, 2], [2, 1], [3, 2], [0, 1]], stags=[[2, 2]], hares=[[0, 0], [4, 4]])
    s = act(env, DOWN, RIGHT, UP, LEFT)
    assert s.reward.tolist() == [[B - 3.0, B - 3.0, B - 3.0, B + 1.0]]
    assert s.extras["goal_event"].tolist() == [[STAG, STAG, STAG, HARE]]


@pytest.mark.parametrize("kwargs, words", [
    ({"payoff": "chicken"}, "payoff='chicken' is invalid"),
    ({"payoff": "snowdrift", "stag_cost": 12.0}, "breaks the snowdrift ordering"),
    ({"payoff": "snowdrift", "stag_cost": 0.0}, "breaks the snowdrift ordering"),
    ({"payoff": "snowdrift", "shared_reward": True}, "snowdrift rewards are individual"),
    ({"stag_cost": 3.0}, "stag_cost=3.0 only applies to payoff='snowdrift'"),
])
def test_bad_payoff_kwargs_raise_user_error(kwargs, words):
    with pytest.raises(UserError, match=words):
        make_env("staghunt", 2, **kwargs)
