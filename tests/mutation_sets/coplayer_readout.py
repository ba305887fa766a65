"""The goal read-out (coplayer.goal_readout=state): goal predictions b(g) q(g | o_i, j, a_prev), q trained on the goal
labels (models/coplayer_goal.py, algos/coplayer_bayes.py, adaptation.py)."""

T = "tests/test_coplayer_bayes.py::"
READOUT = T + "test_with_the_goal_read_out_the_goal_predictions_are_the_belief_times_q_and_the_moves_are_unchanged"


def mutations(M):
    return [
        M("readout_not_applied", "src/hypermappo/algos/coplayer_bayes.py",
          "now = current_goal(goal_log_b[:, self.seat_k, self.seat], self.model.goal_log_q(hidden))",
          "now = goal_log_b[:, self.seat_k, self.seat]",
          (READOUT,), "the goal predictions stay the posterior's: the read-out is trained and never read"),
        M("readout_not_normalised", "src/hypermappo/models/coplayer_goal.py",
          "named = (goal_log_b[..., :-1] + log_q[..., :-1]).log_softmax(-1) + ",
          "named = (goal_log_b[..., :-1] + log_q[..., :-1]) + ",
          (T + "test_the_goal_pursued_now_is_the_belief_times_the_state_read_out_by_hand",),
          "the goal predictions are no distribution (they sum to less than 1)"),
        M("readout_over_every_goal", "src/hypermappo/models/coplayer_goal.py",
          "    return torch.cat([named, goal_log_b[..., -1:]], -1)",
          "    return (goal_log_b + log_q).log_softmax(-1)",
          (T + "test_the_goal_pursued_now_is_the_belief_times_the_state_read_out_by_hand",),
          "the read-out reweighs 'other' too: a random mover is called a goal-seeker in states where training "
          "partners pursued one"),
        M("readout_eager_without_correction_unread", "src/hypermappo/algos/coplayer_bayes.py",
          "adjust = self._correct if self.W is not None else (self._keep_hidden if self.readout else None)",
          "adjust = self._correct if self.W is not None else None",
          (READOUT,), "without the online correction the eager belief keeps no hidden layer: no read-out"),
        M("readout_not_trained", "src/hypermappo/algos/coplayer_bayes.py",
          "return (self.c.action_weight * (w * nll).sum() + (w * goal_nll).sum()) / w.sum().clamp(min=1e-8)",
          "return self.c.action_weight * (w * nll).sum() / w.sum().clamp(min=1e-8)",
          (T + "test_the_goal_read_out_is_trained_on_the_goal_labels",),
          "the read-out stays at its random init: its q is noise"),
        M("adapt_scores_the_posterior", "src/hypermappo/adaptation.py",
          "return self.belief.goal_log_b().exp() if probs is None else probs",
          "return self.belief.goal_log_b().exp()",
          ("tests/test_adaptation.py::test_held_out_goal_predictions_are_the_goal_predictions_the_belief_made_"
           "before_the_move",),
          "held-out evaluation scores the posterior, not the goal predictions the run makes"),
    ]
