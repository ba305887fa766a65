"""Env-specific scripted policies do what their names say, on hand-built states, batched over envs and slots."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from hypermappo.envs.coingame import CoinGameVecEnv
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


def test_a_prey_rule_without_that_prey_in_the_game_stays_and_has_no_goal():
    """HOP's snowdrift has no hares: the hare rule stays (and writes no goal) instead of failing."""
    env = StagHuntVecEnv(3, n_hunters=4, grid_size=8, n_stags=6, n_hares=0, payoff="snowdrift")
    step = env.reset(seed=0)
    ctx = ScriptedContext(env, torch.tensor([1, 2, 3]), torch.Generator().manual_seed(0), {})
    assert (get_scripted("staghunt_hare")(step, ctx) == STAY).all() and (ctx.goal == -1).all()
    assert act("staghunt_stag", env, step, [1, 2, 3]).shape == (3, 3)


def test_a_grid_rules_path_changes_its_moves_not_its_goal():
    """Hunter 0 at (0, 0), its nearest hare at (2, 3): larger gap first -> right; rows first -> down; columns first
    -> right. Hunter 1 at (4, 0), its nearest hare at (4, 2) in the same row: every path goes right."""
    env, step = staghunt([[[0, 0], [4, 0]]], [[[4, 4], [2, 3], [4, 2]]])
    moves = {}
    for path in ("larger", "rows", "cols"):
        ctx = ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0), {"path": path})
        moves[path] = get_scripted("staghunt_hare")(step, ctx).tolist()
        assert ctx.goal.tolist() == [[1, 1]]  # hare, whatever the path
    assert moves == {"larger": [[RIGHT, RIGHT]], "rows": [[DOWN, RIGHT]], "cols": [[RIGHT, RIGHT]]}
    ctx = ScriptedContext(env, torch.tensor([0]), torch.Generator(), {"path": "diagonal"})
    with pytest.raises(UserError, match=r"'staghunt_hare': params path='diagonal' is invalid; expected one of"):
        get_scripted("staghunt_hare")(step, ctx)


def test_path_any_takes_either_shortest_move_at_random_and_only_shortest_ones():
    """path=any: with both gaps open, down or right about half the time each, drawn from the seeded generator
    (the same seed, the same moves); with one gap closed, only the move that closes the other; the goal unchanged."""
    E = 400
    env, step = staghunt([[[0, 0], [4, 0]]] * E, [[[4, 4], [2, 3], [4, 2]]] * E)
    moves = act("staghunt_hare", env, step, [0, 1], seed=3, path="any")
    share_down = (moves[:, 0] == DOWN).float().mean().item()
    assert set(moves[:, 0].tolist()) == {DOWN, RIGHT} and 0.4 < share_down < 0.6
    assert (moves[:, 1] == RIGHT).all()  # same row as its hare: the only shortest move
    assert torch.equal(moves, act("staghunt_hare", env, step, [0, 1], seed=3, path="any"))
    assert not torch.equal(moves, act("staghunt_hare", env, step, [0, 1], seed=4, path="any"))
    ctx = ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0), {"path": "any"})
    get_scripted("staghunt_hare")(step, ctx)
    assert (ctx.goal == 1).all()


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


# ---------------------------------------------------------------- goal labels of scripted partners
def rollout_goals(env, rules: dict[str, list[int]], steps: int, seed: int = 0):
    """Play rule -> slots for `steps` steps; yields (the goal each slot's rule wrote [E, N], the env's state before
    the step, the step after)."""
    step = env.reset(seed=seed)
    contexts = {name: ScriptedContext(env, torch.tensor(slots), torch.Generator().manual_seed(seed))
                for name, slots in rules.items()}
    for _ in range(steps):
        actions = torch.zeros(env.num_envs, env.spec.num_agents, dtype=torch.long)
        goals = torch.full_like(actions, -2)
        for name, ctx in contexts.items():
            actions[:, ctx.slots] = get_scripted(name)(step, ctx)
            goals[:, ctx.slots] = ctx.goal
        before = env.get_state()
        step = env.step(actions)
        yield goals, before, step


def manhattan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [E, H, 2], b [E, P, 2] -> [E, H, P] grid distances."""
    return (a.unsqueeze(2) - b.unsqueeze(1)).abs().sum(-1)


@pytest.mark.parametrize("rules", [{"staghunt_stag": [0, 1]}, {"staghunt_hare": [0, 1]},
                                   {"staghunt_stag": [0], "staghunt_hare": [1]}])
def test_staghunt_goal_labels_of_scripted_partners_equal_their_targets(rules):
    """The goal a scripted hunter writes is the prey kind it walks to: every step it gets one cell nearer to the
    nearest prey of that kind (or stays on it), and it completes goals of that kind."""
    env = StagHuntVecEnv(64, episode_length=100)
    kind = torch.where(torch.arange(env.n_prey) < env.n_stags, 0, 1)  # [P] goal index of each prey slot
    completed = torch.zeros(2, dtype=torch.long)  # [slot]: goals completed of the kind it went for
    for goals, before, step in rollout_goals(env, rules, 40):
        assert (goals >= 0).all(), "prey always respawns, so there is always a target"
        wrong_kind = kind != goals.unsqueeze(-1)  # [E, H, P]: prey of another kind than the hunter's goal
        old = manhattan(before["hunters"], before["prey"]).masked_fill(wrong_kind, 10**6).amin(-1)  # [E, H]
        new = manhattan(env.hunters, before["prey"]).masked_fill(wrong_kind, 10**6).amin(-1)  # [E, H]
        assert torch.equal(new, (old - 1).clamp(min=0)), "each hunter walks to a prey of its goal's kind"
        completed += (step.extras["goal_event"] == goals).sum(0)
    if "staghunt_hare" in rules:
        assert (completed[rules["staghunt_hare"]] > 20).all()
    if rules.get("staghunt_stag") == [0, 1]:
        assert (completed > 10).all(), "two stag hunters catch stags together"


def test_staghunt_follow_targets_a_hunter_and_a_gone_prey_writes_no_goal():
    env, step = staghunt([[[0, 0], [4, 4]]], [[[2, 2], [0, 4], [4, 0]]], alive=[[False, True, True]])
    ctx = ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0))
    get_scripted("staghunt_stag")(step, ctx)
    assert ctx.goal.tolist() == [[-1, -1]], "no stag left: no target"
    get_scripted("staghunt_hare")(step, ctx)
    assert ctx.goal.tolist() == [[1, 1]]
    get_scripted("staghunt_follow")(step, ctx)
    assert ctx.goal.tolist() == [[2, 2]], "the follower's target is a hunter (goal 'hunter')"
    get_scripted("random")(step, ctx)
    assert ctx.goal.tolist() == [[-1, -1]], "random play pursues no goal"


def test_eps_noisy_variant_replaces_a_fraction_of_moves_and_keeps_the_goal():
    env = StagHuntVecEnv(2000)
    step = env.reset(seed=0)
    slots = torch.tensor([0, 1])
    clean = get_scripted("staghunt_hare")(step, ScriptedContext(env, slots, torch.Generator().manual_seed(0)))
    ctx = ScriptedContext(env, slots, torch.Generator().manual_seed(0), {"eps": 0.3})
    noisy = get_scripted("staghunt_hare")(step, ctx)
    changed = float((noisy != clean).float().mean())
    assert 0.3 * 0.8 - 0.03 < changed < 0.3 * 0.8 + 0.03, changed  # a random move equals the rule's 1 time in 5
    assert (ctx.goal == 1).all(), "the noisy hare hunter still hunts hares"
    with pytest.raises(UserError, match=r"params eps=1.5 is invalid; expected a probability in \[0, 1\]"):
        get_scripted("staghunt_hare")(step, ScriptedContext(env, slots, torch.Generator(), {"eps": 1.5}))


def coins(players, coin_pos, colours) -> tuple[CoinGameVecEnv, object]:
    players, coin_pos = torch.tensor(players), torch.tensor(coin_pos)
    env = CoinGameVecEnv(players.shape[0], grid_size=5, n_coins=coin_pos.shape[1])
    step = env.reset(seed=0)
    env.players, env.coins, env.coin_colour = players, coin_pos, torch.tensor(colours)
    return env, step


def test_coin_rules_walk_to_their_coins_and_write_the_goal():
    # env 0: red (slot 0) at (0,0); a red coin at (0,3), a blue coin at (1,0); blue (slot 1) at (4,4)
    env, step = coins([[[0, 0], [4, 4]]], [[[0, 3], [1, 0]]], [[0, 1]])
    ctx = ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0))
    assert get_scripted("coin_cooperative")(step, ctx).tolist() == [[RIGHT, LEFT]]  # own coins only
    assert ctx.goal.tolist() == [[0, 0]]
    assert get_scripted("coin_selfish")(step, ctx).tolist() == [[DOWN, UP]]  # nearest: blue (1,0), red (0,3)
    assert ctx.goal.tolist() == [[1, 1]]
    # only a blue coin: the cooperative red player stays, still pursuing its own coins (waiting for one); the
    # selfish one goes for it
    env, step = coins([[[0, 0], [4, 4]]], [[[2, 0]]], [[1]])
    ctx = ScriptedContext(env, torch.tensor([0]), torch.Generator().manual_seed(0))
    assert get_scripted("coin_cooperative")(step, ctx).tolist() == [[STAY]] and ctx.goal.tolist() == [[0]]
    assert get_scripted("coin_selfish")(step, ctx).tolist() == [[DOWN]] and ctx.goal.tolist() == [[1]]


@pytest.mark.parametrize("rules, other_share", [({"coin_cooperative": [0, 1]}, (0.0, 0.0)),
                                                ({"coin_selfish": [0, 1]}, (0.3, 0.7)),
                                                ({"coin_cooperative": [0], "coin_selfish": [1]}, (0.0, 1.0))])
def test_coin_goal_labels_of_scripted_partners_equal_their_targets(rules, other_share):
    env = CoinGameVecEnv(64)
    completed = torch.zeros(2)
    other = torch.zeros(2)
    for goals, _, step in rollout_goals(env, rules, 40):
        event = step.extras["goal_event"]
        fired = event >= 0
        assert torch.equal(event[fired], goals[fired]), "the coin a rule picks is the kind it was going for"
        completed += fired.sum(0)
        other += (event == 1).sum(0)
    assert (completed > 100).all()
    low, high = other_share
    share = other / completed
    assert (share >= low).all() and (share <= high).all(), share
    if "coin_cooperative" in rules:
        assert (other[rules["coin_cooperative"]] == 0).all(), "cooperative players never take the other's coin"


def test_coin_rules_refuse_other_envs():
    env = StagHuntVecEnv(1)
    with pytest.raises(UserError, match=r"^scripted policy 'coin_selfish' plays the coin game"):
        act("coin_selfish", env, env.reset(seed=0), [0])


@pytest.mark.parametrize("name", ["coin_cooperative", "coin_selfish", "staghunt_stag"])
def test_dead_slots_take_the_noop_and_have_no_goal(name):
    env, step = (coins([[[0, 0], [4, 4]]], [[[2, 2]]], [[1]]) if name.startswith("coin")
                 else staghunt([[[0, 0], [4, 4]]], [[[2, 2], [0, 4], [4, 0]]]))
    dead = dataclasses.replace(step, active=torch.tensor([[False, True]]))
    ctx = ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0))
    out = get_scripted(name)(dead, ctx)
    assert out[0, 0] == 0 and ctx.goal[0, 0] == -1 and ctx.goal[0, 1] >= 0
