"""MADDPG (algos/maddpg.py, storage/replay.py, the experiment's off-policy branch)."""

T = "tests/test_maddpg.py"
ALGO = "src/hypermappo/algos/maddpg.py"
REPLAY = "src/hypermappo/storage/replay.py"


def mutations(M):
    return [
        M("maddpg_gumbel_not_straight_through", ALGO, "    return y_hard + (y_soft - y_soft.detach())\n",
          "    return y_soft\n", (f"{T}::test_straight_through_gumbel_softmax_is_one_hot_forward_with_softmax_gradients",),
          "soft sample sent where a one-hot is expected"),
        M("maddpg_gumbel_hard_no_gradient", ALGO, "    return y_hard + (y_soft - y_soft.detach())\n",
          "    return y_hard\n", (f"{T}::test_straight_through_gumbel_softmax_is_one_hot_forward_with_softmax_gradients",),
          "straight-through estimator dropped: actors get no gradient"),
        M("maddpg_polyak_swapped", ALGO, "    torch._foreach_mul_(t, 1.0 - tau)\n", "    torch._foreach_mul_(t, tau)\n",
          (f"{T}::test_polyak_update_is_exact",), "tau and 1 - tau confused"),
        M("replay_no_wraparound", REPLAY, "        self.pos = (self.pos + E) % self.capacity\n",
          "        self.pos = min(self.pos + E, self.capacity - E)\n",
          (f"{T}::test_replay_respects_capacity_and_wraps_around",), "ring buffer overwrites the newest rows"),
        M("replay_samples_unfilled_rows", REPLAY, "torch.randint(0, self.size, (batch_size,)",
          "torch.randint(0, self.capacity, (batch_size,)", (f"{T}::test_replay_respects_capacity_and_wraps_around",),
          "uniform over capacity instead of the filled part"),
        M("maddpg_dead_agents_regularised", ALGO, "c.logit_reg * masked_mean(reg, active)", "c.logit_reg * reg.mean()",
          (f"{T}::test_dead_agent_transitions_produce_no_actor_gradient",),
          "dead agents' logits in the actor loss's regulariser"),
        M("maddpg_truncation_next_obs_reset", "src/hypermappo/experiment.py",
          "next_obs=g.take(torch.where(ended[:, None, None], final_obs, nxt.obs)),", "next_obs=g.take(nxt.obs),",
          (f"{T}::test_time_limit_is_not_terminal_and_the_next_observation_is_the_final_one",),
          "bootstraps from the next episode's first observation"),
        M("maddpg_replay_not_checkpointed", "src/hypermappo/experiment.py",
          "            self.buffer.load_state_dict(sd[\"replay\"])\n", "            pass\n",
          (f"{T}::test_resumed_maddpg_run_equals_the_uninterrupted_one",), "resume starts with an empty replay buffer"),
        M("maddpg_gradient_steps_not_restored", ALGO, "        self.gradient_steps = sd[\"gradient_steps\"]\n",
          "        pass\n", (f"{T}::test_resumed_maddpg_run_equals_the_uninterrupted_one",),
          "resume redoes the gradient steps already done"),
        M("maddpg_truncation_terminal", "src/hypermappo/experiment.py",
          "terminal=g.take(nxt.done) & ~survives_limit,", "terminal=g.take(nxt.done),",
          (f"{T}::test_time_limit_is_not_terminal_and_the_next_observation_is_the_final_one",),
          "time limit treated as a real end (no bootstrap)"),
    ]
