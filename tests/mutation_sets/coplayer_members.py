"""Mutations of the Bayesian co-player model's member heads (coplayer.member_heads)."""

ALGO = "src/hypermappo/algos/coplayer_bayes.py"
T = "tests/test_coplayer_members.py"
HAND = f"{T}::test_the_belief_over_read_outs_and_goals_equals_a_hand_computed_bayes_update_and_sums_to_goals"
LEARNS = f"{T}::test_member_heads_learn_each_members_own_way_and_the_belief_names_the_member"
RESUME = f"{T}::test_member_heads_resume_exactly"


def mutations(M):
    return [
        M("members_loss_dropped", ALGO, "nll = nll + torch.where(member > 0, own, 0.0)", "nll = nll", (LEARNS,),
          "no member read-out is trained"),
        M("members_goal_marginal_free_only", ALGO,
          "named = log_b[..., :-1].unflatten(-1, (1 + self.M, self.G - 1)).logsumexp(-2)",
          "named = log_b[..., :-1].unflatten(-1, (1 + self.M, self.G - 1))[..., 0, :]", (HAND,),
          "the goal posterior reads the member-free read-out's hypotheses only"),
        M("members_prior_uniform_over_hypotheses", ALGO,
          "torch.full(((1 + self.M) * (self.G - 1),), 1.0 / (self.G * (1 + self.M)))",
          "torch.full(((1 + self.M) * (self.G - 1),), 1.0 / self.H)", (HAND,),
          "a fresh belief favours the named goals over 'other' by the number of read-outs"),
        M("members_labels_from_zero", ALGO, "offset = 1  # member heads", "offset = 0  # member heads", (RESUME,),
          "the first member's moves train the member-free read-out, the last member's none"),
        M("members_rows_model_other", ALGO, "for g in range(self.G - 1)],",
          "for g in range(1, self.G)],", (HAND,),
          "the belief reads the wrong rows of the model's output"),
    ]
