"""Mutations of the Bayesian co-player model's member heads (coplayer.member_heads)."""

ALGO = "src/hypermappo/algos/coplayer_bayes.py"
T = "tests/test_coplayer_members.py"
HAND = f"{T}::test_the_belief_over_read_outs_and_goals_equals_a_hand_computed_bayes_update_and_sums_to_goals"
LEARNS = f"{T}::test_member_heads_learn_each_members_own_way_and_the_belief_names_the_member"
RESUME = f"{T}::test_member_heads_resume_exactly"
WHOLE = f"{T}::test_a_frozen_member_is_learnt_as_a_whole_and_recognised"
PAIRS = f"{T}::test_every_move_of_a_member_is_a_sample_whatever_its_goal"
ROWS = f"{T}::test_training_reads_its_rows_as_the_whole_output_gives_them"
MODEL = "src/hypermappo/models/coplayer_goal.py"


def mutations(M):
    return [
        M("members_loss_dropped", ALGO,
          "nll = torch.where(labelled, nll + torch.where(member > 0, own, 0.0), 0.0)",
          "nll = torch.where(labelled, nll, 0.0)", (LEARNS,),
          "no member read-out is trained"),
        M("members_goal_marginal_free_only", ALGO,
          "named = torch.cat([per_readout, as_goals], -2).logsumexp(-2)",
          "named = torch.cat([per_readout[..., :1, :], as_goals], -2).logsumexp(-2)", (HAND,),
          "the goal posterior reads the member-free read-out's hypotheses only"),
        M("members_prior_counts_the_goals_not_the_hypotheses", ALGO,
          "self.fresh = torch.full((self.H,), 1.0 / self.H,", "self.fresh = torch.full((self.H,), 1.0 / self.G,",
          (HAND,), "a fresh belief gives every hypothesis a goal's mass: not a distribution with member heads"),
        M("members_labels_from_zero", ALGO, "offset = 1  # member heads", "offset = 0  # member heads", (RESUME,),
          "the first member's moves train the member-free read-out, the last member's none"),
        M("members_rows_model_other", ALGO, "for g in range(self.G - 1)]\n",
          "for g in range(1, self.G)]\n", (HAND,),
          "the belief reads the wrong rows of the model's output"),
        M("members_whole_not_trained", ALGO, "total = self.c.action_weight * ((w * nll).sum() + whole.sum())",
          "total = self.c.action_weight * (w * nll).sum()", (WHOLE,),
          "a frozen member's moves are drawn but its whole row learns nothing"),
        M("members_whole_for_ruled_members_too", ALGO, "return (batch[\"member\"] > 0) & ~batch[\"known\"]",
          "return batch[\"member\"] > 0", (WHOLE,),
          "a scripted member's whole row duplicates its goal rows and takes the goal posterior's mass to 'other'"),
        M("members_unknown_goal_dropped", ALGO,
          "known = label >= 0 if self.member is None else (label >= 0) | (self.member > 0)", "known = label >= 0",
          (PAIRS,), "a frozen learner's moves far from any goal event never reach the replay"),
        M("members_whole_not_a_hypothesis", ALGO, "+ [m * self.G + self.G - 1 for m in range(1, 1 + self.M)]",
          "+ [r * self.G for r in range(1, 1 + self.M)]", (HAND, WHOLE),
          "the belief reads a member's first goal row where its whole row should be"),
        M("members_whole_goal_split_by_the_free_read_out", ALGO, "per_readout[..., 1:, :].log_softmax(-1)",
          "per_readout[..., :1, :].log_softmax(-1)", (HAND,),
          "a member as a whole is given the member-free read-out's goal, not its own"),
        M("members_whole_dropped_from_the_goals", ALGO, "named = torch.cat([per_readout, as_goals], -2).logsumexp(-2)",
          "named = per_readout.logsumexp(-2)", (HAND,),
          "the goal posterior loses a member recognised as a whole: it sums to less than one"),
        M("members_rows_offset_of_the_next_member", MODEL, "mine = offsets.gather(1, (rows - G).clamp(min=0)",
          "mine = offsets.gather(1, rows.clamp(max=offsets.shape[1] - 1)", (ROWS,),
          "training reads a member's read-out one member off (the offsets start at member 1, not 0)"),
        M("members_rows_unfloored", MODEL, "        return self._floored(logits), hidden\n\n    def goal_log_q",
          "        return logits.log_softmax(-1), hidden\n\n    def goal_log_q", (ROWS,),
          "training scores its rows without the uniform floor the belief plays them with"),
        M("members_whole_trained_on_the_goal_row", ALGO, "whole = torch.where(as_whole, nll_rows[:, 2], 0.0)",
          "whole = torch.where(as_whole, nll_rows[:, 1], 0.0)", (WHOLE,),
          "a frozen member's whole row is never trained: its goal row takes its moves instead"),
    ]
