"""The goal belief's tempered update (coplayer.evidence_weight): b ∝ b_prev * pi^w, from the run's config into the
training and the held-out beliefs."""

T = "tests/test_coplayer_bayes.py::test_a_tempered_belief_takes_each_move_to_the_power_of_the_evidence_weight"
P = "tests/test_coplayer_bayes.py::test_the_evidence_weight_reaches_the_training_and_the_held_out_beliefs"
GOAL = "src/hypermappo/models/coplayer_goal.py"
PASSED = ', c.goal_evidence == "corrected",\n'  # the belief's arguments, then (indented) the evidence weight


def mutations(M):
    return [
        M("evidence_weight_ignored", GOAL,
          "    post = log_belief + (log_lik if weight == 1.0 else weight * log_lik)",
          "    post = log_belief + log_lik",
          (T,), "every move counts in full whatever coplayer.evidence_weight says"),
        M("evidence_weight_on_the_prior", GOAL,
          "    post = log_belief + (log_lik if weight == 1.0 else weight * log_lik)",
          "    post = (log_belief if weight == 1.0 else weight * log_belief) + log_lik",
          (T,), "the belief so far is tempered instead of the new move's likelihood"),
        M("evidence_weight_not_trained_with", "src/hypermappo/algos/coplayer_bayes.py",
          "c.online_lr" + PASSED + " " * 33 + "c.evidence_weight)",
          'c.online_lr, c.goal_evidence == "corrected")',
          (P,), "a training run's belief ignores the config's weight"),
        M("evidence_weight_not_held_out", "src/hypermappo/adaptation.py",
          "c.online_lr" + PASSED + " " * 37 + "c.evidence_weight)",
          'c.online_lr, c.goal_evidence == "corrected")',
          (P,), "`hypermappo adapt` rebuilds the belief with Bayes' rule whatever the run trained with"),
    ]
