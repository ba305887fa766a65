"""Sync-free collection (runtime/sync_free.py, runtime/nonfinite_watch.py, storage/episode_log.py)."""

T = "tests/test_sync_free.py::"


def mutations(M):
    return [
        M("episode_log_not_copied", "src/hypermappo/storage/episode_log.py",
          "self.returns.append(returns.clone())", "self.returns.append(returns)",
          (T + "test_episode_log_selects_what_the_per_step_bookkeeping_selected",),
          "an env that updates its return tensor in place overwrites the logged steps"),
        M("watch_last_bad_step", "src/hypermappo/runtime/nonfinite_watch.py",
          "for (t, name, shape), (count, first, value) in zip(entries, torch.cat(rows).tolist()):",
          "for (t, name, shape), (count, first, value) in reversed(list(zip(entries, torch.cat(rows).tolist()))):",
          (T + "test_nonfinite_watch_finds_the_first_bad_element_of_the_first_bad_step",),
          "the last non-finite step is named instead of the first"),
        M("watch_not_raised", "src/hypermappo/experiment.py",
          "        if self.watch is not None:\n            self._raise_watched(None)\n", "",
          (T + "test_a_nonfinite_reward_found_at_the_rollouts_end_is_named_as_the_per_step_check_names_it",),
          "sync-free collection records the checks and never reads them: a NaN trains on"),
        M("watch_after_later_error", "src/hypermappo/experiment.py",
          "            if self.watch is not None:\n                self._raise_watched(e)\n            raise",
          "            raise",
          (T + "test_a_nonfinite_reward_found_at_the_rollouts_end_is_named_as_the_per_step_check_names_it",),
          "an error the NaN caused later in the rollout is reported instead of the NaN"),
        M("bootstrap_branch_syncs", "src/hypermappo/experiment.py",
          "                truncated = bootstrap and nxt.final_obs is not None",
          "                truncated = bootstrap and bool(nxt.truncated.any())",
          (T + "test_no_device_value_is_read_during_the_rollouts_steps[staghunt/default]",),
          "the truncation branch reads the device every step"),
        M("bootstrap_unmasked", "src/hypermappo/experiment.py",
          "reward = torch.where(alive > 0, bootstrapped, reward) if self.watch is not None else bootstrapped",
          "reward = reward + L.cfg.ppo.gamma * L.algo.value_norm.denormalize(v_final)",
          (T + "test_sync_free_run_equals_the_per_step_run",),
          "every step bootstrapped from the next observation's value, truncated or not"),
        M("respawn_all_envs", "src/hypermappo/envs/mpe_torch.py",
          "self._pos.copy_(torch.where(ended, pos, self._pos))", "self._pos.copy_(pos)",
          (T + "test_masked_auto_reset_restarts_exactly_the_ended_envs",),
          "every env restarts when one ends"),
        M("staghunt_reset_syncs", "src/hypermappo/envs/staghunt.py",
          "if self.sync_free or bool(ended.any()):", "if bool(ended.any()):",
          (T + "test_no_device_value_is_read_during_the_rollouts_steps[staghunt/default]",),
          "the stag hunt's auto-reset branches on the device's values"),
    ]
