"""Mutations of OMG's subgoal model (models/coplayer_subgoal.py, algos/coplayer_subgoal.py)."""

ALGO = "src/hypermappo/algos/coplayer_subgoal.py"
MODEL = "src/hypermappo/models/coplayer_subgoal.py"
T = "tests/test_coplayer_subgoal.py"
SELECT = f"{T}::test_the_subgoal_is_the_most_or_least_valued_of_the_next_h_states_in_the_same_episode"
HIT = f"{T}::test_a_hit_names_a_state_the_coplayer_goes_to_rather_than_one_it_is_or_was_in"
LEARNS = f"{T}::test_the_cvae_learns_the_subgoal_its_history_reveals_and_hits_far_above_chance"


def mutations(M):
    return [
        M("subgoal_select_swapped", ALGO, 'sign = 1.0 if mode == "optimistic" else -1.0',
          'sign = -1.0 if mode == "optimistic" else 1.0', (SELECT,),
          "optimistic picks the least valued state"),
        M("subgoal_values_ignored", ALGO, "v[:T - h] = sign * values[h:]", "v[:T - h] = 0.0 * values[h:]", (SELECT,),
          "the subgoal is always the next state, whatever the learner's values"),
        M("subgoal_window_crosses_episodes", ALGO, "ok[:T - h] = (ends[h:T] - ends[:T - h]) == 0", "ok[:T - h] = True",
          (SELECT, HIT), "a co-player's subgoal taken from the next episode"),
        M("subgoal_target_now", ALGO, "idx = (torch.arange(T, device=values.device).unsqueeze(1) + offset)",
          "idx = (torch.arange(T, device=values.device).unsqueeze(1) + 0 * offset)", (SELECT, LEARNS),
          "the subgoal is the co-player's current state"),
        M("subgoal_hit_without_rivals", ALGO, "    return ahead < rival  # no rival left",
          "    return ahead.isfinite()  # no rival left", (HIT,),
          "every prediction with a future counts as a hit"),
        M("subgoal_hit_stays_are_rivals", ALGO, "keep = ok.view(T, -1, 1, 1) & ~again.unsqueeze(2)",
          "keep = ok.view(T, -1, 1, 1)", (HIT,),
          "a state the co-player stays in counts against predicting that it stays"),
        M("subgoal_hit_past_crosses_episodes", ALGO, "ok[h:] = (ends[h:T] - ends[:T - h]) == 0",
          "ok[h:] = True", (HIT,), "the last episode's states are rivals"),
        M("subgoal_prior_never_frozen", ALGO, "training_prior = self.prior_updates_done < c.prior_updates",
          "training_prior = True",
          (f"{T}::test_the_state_vae_pretrains_on_the_first_rollouts_then_stays_frozen_while_the_cvae_trains",),
          "the prior keeps moving under the CVAE"),
        M("subgoal_generator_not_restored", ALGO,
          '        restore(self.generator, sd["generator"], "co-player subgoal")\n', "",
          (f"{T}::test_resume_of_a_fed_subgoal_run_equals_the_uninterrupted_run",),
          "a resumed run draws other CVAE noise"),
        M("subgoal_features_logvar", MODEL, "return self.posterior(memory)[0].flatten(-2)",
          "return self.posterior(memory)[1].flatten(-2)",
          (f"{T}::test_the_policy_reads_every_slots_inferred_subgoal_and_only_the_learners_own_observations",),
          "the policy reads the posterior's spread, not the subgoal"),
        M("coplayer_nonfinite_step_unchecked", "src/hypermappo/algos/coplayer.py",
          '            raise NonFiniteError(f"non-finite co-player {bad} in {where}")', "            pass",
          (f"{T}::test_a_non_finite_subgoal_loss_stops_the_update_with_one_line_naming_it",),
          "a NaN co-player loss goes on training silently"),
        M("subgoal_kl_wrong", MODEL, "(logvar_q.exp() + (mu_q - mu_p).pow(2)) / logvar_p.exp()",
          "(logvar_q.exp() + (mu_q - mu_p).pow(2)) * logvar_p.exp()", (f"{T}::test_kl_of_two_gaussians_is_torchs",),
          "KL divides by the prior's variance"),
    ]
