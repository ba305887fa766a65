"""Game symmetries (envs/symmetry.py) and the co-player model's training in them (algos/coplayer_bayes.py)."""

T = "tests/test_symmetry.py::"
GRID = T + "test_staghunt_symmetries_are_the_observations_of_the_reflected_grid"
RULES = T + "test_scripted_rules_move_alike_in_the_reflected_grid"
AUGMENT = T + "test_augment_draws_each_symmetry_per_sample_and_maps_actions_alike"
TRAIN = T + "test_the_goal_model_trains_on_its_replay_in_the_game_symmetries"


def mutations(M):
    return [
        M("reflected_moves_wrong_axis", "src/hypermappo/envs/symmetry.py",
          "ROWS_FLIPPED = (0, 2, 1, 3, 4)", "ROWS_FLIPPED = (0, 1, 2, 4, 3)",
          (RULES, TRAIN),
          "reflecting the grid top to bottom swaps left and right instead of up and down"),
        M("coordinates_not_reflected", "src/hypermappo/envs/symmetry.py",
          "    reflected = 1.0 - x\n", "    reflected = x\n",
          (GRID,),
          "the grids are flipped but the own position is left as it was"),
        M("absent_prey_moved", "src/hypermappo/envs/symmetry.py",
          "        reflected = torch.where(obs[..., torch.tensor(present, device=obs.device)] > 0.5, reflected, x)\n",
          "        pass\n",
          (GRID,),
          "a caught prey's (absent, zero) coordinates reflected to 1"),
        M("windows_flipped_on_the_wrong_axis", "src/hypermappo/envs/staghunt.py",
          "partial(flip_planes, start=2 + h + 1, planes=4, height=window, width=window, dim=dim)",
          "partial(flip_planes, start=2 + h + 1, planes=4, height=window, width=window, dim=-1 - (dim == -1))",
          (GRID,),
          "the stag hunt's windows flipped along the other axis than its coordinates"),
        M("previous_move_not_mapped", "src/hypermappo/algos/coplayer_bayes.py",
          '{"action": batches["action"], "prev": batches["prev"]}', '{"action": batches["action"]}',
          (TRAIN,),
          "the co-player's previous move (an input) left unreflected with its observation"),
        M("one_symmetry_for_the_whole_batch", "src/hypermappo/envs/symmetry.py",
          "on = torch.rand(obs.shape[:-1], generator=generator, device=generator.device)",
          "on = torch.rand(obs.shape[:-2] + (1,), generator=generator, device=generator.device).expand(obs.shape[:-1])",
          (AUGMENT,),
          "one draw per mini-batch instead of per sample"),
        M("rules_mode_reflects_learners", "src/hypermappo/algos/coplayer_bayes.py",
          'where=batches["known"] if self.c.symmetries == "rules" else None)', "where=None)",
          (TRAIN,),
          "coplayer.symmetries=rules reflects a frozen learner's moves too (its habits need not be symmetric)"),
        M("replay_not_augmented", "src/hypermappo/algos/coplayer_bayes.py",
          "        if self.symmetries:\n            obs, moves", "        if False:\n            obs, moves",
          (TRAIN,),
          "coplayer.symmetries on, but the goal policies train on the replay as it is"),
    ]
