"""Game symmetries (envs/symmetry.py): what an env declares is true of the env, and the co-player model's
training samples are seen in them."""

from __future__ import annotations

import pytest
import torch

from hypermappo.envs.registry import make_env
from hypermappo.envs.symmetry import augment
from hypermappo.policies.scripted import SCRIPTED, ScriptedContext

STAGHUNT = [dict(observation="partial", view_radius=4),  # the egocentric presets: a window that covers the grid
            dict(observation="partial", view_radius=2, grid_size=7),  # a window smaller than the grid
            dict(observation="full", respawn=False, n_hares=3),  # prey that stay caught: absent coordinates
            dict(observation="full", grid_size=8, n_hunters=4, n_stags=2, n_hares=3)]  # HOP's size: a scale of 1/7


def _played(env, steps: int, seed: int):
    """The env after `steps` random moves (varied positions, some prey caught)."""
    g = torch.Generator().manual_seed(seed)
    s = env.reset(seed=seed)
    for _ in range(steps):
        s = env.step(torch.randint(0, 5, (env.num_envs, env.spec.num_agents), generator=g))
    return s


def _reflect(positions: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    out = positions.clone()
    out[..., axis] = size - 1 - out[..., axis]
    return out


@pytest.mark.parametrize("kwargs", STAGHUNT)
def test_staghunt_symmetries_are_the_observations_of_the_reflected_grid(kwargs):
    env = make_env("staghunt", 16, "cpu", **kwargs)
    _played(env, 7, seed=3)
    obs, _ = env._observe()
    assert [s.name for s in env.spec.symmetries] == ["flip_rows", "flip_cols"]
    hunters, prey = env.hunters.clone(), env.prey.clone()
    if kwargs.get("respawn") is False:
        assert not bool(env.prey_alive.all())  # the case it is there for: absent prey
    for axis, sym in enumerate(env.spec.symmetries):
        env.hunters, env.prey = _reflect(hunters, axis, env.size), _reflect(prey, axis, env.size)
        reflected, _ = env._observe()
        torch.testing.assert_close(sym.obs(obs), reflected, rtol=0, atol=1e-6)
        assert not torch.equal(sym.obs(obs), obs)  # it moved something
        env.hunters, env.prey = hunters, prey


def test_coin_game_symmetries_are_the_observations_of_the_reflected_grid():
    env = make_env("coingame", 16, "cpu", grid_size=4, n_coins=2)
    _played(env, 5, seed=1)
    obs, _ = env._observe()
    players, coins = env.players.clone(), env.coins.clone()
    for axis, sym in enumerate(env.spec.symmetries):
        env.players, env.coins = _reflect(players, axis, env.size), _reflect(coins, axis, env.size)
        reflected, _ = env._observe()
        torch.testing.assert_close(sym.obs(obs), reflected, rtol=0, atol=0)
        env.players, env.coins = players, coins


@pytest.mark.parametrize("env_name,rules,kwargs", [
    ("staghunt", ["staghunt_hare", "staghunt_stag", "staghunt_follow"], dict(grid_size=7, n_hares=4)),
    ("coingame", ["coin_cooperative", "coin_selfish"], dict(grid_size=5, n_coins=3)),
])
def test_scripted_rules_move_alike_in_the_reflected_grid(env_name, rules, kwargs):
    """The action tables: a rule's move in the reflected world is its move mapped by the symmetry (ties between
    equal gaps included: rows first either way)."""
    env = make_env(env_name, 64, "cpu", **kwargs)
    step = _played(env, 4, seed=5)
    pos = {"staghunt": ("hunters", "prey"), "coingame": ("players", "coins")}[env_name]
    saved = [getattr(env, name).clone() for name in pos]
    for rule in rules:
        act = SCRIPTED[rule](step, ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0)))
        for axis, sym in enumerate(env.spec.symmetries):
            for name, value in zip(pos, saved):
                setattr(env, name, _reflect(value, axis, env.size))
            moved = SCRIPTED[rule](step, ScriptedContext(env, torch.tensor([0, 1]), torch.Generator().manual_seed(0)))
            table = torch.tensor(sym.actions)
            assert torch.equal(moved, table[act]), (rule, sym.name)
            assert bool((table[act] != act).any())  # some move was one the table changes
            for name, value in zip(pos, saved):
                setattr(env, name, value)


def test_augment_draws_each_symmetry_per_sample_and_maps_actions_alike():
    env = make_env("staghunt", 1, "cpu", observation="partial", view_radius=4)
    syms = env.spec.symmetries
    obs = torch.rand(4000, env.spec.obs_dim)
    action = torch.randint(0, 5, (4000,))
    prev = torch.randint(0, 6, (4000,))  # 5: no previous action, which no table maps
    out, acts = augment(syms, obs, {"action": action, "prev": prev}, torch.Generator().manual_seed(0))
    rows, cols = syms[0], syms[1]
    candidates = {"id": (obs, lambda a: a), "rows": (rows.obs(obs), lambda a: torch.tensor(rows.actions + (5,))[a]),
                  "cols": (cols.obs(obs), lambda a: torch.tensor(cols.actions + (5,))[a]),
                  "both": (cols.obs(rows.obs(obs)),
                           lambda a: torch.tensor(cols.actions + (5,))[torch.tensor(rows.actions + (5,))[a]])}
    seen = {}
    for name, (o, f) in candidates.items():
        match = (out == o).all(-1) & (acts["action"] == f(action)) & (acts["prev"] == f(prev))
        seen[name] = match
    which = torch.stack(list(seen.values()), -1)
    assert bool(which.any(-1).all())  # every sample is one element of the group, its moves mapped with it
    share = torch.stack([seen[k] & ~torch.stack([seen[j] for j in seen if j < k] or [torch.zeros_like(seen[k])]
                                                 ).any(0) for k in sorted(seen)]).float().mean(-1)
    assert bool((share > 0.2).all()), share  # each of the four drawn about a quarter of the time
    again, _ = augment(syms, obs, {"action": action}, torch.Generator().manual_seed(0))
    assert torch.equal(again, out)  # drawn from the generator only


@pytest.mark.parametrize("mode", ["all", "rules"])
def test_the_goal_model_trains_on_its_replay_in_the_game_symmetries(mode):
    """coplayer.symmetries: each Adam step's mini-batch holds the replay's samples in a random reflection (obs and
    moves alike, drawn from the model's seeded generator), with `rules` only the samples a scripted rule made
    (`known`); with it off, the replay's samples as stored."""
    from hypermappo.algos.coplayer_bayes import BayesCoplayer
    from hypermappo.config import build_config

    def model(setting: str):
        cfg = build_config("staghunt/egocentric", ["coplayer.enabled=true", f"coplayer.symmetries={setting}",
                                                  "coplayer.steps=3", "num_envs=4"])
        env = make_env(cfg.env, 64, "cpu", **cfg.env_kwargs)
        _played(env, 3, seed=2)
        m = BayesCoplayer(cfg, env.spec, [0], 4, torch.device("cpu"), seed=0)
        n = 128
        m.replay["obs"][:n] = env._observe()[0].flatten(0, 1).half()
        m.replay["action"][:n] = torch.arange(n) % 5
        m.replay["prev"][:n] = torch.arange(n) % 6  # 5: none seen yet
        m.replay["known"][:n] = torch.arange(n) % 3 > 0  # two in three a rule's, the others a learner's
        m.replay_fill = n
        return m, env.spec.symmetries

    plain, syms = model("off")
    on, _ = model(mode)
    a, b = plain.replay_batches(100), on.replay_batches(100)
    assert a["obs"].dtype == b["obs"].dtype == torch.float16 and a["obs"].shape == (3, 100, plain.D)
    rows, cols = syms
    x = a["obs"].float()

    def mapped(table, v):
        return torch.tensor(table + (5,))[v]

    images = [(x, a["action"], a["prev"]),
              (rows.obs(x), mapped(rows.actions, a["action"]), mapped(rows.actions, a["prev"])),
              (cols.obs(x), mapped(cols.actions, a["action"]), mapped(cols.actions, a["prev"])),
              (cols.obs(rows.obs(x)), mapped(rows.actions, mapped(cols.actions, a["action"])),
               mapped(rows.actions, mapped(cols.actions, a["prev"])))]
    match = torch.stack([(b["obs"].float() == o.half().float()).all(-1) & (b["action"] == act) & (b["prev"] == prev)
                         for o, act, prev in images])  # [4, steps, B]
    assert bool(match.any(0).all())  # the same draws, each sample in one element of the group
    reflected = ~match[0]
    assert bool((reflected & a["known"]).any())  # some of the rules' samples reflected
    if mode == "rules":  # a learner's samples never
        assert not bool((reflected & ~a["known"]).any())
    else:
        assert bool((reflected & ~a["known"]).any())
    for k in ("target", "goal", "known"):
        assert torch.equal(a[k], b[k])


def test_a_run_directory_that_saved_symmetries_as_a_bool_still_loads(tmp_path):
    """An earlier version's `coplayer.symmetries: true / false` (every sample reflected or none) reads as all / off,
    so its run directories still resume and evaluate; a bool typed on the command line is still an error."""
    from hypermappo.config import apply_override, build_config
    from hypermappo.errors import UserError

    for old, now in ((True, "all"), (False, "off")):
        cfg = build_config("staghunt/egocentric", base={"coplayer": {"enabled": True, "symmetries": old}})
        assert cfg.coplayer.symmetries == now
    with pytest.raises(UserError, match="coplayer.symmetries"):
        apply_override(build_config("staghunt/egocentric"), "coplayer.symmetries=true")
