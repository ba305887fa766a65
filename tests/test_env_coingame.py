"""Tests of the batched coin game, its goal labels and its PettingZoo wrapper (also through the adapter)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from hypermappo.envs.coingame import CoinGameParallelEnv, CoinGameVecEnv
from hypermappo.envs.contract import check_step, random_actions, run_random
from hypermappo.envs.pettingzoo import AdapterVecEnv, ParallelEnvAdapter
from hypermappo.envs.registry import make_env
from hypermappo.errors import UserError

STAY, UP, DOWN, LEFT, RIGHT = range(5)
RED, BLUE = 0, 1


def place(env: CoinGameVecEnv, players, coins, colours):
    """Put one env (E=1) into a chosen position via set_state."""
    state = env.get_state()
    state["players"] = torch.tensor([players])
    state["coins"] = torch.tensor([coins])
    state["coin_colour"] = torch.tensor([colours])
    env.set_state(state)


def act(env, *actions):
    return env.step(torch.tensor([list(actions)]))


def test_contract_with_auto_reset_and_observation_bounds():
    env = make_env("coingame", 4, episode_length=20, n_coins=2, grid_size=4)
    steps = run_random(env, 50, seed=3)
    assert env.spec.goal_names == ["own_coin", "other_coin"] and env.spec.agent_names == ["red", "blue"]
    assert not env.spec.team_reward
    space = env.spec.observation_space
    for s in steps:
        assert (s.obs >= torch.as_tensor(space.low)).all() and (s.obs <= torch.as_tensor(space.high)).all()
        assert s.extras["goal_event"].shape == (4, 2) and s.extras["goal_event"].dtype == torch.long
    ended = [s for s in steps[1:] if s.episode_done.any()]
    assert ended and all((s.episode_length[s.episode_done] == 20).all() for s in ended)
    assert (steps[0].extras["goal_event"] == -1).all(), "no goal is completed at reset"


def test_own_coin_pays_the_picker_and_nobody_loses():
    env = CoinGameVecEnv(1)
    env.reset(seed=0)
    place(env, players=[[0, 0], [2, 2]], coins=[[0, 1]], colours=[RED])
    s = act(env, RIGHT, STAY)
    assert s.reward.tolist() == [[1.0, 0.0]]
    assert s.extras["goal_event"].tolist() == [[0, -1]]
    assert env.coins[0, 0].tolist() not in ([0, 1], [2, 2]), "the coin respawns on a free cell"


def test_other_coin_pays_the_picker_and_costs_its_owner():
    env = CoinGameVecEnv(1, pick_reward=1.0, other_penalty=2.0)
    env.reset(seed=0)
    place(env, players=[[0, 0], [2, 2]], coins=[[0, 1]], colours=[BLUE])
    s = act(env, RIGHT, STAY)
    assert s.reward.tolist() == [[1.0, -2.0]]
    assert s.extras["goal_event"].tolist() == [[1, -1]]


def test_both_players_pick_the_same_coin():
    env = CoinGameVecEnv(1)
    env.reset(seed=0)
    place(env, players=[[0, 1], [1, 0]], coins=[[1, 1]], colours=[RED])
    s = act(env, DOWN, RIGHT)
    assert s.reward.tolist() == [[1.0 - 2.0, 1.0]], "red picks its own coin, blue's pick of it costs red 2"
    assert s.extras["goal_event"].tolist() == [[0, 1]]


def test_goal_event_and_rewards_agree_on_random_play():
    """reward_i = pick_reward * [i picked] - other_penalty * [the other picked i's coin], for every step."""
    env = CoinGameVecEnv(64, grid_size=3, episode_length=10, pick_reward=1.5, other_penalty=3.0)
    steps = run_random(env, 60, seed=1)
    own = other = 0
    for s in steps[1:]:
        ev = s.extras["goal_event"]
        expected = 1.5 * (ev != -1).float() - 3.0 * (ev.flip(-1) == 1).float()
        assert torch.equal(s.reward, expected)
        own += int((ev == 0).sum())
        other += int((ev == 1).sum())
    assert own > 50 and other > 50, "random play picks both kinds of coins"


def test_episode_counters_sum_the_goal_events():
    env = CoinGameVecEnv(8, episode_length=15)
    steps = run_random(env, 15, seed=2)
    events = torch.stack([s.extras["goal_event"] for s in steps[1:]])  # [T, E, 2]
    last = steps[-1]
    assert last.episode_done.all()
    assert torch.equal(last.extras["own_coins"], (events == 0).sum((0, 2)))
    assert torch.equal(last.extras["other_coins"], (events == 1).sum((0, 2)))


def test_observations_are_egocentric_in_colour():
    env = CoinGameVecEnv(1)
    env.reset(seed=0)
    place(env, players=[[0, 0], [2, 2]], coins=[[1, 2]], colours=[RED])
    obs, state = env.observe()
    red, blue = obs[0, 0, :36].view(4, 3, 3), obs[0, 1, :36].view(4, 3, 3)
    assert red[0, 0, 0] == 1 and red[1, 2, 2] == 1 and red[2, 1, 2] == 1 and red[3].sum() == 0
    assert blue[0, 2, 2] == 1 and blue[1, 0, 0] == 1 and blue[3, 1, 2] == 1 and blue[2].sum() == 0
    assert torch.equal(state[0, :36], obs[0, 0, :36]), "the state is red's view"


def test_respawn_lands_on_free_cells_with_both_colours():
    env = CoinGameVecEnv(512)
    env.reset(seed=0)
    state = env.get_state()
    state["players"] = torch.tensor([[0, 0], [0, 2]]).expand(512, 2, 2).clone()
    state["coins"] = torch.tensor([[[0, 1]]]).expand(512, 1, 2).clone()
    env.set_state(state)
    env.step(torch.tensor([[RIGHT, STAY]]).expand(512, 2))
    cells = {tuple(p) for p in env.coins[:, 0].tolist()}
    assert len(cells) == 7 and not cells & {(0, 1), (0, 2)}, "any of the 9 - 2 cells without a player"
    assert 0.4 < env.coin_colour.float().mean().item() < 0.6


def test_batch_equals_separate_envs_with_env_offset():
    kwargs = {"n_coins": 2, "grid_size": 4, "episode_length": 7}
    batched = CoinGameVecEnv(4, **kwargs)
    singles = [CoinGameVecEnv(1, env_offset=i, **kwargs) for i in range(4)]
    s = batched.reset(seed=11)
    for single in singles:
        single.reset(seed=11)
    g = torch.Generator().manual_seed(0)
    for _ in range(30):
        actions = random_actions(batched, s, g)
        s = batched.step(actions)
        ss = [single.step(actions[i:i + 1]) for i, single in enumerate(singles)]
        for name in ("obs", "reward", "state", "final_obs"):
            assert torch.equal(getattr(s, name), torch.cat([getattr(x, name) for x in ss])), name
        assert torch.equal(s.extras["goal_event"], torch.cat([x.extras["goal_event"] for x in ss]))
    assert len({tuple(k) for k in s.state[:, :16].tolist()}) > 1, "envs of a batch must differ"


def test_state_round_trip_continues_identically():
    env = CoinGameVecEnv(6, episode_length=7)
    g = torch.Generator().manual_seed(0)
    s = env.reset(seed=4)
    for _ in range(5):
        s = env.step(random_actions(env, s, g))
    saved = env.get_state()
    actions = [torch.randint(0, 5, (6, 2), generator=g) for _ in range(20)]
    first = [env.step(a) for a in actions]
    other = CoinGameVecEnv(6, episode_length=7)
    other.set_state(saved)
    torch.testing.assert_close(other.observe()[0], s.obs, rtol=0, atol=0)
    for a, b in zip(first, [other.step(a) for a in actions]):
        for name in ("obs", "state", "reward", "done", "episode_return"):
            assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_seeding_is_reproducible():
    def trajectory(seed):
        return torch.stack([s.state for s in run_random(CoinGameVecEnv(8), 30, seed=seed)])

    assert torch.equal(trajectory(1), trajectory(1))
    assert not torch.equal(trajectory(1)[0], trajectory(2)[0])


def test_render_frame_matches_the_state():
    env = CoinGameVecEnv(2, grid_size=4)
    env.reset(seed=0)
    frame = env.render(1)
    assert frame.shape == (4 * 32, 4 * 32, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 5, "background, lines, coin, players, borders"
    s = env.step(torch.zeros(2, 2, dtype=torch.long))
    np.testing.assert_array_equal(env.frame_from_state(s.state[1]), env.render(1))
    with pytest.raises(UserError, match="env_index=2 is out of range"):
        env.render(2)


def test_parallel_api_infos_and_render():
    env = CoinGameParallelEnv(render_mode="rgb_array", episode_length=30)
    parallel_api_test(env, num_cycles=200)
    obs, infos = env.reset(seed=1)
    assert env.goal_names == ["own_coin", "other_coin"]
    assert all(info == {"goal_event": -1} for info in infos.values())
    assert env.render().shape == (96, 96, 3)
    events = []
    for _ in range(30):
        obs, rew, _term, trunc, infos = env.step({a: env.action_space(a).sample() for a in env.agents})
        events += [infos[a]["goal_event"] for a in env.possible_agents]
    assert all(trunc.values()) and env.agents == []
    assert set(infos["red"]) == {"own_coins", "other_coins", "goal_event"}
    assert sum(e == 0 for e in events) == infos["red"]["own_coins"]
    assert sum(e == 1 for e in events) == infos["red"]["other_coins"]


class SparseGoalInfos(CoinGameParallelEnv):
    """Reports goal_event in an agent's info only on the steps it completes a goal (the adapter's "missing")."""

    def _infos(self, extras, ended):
        infos = super()._infos(extras, ended)
        return {a: {k: v for k, v in info.items() if not (k == "goal_event" and v == -1)} for a, info in infos.items()}


@pytest.mark.parametrize("sparse", [False, True])
def test_pettingzoo_adapter_turns_infos_into_goal_event_extras(sparse):
    """The adapter (env i seeded with seed + i) reproduces the torch env's goal events and rewards."""
    if sparse:
        env = AdapterVecEnv(lambda: ParallelEnvAdapter(SparseGoalInfos(episode_length=30)), 2)
    else:
        env = make_env("pettingzoo:hypermappo.envs.coingame:CoinGameParallelEnv", 2, episode_length=30)
    assert env.spec.goal_names == ["own_coin", "other_coin"]
    singles = [CoinGameVecEnv(1, episode_length=30) for _ in range(2)]
    s = env.reset(seed=5)
    for i, single in enumerate(singles):
        single.reset(seed=5 + i)
    assert s.extras["goal_event"].tolist() == [[-1, -1], [-1, -1]]
    g = torch.Generator().manual_seed(0)
    fired = 0
    for _ in range(25):  # within the first episode: the adapter reseeds auto-resets differently
        actions = random_actions(env, s, g)
        s = env.step(actions)
        ss = [single.step(actions[i:i + 1]) for i, single in enumerate(singles)]
        assert torch.equal(s.extras["goal_event"], torch.cat([x.extras["goal_event"] for x in ss]))
        assert torch.equal(s.reward, torch.cat([x.reward for x in ss]))
        fired += int((s.extras["goal_event"] >= 0).sum())
    assert fired > 3, "the comparison should include picks, and steps after them"


@pytest.mark.parametrize("kwargs, words", [
    ({"grid_size": 2, "n_coins": 3}, "n_coins=3 coins do not fit on a 2x2 grid"),
    ({"n_coins": 0}, "coingame: n_coins=0 is invalid"),
    ({"episode_length": 0}, "coingame: episode_length=0"),
    ({"other_penalty": float("nan")}, "coingame: other_penalty=nan"),
    ({"colour": "red"}, "no argument"),
])
def test_bad_kwargs_raise_user_error(kwargs, words):
    with pytest.raises(UserError, match=words):
        make_env("coingame", 2, **kwargs)


def test_contract_checks_goal_events():
    env = CoinGameVecEnv(2)
    s = env.reset(seed=0)
    check_step(env, s)
    for bad in (torch.full((2, 2), 2), torch.full((2, 2), -1, dtype=torch.int32), torch.full((2, 3), -1)):
        s.extras["goal_event"] = bad
        with pytest.raises(AssertionError):
            check_step(env, s)
    del s.extras["goal_event"]
    with pytest.raises(AssertionError, match="puts extras\\['goal_event'\\]"):
        check_step(env, s)


def test_variant_name_is_a_user_error():
    with pytest.raises(UserError, match="coingame takes no variant name"):
        make_env("coingame:big", 2)


def test_evaluation_reports_episode_extras_but_not_per_agent_goal_events():
    """goal_event is [E, N], not an episode statistic: evaluation must skip it (E != N here)."""
    from hypermappo.config import build_config
    from hypermappo.evaluation import play_episodes

    cfg = build_config(None, base={"env": "coingame", "env_kwargs": {"episode_length": 4}})
    result = play_episodes(cfg, 5, lambda env, s: torch.full((5, 2), RIGHT, dtype=torch.long))
    assert "own_coins" in result and "other_coins" in result and "goal_event" not in result
